//! Syscalls for kernel feature probes (`hutch check`).
//!
//! Probes run in a forked child that tries the feature and exits. The
//! caller may be multi-threaded (the test harness, a tokio app), so after
//! fork only async-signal-safe work is allowed: every wrapper here is a
//! bare syscall returning the raw [`Errno`]; none allocates or formats.
//! The parent turns the result into words.

use super::mount::MountAttr;
use super::process::CloneArgs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::{SysError, check};
use nix::errno::Errno;

/// What a probe step returned: a value, or the step that failed and its errno.
pub type StepResult = Result<i64, (u32, Errno)>;

/// How a probe child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildOutcome {
    /// The child reported a result.
    Done(StepResult),
    /// The child died without reporting (raw wait status).
    Died(libc::c_int),
    /// The child did not report within the time limit and was killed.
    TimedOut,
}

/// Run `f` in a forked child and bring back its result.
///
/// `f` must be async-signal-safe: only the raw wrappers of this module, no
/// allocation, no locks (another thread of the parent may have held them
/// at fork time). A child that hangs anyway is killed after `limit`. The
/// child dies with the parent (PR_SET_PDEATHSIG) and is always reaped.
pub fn in_child<F: FnOnce() -> StepResult>(
    f: F,
    limit: Duration,
) -> Result<ChildOutcome, SysError> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: fds is a valid out-array of two ints.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    check(r as libc::c_long, || "pipe2(O_CLOEXEC)".into())?;
    // SAFETY: pipe2 returned two new fds that we now own.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the child runs only `f` (async-signal-safe by contract) and
    // raw syscalls, then _exit()s without unwinding or running destructors.
    let pid = unsafe { libc::fork() };
    check(pid as libc::c_long, || "fork()".into())?;
    if pid == 0 {
        // SAFETY: integer prctl arguments only.
        unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            )
        };
        // A panic must not unwind into the parent's code path in the child.
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or(Err((u32::MAX, Errno::EFAULT)));
        let msg = encode(res);
        // SAFETY: msg is a valid buffer of its length; wr is open.
        unsafe { libc::write(wr.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
        // SAFETY: leave without unwinding or running atexit handlers.
        unsafe { libc::_exit(0) };
    }
    drop(wr);
    let outcome = read_outcome(rd.as_raw_fd(), limit);
    if outcome.is_none() {
        // SAFETY: pid is our own unreaped child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let status = wait_child(pid);
    Ok(match outcome {
        Some(res) => ChildOutcome::Done(res),
        None if status == Some(-1) => ChildOutcome::TimedOut,
        None => ChildOutcome::Died(status.unwrap_or(0)),
    })
}

const MSG_LEN: usize = 16;

fn encode(res: StepResult) -> [u8; MSG_LEN] {
    let (tag, a, b): (u32, u32, i64) = match res {
        Ok(v) => (0, 0, v),
        Err((step, errno)) => (1, step, errno as i64),
    };
    let mut m = [0u8; MSG_LEN];
    m[..4].copy_from_slice(&tag.to_ne_bytes());
    m[4..8].copy_from_slice(&a.to_ne_bytes());
    m[8..].copy_from_slice(&b.to_ne_bytes());
    m
}

fn decode(m: &[u8; MSG_LEN]) -> StepResult {
    let word = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&m[r]);
        u32::from_ne_bytes(b)
    };
    let mut v = [0u8; 8];
    v.copy_from_slice(&m[8..]);
    let v = i64::from_ne_bytes(v);
    if word(0..4) == 0 {
        Ok(v)
    } else {
        Err((word(4..8), Errno::from_raw(v as i32)))
    }
}

/// Read one message within `limit`; None on timeout or EOF.
fn read_outcome(fd: RawFd, limit: Duration) -> Option<StepResult> {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; MSG_LEN];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, left.as_millis().max(1) as libc::c_int) };
        if r < 0 && Errno::last() == Errno::EINTR {
            continue;
        }
        if r <= 0 {
            return None;
        }
        // SAFETY: buf is valid for MSG_LEN bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), MSG_LEN) };
        if n < 0 && Errno::last() == Errno::EINTR {
            continue;
        }
        return (n == MSG_LEN as isize).then(|| decode(&buf));
    }
}

