//! The resident request process: one process that serves the session
//! verbs an agent calls in a loop (`session run`, `read`, `write`, `grep`,
//! `glob`) one after another, instead of one process per request
//! (docs/decisions/0007, "s8").
//!
//! A request's process is a fork of the server ([`super::child`]) or the
//! spare forked ahead ([`super::spare`]); both exit after one request. A
//! fresh process pays, on the request's path, the copy-on-write faults of
//! every page the CLI writes and the first touch of the code it runs
//! (~0.4 ms of CPU per warm `session run` here); a process that served the
//! last request has them already. So the first resident request is handed
//! to the spare as usual, and that spare then stays: it serves each next
//! resident request the same way (the same [`crate::cli::main`] on the
//! request's descriptors, environment and cwd) and, instead of exiting,
//! says `done` with the exit code on its channel. Between requests it
//! holds nothing of a request: the request's descriptors are replaced by
//! `/dev/null` before `done` (so the server sees their end), every other
//! descriptor is closed, the environment and cwd are put back to what the
//! server had, and the CLI's per-process flags are reset. It exits rather
//! than go on when it cannot be sure of that: a thread left running, or
//! after [`MAX_REQUESTS`]. One resident request runs at a time; a second
//! one sent meanwhile gets its own process, as any other verb does.
//!
//! While it runs a request it *is* that request's process: `signal` and
//! `cancel` go to it, and when it dies the request ends with its status
//! (and the next resident request starts a new one).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::sys::{SysError, raw};

/// Requests one resident process serves before it exits (and the next
/// one starts): bounds whatever a request leaves in its heap.
const MAX_REQUESTS: u64 = 10_000;

/// Lowest descriptor number the channel (and the server's cwd) move to in
/// the resident process: above every number a request's descriptors may
/// take ([`super::protocol::REPORT_FD_RANGE`]).
const CHANNEL_FD_MIN: RawFd = 100;

/// The session subcommands served by the resident process. Each runs the
/// CLI's session path to its end and returns (no daemon, no terminal of
/// its own, nothing left behind in the process).
const RESIDENT_VERBS: &[&str] = &["run", "read", "write", "grep", "glob"];

/// Whether the request `argv` (hutch's command line without the program)
/// is served by the resident process: `session [GLOBAL...] VERB ...` with
/// VERB in [`RESIDENT_VERBS`], and no terminal.
pub(super) fn is_resident(argv: &[String], pty: bool) -> bool {
    if pty || argv.first().map(String::as_str) != Some("session") {
        return false;
    }
    let mut rest = argv[1..].iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--state-dir" => {
                if rest.next().is_none() {
                    return false;
                }
            }
            "--wait" | "--json" => {}
            verb => {
                // `session run --pty` asks the CLI for a terminal of its
                // own: not a resident request.
                let before_dashes = rest.take_while(|a| a.as_str() != "--");
                return RESIDENT_VERBS.contains(&verb)
                    && !before_dashes.into_iter().any(|a| a == "--pty");
            }
        }
    }
    false
}

/// The resident process, seen from the server.
pub(super) struct Runner {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    channel: UnixStream,
    /// The key of the request it runs now.
    busy: Option<String>,
    /// Its status was collected by the request it ran (it died running
    /// it): nothing left to wait for.
    reaped: bool,
    /// Its channel ended without a `done` (it is exiting).
    closed: bool,
}

impl Runner {
    /// A spare that was just handed a resident request (`key`).
    pub(super) fn from_spare(
        pid: libc::pid_t,
        pidfd: OwnedFd,
        channel: UnixStream,
        key: String,
    ) -> Runner {
        Runner {
            pid,
            pidfd,
            channel,
            busy: Some(key),
            reaped: false,
            closed: false,
        }
    }

    /// Its channel ended without a `done`: nothing more to read there.
    pub(super) fn closed(&self) -> bool {
        self.closed
    }

    pub(super) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    pub(super) fn busy(&self) -> Option<&str> {
        self.busy.as_deref()
    }

