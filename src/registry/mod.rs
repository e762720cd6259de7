//! The runtime registry of live sandboxes: what `hutch ps` lists and
//! `hutch kill` ends.
//!
//! Every running sandbox (of `hutch run`, of a session command, of the
//! library through `hutch __supervise`) has one record,
//! `RUNTIME/SANDBOX_ID.json`, written by its supervisor right after clone
//! ([`Registration::create`]) and removed when the supervisor is done
//! (the guard's drop). The runtime directory is `$HUTCH_RUNTIME_DIR`, else
//! `/run/hutch` for root, else `$XDG_RUNTIME_DIR/hutch`, else
//! `/tmp/hutch-UID`; it must belong to the caller and not be writable by
//! others.
//!
//! A record names two processes by pid *and* start time (clock ticks after
//! boot, `/proc/PID/stat`): the supervisor and the sandbox's pid 1. A pid
//! alone can be reused; a pid with its start time cannot. A record whose
//! supervisor is gone (SIGKILLed: no drop ran) is *stale*: recognised by
//! the start time, never mistaken for a live sandbox, and cleaned.
//!
//! Killing goes through the pid namespace: a pidfd of the sandbox's pid 1,
//! opened and then checked against the recorded start time and parent
//! (so it names that process and no later one), gets SIGKILL; the kernel
//! then kills every process of the namespace, double-forked daemons
//! included, before pid 1's exit is reported on the pidfd.

mod proc;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::sys::{self, Errno, SysError};


/// Environment variable naming the runtime directory.
pub const RUNTIME_DIR_ENV: &str = "HUTCH_RUNTIME_DIR";
/// The runtime directory of root.
pub const ROOT_RUNTIME_DIR: &str = "/run/hutch";
/// Label naming the session a sandbox runs a command of.
pub const SESSION_LABEL: &str = "hutch.session";
/// Label naming the state directory of that session.
pub const STATE_LABEL: &str = "hutch.state";
/// Version of the record format.
pub const RECORD_VERSION: u32 = 1;
/// Largest record read (a record is a few hundred bytes).
const RECORD_MAX_BYTES: u64 = 64 * 1024;
/// Bytes of the command line kept in a record.
const COMMAND_MAX_BYTES: usize = 512;
/// How long `kill` waits for a sandbox to be gone.
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// Why the registry could not be read or written. One line each.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("runtime directory {}: {reason} (set {RUNTIME_DIR_ENV} to a directory of yours)", path.display())]
    Dir { path: PathBuf, reason: String },
    #[error("{0}")]
    Sys(#[from] SysError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no live sandbox {0} (see `hutch ps`)")]
    NoSandbox(String),
    #[error("invalid sandbox id {0:?} (16 lowercase hex digits, as `hutch ps` shows)")]
    BadId(String),
}

/// A process named so that no later process can be taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
    pub pid: i32,
    /// `/proc/PID/stat` starttime: clock ticks after boot.
    pub start_time: u64,
}

impl ProcessRef {
    /// `pid` as it is now, if it exists.
    pub fn of(pid: i32) -> Option<ProcessRef> {
        proc::stat(pid).map(|i| ProcessRef {
            pid,
            start_time: i.start_time,
        })
    }

    /// Whether this very process still exists (a zombie counts as gone).
    pub fn is_alive(&self) -> bool {
        proc::stat(self.pid).is_some_and(|i| i.start_time == self.start_time && i.state != b'Z')
    }
}

/// One running sandbox (`RUNTIME/SANDBOX_ID.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub sandbox_id: String,
    pub labels: BTreeMap<String, String>,
    /// Real uid of the supervisor.
    pub uid: u32,
    pub supervisor: ProcessRef,
    /// The sandbox's pid 1, as the host sees it.
    pub init: ProcessRef,
    /// The sandbox's cgroup leaf, when it has one.
    pub cgroup: Option<PathBuf>,
    pub started_unix_ms: u64,
    /// The workload's argv, cut to 512 bytes.
    pub command: Vec<String>,
}

