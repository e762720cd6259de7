//! Process syscalls: clone3, prctl, close_range, credentials, pidfds, exec.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{SysError, check, q};

// libc's CLONE_INTO_CGROUP / CLONE_CLEAR_SIGHAND overflow a c_int; define
// the clone3 flags as u64 ourselves.
pub const CLONE_NEWNS: u64 = 0x0002_0000;
pub const CLONE_NEWCGROUP: u64 = 0x0200_0000;
pub const CLONE_NEWUTS: u64 = 0x0400_0000;
pub const CLONE_NEWIPC: u64 = 0x0800_0000;
pub const CLONE_NEWUSER: u64 = 0x1000_0000;
pub const CLONE_NEWPID: u64 = 0x2000_0000;
pub const CLONE_NEWNET: u64 = 0x4000_0000;
pub const CLONE_PIDFD: u64 = 0x0000_1000;
pub const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` (clone3).
#[repr(C)]
#[derive(Default)]
pub(crate) struct CloneArgs {
    pub(crate) flags: u64,
    pub(crate) pidfd: u64,
    pub(crate) child_tid: u64,
    pub(crate) parent_tid: u64,
    pub(crate) exit_signal: u64,
    pub(crate) stack: u64,
    pub(crate) stack_size: u64,
    pub(crate) tls: u64,
    pub(crate) set_tid: u64,
    pub(crate) set_tid_size: u64,
    pub(crate) cgroup: u64,
}

/// What clone3 returned.
pub enum Forked {
    /// In the parent: the child's pid (in the parent's pid namespace) and
    /// its pidfd.
    Parent { pid: libc::pid_t, pidfd: OwnedFd },
    /// In the child.
    Child,
}

/// clone3 without a new stack (fork-like), with CLONE_PIDFD and SIGCHLD as
/// exit signal. `cgroup` joins the child to that cgroup directory fd.
///
/// # Safety
/// The caller must be single-threaded (the child gets a copy of only the
/// calling thread, so locks held by other threads would stay locked).
pub unsafe fn clone3(flags: u64, cgroup: Option<RawFd>) -> Result<Forked, SysError> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: flags | CLONE_PIDFD | cgroup.map_or(0, |_| CLONE_INTO_CGROUP),
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.map_or(0, |f| f as u64),
        ..Default::default()
    };
    // SAFETY: args is a valid clone_args of the size passed; no stack is
    // given, so the child continues on a copy of ours like fork(2).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    let r = check(r, || format!("clone3(flags={:#x})", args.flags))?;
    if r == 0 {
        Ok(Forked::Child)
    } else {
        // SAFETY: CLONE_PIDFD stored a new fd owned by us.
        Ok(Forked::Parent {
            pid: r as libc::pid_t,
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
        })
    }
}

/// Run `child` in a new process that shares this one's memory until it
/// calls `execve` or exits: clone(CLONE_VM | CLONE_VFORK), as
/// posix_spawn(3) does. No page table is copied and no page is faulted in
/// a second time, which a fork of hutch's address space costs on every
/// spawn. The caller is suspended until the child has exec'd or exited;
/// the child has its own fd table, fs context, signal handlers and
/// credentials, so it may change those freely.
///
/// # Safety
/// - The caller must be single-threaded.
/// - `child` must never return (it cannot: `Infallible`) or unwind: it
///   ends in `execve` or `_exit`.
/// - `child` runs on a separate stack but over the caller's heap: it must
///   not free or mutate anything the caller still uses afterwards (taking
///   `&` to the caller's data and allocating its own is fine; allocator
///   state stays consistent because the caller is suspended meanwhile).
pub unsafe fn spawn_vfork(
    child: &mut dyn FnMut() -> std::convert::Infallible,
) -> Result<libc::pid_t, SysError> {
    // Enough for the workload's setup (Landlock, seccomp, an error
    // message), plus a guard page below it.
    const STACK: usize = 256 * 1024;
    let page = 4096;
    // SAFETY: a fresh anonymous private mapping; checked below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK + page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(SysError::last("mmap(child stack)"));
    }
    // SAFETY: the lowest page of the mapping just made; a stack overflow
    // then faults instead of running into other memory.
    unsafe { libc::mprotect(base, page, libc::PROT_NONE) };

    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut &mut dyn FnMut` passed to clone below,
        // alive because the parent is suspended until exec or exit.
        let f = unsafe { &mut *(arg as *mut &mut dyn FnMut() -> std::convert::Infallible) };
        // The closure cannot return (`Infallible`): the int is never produced.
        #[allow(unreachable_code)]
        match f() {}
    }
    let mut f: &mut dyn FnMut() -> std::convert::Infallible = child;
    // SAFETY: the stack pointer is the top of a mapping this process owns
    // and unmaps only after the child has exec'd or exited (CLONE_VFORK);
    // the callback contract is the caller's (see above).
    let r = unsafe {
        libc::clone(
            trampoline,
            (base as *mut u8).add(STACK + page) as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &mut f as *mut &mut dyn FnMut() -> std::convert::Infallible as *mut libc::c_void,
        )
    };
    let result = check(r as libc::c_long, || "clone(CLONE_VM|CLONE_VFORK)".into());
    // SAFETY: the child no longer runs on this stack (it exec'd or exited).
    unsafe { libc::munmap(base, STACK + page) };
    result.map(|pid| pid as libc::pid_t)
}

