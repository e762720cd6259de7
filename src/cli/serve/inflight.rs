//! One request in flight: its process, its pipes, what is held of its
//! stdin and of its envelope, and how it ends (reaped, pipes drained,
//! then one `exit` event).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::protocol::{self, Ended};
use crate::cli::machine::{ErrorKind, MachineError};
use crate::sys::{Errno, SysError, raw};

/// How long the pipes of a request whose hutch has exited may stay open
/// (a process that escaped holding them): then they are closed unread.
const DRAIN: Duration = Duration::from_secs(2);

/// What an `argv` request asked for.
pub(super) struct Spawn {
    pub argv: Vec<String>,
    pub stdin: bool,
    pub report_fd: Option<i32>,
    pub json_stdout: bool,
    pub cwd: Option<String>,
    pub env: Vec<(String, Option<String>)>,
    /// `"pty": true`: stdin is a terminal of this size (columns, rows).
    pub pty: Option<(u16, u16)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Stream {
    Stdout,
    Stderr,
    Report,
}

/// The server's ends of a request's pipes.
pub(super) struct Pipes {
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    report: Option<OwnedFd>,
    /// `"pty": true`: the server's copy of the terminal's other end, to
    /// resize it.
    terminal: Option<OwnedFd>,
}

impl Pipes {
    /// The server's ends, and the child's (each with the number it gets).
    pub(super) fn new(spec: &Spawn) -> Result<(Pipes, Vec<(OwnedFd, RawFd)>), SysError> {
        let pipe = || raw::pipe(0).map_err(|e| SysError::new("pipe2(O_CLOEXEC)", e));
        let mut child = Vec::with_capacity(4);
        let mut terminal = None;
        let stdin = if let Some(size) = spec.pty {
            let t = super::terminal::open(size)?;
            child.push((t.stdin, 0));
            terminal = Some(t.resize);
            Some(t.master)
        } else if spec.stdin {
            let (r, w) = pipe()?;
            set_nonblocking(&w)?;
            child.push((r, 0));
            Some(w)
        } else {
            let null = std::fs::File::open("/dev/null")
                .map_err(|e| crate::sys::io_err("open(/dev/null)".into(), e))?;
            child.push((OwnedFd::from(null), 0));
            None
        };
        let (out_r, out_w) = pipe()?;
        child.push((out_w, 1));
        let (err_r, err_w) = pipe()?;
        child.push((err_w, 2));
        let report = match spec.report_fd {
            Some(n) => {
                let (r, w) = pipe()?;
                child.push((w, n));
                Some(r)
            }
            None => None,
        };
        Ok((
            Pipes {
                stdin,
                stdout: Some(out_r),
                stderr: Some(err_r),
                report,
                terminal,
            },
            child,
        ))
    }
}

fn set_nonblocking(fd: &OwnedFd) -> Result<(), SysError> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
        .map(drop)
        .map_err(|e| SysError::new("fcntl(F_SETFL, O_NONBLOCK)", e))
}

pub(super) struct InFlight {
    id: Value,
    pid: libc::pid_t,
    /// Until the process is reaped.
    pidfd: Option<OwnedFd>,
    pipes: Pipes,
    stdin_pending: Vec<u8>,
    stdin_eof: bool,
    /// `json_stdout`: stdout is held (up to the envelope cap) instead of
    /// streamed, for its last line to become the exit's envelope.
    holding_stdout: bool,
    stdout_held: Vec<u8>,
    /// The report descriptor's partial line, and whether it went over the
    /// cap (the rest of that line is then dropped).
    report_line: Vec<u8>,
    report_overflow: bool,
    envelope: Option<Value>,
    ended: Option<Ended>,
    cancelled: bool,
    kill_at: Option<Instant>,
    drain_until: Option<Instant>,
}