/// Reap `pid`; Some(status), or Some(-1) when it was killed by our SIGKILL.
fn wait_child(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer; pid is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r == pid {
            if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL {
                return Some(-1);
            }
            return Some(status);
        }
        if r < 0 && Errno::last() == Errno::EINTR {
            continue;
        }
        return None;
    }
}

/// Tag a raw return value with the step number for [`StepResult`].
fn step(ret: libc::c_long, n: u32) -> StepResult {
    if ret < 0 {
        Err((n, Errno::last()))
    } else {
        Ok(ret)
    }
}

/// A NUL-terminated path or string built without allocating.
pub type CBuf = [u8; 256];

/// Copy `parts` into a NUL-terminated buffer (truncated to fit).
pub fn cbuf(parts: &[&[u8]]) -> CBuf {
    let mut b = [0u8; 256];
    let mut i = 0;
    for p in parts {
        for &c in *p {
            if i < b.len() - 1 {
                b[i] = c;
                i += 1;
            }
        }
    }
    b
}

/// Decimal digits of `n` without allocating.
pub fn decimal(n: u32, out: &mut [u8; 10]) -> &[u8] {
    let mut i = out.len();
    let mut n = n;
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &out[i..];
        }
    }
}

fn ptr(s: &[u8]) -> *const libc::c_char {
    s.as_ptr().cast()
}

/// unshare(2).
pub fn unshare(flags: libc::c_int, n: u32) -> StepResult {
    // SAFETY: integer argument only.
    step(unsafe { libc::unshare(flags) } as libc::c_long, n)
}

/// Write `data` to the file at NUL-terminated `path` (e.g. /proc/self/uid_map).
pub fn write_file(path: &[u8], data: &[u8], n: u32) -> StepResult {
    // SAFETY: path is NUL-terminated (callers pass c"" literals or cbuf()).
    let fd = unsafe { libc::open(ptr(path), libc::O_WRONLY | libc::O_CLOEXEC) };
    step(fd as libc::c_long, n)?;
    // SAFETY: data is valid for its length; fd is open.
    let w = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let res = step(w as libc::c_long, n);
    // SAFETY: fd was opened above.
    unsafe { libc::close(fd) };
    res
}

/// Open a NUL-terminated path read-only; returns the raw fd.
pub fn open_path(path: &[u8], flags: libc::c_int, n: u32) -> StepResult {
    // SAFETY: path is NUL-terminated.
    step(
        unsafe { libc::open(ptr(path), flags | libc::O_CLOEXEC) } as libc::c_long,
        n,
    )
}

/// close(2) of a raw fd from a step.
pub fn close(fd: i64) {
    // SAFETY: closing an fd this probe opened.
    unsafe { libc::close(fd as RawFd) };
}

/// mount(2) with NUL-terminated arguments (empty = NULL).
pub fn mount(
    src: &[u8],
    target: &[u8],
    fstype: &[u8],
    flags: libc::c_ulong,
    data: &[u8],
    n: u32,
) -> StepResult {
    let opt = |s: &[u8]| {
        if s.is_empty() {
            std::ptr::null()
        } else {
            ptr(s)
        }
    };
    // SAFETY: each pointer is NULL or a NUL-terminated string.
    let r = unsafe { libc::mount(opt(src), ptr(target), opt(fstype), flags, opt(data).cast()) };
    step(r as libc::c_long, n)
}

/// umount2(2).
pub fn umount2(target: &[u8], flags: libc::c_int, n: u32) -> StepResult {
    // SAFETY: target is NUL-terminated.
    step(
        unsafe { libc::umount2(ptr(target), flags) } as libc::c_long,
        n,
    )
}

/// mkdir(2).
pub fn mkdir(path: &[u8], n: u32) -> StepResult {
    // SAFETY: path is NUL-terminated.
    step(unsafe { libc::mkdir(ptr(path), 0o755) } as libc::c_long, n)
}

/// chdir(2).
pub fn chdir(path: &[u8], n: u32) -> StepResult {
    // SAFETY: path is NUL-terminated.
    step(unsafe { libc::chdir(ptr(path)) } as libc::c_long, n)
}

