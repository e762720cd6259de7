//! A session's warm server: ready sandboxes for the session's commands,
//! held by a process of the session's own (`hutch session create --warm
//! N`, `hutch session warm ID N`), not by a system daemon.
//!
//! The server keeps a [`crate::launch::pool::Pool`] of the shape of the
//! session's plain `session run` Spec and listens on `warm.sock` in the
//! session directory (0700: only the session's owner reaches it; the
//! peer's uid is checked too). A `session run` (holding the session lock,
//! so commands never overlap) connects and asks for a sandbox of its
//! command's shape; the server answers with the control socket of a warm
//! helper (SCM_RIGHTS), which the client claims and supervises to the end
//! itself, or says to launch cold (another shape, no sandbox left). Every
//! helper holds the read end of a pipe whose write end only the server
//! has (the lifeline): when the server ends, even by SIGKILL, the helpers
//! kill their sandboxes, claimed or not, and the commands end with a
//! report saying `killed`.
//!
//! The server stops when the session is closed (`close` asks it and waits
//! for it to be gone; a session removed otherwise is noticed within a
//! tick), when the session deadline passes, or when no command came for
//! the idle time; it then ends every sandbox, removes its socket and
//! exits. Killed by a signal, it leaves its sandboxes to the lifeline and
//! only a dead `warm.sock` (refused on connect: commands launch cold; the
//! next server replaces it, `close` removes it with the session).

use std::ffi::CStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::error::{Result, WorkspaceError};
use super::session::Session;
use crate::launch::claim::{ClaimCommand, shape_digest};
use crate::launch::helper::{HelperChild, Link};
use crate::launch::pool::Pool;
use crate::launch::{Finished, LaunchError, RunOptions};
use crate::spec::Spec;
use crate::sys;
use crate::util::clock::now_ms;

/// The server's socket, in the session directory.
pub const SOCKET: &CStr = c"warm.sock";
/// Default idle time after which the server stops (`--warm-idle`).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);
/// How often the server looks at the session, the deadline and its idle time.
const TICK: Duration = Duration::from_millis(200);
/// How long either side waits for the other's one line.
const LINE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request or answer line.
const MAX_LINE: usize = 4096;

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    /// A sandbox of this [`shape_digest`], please.
    Claim { shape: String },
    /// End now (the session is being closed).
    Stop,
    /// How many sandboxes are ready ([`WarmStatus`]).
    Status,
    /// On a claim's connection, after its command: the sandbox is
    /// resident and its claimer let it go (`Link::release`); it comes
    /// back to the pool.
    Returned,
}

/// What a warm server holds now ([`status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmStatus {
    /// Sandboxes it keeps ready.
    pub size: usize,
    /// Ready now.
    pub ready: usize,
    /// Still being built.
    pub warming: usize,
    /// Handed to a command whose helper has not exited yet.
    pub claimed: usize,
}

