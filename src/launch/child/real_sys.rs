//! [`FsSys`] and [`ChildSys`] over the real syscalls of [`crate::sys`].

use std::convert::Infallible;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::syscalls::ChildSys;
use crate::fs::FsSys;
use crate::launch::plan::ChildPlan;
use crate::launch::wire::message::{self, Incoming, Message};
use crate::sys::{self, Errno, SysError, raw, sock_filter};

/// The real syscall layer (used in the child).
pub(crate) struct RealSys;

impl FsSys for RealSys {
    fn mount(
        &mut self,
        src: Option<&CStr>,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: libc::c_ulong,
        data: Option<&CStr>,
    ) -> Result<(), SysError> {
        sys::mount(src, target, fstype, flags, data)
    }

    fn open(
        &mut self,
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        flags: libc::c_int,
        mode: u32,
        resolve: u64,
    ) -> Result<OwnedFd, SysError> {
        sys::openat2(dir, path, flags, mode, resolve)
    }

    fn mkdirat(&mut self, dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<(), SysError> {
        sys::mkdirat(dir, name, mode)
    }

    fn symlinkat(
        &mut self,
        target: &CStr,
        dir: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<(), SysError> {
        sys::symlinkat(target, dir, name)
    }

    fn mount_setattr(
        &mut self,
        fd: BorrowedFd<'_>,
        recursive: bool,
        set: u64,
    ) -> Result<(), SysError> {
        sys::mount_setattr(fd, recursive, set, 0, None)
    }

    fn move_mount(&mut self, from: BorrowedFd<'_>, to: &CStr) -> Result<(), SysError> {
        sys::move_mount(from, to)
    }

    fn clone_tree(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        recursive: bool,
    ) -> Result<OwnedFd, SysError> {
        sys::open_tree_clone_at(dir, name, recursive)
    }

    fn move_mount_at(
        &mut self,
        from: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<(), SysError> {
        sys::move_mount_at(from, dir, name)
    }

    fn write_all(&mut self, fd: BorrowedFd<'_>, data: &[u8]) -> Result<(), SysError> {
        sys::write_all(fd, data)
    }

    fn chmod(&mut self, path: &CStr, mode: u32) -> Result<(), SysError> {
        sys::chmod(path, mode)
    }

    fn is_dir(&mut self, fd: BorrowedFd<'_>) -> Result<bool, SysError> {
        sys::is_dir(fd)
    }

    fn readlinkat(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Result<Vec<u8>, SysError> {
        sys::readlink_at(dir, name)
    }

    fn same_file(&mut self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<bool, SysError> {
        let (a, b) = (sys::fstat(a)?, sys::fstat(b)?);
        Ok((a.dev, a.ino) == (b.dev, b.ino))
    }

    fn fchdir(&mut self, fd: BorrowedFd<'_>) -> Result<(), SysError> {
        sys::fchdir(fd)
    }

    fn pivot_root(&mut self, new_root: &CStr, put_old: &CStr) -> Result<(), SysError> {
        sys::pivot_root(new_root, put_old)
    }

    fn umount2(&mut self, target: &CStr, flags: libc::c_int) -> Result<(), SysError> {
        sys::umount2(target, flags)
    }

    fn chdir(&mut self, path: &CStr) -> Result<(), SysError> {
        sys::chdir(path)
    }

    fn unix_listener(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, SysError> {
        crate::net::unix_door(dir, name)
    }

    fn fs_context(
        &mut self,
        fstype: &CStr,
        options: &[(&CStr, Option<&CStr>)],
    ) -> Result<OwnedFd, SysError> {
        sys::fs_context(fstype, options)
    }

    fn fs_mount(&mut self, fs: BorrowedFd<'_>, attrs: u64) -> Result<OwnedFd, SysError> {
        sys::fs_mount(fs, attrs)
    }

    fn mknodat(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        mode: u32,
        rdev: u64,
    ) -> Result<(), SysError> {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFCHR => sys::image::NodeKind::Char,
            libc::S_IFBLK => sys::image::NodeKind::Block,
            _ => sys::image::NodeKind::Fifo,
        };
        sys::image::mknod_at(
            dir,
            name,
            kind,
            mode & 0o7777,
            libc::major(rdev),
            libc::minor(rdev),
        )
    }

    fn lchown_at(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        uid: u32,
        gid: u32,
    ) -> Result<(), SysError> {
        sys::image::lchown_at(dir, name, uid, gid)
    }

    fn stat(&mut self, fd: BorrowedFd<'_>) -> Result<sys::Meta, SysError> {
        sys::fstat(fd)
    }

    fn dir_is_empty(&mut self, fd: BorrowedFd<'_>) -> Result<bool, SysError> {
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let mut entries =
            std::fs::read_dir(&path).map_err(|e| sys::io_err(format!("opendir({path:?})"), e))?;
        Ok(entries.next().is_none())
    }
}

impl ChildSys for RealSys {
    fn set_parent_death_signal(&mut self) -> Result<(), Errno> {
        raw::set_pdeathsig(libc::SIGKILL)
    }

    fn close_fds_except(
        &mut self,
        keep: &[BorrowedFd<'_>],
        inherited: &[RawFd],
    ) -> Result<(), Errno> {
        let mut numbers = [-1 as RawFd; raw::MAX_KEPT_FDS];
        let n = keep.len() + inherited.len() + 3;
        if n > numbers.len() {
            return Err(Errno::EMFILE);
        }
        numbers[..3].copy_from_slice(&[0, 1, 2]);
        let kept = keep
            .iter()
            .map(|fd| fd.as_raw_fd())
            .chain(inherited.iter().copied());
        for (slot, fd) in numbers[3..].iter_mut().zip(kept) {
            *slot = fd;
        }
        raw::close_all_except(&numbers[..n])
    }

    fn keep_across_exec(&mut self, fd: RawFd) -> Result<(), Errno> {
        raw::clear_cloexec(fd)
    }

    fn new_session(&mut self) -> Result<(), Errno> {
        raw::setsid()
    }

    fn recv_go(&mut self, sock: BorrowedFd<'_>) -> Option<Vec<(usize, OwnedFd)>> {
        match message::recv(&sock) {
            Ok(Some(Incoming::Message(Message::Go { handed_sources }, fds)))
                if fds.len() == handed_sources.len() =>
            {
                Some(handed_sources.into_iter().zip(fds).collect())
            }
            _ => None,
        }
    }

    fn recv_pivot(&mut self, sock: BorrowedFd<'_>) -> bool {
        matches!(
            message::recv(&sock),
            Ok(Some(Incoming::Message(Message::Pivot, fds))) if fds.is_empty()
        )
    }

    fn send(
        &mut self,
        sock: BorrowedFd<'_>,
        msg: &Message,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), Errno> {
        message::send(&sock, msg, fds).map_err(|e| e.errno)
    }

    fn clear_groups(&mut self) -> Result<(), Errno> {
        raw::clear_groups()
    }

    fn set_gid(&mut self, gid: u32) -> Result<(), Errno> {
        raw::setresgid(gid)
    }

    fn set_uid(&mut self, uid: u32) -> Result<(), Errno> {
        raw::setresuid(uid)
    }

    fn keep_caps_on_setuid(&mut self) -> Result<(), Errno> {
        const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) };
        if r == 0 { Ok(()) } else { Err(Errno::last()) }
    }

    fn supervisor_alive(&mut self, sock: BorrowedFd<'_>) -> bool {
        !sys::peer_hung_up(sock)
    }

    /// With the limit at 0 in the sandbox's own user namespace, no process
    /// in it can create another (the count is checked at every ancestor
    /// level), and without CAP_SYS_RESOURCE the workload cannot raise it
    /// again.
    fn lock_user_namespaces(&mut self) -> Result<(), Errno> {
        raw::write_file(c"/proc/sys/user/max_user_namespaces", b"0")
    }

    fn set_hostname(&mut self, name: &[u8]) -> Result<(), Errno> {
        raw::sethostname(name)
    }

    fn enter_user_namespace(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        raw::setns(fd, libc::CLONE_NEWUSER)
    }

    fn enter_mount_namespace(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        raw::setns(fd, libc::CLONE_NEWNS)
    }

    fn loopback_up(&mut self) -> Result<(), Errno> {
        raw::set_interface_up(c"lo")
    }

    fn tcp_door(&mut self) -> Result<OwnedFd, Errno> {
        crate::net::tcp_door_in_current_netns().map_err(|e| e.errno)
    }

    fn transparent_sockets(&mut self, ports: &[u16]) -> Result<Vec<OwnedFd>, crate::sys::SysError> {
        crate::net::transparent_in_current_netns(ports)
    }

    fn recv_claim(
        &mut self,
        sock: BorrowedFd<'_>,
        non_default_signals: u64,
    ) -> Result<Option<super::claim::Claimed>, Errno> {
        match message::recv(&sock) {
            Ok(None) => Ok(None),
            Ok(Some(Incoming::Message(
                Message::Claim {
                    command,
                    report_started,
                    linger,
                },
                fds,
            ))) => super::claim::decode(command, report_started, linger, fds, non_default_signals)
                .map(Some),
            Ok(Some(_)) => Err(Errno::EPROTO),
            Err(crate::launch::wire::message::MessageError::Sys(e)) => Err(e.errno),
            Err(_) => Err(Errno::EPROTO),
        }
    }

    fn clone_per_command(&mut self, flags: u64) -> Result<Option<libc::pid_t>, Errno> {
        // SAFETY: hutch init is single-threaded (a fork of the
        // single-threaded supervisor's thread); the child continues on a
        // copy of its memory, like fork(2).
        match unsafe { raw::clone3(flags, None) }? {
            sys::Forked::Child => Ok(None),
            sys::Forked::Parent { pid, pidfd } => {
                drop(pidfd);
                Ok(Some(pid))
            }
        }
    }

    fn wait_per_command(&mut self, pid: libc::pid_t, forwarded: u64) {
        use nix::sys::signal::{SigSet, Signal};
        let mut set = SigSet::empty();
        set.add(Signal::SIGCHLD);
        for s in super::steps::signal_list(forwarded) {
            if let Ok(sig) = Signal::try_from(s) {
                set.add(sig);
            }
        }
        loop {
            // Looked at before each wait: a SIGCHLD that comes in between
            // stays pending (blocked) and ends the wait at once.
            match raw::waitpid(pid, libc::WNOHANG) {
                Ok(Some(_)) | Err(Errno::ECHILD) => return,
                _ => {}
            }
            let Ok(sig) = set.wait() else { continue };
            if sig != Signal::SIGCHLD {
                let _ = raw::kill(pid, sig as libc::c_int);
            }
        }
    }

    fn claim_pipe(&mut self) -> Result<(OwnedFd, OwnedFd), Errno> {
        raw::pipe(libc::O_NONBLOCK)
    }

    fn mark_claimed(&mut self, pipe: BorrowedFd<'_>) {
        let _ = raw::write(pipe, b"c");
    }

    fn was_claimed(&mut self, pipe: BorrowedFd<'_>) -> bool {
        let mut byte = [0u8; 1];
        matches!(raw::read(pipe, &mut byte), Ok(1))
    }

    fn own_namespaces(&mut self) -> Vec<(String, u64)> {
        use std::os::unix::fs::MetadataExt;
        ["user", "mnt", "pid", "ipc", "uts", "net", "cgroup"]
            .into_iter()
            .filter_map(|ns| {
                let m = std::fs::metadata(format!("/proc/self/ns/{ns}")).ok()?;
                Some((ns.to_string(), m.ino()))
            })
            .collect()
    }

    fn set_rlimit(&mut self, resource: libc::c_int, value: u64) -> Result<(), Errno> {
        raw::setrlimit(resource, value)
    }

    fn set_dumpable(&mut self, on: bool) -> Result<(), Errno> {
        raw::set_dumpable(on)
    }

    fn permitted_caps(&mut self) -> Result<u64, Errno> {
        raw::permitted()
    }

    fn block_signals(&mut self, signals: &[libc::c_int]) -> Result<(), Errno> {
        raw::block_signals(signals)
    }

    fn start_workload(&mut self, plan: &ChildPlan, sock: BorrowedFd<'_>) -> Result<i32, Errno> {
        // SAFETY: this process is single-threaded (a copy of the
        // single-threaded supervisor's calling thread); the workload only
        // reads `plan`, makes raw syscalls (no allocation), and ends in
        // execve or _exit.
        unsafe {
            sys::spawn_vfork(&mut || -> Infallible {
                let failure = super::workload::workload(&mut RealSys, plan, sock);
                message::send_failure(sock, &failure, None);
                sys::exit_now(failure.exit_status())
            })
        }
        .map_err(|e| e.errno)
    }

    fn confine_init(&mut self, confinement: &crate::confine::Confinement) -> Result<(), Errno> {
        confinement.apply_init().map_err(|e| e.errno)
    }

    fn write_sysctl(&mut self, path: &CStr, value: &[u8]) -> Result<(), Errno> {
        raw::write_file(path, value)
    }

    fn set_rlimit_soft(&mut self, resource: libc::c_int, soft: u64) -> Result<(), Errno> {
        raw::setrlimit_soft(resource, soft)
    }

    fn set_subreaper(&mut self) -> Result<(), Errno> {
        raw::set_child_subreaper()
    }

    fn open_terminal(&mut self, size: Option<(u16, u16)>) -> Result<(OwnedFd, OwnedFd), Errno> {
        let (master, peer) = raw::open_pty(c"/dev/ptmx")?;
        if let Some((cols, rows)) = size {
            raw::set_window_size(master.as_fd(), cols, rows)?;
        }
        Ok((master, peer))
    }

    fn send_fd(&mut self, sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        raw::send_fd(sock, b"/dev/ptmx", fd)
    }

    fn accept_start(&mut self, listener: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
        let conn = raw::accept(listener)?;
        let mut request = [0u8; 64];
        raw::read(conn.as_fd(), &mut request)?;
        Ok(conn)
    }

    fn reset_signals(&mut self, non_default: u64) {
        raw::reset_signals(non_default)
    }

    fn dup2(&mut self, from: BorrowedFd<'_>, to: RawFd) -> Result<(), Errno> {
        raw::dup2(from, to)
    }

    fn openat2(
        &mut self,
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        flags: libc::c_int,
        resolve: u64,
    ) -> Result<OwnedFd, Errno> {
        raw::openat2(dir, path, flags, 0, resolve)
    }

    fn file_type(&mut self, fd: BorrowedFd<'_>) -> Result<libc::mode_t, Errno> {
        raw::file_type(fd)
    }

    fn enter_dir(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        raw::fchdir(fd)
    }

    fn cwd_inside_root(&mut self) -> Result<bool, Errno> {
        let mut buf = [0u8; libc::PATH_MAX as usize];
        let n = raw::getcwd(&mut buf)?;
        Ok(n > 0 && buf[0] == b'/')
    }

    fn set_umask(&mut self, mask: u32) {
        raw::umask(mask)
    }

    fn set_controlling_tty(&mut self) -> Result<(), Errno> {
        raw::set_controlling_tty(0)
    }

    fn set_no_new_privs(&mut self) -> Result<(), Errno> {
        raw::set_no_new_privs()
    }

    fn keep_caps(&mut self) -> Result<(), Errno> {
        raw::set_keepcaps()
    }

    fn set_groups(&mut self, groups: &[libc::gid_t]) -> Result<(), Errno> {
        raw::setgroups(groups)
    }

    fn drop_bounding_cap(&mut self, cap: u32) -> Result<(), Errno> {
        raw::capbset_drop(cap)
    }

    fn set_caps(&mut self, effective: u64, permitted: u64, inheritable: u64) -> Result<(), Errno> {
        raw::capset(effective, permitted, inheritable)
    }

    fn clear_ambient_caps(&mut self) -> Result<(), Errno> {
        raw::ambient_clear()
    }

    fn raise_ambient_cap(&mut self, cap: u32) -> Result<(), Errno> {
        raw::ambient_raise(cap)
    }

    fn landlock_ruleset(&mut self, fs: u64, net: u64, scoped: u64) -> Result<OwnedFd, Errno> {
        raw::landlock_create_ruleset(fs, net, scoped)
    }

    fn landlock_path_rule(
        &mut self,
        ruleset: BorrowedFd<'_>,
        parent: BorrowedFd<'_>,
        access: u64,
    ) -> Result<(), Errno> {
        raw::landlock_add_path_rule(ruleset, parent, access)
    }

    fn landlock_port_rule(
        &mut self,
        ruleset: BorrowedFd<'_>,
        port: u16,
        access: u64,
    ) -> Result<(), Errno> {
        raw::landlock_add_net_rule(ruleset, port, access)
    }

    fn landlock_restrict(&mut self, ruleset: BorrowedFd<'_>) -> Result<(), Errno> {
        raw::landlock_restrict_self(ruleset)
    }

    fn seccomp(&mut self, program: &[sock_filter]) -> Result<(), Errno> {
        raw::seccomp_set_mode_filter(program, 0).map(drop)
    }

    fn seccomp_prctl(&mut self, program: &[sock_filter]) -> Result<(), Errno> {
        raw::prctl_set_seccomp_filter(program)
    }

    fn execve(
        &mut self,
        path: &CStr,
        argv: &[*const libc::c_char],
        envp: &[*const libc::c_char],
    ) -> Errno {
        raw::execve(path, argv, envp)
    }

}
