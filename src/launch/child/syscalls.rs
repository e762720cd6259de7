//! The syscalls of the post-clone path, as a trait: [`super::real_sys`]
//! performs them, the recorder in `tests.rs` writes them down, so the whole
//! documented order is checked without root.
//!
//! The calls return the bare errno and never allocate: the workload runs
//! them over hutch init's memory. (The new-root builder's [`FsSys`] part
//! runs in init, which may allocate, and describes its failures.)

use std::ffi::CStr;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

use crate::fs::FsSys;
use crate::launch::plan::ChildPlan;
use crate::launch::wire::message::Message;
use crate::sys::{Errno, sock_filter};

pub(crate) trait ChildSys: FsSys {
    // hutch init
    fn set_parent_death_signal(&mut self) -> Result<(), Errno>;
    /// Close every fd but 0, 1, 2, `keep` and the `inherited` fd numbers
    /// (close_range, not close-on-exec).
    fn close_fds_except(
        &mut self,
        keep: &[BorrowedFd<'_>],
        inherited: &[RawFd],
    ) -> Result<(), Errno>;
    fn new_session(&mut self) -> Result<(), Errno>;
    /// Wait for `Go` and the detached mounts it carries; None when the
    /// supervisor went away or spoke nonsense.
    fn recv_go(&mut self, sock: BorrowedFd<'_>) -> Option<Vec<(usize, OwnedFd)>>;
    /// Wait for `Pivot` (after `RootBuilt`); false when the supervisor
    /// went away or spoke nonsense.
    fn recv_pivot(&mut self, sock: BorrowedFd<'_>) -> bool;
    fn send(
        &mut self,
        sock: BorrowedFd<'_>,
        msg: &Message,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), Errno>;
    fn clear_groups(&mut self) -> Result<(), Errno>;
    fn set_gid(&mut self, gid: u32) -> Result<(), Errno>;
    fn set_uid(&mut self, uid: u32) -> Result<(), Errno>;
    /// `SECBIT_NO_SETUID_FIXUP`: the next uid change away from root keeps
    /// the capabilities (hutch init needs them to build the root).
    fn keep_caps_on_setuid(&mut self) -> Result<(), Errno>;
    /// Whether the supervisor's end of the socket is still open.
    fn supervisor_alive(&mut self, sock: BorrowedFd<'_>) -> bool;
    /// `user.max_user_namespaces = 0` in the sandbox's user namespace.
    fn lock_user_namespaces(&mut self) -> Result<(), Errno>;
    fn set_hostname(&mut self, name: &[u8]) -> Result<(), Errno>;
    /// setns(fd, CLONE_NEWUSER): enter a (descendant) user namespace.
    fn enter_user_namespace(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno>;
    /// setns(fd, CLONE_NEWNS): enter a joined mount namespace.
    fn enter_mount_namespace(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno>;
    fn loopback_up(&mut self) -> Result<(), Errno>;
    /// The egress proxy's TCP door, listening in this network namespace.
    fn tcp_door(&mut self) -> Result<OwnedFd, Errno>;
    /// `transparent` egress, in this network namespace: the route for the
    /// synthetic addresses, the resolver's socket, then one capture
    /// listener per port. Errors carry the syscall that failed.
    fn transparent_sockets(&mut self, ports: &[u16]) -> Result<Vec<OwnedFd>, crate::sys::SysError>;
    /// A warm sandbox: wait for the claim (the command and its stdio);
    /// None when the supervisor went away instead.
    fn recv_claim(
        &mut self,
        sock: BorrowedFd<'_>,
        non_default_signals: u64,
    ) -> Result<Option<super::claim::Claimed>, Errno>;
    /// A resident sandbox: clone the per-command init with `flags`
    /// (CLONE_NEW*), fork-like; its pid in hutch init, None in it.
    fn clone_per_command(&mut self, flags: u64) -> Result<Option<libc::pid_t>, Errno>;
    /// Wait for the per-command init `pid` to end, forwarding the
    /// `forwarded` signals (blocked; bit N-1 for signal N) to it.
    fn wait_per_command(&mut self, pid: libc::pid_t, forwarded: u64);
    /// The pipe a per-command init marks its claim on (read end, write
    /// end).
    fn claim_pipe(&mut self) -> Result<(OwnedFd, OwnedFd), Errno>;
    /// A per-command init: it has its claim.
    fn mark_claimed(&mut self, pipe: BorrowedFd<'_>);
    /// hutch init, after a per-command init ended: whether it had a claim.
    fn was_claimed(&mut self, pipe: BorrowedFd<'_>) -> bool;
    /// The inodes of this process's namespaces, by name (`mnt`, `pid`...).
    fn own_namespaces(&mut self) -> Vec<(String, u64)>;
    fn set_rlimit(&mut self, resource: libc::c_int, value: u64) -> Result<(), Errno>;
    fn set_dumpable(&mut self, on: bool) -> Result<(), Errno>;
    /// hutch init's own permitted capability set.
    fn permitted_caps(&mut self) -> Result<u64, Errno>;
    fn block_signals(&mut self, signals: &[libc::c_int]) -> Result<(), Errno>;
    /// Start the workload ([`super::workload`] with this same
    /// syscall layer) and return its pid.
    fn start_workload(&mut self, plan: &ChildPlan, sock: BorrowedFd<'_>) -> Result<i32, Errno>;
    fn confine_init(&mut self, confinement: &crate::confine::Confinement) -> Result<(), Errno>;
    /// Write a `/proc/sys` file (a namespaced sysctl).
    fn write_sysctl(&mut self, path: &CStr, value: &[u8]) -> Result<(), Errno>;
    /// Lower an rlimit's soft value (the hard one stays).
    fn set_rlimit_soft(&mut self, resource: libc::c_int, soft: u64) -> Result<(), Errno>;
    /// PR_SET_CHILD_SUBREAPER (hutch init when it is not pid 1).
    fn set_subreaper(&mut self) -> Result<(), Errno>;
    /// A new terminal of the new root's devpts: (master, the other end),
    /// of `size` (columns, rows) when given.
    fn open_terminal(&mut self, size: Option<(u16, u16)>) -> Result<(OwnedFd, OwnedFd), Errno>;
    /// Send `fd` over a connected Unix socket (SCM_RIGHTS).
    fn send_fd(&mut self, sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<(), Errno>;
    /// Wait for one connection on a listening socket, and its first
    /// datagram.
    fn accept_start(&mut self, listener: BorrowedFd<'_>) -> Result<OwnedFd, Errno>;

    // the workload
    fn reset_signals(&mut self, non_default: u64);
    /// Clear close-on-exec on an inherited fd (it survives execve).
    fn keep_across_exec(&mut self, fd: RawFd) -> Result<(), Errno>;
    fn dup2(&mut self, from: BorrowedFd<'_>, to: RawFd) -> Result<(), Errno>;
    fn openat2(
        &mut self,
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        flags: libc::c_int,
        resolve: u64,
    ) -> Result<OwnedFd, Errno>;
    fn file_type(&mut self, fd: BorrowedFd<'_>) -> Result<libc::mode_t, Errno>;
    fn enter_dir(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno>;
    /// Whether the working directory is reachable from the process's root
    /// (getcwd(2) does not say `(unreachable)`).
    fn cwd_inside_root(&mut self) -> Result<bool, Errno>;
    fn set_umask(&mut self, mask: u32);
    /// TIOCSCTTY on stdin.
    fn set_controlling_tty(&mut self) -> Result<(), Errno>;
    fn set_no_new_privs(&mut self) -> Result<(), Errno>;
    fn drop_bounding_cap(&mut self, cap: u32) -> Result<(), Errno>;
    /// PR_SET_KEEPCAPS: keep the permitted set across the uid switch.
    fn keep_caps(&mut self) -> Result<(), Errno>;
    fn set_groups(&mut self, groups: &[libc::gid_t]) -> Result<(), Errno>;
    fn set_caps(&mut self, effective: u64, permitted: u64, inheritable: u64) -> Result<(), Errno>;
    fn clear_ambient_caps(&mut self) -> Result<(), Errno>;
    fn raise_ambient_cap(&mut self, cap: u32) -> Result<(), Errno>;
    fn landlock_ruleset(&mut self, fs: u64, net: u64, scoped: u64) -> Result<OwnedFd, Errno>;
    fn landlock_path_rule(
        &mut self,
        ruleset: BorrowedFd<'_>,
        parent: BorrowedFd<'_>,
        access: u64,
    ) -> Result<(), Errno>;
    fn landlock_port_rule(
        &mut self,
        ruleset: BorrowedFd<'_>,
        port: u16,
        access: u64,
    ) -> Result<(), Errno>;
    fn landlock_restrict(&mut self, ruleset: BorrowedFd<'_>) -> Result<(), Errno>;
    fn seccomp(&mut self, program: &[sock_filter]) -> Result<(), Errno>;
    /// The same through prctl(PR_SET_SECCOMP) (`security.seccomp_bpf`,
    /// as bubblewrap installs them).
    fn seccomp_prctl(&mut self, program: &[sock_filter]) -> Result<(), Errno>;
    /// execve; returns only on failure.
    fn execve(
        &mut self,
        path: &CStr,
        argv: &[*const libc::c_char],
        envp: &[*const libc::c_char],
    ) -> Errno;
}