fn prctl(option: libc::c_int, arg: libc::c_ulong, name: &str) -> Result<(), SysError> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(option, arg, 0, 0, 0) };
    check(r as libc::c_long, || format!("prctl({name}, {arg})")).map(drop)
}

pub fn set_no_new_privs() -> Result<(), SysError> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
}

pub fn set_pdeathsig(sig: libc::c_int) -> Result<(), SysError> {
    prctl(
        libc::PR_SET_PDEATHSIG,
        sig as libc::c_ulong,
        "PR_SET_PDEATHSIG",
    )
}

pub fn set_dumpable(on: bool) -> Result<(), SysError> {
    prctl(
        libc::PR_SET_DUMPABLE,
        on as libc::c_ulong,
        "PR_SET_DUMPABLE",
    )
}

pub fn set_child_subreaper() -> Result<(), SysError> {
    prctl(libc::PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")
}

pub const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// close_range(2) from `first` to the highest fd.
pub fn close_range(first: libc::c_uint, flags: libc::c_uint) -> Result<(), SysError> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, flags) };
    check(r, || format!("close_range({first}, ~0, {flags:#x})")).map(drop)
}

pub fn setresuid(uid: u32) -> Result<(), SysError> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::setresuid(uid, uid, uid) };
    check(r as libc::c_long, || {
        format!("setresuid({uid}, {uid}, {uid})")
    })
    .map(drop)
}

pub fn setresgid(gid: u32) -> Result<(), SysError> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::setresgid(gid, gid, gid) };
    check(r as libc::c_long, || {
        format!("setresgid({gid}, {gid}, {gid})")
    })
    .map(drop)
}

/// setgroups(0, NULL).
pub fn clear_groups() -> Result<(), SysError> {
    // SAFETY: an empty list.
    let r = unsafe { libc::setgroups(0, std::ptr::null()) };
    check(r as libc::c_long, || "setgroups(0, NULL)".into()).map(drop)
}

pub fn sethostname(name: &str) -> Result<(), SysError> {
    // SAFETY: pointer and length of a valid byte string.
    let r = unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
    check(r as libc::c_long, || format!("sethostname({name:?})")).map(drop)
}

pub fn setsid() -> Result<(), SysError> {
    // SAFETY: no arguments.
    let r = unsafe { libc::setsid() };
    check(r as libc::c_long, || "setsid()".into()).map(drop)
}

pub fn chdir(path: &CStr) -> Result<(), SysError> {
    // SAFETY: path is a valid C string.
    let r = unsafe { libc::chdir(path.as_ptr()) };
    check(r as libc::c_long, || format!("chdir({})", q(path))).map(drop)
}

pub fn fchdir(fd: BorrowedFd<'_>) -> Result<(), SysError> {
    // SAFETY: fd is a valid open fd.
    let r = unsafe { libc::fchdir(fd.as_raw_fd()) };
    check(r as libc::c_long, || {
        format!("fchdir(fd {})", fd.as_raw_fd())
    })
    .map(drop)
}

