//! Process syscalls: clone3, fork, prctl, close_range, credentials, pidfds,
//! exec, signals, rlimits.
//!
//! [`raw`] holds the allocation-free versions (they return the bare
//! [`Errno`] and are safe in a forked or vfork'd child); the functions of
//! this module describe a failure as the call that failed (allocating only
//! then).

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::{Errno, SysError, q};

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
/// The child's parent is the caller's parent (libc's is an i32).
pub const CLONE_PARENT: u64 = 0x0000_8000;
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

pub const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// What clone3 returned.
pub enum Forked {
    /// In the parent: the child's pid (in the parent's pid namespace) and
    /// its pidfd.
    Parent { pid: libc::pid_t, pidfd: OwnedFd },
    /// In the child.
    Child,
}

/// The allocation-free process syscalls.
pub mod raw {
    use std::ffi::CStr;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

    use super::super::{Errno, ret};
    use super::{CLONE_INTO_CGROUP, CLONE_PIDFD, Forked};

    /// The kernel's `struct clone_args` (clone3).
    #[repr(C)]
    #[derive(Default)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
        set_tid: u64,
        set_tid_size: u64,
        cgroup: u64,
    }

    /// clone3 without a new stack (fork-like), with CLONE_PIDFD and SIGCHLD
    /// as exit signal. `cgroup` joins the child to that cgroup directory.
    ///
    /// # Safety
    /// The caller must be single-threaded (the child gets a copy of only
    /// the calling thread, so locks held by other threads would stay
    /// locked).
    pub unsafe fn clone3(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> Result<Forked, Errno> {
        let mut pidfd: RawFd = -1;
        let mut args = CloneArgs {
            flags: flags | CLONE_PIDFD | cgroup.map_or(0, |_| CLONE_INTO_CGROUP),
            pidfd: &mut pidfd as *mut RawFd as u64,
            // A CLONE_PARENT child signals the caller's parent with the
            // caller's own exit signal (clone3 refuses one given).
            exit_signal: if flags & super::CLONE_PARENT != 0 {
                0
            } else {
                libc::SIGCHLD as u64
            },
            cgroup: cgroup.map_or(0, |f| f.as_raw_fd() as u64),
            ..Default::default()
        };
        // SAFETY: args is a valid clone_args of the size passed; no stack is
        // given, so the child continues on a copy of ours like fork(2).
        let r = ret(unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        })?;
        if r == 0 {
            return Ok(Forked::Child);
        }
        // SAFETY: CLONE_PIDFD stored a new fd owned by us.
        Ok(Forked::Parent {
            pid: r as libc::pid_t,
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
        })
    }

    /// clone3 with `flags` | CLONE_PIDFD whose child `_exit(0)`s at once:
    /// whether the call works here. Returns the child's pid (not reaped)
    /// and its pidfd.
    pub fn clone3_exit_at_once(flags: u64) -> Result<(libc::pid_t, OwnedFd), Errno> {
        // SAFETY: the child only calls _exit, so no lock another thread
        // might hold is ever touched in it.
        match unsafe { clone3(flags, None) }? {
            Forked::Child => exit_now(0),
            Forked::Parent { pid, pidfd } => Ok((pid, pidfd)),
        }
    }

    /// fork(2); the child runs `child` and `_exit`s with what it returns;
    /// the parent gets the child's pid.
    ///
    /// This is safe to call from a multi-threaded process: the child only
    /// ever sees its own copy of memory, and the borrow rules keep other
    /// threads from mutating what `child` borrows. What a lock held by
    /// another thread at fork time can still do is make `child` hang (a
    /// liveness problem, not memory safety), so `child` should only make
    /// [`raw`](self) calls, and callers bound how long they wait for it.
    pub fn fork_then(child: impl FnOnce() -> i32) -> Result<libc::pid_t, Errno> {
        // SAFETY: see above: the child runs `child` and leaves by _exit,
        // never returning into the caller's code or unwinding out of it.
        let pid = ret(unsafe { libc::fork() } as libc::c_long)?;
        if pid == 0 {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(127);
            exit_now(code);
        }
        Ok(pid as libc::pid_t)
    }

    fn prctl(option: libc::c_int, arg: libc::c_ulong) -> Result<(), Errno> {
        // SAFETY: prctl with integer arguments only.
        ret(unsafe { libc::prctl(option, arg, 0, 0, 0) } as libc::c_long).map(drop)
    }

    pub fn set_no_new_privs() -> Result<(), Errno> {
        prctl(libc::PR_SET_NO_NEW_PRIVS, 1)
    }

    pub fn set_pdeathsig(sig: libc::c_int) -> Result<(), Errno> {
        prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong)
    }

    pub fn set_dumpable(on: bool) -> Result<(), Errno> {
        prctl(libc::PR_SET_DUMPABLE, on as libc::c_ulong)
    }

    pub fn set_child_subreaper() -> Result<(), Errno> {
        prctl(libc::PR_SET_CHILD_SUBREAPER, 1)
    }

    /// prctl(PR_GET_SECCOMP) of this process (0 none, 1 strict, 2 filter).
    pub fn seccomp_mode() -> Result<i32, Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } as libc::c_long)
            .map(|m| m as i32)
    }

    /// close_range(2) from `first` to `last`.
    pub fn close_range(
        first: libc::c_uint,
        last: libc::c_uint,
        flags: libc::c_uint,
    ) -> Result<(), Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) }).map(drop)
    }

    /// Most fds [`close_all_except`] can keep.
    pub const MAX_KEPT_FDS: usize = 288;

    /// Close every fd except those in `keep` (at most [`MAX_KEPT_FDS`];
    /// negative entries are ignored), without allocating.
    pub fn close_all_except(keep: &[RawFd]) -> Result<(), Errno> {
        let mut sorted = [-1 as RawFd; MAX_KEPT_FDS];
        let mut n = 0;
        for &fd in keep {
            if fd < 0 {
                continue;
            }
            if n == MAX_KEPT_FDS {
                return Err(Errno::EMFILE);
            }
            sorted[n] = fd;
            n += 1;
        }
        let sorted = &mut sorted[..n];
        sorted.sort_unstable();
        let mut first: libc::c_uint = 0;
        for &k in sorted.iter() {
            let k = k as libc::c_uint;
            if k > first {
                close_range(first, k - 1, 0)?;
            }
            first = k + 1;
        }
        close_range(first, libc::c_uint::MAX, 0)
    }

    /// Give each fd of `fds` its target number (without close-on-exec)
    /// and close every other fd, in a forked child, without allocating
    /// (at most [`MAX_KEPT_FDS`] pairs). Sources first move above every
    /// number in play, so no dup2 clobbers a source not yet placed.
    pub fn place_fds(fds: &[(BorrowedFd<'_>, RawFd)]) -> Result<(), Errno> {
        if fds.len() > MAX_KEPT_FDS {
            return Err(Errno::EMFILE);
        }
        let top = fds
            .iter()
            .map(|(fd, to)| fd.as_raw_fd().max(*to))
            .max()
            .unwrap_or(2)
            + 1;
        for (i, (fd, _)) in fds.iter().enumerate() {
            // SAFETY: integer arguments only; the target numbers are above
            // every fd the caller handed over.
            ret(unsafe { libc::dup2(fd.as_raw_fd(), top + i as RawFd) } as libc::c_long)?;
        }
        let mut keep = [-1 as RawFd; MAX_KEPT_FDS];
        for (i, (_, to)) in fds.iter().enumerate() {
            // SAFETY: integer arguments only (the moved copy made above).
            ret(unsafe { libc::dup2(top + i as RawFd, *to) } as libc::c_long)?;
            keep[i] = *to;
        }
        close_all_except(&keep[..fds.len()])
    }

    pub fn unshare(flags: libc::c_int) -> Result<(), Errno> {
        // SAFETY: integer argument only.
        ret(unsafe { libc::unshare(flags) } as libc::c_long).map(drop)
    }

    pub fn setresuid(uid: u32) -> Result<(), Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::setresuid(uid, uid, uid) } as libc::c_long).map(drop)
    }

    pub fn setresgid(gid: u32) -> Result<(), Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::setresgid(gid, gid, gid) } as libc::c_long).map(drop)
    }

    /// setgroups(0, NULL).
    pub fn clear_groups() -> Result<(), Errno> {
        // SAFETY: an empty list.
        ret(unsafe { libc::setgroups(0, std::ptr::null()) } as libc::c_long).map(drop)
    }

    pub fn sethostname(name: &[u8]) -> Result<(), Errno> {
        // SAFETY: pointer and length of a valid byte string.
        ret(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) } as libc::c_long)
            .map(drop)
    }

    pub fn setsid() -> Result<(), Errno> {
        // SAFETY: no arguments.
        ret(unsafe { libc::setsid() } as libc::c_long).map(drop)
    }

    pub fn chdir(path: &CStr) -> Result<(), Errno> {
        // SAFETY: path is a valid C string.
        ret(unsafe { libc::chdir(path.as_ptr()) } as libc::c_long).map(drop)
    }

    pub fn fchdir(fd: BorrowedFd<'_>) -> Result<(), Errno> {
        // SAFETY: fd is a valid open fd.
        ret(unsafe { libc::fchdir(fd.as_raw_fd()) } as libc::c_long).map(drop)
    }

    /// getcwd(2) into `buf`; the returned length excludes the NUL. A
    /// working directory that is not below the process's root comes back
    /// prefixed `(unreachable)` (the raw syscall, not glibc's wrapper).
    pub fn getcwd(buf: &mut [u8]) -> Result<usize, Errno> {
        // SAFETY: buf is valid for buf.len() bytes.
        let n = ret(unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) })?;
        Ok((n as usize).saturating_sub(1))
    }

    /// execve(2); returns only on failure.
    pub fn execve(
        path: &CStr,
        argv: &[*const libc::c_char],
        envp: &[*const libc::c_char],
    ) -> Errno {
        // SAFETY: argv and envp are NULL-terminated arrays of C strings that
        // outlive the call (the caller builds them before fork).
        unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        Errno::last()
    }

    /// pidfd_send_signal(2).
    pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> Result<(), Errno> {
        // SAFETY: integer arguments and a null siginfo.
        ret(unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        })
        .map(drop)
    }

    /// pidfd_open(2).
    pub fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd, Errno> {
        // SAFETY: integer arguments only.
        let fd = ret(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
        // SAFETY: pidfd_open returned a new fd that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    /// `ioctl(NS_GET_MNTNS_ID)` on an fd of a mount namespace: its 64-bit
    /// id, never reused while the system runs (unlike the nsfs inode
    /// number). ENOTTY before Linux 6.10.
    pub fn mnt_ns_id(ns: BorrowedFd<'_>) -> Result<u64, Errno> {
        // _IOR(NSIO = 0xb7, 0x5, __u64).
        const NS_GET_MNTNS_ID: libc::c_ulong = 0x8008_b705;
        let mut id: u64 = 0;
        // SAFETY: the request writes one u64 through the valid pointer.
        ret(unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_MNTNS_ID, &mut id) } as libc::c_long)?;
        Ok(id)
    }

    /// `ioctl(NS_GET_PARENT)` on an fd of a pid or user namespace: an fd
    /// of its parent (EPERM when the parent is outside this process's).
    pub fn ns_parent(ns: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
        // _IO(NSIO = 0xb7, 0x2).
        const NS_GET_PARENT: libc::c_ulong = 0xb702;
        // SAFETY: an integer request without argument.
        let fd = ret(unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_PARENT) } as libc::c_long)?;
        // SAFETY: NS_GET_PARENT returned a new fd that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    /// kill(2).
    pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> Result<(), Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::kill(pid, sig) } as libc::c_long).map(drop)
    }

    /// getpriority(PRIO_PROCESS, pid): the nice value of one thread
    /// (`pid` 0: the caller).
    pub fn nice_of(pid: libc::pid_t) -> Result<i32, Errno> {
        // getpriority may return -1 as a value: errno tells them apart.
        Errno::clear();
        // SAFETY: integer arguments only.
        let v = unsafe { libc::getpriority(libc::PRIO_PROCESS, pid as libc::id_t) };
        if v == -1 && Errno::last_raw() != 0 {
            return Err(Errno::last());
        }
        Ok(v)
    }

    /// setpriority(PRIO_PROCESS, pid, nice): one thread's nice value
    /// (`pid` 0: the caller). Lowering it needs CAP_SYS_NICE.
    pub fn set_nice(pid: libc::pid_t, nice: i32) -> Result<(), Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::setpriority(libc::PRIO_PROCESS, pid as libc::id_t, nice) }
            as libc::c_long)
        .map(drop)
    }

    /// The calling thread's name (PR_GET_NAME: at most 15 bytes and a
    /// NUL). Written into a mutable buffer the kernel fills; nix 0.30's
    /// `prctl::get_name` passes an immutable one, which an optimized build
    /// may read back as all zeros (an empty name).
    pub fn thread_name() -> Result<[u8; 16], Errno> {
        let mut name = [0u8; 16];
        // SAFETY: the kernel writes at most TASK_COMM_LEN (16) bytes,
        // NUL included, into the 16-byte buffer.
        ret(unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr(), 0, 0, 0) }
            as libc::c_long)?;
        Ok(name)
    }

    /// Name the calling thread (PR_SET_NAME; the kernel keeps the first 15
    /// bytes). `name` as [`thread_name`] returned it, or any NUL-ended bytes.
    pub fn set_thread_name(name: &CStr) -> Result<(), Errno> {
        // SAFETY: `name` is NUL-terminated; the kernel reads at most 16 bytes.
        ret(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) }
            as libc::c_long)
        .map(drop)
    }

    /// waitpid(2): `Ok(None)` under WNOHANG when nothing ended; retries EINTR.
    pub fn waitpid(
        pid: libc::pid_t,
        flags: libc::c_int,
    ) -> Result<Option<(libc::pid_t, libc::c_int)>, Errno> {
        let mut status = 0;
        loop {
            // SAFETY: status is a valid out-pointer.
            match ret(unsafe { libc::waitpid(pid, &mut status, flags) } as libc::c_long) {
                Ok(0) => return Ok(None),
                Ok(p) => return Ok(Some((p as libc::pid_t, status))),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn getpid() -> libc::pid_t {
        // SAFETY: no arguments.
        unsafe { libc::getpid() }
    }

    pub fn geteuid() -> u32 {
        // SAFETY: no arguments.
        unsafe { libc::geteuid() }
    }

    pub fn getegid() -> u32 {
        // SAFETY: no arguments.
        unsafe { libc::getegid() }
    }

    /// pipe2(2) with O_CLOEXEC (and `flags`): (read end, write end).
    pub fn pipe(flags: libc::c_int) -> Result<(OwnedFd, OwnedFd), Errno> {
        let mut fds = [-1 as RawFd; 2];
        // SAFETY: fds is a valid out-array of two ints.
        ret(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | flags) } as libc::c_long)?;
        // SAFETY: pipe2 returned two new fds that we now own.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    }

    /// One write(2); the number of bytes written.
    pub fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<usize, Errno> {
        // SAFETY: buf is valid for buf.len() bytes.
        ret(unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) } as libc::c_long)
            .map(|n| n as usize)
    }

    /// write(2) all of `buf`, retrying on EINTR.
    pub fn write_all(fd: BorrowedFd<'_>, mut buf: &[u8]) -> Result<(), Errno> {
        while !buf.is_empty() {
            match write(fd, buf) {
                Ok(n) => buf = &buf[n..],
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One read(2), retrying on EINTR; the number of bytes read.
    pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
        loop {
            // SAFETY: buf is valid for buf.len() bytes.
            match ret(
                unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
                    as libc::c_long,
            ) {
                Err(Errno::EINTR) => continue,
                r => return r.map(|n| n as usize),
            }
        }
    }

    /// poll(2) on one fd for `events`, up to `timeout_ms` (-1: forever);
    /// the returned events (empty on timeout). EINTR is returned.
    pub fn poll_one(
        fd: BorrowedFd<'_>,
        events: libc::c_short,
        timeout_ms: libc::c_int,
    ) -> Result<libc::c_short, Errno> {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        ret(unsafe { libc::poll(&mut pfd, 1, timeout_ms) } as libc::c_long)?;
        Ok(pfd.revents)
    }

    /// setrlimit(2) with soft = hard = `value`.
    pub fn setrlimit(resource: libc::c_int, value: u64) -> Result<(), Errno> {
        let lim = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: lim is a valid rlimit.
        ret(unsafe { libc::setrlimit(resource as libc::__rlimit_resource_t, &lim) } as libc::c_long)
            .map(drop)
    }

    /// Block `signals` (SIG_BLOCK).
    pub fn block_signals(signals: &[libc::c_int]) -> Result<(), Errno> {
        // SAFETY: a sigset_t is plain data, initialised by sigemptyset.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
            ret(libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) as libc::c_long)
                .map(drop)
        }
    }

    /// Every signal back to its default disposition and an empty mask, as
    /// a freshly exec'd program expects (Rust ignores SIGPIPE, for one).
    /// `non_default` holds the signals (bit N-1 for signal N) whose
    /// disposition may not be SIG_DFL
    /// ([`super::super::SelfStatus::non_default_signals`]); the others
    /// already are, and are left alone.
    pub fn reset_signals(non_default: u64) {
        for sig in 1..=64 {
            if sig == libc::SIGKILL
                || sig == libc::SIGSTOP
                || non_default & (1u64 << (sig - 1)) == 0
            {
                continue;
            }
            // SAFETY: SIG_DFL is always a valid disposition; errors
            // (reserved signals) are harmless.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        // SAFETY: an empty set, no old-set out-pointer.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        }
    }

    /// dup2(2) (when `from == to`, clear close-on-exec instead).
    pub fn dup2(from: BorrowedFd<'_>, to: RawFd) -> Result<(), Errno> {
        let from = from.as_raw_fd();
        if from == to {
            // SAFETY: integer arguments only.
            return ret(unsafe { libc::fcntl(from, libc::F_SETFD, 0) } as libc::c_long).map(drop);
        }
        // SAFETY: integer arguments only.
        ret(unsafe { libc::dup2(from, to) } as libc::c_long).map(drop)
    }

    /// close(2) of an fd number this code does not own as an `OwnedFd`
    /// (e.g. a forked child's copy of its parent's end of a pipe, in a
    /// child that never drops anything).
    pub fn close(fd: RawFd) {
        // SAFETY: closing a number; the callers' contract is that nothing
        // in this process uses it afterwards.
        unsafe { libc::close(fd) };
    }

    /// Whether an fd number is open (fcntl F_GETFD).
    /// Clear FD_CLOEXEC on `fd` (an fd the workload keeps across execve).
    pub fn clear_cloexec(fd: RawFd) -> Result<(), Errno> {
        // SAFETY: F_SETFD with an integer flag word on any integer fd.
        ret(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } as libc::c_long).map(drop)
    }

    /// Set FD_CLOEXEC on `fd` (an fd a dup2 made inheritable again).
    pub fn set_cloexec(fd: RawFd) -> Result<(), Errno> {
        // SAFETY: F_SETFD with an integer flag word on any integer fd.
        ret(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } as libc::c_long).map(drop)
    }

    pub fn fd_is_open(fd: RawFd) -> bool {
        // SAFETY: F_GETFD on any integer is harmless.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    /// Whether fd is a terminal.
    pub fn isatty(fd: RawFd) -> bool {
        // SAFETY: integer argument only.
        unsafe { libc::isatty(fd) == 1 }
    }

    /// Fill `buf` from the kernel's random pool.
    pub fn getrandom(buf: &mut [u8]) -> Result<(), Errno> {
        // SAFETY: buf is valid for buf.len() bytes.
        let r =
            ret(unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) } as libc::c_long)?;
        if r as usize != buf.len() {
            return Err(Errno::EIO);
        }
        Ok(())
    }

    /// uname(2)'s release into `buf`; its length.
    pub fn kernel_release(buf: &mut [u8; 65]) -> usize {
        // SAFETY: utsname is plain old data; zeroed is a valid value.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: u is a valid out-pointer.
        if unsafe { libc::uname(&mut u) } != 0 {
            return 0;
        }
        let mut n = 0;
        for (dst, &c) in buf.iter_mut().zip(u.release.iter()) {
            if c == 0 {
                break;
            }
            *dst = c as u8;
            n += 1;
        }
        n
    }

    /// _exit(2): leave without running atexit handlers or flushing stdio,
    /// as a forked child must.
    pub fn exit_now(code: i32) -> ! {
        // SAFETY: _exit never returns and touches no process state we share.
        unsafe { libc::_exit(code) }
    }
}