/// pivot_root(2).
pub fn pivot_root(new_root: &[u8], put_old: &[u8], n: u32) -> StepResult {
    // SAFETY: both paths are NUL-terminated.
    step(
        unsafe { libc::syscall(libc::SYS_pivot_root, ptr(new_root), ptr(put_old)) },
        n,
    )
}

/// sethostname(2).
pub fn sethostname(name: &[u8], n: u32) -> StepResult {
    // SAFETY: pointer and length of a byte string.
    step(
        unsafe { libc::sethostname(ptr(name), name.len()) } as libc::c_long,
        n,
    )
}

/// getpid(2).
pub fn getpid() -> i64 {
    // SAFETY: no arguments.
    unsafe { libc::getpid() as i64 }
}

/// fork(2) from a probe child (single-threaded there) and wait: `f` runs
/// in the grandchild. Ok(()) from `f` comes back as Ok(0); Err((_, errno))
/// comes back as Err((n, errno)) (the grandchild's step number is lost, so
/// `f` should be a single step).
pub fn fork_wait(f: impl FnOnce() -> StepResult, n: u32) -> StepResult {
    // SAFETY: the probe child is single-threaded; the grandchild only runs
    // raw syscalls and _exit()s.
    let pid = unsafe { libc::fork() };
    step(pid as libc::c_long, n)?;
    if pid == 0 {
        let code = match f() {
            Ok(_) => 0,
            Err((_, errno)) => (1 + errno as libc::c_int).min(255),
        };
        // SAFETY: leave at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: pid is our child; status is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    step(r as libc::c_long, n)?;
    if !libc::WIFEXITED(status) {
        return Err((n, Errno::ECHILD));
    }
    match libc::WEXITSTATUS(status) {
        0 => Ok(0),
        code => Err((n, Errno::from_raw(code - 1))),
    }
}

/// Fork a child that unshares a user namespace and then blocks until the
/// returned pipe end is closed. Returns (child pid, write end of the pipe).
/// The caller writes its maps, uses /proc/PID/ns/user, closes the fd and
/// reaps the pid with [`reap`].
pub fn fork_userns_holder(n: u32) -> Result<(libc::pid_t, RawFd), (u32, Errno)> {
    let mut ready = [-1 as RawFd; 2];
    let mut hold = [-1 as RawFd; 2];
    // SAFETY: valid out-arrays of two ints.
    step(
        unsafe { libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) } as libc::c_long,
        n,
    )?;
    // SAFETY: as above.
    step(
        unsafe { libc::pipe2(hold.as_mut_ptr(), libc::O_CLOEXEC) } as libc::c_long,
        n,
    )?;
    // SAFETY: single-threaded probe child; the grandchild runs raw syscalls only.
    let pid = unsafe { libc::fork() };
    step(pid as libc::c_long, n)?;
    let mut byte = [0u8; 1];
    if pid == 0 {
        // SAFETY: raw syscalls on our own fds, then _exit.
        unsafe {
            libc::close(hold[1]);
            // 0 for success, else the errno (all errnos fit in a byte).
            byte[0] = if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                0
            } else {
                Errno::last() as u8
            };
            libc::write(ready[1], byte.as_ptr().cast(), 1);
            libc::read(hold[0], byte.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copies of the child's ends; reading one byte.
    let got = unsafe {
        libc::close(hold[0]);
        libc::close(ready[1]);
        let r = libc::read(ready[0], byte.as_mut_ptr().cast(), 1);
        libc::close(ready[0]);
        r
    };
    if got != 1 || byte[0] != 0 {
        close(hold[1] as i64);
        reap(pid);
        let errno = if got == 1 {
            Errno::from_raw(byte[0] as i32)
        } else {
            Errno::ECHILD
        };
        return Err((n, errno));
    }
    Ok((pid, hold[1]))
}

/// waitpid(2) for a child of a probe, ignoring its status.
pub fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: pid is our child; status is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// fsopen(2).
pub fn fsopen(fstype: &[u8], n: u32) -> StepResult {
    // SAFETY: fstype is NUL-terminated.
    step(
        unsafe { libc::syscall(libc::SYS_fsopen, ptr(fstype), libc::FSOPEN_CLOEXEC) },
        n,
    )
}

/// fsconfig(fd, FSCONFIG_SET_STRING, key, value).
pub fn fsconfig_string(fd: i64, key: &[u8], value: &[u8], n: u32) -> StepResult {
    // SAFETY: key and value are NUL-terminated.
    step(
        unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fd,
                FSCONFIG_SET_STRING,
                ptr(key),
                ptr(value),
                0,
            )
        },
        n,
    )
}