impl WarmStatus {
    /// Every sandbox ready and none handed out: a command now finds the
    /// pool warm and no refill racing it.
    pub fn settled(&self) -> bool {
        self.ready >= self.size && self.claimed == 0
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    /// The helper's control socket is attached.
    Sandbox,
    /// Launch cold, because...
    Cold {
        why: String,
    },
    /// Every sandbox is gone; the server exits.
    Stopped,
    Status(WarmStatus),
}

/// How a server runs.
pub struct ServeOptions {
    /// Ready sandboxes to keep.
    pub size: usize,
    /// Stop after this long without a command.
    pub idle: Duration,
    /// The `hutch` binary the helpers run.
    pub binary: std::path::PathBuf,
}

/// The socket's address through the session directory's fd (a session's
/// path may be longer than a socket address can be).
fn socket_path(session: &Session) -> String {
    format!(
        "/proc/self/fd/{}/{}",
        session.dir_fd().as_raw_fd(),
        SOCKET.to_str().expect("ASCII")
    )
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> WorkspaceError + '_ {
    move |e| WorkspaceError::io(what, e)
}

/// Serve the session's commands from `opts.size` warm sandboxes of
/// `spec`'s shape (`spec`: what a plain `session run` of this session
/// launches). `ready` is called once the socket listens. Returns when the
/// server stops (see the module docs).
pub fn serve(
    session: &Session,
    spec: &Spec,
    opts: &ServeOptions,
    ready: impl FnOnce(),
) -> Result<()> {
    let (lifeline, keep) = std::io::pipe().map_err(io("pipe for the warm sandboxes' lifeline"))?;
    let pool = Pool::new(&opts.binary, spec, opts.size, Some(OwnedFd::from(lifeline)), true)
        .map_err(WorkspaceError::from)?;
    let _keep = keep;
    match sys::unlink_at(session.dir_fd(), SOCKET, false) {
        Ok(()) => {}
        Err(e) if e.errno == sys::Errno::ENOENT => {}
        Err(e) => return Err(e.into()),
    }
    let listener = UnixListener::bind(socket_path(session)).map_err(io("bind warm.sock"))?;
    listener
        .set_nonblocking(true)
        .map_err(io("set warm.sock non-blocking"))?;
    ready();
    let mut claimed: Vec<Claimed> = Vec::new();
    let mut last_used = Instant::now();
    let uid = nix::unistd::geteuid().as_raw();
    let mut stop_reply: Option<UnixStream> = None;
    loop {
        // A resident sandbox whose claimer let it go comes back to the
        // pool (before its command's count is dropped: the refill never
        // sees it missing); any other claimer's end leaves the helper to
        // exit.
        let mut i = 0;
        while i < claimed.len() {
            match claimed[i].returned() {
                Some(true) => {
                    let c = claimed.swap_remove(i);
                    if let (Some(link), process) = (c.link, c.process) {
                        pool.give_back(HelperChild { process, link });
                    }
                    drop(c._in_flight);
                }
                _ => i += 1,
            }
        }
        // A helper that exited ends its command's claim: the pool may
        // refill now (it waits while a claimed command runs).
        claimed.retain_mut(|c| !matches!(c.process.try_wait(), Ok(Some(_))));
        if !claimed.is_empty() {
            last_used = Instant::now();
        }
        let deadline_passed = session.info.deadline_unix_ms.is_some_and(|d| now_ms() >= d);
        if deadline_passed || last_used.elapsed() >= opts.idle || !session_exists(session) {
            break;
        }
        let mut fds = vec![nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        fds.extend(claimed.iter().filter_map(|c| {
            c.pidfd
                .as_ref()
                .map(|p| nix::poll::PollFd::new(p.as_fd(), nix::poll::PollFlags::POLLIN))
        }));
        fds.extend(claimed.iter().filter_map(|c| {
            c.conn
                .as_ref()
                .map(|p| nix::poll::PollFd::new(p.as_fd(), nix::poll::PollFlags::POLLIN))
        }));
        let tick = nix::poll::PollTimeout::try_from(TICK.as_millis() as i32)
            .unwrap_or(nix::poll::PollTimeout::NONE);
        match nix::poll::poll(&mut fds, tick) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(sys::SysError::new("poll(warm.sock)", e).into()),
        }
        let Ok((conn, _)) = listener.accept() else {
            continue;
        };
        // Only the session's owner (the directory is 0700 too).
        if sys::socket::peer_uid(conn.as_fd()).ok() != Some(uid) {
            continue;
        }
        last_used = Instant::now();
        match serve_one(conn, &pool, claimed.len()) {
            Served::Claimed(helper, conn, in_flight) => {
                let HelperChild { process, link } = *helper;
                let pidfd = sys::raw::pidfd_open(process.id() as libc::pid_t).ok();
                let _ = conn.set_nonblocking(true);
                claimed.push(Claimed {
                    process,
                    pidfd,
                    link: Some(link),
                    conn: Some(conn),
                    _in_flight: in_flight,
                });
            }
            Served::Answered => {}
            Served::Stop(conn) => {
                stop_reply = Some(conn);
                break;
            }
        }
    }
    drop(listener);
    let _ = sys::unlink_at(session.dir_fd(), SOCKET, false);
    // Unclaimed sandboxes end with the pool; claimed ones with the
    // lifeline (`_keep`), closed when this returns.
    drop(pool);
    drop(_keep);
    for mut c in claimed {
        let _ = c.process.wait();
    }
    if let Some(mut conn) = stop_reply {
        let _ = send_line(&mut conn, &Answer::Stopped, &[]);
    }
    Ok(())
}

/// Whether the session still exists (closing removes its files).
fn session_exists(session: &Session) -> bool {
    match sys::open_beneath(session.dir_fd(), c"session.json", libc::O_RDONLY, 0) {
        Ok(_) => true,
        Err(e) => e.errno != sys::Errno::ENOENT,
    }
}

/// A sandbox handed to a client, until its helper exits or (a resident
/// sandbox) comes back.
struct Claimed {
    /// The helper process (this process's child, to reap).
    process: std::process::Child,
    /// Readable once it has exited (polled with the socket).
    pidfd: Option<OwnedFd>,
    /// This server's end of the helper's control socket, unread while the
    /// client holds it; None once the client went without returning it.
    link: Option<Link>,
    /// The claim's connection: `Returned` on it gives the sandbox back.
    conn: Option<UnixStream>,
    _in_flight: crate::launch::pool::InFlight,
}

impl Claimed {
    /// Whether the client returned the sandbox: Some(true) when it said
    /// `Returned` and the helper still runs; Some(false) (and the link
    /// and connection let go: the helper ends) when it went without;
    /// None while it holds it.
    fn returned(&mut self) -> Option<bool> {
        let conn = self.conn.as_mut()?;
        let mut buf = [0u8; 64];
        let outcome = match std::io::Read::read(conn, &mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
            Ok(n) if n > 0 => {
                let line = buf[..n].split(|b| *b == b'\n').next().unwrap_or_default();
                matches!(serde_json::from_slice(line), Ok(Request::Returned))
                    && matches!(self.process.try_wait(), Ok(None))
            }
            _ => false,
        };
        self.conn = None;
        if !outcome {
            self.link = None;
        }
        Some(outcome)
    }
}

enum Served {
    /// The helper, the claim's connection, and its command's count in the
    /// pool.
    Claimed(
        Box<HelperChild>,
        UnixStream,
        crate::launch::pool::InFlight,
    ),
    Answered,
    Stop(UnixStream),
}

fn serve_one(mut conn: UnixStream, pool: &Pool, claimed: usize) -> Served {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(LINE_TIMEOUT));
    let _ = conn.set_write_timeout(Some(LINE_TIMEOUT));
    let request: Request = match read_line(&mut conn)
        .and_then(|(l, _)| serde_json::from_slice(&l).map_err(WorkspaceError::WarmRequest))
    {
        Ok(r) => r,
        Err(_) => return Served::Answered,
    };
    let shape = match request {
        Request::Stop => return Served::Stop(conn),
        Request::Status => {
            let p = pool.status();
            let status = WarmStatus {
                size: p.size,
                ready: p.ready,
                warming: p.warming,
                claimed,
            };
            let _ = send_line(&mut conn, &Answer::Status(status), &[]);
            return Served::Answered;
        }
        Request::Claim { shape } => shape,
        Request::Returned => return Served::Answered,
    };
    if shape != pool.digest() {
        let why = "the command changes the sandbox (binds, limits, network or confinement): the warm sandboxes are of the session's plain shape".into();
        let _ = send_line(&mut conn, &Answer::Cold { why }, &[]);
        return Served::Answered;
    }
    let in_flight = pool.in_flight();
    let Some(helper) = pool.take() else {
        let why = "no warm sandbox is left (warm-ups keep failing)".into();
        let _ = send_line(&mut conn, &Answer::Cold { why }, &[]);
        return Served::Answered;
    };
    let sent = send_line(&mut conn, &Answer::Sandbox, &[helper.link.socket().as_fd()]);
    // The client holds the control socket now; this server's copy stays
    // unread until the client returns the sandbox (a resident one) or
    // goes. If sending failed, the connection is closed already: the
    // copy is let go then, and the helper ends its sandbox.
    let _ = sent;
    Served::Claimed(Box::new(helper), conn, in_flight)
}