pub use raw::{exit_now, fd_is_open, getpid, isatty};

/// clone3 without a new stack (fork-like), with CLONE_PIDFD and SIGCHLD as
/// exit signal. `cgroup` joins the child to that cgroup directory fd.
///
/// # Safety
/// The caller must be single-threaded (the child gets a copy of only the
/// calling thread, so locks held by other threads would stay locked).
pub unsafe fn clone3(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> Result<Forked, SysError> {
    // SAFETY: the caller's contract.
    unsafe { raw::clone3(flags, cgroup) }.map_err(|e| {
        let all = flags | CLONE_PIDFD | cgroup.map_or(0, |_| CLONE_INTO_CGROUP);
        SysError::new(format!("clone3(flags={all:#x})"), e)
    })
}

/// The pid (in this process's pid namespace) of the process a pidfd
/// refers to, from `/proc/self/fdinfo`.
pub fn pidfd_pid(pidfd: BorrowedFd<'_>) -> Result<libc::pid_t, SysError> {
    let path = format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd());
    let text = std::fs::read_to_string(&path).map_err(|e| io_err(format!("read({path:?})"), e))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|pid: &libc::pid_t| *pid > 0)
        .ok_or_else(|| SysError::new(format!("read({path:?}): no live Pid"), Errno::ESRCH))
}