impl Record {
    /// The record of the sandbox `sandbox_id` whose pid 1 is `init_pid`,
    /// supervised by this process.
    pub fn new(
        sandbox_id: &str,
        spec: &crate::spec::Spec,
        init_pid: i32,
        cgroup: Option<&Path>,
    ) -> Option<Record> {
        let me = std::process::id() as i32;
        let mut command = Vec::new();
        let mut left = COMMAND_MAX_BYTES;
        for arg in &spec.command {
            if left == 0 {
                break;
            }
            let mut end = arg.len().min(left);
            while !arg.is_char_boundary(end) {
                end -= 1;
            }
            command.push(arg[..end].to_string());
            left -= end;
        }
        Some(Record {
            version: RECORD_VERSION,
            sandbox_id: sandbox_id.to_string(),
            labels: spec.labels.clone(),
            uid: rustix::process::getuid().as_raw(),
            supervisor: ProcessRef::of(me)?,
            init: ProcessRef::of(init_pid)?,
            cgroup: cgroup.map(Path::to_path_buf),
            started_unix_ms: crate::util::clock::now_ms(),
            command,
        })
    }

    /// The session this sandbox runs a command of.
    pub fn session(&self) -> Option<&str> {
        self.labels.get(SESSION_LABEL).map(String::as_str)
    }
}

/// Whether `id` has the shape of a sandbox id (so it never names a path).
pub fn valid_sandbox_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The caller's runtime directory (see the module documentation).
pub fn runtime_dir() -> PathBuf {
    if let Some(p) = std::env::var_os(RUNTIME_DIR_ENV).filter(|p| !p.is_empty()) {
        return p.into();
    }
    if sys::geteuid() == 0 {
        return ROOT_RUNTIME_DIR.into();
    }
    if let Some(p) = std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("hutch");
    }
    PathBuf::from(format!("/tmp/hutch-{}", sys::geteuid()))
}

/// Open the runtime directory `path`, creating it (0700) if `create`.
/// It must be a directory of the caller's, not writable by others.
fn open_dir(path: &Path, create: bool) -> Result<Option<OwnedFd>, RegistryError> {
    let bad = |reason: String| RegistryError::Dir {
        path: path.to_path_buf(),
        reason,
    };
    if !path.is_absolute() {
        return Err(bad("must be an absolute path".into()));
    }
    let fd = match sys::open_dir_path(path) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ENOENT && create => {
            use std::os::unix::fs::DirBuilderExt;
            // A missing parent (`/run` in a minimal root) the usual way.
            if let Some(parent) = path.parent()
                && !parent.exists()
            {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent)
                    .map_err(|e| bad(format!("cannot create its parent: {e}")))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(bad(format!("cannot create: {e}"))),
            }
            sys::open_dir_path(path).map_err(|e| bad(e.to_string()))?
        }
        Err(e) if e.errno == Errno::ENOENT => return Ok(None),
        Err(e) => return Err(bad(e.to_string())),
    };
    let m = sys::fstat(fd.as_fd())?;
    if m.uid != sys::geteuid() {
        return Err(bad(format!("owned by uid {}, not by the caller", m.uid)));
    }
    if m.mode & 0o022 != 0 {
        return Err(bad(format!(
            "mode {:o} is writable by others",
            m.mode & 0o7777
        )));
    }
    Ok(Some(fd))
}

fn record_name(id: &str) -> CString {
    CString::new(format!("{id}.json")).expect("sandbox ids hold no NUL")
}

fn kill_mark_name(id: &str) -> CString {
    CString::new(format!("{id}.killed")).expect("sandbox ids hold no NUL")
}

/// The caller's runtime directory, opened (and its owner checked) ahead
/// of time: a launcher that joins a user namespace (`namespaces.join.user`)
/// opens it before `setns`, because afterwards its uid is the joined
/// namespace's (often 0) and [`runtime_dir`] would name root's directory.
#[derive(Debug)]
pub struct RuntimeDir {
    path: PathBuf,
    fd: OwnedFd,
}

impl RuntimeDir {
    /// Its path (as named before any joined user namespace was entered).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Open (creating it, 0700) the caller's runtime directory now.
pub fn open_runtime_dir() -> Result<RuntimeDir, RegistryError> {
    let path = runtime_dir();
    let fd = open_dir(&path, true)?.expect("created");
    Ok(RuntimeDir { path, fd })
}

/// [`register`] into a runtime directory opened earlier
/// ([`open_runtime_dir`]).
pub fn register_in(
    dir: RuntimeDir,
    sandbox_id: &str,
    spec: &crate::spec::Spec,
    init_pid: i32,
    cgroup: Option<&crate::cgroup::Leaf>,
) -> Result<Registration, RegistryError> {
    let record = Record::new(
        sandbox_id,
        spec,
        init_pid,
        cgroup.and_then(|c| c.cgroup_dir()),
    )
    .ok_or_else(|| RegistryError::NoSandbox(sandbox_id.to_string()))?;
    Registration::create_in(dir, &record)
}

/// The record of one running sandbox, removed when dropped (the
/// supervisor holds it from clone until the sandbox is gone).
#[derive(Debug)]
pub struct Registration {
    dir: OwnedFd,
    name: CString,
}

impl Registration {

