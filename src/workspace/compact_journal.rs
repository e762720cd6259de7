//! A compaction's state on disk before its end (`compact.rs`), what the
//! next operation on the session (under its lock) does with it, and the
//! check that a snapshot was not merged away. Below the session: it takes
//! directory fds and `SessionInfo`, not a `Session`.

use std::ffi::CString;
use std::os::fd::BorrowedFd;
use std::path::Path;

use serde_json::json;

use super::error::{Result, WorkspaceError};
use super::info::SessionInfo;
use super::layers::read_regular;
use super::remove::remove_tree;
use super::shared::{COMPACT_JOURNAL, Store};
use crate::sys::{self, Errno};
use crate::util::clock::now_ms;

/// Check that layer `k` still exists on its own (not merged into a later
/// one by compaction), for `what` (rollback, fork --from, diff --since).
pub(crate) fn check_whole(info: &SessionInfo, k: usize, what: &str) -> Result<()> {
    match info.seals.get(k.wrapping_sub(1)).and_then(|s| s.merged_into) {
        None => Ok(()),
        Some(top) => Err(WorkspaceError::BadPath {
            path: format!("{what} {k}"),
            reason: format!(
                "snapshot {k} was merged into layer {top} by compaction: its state alone is \
                 gone; use {top} or a later snapshot (`hutch session snapshots {}`)",
                info.id
            ),
        }),
    }
}

/// Under the session's lock, before anything else: finish or undo a
/// compaction a killed process left (see the module documentation).
pub(crate) fn recover(
    dir: BorrowedFd<'_>,
    state: BorrowedFd<'_>,
    shown: &Path,
) -> Result<Option<serde_json::Value>> {
    let id = match read_regular(dir, COMPACT_JOURNAL, 64, b"compacting") {
        Ok(data) => String::from_utf8_lossy(&data).trim().to_string(),
        Err(WorkspaceError::Sys(e)) if e.errno == Errno::ENOENT => return Ok(None),
        Err(e) => return Err(e),
    };
    let data = read_regular(dir, c"session.json", 1 << 20, b"session.json")?;
    let info: SessionInfo = serde_json::from_slice(&data).map_err(|e| WorkspaceError::State {
        path: shown.join("session.json"),
        reason: e.to_string(),
    })?;
    let mut event = None;
    if !info.seals.iter().any(|s| s.layer.as_deref() == Some(&id)) && super::shared::is_id(&id) {
        let store = Store::lock(state)?;
        remove_tree(store.fd(), &CString::new(id.as_str()).expect("hex"))?;
        event = Some(json!({
            "event": "compact-rolled-back", "time_unix_ms": now_ms(),
            "reason": "the process compacting the session ended before the merged layer was recorded",
        }));
    }
    sys::unlink_at(dir, COMPACT_JOURNAL, false)?;
    Ok(event)
}
