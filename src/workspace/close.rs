//! `session close`: end what still runs of the session, keep its audit
//! where the platform wants it, remove it, and verify that nothing of it
//! is left: no process, mount, cgroup or runtime record. What remains is
//! named (the platform quarantines the worker then).

use std::ffi::CString;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::registry::{self, KillOutcome, Liveness};
use crate::sys;
use crate::util::clock::now_ms;

use super::disk::DiskMechanism;
use super::error::{Result, WorkspaceError};
use super::json::json_line;
use super::remove::remove_tree;
use super::session::{StateDir, valid_id};

/// How long close waits for a killed command's process to let go of the
/// session (it records the command's end first).
const LOCK_WAIT: Duration = Duration::from_secs(15);

/// Options of [`StateDir::close_with`].
#[derive(Debug, Clone, Default)]
pub struct CloseOptions {
    /// Wait for a busy session (else fail with `Busy`) — when no command
    /// of it had to be killed.
    pub wait: bool,
    /// Keep the audit here (as `ID.audit.jsonl`, mode 0600), in addition
    /// to the session's own `--audit-dir`.
    pub keep_audit: Option<PathBuf>,
    /// Kill live commands of the session (`session close`); else a session
    /// with one is busy (`gc` leaves it alone).
    pub kill_live: bool,
}

/// What [`StateDir::close_with`] did and found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CloseReport {
    pub id: String,
    /// Whether the session existed.
    pub existed: bool,
    /// Sandboxes of live commands that were killed.
    pub killed: Vec<String>,
    /// Where the audit was kept.
    pub audit_kept: Vec<PathBuf>,
    /// What of the session is still there after the close, one phrase
    /// each (empty when verified clean).
    pub remaining: Vec<String>,
}

/// Mount points of this mount namespace at or below `dir`.
fn mounts_below(dir: &Path) -> Vec<String> {
    let Ok(text) = sys::read_proc("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let prefix = dir.as_os_str().as_bytes();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(point) = line.split(' ').nth(4) else {
            continue;
        };
        let point = unescape_mountinfo(point);
        if point == prefix || (point.starts_with(prefix) && point.get(prefix.len()) == Some(&b'/'))
        {
            out.push(String::from_utf8_lossy(&point).into_owned());
        }
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Append `line` to the kept audit copies.
fn append_kept(kept: &[PathBuf], event: &serde_json::Value) {
    let Ok(line) = json_line(event) else {
        return;
    };
    for path in kept {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags_nofollow()
            .open(path)
        {
            let _ = f.write_all(&line);
        }
    }
}

trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::custom_flags(self, libc::O_NOFOLLOW | libc::O_CLOEXEC)
    }
}

/// Copy the session's `audit.jsonl` to `dir/ID.audit.jsonl` (mode 0600,
/// replaced atomically), returning its path.
fn keep_audit(session_dir: std::os::fd::BorrowedFd<'_>, id: &str, dir: &Path) -> Result<PathBuf> {
    let target = dir.join(format!("{id}.audit.jsonl"));
    let tmp = dir.join(format!(".{id}.audit.jsonl.tmp"));
    let fail =
        |e: std::io::Error| WorkspaceError::io(format!("keep the audit in {}", dir.display()), e);
    let dir_meta = std::fs::symlink_metadata(dir).map_err(fail)?;
    if !dir_meta.is_dir() {
        return Err(WorkspaceError::BadPath {
            path: dir.display().to_string(),
            reason: "is not a directory (the audit directory must be one)".into(),
        });
    }
    let src = sys::open_beneath(
        session_dir,
        c"audit.jsonl",
        libc::O_RDONLY | libc::O_NONBLOCK,
        0,
    )?;
    let _ = std::fs::remove_file(&tmp);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags_nofollow()
        .mode_0600()
        .open(&tmp)
        .map_err(fail)?;
    std::io::copy(&mut std::fs::File::from(src), &mut out).map_err(fail)?;
    out.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, &target).map_err(fail)?;
    Ok(target)
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