fn send_line(
    conn: &mut UnixStream,
    msg: &impl Serialize,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<()> {
    let mut line = serde_json::to_vec(msg).expect("a message serializes");
    line.push(b'\n');
    let sent = sys::socket::send_stream(conn.as_fd(), &line, fds)?;
    conn.write_all(&line[sent..])
        .map_err(io("write to warm.sock"))
}

/// One line (without its newline) and the fds that came with it.
fn read_line(conn: &mut UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let (n, got) = sys::socket::recv_stream(conn.as_fd(), &mut buf)?;
        fds.extend(got);
        if n == 0 {
            return Err(WorkspaceError::WarmClosed);
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|b| *b == b'\n') {
            line.truncate(end);
            return Ok((line, fds));
        }
        if line.len() > MAX_LINE || fds.len() > 4 {
            return Err(WorkspaceError::WarmOversized);
        }
    }
}

/// Connect to the session's server, if one listens.
fn connect(session: &Session) -> Option<UnixStream> {
    let conn = UnixStream::connect(socket_path(session)).ok()?;
    conn.set_read_timeout(Some(LINE_TIMEOUT)).ok()?;
    conn.set_write_timeout(Some(LINE_TIMEOUT)).ok()?;
    Some(conn)
}

/// Run the command of `spec` (a whole session command Spec) in one of the
/// server's warm sandboxes, supervising it from here to its report. None
/// when there is no server, or it says to launch cold: then launch cold.
/// `upper_lock`: the session's [`super::session::UPPER_LOCK`], held; the
/// sandbox's supervisor keeps it until the sandbox is gone, so the report
/// comes back before the overlay's teardown.
pub fn claim(
    session: &Session,
    spec: &Spec,
    opts: &RunOptions,
    upper_lock: std::os::fd::BorrowedFd<'_>,
) -> Option<std::result::Result<Finished, LaunchError>> {
    // A warm sandbox has no secrets (they are read per launch, and a
    // pool's sandbox outlives a command): such a command launches cold.
    if !spec.secrets.is_empty() {
        return None;
    }
    let mut conn = connect(session)?;
    let shape = shape_digest(spec);
    send_line(
        &mut conn,
        &Request::Claim {
            shape: shape.clone(),
        },
        &[],
    )
    .ok()?;
    let (line, mut fds) = read_line(&mut conn).ok()?;
    match serde_json::from_slice::<Answer>(&line).ok()? {
        Answer::Sandbox if fds.len() == 1 => {}
        _ => return None,
    }
    let control = UnixStream::from(fds.pop()?);
    let binary = std::env::current_exe().unwrap_or_else(|_| "hutch".into());
    let mut link = Link::new(&binary, control);
    let stdio = match (sys::dup_fd(0), sys::dup_fd(1), sys::dup_fd(2)) {
        (Ok(a), Ok(b), Ok(c)) => [a, b, c],
        _ => return None,
    };
    let stdio = [stdio[0].as_fd(), stdio[1].as_fd(), stdio[2].as_fd()];
    // A claim that could not be sent never started: its helper died after
    // the server looked (killed from outside). Launched cold instead.
    link.claim(
        &shape,
        ClaimCommand::of(spec),
        opts,
        stdio,
        Some(upper_lock),
    )
    .ok()?;
    let result = link.wait();
    // A resident sandbox serves the next command: let it go back to the
    // server, which reads its control socket from now on.
    if link.resident() && link.release().is_ok() {
        let _ = send_line(&mut conn, &Request::Returned, &[]);
    }
    Some(result)
}

/// What the session's server holds now; None without a server.
pub fn status(session: &Session) -> Option<WarmStatus> {
    let mut conn = connect(session)?;
    send_line(&mut conn, &Request::Status, &[]).ok()?;
    let (line, _) = read_line(&mut conn).ok()?;
    match serde_json::from_slice::<Answer>(&line).ok()? {
        Answer::Status(s) => Some(s),
        _ => None,
    }
}

/// Wait (up to `timeout`) until the session's server is
/// [settled](WarmStatus::settled); its last status, None without a
/// server. Polls every millisecond (a benchmark's or a latency-minded
/// caller's wait before a command, not a hot path).
pub fn wait_settled(session: &Session, timeout: Duration) -> Option<WarmStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        let s = status(session)?;
        if s.settled() || Instant::now() >= deadline {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Ask the session's server to stop and wait until it has ended every
/// warm sandbox. Without a server, nothing to do.
pub fn stop(session: &Session) {
    let Some(mut conn) = connect(session) else {
        return;
    };
    if send_line(&mut conn, &Request::Stop, &[]).is_ok() {
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
    }
}