    /// Its channel (readable: a `done`, or its end).
    pub(super) fn channel(&self) -> BorrowedFd<'_> {
        self.channel.as_fd()
    }

    /// Its pidfd (readable: it exited).
    pub(super) fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// A copy of its pidfd, for the request it runs (signals, its end).
    pub(super) fn pidfd_copy(&self) -> Result<OwnedFd, SysError> {
        crate::sys::dup_fd(self.pidfd.as_raw_fd())
    }

    /// Hand it the request `key`, as [`super::spare::Spare::hand`] does. An
    /// error means it is gone: drop it and start the request otherwise.
    pub(super) fn hand(
        &mut self,
        key: String,
        argv: &[String],
        env: &[(String, Option<String>)],
        cwd: Option<&str>,
        fds: &[(OwnedFd, RawFd)],
    ) -> Result<(), SysError> {
        super::handoff::send_request(&self.channel, argv, env, cwd, fds, true)?;
        self.busy = Some(key);
        Ok(())
    }

    /// Read its `done` after a request, without waiting: the exit code,
    /// and it is idle again. None when there is none (yet), or its channel
    /// ended (it is exiting; [`Runner::closed`] then).
    pub(super) fn read_done(&mut self) -> Option<i32> {
        if self.closed {
            return None;
        }
        let mut buf = [0u8; 4];
        // Never a blocking read: a process it forked could hold its end
        // of the channel open after it died.
        let n = match raw::recv_now(self.channel.as_fd(), &mut buf) {
            Ok(n) => n,
            Err(crate::sys::Errno::EAGAIN | crate::sys::Errno::EINTR) => return None,
            Err(_) => 0,
        };
        if n != 4 {
            self.closed = true;
            return None;
        }
        self.busy = None;
        Some(i32::from_le_bytes(buf))
    }

    /// It died running a request, whose reap collected its status.
    pub(super) fn reaped(mut self) {
        self.reaped = true;
    }
}

impl Drop for Runner {
    /// Killed and reaped (the server ends, or it is gone or exiting),
    /// unless the request it ran reaped it already.
    fn drop(&mut self) {
        if !self.reaped {
            let _ = raw::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
            let _ = raw::waitpid(self.pid, 0);
        }
    }
}

/// The resident process's side (a spare handed its first resident
/// request); never returns.
pub(super) fn serve(
    channel: UnixStream,
    first: super::handoff::Handed,
    fds: Vec<OwnedFd>,
    server_pid: u32,
) -> ! {
    let channel = match move_up(channel) {
        Ok(c) => c,
        Err(_) => raw::exit_now(125),
    };
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    // The server's cwd, held open: it can be gone back to even if it was
    // removed since (or a request's cwd shadows its path).
    let cwd = match std::fs::File::open(".")
        .map_err(|e| crate::sys::io_err("open(.)".into(), e))
        .and_then(|d| crate::sys::dup_fd_from(d.as_raw_fd(), CHANNEL_FD_MIN))
    {
        Ok(d) => d,
        Err(_) => raw::exit_now(125),
    };
    let mut next = Some((first, fds));
    let mut served = 0u64;
    while let Some((handed, fds)) = next.take() {
        if handed.to.len() != fds.len() {
            raw::exit_now(125);
        }
        let code = run_one(&channel, cwd.as_fd(), handed, fds, server_pid);
        served += 1;
        // The request's descriptors go before `done`, so the server sees
        // the end of its streams with it; the rest of the reset is off the
        // request's path, before the next one is read.
        let released = release_fds(&channel, cwd.as_fd());
        // Exiting, it exits with the request's code: the request's end is
        // the same whether the server reads this `done` or reaps it first.
        if raw::write_all(channel.as_fd(), &code.to_le_bytes()).is_err() {
            raw::exit_now(code);
        }
        if !released || !reset(&env, cwd.as_fd()) || served >= MAX_REQUESTS {
            raw::exit_now(code);
        }
        next = super::handoff::receive(&channel);
    }
    // The server ended or closed the channel.
    raw::exit_now(0)
}