impl InFlight {
    pub(super) fn new(
        id: Value,
        pid: libc::pid_t,
        pidfd: OwnedFd,
        pipes: Pipes,
        json_stdout: bool,
    ) -> Self {
        InFlight {
            id,
            pid,
            pidfd: Some(pidfd),
            pipes,
            stdin_pending: Vec::new(),
            stdin_eof: false,
            holding_stdout: json_stdout,
            stdout_held: Vec::new(),
            report_line: Vec::new(),
            report_overflow: false,
            envelope: None,
            ended: None,
            cancelled: false,
            kill_at: None,
            drain_until: None,
        }
    }

    pub(super) fn id(&self) -> &Value {
        &self.id
    }

    pub(super) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    pub(super) fn outputs(&self) -> impl Iterator<Item = (Stream, BorrowedFd<'_>)> {
        [
            (Stream::Stdout, &self.pipes.stdout),
            (Stream::Stderr, &self.pipes.stderr),
            (Stream::Report, &self.pipes.report),
        ]
        .into_iter()
        .filter_map(|(s, fd)| fd.as_ref().map(|fd| (s, fd.as_fd())))
    }

    pub(super) fn stdin_to_write(&self) -> Option<BorrowedFd<'_>> {
        self.pipes
            .stdin
            .as_ref()
            .filter(|_| !self.stdin_pending.is_empty())
            .map(AsFd::as_fd)
    }

    pub(super) fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(AsFd::as_fd)
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        match (self.kill_at, self.drain_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Read one chunk of `stream`: the events it makes.
    pub(super) fn read(&mut self, stream: Stream, buf: &mut [u8]) -> Vec<Vec<u8>> {
        let slot = match stream {
            Stream::Stdout => &mut self.pipes.stdout,
            Stream::Stderr => &mut self.pipes.stderr,
            Stream::Report => &mut self.pipes.report,
        };
        let Some(fd) = slot else { return Vec::new() };
        let n = raw::read(fd.as_fd(), buf).unwrap_or(0);
        if n == 0 {
            *slot = None;
            if stream == Stream::Report && !self.report_line.is_empty() {
                let line = std::mem::take(&mut self.report_line);
                return self.report_lines(&line, true);
            }
            return Vec::new();
        }
        let data = &buf[..n];
        match stream {
            Stream::Stdout if self.holding_stdout => {
                if self.stdout_held.len() + n > protocol::MAX_ENVELOPE {
                    // Too big to be an envelope: stream it as it is.
                    self.holding_stdout = false;
                    let mut held = std::mem::take(&mut self.stdout_held);
                    held.extend_from_slice(data);
                    return chunks(&self.id, "stdout", &held);
                }
                self.stdout_held.extend_from_slice(data);
                Vec::new()
            }
            Stream::Stdout => chunks(&self.id, "stdout", data),
            Stream::Stderr => chunks(&self.id, "stderr", data),
            Stream::Report => self.report_lines(data, false),
        }
    }

    /// Split report descriptor bytes into lines: the envelope is kept for
    /// the exit event, any other line is a `report` event.
    fn report_lines(&mut self, data: &[u8], at_eof: bool) -> Vec<Vec<u8>> {
        let mut events = Vec::new();
        let mut rest = data;
        loop {
            let (line, more) = match rest.iter().position(|b| *b == b'\n') {
                Some(pos) => (&rest[..pos], Some(&rest[pos + 1..])),
                None if at_eof && !rest.is_empty() => (rest, None),
                None => break,
            };
            if self.report_overflow {
                self.report_overflow = false;
            } else {
                let mut whole = std::mem::take(&mut self.report_line);
                whole.extend_from_slice(line);
                if !whole.is_empty() {
                    match protocol::as_envelope(&whole) {
                        Some(env) => self.envelope = Some(env),
                        None => events.push(protocol::report(&self.id, &whole)),
                    }
                }
            }
            match more {
                Some(m) => rest = m,
                None => return events,
            }
        }
        if !self.report_overflow {
            if self.report_line.len() + rest.len() > protocol::MAX_ENVELOPE {
                self.report_line = Vec::new();
                self.report_overflow = true;
            } else {
                self.report_line.extend_from_slice(rest);
            }
        }
        events
    }

    /// Queue stdin for the process (`eof`: close its stdin once written).
    pub(super) fn give_stdin(&mut self, data: Vec<u8>, eof: bool) -> Result<(), MachineError> {
        if self.pipes.stdin.is_none() || self.stdin_eof {
            return Err(protocol::server_error(
                ErrorKind::Usage,
                format!(
                    "request {} takes no more stdin (it was started without \"stdin\": true, its stdin was closed, or its process stopped reading)",
                    protocol::key(&self.id)
                ),
                "start the request with \"stdin\": true and send data before \"eof\"",
            ));
        }
        if self.stdin_pending.len() + data.len() > protocol::MAX_STDIN_PENDING {
            return Err(protocol::server_error(
                ErrorKind::TooLarge,
                format!(
                    "request {}: more than {} bytes of stdin are waiting for its process to read them; this data was dropped",
                    protocol::key(&self.id),
                    protocol::MAX_STDIN_PENDING
                ),
                "send stdin in smaller pieces as the process reads it",
            ));
        }
        self.stdin_pending.extend_from_slice(&data);
        if eof && self.pipes.terminal.is_some() {
            // A terminal's end of input is ^D, and it stays open: closing
            // the master would hang it up, which discards what hutch has
            // not read yet.
            self.stdin_pending.push(super::terminal::EOF_CHAR);
        }
        self.stdin_eof = eof;
        self.write_stdin();
        Ok(())
    }

    /// Write what the pipe takes now (it is non-blocking).
    pub(super) fn write_stdin(&mut self) {
        let Some(fd) = &self.pipes.stdin else { return };
        while !self.stdin_pending.is_empty() {
            match raw::write(fd.as_fd(), &self.stdin_pending) {
                Ok(n) => {
                    self.stdin_pending.drain(..n);
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return,
                Err(_) => {
                    // EPIPE: the process stopped reading; the rest is moot.
                    self.stdin_pending = Vec::new();
                    self.pipes.stdin = None;
                    self.stdin_eof = true;
                    return;
                }
            }
        }
        if self.stdin_eof && self.pipes.terminal.is_none() {
            self.pipes.stdin = None;
        }
    }

    /// A `"pty": true` request's terminal takes a new size, and its hutch
    /// is told (SIGWINCH: it copies the size to the sandbox's terminal).
    pub(super) fn resize(&mut self, cols: u16, rows: u16) -> Result<(), MachineError> {
        let Some(t) = &self.pipes.terminal else {
            return Err(protocol::server_error(
                ErrorKind::Usage,
                format!(
                    "request {} has no terminal to resize",
                    protocol::key(&self.id)
                ),
                "start it with \"pty\": true (and --pty in its argv)",
            ));
        };
        super::terminal::resize(t.as_fd(), cols, rows).map_err(|e| {
            protocol::server_error(ErrorKind::Io, e.to_string(), "retry, or cancel the request")
        })?;
        self.signal(libc::SIGWINCH)
    }

    pub(super) fn signal(&mut self, sig: i32) -> Result<(), MachineError> {
        let ended = || {
            protocol::server_error(
                ErrorKind::NotFound,
                format!(
                    "request {}'s process has already exited",
                    protocol::key(&self.id)
                ),
                "its exit event follows",
            )
        };
        let Some(pidfd) = &self.pidfd else {
            return Err(ended());
        };
        crate::sys::pidfd_send_signal(pidfd.as_fd(), sig).map_err(|e| {
            if e.errno == Errno::ESRCH {
                ended()
            } else {
                protocol::server_error(ErrorKind::Io, e.to_string(), "retry, or cancel the request")
            }
        })
    }

    /// TERM now, KILL after `grace` (hutch ends its sandbox on TERM).
    pub(super) fn cancel(&mut self, grace: Duration) {
        if self.pidfd.is_none() || self.cancelled {
            return;
        }
        self.cancelled = true;
        let _ = self.signal(libc::SIGTERM);
        self.kill_at = Some(Instant::now() + grace);
    }

    /// The resident process said this request is done with `code` (it
    /// stays, so there is nothing to reap): as [`InFlight::reap`] after an
    /// exit with that code.
    pub(super) fn finished_by_runner(&mut self, code: i32) {
        self.ended = Some(Ended {
            code: Some(code),
            signal: None,
            cancelled: self.cancelled,
        });
        self.after_end(DRAIN);
    }

    /// The process exited (its pidfd is readable): reap it.
    pub(super) fn reap(&mut self, drain: Duration) {
        match raw::waitpid(self.pid, libc::WNOHANG) {
            Ok(Some((_, status))) => {
                self.ended = Some(Ended {
                    code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
                    signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
                    cancelled: self.cancelled,
                });
            }
            Ok(None) => return,
            Err(_) => {
                self.ended = Some(Ended {
                    code: None,
                    signal: None,
                    cancelled: self.cancelled,
                })
            }
        }
        self.after_end(drain);
    }

    /// Its process is over (or, resident, done with it): no more signals
    /// or stdin; its outputs are read to their end or for `drain` at most.
    fn after_end(&mut self, drain: Duration) {
        self.pidfd = None;
        self.kill_at = None;
        self.pipes.stdin = None;
        self.stdin_pending = Vec::new();
        self.drain_until = Some(Instant::now() + drain.min(DRAIN));
    }

    /// Ended (its exit event waits only for its outputs).
    pub(super) fn ended(&self) -> bool {
        self.ended.is_some()
    }

    pub(super) fn on_deadline(&mut self, now: Instant) {
        if self.kill_at.is_some_and(|t| t <= now) {
            self.kill_at = None;
            let _ = self.signal(libc::SIGKILL);
        }
        if self.drain_until.is_some_and(|t| t <= now) {
            self.drain_until = None;
            self.pipes.stdout = None;
            self.pipes.stderr = None;
            self.pipes.report = None;
        }
    }

    /// Reaped, and every output read to its end (or given up on).
    pub(super) fn done(&self) -> bool {
        self.ended.is_some()
            && self.pipes.stdout.is_none()
            && self.pipes.stderr.is_none()
            && self.pipes.report.is_none()
    }

    /// The last events: held stdout, then `exit`.
    pub(super) fn finish(mut self) -> Vec<Vec<u8>> {
        let mut events = Vec::new();
        if self.holding_stdout && !self.stdout_held.is_empty() {
            let held = std::mem::take(&mut self.stdout_held);
            let body = held.strip_suffix(b"\n").unwrap_or(&held);
            let start = body
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |p| p + 1);
            match protocol::as_envelope(&body[start..]) {
                Some(env) => {
                    self.envelope = Some(env);
                    events.extend(chunks(&self.id, "stdout", &held[..start]));
                }
                None => events.extend(chunks(&self.id, "stdout", &held)),
            }
        }
        let ended = self.ended.take().unwrap_or(Ended {
            code: None,
            signal: None,
            cancelled: self.cancelled,
        });
        events.push(protocol::exit(&self.id, &ended, self.envelope.take()));
        events
    }

    /// KILL and reap at once (the server is failing).
    pub(super) fn kill_and_reap(&mut self) {
        if self.pidfd.take().is_some() {
            let _ = raw::kill(self.pid, libc::SIGKILL);
            let _ = raw::waitpid(self.pid, 0);
        }
    }
}

/// `data` as events of at most [`protocol::CHUNK`] bytes each.
fn chunks(id: &Value, stream: &str, data: &[u8]) -> Vec<Vec<u8>> {
    data.chunks(protocol::CHUNK)
        .map(|c| protocol::output(id, stream, c))
        .collect()
}