/// execve(2); returns only on failure.
pub fn execve(path: &CStr, argv: &[*const libc::c_char], envp: &[*const libc::c_char]) -> SysError {
    // SAFETY: argv and envp are NULL-terminated arrays of C strings that
    // outlive the call (the caller builds them before fork).
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    SysError::last(format!("execve({})", q(path)))
}

/// pidfd_send_signal(2).
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> Result<(), SysError> {
    // SAFETY: integer arguments and a null siginfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    check(r, || {
        format!("pidfd_send_signal(fd {}, {sig})", pidfd.as_raw_fd())
    })
    .map(drop)
}

/// kill(2).
pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> Result<(), SysError> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::kill(pid, sig) };
    check(r as libc::c_long, || format!("kill({pid}, {sig})")).map(drop)
}

/// Raw wait status of a reaped child.
pub fn waitpid(
    pid: libc::pid_t,
    flags: libc::c_int,
) -> Result<Option<(libc::pid_t, libc::c_int)>, SysError> {
    let mut status = 0;
    // SAFETY: status is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, flags) };
    match check(r as libc::c_long, || format!("waitpid({pid}, {flags:#x})"))? {
        0 => Ok(None),
        p => Ok(Some((p as libc::pid_t, status))),
    }
}

/// write(2) all of `buf` to a raw fd, retrying on EINTR.
pub fn write_all(fd: RawFd, mut buf: &[u8]) -> Result<(), SysError> {
    while !buf.is_empty() {
        // SAFETY: buf is valid for buf.len() bytes.
        let r = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if r < 0 {
            if nix::errno::Errno::last() == nix::errno::Errno::EINTR {
                continue;
            }
            return Err(SysError::last(format!("write(fd {fd})")));
        }
        buf = &buf[r as usize..];
    }
    Ok(())
}

/// _exit(2): leave without running atexit handlers or flushing stdio, as a
/// forked child must.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no process state we share.
    unsafe { libc::_exit(code) }
}

/// setrlimit(2) with soft = hard = `value`.
pub fn setrlimit(resource: libc::c_int, value: u64) -> Result<(), SysError> {
    let lim = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: lim is a valid rlimit.
    let r = unsafe { libc::setrlimit(resource as libc::__rlimit_resource_t, &lim) };
    check(r as libc::c_long, || {
        format!("setrlimit({resource}, {value})")
    })
    .map(drop)
}

/// Every signal back to its default disposition and an empty mask, as a
/// freshly exec'd program expects (Rust ignores SIGPIPE, for one).
/// `non_default` holds the signals (bit N-1 for signal N) whose disposition
/// may not be SIG_DFL ([`super::SelfStatus::non_default_signals`]); the
/// others already are, and are left alone.
pub fn reset_signals(non_default: u64) {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP || non_default & (1u64 << (sig - 1)) == 0 {
            continue;
        }
        // SAFETY: SIG_DFL is always a valid disposition; errors (reserved
        // signals) are harmless.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: an empty set, no old-set out-pointer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// dup2(2) (a no-op when `from == to`, after clearing close-on-exec).
pub fn dup2(from: RawFd, to: RawFd) -> Result<(), SysError> {
    if from == to {
        // SAFETY: integer arguments only.
        let r = unsafe { libc::fcntl(from, libc::F_SETFD, 0) };
        return check(r as libc::c_long, || format!("fcntl({from}, F_SETFD, 0)")).map(drop);
    }
    // SAFETY: integer arguments only.
    let r = unsafe { libc::dup2(from, to) };
    check(r as libc::c_long, || format!("dup2({from}, {to})")).map(drop)
}

/// Close every fd except those listed.
pub fn close_all_except(keep: &[RawFd]) {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|f| *f >= 0).collect();
    keep.sort_unstable();
    let mut first: libc::c_uint = 0;
    for k in keep {
        let k = k as libc::c_uint;
        if k > first {
            // SAFETY: closing a range of fds this process no longer needs.
            unsafe { libc::syscall(libc::SYS_close_range, first, k - 1, 0) };
        }
        first = k + 1;
    }
    // SAFETY: as above, up to the highest fd.
    unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) };
}