    /// Write `record` into the runtime directory `dir` (atomically: a
    /// reader sees the whole record or none).
    pub fn create_in(dir: RuntimeDir, record: &Record) -> Result<Registration, RegistryError> {
        let RuntimeDir { path, fd: dir } = dir;
        let name = record_name(&record.sandbox_id);
        let tmp = CString::new(format!(".tmp-{}", record.sandbox_id)).expect("no NUL");
        let text = serde_json::to_vec(record).expect("records serialize");
        let fd = sys::open_beneath(
            dir.as_fd(),
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o600,
        )?;
        let written = std::fs::File::from(fd)
            .write_all(&text)
            .map_err(|e| RegistryError::Io {
                what: format!(
                    "write {}",
                    path.join(tmp.to_string_lossy().as_ref()).display()
                ),
                source: e,
            });
        if let Err(e) =
            written.and_then(|()| Ok(sys::rename_at(dir.as_fd(), &tmp, dir.as_fd(), &name)?))
        {
            let _ = sys::unlink_at(dir.as_fd(), &tmp, false);
            return Err(e);
        }
        Ok(Registration { dir, name })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = sys::unlink_at(self.dir.as_fd(), &self.name, false);
    }
}

/// Whether a record describes a running sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Liveness {
    /// Supervisor and sandbox are running.
    Live,
    /// The sandbox's pid 1 is gone; its supervisor is finishing (and will
    /// remove the record).
    Ending,
    /// The supervisor is gone without removing the record (it was
    /// SIGKILLed). `orphan`: the sandbox's pid 1 still runs.
    Stale { orphan: bool },
}

/// A record as found in a runtime directory.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub record: Record,
    #[serde(flatten)]
    pub liveness: Liveness,
    /// The runtime directory holding it.
    pub dir: PathBuf,
}

/// Check a record against procfs. `owner` is the uid owning the directory
/// the record was found in: its supervisor must be a process of that uid
/// and the sandbox's pid 1 its child, pid 1 of a pid namespace of its own.
pub fn liveness(r: &Record, owner: u32) -> Liveness {
    let supervisor =
        r.supervisor.is_alive() && proc::status(r.supervisor.pid).is_some_and(|s| s.uid == owner);
    let init = r.init.is_alive() && is_sandbox_init(r);
    match (supervisor, init) {
        (true, true) => Liveness::Live,
        (true, false) => Liveness::Ending,
        (false, orphan) => Liveness::Stale { orphan },
    }
}

/// Whether the recorded pid 1 is what the record says: the child of the
/// recorded supervisor (or an orphan adopted after its supervisor died)
/// and pid 1 in a pid namespace below ours.
fn is_sandbox_init(r: &Record) -> bool {
    let Some(stat) = proc::stat(r.init.pid) else {
        return false;
    };
    if stat.start_time != r.init.start_time {
        return false;
    }
    let parent_ok = stat.ppid == r.supervisor.pid || !r.supervisor.is_alive();
    parent_ok
        && proc::status(r.init.pid)
            .is_some_and(|s| s.ns_pids.len() >= 2 && s.ns_pids.last() == Some(&1))
}

/// The runtime directories to scan: the caller's own; for root also every
/// user's (`/run/user/UID/hutch`, `/tmp/hutch-UID`), each with the uid
/// owning it.
/// A `$HUTCH_RUNTIME_DIR` is a registry of its own: then only it.
fn directories() -> Vec<(PathBuf, u32)> {
    let own = runtime_dir();
    let mut out = vec![(own.clone(), sys::geteuid())];
    let private = std::env::var_os(RUNTIME_DIR_ENV).is_some_and(|p| !p.is_empty());
    if sys::geteuid() != 0 || private {
        return out;
    }
    let mut candidates = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/run/user") {
        for e in rd.flatten() {
            candidates.push(e.path().join("hutch"));
        }
    }
    if let Ok(rd) = std::fs::read_dir("/tmp") {
        for e in rd.flatten() {
            if e.file_name().as_bytes().starts_with(b"hutch-") {
                candidates.push(e.path());
            }
        }
    }
    for path in candidates {
        if path == own {
            continue;
        }
        let Ok(fd) = sys::open_dir_path(&path) else {
            continue;
        };
        let Ok(m) = sys::fstat(fd.as_fd()) else {
            continue;
        };
        if m.mode & 0o022 == 0 && m.uid != 0 {
            out.push((path, m.uid));
        }
    }
    out
}

