//! The helper: `hutch __supervise`, a supervisor in a process of its own,
//! for callers that cannot fork (every multi-threaded program), and the
//! holder of one warm sandbox.
//!
//! The caller starts the helper with one end of a `SOCK_STREAM` socketpair
//! as its fd [`CONTROL_FD`] (and, for [`ToHelper::Run`], the sandbox's
//! stdio as its own stdio). Both sides speak length-prefixed frames (a
//! little-endian u32, then a JSON envelope `{"v": PROTOCOL_VERSION, "msg":
//! ...}`); fds travel with a frame by SCM_RIGHTS. The caller sends one
//! request:
//!
//! - [`ToHelper::Run`]: launch and supervise a sandbox now;
//! - [`ToHelper::Warm`]: build a warm sandbox of the Spec's shape
//!   ([`crate::launch::prepare::claim`]), answer [`FromHelper::Ready`], then wait for
//!   [`ToHelper::Claim`], which brings the command and the workload's
//!   stdin, stdout and stderr (the warm sandbox's owner may hand the
//!   control socket to whoever claims it; with `lifeline`, fd
//!   [`LIFELINE_FD`] is a pipe whose write end only the owner holds, and
//!   its end ends the sandbox too);
//!
//! then may send [`ToHelper::Kill`] or [`ToHelper::Signal`]; the helper
//! answers a kill with [`FromHelper::Killing`] and, at the end, sends
//! [`FromHelper::Finished`] or [`FromHelper::Failed`]. A kill ends the
//! sandbox through its supervisor (SIGKILL to pid 1, `cgroup.kill`) and
//! then the usual cleanup and report, so no cgroup leaf or state stays
//! behind; the caller kills the helper itself only when it does not
//! answer. When the caller's end closes before the end (it went away, or
//! dropped its child), the sandbox is killed the same way.

mod background;
pub mod pool;
mod warm;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::launch::error::LaunchError;
use crate::launch::error::LaunchFailure;
use crate::launch::options::RunOptions;
use crate::launch::prepare::claim::ClaimCommand;
use crate::launch::supervisor::relay::Captured;
use crate::launch::supervisor::report::ExitReport;
use crate::launch::supervisor::{self, ClaimRequest, Control, ControlRequest, Finished};
use crate::spec::Spec;
use warm::WarmError;

/// The helper's subcommand (`hutch __supervise`).
pub const SUBCOMMAND: &str = "__supervise";
/// The helper's end of the control socket.
pub const CONTROL_FD: i32 = 3;
/// A warm sandbox's lifeline (see [`ToHelper::Warm`]).
pub const LIFELINE_FD: i32 = 4;
/// The first of the fds holding the secrets' values (one each, read by the
/// caller: [`crate::secret`]'s handover).
pub const FIRST_SECRET_FD: i32 = 5;
/// Bumped whenever a frame changes shape.
pub const PROTOCOL_VERSION: u32 = 4;
/// Largest frame either side accepts (a Spec can carry file contents).
pub const MAX_FRAME: usize = 64 << 20;
/// How long [`HelperChild::kill`] waits for the helper to say it is
/// killing the sandbox before it kills the helper itself.
const KILL_ANSWER: Duration = Duration::from_secs(2);

/// Caller → helper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToHelper {
    /// Launch this Spec now and supervise it.
    Run {
        spec: Box<Spec>,
        options: RunOptions,
    },
    /// Build a warm sandbox of this Spec's shape; answer `Ready` and wait
    /// for `Claim`. `lifeline`: fd [`LIFELINE_FD`] is a pipe whose write
    /// end only the sandbox's owner holds; when it closes, the sandbox
    /// ends (even while someone else holds the control socket).
    /// `gives_back`: the claimer gives the sandbox back after its command
    /// (`Release`, then its owner takes it again): only then may it be
    /// resident (docs/warm.md, "Resident sandboxes").
    Warm {
        spec: Box<Spec>,
        lifeline: bool,
        #[serde(default)]
        gives_back: bool,
    },
    /// Run this command in the warm sandbox. The frame carries the
    /// workload's stdin, stdout and stderr. `shape`: the
    /// [`crate::launch::prepare::claim::shape_digest`] the command was made for; any other
    /// is refused. `upper_lock`: a fourth fd follows, a lock the claimer
    /// holds and that everyone else who mounts the sandbox's host uppers
    /// takes first (a session's `upper.lock`); the helper keeps it until
    /// hutch init is reaped, so the report may go out before the overlay
    /// is gone ([`crate::launch::supervisor::report_on_exit_allowed`]).
    Claim {
        shape: String,
        command: Box<ClaimCommand>,
        options: RunOptions,
        #[serde(default)]
        upper_lock: bool,
    },
    Kill,
    /// Forward this signal to the sandbox (as a supervisor forwards the
    /// signals it gets itself).
    Signal {
        signo: i32,
    },
    /// A resident sandbox (`FromHelper::Finished::resident`): its claimer
    /// reads nothing more; the helper answers `Ready` again for its owner
    /// (who may have handed the control socket to the claimer). A claim
    /// may follow `Finished` directly instead.
    Release,
}