/// fsconfig(fd, FSCONFIG_CMD_CREATE).
pub fn fsconfig_create(fd: i64, n: u32) -> StepResult {
    // SAFETY: integer arguments and null pointers.
    step(
        unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fd,
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_void>(),
                0,
            )
        },
        n,
    )
}

/// fsmount(2).
pub fn fsmount(fd: i64, n: u32) -> StepResult {
    // SAFETY: integer arguments only.
    step(
        unsafe { libc::syscall(libc::SYS_fsmount, fd, libc::FSMOUNT_CLOEXEC, 0) },
        n,
    )
}

/// move_mount(fd, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH).
pub fn move_mount(fd: i64, to: &[u8], n: u32) -> StepResult {
    // SAFETY: "" and `to` are NUL-terminated.
    step(
        unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                fd,
                c"".as_ptr(),
                libc::AT_FDCWD,
                ptr(to),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        },
        n,
    )
}

/// open_tree(AT_FDCWD, path, OPEN_TREE_CLONE): a detached copy of a mount.
pub fn open_tree_clone(path: &[u8], n: u32) -> StepResult {
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    // SAFETY: path is NUL-terminated.
    step(
        unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, ptr(path), flags) },
        n,
    )
}

/// mount_setattr(fd, "", AT_EMPTY_PATH, {set, userns_fd}).
pub fn mount_setattr(fd: i64, set: u64, userns_fd: i64, n: u32) -> StepResult {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns_fd.max(0) as u64,
    };
    // SAFETY: attr is a valid mount_attr of the size passed.
    step(
        unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                fd,
                c"".as_ptr(),
                libc::AT_EMPTY_PATH,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        },
        n,
    )
}

/// prctl(PR_SET_NO_NEW_PRIVS, 1).
pub fn no_new_privs(n: u32) -> StepResult {
    // SAFETY: integer arguments only.
    step(
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } as libc::c_long,
        n,
    )
}

const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
/// Return a listener fd for SECCOMP_RET_USER_NOTIF.
pub const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_uint = 1 << 3;

/// Install a one-instruction filter returning `action` for every syscall;
/// returns the listener fd with SECCOMP_FILTER_FLAG_NEW_LISTENER, else 0.
pub fn seccomp_filter_all(action: u32, flags: libc::c_uint, n: u32) -> StepResult {
    let insn = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: action,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: insn.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prog points at a valid one-instruction program for the call.
    step(
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_SET_MODE_FILTER,
                flags,
                &prog as *const libc::sock_fprog,
            )
        },
        n,
    )
}

/// seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action): Ok when supported.
/// Has no side effects, so the parent may call it directly.
pub fn seccomp_action_avail(action: u32) -> Result<(), Errno> {
    // SAFETY: action is a valid u32 for the call's duration.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    if r < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// prctl(PR_GET_SECCOMP) of this process (0 none, 1 strict, 2 filter).
pub fn seccomp_mode() -> Result<i32, Errno> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if r < 0 { Err(Errno::last()) } else { Ok(r) }
}

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// landlock_create_ruleset(NULL, 0, VERSION): the ABI version. No side
/// effects, so the parent may call it directly.
pub fn landlock_abi() -> Result<i32, Errno> {
    // SAFETY: a NULL attr with size 0 is the documented version query.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as i32)
    }
}

/// Create a ruleset handling `handled_fs` and restrict this process with it
/// (no rules: every handled access is denied). Needs no-new-privs first.
pub fn landlock_restrict(handled_fs: u64, n: u32) -> StepResult {
    let attr: [u64; 1] = [handled_fs];
    // SAFETY: attr is a valid landlock_ruleset_attr (ABI 1 layout) of the size passed.
    let fd = step(
        unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                attr.as_ptr(),
                8usize,
                0u32,
            )
        },
        n,
    )?;
    // SAFETY: fd is the ruleset we just created.
    let r = step(
        unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) },
        n + 1,
    );
    close(fd);
    r
}

