//! Sessions on disk: create, open, lock, bounded read/write, diff, export,
//! close, list and gc.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::spec::Spec;
use crate::sys;
use crate::util::clock::now_ms;
use crate::util::quote::display_name;

use super::baseline::{BaselineWriter, ImportLimits, import_dir};
use super::changes::Skipped;
use super::disk::{DiskMechanism, DiskUsage};
use super::error::{Result, WorkspaceError};
use super::export::{ExportOptions, ExportOrigin, ExportSummary, export};
use super::git::{GitPolicy, GitStaging, import_git};
use super::ignore::{IGNORE_FILE_MAX_BYTES, IgnoreFiles, IgnoreRules};
pub use super::info::{
    Lock, ROOT_LAUNCH_UID, RunningCommand, SealInfo, SessionInfo, Since, Source,
};
use super::json::json_line;
use super::layers::{Layers, MergedDir, lstat_opt, read_regular};
use super::manifest::fingerprint;
use super::relpath::{RelPath, WORKSPACE_DIR};
use super::remove::remove_tree;
use super::render::{DiffFormat, DiffSummary, diff_filtered};
use super::spool::Spool;

/// Environment variable naming the state directory.
pub const STATE_DIR_ENV: &str = "HUTCH_STATE_DIR";

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
    /// Where the workspace appears in the session's sandboxes (absolute;
    /// default `/workspace`).
    pub workspace_path: PathBuf,
    /// Quota of the writable layers: bytes, and whether it is required
    /// (`--disk-max`, fail closed) or preferred (`--disk-max-preferred`).
    pub disk: Option<(u64, bool)>,
    /// Defaults of every command (binds, env, egress, limits, seccomp):
    /// a Spec without workspace and command.
    pub defaults: Option<Spec>,
    /// What commands may not widen beyond `defaults` (see `Lock`).
    pub locks: Vec<Lock>,
    /// A directory that receives the audit when the session closes.
    pub audit_dir: Option<PathBuf>,
    /// A container image every command of the session uses: resolved
    /// (and checked) at creation, recorded pinned in `session.json`.
    pub image: Option<crate::spec::ImageRef>,
    /// Most frozen layers the stack keeps before a snapshot or seal
    /// compacts the oldest ones (`--compact-depth`; None: the default,
    /// [`DEFAULT_COMPACT_DEPTH`](super::compact::DEFAULT_COMPACT_DEPTH)).
    pub compact_depth: Option<usize>,
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
            workspace_path: PathBuf::from(WORKSPACE_DIR),
            disk: None,
            defaults: None,
            locks: Vec::new(),
            audit_dir: None,
            image: None,
            compact_depth: None,
        }
    }
}

/// A workspace path must be absolute, normal (no `.`/`..`), not `/`.
fn check_workspace_path(p: &Path) -> Result<()> {
    let ok = p.is_absolute()
        && p != Path::new("/")
        && p.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        })
        && !p.as_os_str().as_encoded_bytes().contains(&0);
    if ok {
        Ok(())
    } else {
        Err(WorkspaceError::BadPath {
            path: p.display().to_string(),
            reason:
                "--workspace-path must be an absolute path other than / without . or .. components"
                    .into(),
        })
    }
}