/// Whether fd is a terminal.
pub fn isatty(fd: RawFd) -> bool {
    // SAFETY: integer argument only.
    unsafe { libc::isatty(fd) == 1 }
}

/// A user namespace whose maps are `uid_map`/`gid_map`, held by an fd; the
/// short-lived process that created it is gone when this returns. Used for
/// idmapped mounts. Single-threaded callers only.
pub fn userns_with_maps(uid_map: &str, gid_map: &str) -> Result<OwnedFd, SysError> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SysError::new("pipe2(O_CLOEXEC)", e))?;
    // SAFETY: documented single-threaded contract of this function.
    match unsafe { clone3(CLONE_NEWUSER, None) }? {
        Forked::Child => {
            drop(w);
            let mut b = [0u8; 1];
            // Blocks until the parent is done with our namespace.
            // SAFETY: b is a valid 1-byte buffer.
            unsafe { libc::read(r.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
            exit_now(0)
        }
        Forked::Parent { pid, pidfd: _pidfd } => {
            drop(r);
            let result = (|| {
                let proc = format!("/proc/{pid}");
                std::fs::write(format!("{proc}/uid_map"), uid_map)
                    .map_err(|e| io_err(format!("write({proc}/uid_map)"), e))?;
                std::fs::write(format!("{proc}/setgroups"), "deny")
                    .map_err(|e| io_err(format!("write({proc}/setgroups)"), e))?;
                std::fs::write(format!("{proc}/gid_map"), gid_map)
                    .map_err(|e| io_err(format!("write({proc}/gid_map)"), e))?;
                std::fs::File::open(format!("{proc}/ns/user"))
                    .map(OwnedFd::from)
                    .map_err(|e| io_err(format!("open({proc}/ns/user)"), e))
            })();
            drop(w);
            let _ = waitpid(pid, 0);
            result
        }
    }
}

/// A SysError from a std::io::Error of the named call.
pub fn io_err(call: String, e: std::io::Error) -> SysError {
    SysError::new(
        call,
        nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
    )
}

/// Fill `buf` from the kernel's random pool.
pub fn getrandom(buf: &mut [u8]) -> Result<(), SysError> {
    // SAFETY: buf is valid for buf.len() bytes.
    let r = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if r as usize != buf.len() {
        return Err(SysError::last("getrandom()"));
    }
    Ok(())
}

/// Take ownership of an inherited fd number, if it is open.
pub fn adopt_inherited_fd(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: fcntl on an integer.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: the fd is open and, by the caller's protocol, owned by no one else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Make `cmd` start with each given fd at the given number (e.g. 3, 4).
pub fn command_with_fds(
    cmd: &mut std::process::Command,
    fds: Vec<(OwnedFd, RawFd)>,
) -> Result<(), SysError> {
    // Move sources above the targets first so no dup2 clobbers another source.
    let mut moved = Vec::with_capacity(fds.len());
    for (fd, target) in fds {
        // SAFETY: fcntl on an fd we own.
        let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 64) };
        check(high as libc::c_long, || {
            format!("fcntl({}, F_DUPFD_CLOEXEC, 64)", fd.as_raw_fd())
        })?;
        // SAFETY: F_DUPFD_CLOEXEC returned a new fd we own.
        moved.push((unsafe { OwnedFd::from_raw_fd(high) }, target));
    }
    let raw: Vec<(RawFd, RawFd)> = moved.iter().map(|(f, t)| (f.as_raw_fd(), *t)).collect();
    // SAFETY: the closure only calls dup2, which is async-signal-safe; the
    // fds stay open in the parent until after spawn (moved into the closure).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            let _keep = &moved;
            for (from, to) in &raw {
                if libc::dup2(*from, *to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(())
}

/// Whether a path exists (access(F_OK), following symlinks).
pub fn exists(path: &std::ffi::CStr) -> bool {
    // SAFETY: path is a valid C string.
    unsafe { libc::access(path.as_ptr(), libc::F_OK) == 0 }
}