/// One request, as [`super::child::run`] runs it (without exiting).
fn run_one(
    channel: &UnixStream,
    cwd: BorrowedFd<'_>,
    handed: super::handoff::Handed,
    fds: Vec<OwnedFd>,
    server_pid: u32,
) -> i32 {
    if std::os::unix::process::parent_id() != server_pid {
        raw::exit_now(125);
    }
    let mut placed: Vec<(BorrowedFd<'_>, RawFd)> =
        fds.iter().map(AsFd::as_fd).zip(handed.to).collect();
    placed.push((channel.as_fd(), channel.as_raw_fd()));
    placed.push((cwd, cwd.as_raw_fd()));
    if raw::place_fds(&placed).is_err()
        || raw::set_cloexec(channel.as_raw_fd()).is_err()
        || raw::set_cloexec(cwd.as_raw_fd()).is_err()
    {
        // Neither the request's stdio nor the server's can be trusted to
        // say it: the request ends with this process.
        raw::exit_now(125);
    }
    drop(placed);
    // place_fds closed every source number (or reused it as a target):
    // forget them, not close them again.
    for fd in fds {
        std::mem::forget(fd);
    }
    if super::child::take_env_and_cwd(&handed.env, handed.cwd.as_deref()).is_err() {
        return 125;
    }
    let args: Vec<OsString> = handed.argv.into_iter().map(OsString::from).collect();
    let code = crate::cli::main(args);
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    code
}

/// `/dev/null` on 0, 1 and 2 and no other descriptor but the channel (and
/// `cwd`, the server's). False when that failed (then the process exits
/// after its `done`).
fn release_fds(channel: &UnixStream, cwd: BorrowedFd<'_>) -> bool {
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return false;
    };
    let null = OwnedFd::from(null);
    let placed = [
        (null.as_fd(), 0),
        (null.as_fd(), 1),
        (null.as_fd(), 2),
        (channel.as_fd(), channel.as_raw_fd()),
        (cwd, cwd.as_raw_fd()),
    ];
    if raw::place_fds(&placed).is_err()
        || raw::set_cloexec(channel.as_raw_fd()).is_err()
        || raw::set_cloexec(cwd.as_raw_fd()).is_err()
    {
        return false;
    }
    // place_fds closed `null`'s own number: forget it, not close it twice.
    std::mem::forget(null);
    true
}

/// The rest of the way back between requests: the server's environment
/// and cwd, the CLI's per-process flags cleared, one thread and no signal
/// blocked. False when the process cannot be made clean (then it exits).
fn reset(env: &[(OsString, OsString)], cwd: BorrowedFd<'_>) -> bool {
    crate::cli::reset_process_flags();
    // What the last request's stdin had buffered and its verb left unread
    // (`session write` refusing a too-long input stops reading): never
    // the next request's input. Fd 0 is /dev/null now, so this ends.
    let mut stdin = std::io::stdin().lock();
    loop {
        let held = match std::io::BufRead::fill_buf(&mut stdin) {
            Ok(b) => b.len(),
            Err(_) => return false,
        };
        if held == 0 {
            break;
        }
        std::io::BufRead::consume(&mut stdin, held);
    }
    drop(stdin);
    let env_ok = crate::sys::restore_env_single_threaded(env).is_ok();
    let cwd_ok = crate::sys::fchdir(cwd).is_ok();
    // A launch blocks the signals it forwards while it runs and restores
    // the mask when done: one left blocked would be a request's leftover.
    let mask_clear = nix::sys::signal::SigSet::thread_get_mask()
        .is_ok_and(|m| m.iter().next().is_none());
    env_ok && cwd_ok && mask_clear && crate::sys::thread_count() == 1
}

/// The channel moved to a number no request descriptor takes.
fn move_up(channel: UnixStream) -> Result<UnixStream, SysError> {
    let moved = crate::sys::dup_fd_from(channel.as_raw_fd(), CHANNEL_FD_MIN)?;
    Ok(UnixStream::from(moved))
}

#[cfg(test)]
mod tests {
    use super::is_resident;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn the_session_loop_verbs_are_resident() {
        assert!(is_resident(&argv("session run ID -- true"), false));
        assert!(is_resident(
            &argv("session --state-dir /s --json run ID --quiet --result-fd 3 -- true"),
            false
        ));
        assert!(is_resident(&argv("session --wait read ID f"), false));
        assert!(is_resident(&argv("session grep ID pat"), false));
        assert!(is_resident(&argv("session glob ID **/*.py"), false));
        assert!(is_resident(&argv("session write ID f"), false));
        // A `--pty` after the command's `--` is the workload's.
        assert!(is_resident(&argv("session run ID -- prog --pty"), false));
    }

    #[test]
    fn other_verbs_and_terminals_are_not() {
        assert!(!is_resident(&argv("run -- true"), false));
        assert!(!is_resident(&argv("session create --from ."), false));
        assert!(!is_resident(&argv("session warm ID 2"), false));
        assert!(!is_resident(&argv("session close ID"), false));
        assert!(!is_resident(&argv("session run ID -- true"), true));
        assert!(!is_resident(&argv("session run ID --pty -- sh"), false));
        assert!(!is_resident(&argv("session --state-dir"), false));
        assert!(!is_resident(&argv("session"), false));
        assert!(!is_resident(&[], false));
    }
}