/// The baseline's `.gitignore` files (those of at most 1 MiB) and a git
/// import's `info/exclude`, for diffs (see `ignore.rs`).
fn collect_ignore_files(
    baseline: std::os::fd::BorrowedFd<'_>,
    manifest: &super::manifest::Manifest,
    exclude: Option<Vec<u8>>,
) -> Result<IgnoreFiles> {
    let tree = sys::open_dir_beneath(baseline, c"tree")?;
    let mut out = IgnoreFiles {
        gitignore: Vec::new(),
        exclude: exclude.map(|e| String::from_utf8_lossy(&e).into_owned()),
    };
    for e in &manifest.entries {
        let dir: &[u8] = if e.path == b".gitignore" {
            b""
        } else if let Some(d) = e.path.strip_suffix(b"/.gitignore") {
            d
        } else {
            continue;
        };
        if e.mode == super::manifest::MODE_LINK || e.size > IGNORE_FILE_MAX_BYTES {
            continue;
        }
        let rel = RelPath::parse(Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&e.path),
        ))?;
        let layers = Layers::new(dup_fd(&tree)?, dup_fd(&tree)?);
        let Some(found) = layers.lookup(&rel)? else {
            continue;
        };
        let text = read_regular(
            found.dir.as_fd(),
            &found.name,
            IGNORE_FILE_MAX_BYTES,
            &e.path,
        )?;
        out.gitignore.push((
            String::from_utf8_lossy(dir).into_owned(),
            String::from_utf8_lossy(&text).into_owned(),
        ));
    }
    Ok(out)
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
        // Opened first: it exists on every call but the first (and this
        // is on every session command's path).
        let fd = match sys::open_dir_path(path) {
            Err(e) if e.errno == sys::Errno::ENOENT => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(path)
                    .map_err(|e| bad(format!("cannot create: {e}")))?;
                sys::open_dir_path(path)?
            }
            other => other?,
        };
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
                    return Err(WorkspaceError::Image(e));
                }
                let mut session = session;
                if session.info.image.is_some()
                    && let Err(e) = session.hold_id_range()
                {
                    let _ = self.trash(&final_name, &id);
                    return Err(e);
                }
                Ok(session)
            }
            Err(e) => {
                if let Ok(dir) = sys::open_dir_beneath(self.fd.as_fd(), &tmp) {
                    let _ = super::disk::detach(dir.as_fd(), &self.path.join(&tmp_name));
                }
                let _ = remove_tree(self.fd.as_fd(), &tmp);
                Err(e)
            }
        }
    }

    fn populate(&self, name: &CString, id: &str, opts: &CreateOptions) -> Result<()> {
        let image = match &opts.image {
            Some(i) => Some(crate::image::spec::pin(i).map_err(WorkspaceError::Image)?),
            None => None,
        };
        let dir = sys::open_dir_beneath(self.fd.as_fd(), name)?;
        let shown = self
            .path
            .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes()));
        check_workspace_path(&opts.workspace_path)?;
        if let Some(d) = &opts.audit_dir
            && !std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir())
        {
            return Err(WorkspaceError::BadPath {
                path: d.display().to_string(),
                reason: "--audit-dir must name an existing directory".into(),
            });
        }
        let disk = opts
            .disk
            .map(|(bytes, required)| super::disk::choose(bytes, required))
            .transpose()?;
        sys::mkdirat(dir.as_fd(), c"baseline", 0o755)?;
        sys::mkdirat(dir.as_fd(), c"seals", 0o700)?;
        // The writable layers: in the session directory, or on the image
        // of a hard quota.
        let rw = match disk.map(|d| d.mechanism) {
            Some(DiskMechanism::LoopExt4) => {
                let bytes = disk.expect("set").max_bytes;
                super::disk::create_image(dir.as_fd(), &shown, bytes, 0)?;
                super::disk::attach(dir.as_fd())?;
                sys::open_dir_beneath(dir.as_fd(), super::disk::MOUNT)?
            }
            _ => dup_fd(&dir)?,
        };
        for sub in [c"upper", c"work", c"layers"] {
            sys::mkdirat(rw.as_fd(), sub, 0o755)?;
        }
        if sys::geteuid() == 0 {
            // Root launches run the workload as host uid 65534 (the
            // launcher's default); what hutch writes into the upper takes
            // the upper's owner, so it stays writable by the workload.
            for sub in [c"upper", c"work"] {
                let fd = sys::open_dir_beneath(rw.as_fd(), sub)?;
                sys::fchown(fd.as_fd(), ROOT_LAUNCH_UID, ROOT_LAUNCH_UID)?;
            }
        }
        drop(rw);
        let baseline = sys::open_dir_beneath(dir.as_fd(), c"baseline")?;
        sys::mkdirat(baseline.as_fd(), c"tree", 0o755)?;
        let tree = sys::open_dir_beneath(baseline.as_fd(), c"tree")?;
        let mut writer = BaselineWriter::with_limits(tree, opts.limits)?;
        let mut exclude = None;
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
                exclude = result?;
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
        let ignore = collect_ignore_files(baseline.as_fd(), &manifest, exclude)?;
        let ignore = serde_json::to_vec(&ignore)
            .map_err(|e| WorkspaceError::io("encode baseline/ignore", e.into()))?;
        write_new(baseline.as_fd(), c"ignore", &ignore, 0o444)?;
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
            workspace_path: opts.workspace_path.clone(),
            seals: Vec::new(),
            network_sealed: false,
            disk,
            disk_usage: None,
            defaults: opts.defaults.clone(),
            locks: opts.locks.clone(),
            audit_dir: opts.audit_dir.clone(),
            running: None,
            image,
            parent: None,
            baseline_origin: None,
            id_range_start: None,
            compact_depth: opts.compact_depth,
        };
        write_new(dir.as_fd(), c"audit.jsonl", b"", 0o600)?;
        append_audit(
            dir.as_fd(),
            &serde_json::json!({
                "event": "create", "time_unix_ms": now, "session": id,
                "source": match &info.source {
                    Source::Git { rev, .. } => serde_json::json!({"kind": "git", "commit": rev}),
                    Source::Dir { .. } => serde_json::json!({"kind": "dir"}),
                },
                "fingerprint": info.fingerprint, "files": info.files,
                "workspace_path": info.workspace_path, "disk": info.disk,
                "deadline_unix_ms": info.deadline_unix_ms, "max_commands": info.max_commands,
                "defaults": info.defaults.is_some(), "locks": info.locks,
                "audit_dir": info.audit_dir,
                "image": info.image.as_ref().and_then(|m| m.digest.as_deref()),
            }),
        )?;
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
            state: dup_fd(&self.fd)?,
            info,
            wait: false,
        })
    }

    /// The state directory's fd.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Rename the session out of sight, then remove it through fds.
    pub(crate) fn trash(&self, name: &CString, id: &str) -> Result<()> {
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
}