/// Helper → caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromHelper {
    /// The sandbox is being killed, as asked; its report follows.
    Killing,
    /// The warm sandbox is ready for its claim.
    Ready {
        sandbox_id: String,
    },
    Finished {
        report: Box<ExitReport>,
        captured: [Option<Captured>; 2],
        /// A resident sandbox: the helper serves another claim (or says
        /// `Ready` on `ToHelper::Release`) instead of exiting.
        #[serde(default)]
        resident: bool,
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

/// Bytes read so far, cut into frames, and the fds that came with them.
#[derive(Default)]
struct Frames {
    buf: Vec<u8>,
    fds: std::collections::VecDeque<OwnedFd>,
}

impl Frames {
    /// Whether a whole frame is buffered.
    fn has_frame(&self) -> bool {
        self.buf.len() >= 4
            && self.buf.len()
                >= 4 + u32::from_le_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize
    }

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

    /// One read from `sock` into the buffer (fds into the queue); false at
    /// EOF or on error.
    fn fill(&mut self, sock: BorrowedFd<'_>) -> bool {
        !matches!(self.fill_once(sock), Fill::Closed)
    }

    /// One read from `sock`, saying whether it got bytes, would have
    /// blocked (a non-blocking socket with nothing to read), or the other
    /// end is gone (EOF, an error, or more than a frame's worth).
    fn fill_once(&mut self, sock: BorrowedFd<'_>) -> Fill {
        let mut chunk = [0u8; 16 * 1024];
        match crate::sys::socket::recv_stream(sock, &mut chunk) {
            Ok((0, _)) => Fill::Closed,
            Ok((n, fds)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.fds.extend(fds);
                if self.buf.len() <= MAX_FRAME + 4 && self.fds.len() <= 16 {
                    Fill::Data
                } else {
                    Fill::Closed
                }
            }
            Err(e) if e.errno == crate::sys::Errno::EAGAIN => Fill::WouldBlock,
            Err(_) => Fill::Closed,
        }
    }
}

/// What one read of a control socket got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    Data,
    WouldBlock,
    Closed,
}

/// Send a whole frame, its fds attached to the first byte.
fn send_frame(sock: &UnixStream, frame: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let mut sent = crate::sys::socket::send_stream(sock.as_fd(), frame, fds)
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))?;
    while sent < frame.len() {
        sent += crate::sys::socket::send_stream(sock.as_fd(), &frame[sent..], &[])
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))?;
    }
    Ok(())
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

/// The caller's side of a helper's control socket: the frames it sent and
/// what they said. Also what holds a claimed warm sandbox whose helper is
/// not the holder's child (a session's warm server hands the socket over).
pub struct Link {
    /// The helper, for error lines.
    binary: PathBuf,
    sock: UnixStream,
    frames: Frames,
    result: Option<Result<Finished, LaunchError>>,
    /// The helper's end is closed (it exited, or will).
    closed: bool,
    /// The helper said it is killing the sandbox.
    killing: bool,
    /// A warm helper said its sandbox is ready (its id).
    ready: Option<String>,
    /// The last command's helper serves another claim (a resident
    /// sandbox): it answers `Ready` again after [`Link::release`].
    resident: bool,
}

impl Link {
    /// The caller's end of a helper's control socket.
    pub fn new(binary: &Path, sock: UnixStream) -> Link {
        Link {
            binary: binary.to_path_buf(),
            sock,
            frames: Frames::default(),
            result: None,
            closed: false,
            killing: false,
            ready: None,
            resident: false,
        }
    }