/// [`clone3`] with no flags, for a process that knows it is
/// single-threaded: checked here (`/proc/self/status`), EAGAIN-shaped
/// error when it is not.
pub fn fork_single_threaded() -> Result<Forked, SysError> {
    let threads = super::thread_count();
    if threads != 1 {
        return Err(SysError::new(
            format!("fork ({threads} threads; needs exactly one)"),
            Errno::EAGAIN,
        ));
    }
    // SAFETY: the process has exactly one thread (checked just above, and
    // a single thread cannot start another between the check and here).
    unsafe { clone3(0, None) }
}

/// Set (`Some`) or remove (`None`) environment variables, in a process
/// that knows it is single-threaded (checked here, as for
/// [`fork_single_threaded`]): a forked `hutch serve` request, before it
/// runs the CLI with its client's environment.
pub fn set_env_single_threaded(changes: &[(String, Option<String>)]) -> Result<(), SysError> {
    let threads = super::thread_count();
    if threads != 1 {
        return Err(SysError::new(
            format!("setenv ({threads} threads; needs exactly one)"),
            Errno::EAGAIN,
        ));
    }
    for (name, value) in changes {
        if name.is_empty() || name.contains(['=', '\0']) || value.as_ref().is_some_and(|v| v.contains('\0')) {
            return Err(SysError::new(format!("setenv({name:?})"), Errno::EINVAL));
        }
        // SAFETY: the process has exactly one thread (checked above), so
        // no other thread reads the environment while it changes.
        unsafe {
            match value {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
        }
    }
    Ok(())
}

/// Make the environment exactly `env` again (a snapshot of
/// [`std::env::vars_os`]), in a process that knows it is single-threaded
/// (checked here): the resident `hutch serve` request process between
/// requests.
pub fn restore_env_single_threaded(
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Result<(), SysError> {
    let threads = super::thread_count();
    if threads != 1 {
        return Err(SysError::new(
            format!("setenv ({threads} threads; needs exactly one)"),
            Errno::EAGAIN,
        ));
    }
    let now: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
    for (name, value) in &now {
        if !env.iter().any(|(n, v)| n == name && v == value) {
            // SAFETY: the process has exactly one thread (checked above).
            unsafe { std::env::remove_var(name) };
        }
    }
    for (name, value) in env {
        if std::env::var_os(name).as_ref() != Some(value) {
            // SAFETY: the process has exactly one thread (checked above).
            unsafe { std::env::set_var(name, value) };
        }
    }
    Ok(())
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
///   not allocate, free or mutate anything (taking `&` to the caller's
///   data is fine): only [`raw`](super::raw) calls.
pub unsafe fn spawn_vfork(
    child: &mut dyn FnMut() -> std::convert::Infallible,
) -> Result<libc::pid_t, SysError> {
    // Enough for the workload's setup (Landlock, seccomp, a getcwd
    // buffer), plus a guard page below it.
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
    let result = super::check(r as libc::c_long, || "clone(CLONE_VM|CLONE_VFORK)".into());
    // SAFETY: the child no longer runs on this stack (it exec'd or exited).
    unsafe { libc::munmap(base, STACK + page) };
    result.map(|pid| pid as libc::pid_t)
}

fn described<T>(r: Result<T, Errno>, call: impl FnOnce() -> String) -> Result<T, SysError> {
    r.map_err(|e| SysError::new(call(), e))
}

pub fn set_no_new_privs() -> Result<(), SysError> {
    described(raw::set_no_new_privs(), || {
        "prctl(PR_SET_NO_NEW_PRIVS, 1)".into()
    })
}

pub fn set_pdeathsig(sig: libc::c_int) -> Result<(), SysError> {
    described(raw::set_pdeathsig(sig), || {
        format!("prctl(PR_SET_PDEATHSIG, {sig})")
    })
}

pub fn set_child_subreaper() -> Result<(), SysError> {
    described(raw::set_child_subreaper(), || {
        "prctl(PR_SET_CHILD_SUBREAPER, 1)".into()
    })
}

pub fn chdir(path: &CStr) -> Result<(), SysError> {
    described(raw::chdir(path), || format!("chdir({})", q(path)))
}

pub fn fchdir(fd: BorrowedFd<'_>) -> Result<(), SysError> {
    described(raw::fchdir(fd), || format!("fchdir(fd {})", fd.as_raw_fd()))
}

/// pidfd_send_signal(2).
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> Result<(), SysError> {
    described(raw::pidfd_send_signal(pidfd, sig), || {
        format!("pidfd_send_signal(fd {}, {sig})", pidfd.as_raw_fd())
    })
}

/// write(2) all of `buf` to an fd, retrying on EINTR.
pub fn write_all(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<(), SysError> {
    described(raw::write_all(fd, buf), || {
        format!("write(fd {})", fd.as_raw_fd())
    })
}

/// dup2(2) (when `from == to`, clear close-on-exec instead).
pub fn dup2(from: BorrowedFd<'_>, to: RawFd) -> Result<(), SysError> {
    described(raw::dup2(from, to), || {
        format!("dup2({}, {to})", from.as_raw_fd())
    })
}

/// A user namespace whose maps are `uid_map`/`gid_map`, held by an fd; the
/// short-lived process that created it is gone when this returns. Used for
/// idmapped mounts. Single-threaded callers only.
pub fn userns_with_maps(uid_map: &str, gid_map: &str) -> Result<OwnedFd, SysError> {
    let (r, w) = raw::pipe(0).map_err(|e| SysError::new("pipe2(O_CLOEXEC)", e))?;
    // SAFETY: documented single-threaded contract of this function.
    match unsafe { clone3(CLONE_NEWUSER, None) }? {
        Forked::Child => {
            drop(w);
            let mut b = [0u8; 1];
            // Blocks until the parent is done with our namespace.
            let _ = raw::read(std::os::fd::AsFd::as_fd(&r), &mut b);
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
            let _ = raw::waitpid(pid, 0);
            result
        }
    }
}

/// A SysError from a std::io::Error of the named call.
pub fn io_err(call: String, e: std::io::Error) -> SysError {
    SysError::new(call, Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Fill `buf` from the kernel's random pool.
pub fn getrandom(buf: &mut [u8]) -> Result<(), SysError> {
    described(raw::getrandom(buf), || "getrandom()".into())
}

/// uname(2) release string.
pub fn kernel_release() -> String {
    let mut buf = [0u8; 65];
    let n = raw::kernel_release(&mut buf);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A close-on-exec duplicate of fd number `fd` (numbered 3 or above, so it
/// never lands on a stdio slot).
pub fn dup_fd(fd: RawFd) -> Result<OwnedFd, SysError> {
    dup_fd_from(fd, 3)
}

/// A close-on-exec duplicate of fd number `fd`, numbered `min` or above.
pub fn dup_fd_from(fd: RawFd, min: RawFd) -> Result<OwnedFd, SysError> {
    // SAFETY: fcntl with F_DUPFD_CLOEXEC only reads its integer arguments.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    super::check(new as libc::c_long, || {
        format!("fcntl({fd}, F_DUPFD_CLOEXEC, {min})")
    })?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new fd that nobody else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(new) })
}

/// Take ownership of an inherited fd number, if it is open.
pub fn adopt_inherited_fd(fd: RawFd) -> Option<OwnedFd> {
    if !fd_is_open(fd) {
        return None;
    }
    // SAFETY: the fd is open and, by the caller's protocol, owned by no one else.
    Some(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
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
        super::check(high as libc::c_long, || {
            format!("fcntl({}, F_DUPFD_CLOEXEC, 64)", fd.as_raw_fd())
        })?;
        // SAFETY: F_DUPFD_CLOEXEC returned a new fd we own.
        moved.push((
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(high) },
            target,
        ));
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

/// Where this process's command line and environment strings live (the
/// `arg_start`..`env_end` fields of `/proc/self/stat`), for
/// [`blank_command_line`]. All zero: nothing known, nothing to blank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArgsArea {
    pub arg_start: usize,
    pub arg_end: usize,
    pub env_start: usize,
    pub env_end: usize,
}

impl ArgsArea {
    /// Read from `/proc/self/stat` (fields 48 to 51, Linux 3.5).
    pub fn of_self() -> Result<ArgsArea, SysError> {
        let stat = std::fs::read_to_string("/proc/self/stat").map_err(|e| {
            let errno = Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
            SysError::new("read(/proc/self/stat)", errno)
        })?;
        ArgsArea::parse(&stat).ok_or_else(|| {
            SysError::new("parse(/proc/self/stat: arg_start..env_end)", Errno::EINVAL)
        })
    }

    /// The four fields of a `stat` line: after the `)` that ends the
    /// command name come field 3 on, so field N is the (N-3)th word.
    fn parse(stat: &str) -> Option<ArgsArea> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let words: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| words.get(n - 3)?.parse::<usize>().ok();
        let area = ArgsArea {
            arg_start: field(48)?,
            arg_end: field(49)?,
            env_start: field(50)?,
            env_end: field(51)?,
        };
        (area.arg_start <= area.arg_end && area.env_start <= area.env_end).then_some(area)
    }
}

/// Overwrite this process's command line with `title` (NUL-separated
/// words; cut to fit) and NULs, and its environment strings with NULs:
/// `/proc/PID/cmdline` (readable by every process that sees the pid) and
/// `/proc/PID/environ` then show only `title`. For a forked child whose
/// argv is its parent's (hutch init). Allocates nothing.
pub fn blank_command_line(area: &ArgsArea, title: &[u8]) {
    let args = area.arg_end - area.arg_start;
    if args > 0 {
        let keep = title.len().min(args - 1);
        // SAFETY: [arg_start, arg_end) and [env_start, env_end) are this
        // process's argv and environ strings as the kernel reports them:
        // mapped and writable (the initial stack). Only their bytes are
        // overwritten; the pointers to them stay valid (they then read as
        // shorter or empty strings). The caller is single-threaded (a
        // freshly forked child), so no other thread reads them meanwhile.
        unsafe {
            let p = area.arg_start as *mut u8;
            std::ptr::copy_nonoverlapping(title.as_ptr(), p, keep);
            std::ptr::write_bytes(p.add(keep), 0, args - keep);
        }
    }
    let env = area.env_end - area.env_start;
    if env > 0 {
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(area.env_start as *mut u8, 0, env) };
    }
}