pub(crate) fn write_new(
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

/// Append one JSON line to the `audit.jsonl` of the session directory
/// `dir` (one write: lines of concurrent writers never mix).
fn append_audit(dir: std::os::fd::BorrowedFd<'_>, event: &serde_json::Value) -> Result<()> {
    let fd = sys::open_beneath(dir, c"audit.jsonl", libc::O_WRONLY | libc::O_APPEND, 0)?;
    let line = json_line(event)?;
    std::fs::File::from(fd)
        .write_all(&line)
        .map_err(|e| WorkspaceError::io("append to audit.jsonl", e))
}

/// The marker of the command running now (`STATE/ID/running`: its
/// [`RunningCommand`], one JSON object). Created (a new file) when a
/// command starts and removed after its end is in `session.json`, so a
/// command costs one `session.json` rewrite, not two: a rename over an
/// existing file is the expensive step (ext4 starts writing the new
/// file's data back), creating and removing a small file is not. A
/// marker left by a killed process is how the next operation, holding
/// the lock, learns that command `command_seq` ran and never recorded
/// its end ([`Session::lock`]).
pub const RUNNING: &std::ffi::CStr = c"running";

/// The running marker of `dir`: None when there is none, Some(None) when
/// there is one that cannot be read (e.g. empty after a power loss).
fn read_running(dir: std::os::fd::BorrowedFd<'_>) -> Result<Option<Option<RunningCommand>>> {
    match read_regular(dir, RUNNING, 4096, b"running") {
        Ok(data) => Ok(Some(serde_json::from_slice(&data).ok())),
        Err(WorkspaceError::Sys(e)) if e.errno == sys::Errno::ENOENT => Ok(None),
        Err(e) => Err(e),
    }
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
    let mut info = serde_json::from_slice(&data).map_err(|e| state(e.to_string()))?;
    // The counters of the last commands are in `progress`.
    if let Some(p) = super::progress::read(dir).map_err(|e| state(format!("progress: {e}")))? {
        super::progress::merge(&mut info, &p);
    }
    Ok(info)
}

/// An open session.
#[derive(Debug)]
pub struct Session {
    pub path: PathBuf,
    dir: OwnedFd,
    /// The state directory (for its shared layers, `shared.rs`).
    state: OwnedFd,
    pub info: SessionInfo,
    wait: bool,
}

/// The session's lock, held until dropped, and its lock on the upper.
#[derive(Debug)]
pub struct SessionLock {
    _fd: OwnedFd,
    upper: OwnedFd,
}

/// Held by whoever has the session's upper mounted, until that overlay is
/// gone; taken (waiting) by every operation after the session lock. A
/// command served warm hands it to the sandbox's supervisor, which lets
/// it go once the sandbox's mount namespace is torn down: the command's
/// report and the session lock come back before the overlay's end (and
/// its sync of the upper's filesystem), and the next operation on the
/// upper waits for that end here (docs/sessions.md, "Locks").
pub const UPPER_LOCK: &std::ffi::CStr = c"upper.lock";

impl SessionLock {
    /// The lock on the session's upper (see [`UPPER_LOCK`]), to hand to
    /// the supervisor of the command that mounts it.
    pub fn upper(&self) -> std::os::fd::BorrowedFd<'_> {
        self.upper.as_fd()
    }
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
    /// runs while the upper is read or written. Then wait for the end of
    /// the last command's sandbox, if it is still ending (`UPPER_LOCK`).
    ///
    /// Holding it, the session is repaired from what a killed process left
    /// behind: an unfinished seal is rolled back, and a command whose
    /// process died before recording its end gets its end line.
    pub fn lock(&self) -> Result<SessionLock> {
        self.lock_and_load().map(|(lock, _)| lock)
    }

    /// [`Session::lock`], then `session.json` as read under it (after the
    /// repairs), made this handle's: one read where a caller about to
    /// change it would otherwise read it a second time.
    pub(crate) fn lock_reloaded(&mut self) -> Result<SessionLock> {
        let (lock, info) = self.lock_and_load()?;
        self.info = info;
        Ok(lock)
    }

    /// [`Session::lock`] and `session.json` as read under it.
    fn lock_and_load(&self) -> Result<(SessionLock, SessionInfo)> {
        let fd = sys::open_beneath(self.dir.as_fd(), c"lock", libc::O_RDWR, 0)?;
        if !sys::flock_exclusive(fd.as_fd(), self.wait)? {
            return Err(WorkspaceError::Busy(self.info.id.clone()));
        }
        // Created here rather than with the session: sessions made by
        // earlier versions have none.
        let upper = sys::open_beneath(
            self.dir.as_fd(),
            UPPER_LOCK,
            libc::O_RDWR | libc::O_CREAT,
            0o600,
        )?;
        // Only the supervisor of a command whose report is out can hold
        // it (every other holder holds the session lock first): this
        // waits for a sandbox's teardown, never for a command.
        while let Err(e) = sys::flock_exclusive(upper.as_fd(), true) {
            if e.errno != sys::Errno::EINTR {
                return Err(e.into());
            }
        }
        let info = self.recover()?;
        Ok((SessionLock { _fd: fd, upper }, info))
    }

    /// See [`Session::lock`]. Returns `session.json` as it is after the
    /// repairs.
    fn recover(&self) -> Result<SessionInfo> {
        let rw = self.rw()?;
        // A freeze or a rollback a killed process left unfinished (may
        // rewrite session.json, so it is read after).
        for event in super::snapshot_journal::recover(
            self.dir.as_fd(),
            rw.as_fd(),
            self.state.as_fd(),
            &self.path,
        )? {
            self.audit(&event)?;
        }
        if let Some(event) =
            super::compact_journal::recover(self.dir.as_fd(), self.state.as_fd(), &self.path)?
        {
            self.audit(&event)?;
        }
        let mut info = load_info(self.dir.as_fd(), &self.path)?;
        if super::seal_journal::recover(self.dir.as_fd(), rw.as_fd(), info.seals.len())? {
            self.audit(&serde_json::json!({
                "event": "seal-rolled-back", "time_unix_ms": now_ms(),
                "seal": info.seals.len() + 1,
                "reason": "the process sealing the session ended before the seal was recorded",
            }))?;
        }
        let marker = read_running(self.dir.as_fd())?;
        let lost = match (info.running.clone(), &marker) {
            (Some(r), _) => Some(r),
            // Its end is recorded (killed after that, before the unlink).
            (None, Some(Some(r))) if r.command_seq <= info.commands_run => None,
            (None, Some(Some(r))) => Some(r.clone()),
            // Unreadable: a command started and its end is not recorded.
            (None, Some(None)) => Some(RunningCommand {
                command_seq: info.commands_run + 1,
                pid: 0,
                start_time: 0,
                start_unix_ms: 0,
            }),
            (None, None) => None,
        };
        if let Some(r) = lost {
            let end = now_ms();
            let who = match r.pid {
                0 => "the process running the command".to_string(),
                pid => format!("the process running the command (pid {pid})"),
            };
            self.audit(&serde_json::json!({
                "event": "command", "command_seq": r.command_seq,
                "start_unix_ms": r.start_unix_ms, "end_unix_ms": end,
                "exit": null, "supervisor_lost": true,
                "error": format!(
                    "{who} ended before recording its end (killed?); its sandbox ended with it"
                ),
            }))?;
            // The command counts against the budget all the same.
            info.running = None;
            info.commands_run = info.commands_run.max(r.command_seq);
            info.used_unix_ms = end;
            save_info(self.dir.as_fd(), &info)?;
            // Its runtime record, if any, is stale now.
            if let Ok(entries) = crate::registry::list() {
                let mine: Vec<_> = entries
                    .into_iter()
                    .filter(|e| e.record.session() == Some(info.id.as_str()))
                    .collect();
                crate::registry::clean_stale(&mine);
            }
        }
        if marker.is_some() {
            self.clear_running()?;
        }
        Ok(info)
    }

    /// Record that command `r` runs now (the [`RUNNING`] marker). The
    /// caller holds the lock; [`Session::lock`] removed any earlier one.
    pub(crate) fn mark_running(&self, r: &RunningCommand) -> Result<()> {
        let data = serde_json::to_vec(r)
            .map_err(|e| WorkspaceError::io("encode the running marker", e.into()))?;
        write_new(self.dir.as_fd(), RUNNING, &data, 0o600)
    }

    /// Commands started so far, the one running now included (its count
    /// reaches `session.json` at its end; until then it is in the
    /// `RUNNING` marker). Read without the lock.
    pub fn commands_started(&self) -> u64 {
        match read_running(self.dir.as_fd()) {
            Ok(Some(Some(r))) => self.info.commands_run.max(r.command_seq),
            _ => self.info.commands_run,
        }
    }

    /// Remove the [`RUNNING`] marker (absent is fine).
    pub(crate) fn clear_running(&self) -> Result<()> {
        match sys::unlink_at(self.dir.as_fd(), RUNNING, false) {
            Ok(()) => Ok(()),
            Err(e) if e.errno == sys::Errno::ENOENT => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The host path of the directory holding the writable layers
    /// (`upper`, `work`, `layers/N`): the session directory, or the mount
    /// point of its disk image.
    pub fn rw_path(&self) -> PathBuf {
        match self.info.disk.map(|d| d.mechanism) {
            Some(DiskMechanism::LoopExt4) => self.path.join("disk"),
            _ => self.path.clone(),
        }
    }

    /// The directory holding the writable layers, attaching the disk
    /// image first if it is not (after a reboot).
    pub(crate) fn rw(&self) -> Result<OwnedFd> {
        match self.info.disk.map(|d| d.mechanism) {
            Some(DiskMechanism::LoopExt4) => {
                super::disk::attach(self.dir.as_fd())?;
                Ok(sys::open_dir_beneath(self.dir.as_fd(), super::disk::MOUNT)?)
            }
            _ => dup_fd(&self.dir),
        }
    }

    /// The host paths of the overlay: (lowers top first: sealed layers
    /// newest first, then the baseline tree; upper; work).
    pub fn overlay_dirs(&self) -> (Vec<PathBuf>, PathBuf, PathBuf) {
        let rw = self.rw_path();
        let store = self.state_path().join(".layers");
        let mut lowers: Vec<PathBuf> = self
            .info
            .physical_layers()
            .rev()
            .map(|s| match &s.layer {
                Some(id) => store.join(id),
                None => rw.join("layers").join(s.index.to_string()),
            })
            .collect();
        lowers.push(self.baseline_path().join("tree"));
        (lowers, rw.join("upper"), rw.join("work"))
    }

    /// The state directory's path.
    fn state_path(&self) -> PathBuf {
        self.path.parent().map(Path::to_path_buf).unwrap_or_default()
    }

    /// The state directory's fd.
    pub(crate) fn state_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.state.as_fd()
    }

    /// Where the session's baseline is: its own directory's `baseline`,
    /// or the shared store's `base-ORIGIN` once a fork published it (or
    /// for a fork).
    fn baseline_shared(&self) -> Result<Option<CString>> {
        if self.info.baseline_origin.is_none()
            && lstat_opt(self.dir.as_fd(), c"baseline")?.is_some()
        {
            return Ok(None);
        }
        let origin = self.info.baseline_origin.as_deref().unwrap_or(&self.info.id);
        Ok(Some(super::shared::baseline_name(origin)))
    }

    /// The host path of the baseline directory (see `baseline_shared`).
    pub fn baseline_path(&self) -> PathBuf {
        match self.baseline_shared() {
            Ok(Some(name)) => self
                .state_path()
                .join(".layers")
                .join(name.to_string_lossy().as_ref()),
            _ => self.path.join("baseline"),
        }
    }

    /// The baseline directory (`tree`, `manifest`, `ignore`).
    pub(crate) fn baseline_dir(&self) -> Result<OwnedFd> {
        match self.baseline_shared()? {
            None => Ok(sys::open_dir_beneath(self.dir.as_fd(), c"baseline")?),
            Some(name) => {
                let store = sys::open_dir_beneath(self.state.as_fd(), super::shared::STORE)?;
                Ok(sys::open_dir_beneath(store.as_fd(), &name)?)
            }
        }
    }

    /// Seal `index`'s layer directory (1 is the first).
    pub(crate) fn layer_dir(&self, index: usize) -> Result<OwnedFd> {
        let seal = self.info.seals.get(index - 1).ok_or_else(|| WorkspaceError::State {
            path: self.path.join("session.json"),
            reason: format!("names no layer {index}"),
        })?;
        match &seal.layer {
            Some(id) => {
                let store = sys::open_dir_beneath(self.state.as_fd(), super::shared::STORE)?;
                let name = CString::new(id.as_str()).map_err(|_| WorkspaceError::BadId(id.clone()))?;
                Ok(sys::open_dir_beneath(store.as_fd(), &name)?)
            }
            None => {
                let rw = self.rw()?;
                let layers_dir = sys::open_dir_beneath(rw.as_fd(), c"layers")?;
                Ok(sys::open_dir_beneath(
                    layers_dir.as_fd(),
                    &super::seal_journal::seal_name(index),
                )?)
            }
        }
    }

    /// The number of layers above the last seal (a snapshot is not one:
    /// the default diff still starts at the last `session seal`).
    pub(crate) fn layers_above_last_seal(&self) -> usize {
        let seals = &self.info.seals;
        let last = seals
            .iter()
            .rposition(|s| s.kind == super::info::LayerKind::Seal)
            .map_or(0, |i| i + 1);
        // Physical layers: a seal is always the top of a compacted group.
        self.info.physical_layers().filter(|s| s.index > last).count()
    }

    /// The session directory fd.
    pub fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The layers, a diff of which starts at `since`.
    pub(crate) fn layers_since(&self, since: Since) -> Result<Layers> {
        let seals = self.info.seals.len();
        // The physical layers above layer k (compaction merges entries).
        let above = |k: usize| self.info.physical_layers().filter(|s| s.index > k).count();
        let diff_from = match since {
            Since::LastSeal => self.layers_above_last_seal(),
            Since::Baseline => self.info.layer_count(),
            Since::Seal(k) if (1..=seals).contains(&k) => {
                super::compact_journal::check_whole(&self.info, k, "diff --since")?;
                above(k)
            }
            Since::Seal(k) => {
                return Err(WorkspaceError::BadPath {
                    path: format!("--since {k}"),
                    reason: format!(
                        "the session has {seals} seal{}",
                        if seals == 1 { "" } else { "s" }
                    ),
                });
            }
        };
        let rw = self.rw()?;
        let mut lowers = Vec::with_capacity(seals + 1);
        for s in self.info.physical_layers().rev() {
            lowers.push(self.layer_dir(s.index)?);
        }
        let baseline = self.baseline_dir()?;
        lowers.push(sys::open_dir_beneath(baseline.as_fd(), c"tree")?);
        Ok(Layers {
            upper: sys::open_dir_beneath(rw.as_fd(), c"upper")?,
            lowers,
            diff_from,
        })
    }

    fn layers(&self) -> Result<Layers> {
        self.layers_since(Since::LastSeal)
    }

    /// Reload `session.json` (under the lock) and save it after `f`.
    /// Read `session.json` again (another command may have changed it).
    /// A new session of an image holds a private id range for its whole
    /// life, recorded in session.json (none when root's /etc/subuid
    /// ranges win, or for an unprivileged caller): the upper's files keep
    /// their owners from one command to the next.
    fn hold_id_range(&mut self) -> Result<()> {
        if let Some(start) = crate::launch::prepare_range::for_session(&self.path)? {
            self.info.id_range_start = Some(start);
            save_info(self.dir_fd(), &self.info)?;
        }
        Ok(())
    }

    pub(crate) fn reload_info(&mut self) -> Result<()> {
        self.info = load_info(self.dir.as_fd(), &self.path)?;
        Ok(())
    }

    /// Record the end of command `commands_run` at `used_unix_ms` (and the
    /// disk use measured after it) in the session's
    /// [`progress`](super::progress) file, in place: no rewrite of
    /// `session.json` on a command's path. The caller holds the lock.
    pub(crate) fn record_progress(
        &mut self,
        commands_run: u64,
        used_unix_ms: u64,
        disk_usage: Option<DiskUsage>,
    ) -> Result<()> {
        let last = super::progress::read(self.dir.as_fd())?;
        let p = super::progress::Progress {
            seq: last.map_or(1, |p| p.seq.wrapping_add(1)),
            commands_run,
            used_unix_ms,
            disk_usage: disk_usage.or(self.info.disk_usage),
        };
        super::progress::write(self.dir.as_fd(), &p)?;
        self.info.commands_run = commands_run;
        self.info.used_unix_ms = used_unix_ms;
        self.info.disk_usage = p.disk_usage;
        Ok(())
    }

    pub(crate) fn update_info(&mut self, f: impl FnOnce(&mut SessionInfo)) -> Result<()> {
        let mut info = load_info(self.dir.as_fd(), &self.path)?;
        f(&mut info);
        save_info(self.dir.as_fd(), &info)?;
        self.info = info;
        Ok(())
    }

    /// Append one JSON line to `audit.jsonl`.
    pub fn audit(&self, event: &serde_json::Value) -> Result<()> {
        append_audit(self.dir.as_fd(), event)
    }

    /// The content of `path` in the workspace (at most `max_bytes`; a
    /// larger file is an error). Links are not followed.
    pub fn read(&self, path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
        let rel = RelPath::parse_in(path, &self.info.workspace_path)?;
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
        let rel = RelPath::parse_in(path, &self.info.workspace_path)?;
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
            "sha256": hex::encode(Sha256::digest(&buf)),
        }))?;
        Ok(buf.len() as u64)
    }

    /// Remove `paths` from the workspace (directories with what they hold),
    /// as `rm -rf` in a command would: what the upper has goes, what the
    /// lower layers have is hidden by a whiteout. For freeing the disk a
    /// quota counts when commands are refused for it.
    pub fn rm(&mut self, paths: &[PathBuf]) -> Result<()> {
        let rels = paths
            .iter()
            .map(|p| RelPath::parse_in(p, &self.info.workspace_path))
            .collect::<Result<Vec<_>>>()?;
        if rels.iter().any(RelPath::is_root) {
            return Err(WorkspaceError::BadPath {
                path: self.info.workspace_path.display().to_string(),
                reason: "names the workspace itself".into(),
            });
        }
        let _lock = self.lock()?;
        let layers = self.layers()?;
        for rel in &rels {
            let mut created = None;
            let result = remove_at(&layers, rel, &mut created);
            if result.is_err()
                && let Some((parent, name)) = created
            {
                let _ = remove_tree(parent.as_fd(), &name);
            }
            result?;
        }
        let disk = self.measure_disk()?;
        self.update_info(|i| {
            i.used_unix_ms = now_ms();
            i.disk_usage = disk.or(i.disk_usage);
        })?;
        self.audit(&serde_json::json!({
            "event": "rm", "time_unix_ms": now_ms(),
            "paths": rels.iter().map(|r| String::from_utf8_lossy(&r.to_bytes()).into_owned()).collect::<Vec<_>>(),
            "disk": disk,
        }))?;
        Ok(())
    }

    /// The diff of the workspace since the last seal (the baseline when
    /// there is none), rendered in `format`, leaving out untracked paths
    /// the baseline's ignore rules name, and the entries git cannot
    /// represent (FIFOs, sockets, devices: reported, never opened). With
    /// `max_bytes`, a longer diff is an error, never a truncated one. The
    /// output is held in memory: see [`Session::diff_to`] for large diffs
    /// and [`Session::diff_with`] for the other options.
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
        let opts = DiffOptions {
            format,
            max_bytes,
            ..DiffOptions::default()
        };
        self.diff_with(&opts, out).map(|s| s.skipped)
    }

    /// The diff with every option (see [`DiffOptions`]).
    pub fn diff_with(&self, opts: &DiffOptions, out: &mut dyn Write) -> Result<DiffSummary> {
        let _lock = self.lock()?;
        let rules = self.ignore_rules(opts.include_ignored, &opts.exclude)?;
        let mut counted = Counted {
            inner: out,
            bytes: 0,
            hash: Sha256::new(),
        };
        let result = diff_filtered(
            &self.layers_since(opts.since)?,
            opts.format,
            opts.max_bytes,
            rules.as_ref(),
            self.dir.as_fd(),
            &mut counted,
        );
        let mut event = serde_json::json!({
            "event": "diff", "time_unix_ms": now_ms(),
            "format": format!("{:?}", opts.format).to_lowercase(),
            "since": since_name(opts.since), "include_ignored": opts.include_ignored,
            "exclude": opts.exclude,
        });
        match &result {
            Ok(summary) => {
                event["bytes"] = counted.bytes.into();
                event["sha256"] = hex::encode(counted.hash.finalize()).into();
                event["ignored"] = summary.ignored.count.into();
            }
            Err(e) => event["error"] = e.to_string().into(),
        }
        self.audit(&event)?;
        result
    }

    /// The ignore rules of a diff: the baseline's, plus `exclude`; none
    /// with `include_ignored` (then only `exclude` applies).
    fn ignore_rules(
        &self,
        include_ignored: bool,
        exclude: &[String],
    ) -> Result<Option<IgnoreRules>> {
        let files = if include_ignored {
            IgnoreFiles::default()
        } else {
            let baseline = self.baseline_dir()?;
            match read_regular(baseline.as_fd(), c"ignore", 64 << 20, b"baseline/ignore") {
                Ok(data) => serde_json::from_slice(&data).map_err(|e| WorkspaceError::State {
                    path: self.path.join("baseline/ignore"),
                    reason: e.to_string(),
                })?,
                // A session created before ignore rules were kept.
                Err(WorkspaceError::Sys(e)) if e.errno == sys::Errno::ENOENT => {
                    IgnoreFiles::default()
                }
                Err(e) => return Err(e),
            }
        };
        let rules = IgnoreRules::new(&files, exclude);
        Ok((!include_ignored || !exclude.is_empty()).then_some(rules))
    }

    /// What the export manifest says of the session.
    fn origin(&self, patch_since: Option<Since>) -> ExportOrigin {
        ExportOrigin {
            session: self.info.id.clone(),
            commit: match &self.info.source {
                Source::Git { rev, .. } => Some(rev.clone()),
                Source::Dir { .. } => None,
            },
            fingerprint: self.info.fingerprint.clone(),
            seals: self
                .info
                .seals
                .iter()
                .map(|s| (s.index, s.fingerprint.clone()))
                .collect(),
            patch_since: patch_since.map(|s| since_name(s).to_string()),
        }
    }

    /// Export `paths` (and with `patch`, the unified diff) into `out`.
    pub fn export(
        &self,
        out: &Path,
        paths: &[PathBuf],
        patch: bool,
        opts: &ExportOptions,
    ) -> Result<ExportSummary> {
        self.export_inner(out, paths, patch.then(DiffOptions::default), opts, None)
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
        self.export_inner(
            out,
            paths,
            patch.then(DiffOptions::default),
            opts,
            Some(manifest),
        )
    }

    /// [`Session::export_with_manifest`] with the patch's diff options
    /// (`None`: no patch; its format is always unified).
    pub fn export_with(
        &self,
        out: &Path,
        paths: &[PathBuf],
        patch: Option<DiffOptions>,
        opts: &ExportOptions,
        manifest: Option<&mut dyn Write>,
    ) -> Result<ExportSummary> {
        self.export_inner(out, paths, patch, opts, manifest)
    }

    fn export_inner(
        &self,
        out: &Path,
        paths: &[PathBuf],
        patch: Option<DiffOptions>,
        opts: &ExportOptions,
        manifest: Option<&mut dyn Write>,
    ) -> Result<ExportSummary> {
        let rels = paths
            .iter()
            .map(|p| RelPath::parse_in(p, &self.info.workspace_path))
            .collect::<Result<Vec<_>>>()?;
        let _lock = self.lock()?;
        let result = (|| {
            let layers = self.layers()?;
            let mut spooled = None;
            if let Some(p) = &patch {
                let mut spool = Spool::new(self.dir.as_fd())?;
                let rules = self.ignore_rules(p.include_ignored, &p.exclude)?;
                diff_filtered(
                    &self.layers_since(p.since)?,
                    DiffFormat::Unified,
                    Some(opts.max_total_bytes),
                    rules.as_ref(),
                    self.dir.as_fd(),
                    &mut spool,
                )?;
                spooled = Some(spool);
            }
            let mut opts = opts.clone();
            opts.origin = Some(self.origin(patch.as_ref().map(|p| p.since)));
            export(
                &layers,
                &rels,
                spooled.as_mut(),
                out,
                &opts,
                self.dir.as_fd(),
                manifest,
            )
        })();
        let mut event = serde_json::json!({
            "event": "export", "time_unix_ms": now_ms(),
            "archive": out.display().to_string(),
            "paths": paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "patch": patch.as_ref().map(|p| since_name(p.since)),
        });
        match &result {
            Ok(summary) => {
                event["entries"] = summary.entries.into();
                event["total_bytes"] = summary.total_bytes.into();
                event["patch_sha256"] = summary.patch_sha256.clone().into();
            }
            Err(e) => event["error"] = e.to_string().into(),
        }
        self.audit(&event)?;
        result
    }
}

