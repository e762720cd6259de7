//! The next request's process, forked ahead (docs/decisions/0007, "s7").
//!
//! A request's process is a fork of the server running the CLI ([`super::
//! child`]). Forking at the request put the fork on its path, and a fresh
//! fork also maps the binary's code page by page as it faults on it (fork
//! copies no page-table entries of file mappings): about a fifth of a
//! warm `session run` request's CPU in the request process (perf). The
//! server therefore keeps one *spare*: a process forked while no request
//! runs, which maps the binary's code ahead (`MADV_POPULATE_READ`, in
//! chunks, stopping as soon as a request is waiting) and then waits on a
//! socket of its own. A request is handed to it (its argv, environment,
//! cwd and the numbers of its descriptors, the descriptors themselves by
//! `SCM_RIGHTS`) and it goes on exactly as a freshly forked one: the same
//! [`super::child::run`]. A spare serves one request; it never ran
//! anything before it. Without a spare (requests in flight, or a spare
//! that died) a request forks as before.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

use crate::sys::{Forked, SysError, raw};

/// What the spare gets besides the descriptors.
#[derive(Serialize, Deserialize)]
struct Handed {
    argv: Vec<String>,
    env: Vec<(String, Option<String>)>,
    cwd: Option<String>,
    /// The number each descriptor sent along gets, in order.
    to: Vec<RawFd>,
}

/// Bytes of code mapped between two looks at the socket.
const POPULATE_CHUNK: usize = 256 << 10;

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

    /// Hand it a request; its pid and pidfd, now the request's process.
    /// On failure (the spare died) the caller forks instead.
    pub(super) fn hand(
        mut self,
        argv: &[String],
        env: &[(String, Option<String>)],
        cwd: Option<&str>,
        fds: &[(OwnedFd, RawFd)],
    ) -> Result<(libc::pid_t, OwnedFd), SysError> {
        let handed = Handed {
            argv: argv.to_vec(),
            env: env.to_vec(),
            cwd: cwd.map(str::to_string),
            to: fds.iter().map(|(_, n)| *n).collect(),
        };
        let body = serde_json::to_vec(&handed).expect("a request serializes");
        let mut msg = Vec::with_capacity(4 + body.len());
        msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
        msg.extend_from_slice(&body);
        let borrowed: Vec<_> = fds.iter().map(|(fd, _)| fd.as_fd()).collect();
        let sent = crate::sys::socket::send_stream(self.channel.as_fd(), &msg, &borrowed)?;
        (&self.channel)
            .write_all(&msg[sent..])
            .map_err(|e| crate::sys::io_err("write(spare)".into(), e))?;
        let pidfd = self.pidfd.take().expect("an unhanded spare has its pidfd");
        Ok((self.pid, pidfd))
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
    populate_code(&channel);
    let Some((handed, fds)) = receive(&channel) else {
        // The server ended or closed this spare.
        raw::exit_now(0);
    };
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

/// The request (None at the end of the stream or on a malformed one).
fn receive(channel: &UnixStream) -> Option<(Handed, Vec<OwnedFd>)> {
    let mut data = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if data.len() >= 4 {
            let len = u32::from_le_bytes(data[..4].try_into().ok()?) as usize;
            if len > super::protocol::MAX_LINE * 2 {
                return None;
            }
            if data.len() >= 4 + len {
                let handed = serde_json::from_slice(&data[4..4 + len]).ok()?;
                return Some((handed, fds));
            }
        }
        let (n, got) = crate::sys::socket::recv_stream(channel.as_fd(), &mut buf).ok()?;
        fds.extend(got);
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
}

/// Map this process's code and read-only data of the hutch binary
/// (the mappings of its own executable file), a chunk at a time, until
/// done or a request is waiting on `channel`. Best effort: an older
/// kernel without `MADV_POPULATE_READ` just faults as before.
fn populate_code(channel: &UnixStream) {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let exe = exe.to_string_lossy().into_owned();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        // offset, dev, inode, then the path.
        let path = f.nth(3).unwrap_or("");
        if path != exe || !perms.starts_with('r') || perms.as_bytes().get(1) == Some(&b'w') {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        else {
            continue;
        };
        let mut at = start;
        while at < end {
            if matches!(raw::poll_one(channel.as_fd(), libc::POLLIN, 0), Ok(n) if n > 0) {
                return;
            }
            let len = POPULATE_CHUNK.min(end - at);
            if crate::sys::populate_read(at, len).is_err() {
                return;
            }
            at += len;
        }
    }
}