impl StateDir {
    /// Remove session `id` and everything in it (killing its live
    /// commands first, see [`StateDir::close_with`]). Closing a session
    /// that does not exist (any more) succeeds: `Ok(false)`. Something of
    /// it left behind is an error naming it.
    pub fn close(&self, id: &str, wait: bool) -> Result<bool> {
        let report = self.close_with(
            id,
            &CloseOptions {
                wait,
                keep_audit: None,
                kill_live: true,
            },
        )?;
        if !report.remaining.is_empty() {
            return Err(WorkspaceError::State {
                path: self.path.join(id),
                reason: format!("still there after close: {}", report.remaining.join("; ")),
            });
        }
        Ok(report.existed)
    }

    /// Remove sessions unused for longer than `older_than` (skipping those
    /// busy right now), leftovers of interrupted closes (`.trash-*`) and of
    /// creates (`.creating-*`, when older than `older_than`). An entry that
    /// cannot be removed is reported and gc goes on with the others.
    pub fn gc(&self, older_than: Duration) -> Result<GcReport> {
        let cutoff = now_ms().saturating_sub(older_than.as_millis() as u64);
        let mut report = GcReport::default();
        for name in sys::list_dir(self.fd())? {
            let Ok(text) = name.to_str() else { continue };
            let result = if text.starts_with(".trash-") {
                remove_tree(self.fd(), &name).map(|()| false)
            } else if text.starts_with(".creating-") {
                self.mtime_before(&name, cutoff).and_then(|old| {
                    if old {
                        remove_tree(self.fd(), &name)?;
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
        // Shared layers no session uses (a close interrupted before its
        // sweep left them).
        if let Err(e) = super::shared::sweep(self.fd()) {
            report.failed.push((".layers".to_string(), e));
        }
        Ok(report)
    }

    /// Whether the entry `name` was last modified before `cutoff` (ms).
    fn mtime_before(&self, name: &CString, cutoff: u64) -> Result<bool> {
        let meta = sys::lstat_at(self.fd(), name)?;
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
        // A session with a live command is in use, whatever its age.
        let opts = CloseOptions::default();
        match self.close_with(id, &opts) {
            Ok(r) if r.remaining.is_empty() => Ok(true),
            Ok(r) => Err(WorkspaceError::State {
                path: self.path.join(id),
                reason: format!("still there after close: {}", r.remaining.join("; ")),
            }),
            Err(WorkspaceError::Busy(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Close session `id` (see the module documentation). Closing a
    /// session that does not exist (any more) succeeds; what remains of
    /// one is in the report's `remaining`.
    pub fn close_with(&self, id: &str, opts: &CloseOptions) -> Result<CloseReport> {
        if !valid_id(id) {
            return Err(WorkspaceError::BadId(id.to_string()));
        }
        let name = CString::new(id).map_err(|_| WorkspaceError::BadId(id.into()))?;
        let mut report = CloseReport {
            id: id.to_string(),
            ..CloseReport::default()
        };
        // 1. End the live commands of the session: their sandboxes through
        // their pid namespaces.
        let mut cgroups = Vec::new();
        let mut inits = Vec::new();
        let records: Vec<_> = registry::list()
            .map_err(WorkspaceError::Registry)?
            .into_iter()
            .filter(|e| e.record.session() == Some(id))
            .collect();
        if !opts.kill_live
            && records
                .iter()
                .any(|e| !matches!(e.liveness, Liveness::Stale { .. }))
        {
            return Err(WorkspaceError::Busy(id.to_string()));
        }
        for e in records {
            cgroups.extend(e.record.cgroup.clone());
            inits.push(e.record.init);
            match registry::kill(&e, "hutch session close") {
                Ok(KillOutcome::Killed) => report.killed.push(e.record.sandbox_id.clone()),
                Ok(_) => {}
                Err(err) => report.remaining.push(format!(
                    "sandbox {} could not be killed: {err}",
                    e.record.sandbox_id
                )),
            }
        }
        let session = match self.open_session(id) {
            Ok(s) => Some(s),
            Err(WorkspaceError::NoSession { .. }) => None,
            Err(WorkspaceError::State { .. }) => {
                // Unreadable state: still removable.
                if let Ok(dir) = sys::open_dir_beneath(self.fd().as_fd(), &name) {
                    let _ = super::disk::detach(dir.as_fd(), &self.path.join(id));
                }
                self.trash(&name, id)?;
                report.existed = true;
                self.verify(&mut report, &inits, &cgroups);
                return Ok(report);
            }
            Err(e) => return Err(e),
        };
        let Some(session) = session else {
            self.verify(&mut report, &inits, &cgroups);
            return Ok(report);
        };
        report.existed = true;
        // 2. The session's lock: a killed command's process records its
        // end, then lets go.
        let _lock = if report.killed.is_empty() {
            session.with_wait(opts.wait).lock()?
        } else {
            let deadline = Instant::now() + LOCK_WAIT;
            let session = session;
            loop {
                match session.lock() {
                    Ok(l) => break l,
                    Err(WorkspaceError::Busy(_)) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let session = self.open_session(id)?;
        // Its warm sandboxes, and the server holding them, go first.
        super::warm::stop(&session);
        session.audit(&json!({
            "event": "close", "time_unix_ms": now_ms(), "killed": report.killed,
        }))?;
        // 3. Keep the audit, then unmount the disk image and remove.
        let mut dirs: Vec<PathBuf> = session.info.audit_dir.iter().cloned().collect();
        dirs.extend(opts.keep_audit.iter().cloned());
        dirs.dedup();
        for d in &dirs {
            report.audit_kept.push(keep_audit(session.dir_fd(), id, d)?);
        }
        if session.info.disk.map(|d| d.mechanism) == Some(DiskMechanism::LoopExt4)
            && super::disk::detach(session.dir_fd(), &session.path)?
        {
            report
                .remaining
                .push("the session's disk image is still attached to a loop device".into());
        }
        let path = session.path.clone();
        let id_range = session.info.id_range_start;
        drop(session);
        if !mounts_below(&path).is_empty() {
            for m in mounts_below(&path) {
                report.remaining.push(format!("a mount at {m}"));
            }
        } else {
            self.trash(&name, id)?;
            if let Some(start) = id_range {
                crate::launch::prepare_range::release_session(start, &path)?;
            }
            // Its shared layers no other session uses go with it.
            if let Err(e) = super::shared::sweep(self.fd()) {
                report
                    .remaining
                    .push(format!("shared layers in {}/.layers: {e}", self.path.display()));
            }
        }
        // 4. Verify.
        self.verify(&mut report, &inits, &cgroups);
        if path.exists() {
            report
                .remaining
                .push(format!("the session directory {}", path.display()));
        }
        append_kept(
            &report.audit_kept,
            &json!({
                "event": "close-verified", "time_unix_ms": now_ms(),
                "ok": report.remaining.is_empty(), "remaining": report.remaining,
            }),
        );
        Ok(report)
    }

    /// What of the session's sandboxes remains: live processes, runtime
    /// records, cgroups.
    fn verify(
        &self,
        report: &mut CloseReport,
        inits: &[registry::ProcessRef],
        cgroups: &[PathBuf],
    ) {
        match registry::wait_session_gone(&report.id, Duration::from_secs(5)) {
            Ok(left) => {
                for e in left {
                    let what = match e.liveness {
                        Liveness::Live => "still runs",
                        Liveness::Ending => "is still being reaped",
                        Liveness::Stale { .. } => "left a runtime record",
                    };
                    report.remaining.push(format!(
                        "sandbox {} (pid {}) {what} ({})",
                        e.record.sandbox_id,
                        e.record.init.pid,
                        e.dir.display()
                    ));
                }
            }
            Err(e) => report.remaining.push(format!("the runtime registry: {e}")),
        }
        for init in inits {
            if init.is_alive() {
                report
                    .remaining
                    .push(format!("process {} of a killed sandbox", init.pid));
            }
        }
        for cg in cgroups {
            if cg.exists() {
                report.remaining.push(format!("cgroup {}", cg.display()));
            }
        }
        report.remaining.sort();
        report.remaining.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo("/a\\040b\\134c"), b"/a b\\c");
        assert_eq!(unescape_mountinfo("/x\\04"), b"/x\\04");
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
