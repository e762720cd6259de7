//! The next request's process, forked ahead (docs/decisions/0007, "s7").
//!
//! A request's process is a fork of the server running the CLI ([`super::
//! child`]). Forking at the request put the fork on its path (the
//! server's `clone3`: 0.1-0.2 ms). The server therefore keeps one
//! *spare*: a process forked while no request runs, waiting on a socket
//! of its own. A request is handed to it (its argv, environment, cwd and
//! the numbers of its descriptors, the descriptors themselves by
//! `SCM_RIGHTS`) and it goes on exactly as a freshly forked one: the same
//! [`super::child::run`]. A spare serves one request; it never ran
//! anything before it. Without a spare (requests in flight, or a spare
//! that died) a request forks as before.
//!
//! Not done, measured: mapping the binary's code in the spare ahead
//! (`MADV_POPULATE_READ` of its 17 MiB of read-only mappings) cut a
//! request's page faults from ~135 to ~98 but cost more CPU than those
//! faults (server-side task-clock per warm `session run` 1.83 ms against
//! 1.50 ms without it): a request touches a small part of the code.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::sys::{Forked, SysError, raw};

/// The process name (`comm`) of a spare while it waits.
const SPARE_NAME: &std::ffi::CStr = c"hutch-spare";

/// A forked process waiting for a request (the server's side).
pub(super) struct Spare {
    pid: libc::pid_t,
    /// None once handed a request (then it is the request's process).
    pidfd: Option<OwnedFd>,
    channel: UnixStream,
}

impl Spare {
    /// Fork a spare (the server is single-threaded: checked by the fork).
    pub(super) fn fork(server_pid: u32) -> Result<Spare, SysError> {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| crate::sys::io_err("socketpair".into(), e))?;
        match crate::sys::fork_single_threaded()? {
            Forked::Child => {
                drop(ours);
                wait_for_request(theirs, server_pid)
            }
            Forked::Parent { pid, pidfd } => Ok(Spare {
                pid,
                pidfd: Some(pidfd),
                channel: ours,
            }),
        }
    }

    /// Hand it a request; its pid and pidfd, now the request's process,
    /// and its channel (which a `resident` one keeps using: it becomes the
    /// [`super::runner`]). On failure (the spare died) the caller forks
    /// instead.
    pub(super) fn hand(
        mut self,
        argv: &[String],
        env: &[(String, Option<String>)],
        cwd: Option<&str>,
        fds: &[(OwnedFd, RawFd)],
        resident: bool,
    ) -> Result<(libc::pid_t, OwnedFd, UnixStream), SysError> {
        super::handoff::send_request(&self.channel, argv, env, cwd, fds, resident)?;
        let pidfd = self.pidfd.take().expect("an unhanded spare has its pidfd");
        let channel = self.channel.try_clone().map_err(|e| crate::sys::io_err("dup(spare channel)".into(), e))?;
        Ok((self.pid, pidfd, channel))
    }
}

impl Drop for Spare {
    /// An unused spare (server ending, or a failed hand-over): killed and
    /// reaped. A handed one is no longer a `Spare` (see [`Spare::hand`]).
    fn drop(&mut self) {
        if let Some(pidfd) = &self.pidfd {
            let _ = raw::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
            let _ = raw::waitpid(self.pid, 0);
        }
    }
}

/// The spare's side; never returns.
fn wait_for_request(channel: UnixStream, server_pid: u32) -> ! {
    if raw::set_pdeathsig(libc::SIGKILL).is_err()
        || std::os::unix::process::parent_id() != server_pid
    {
        raw::exit_now(125);
    }
    // Nothing of the server's but stdio (which the request replaces): a
    // copy of another request's stdin pipe held here would keep that
    // request from ever seeing its end.
    if raw::close_all_except(&[0, 1, 2, channel.as_raw_fd()]).is_err() {
        raw::exit_now(125);
    }
    // Named while idle, so that `ps` and a client's process checks can
    // tell the waiting spare (replaced after every request) from a
    // request's process; a request's process has the server's name.
    let name = raw::thread_name().ok();
    let _ = raw::set_thread_name(SPARE_NAME);
    let Some((handed, fds)) = super::handoff::receive(&channel) else {
        // The server ended or closed this spare.
        raw::exit_now(0);
    };
    if let Some(name) = name.as_ref().and_then(|n| std::ffi::CStr::from_bytes_until_nul(n).ok()) {
        let _ = raw::set_thread_name(name);
    }
    if handed.resident {
        super::runner::serve(channel, handed, fds, server_pid)
    }
    drop(channel);
    if handed.to.len() != fds.len() {
        raw::exit_now(125);
    }
    super::child::run(super::child::ChildSetup {
        argv: handed.argv,
        fds: fds.into_iter().zip(handed.to).collect(),
        cwd: handed.cwd,
        env: handed.env,
        server_pid,
    })
}
