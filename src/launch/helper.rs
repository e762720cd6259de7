//! The helper: `hutch __supervise`, a supervisor in a process of its own,
//! for callers that cannot fork (every multi-threaded program).
//!
//! The caller starts the helper with one end of a `SOCK_STREAM` socketpair
//! as its fd [`CONTROL_FD`] (and the sandbox's stdio as its own stdio).
//! Both sides speak length-prefixed frames (a little-endian u32, then a
//! JSON envelope `{"v": PROTOCOL_VERSION, "msg": ...}`): the caller sends
//! [`ToHelper::Run`] once, then may send [`ToHelper::Kill`]; the helper
//! answers a kill with [`FromHelper::Killing`] and, at the end, sends
//! [`FromHelper::Finished`] or [`FromHelper::Failed`]. A kill ends the
//! sandbox through its supervisor (SIGKILL to pid 1, `cgroup.kill`) and
//! then the usual cleanup and report, so no cgroup leaf or state stays
//! behind; the caller kills the helper itself only when it does not
//! answer. When the caller's end closes before the end (it went away, or
//! dropped its child), the sandbox is killed the same way.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::relay::Captured;
use super::report::ExitReport;
use super::supervise::{self, Control, ControlRequest, Finished};
use super::{LaunchError, LaunchFailure, RunOptions};
use crate::spec::Spec;

/// The helper's subcommand (`hutch __supervise`).
pub const SUBCOMMAND: &str = "__supervise";
/// The helper's end of the control socket.
pub const CONTROL_FD: i32 = 3;
/// Bumped whenever a frame changes shape.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame either side accepts (a Spec can carry file contents).
pub const MAX_FRAME: usize = 64 << 20;
/// How long [`HelperChild::kill`] waits for the helper to say it is
/// killing the sandbox before it kills the helper itself.
const KILL_ANSWER: Duration = Duration::from_secs(2);

/// Caller → helper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToHelper {
    Run {
        spec: Box<Spec>,
        options: RunOptions,
    },
    Kill,
}

/// Helper → caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromHelper {
    /// The sandbox is being killed, as asked; its report follows.
    Killing,
    Finished {
        report: Box<ExitReport>,
        captured: [Option<Captured>; 2],
    },
    Failed(LaunchFailure),
}

#[derive(Serialize, Deserialize)]
struct Envelope<M> {
    v: u32,
    msg: M,
}

fn encode<M: Serialize>(msg: &M) -> Vec<u8> {
    let body = serde_json::to_vec(&Envelope {
        v: PROTOCOL_VERSION,
        msg,
    })
    .expect("frames serialize");
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Bytes read so far, cut into frames.
#[derive(Default)]
struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    /// The next whole frame, decoded.
    fn next<M: for<'de> Deserialize<'de>>(&mut self) -> Option<Result<M, String>> {
        if self.buf.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
        if len > MAX_FRAME {
            return Some(Err(format!("a frame of {len} bytes (at most {MAX_FRAME})")));
        }
        if self.buf.len() < 4 + len {
            return None;
        }
        let body: Vec<u8> = self.buf.drain(..4 + len).skip(4).collect();
        Some(
            serde_json::from_slice::<Envelope<M>>(&body)
                .map_err(|e| format!("a malformed frame: {e}"))
                .and_then(|env| {
                    if env.v == PROTOCOL_VERSION {
                        Ok(env.msg)
                    } else {
                        Err(format!(
                            "protocol version {} (this hutch speaks {PROTOCOL_VERSION})",
                            env.v
                        ))
                    }
                }),
        )
    }

    /// One read from `sock` into the buffer; false at EOF or on error.
    fn fill(&mut self, sock: &mut UnixStream) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match sock.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.buf.len() <= MAX_FRAME + 4
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
            Err(_) => false,
        }
    }
}

/// Where the `hutch` binary is: the `HUTCH_BIN` environment variable; a
/// `hutch` file next to the current executable or in its parent directory
/// (how `cargo test` lays out a profile directory: test binaries in
/// `deps/`, `hutch` beside it); `hutch` on `PATH`.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HUTCH_BIN") {
        return Some(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(2) {
            let candidate = dir.join("hutch");
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("hutch"))
            .find(|p| p.is_file())
    })
}

