//! `hutch serve`: one long-lived hutch per client, speaking JSON lines on
//! its stdin/stdout (docs/machine.md, "hutch serve"; the choice of a
//! forking server: docs/decisions/0007-serve-fork-per-request.md).
//!
//! The server is one thread and one poll loop. Each `argv` request is a
//! fork of the server running the CLI's entry point on its pipes
//! ([`child`]): every verb, with the CLI's exact behaviour, envelope and
//! exit status, without paying an execve, the dynamic loader or Python's
//! fork per call. The server stays single-threaded so a fork is always
//! sound. The session loop's verbs go to one resident request process
//! instead, which serves them one after another ([`runner`]). It ends when
//! its stdin closes: what it started is ended (TERM, then KILL after a
//! grace) and reaped first.

mod child;
mod handoff;
mod inflight;
mod protocol;
mod runner;
mod spare;
mod terminal;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use serde_json::Value;

use crate::cli::machine::ErrorKind;
use crate::sys::{Forked, raw};
use inflight::{InFlight, Stream};
use protocol::Request;

/// Time a cancelled request (or one still running when the client
/// leaves) gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(2);

const USAGE: &str = "usage: hutch serve   (JSON lines on stdin/stdout; docs/machine.md, \"hutch serve\")";

/// `hutch serve`.
pub(crate) fn main(args: Vec<OsString>) -> i32 {
    match args.first().and_then(|a| a.to_str()) {
        None => {}
        Some("--help" | "-h") => {
            println!("{USAGE}");
            return 0;
        }
        Some(other) => {
            eprintln!("hutch serve: unexpected argument {other:?}; {USAGE}");
            return 125;
        }
    }
    let threads = crate::sys::thread_count();
    if threads != 1 {
        eprintln!(
            "hutch serve: the server must start single-threaded to fork requests safely, it has {threads} threads (an internal error: report it)"
        );
        return 125;
    }
    let mut server = Server::new();
    server.send(&protocol::hello(None));
    server.run();
    0
}

/// Which descriptor of which request a poll entry is.
#[derive(Clone, Copy)]
enum Slot {
    Requests,
    Out(usize, Stream),
    StdinPipe(usize),
    Exited(usize),
    /// The resident process's channel, while it runs a request.
    RunnerDone,
    /// The resident process's pidfd, while it waits for one.
    RunnerGone,
}

struct Server {
    /// The client's request stream (fd 0), until EOF.
    input: Option<OwnedFd>,
    /// Bytes of a request line read so far.
    line: Vec<u8>,
    /// Skipping the rest of a line that went over the cap.
    discarding: bool,
    /// The client's event stream (fd 1); false once it broke.
    output_ok: bool,
    requests: Vec<InFlight>,
    by_key: HashMap<String, usize>,
    server_pid: u32,
    /// The next request's process, forked ahead while none runs
    /// ([`spare`]).
    spare: Option<spare::Spare>,
    /// The process that serves the session loop's verbs one after another
    /// ([`runner`]), once the first such request made one.
    runner: Option<runner::Runner>,
}

impl Server {
    fn new() -> Self {
        let input = crate::sys::dup_fd(0).ok();
        Server {
            input,
            line: Vec::new(),
            discarding: false,
            output_ok: true,
            requests: Vec::new(),
            by_key: HashMap::new(),
            server_pid: std::process::id(),
            spare: None,
            runner: None,
        }
    }

    /// Write one event line; a client that stopped reading ends the server.
    fn send(&mut self, line: &[u8]) {
        if !self.output_ok {
            return;
        }
        if raw::write_all(std::io::stdout().as_fd(), line).is_err() {
            self.output_ok = false;
            self.input = None;
            self.shutdown();
        }
    }