/// A regular file `name` of `dir`, at most `limit` bytes (never a FIFO:
/// opened non-blocking and checked).
fn read_small(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    limit: u64,
) -> Option<Vec<u8>> {
    let fd = sys::open_beneath(
        dir,
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        0,
    )
    .ok()?;
    let m = sys::fstat(fd.as_fd()).ok()?;
    if !m.is_file() || m.size > limit {
        return None;
    }
    let mut data = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(fd), limit),
        &mut data,
    )
    .ok()?;
    Some(data)
}

/// Read the record `name` of `dir`.
fn read_record(dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr) -> Option<Record> {
    let data = read_small(dir, name, RECORD_MAX_BYTES)?;
    let r: Record = serde_json::from_slice(&data).ok()?;
    (r.version == RECORD_VERSION
        && valid_sandbox_id(&r.sandbox_id)
        && name.to_bytes() == record_name(&r.sandbox_id).as_bytes())
    .then_some(r)
}

/// Every record the caller may see (root: every user's), stale ones
/// included.
pub fn list() -> Result<Vec<Entry>, RegistryError> {
    let mut out = Vec::new();
    for (path, owner) in directories() {
        let fd = if owner == sys::geteuid() {
            match open_dir(&path, false)? {
                Some(fd) => fd,
                None => continue,
            }
        } else {
            match sys::open_dir_path(&path) {
                Ok(fd) => fd,
                Err(_) => continue,
            }
        };
        for name in sys::list_dir(fd.as_fd())? {
            if !name.to_bytes().ends_with(b".json") || name.to_bytes().starts_with(b".") {
                continue;
            }
            let Some(record) = read_record(fd.as_fd(), &name) else {
                continue;
            };
            let liveness = liveness(&record, owner);
            out.push(Entry {
                record,
                liveness,
                dir: path.clone(),
            });
        }
    }
    out.sort_by_key(|e| e.record.started_unix_ms);
    Ok(out)
}

/// Remove the stale records among `entries` (and kill the orphaned
/// sandboxes of dead supervisors). Returns the ids cleaned.
pub fn clean_stale(entries: &[Entry]) -> Vec<String> {
    let mut cleaned = Vec::new();
    for e in entries {
        if let Liveness::Stale { orphan } = e.liveness {
            if orphan {
                let _ = kill_init(&e.record);
            }
            if remove_record(e).is_ok() {
                cleaned.push(e.record.sandbox_id.clone());
            }
        }
    }
    cleaned
}

fn remove_record(e: &Entry) -> Result<(), RegistryError> {
    let fd = sys::open_dir_path(&e.dir)?;
    for name in [
        record_name(&e.record.sandbox_id),
        kill_mark_name(&e.record.sandbox_id),
    ] {
        match sys::unlink_at(fd.as_fd(), &name, false) {
            Ok(()) => {}
            Err(err) if err.errno == Errno::ENOENT => {}
            Err(err) => return Err(err.into()),
        }
    }
    if let Some(cg) = &e.record.cgroup {
        // The leaf of a dead supervisor; empty once the sandbox is gone.
        let _ = std::fs::remove_dir(cg);
    }
    Ok(())
}

/// What [`kill`] did to one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KillOutcome {
    /// SIGKILL sent and the sandbox is gone.
    Killed,
    /// It had ended already.
    Gone,
    /// SIGKILL sent but pid 1 had not exited within [`KILL_WAIT`].
    StillRunning,
}

/// SIGKILL the sandbox's pid 1 through a pidfd verified to name the
/// recorded process, and wait (up to `wait`) for it to be gone.
fn kill_init_wait(r: &Record, wait: Duration) -> Result<KillOutcome, RegistryError> {
    let pidfd = match sys::pidfd_open(r.init.pid) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ESRCH => return Ok(KillOutcome::Gone),
        Err(e) => return Err(e.into()),
    };
    // Opened first, checked second: if the pid was reused meanwhile the
    // start time differs and nothing is sent.
    if !is_sandbox_init(r) {
        return Ok(KillOutcome::Gone);
    }
    match sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL) {
        Ok(()) => {}
        Err(e) if e.errno == Errno::ESRCH => return Ok(KillOutcome::Gone),
        Err(e) => return Err(e.into()),
    }
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [nix::poll::PollFd::new(
            pidfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        match nix::poll::poll(
            &mut fds,
            nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX),
        ) {
            Ok(0) => return Ok(KillOutcome::StillRunning),
            Ok(_) => return Ok(KillOutcome::Killed),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(SysError::new("poll(pidfd)", e).into()),
        }
    }
}

