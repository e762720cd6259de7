//! Sessions on disk: create, open, lock, bounded read/write, diff, export,
//! close, list and gc.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::sys;

use super::baseline::{BaselineWriter, ImportLimits, import_dir};
use super::changes::Skipped;
use super::error::{Result, WorkspaceError};
use super::export::{ExportOptions, ExportSummary, export};
use super::git::{GitPolicy, GitStaging, import_git};
use super::json::json_line;
use super::layers::{Layers, MergedDir, lstat_opt, read_regular};
use super::manifest::fingerprint;
use super::quote::display_name;
use super::relpath::RelPath;
use super::remove::remove_tree;
use super::render::{DiffFormat, diff};
use super::spool::Spool;

/// Host uid (and gid) of the workload when root launches (the launcher's
/// default `identity.host_uid`).
pub const ROOT_LAUNCH_UID: u32 = 65534;

/// Environment variable naming the state directory.
pub const STATE_DIR_ENV: &str = "HUTCH_STATE_DIR";

/// Where a baseline comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Source {
    /// A host directory (copied; a top-level `.git` is skipped).
    Dir { path: PathBuf },
    /// A commit of a git repository (exported from its objects).
    Git { repo: PathBuf, rev: String },
}

/// Options of `session create`.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub source: Source,
    pub git_policy: GitPolicy,
    /// Refuse the baseline unless its fingerprint is this (hex).
    pub expect_fingerprint: Option<String>,
    /// Session lifetime: no command may run past it.
    pub deadline: Option<Duration>,
    /// Number of commands the session may run.
    pub max_commands: Option<u64>,
    /// Caps of the baseline import.
    pub limits: ImportLimits,
    /// A container image every command of the session uses: resolved
    /// (and checked) at creation, recorded pinned in `session.json`.
    pub image: Option<crate::spec::ImageRef>,
}

impl CreateOptions {
    pub fn new(source: Source) -> Self {
        CreateOptions {
            source,
            git_policy: GitPolicy::default(),
            expect_fingerprint: None,
            deadline: None,
            max_commands: None,
            limits: ImportLimits::default(),
            image: None,
        }
    }
}

/// The persistent description of a session (`session.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub id: String,
    pub source: Source,
    /// Root digest of `baseline/manifest` (sha256 hex).
    pub fingerprint: String,
    pub files: usize,
    pub created_unix_ms: u64,
    /// Last time a command or file operation used the session.
    pub used_unix_ms: u64,
    pub deadline_unix_ms: Option<u64>,
    pub max_commands: Option<u64>,
    pub commands_run: u64,
    /// The image of every command, pinned (its manifest digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::spec::ImageRef>,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn random_id() -> Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| WorkspaceError::io("read /dev/urandom", e))?;
    Ok(hex::encode(b))
}

/// Whether `id` has the shape of a session id (so it can never name `..`
/// or a path).
pub fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The directory holding all sessions.
#[derive(Debug)]
pub struct StateDir {
    pub path: PathBuf,
    fd: OwnedFd,
}