    fn run(&mut self) {
        let mut buf = vec![0u8; protocol::CHUNK];
        loop {
            if self.input.is_none() && self.requests.is_empty() {
                self.spare = None;
                self.runner = None;
                return;
            }
            // Forked while nothing runs, so the fork is on no request's
            // path.
            if self.spare.is_none() && self.requests.is_empty() && self.input.is_some() {
                self.spare = spare::Spare::fork(self.server_pid).ok();
            }
            let (slots, ready) = match self.poll() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("hutch serve: poll => {e:?} (ending the server)");
                    self.input = None;
                    self.shutdown();
                    self.reap_all_now();
                    return;
                }
            };
            for (slot, revents) in slots.into_iter().zip(ready) {
                if revents.is_empty() {
                    continue;
                }
                match slot {
                    Slot::Requests => self.read_requests(&mut buf),
                    Slot::Out(i, stream) => {
                        let events = self.requests[i].read(stream, &mut buf);
                        for e in events {
                            self.send(&e);
                        }
                    }
                    Slot::StdinPipe(i) => self.requests[i].write_stdin(),
                    Slot::Exited(i) => self.reap(i),
                    Slot::RunnerDone => self.runner_done(),
                    Slot::RunnerGone => self.runner = None,
                }
            }
            self.deadlines();
            self.finish_done();
        }
    }

    /// poll(2) over the request stream and every request's descriptors:
    /// which slots, and what each reported.
    #[allow(clippy::type_complexity)]
    fn poll(&self) -> Result<(Vec<Slot>, Vec<PollFlags>), nix::errno::Errno> {
        let mut slots = Vec::new();
        let mut fds = Vec::new();
        if let Some(input) = &self.input {
            slots.push(Slot::Requests);
            fds.push(PollFd::new(input.as_fd(), PollFlags::POLLIN));
        }
        for (i, r) in self.requests.iter().enumerate() {
            for (stream, fd) in r.outputs() {
                slots.push(Slot::Out(i, stream));
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
            if let Some(fd) = r.stdin_to_write() {
                slots.push(Slot::StdinPipe(i));
                fds.push(PollFd::new(fd, PollFlags::POLLOUT));
            }
            if let Some(fd) = r.pidfd() {
                slots.push(Slot::Exited(i));
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
        }
        if let Some(r) = &self.runner {
            if r.busy().is_some() && !r.closed() {
                slots.push(Slot::RunnerDone);
                fds.push(PollFd::new(r.channel(), PollFlags::POLLIN));
            } else if r.busy().is_none() {
                slots.push(Slot::RunnerGone);
                fds.push(PollFd::new(r.pidfd(), PollFlags::POLLIN));
            }
        }
        let now = Instant::now();
        let timeout = self
            .requests
            .iter()
            .filter_map(InFlight::next_deadline)
            .min()
            .map(|d| {
                let ms = d.saturating_duration_since(now).as_millis() + 1;
                PollTimeout::try_from(ms.min(60_000) as i32).unwrap_or(PollTimeout::MAX)
            })
            .unwrap_or(PollTimeout::NONE);
        loop {
            match nix::poll::poll(&mut fds, timeout) {
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
        let ready = fds
            .iter()
            .map(|f| f.revents().unwrap_or(PollFlags::POLLNVAL))
            .collect();
        Ok((slots, ready))
    }

    /// Read what the client sent and act on each complete line.
    fn read_requests(&mut self, buf: &mut [u8]) {
        let Some(input) = &self.input else { return };
        let n = raw::read(input.as_fd(), buf).unwrap_or_default();
        if n == 0 {
            // The client is gone (or done): end what it started, then exit.
            self.input = None;
            self.shutdown();
            return;
        }
        let mut rest = &buf[..n];
        while let Some(pos) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(pos);
            rest = &tail[1..];
            if self.discarding {
                self.discarding = false;
                continue;
            }
            if self.line.len() + head.len() > protocol::MAX_LINE {
                self.line.clear();
                self.too_long();
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            line.extend_from_slice(head);
            if !line.iter().all(u8::is_ascii_whitespace) {
                self.handle(&line);
            }
        }
        if !self.discarding {
            if self.line.len() + rest.len() > protocol::MAX_LINE {
                self.line = Vec::new();
                self.discarding = true;
                self.too_long();
            } else {
                self.line.extend_from_slice(rest);
            }
        }
    }

    fn too_long(&mut self) {
        let e = protocol::server_error(
            ErrorKind::TooLarge,
            format!(
                "a request line is longer than {} bytes; it was dropped",
                protocol::MAX_LINE
            ),
            "send stdin in several \"stdin\" messages",
        );
        self.send(&protocol::error(&Value::Null, None, &e));
    }

    fn handle(&mut self, line: &[u8]) {
        let request = match protocol::parse(line) {
            Ok(r) => r,
            Err(bad) => {
                self.send(&protocol::error(&bad.id, bad.verb.as_deref(), &bad.error));
                return;
            }
        };
        match request {
            Request::Hello { id, protocol: p } => match p {
                Some(v) if v != u64::from(protocol::PROTOCOL) => {
                    let e = protocol::server_error(
                        ErrorKind::Usage,
                        format!(
                            "this server speaks protocol {}, not {v}",
                            protocol::PROTOCOL
                        ),
                        "use a client for this protocol version, or a hutch that speaks yours",
                    );
                    self.send(&protocol::error(&id, Some("hello"), &e));
                }
                _ => self.send(&protocol::hello(Some(&id))),
            },
            Request::Argv {
                id,
                argv,
                stdin,
                report_fd,
                json_stdout,
                cwd,
                env,
                pty,
            } => {
                if self.input.is_none() {
                    return;
                }
                let key = protocol::key(&id);
                if self.by_key.contains_key(&key) {
                    let e = protocol::server_error(
                        ErrorKind::Usage,
                        format!("request {key} is already in flight"),
                        "give each request its own id",
                    );
                    self.send(&protocol::error(&id, Some("argv"), &e));
                    return;
                }
                if self.requests.len() >= protocol::MAX_IN_FLIGHT {
                    let e = protocol::server_error(
                        ErrorKind::Refused,
                        format!(
                            "{} requests are in flight, the most one server runs",
                            protocol::MAX_IN_FLIGHT
                        ),
                        "wait for an exit event before sending more",
                    );
                    self.send(&protocol::error(&id, Some("argv"), &e));
                    return;
                }
                let spec = inflight::Spawn {
                    argv,
                    // A terminal is written to like a stdin pipe.
                    stdin: stdin || pty.is_some(),
                    pty,
                    report_fd,
                    json_stdout,
                    cwd,
                    env,
                };
                match self.spawn(id.clone(), &key, spec) {
                    Ok(r) => {
                        let pid = r.pid();
                        self.by_key.insert(key, self.requests.len());
                        self.requests.push(r);
                        self.send(&protocol::started(&id, pid));
                    }
                    Err(e) => {
                        let e = protocol::server_error(
                            ErrorKind::Setup,
                            format!("could not start the request: {e}"),
                            "the host is out of processes or descriptors; retry later",
                        );
                        self.send(&protocol::error(&id, Some("argv"), &e));
                    }
                }
            }
            Request::Stdin { id, data, eof } => {
                let err = match self.find(&id) {
                    Some(i) => self.requests[i].give_stdin(data, eof).err(),
                    None => Some(not_in_flight(&id)),
                };
                if let Some(e) = err {
                    self.send(&protocol::error(&id, Some("stdin"), &e));
                }
            }
            Request::Signal { id, signal } => {
                let err = match self.find(&id) {
                    Some(i) => self.requests[i].signal(signal).err(),
                    None => Some(not_in_flight(&id)),
                };
                if let Some(e) = err {
                    self.send(&protocol::error(&id, Some("signal"), &e));
                }
            }
            Request::Resize { id, cols, rows } => {
                let err = match self.find(&id) {
                    Some(i) => self.requests[i].resize(cols, rows).err(),
                    None => Some(not_in_flight(&id)),
                };
                if let Some(e) = err {
                    self.send(&protocol::error(&id, Some("resize"), &e));
                }
            }
            Request::Cancel { id } => match self.find(&id) {
                Some(i) => self.requests[i].cancel(GRACE),
                None => {
                    let e = not_in_flight(&id);
                    self.send(&protocol::error(&id, Some("cancel"), &e));
                }
            },
        }
    }

    fn find(&self, id: &Value) -> Option<usize> {
        self.by_key.get(&protocol::key(id)).copied()
    }

    /// The request's process: the resident one for the session loop's
    /// verbs when it is free (see [`runner`]), else the spare (see
    /// [`spare`]; it becomes the resident one for such a verb when there is
    /// none), else a fork (see [`child`]).
    fn spawn(
        &mut self,
        id: Value,
        key: &str,
        spec: inflight::Spawn,
    ) -> Result<InFlight, crate::sys::SysError> {
        let (parent, child_fds) = inflight::Pipes::new(&spec)?;
        let resident = runner::is_resident(&spec.argv, spec.pty.is_some());
        if resident
            && let Some(r) = &mut self.runner
            && r.busy().is_none()
        {
            let handed = r.pidfd_copy().and_then(|pidfd| {
                r.hand(key.to_string(), &spec.argv, &spec.env, spec.cwd.as_deref(), &child_fds)
                    .map(|()| pidfd)
            });
            match handed {
                Ok(pidfd) => {
                    drop(child_fds);
                    return Ok(InFlight::new(id, r.pid(), pidfd, parent, spec.json_stdout));
                }
                // Gone (or its channel broke): start the request
                // otherwise, and a new resident process with it.
                Err(_) => self.runner = None,
            }
        }
        let resident = resident && self.runner.is_none();
        if let Some(spare) = self.spare.take()
            && let Ok((pid, pidfd, channel)) = spare.hand(
                &spec.argv,
                &spec.env,
                spec.cwd.as_deref(),
                &child_fds,
                resident,
            )
        {
            drop(child_fds);
            if resident {
                let ours = crate::sys::dup_fd(std::os::fd::AsRawFd::as_raw_fd(&pidfd))?;
                self.runner = Some(runner::Runner::from_spare(pid, ours, channel, key.to_string()));
            }
            return Ok(InFlight::new(id, pid, pidfd, parent, spec.json_stdout));
        }
        match crate::sys::fork_single_threaded()? {
            Forked::Child => {
                drop(parent);
                child::run(child::ChildSetup {
                    argv: spec.argv,
                    fds: child_fds,
                    cwd: spec.cwd,
                    env: spec.env,
                    server_pid: self.server_pid,
                })
            }
            Forked::Parent { pid, pidfd } => {
                drop(child_fds);
                Ok(InFlight::new(id, pid, pidfd, parent, spec.json_stdout))
            }
        }
    }

    /// Request `i`'s process exited: reap it. When it was the resident
    /// process (it died running the request), that status was its last.
    fn reap(&mut self, i: usize) {
        let key = protocol::key(self.requests[i].id());
        if let Some(r) = &mut self.runner
            && r.busy() == Some(key.as_str())
        {
            // It may have said `done` before it exited: that is the
            // request's end.
            if let Some(code) = r.read_done() {
                self.requests[i].finished_by_runner(code);
                return;
            }
        }
        self.requests[i].reap(GRACE);
        if self.requests[i].ended() {
            let key = protocol::key(self.requests[i].id());
            if let Some(r) = self.runner.take_if(|r| r.busy() == Some(key.as_str())) {
                r.reaped();
            }
        }
    }

    /// The resident process said `done` (or closed its channel: it is
    /// exiting, and the request it ran ends by its pidfd).
    fn runner_done(&mut self) {
        let Some(r) = &mut self.runner else { return };
        let Some(key) = r.busy().map(str::to_string) else {
            return;
        };
        // Without a `done` (its channel ended: it is exiting) the request
        // ends by its pidfd (the request's copy), reaped then.
        if let Some(code) = r.read_done()
            && let Some(&i) = self.by_key.get(&key)
        {
            self.requests[i].finished_by_runner(code);
        }
    }

    /// The client left: every request still running gets TERM, then KILL
    /// after the grace.
    fn shutdown(&mut self) {
        self.spare = None;
        self.runner.take_if(|r| r.busy().is_none());
        for r in &mut self.requests {
            r.cancel(GRACE);
        }
    }

    /// Past-deadline escalations and output drains.
    fn deadlines(&mut self) {
        let now = Instant::now();
        for r in &mut self.requests {
            r.on_deadline(now);
        }
    }

    /// Send the exit event of every finished request and forget it.
    fn finish_done(&mut self) {
        let mut i = 0;
        let mut changed = false;
        while i < self.requests.len() {
            if self.requests[i].done() {
                let r = self.requests.swap_remove(i);
                let events = r.finish();
                for e in events {
                    self.send(&e);
                }
                changed = true;
            } else {
                i += 1;
            }
        }
        if changed {
            self.by_key = self
                .requests
                .iter()
                .enumerate()
                .map(|(i, r)| (protocol::key(r.id()), i))
                .collect();
        }
    }

    /// Last resort when poll itself fails: KILL and reap everything now.
    fn reap_all_now(&mut self) {
        for r in &mut self.requests {
            r.kill_and_reap();
        }
        // A busy resident process was one of them (killed and reaped).
        if let Some(r) = self.runner.take()
            && r.busy().is_some()
        {
            r.reaped();
        }
        self.requests.clear();
    }
}

fn not_in_flight(id: &Value) -> crate::cli::machine::MachineError {
    protocol::server_error(
        ErrorKind::NotFound,
        format!("no request {} is in flight", protocol::key(id)),
        "address a request that was started and has not sent its exit event",
    )
}