/// A sandbox supervised by a helper process.
pub struct HelperChild {
    binary: PathBuf,
    pub process: std::process::Child,
    sock: UnixStream,
    frames: Frames,
    result: Option<Result<Finished, LaunchError>>,
    /// The helper's end is closed (it exited, or will).
    closed: bool,
    /// The helper said it is killing the sandbox.
    killing: bool,
}

impl HelperChild {
    /// Start `binary` as the helper for `spec`, with `stdio` as the
    /// helper's (and so the sandbox's) stdin, stdout and stderr.
    pub fn spawn(
        binary: &Path,
        spec: &Spec,
        opts: &RunOptions,
        stdio: [std::process::Stdio; 3],
    ) -> Result<HelperChild, LaunchError> {
        let fail = |why: String| LaunchError::Helper {
            binary: binary.to_path_buf(),
            why,
        };
        let (ours, theirs) = UnixStream::pair().map_err(|e| fail(format!("socketpair: {e}")))?;
        let mut cmd = std::process::Command::new(binary);
        cmd.arg(SUBCOMMAND).env_clear();
        // The helper registers the sandbox where `hutch ps` looks.
        for key in [crate::registry::RUNTIME_DIR_ENV, "XDG_RUNTIME_DIR"] {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        let [stdin, stdout, stderr] = stdio;
        cmd.stdin(stdin).stdout(stdout).stderr(stderr);
        crate::sys::command_with_fds(&mut cmd, vec![(OwnedFd::from(theirs), CONTROL_FD)])
            .map_err(|e| fail(e.to_string()))?;
        let process = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot start: {e}")))?;
        // Dropping the std Command closes our copy of the helper's end.
        drop(cmd);
        let mut child = HelperChild {
            binary: binary.to_path_buf(),
            process,
            sock: ours,
            frames: Frames::default(),
            result: None,
            closed: false,
            killing: false,
        };
        let run = ToHelper::Run {
            spec: Box::new(spec.clone()),
            options: opts.clone(),
        };
        if let Err(e) = child.sock.write_all(&encode(&run)) {
            let _ = child.process.kill();
            let _ = child.process.wait();
            return Err(fail(format!("sending the request: {e}")));
        }
        Ok(child)
    }

    fn protocol_error(&self, why: String) -> LaunchError {
        LaunchError::Helper {
            binary: self.binary.clone(),
            why,
        }
    }

    /// Read what the helper sent; `block`: wait for at least one read.
    fn pump(&mut self, block: bool) {
        if self.result.is_some() || self.closed {
            return;
        }
        let _ = self.sock.set_nonblocking(!block);
        if !self.frames.fill(&mut self.sock) {
            self.closed = true;
        }
        while let Some(frame) = self.frames.next::<FromHelper>() {
            match frame {
                Ok(FromHelper::Killing) => self.killing = true,
                Ok(FromHelper::Finished { report, captured }) => {
                    self.result = Some(Ok(Finished {
                        report: *report,
                        captured,
                    }));
                }
                Ok(FromHelper::Failed(f)) => self.result = Some(Err(LaunchError::Failed(f))),
                Err(why) => {
                    self.result = Some(Err(self.protocol_error(why)));
                }
            }
            if self.result.is_some() {
                return;
            }
        }
    }

    /// The result once the helper has answered and exited.
    fn finish(&mut self) -> Result<Finished, LaunchError> {
        let status = self.process.wait();
        match self.result.take() {
            Some(r) => r,
            None => Err(self.protocol_error(match status {
                Ok(s) => format!("ended without a report ({s})"),
                Err(e) => format!("cannot be waited for: {e}"),
            })),
        }
    }

    /// Wait for the sandbox to end.
    pub fn wait(&mut self) -> Result<Finished, LaunchError> {
        while self.result.is_none() && !self.closed {
            self.pump(true);
        }
        self.finish()
    }

    /// The result if the sandbox has ended, without waiting.
    pub fn try_wait(&mut self) -> Result<Option<Finished>, LaunchError> {
        self.pump(false);
        if self.result.is_none() && !self.closed {
            return Ok(None);
        }
        self.finish().map(Some)
    }

    /// End the sandbox through its supervisor; kill the helper itself only
    /// when it does not answer. The report of a killed sandbox says
    /// `killed` (or how it ended, if it was over already).
    pub fn kill(&mut self) -> std::io::Result<()> {
        if self.result.is_some() || self.closed {
            return Ok(());
        }
        if self.sock.write_all(&encode(&ToHelper::Kill)).is_ok() {
            let deadline = Instant::now() + KILL_ANSWER;
            while !self.killing && self.result.is_none() && !self.closed {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
                match crate::sys::raw::poll_one(self.sock.as_fd(), libc::POLLIN, ms) {
                    Ok(0) => break,
                    Ok(_) => self.pump(false),
                    Err(crate::sys::Errno::EINTR) => {}
                    Err(_) => break,
                }
            }
            if self.killing || self.result.is_some() {
                return Ok(());
            }
        }
        self.process.kill()
    }
}

/// The helper's side of the control socket, as the supervisor's loop sees
/// it.
struct Channel {
    sock: UnixStream,
    frames: Frames,
}

impl Control for Channel {
    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    fn read(&mut self) -> ControlRequest {
        if !self.frames.fill(&mut self.sock) {
            return ControlRequest::Gone;
        }
        match self.frames.next::<ToHelper>() {
            None => ControlRequest::None,
            Some(Ok(ToHelper::Kill)) => ControlRequest::Kill,
            // A second request, or nonsense: the caller is confused; end.
            Some(_) => ControlRequest::Kill,
        }
    }