    fn protocol_error(&self, why: String) -> LaunchError {
        LaunchError::Helper {
            binary: self.binary.clone(),
            why,
        }
    }

    fn send(&mut self, msg: &ToHelper, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
        self.sock.set_nonblocking(false)?;
        send_frame(&self.sock, &encode(msg), fds)
    }

    /// Read what the helper sent; `block`: wait for at least one read.
    fn pump(&mut self, block: bool) {
        if self.result.is_some() || self.closed {
            return;
        }
        let _ = self.sock.set_nonblocking(!block);
        self.pump_read();
    }

    /// One read of the socket as it is (blocking or not) and the frames
    /// it completed; true when the read would have blocked.
    fn pump_read(&mut self) -> bool {
        let fill = self.frames.fill_once(self.sock.as_fd());
        if fill == Fill::Closed {
            self.closed = true;
        }
        self.decode_frames();
        fill == Fill::WouldBlock
    }

    /// For an event loop that waits for the socket to be readable (the
    /// `tokio` API): one non-blocking read and the frames it completed;
    /// true when nothing was there (wait for readiness again).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn pump_nonblocking(&mut self) -> bool {
        if self.answered() {
            return false;
        }
        let _ = self.sock.set_nonblocking(true);
        self.pump_read()
    }

    /// The helper said it is killing the sandbox, as asked.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn killing(&self) -> bool {
        self.killing
    }

    /// Send [`ToHelper::Kill`] without waiting for the answer.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn start_kill(&mut self) -> std::io::Result<()> {
        if self.answered() {
            return Ok(());
        }
        self.send(&ToHelper::Kill, &[])
    }

    fn decode_frames(&mut self) {
        self.frames.fds.clear();
        while let Some(frame) = self.frames.next::<FromHelper>() {
            match frame {
                Ok(FromHelper::Killing) => self.killing = true,
                Ok(FromHelper::Ready { sandbox_id }) => self.ready = Some(sandbox_id),
                Ok(FromHelper::Finished {
                    report,
                    captured,
                    resident,
                }) => {
                    self.resident = resident;
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

    /// Whether the helper has answered (a result, or its end closed).
    pub fn answered(&self) -> bool {
        self.result.is_some() || self.closed
    }

    /// Whether the helper has answered, after reading what it sent so far
    /// (without waiting).
    pub fn try_answer(&mut self) -> bool {
        self.pump(false);
        self.answered()
    }

    /// The warm sandbox's id once it said it is ready (without waiting).
    pub fn ready(&mut self) -> Option<&str> {
        if self.ready.is_none() {
            self.pump(false);
        }
        self.ready.as_deref()
    }

    /// Wait until the helper answers.
    pub fn wait_answer(&mut self) {
        while !self.answered() {
            self.pump(true);
        }
    }

    /// The result (once answered); a helper that closed without one is an
    /// error that `why` describes.
    pub(crate) fn take_result(
        &mut self,
        why: impl FnOnce() -> String,
    ) -> Result<Finished, LaunchError> {
        match self.result.take() {
            Some(r) => r,
            None => Err(self.protocol_error(why())),
        }
    }

    /// Wait for the sandbox to end (for a link without the helper process).
    pub fn wait(&mut self) -> Result<Finished, LaunchError> {
        self.wait_answer();
        self.take_result(|| "ended without a report".into())
    }

    /// Claim the warm sandbox: `shape` is the claim's
    /// [`crate::launch::prepare::claim::shape_digest`], `stdio` the workload's stdin,
    /// stdout and stderr; `upper_lock` see [`ToHelper::Claim`].
    pub fn claim(
        &mut self,
        shape: &str,
        command: ClaimCommand,
        options: &RunOptions,
        stdio: [BorrowedFd<'_>; 3],
        upper_lock: Option<BorrowedFd<'_>>,
    ) -> Result<(), LaunchError> {
        let msg = ToHelper::Claim {
            shape: shape.to_string(),
            command: Box::new(command),
            options: options.clone(),
            upper_lock: upper_lock.is_some(),
        };
        let fds: Vec<BorrowedFd<'_>> = stdio.into_iter().chain(upper_lock).collect();
        // Ready again only when it says so after this command.
        self.ready = None;
        self.resident = false;
        self.send(&msg, &fds)
            .map_err(|e| self.protocol_error(format!("sending the claim: {e}")))
    }

    /// Whether the last command's helper serves another claim (a resident
    /// sandbox), once its result is in.
    pub fn resident(&self) -> bool {
        self.resident
    }

    /// A resident sandbox's claimer is done: the helper says `Ready` again,
    /// to whoever reads this socket next (its owner).
    pub fn release(&mut self) -> std::io::Result<()> {
        self.send(&ToHelper::Release, &[])
    }

    /// Ask the helper to kill the sandbox; true once it said it does (or
    /// the sandbox is over), false when it did not answer in time.
    pub fn kill(&mut self) -> bool {
        if self.answered() {
            return true;
        }
        if self.send(&ToHelper::Kill, &[]).is_err() {
            return false;
        }
        let deadline = Instant::now() + KILL_ANSWER;
        while !self.killing && !self.answered() {
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
        self.killing || self.answered()
    }

    /// The control socket (to hand it over, or to poll it).
    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

}

/// A sandbox supervised by a helper process.
pub struct HelperChild {
    pub process: std::process::Child,
    pub link: Link,
}

impl HelperChild {
    /// Start `binary` as the helper with `stdio` as its stdin, stdout and
    /// stderr, and send it `request` (with fd [`LIFELINE_FD`] when
    /// `lifeline` is given).
    fn start(
        binary: &Path,
        request: &ToHelper,
        stdio: [std::process::Stdio; 3],
        lifeline: Option<BorrowedFd<'_>>,
        secret_fds: Vec<(OwnedFd, i32)>,
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
        let mut fds = vec![(OwnedFd::from(theirs), CONTROL_FD)];
        if let Some(l) = lifeline {
            let l = l
                .try_clone_to_owned()
                .map_err(|e| fail(format!("dup of the lifeline: {e}")))?;
            fds.push((l, LIFELINE_FD));
        }
        fds.extend(secret_fds);
        crate::sys::command_with_fds(&mut cmd, fds).map_err(|e| fail(e.to_string()))?;
        let process = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot start: {e}")))?;
        // Dropping the std Command closes our copy of the helper's end.
        drop(cmd);
        let mut child = HelperChild {
            process,
            link: Link::new(binary, ours),
        };
        if let Err(e) = child.link.send(request, &[]) {
            let _ = child.process.kill();
            let _ = child.process.wait();
            return Err(fail(format!("sending the request: {e}")));
        }
        Ok(child)
    }

    /// Start `binary` as the helper for `spec`, with `stdio` as the
    /// helper's (and so the sandbox's) stdin, stdout and stderr.
    pub fn spawn(
        binary: &Path,
        spec: &Spec,
        opts: &RunOptions,
        stdio: [std::process::Stdio; 3],
    ) -> Result<HelperChild, LaunchError> {
        let (spec, secret_fds) = crate::secret::handover(spec, FIRST_SECRET_FD)
            .map_err(crate::launch::error::PrepareError::Secret)?;
        let run = ToHelper::Run {
            spec: Box::new(spec),
            options: opts.clone(),
        };
        HelperChild::start(binary, &run, stdio, None, secret_fds)
    }

    /// Start `binary` as the holder of a warm sandbox of `spec`'s shape
    /// (its stdio /dev/null until a claim brings the command's);
    /// `gives_back`: see [`ToHelper::Warm`].
    pub fn spawn_warm(
        binary: &Path,
        spec: &Spec,
        lifeline: Option<BorrowedFd<'_>>,
        gives_back: bool,
    ) -> Result<HelperChild, LaunchError> {
        use std::process::Stdio;
        let warm = ToHelper::Warm {
            spec: Box::new(spec.clone()),
            lifeline: lifeline.is_some(),
            gives_back,
        };
        HelperChild::start(
            binary,
            &warm,
            [Stdio::null(), Stdio::null(), Stdio::null()],
            lifeline,
            Vec::new(),
        )
    }

    /// The result once the helper has answered and exited.
    fn finish(&mut self) -> Result<Finished, LaunchError> {
        let status = self.process.wait();
        self.link.take_result(|| match status {
            Ok(s) => format!("ended without a report ({s})"),
            Err(e) => format!("cannot be waited for: {e}"),
        })
    }

    /// Wait for the sandbox to end.
    pub fn wait(&mut self) -> Result<Finished, LaunchError> {
        self.link.wait_answer();
        self.finish()
    }

    /// The result if the sandbox has ended, without waiting.
    pub fn try_wait(&mut self) -> Result<Option<Finished>, LaunchError> {
        self.link.pump(false);
        if !self.link.answered() {
            return Ok(None);
        }
        self.finish().map(Some)
    }

    /// End the sandbox through its supervisor; kill the helper itself only
    /// when it does not answer. The report of a killed sandbox says
    /// `killed` (or how it ended, if it was over already).
    pub fn kill(&mut self) -> std::io::Result<()> {
        if self.link.kill() {
            return Ok(());
        }
        self.process.kill()
    }
}

/// The helper's side of the control socket, as the supervisor's loop sees
/// it.
struct Channel {
    sock: UnixStream,
    frames: Frames,
    lifeline: Option<OwnedFd>,
}

impl Control for Channel {
    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    fn lifeline(&self) -> Option<BorrowedFd<'_>> {
        self.lifeline.as_ref().map(|l| l.as_fd())
    }

    fn buffered(&self) -> bool {
        self.frames.has_frame()
    }

    fn read(&mut self) -> ControlRequest {
        if !self.frames.has_frame() && !self.frames.fill(self.sock.as_fd()) {
            return ControlRequest::Gone;
        }
        match self.frames.next::<ToHelper>() {
            None => ControlRequest::None,
            Some(Ok(ToHelper::Kill)) => ControlRequest::Kill,
            Some(Ok(ToHelper::Signal { signo })) => ControlRequest::Signal(signo),
            Some(Ok(ToHelper::Release)) => ControlRequest::Release,
            Some(Ok(ToHelper::Claim {
                shape,
                command,
                options,
                upper_lock,
            })) => {
                let fds = &mut self.frames.fds;
                let stdio = (fds.pop_front(), fds.pop_front(), fds.pop_front());
                let lock = if upper_lock { fds.pop_front() } else { None };
                match stdio {
                    // A claim without its stdio (or its lock): the caller
                    // is confused.
                    (Some(a), Some(b), Some(c)) if lock.is_some() == upper_lock => {
                        ControlRequest::Claim(Box::new(ClaimRequest {
                            shape,
                            command: *command,
                            options,
                            stdio: [a, b, c],
                            upper_lock: lock,
                        }))
                    }
                    _ => ControlRequest::Kill,
                }
            }
            // A second request, or nonsense: the caller is confused; end.
            Some(_) => ControlRequest::Kill,
        }
    }

    fn acknowledge_kill(&mut self) {
        let _ = send_frame(&self.sock, &encode(&FromHelper::Killing), &[]);
    }
}

impl Channel {
    fn answer(&self, msg: &FromHelper) {
        let _ = send_frame(&self.sock, &encode(msg), &[]);
    }
}

/// The lifeline a warm request names: fd [`LIFELINE_FD`], which must be a
/// pipe (an fd left open by accident is never taken for one).
fn adopt_lifeline() -> Option<OwnedFd> {
    let fd = crate::sys::adopt_inherited_fd(LIFELINE_FD)?;
    match crate::sys::fstat(fd.as_fd()) {
        Ok(m) if m.mode & libc::S_IFMT == libc::S_IFIFO => Some(fd),
        _ => None,
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
        lifeline: None,
    };
    let request = loop {
        match channel.frames.next::<ToHelper>() {
            Some(r) => break r,
            None if channel.frames.fill(channel.sock.as_fd()) => continue,
            None => return 125,
        }
    };
    let mut lingering = None;
    let mut leftover = None;
    let result = match request {
        Ok(ToHelper::Run { spec, options }) => supervisor::run(&spec, &options, Some(&mut channel)),
        Ok(ToHelper::Warm {
            spec,
            lifeline,
            gives_back,
        }) => {
            if lifeline {
                match adopt_lifeline() {
                    Some(l) => channel.lifeline = Some(l),
                    None => {
                        eprintln!(
                            "hutch: {SUBCOMMAND}: the warm request names a lifeline (fd {LIFELINE_FD}) that is not a pipe"
                        );
                        return 125;
                    }
                }
            }
            match serve_warm(&spec, gives_back, &mut channel) {
                Some((r, l, w)) => {
                    lingering = l;
                    leftover = w;
                    r
                }
                // Its owner went away: nobody to answer.
                None => return 125,
            }
        }
        Ok(
            ToHelper::Kill
            | ToHelper::Signal { .. }
            | ToHelper::Claim { .. }
            | ToHelper::Release,
        ) => return 125,
        Err(why) => {
            eprintln!("hutch: {SUBCOMMAND}: the request was {why}");
            return 125;
        }
    };
    let answer = match result {
        Ok(Finished { report, captured }) => FromHelper::Finished {
            report: Box::new(report),
            captured,
            resident: false,
        },
        Err(e) => FromHelper::Failed(e.failure()),
    };
    let code = match &answer {
        FromHelper::Finished { report, .. } => report.status,
        FromHelper::Failed(f) => {
            eprintln!("hutch: {f}");
            125
        }
        _ => 125,
    };
    channel.answer(&answer);
    // The report is out. The supervisor's state goes first: it holds a
    // copy of init's socket, whose last close lets a lingering init end.
    drop(leftover);
    // A warm sandbox's init may still be ending.
    if let Some(l) = lingering {
        l.reap();
    }
    code
}

/// What a served warm sandbox leaves: the result, the sandbox's init when
/// it is still to be reaped (after the answer), and the supervisor's state
/// (its plan, the compiled filters, the Spec; it holds a copy of init's
/// socket), dropped after the answer and before init is reaped: freeing
/// it is not the caller's wait.
type Served = (
    Result<Finished, LaunchError>,
    Option<warm::Lingering>,
    Option<warm::Warm>,
);

/// A warm sandbox: build it, say `Ready`, serve the claim. None when its
/// owner went away before claiming it.
fn serve_warm(spec: &Spec, gives_back: bool, channel: &mut Channel) -> Option<Served> {
    let (warm, pending) = match warm::warm_up(spec, gives_back, channel) {
        Ok(w) => w,
        Err(WarmError::Gone) => return None,
        Err(WarmError::Launch(e)) => return Some((Err(e), None, None)),
    };
    channel.answer(&FromHelper::Ready {
        sandbox_id: warm.sandbox_id().to_string(),
    });
    let mut warm = warm;
    let mut pending = pending;
    loop {
        let (mut claimed, claim) = match pending.take() {
            Some(c) => (warm, c),
            None => match warm.wait_claim(channel) {
                Ok(w) => w,
                Err(WarmError::Gone) => return None,
                Err(WarmError::Launch(e)) => return Some((Err(e), None, None)),
            },
        };
        let (result, lingering) = claimed.claim(claim, channel);
        // A resident sandbox whose command ended as commands do (its own
        // init reaped, hutch init waiting for the next claim): answer, and
        // say it is ready again.
        if lingering.is_none() && claimed.serves_again() {
            if let Ok(finished) = result {
                warm::let_go_of_the_claimers_stdio();
                channel.answer(&FromHelper::Finished {
                    report: Box::new(finished.report),
                    captured: finished.captured,
                    resident: true,
                });
                // After the answer: the command's overlay goes (and the
                // upper's locks with it) off the claimer's path.
                if !claimed.end_command() {
                    return Some((
                        Err(LaunchError::Prepare(
                            crate::launch::error::PrepareError::WarmEndedWaiting,
                        )),
                        None,
                        Some(claimed),
                    ));
                }
                // The claimer claims again, or lets it go: then `Ready`
                // goes to the owner, who reads this socket from then on.
                match claimed.wait_next(channel) {
                    Ok((w, warm::Next::Claim(c))) => {
                        pending = Some(c);
                        warm = w;
                    }
                    Ok((w, warm::Next::Released)) => {
                        channel.answer(&FromHelper::Ready {
                            sandbox_id: w.sandbox_id().to_string(),
                        });
                        warm = w;
                    }
                    Err(WarmError::Gone) => return None,
                    Err(WarmError::Launch(e)) => return Some((Err(e), None, None)),
                }
                continue;
            }
            return Some((result, None, Some(claimed)));
        }
        return Some((result, lingering, Some(claimed)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_split_anywhere_and_check_the_version() {
        let msgs = [
            encode(&FromHelper::Killing),
            encode(&FromHelper::Failed(LaunchFailure {
                kind: crate::launch::error::FailureKind::Prepare,
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