/// Options of a diff (and of an export's patch).
#[derive(Debug, Clone, Default)]
pub struct DiffOptions {
    pub format: DiffFormat,
    pub max_bytes: Option<u64>,
    /// Where the diff starts (default: the last seal).
    pub since: Since,
    /// Do not leave out what the baseline's ignore rules name.
    pub include_ignored: bool,
    /// Also leave out these (gitignore syntax), tracked paths excepted.
    pub exclude: Vec<String>,
}

/// `baseline`, `last-seal` or the seal number.
fn since_name(s: Since) -> String {
    match s {
        Since::LastSeal => "last-seal".into(),
        Since::Baseline => "baseline".into(),
        Since::Seal(n) => n.to_string(),
    }
}

/// A writer that counts and hashes what passes through it.
struct Counted<'a> {
    inner: &'a mut dyn Write,
    bytes: u64,
    hash: Sha256,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
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

/// The parent of `rel` in the upper, created like overlayfs's copy-up
/// where missing (`created` gets the first directory made, for cleanup):
/// its fd, the merged view of it, the last component and the upper's
/// owner.
fn upper_parent<'r>(
    layers: &Layers,
    rel: &'r RelPath,
    created: &mut Option<(OwnedFd, CString)>,
) -> Result<(OwnedFd, MergedDir, &'r CString, sys::Meta)> {
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
        // The merged view of `c` before anything is created: its lower
        // parts (if visible) stay the lowers of what the upper gets.
        let next = merged.child_dir(c, walked)?;
        match lstat_opt(up.as_fd(), c)? {
            Some(m) if m.is_dir() => {}
            Some(m) if m.is_whiteout() => {
                return Err(bad("a parent directory was deleted in the workspace"));
            }
            Some(_) => return Err(bad("a parent is not a directory")),
            None => {
                // Like overlayfs copy-up: the directory appears in the
                // upper with the lower's mode (or 0755 when new).
                let mode = match next.as_ref().and_then(|d| d.lowers.first()) {
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
            lowers: next.map(|n| n.lowers).unwrap_or_default(),
        };
    }
    Ok((up, merged, name, owner))
}

/// The body of [`Session::rm`]: remove `rel` from the upper, and hide what
/// the lower layers have there with a whiteout.
fn remove_at(
    layers: &Layers,
    rel: &RelPath,
    created: &mut Option<(OwnedFd, CString)>,
) -> Result<()> {
    let shown = rel.to_bytes();
    let (up, merged, name, _) = upper_parent(layers, rel, created)?;
    if merged.entry(name)?.is_none() {
        return Err(WorkspaceError::BadPath {
            path: display_name(&shown),
            reason: "does not exist in the workspace".into(),
        });
    }
    if lstat_opt(up.as_fd(), name)?.is_some() {
        remove_tree(up.as_fd(), name)?;
    }
    let below = MergedDir {
        upper: None,
        lowers: merged.lowers,
    };
    if below.entry(name)?.is_some() {
        sys::mknod_whiteout(up.as_fd(), name)?;
    }
    Ok(())
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
    let (up, merged, name, owner) = upper_parent(layers, rel, created)?;
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
