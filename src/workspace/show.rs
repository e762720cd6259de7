//! `session show` and `session audit`: what a session is and did.

use std::os::fd::AsFd;
use std::path::Path;

use serde_json::json;

use crate::registry::{self, Liveness};
use crate::sys;

use super::disk::DiskMechanism;
use super::error::{Result, WorkspaceError};
use super::layers::read_regular;
use super::session::{Session, Source, StateDir, valid_id};

/// Largest audit printed (an audit grows with the commands; 1 GiB is far
/// beyond what a session's caps let it write).
const AUDIT_MAX_BYTES: u64 = 1 << 30;

impl Session {
    /// The session as `session show --json` reports it: source (the
    /// commit, not a host path for git), fingerprint, seals, disk use,
    /// commands used and budget, deadline, workspace path, live commands.
    /// Reads without the lock (a command may be running).
    pub fn describe(&self) -> Result<serde_json::Value> {
        let i = &self.info;
        let live: Vec<_> = registry::list()
            .map(|l| {
                l.into_iter()
                    .filter(|e| e.record.session() == Some(i.id.as_str()))
                    .filter(|e| !matches!(e.liveness, Liveness::Stale { .. }))
                    .map(|e| {
                        json!({
                            "sandbox_id": e.record.sandbox_id, "pid": e.record.init.pid,
                            "started_unix_ms": e.record.started_unix_ms,
                            "command": e.record.command,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        // A mounted image is measured now (statfs); accounting is what the
        // last command left.
        let disk_usage = match i.disk.map(|d| d.mechanism) {
            Some(DiskMechanism::LoopExt4) if super::disk::mounted(self.dir_fd())? => {
                let rw = sys::open_dir_beneath(self.dir_fd(), super::disk::MOUNT)?;
                Some(super::disk::image_usage(rw.as_fd())?)
            }
            _ => i.disk_usage,
        };
        Ok(json!({
            "id": i.id,
            // The shape `create` answers (`commit` too, as before).
            "source": match &i.source {
                Source::Git { repo, rev } => {
                    json!({"kind": "git", "repo": repo, "rev": rev, "commit": rev})
                }
                Source::Dir { path } => json!({"kind": "dir", "path": path}),
            },
            "fingerprint": i.fingerprint,
            "files": i.files,
            "image": i.image.as_ref().map(|m| json!({
                "digest": m.digest, "name": m.name, "platform": m.platform,
            })),
            "workspace_path": i.workspace_path,
            "seals": i.seals,
            "network_sealed": i.network_sealed,
            "disk": i.disk,
            "disk_usage": disk_usage,
            "commands_run": self.commands_started(),
            "max_commands": i.max_commands,
            "deadline_unix_ms": i.deadline_unix_ms,
            "created_unix_ms": i.created_unix_ms,
            "used_unix_ms": i.used_unix_ms,
            "locks": i.locks,
            "defaults": i.defaults,
            "audit_dir": i.audit_dir,
            "live_commands": live,
        }))
    }

    /// The session's `audit.jsonl`.
    pub fn audit_log(&self) -> Result<Vec<u8>> {
        read_regular(
            self.dir_fd(),
            c"audit.jsonl",
            AUDIT_MAX_BYTES,
            b"audit.jsonl",
        )
    }
}

/// The audit of session `id`: its own while it exists, else the copy kept
/// in `kept_in` (`--audit-dir` / `close --keep-audit`).
pub fn read_audit(state: &StateDir, id: &str, kept_in: Option<&Path>) -> Result<Vec<u8>> {
    if !valid_id(id) {
        return Err(WorkspaceError::BadId(id.to_string()));
    }
    match state.open_session(id) {
        Ok(s) => s.audit_log(),
        Err(WorkspaceError::NoSession { id, dir }) => {
            let Some(kept) = kept_in else {
                return Err(WorkspaceError::NoSession { id, dir });
            };
            let d = sys::open_dir_path(kept)?;
            let name = std::ffi::CString::new(format!("{id}.audit.jsonl")).expect("hex id");
            read_regular(d.as_fd(), &name, AUDIT_MAX_BYTES, name.as_bytes())
        }
        Err(e) => Err(e),
    }
}