impl StateDir {
    /// `$HUTCH_STATE_DIR`, else `/var/lib/hutch/sessions` for root, else
    /// `$XDG_STATE_HOME/hutch/sessions` (default `~/.local/state/...`).
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os(STATE_DIR_ENV).filter(|p| !p.is_empty()) {
            return p.into();
        }
        if sys::geteuid() == 0 {
            return "/var/lib/hutch/sessions".into();
        }
        if let Some(p) = std::env::var_os("XDG_STATE_HOME").filter(|p| !p.is_empty()) {
            return PathBuf::from(p).join("hutch/sessions");
        }
        let home = std::env::var_os("HOME").unwrap_or_else(|| "/nonexistent".into());
        PathBuf::from(home).join(".local/state/hutch/sessions")
    }

    /// Open (creating, mode 0700) the state directory. It must belong to
    /// the caller and not be writable by others: anyone else able to plant
    /// entries there could redirect sessions.
    pub fn open(path: &Path) -> Result<StateDir> {
        let bad = |reason: String| WorkspaceError::StateDir {
            path: path.to_path_buf(),
            reason,
        };
        if !path.is_absolute() {
            return Err(bad("must be an absolute path".into()));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|e| bad(format!("cannot create: {e}")))?;
        let fd = sys::open_dir_path(path)?;
        let meta = sys::fstat(fd.as_fd())?;
        if meta.uid != sys::geteuid() {
            return Err(bad(format!("owned by uid {}, not by the caller", meta.uid)));
        }
        if meta.mode & 0o022 != 0 {
            return Err(bad(format!(
                "mode {:o} is writable by others",
                meta.mode & 0o7777
            )));
        }
        Ok(StateDir {
            path: path.to_path_buf(),
            fd,
        })
    }

    /// Create a session: import and seal the baseline, check the
    /// fingerprint, then publish the directory atomically.
    pub fn create(&self, opts: &CreateOptions) -> Result<Session> {
        let id = random_id()?;
        let tmp_name = format!(".creating-{id}");
        let tmp = CString::new(tmp_name.clone()).map_err(|_| WorkspaceError::BadId(id.clone()))?;
        sys::mkdirat(self.fd.as_fd(), &tmp, 0o700)?;
        let result = self.populate(&tmp, &id, opts);
        match result {
            Ok(()) => {
                let final_name =
                    CString::new(id.clone()).map_err(|_| WorkspaceError::BadId(id.clone()))?;
                sys::rename_at(self.fd.as_fd(), &tmp, self.fd.as_fd(), &final_name)?;
                let session = self.open_session(&id)?;
                if let Some(image) = &session.info.image
                    && let Err(e) = crate::image::spec::hold_for(image, &session.path)
                {
                    let _ = self.trash(&final_name, &id);
                    return Err(WorkspaceError::Launch(e.to_string()));
                }
                Ok(session)
            }
            Err(e) => {
                let _ = remove_tree(self.fd.as_fd(), &tmp);
                Err(e)
            }
        }
    }

    fn populate(&self, name: &CString, id: &str, opts: &CreateOptions) -> Result<()> {
        let image = match &opts.image {
            Some(i) => Some(
                crate::image::spec::pin(i).map_err(|e| WorkspaceError::Launch(e.to_string()))?,
            ),
            None => None,
        };
        let dir = sys::open_dir_beneath(self.fd.as_fd(), name)?;
        for sub in [c"baseline", c"upper", c"work"] {
            sys::mkdirat(dir.as_fd(), sub, 0o755)?;
        }
        if sys::geteuid() == 0 {
            // Root launches run the workload as host uid 65534 (the
            // launcher's default); what hutch writes into the upper takes
            // the upper's owner, so it stays writable by the workload.
            for sub in [c"upper", c"work"] {
                let fd = sys::open_dir_beneath(dir.as_fd(), sub)?;
                sys::fchown(fd.as_fd(), ROOT_LAUNCH_UID, ROOT_LAUNCH_UID)?;
            }
        }
        let baseline = sys::open_dir_beneath(dir.as_fd(), c"baseline")?;
        sys::mkdirat(baseline.as_fd(), c"tree", 0o755)?;
        let tree = sys::open_dir_beneath(baseline.as_fd(), c"tree")?;
        let mut writer = BaselineWriter::with_limits(tree, opts.limits)?;
        match &opts.source {
            Source::Dir { path } => import_dir(path, &mut writer)?,
            Source::Git { repo, rev } => {
                // The sandboxed git writes its output here (hutch-made,
                // inside the session being built, removed once imported).
                sys::mkdirat(dir.as_fd(), c"git", 0o700)?;
                let staging = sys::open_dir_beneath(dir.as_fd(), c"git")?;
                let staging_path = self
                    .path
                    .join(
                        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
                            name.to_bytes(),
                        ),
                    )
                    .join("git");
                let staging_ref = GitStaging {
                    dir: staging.as_fd(),
                    path: &staging_path,
                };
                let result = import_git(repo, rev, opts.git_policy, staging_ref, &mut writer);
                drop(staging);
                remove_tree(dir.as_fd(), c"git")?;
                result?
            }
        }
        let mut manifest = writer.finish()?;
        let text = manifest.render();
        let fp = fingerprint(&text);
        if let Some(expected) = &opts.expect_fingerprint
            && !expected.eq_ignore_ascii_case(&fp)
        {
            return Err(WorkspaceError::FingerprintMismatch {
                expected: expected.clone(),
                actual: fp,
            });
        }
        write_new(baseline.as_fd(), c"manifest", &text, 0o444)?;
        sys::fchmod(baseline.as_fd(), 0o555)?;
        let now = now_ms();
        let info = SessionInfo {
            id: id.to_string(),
            source: opts.source.clone(),
            fingerprint: fp,
            files: manifest.entries.len(),
            created_unix_ms: now,
            used_unix_ms: now,
            deadline_unix_ms: opts
                .deadline
                .map(|d| now.saturating_add(d.as_millis() as u64)),
            max_commands: opts.max_commands,
            commands_run: 0,
            image,
        };
        write_new(dir.as_fd(), c"audit.jsonl", b"", 0o600)?;
        write_new(dir.as_fd(), c"lock", b"", 0o600)?;
        save_info(dir.as_fd(), &info)?;
        Ok(())
    }

    /// Open session `id`.
    pub fn open_session(&self, id: &str) -> Result<Session> {
        if !valid_id(id) {
            return Err(WorkspaceError::BadId(id.to_string()));
        }
        let name = CString::new(id).map_err(|_| WorkspaceError::BadId(id.into()))?;
        let dir = match sys::open_dir_beneath(self.fd.as_fd(), &name) {
            Ok(d) => d,
            Err(e) if e.errno == sys::Errno::ENOENT => {
                return Err(WorkspaceError::NoSession {
                    id: id.into(),
                    dir: self.path.clone(),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let info = load_info(dir.as_fd(), &self.path.join(id))?;
        Ok(Session {
            path: self.path.join(id),
            dir,
            info,
            wait: false,
        })
    }

    /// Remove session `id` and everything in it. Closing a session that
    /// does not exist (any more) succeeds.
    pub fn close(&self, id: &str, wait: bool) -> Result<bool> {
        if !valid_id(id) {
            return Err(WorkspaceError::BadId(id.to_string()));
        }
        let name = CString::new(id).map_err(|_| WorkspaceError::BadId(id.into()))?;
        let session = match self.open_session(id) {
            Ok(s) => s,
            Err(WorkspaceError::NoSession { .. }) => return Ok(false),
            Err(WorkspaceError::State { .. }) => {
                // Unreadable state: still removable.
                self.trash(&name, id)?;
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let _lock = session.with_wait(wait).lock()?;
        self.trash(&name, id)?;
        Ok(true)
    }

    /// Rename the session out of sight, then remove it through fds.
    fn trash(&self, name: &CString, id: &str) -> Result<()> {
        let trash = CString::new(format!(".trash-{id}-{}", random_id()?))
            .map_err(|_| WorkspaceError::BadId(id.into()))?;
        match sys::rename_at(self.fd.as_fd(), name, self.fd.as_fd(), &trash) {
            Ok(()) => remove_tree(self.fd.as_fd(), &trash),
            Err(e) if e.errno == sys::Errno::ENOENT => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// All sessions (unreadable ones are skipped).
    pub fn list(&self) -> Result<Vec<SessionInfo>> {
        let mut out = Vec::new();
        for name in sys::list_dir(self.fd.as_fd())? {
            let Ok(id) = name.to_str() else { continue };
            if !valid_id(id) {
                continue;
            }
            if let Ok(s) = self.open_session(id) {
                out.push(s.info);
            }
        }
        out.sort_by_key(|i| i.created_unix_ms);
        Ok(out)
    }

    /// Remove sessions unused for longer than `older_than` (skipping those
    /// busy right now), leftovers of interrupted closes (`.trash-*`) and of
    /// creates (`.creating-*`, when older than `older_than`). An entry that
    /// cannot be removed is reported and gc goes on with the others.
    pub fn gc(&self, older_than: Duration) -> Result<GcReport> {
        let cutoff = now_ms().saturating_sub(older_than.as_millis() as u64);
        let mut report = GcReport::default();
        for name in sys::list_dir(self.fd.as_fd())? {
            let Ok(text) = name.to_str() else { continue };
            let result = if text.starts_with(".trash-") {
                remove_tree(self.fd.as_fd(), &name).map(|()| false)
            } else if text.starts_with(".creating-") {
                self.mtime_before(&name, cutoff).and_then(|old| {
                    if old {
                        remove_tree(self.fd.as_fd(), &name)?;
                    }
                    Ok(false)
                })
            } else if valid_id(text) {
                self.gc_session(text, &name, cutoff)
            } else {
                continue;
            };
            match result {
                Ok(true) => report.removed.push(text.to_string()),
                Ok(false) => {}
                Err(e) => report.failed.push((text.to_string(), e)),
            }
        }
        Ok(report)
    }

    /// Whether the entry `name` was last modified before `cutoff` (ms).
    fn mtime_before(&self, name: &CString, cutoff: u64) -> Result<bool> {
        let meta = sys::lstat_at(self.fd.as_fd(), name)?;
        Ok((meta.mtime.max(0) as u64) * 1000 <= cutoff)
    }

    /// Close session `id` if unused since `cutoff`; whether it was removed.
    fn gc_session(&self, id: &str, name: &CString, cutoff: u64) -> Result<bool> {
        let old = match self.open_session(id) {
            Ok(s) => s.info.used_unix_ms <= cutoff,
            Err(WorkspaceError::State { .. }) => self.mtime_before(name, cutoff)?,
            Err(_) => false,
        };
        if !old {
            return Ok(false);
        }
        match self.close(id, false) {
            Ok(_) => Ok(true),
            Err(WorkspaceError::Busy(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// What [`StateDir::gc`] did.
#[derive(Debug, Default)]
pub struct GcReport {
    /// Ids of the sessions removed.
    pub removed: Vec<String>,
    /// Entries of the state directory that could not be removed, and why.
    pub failed: Vec<(String, WorkspaceError)>,
}

fn write_new(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    data: &[u8],
    mode: u32,
) -> Result<()> {
    let fd = sys::open_beneath(
        dir,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        mode,
    )?;
    let mut f = std::fs::File::from(fd);
    f.write_all(data)
        .map_err(|e| WorkspaceError::io(format!("write {}", name.to_string_lossy()), e))?;
    sys::fchmod(f.as_fd(), mode)?;
    Ok(())
}

fn save_info(dir: std::os::fd::BorrowedFd<'_>, info: &SessionInfo) -> Result<()> {
    let text = serde_json::to_vec_pretty(info)
        .map_err(|e| WorkspaceError::io("encode session.json", e.into()))?;
    let _ = sys::unlink_at(dir, c"session.json.tmp", false);
    write_new(dir, c"session.json.tmp", &text, 0o600)?;
    sys::rename_at(dir, c"session.json.tmp", dir, c"session.json")?;
    Ok(())
}

fn load_info(dir: std::os::fd::BorrowedFd<'_>, shown: &Path) -> Result<SessionInfo> {
    let state = |reason: String| WorkspaceError::State {
        path: shown.join("session.json"),
        reason,
    };
    let data = read_regular(dir, c"session.json", 1 << 20, b"session.json")
        .map_err(|e| state(e.to_string()))?;
    serde_json::from_slice(&data).map_err(|e| state(e.to_string()))
}

/// An open session.
#[derive(Debug)]
pub struct Session {
    pub path: PathBuf,
    dir: OwnedFd,
    pub info: SessionInfo,
    wait: bool,
}

/// The session's lock, held until dropped.
#[derive(Debug)]
pub struct SessionLock {
    _fd: OwnedFd,
}

impl Session {
    /// Whether operations wait for the lock (default: fail with `Busy`).
    pub fn with_wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }

    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// Take the session's lock: one operation at a time, so no command
    /// runs while the upper is read or written.
    pub fn lock(&self) -> Result<SessionLock> {
        let fd = sys::open_beneath(self.dir.as_fd(), c"lock", libc::O_RDWR, 0)?;
        if !sys::flock_exclusive(fd.as_fd(), self.wait)? {
            return Err(WorkspaceError::Busy(self.info.id.clone()));
        }
        Ok(SessionLock { _fd: fd })
    }

    /// The host paths of the overlay: (baseline tree, upper, work).
    pub fn overlay_dirs(&self) -> (PathBuf, PathBuf, PathBuf) {
        (
            self.path.join("baseline/tree"),
            self.path.join("upper"),
            self.path.join("work"),
        )
    }

    /// The session directory fd.
    pub fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.dir.as_fd()
    }

    fn layers(&self) -> Result<Layers> {
        let baseline = sys::open_dir_beneath(self.dir.as_fd(), c"baseline")?;
        Ok(Layers {
            base: sys::open_dir_beneath(baseline.as_fd(), c"tree")?,
            upper: sys::open_dir_beneath(self.dir.as_fd(), c"upper")?,
        })
    }

    /// Reload `session.json` (under the lock) and save it after `f`.
    pub(crate) fn update_info(&mut self, f: impl FnOnce(&mut SessionInfo)) -> Result<()> {
        let mut info = load_info(self.dir.as_fd(), &self.path)?;
        f(&mut info);
        save_info(self.dir.as_fd(), &info)?;
        self.info = info;
        Ok(())
    }

    /// Append one JSON line to `audit.jsonl`.
    pub fn audit(&self, event: &serde_json::Value) -> Result<()> {
        let fd = sys::open_beneath(
            self.dir.as_fd(),
            c"audit.jsonl",
            libc::O_WRONLY | libc::O_APPEND,
            0,
        )?;
        let line = json_line(event)?;
        std::fs::File::from(fd)
            .write_all(&line)
            .map_err(|e| WorkspaceError::io("append to audit.jsonl", e))
    }

    /// The content of `path` in the workspace (at most `max_bytes`; a
    /// larger file is an error). Links are not followed.
    pub fn read(&self, path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
        let rel = RelPath::parse(path)?;
        let _lock = self.lock()?;
        let layers = self.layers()?;
        let shown = rel.to_bytes();
        let Some(found) = layers.lookup(&rel)? else {
            return Err(WorkspaceError::BadPath {
                path: display_name(&shown),
                reason: "does not exist in the workspace".into(),
            });
        };
        read_regular(found.dir.as_fd(), &found.name, max_bytes, &shown)
    }

    /// Write `data` (at most `max_bytes`, else nothing is written) to
    /// `path` in the workspace, creating parent directories. Returns the
    /// byte count. The file is replaced (a new file renamed over the old
    /// name), never written in place: the name may be a hardlink the
    /// workload made to another file. On failure nothing is left behind,
    /// not even the parent directories it created.
    pub fn write(&mut self, path: &Path, data: &mut dyn Read, max_bytes: u64) -> Result<u64> {
        let rel = RelPath::parse(path)?;
        let shown = rel.to_bytes();
        let mut buf = Vec::new();
        data.take(max_bytes.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| WorkspaceError::io("read the data to write", e))?;
        if buf.len() as u64 > max_bytes {
            return Err(WorkspaceError::TooLarge {
                what: format!("the data for {}", display_name(&shown)),
                limit: max_bytes,
            });
        }
        let _lock = self.lock()?;
        let layers = self.layers()?;
        let mut created = None;
        let result = write_at(&layers, &rel, &buf, &mut created);
        if result.is_err()
            && let Some((parent, name)) = created
        {
            let _ = remove_tree(parent.as_fd(), &name);
        }
        result?;
        self.update_info(|i| i.used_unix_ms = now_ms())?;
        self.audit(&serde_json::json!({
            "event": "write", "time_unix_ms": now_ms(),
            "path": String::from_utf8_lossy(&shown), "bytes": buf.len(),
        }))?;
        Ok(buf.len() as u64)
    }

    /// The diff of the workspace against its baseline, rendered in
    /// `format`, and the entries git cannot represent (FIFOs, sockets,
    /// devices: reported, never opened). With `max_bytes`, a longer diff
    /// is an error, never a truncated one. The output is held in memory:
    /// see [`Session::diff_to`] for large diffs.
    pub fn diff(
        &self,
        format: DiffFormat,
        max_bytes: Option<u64>,
    ) -> Result<(Vec<u8>, Vec<Skipped>)> {
        let mut out = Vec::new();
        let skipped = self.diff_to(format, max_bytes, &mut out)?;
        Ok((out, skipped))
    }

    /// [`Session::diff`] into `out`, whole or not at all (nothing is
    /// written when it fails), in bounded memory: output beyond 1 MiB is
    /// spooled to an unnamed file in the session directory first.
    pub fn diff_to(
        &self,
        format: DiffFormat,
        max_bytes: Option<u64>,
        out: &mut dyn Write,
    ) -> Result<Vec<Skipped>> {
        let _lock = self.lock()?;
        diff(&self.layers()?, format, max_bytes, self.dir.as_fd(), out)
    }

    /// Export `paths` (and with `patch`, the unified diff) into `out`.
    pub fn export(
        &self,
        out: &Path,
        paths: &[PathBuf],
        patch: bool,
        opts: &ExportOptions,
    ) -> Result<ExportSummary> {
        self.export_inner(out, paths, patch, opts, None)
    }

    /// [`Session::export`], also writing the manifest JSON (the archive's
    /// `.hutch/manifest.json`) to `manifest` once the archive is in place.
    pub fn export_with_manifest(
        &self,
        out: &Path,
        paths: &[PathBuf],
        patch: bool,
        opts: &ExportOptions,
        manifest: &mut dyn Write,
    ) -> Result<ExportSummary> {
        self.export_inner(out, paths, patch, opts, Some(manifest))
    }

    fn export_inner(
        &self,
        out: &Path,
        paths: &[PathBuf],
        patch: bool,
        opts: &ExportOptions,
        manifest: Option<&mut dyn Write>,
    ) -> Result<ExportSummary> {
        let rels = paths
            .iter()
            .map(|p| RelPath::parse(p))
            .collect::<Result<Vec<_>>>()?;
        let _lock = self.lock()?;
        let layers = self.layers()?;
        let mut spooled = None;
        if patch {
            let mut spool = Spool::new(self.dir.as_fd())?;
            diff(
                &layers,
                DiffFormat::Unified,
                Some(opts.max_total_bytes),
                self.dir.as_fd(),
                &mut spool,
            )?;
            spooled = Some(spool);
        }
        let summary = export(
            &layers,
            &rels,
            spooled.as_mut(),
            out,
            opts,
            self.dir.as_fd(),
            manifest,
        )?;
        self.audit(&serde_json::json!({
            "event": "export", "time_unix_ms": now_ms(),
            "archive": out.display().to_string(), "entries": summary.entries,
            "total_bytes": summary.total_bytes,
        }))?;
        Ok(summary)
    }
}

/// Give `fd` the owner of the upper directory (when running as root, files
/// hutch writes must stay writable by the sandbox's user).
fn chown_like(fd: std::os::fd::BorrowedFd<'_>, owner: &sys::Meta) -> Result<()> {
    let m = sys::fstat(fd)?;
    if m.uid != owner.uid || m.gid != owner.gid {
        sys::fchown(fd, owner.uid, owner.gid)?;
    }
    Ok(())
}

fn dup_fd(fd: &OwnedFd) -> Result<OwnedFd> {
    fd.try_clone()
        .map_err(|e| WorkspaceError::io("dup a directory fd", e))
}

/// The body of [`Session::write`]: create the missing parents in the upper
/// (`created` gets the first one, for cleanup), then replace the file.
fn write_at(
    layers: &Layers,
    rel: &RelPath,
    data: &[u8],
    created: &mut Option<(OwnedFd, CString)>,
) -> Result<()> {
    let shown = rel.to_bytes();
    let bad = |reason: &str| WorkspaceError::BadPath {
        path: display_name(&shown),
        reason: reason.into(),
    };
    let owner = sys::fstat(layers.upper.as_fd())?;
    let Some((name, parents)) = rel.components().split_last() else {
        return Err(WorkspaceError::BadPath {
            path: "/workspace".into(),
            reason: "names the workspace itself".into(),
        });
    };
    let mut merged = layers.root()?;
    let mut up = dup_fd(&layers.upper)?;
    for (i, c) in parents.iter().enumerate() {
        let walked = &rel.components()[..=i];
        // The merged view of `c` before anything is created: its baseline
        // part (if visible) stays the lower of what the upper gets.
        let next = merged.child_dir(c, walked)?;
        match lstat_opt(up.as_fd(), c)? {
            Some(m) if m.is_dir() => {}
            Some(m) if m.is_whiteout() => {
                return Err(bad("a parent directory was deleted in the workspace"));
            }
            Some(_) => return Err(bad("a parent is not a directory")),
            None => {
                // Like overlayfs copy-up: the directory appears in the
                // upper with the baseline's mode (or 0755 when new).
                let mode = match next.as_ref().and_then(|d| d.base.as_ref()) {
                    Some(b) => sys::fstat(b.as_fd())?.mode & 0o777 | 0o700,
                    None => 0o755,
                };
                sys::mkdirat(up.as_fd(), c, 0o700)?;
                if created.is_none() {
                    *created = Some((dup_fd(&up)?, c.clone()));
                }
                let fd = sys::open_dir_beneath(up.as_fd(), c)?;
                sys::fchmod(fd.as_fd(), mode)?;
                chown_like(fd.as_fd(), &owner)?;
            }
        }
        up = sys::open_dir_beneath(up.as_fd(), c)?;
        merged = MergedDir {
            upper: Some(dup_fd(&up)?),
            base: next.and_then(|n| n.base),
        };
    }
    let mode = match merged.entry(name)? {
        Some(f) if f.meta.is_file() => f.meta.mode & 0o777,
        Some(_) => return Err(bad("exists and is not a regular file")),
        None => 0o644,
    };
    // A new file beside the old name, renamed over it (over a whiteout
    // too): the old inode, maybe linked elsewhere, is never written.
    let tmp = CString::new(format!(".hutch-write-{}", random_id()?))
        .map_err(|_| bad("temporary name"))?;
    let fd = sys::open_beneath(
        up.as_fd(),
        &tmp,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )?;
    let written = (|| {
        sys::fchmod(fd.as_fd(), mode)?;
        chown_like(fd.as_fd(), &owner)?;
        std::fs::File::from(fd)
            .write_all(data)
            .map_err(|e| WorkspaceError::io(format!("write {}", display_name(&shown)), e))?;
        sys::rename_at(up.as_fd(), &tmp, up.as_fd(), name)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = sys::unlink_at(up.as_fd(), &tmp, false);
    }
    written
}