/// clone3 with CLONE_PIDFD and no stack; the new child _exit(0)s at once.
/// Reaps it; returns the pidfd number the kernel handed out (closed).
pub fn clone3_pidfd_exit(n: u32) -> StepResult {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: super::CLONE_PIDFD,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    // SAFETY: args is a valid clone_args of the size passed; the child
    // continues on a copy of our stack and only calls _exit.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r == 0 {
        // SAFETY: leave at once.
        unsafe { libc::_exit(0) };
    }
    step(r, n)?;
    reap(r as libc::pid_t);
    if pidfd < 0 {
        return Err((n + 1, Errno::EBADF));
    }
    close(pidfd as i64);
    Ok(pidfd as i64)
}

/// pidfd_open(getpid(), 0); the fd is closed again.
pub fn pidfd_open_self(n: u32) -> StepResult {
    // SAFETY: integer arguments only.
    let fd = step(
        unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) },
        n,
    )?;
    close(fd);
    Ok(fd)
}

/// close_range(first, ~0, flags).
pub fn close_range(first: u32, flags: u32, n: u32) -> StepResult {
    // SAFETY: integer arguments only.
    step(
        unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, flags) },
        n,
    )
}

/// Check an fd is still open (fcntl F_GETFD).
pub fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD on any integer is harmless.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// uname(2) release string.
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain old data; zeroed is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid out-pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Effective uid of this process.
pub fn geteuid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() }
}

/// Effective gid of this process.
pub fn getegid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::getegid() }
}

/// Bring a network interface up (SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP).
pub fn interface_up(name: &[u8], n: u32) -> StepResult {
    // SAFETY: plain socket(2) call.
    let fd = step(
        unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }
            as libc::c_long,
        n,
    )?;
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req
        .ifr_name
        .iter_mut()
        .zip(name.iter().take_while(|&&c| c != 0).take(15))
    {
        *dst = *src as libc::c_char;
    }
    // SAFETY: req is a valid ifreq with a NUL-terminated name.
    let mut r = unsafe { libc::ioctl(fd as RawFd, libc::SIOCGIFFLAGS, &mut req) };
    if r == 0 {
        // SAFETY: ifru_flags was filled by SIOCGIFFLAGS.
        unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        // SAFETY: as above, with the flags updated.
        r = unsafe { libc::ioctl(fd as RawFd, libc::SIOCSIFFLAGS, &req) };
    }
    let res = step(r as libc::c_long, n);
    close(fd);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_survive_the_pipe_encoding() {
        for r in [
            Ok(0),
            Ok(-5),
            Ok(i64::MAX),
            Err((0, Errno::EPERM)),
            Err((17, Errno::ENOSPC)),
        ] {
            assert_eq!(decode(&encode(r)), r);
        }
    }

    #[test]
    fn cbuf_and_decimal_build_nul_terminated_paths() {
        let mut d = [0u8; 10];
        assert_eq!(decimal(0, &mut d), b"0");
        assert_eq!(decimal(4_294_967_295, &mut d), b"4294967295");
        let b = cbuf(&[b"/proc/", decimal(1234, &mut [0u8; 10]), b"/uid_map"]);
        assert_eq!(
            &b[..b.iter().position(|&c| c == 0).unwrap_or(0)],
            b"/proc/1234/uid_map"
        );
        // Too long: truncated but still NUL-terminated.
        let long = [b'a'; 400];
        assert_eq!(cbuf(&[&long]).last(), Some(&0));
    }

    #[test]
    fn child_results_and_failures_come_back() {
        let limit = Duration::from_secs(5);
        assert_eq!(in_child(|| Ok(42), limit), Ok(ChildOutcome::Done(Ok(42))));
        assert_eq!(
            in_child(|| unshare(-1, 3), limit),
            Ok(ChildOutcome::Done(Err((3, Errno::EINVAL))))
        );
        // A child that dies without reporting is not mistaken for success.
        assert!(matches!(
            in_child(|| std::process::abort(), limit),
            Ok(ChildOutcome::Died(_))
        ));
    }

    #[test]
    fn a_hanging_child_is_killed_and_reaped() {
        let start = Instant::now();
        let out = in_child(
            || loop {
                std::hint::spin_loop();
            },
            Duration::from_millis(200),
        );
        assert_eq!(out, Ok(ChildOutcome::TimedOut));
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