fn kill_init(r: &Record) -> Result<KillOutcome, RegistryError> {
    kill_init_wait(r, KILL_WAIT)
}

/// A note that `hutch kill` ended a sandbox, for whoever reports on it
/// afterwards (a session command's audit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillMark {
    /// What killed it (`hutch kill`, `hutch session close`).
    pub by: String,
    pub by_uid: u32,
    pub time_unix_ms: u64,
}

/// End the sandbox of `entry` (see [`KillOutcome`]); `by` names the
/// killer for the sandbox's report. A stale record is
/// removed; a live one is removed by its supervisor once it has reaped
/// the sandbox.
pub fn kill(entry: &Entry, by: &str) -> Result<KillOutcome, RegistryError> {
    if let Ok(fd) = sys::open_dir_path(&entry.dir) {
        let mark = KillMark {
            by: by.to_string(),
            by_uid: rustix::process::getuid().as_raw(),
            time_unix_ms: crate::util::clock::now_ms(),
        };
        if let Ok(f) = sys::open_beneath(
            fd.as_fd(),
            &kill_mark_name(&entry.record.sandbox_id),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o600,
        ) {
            let _ =
                std::fs::File::from(f).write_all(&serde_json::to_vec(&mark).expect("serializes"));
        }
    }
    let outcome = kill_init(&entry.record)?;
    if matches!(entry.liveness, Liveness::Stale { .. }) {
        remove_record(entry)?;
    }
    Ok(outcome)
}

/// Take (read and remove) the kill mark of sandbox `id` in the caller's
/// runtime directory, if `hutch kill` left one.
pub fn take_kill_mark(id: &str) -> Option<KillMark> {
    take_kill_mark_in(&runtime_dir(), id)
}

/// [`take_kill_mark`] in the runtime directory `dir` (the one a
/// [`RuntimeDir`] opened before a joined user namespace was entered).
pub fn take_kill_mark_in(dir: &Path, id: &str) -> Option<KillMark> {
    if !valid_sandbox_id(id) {
        return None;
    }
    let fd = open_dir(dir, false).ok()??;
    let name = kill_mark_name(id);
    let data = read_small(fd.as_fd(), &name, 4096)?;
    let _ = sys::unlink_at(fd.as_fd(), &name, false);
    serde_json::from_slice(&data).ok()
}

/// Kill marks left for sandboxes whose records are gone (a `hutch run`
/// nobody asked about), and half-written records of supervisors killed
/// while registering (`.tmp-ID`), removed when older than a minute.
pub fn sweep_kill_marks() {
    let Ok(Some(fd)) = open_dir(&runtime_dir(), false) else {
        return;
    };
    let Ok(names) = sys::list_dir(fd.as_fd()) else {
        return;
    };
    let cutoff = crate::util::clock::now_ms().saturating_sub(60_000) / 1000;
    for name in names {
        let text = name.to_str().ok();
        let half_written = text
            .and_then(|n| n.strip_prefix(".tmp-"))
            .is_some_and(valid_sandbox_id);
        if !half_written {
            let Some(id) = text.and_then(|n| n.strip_suffix(".killed")) else {
                continue;
            };
            if names_has(&fd, &record_name(id)) {
                continue;
            }
        }
        if sys::lstat_at(fd.as_fd(), &name).is_ok_and(|m| (m.mtime.max(0) as u64) < cutoff) {
            let _ = sys::unlink_at(fd.as_fd(), &name, false);
        }
    }
}

fn names_has(dir: &OwnedFd, name: &std::ffi::CStr) -> bool {
    sys::lstat_at(dir.as_fd(), name).is_ok()
}

/// Wait until no live record of session `session` remains (their
/// supervisors remove them once the sandboxes are reaped), up to `wait`.
/// Returns the records still there.
pub fn wait_session_gone(session: &str, wait: Duration) -> Result<Vec<Entry>, RegistryError> {
    let deadline = Instant::now() + wait;
    loop {
        let left: Vec<Entry> = list()?
            .into_iter()
            .filter(|e| e.record.session() == Some(session))
            .collect();
        let live: Vec<Entry> = left
            .iter()
            .filter(|e| !matches!(e.liveness, Liveness::Stale { .. }))
            .cloned()
            .collect();
        clean_stale(&left);
        if live.is_empty() || Instant::now() >= deadline {
            return Ok(live);
        }
        // A supervisor removes its record a moment after its sandbox has
        // gone; poll for it with a short pause.
        std::thread::sleep(Duration::from_millis(10));
    }
}