    fn acknowledge_kill(&mut self) {
        let _ = self.sock.write_all(&encode(&FromHelper::Killing));
    }
}

/// `hutch __supervise`: read the request from [`CONTROL_FD`], supervise
/// the sandbox in this process, answer. Returns the exit code (the
/// sandbox's status, or 125).
pub fn serve() -> i32 {
    let Some(fd) = crate::sys::adopt_inherited_fd(CONTROL_FD) else {
        eprintln!(
            "hutch: {SUBCOMMAND} is the hutch library's helper (its control socket, fd {CONTROL_FD}, is missing)"
        );
        return 125;
    };
    let mut channel = Channel {
        sock: UnixStream::from(fd),
        frames: Frames::default(),
    };
    let request = loop {
        match channel.frames.next::<ToHelper>() {
            Some(r) => break r,
            None if channel.frames.fill(&mut channel.sock) => continue,
            None => return 125,
        }
    };
    let answer = match request {
        Ok(ToHelper::Run { spec, options }) => {
            match supervise::run(&spec, &options, Some(&mut channel)) {
                Ok(Finished { report, captured }) => FromHelper::Finished {
                    report: Box::new(report),
                    captured,
                },
                Err(e) => FromHelper::Failed(e.failure()),
            }
        }
        Ok(ToHelper::Kill) => return 125,
        Err(why) => {
            eprintln!("hutch: {SUBCOMMAND}: the request was {why}");
            return 125;
        }
    };
    let code = match &answer {
        FromHelper::Finished { report, .. } => report.status,
        FromHelper::Failed(f) => {
            eprintln!("hutch: {f}");
            125
        }
        FromHelper::Killing => 125,
    };
    let _ = channel.sock.write_all(&encode(&answer));
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_split_anywhere_and_check_the_version() {
        let msgs = [
            encode(&FromHelper::Killing),
            encode(&FromHelper::Failed(LaunchFailure {
                kind: super::super::FailureKind::Prepare,
                message: "x".into(),
                location: None,
                errno: None,
                hint: None,
            })),
        ];
        let all: Vec<u8> = msgs.concat();
        for cut in 0..all.len() {
            let mut f = Frames::default();
            f.buf.extend_from_slice(&all[..cut]);
            let mut got = Vec::new();
            while let Some(m) = f.next::<FromHelper>() {
                got.push(m.unwrap());
            }
            f.buf.extend_from_slice(&all[cut..]);
            while let Some(m) = f.next::<FromHelper>() {
                got.push(m.unwrap());
            }
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(got[0], FromHelper::Killing);
        }
        let mut f = Frames::default();
        let body = br#"{"v":99,"msg":"Killing"}"#;
        f.buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
        f.buf.extend_from_slice(body);
        assert!(
            f.next::<FromHelper>()
                .unwrap()
                .unwrap_err()
                .contains("version 99")
        );
        let mut f = Frames::default();
        f.buf.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            f.next::<FromHelper>().unwrap().is_err(),
            "oversized frames are refused"
        );
    }
}
