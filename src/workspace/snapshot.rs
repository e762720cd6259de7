//! `session snapshot`, `snapshots` and `rollback`: a session's changes
//! frozen into a read-only layer it can return to (and forks can start
//! from, `fork.rs`).
//!
//! A snapshot is a freeze (`seal.rs`) that changes neither the network
//! nor where the default diff starts. Its id is its layer's number in the
//! session's stack (1 is the lowest); a name may be given too.
//!
//! Rollback journals first, then redoes (`snapshot_journal.rs`), so a
//! crash leaves the session before it or after it. Shared layers go with
//! the sweep (`shared.rs`) unless a fork still uses them.

use std::io::Read;
use std::os::fd::AsFd;

use serde::Serialize;
use serde_json::json;

use super::error::{Result, WorkspaceError};
use super::info::{LayerKind, SealInfo};
use super::seal::{FreezeKind, fault_point};
use super::session::Session;
use super::snapshot_journal::{ROLLBACK_JOURNAL, finish_rollback};
use crate::util::clock::now_ms;

/// A new id for a layer of the shared store (32 hex digits).
pub(crate) fn random_layer_id() -> Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| WorkspaceError::io("read /dev/urandom", e))?;
    Ok(hex::encode(b))
}

/// One line of `session snapshots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotInfo {
    /// The layer's number (1 is the lowest): what `fork --from`,
    /// `rollback` and `diff --since` take.
    pub id: usize,
    pub name: Option<String>,
    /// `snapshot` or `seal`.
    pub kind: LayerKind,
    pub time_unix_ms: u64,
    /// Files and links changed (added, modified, deleted).
    pub files: usize,
    /// Bytes of the changed files and links.
    pub bytes: u64,
    /// The layer below (None: the baseline).
    pub parent: Option<usize>,
    /// The session that made it (a fork's first layers are its parent's).
    pub session: Option<String>,
    /// sha256 of its manifest (`seals/N`).
    pub fingerprint: String,
    /// Compaction merged it into layer N (see `Session::compact`): it can
    /// no longer be rolled back to, forked from or diffed since.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged_into: Option<usize>,
}

impl SnapshotInfo {
    fn of(s: &SealInfo) -> SnapshotInfo {
        SnapshotInfo {
            id: s.index,
            name: s.name.clone(),
            kind: s.kind,
            time_unix_ms: s.time_unix_ms,
            files: s.changes,
            bytes: s.bytes,
            parent: (s.index > 1).then(|| s.index - 1),
            session: s.session.clone(),
            fingerprint: s.fingerprint.clone(),
            merged_into: s.merged_into,
        }
    }
}

impl Session {
    /// Freeze the session's changes into a new read-only layer and go on
    /// over it with an empty upper. Cost O(changes): the changed files are
    /// hashed for the layer's manifest, the upper is renamed, not copied.
    pub fn snapshot(&mut self, name: Option<&str>) -> Result<SnapshotInfo> {
        let _lock = self.lock()?;
        let seal = self.freeze(&FreezeKind {
            kind: LayerKind::Snapshot,
            name: name.map(str::to_string),
            network_none: false,
        })?;
        Ok(SnapshotInfo::of(&seal))
    }

    /// The session's layers (snapshots and seals), lowest first.
    pub fn snapshots(&self) -> Vec<SnapshotInfo> {
        self.info.seals.iter().map(SnapshotInfo::of).collect()
    }

    /// The layer `snap` names: its number, or its name.
    pub fn resolve_snapshot(&self, snap: &str) -> Result<usize> {
        let found = match snap.parse::<usize>() {
            Ok(n) => self.info.seals.iter().find(|s| s.index == n),
            Err(_) => self
                .info
                .seals
                .iter()
                .find(|s| s.name.as_deref() == Some(snap)),
        };
        found.map(|s| s.index).ok_or_else(|| WorkspaceError::BadPath {
            path: format!("snapshot {}", crate::util::quote::display_name(snap.as_bytes())),
            reason: format!(
                "session {} has no such snapshot (`hutch session snapshots {}` lists them)",
                self.info.id, self.info.id
            ),
        })
    }

    /// Discard every change after snapshot `snap` (its number or name):
    /// the upper and the later layers; the session goes on from it. Its
    /// warm sandboxes (which staged the old upper) are stopped first.
    pub fn rollback(&mut self, snap: &str) -> Result<SnapshotInfo> {
        let _lock = self.lock()?;
        self.reload_info()?;
        let keep = self.resolve_snapshot(snap)?;
        super::compact_journal::check_whole(&self.info, keep, "rollback")?;
        super::warm::stop(self);
        let dropped = self.info.seals.len() - keep;
        super::session::write_new(
            self.dir_fd(),
            ROLLBACK_JOURNAL,
            keep.to_string().as_bytes(),
            0o600,
        )?;
        fault_point("rollback-journaled");
        let rw = self.rw()?;
        // A disk image's quota counts what is on it: remove at once there.
        let defer = self.info.disk.map(|d| d.mechanism) != Some(super::disk::DiskMechanism::LoopExt4);
        finish_rollback(self.dir_fd(), rw.as_fd(), keep, &self.path, defer)?;
        self.reload_info()?;
        self.audit(&json!({
            "event": "rollback", "time_unix_ms": now_ms(), "snapshot": keep,
            "layers_dropped": dropped,
        }))?;
        if dropped > 0 {
            // Only dropped layers can have lost their last user.
            let _ = super::shared::sweep(self.state_fd());
        }
        Ok(SnapshotInfo::of(&self.info.seals[keep - 1]))
    }
}
