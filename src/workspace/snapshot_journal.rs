//! A snapshot's and a rollback's state on disk before their end, and
//! what the next operation on the session (under its lock) does with it.
//! Below the session: it takes directory fds, not a `Session`.
//!
//! - A freeze into the shared store (`seal.rs`) writes the layer's id to
//!   `STATE/ID/freezing` before it renames the upper into the store, and
//!   removes it after its commit point (`session.json` naming the layer).
//!   Left behind uncommitted, the layer is renamed back to be the upper.
//! - A rollback writes `STATE/ID/rollback` (the number of layers to keep)
//!   first, then redoes: `session.json` keeps the layers up to the
//!   snapshot, the upper is swapped for an empty one and removed, the
//!   session's own later layers and manifests are removed. Every step is
//!   idempotent: left behind, it is redone to the end.

use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use serde_json::json;

use super::error::{Result, WorkspaceError};
use super::info::ROOT_LAUNCH_UID;
use super::layers::{lstat_opt, read_regular};
use super::remove::remove_tree;
use super::seal_journal::{fault_point, seal_name};
use super::shared::{FREEZE_JOURNAL, Store};
use crate::sys;
use crate::util::clock::now_ms;

/// A session's journal of a rollback under way (the layers it keeps).
pub(crate) const ROLLBACK_JOURNAL: &CStr = c"rollback";
/// Where a rollback puts the upper it discards (in the writable layers'
/// directory) before removing it; a deferred one gets a unique suffix.
const DISCARDED: &CStr = c"discarded-upper";
/// The prefix of discarded uppers whose removal was deferred.
const DISCARDED_PREFIX: &[u8] = b"discarded-";

/// A new file `name` in `dir` (mode 0600) holding `data`.
fn write_file(dir: BorrowedFd<'_>, name: &CStr, data: &[u8]) -> Result<()> {
    let fd = sys::open_beneath(dir, name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
    std::fs::File::from(fd)
        .write_all(data)
        .map_err(|e| WorkspaceError::io(format!("write {}", name.to_string_lossy()), e))
}

/// The redo of a rollback to `keep` layers (idempotent). With `defer`,
/// the discarded upper is only renamed aside (`discarded-ID`): O(1) on the
/// rollback's path; [`remove_discarded`] removes it later (the next freeze,
/// close or gc). Without, it is removed here (a disk image's quota must
/// not keep counting it).
pub(crate) fn finish_rollback(
    dir: BorrowedFd<'_>,
    rw: BorrowedFd<'_>,
    keep: usize,
    shown: &Path,
    defer: bool,
) -> Result<()> {
    let data = read_regular(dir, c"session.json", 1 << 20, b"session.json")?;
    let mut info: super::info::SessionInfo =
        serde_json::from_slice(&data).map_err(|e| WorkspaceError::State {
            path: shown.join("session.json"),
            reason: e.to_string(),
        })?;
    let before = info.seals.len();
    if before > keep {
        info.seals.truncate(keep);
        info.used_unix_ms = now_ms();
        let text = serde_json::to_vec_pretty(&info)
            .map_err(|e| WorkspaceError::io("encode session.json", e.into()))?;
        let _ = sys::unlink_at(dir, c"session.json.tmp", false);
        write_file(dir, c"session.json.tmp", &text)?;
        sys::rename_at(dir, c"session.json.tmp", dir, c"session.json")?;
    }
    fault_point("rollback-committed");
    // The upper: swapped for an empty one, then removed (now or later).
    let aside = if defer {
        let mut b = [0u8; 8];
        sys::getrandom(&mut b)?;
        CString::new(format!("discarded-{}", hex::encode(b))).expect("hex")
    } else {
        remove_tree(rw, DISCARDED)?;
        DISCARDED.to_owned()
    };
    if lstat_opt(rw, c"upper")?.is_some() {
        sys::rename_at(rw, c"upper", rw, &aside)?;
    }
    sys::mkdirat(rw, c"upper", 0o755)?;
    if sys::geteuid() == 0 {
        let fd = sys::open_dir_beneath(rw, c"upper")?;
        sys::fchown(fd.as_fd(), ROOT_LAUNCH_UID, ROOT_LAUNCH_UID)?;
    }
    if !defer {
        remove_tree(rw, DISCARDED)?;
    }
    // The session's own later layers and manifests.
    let layers_dir = sys::open_dir_beneath(rw, c"layers")?;
    let seals_dir = sys::open_dir_beneath(dir, c"seals")?;
    for name in sys::list_dir(seals_dir.as_fd())? {
        if name
            .to_str()
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n > keep)
        {
            sys::unlink_at(seals_dir.as_fd(), &name, false)?;
        }
    }
    for name in sys::list_dir(layers_dir.as_fd())? {
        if name
            .to_str()
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n > keep)
        {
            remove_tree(layers_dir.as_fd(), &name)?;
        }
    }
    match sys::unlink_at(dir, ROLLBACK_JOURNAL, false) {
        Ok(()) => Ok(()),
        Err(e) if e.errno == sys::Errno::ENOENT => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Remove the uppers rollbacks set aside (`discarded-*` in the writable
/// layers' directory). The caller holds the session's lock.
pub(crate) fn remove_discarded(rw: BorrowedFd<'_>) -> Result<()> {
    for name in sys::list_dir(rw)? {
        if name.to_bytes().starts_with(DISCARDED_PREFIX) {
            remove_tree(rw, &name)?;
        }
    }
    Ok(())
}

/// Under the session's lock, before anything else: finish a rollback and
/// undo a freeze into the shared store that a killed process left.
/// Returns the audit events to record.
pub(crate) fn recover(
    dir: BorrowedFd<'_>,
    rw: BorrowedFd<'_>,
    state: BorrowedFd<'_>,
    shown: &Path,
) -> Result<Vec<serde_json::Value>> {
    let mut events = Vec::new();
    match read_regular(dir, ROLLBACK_JOURNAL, 64, b"rollback") {
        Ok(data) => {
            let keep = String::from_utf8_lossy(&data)
                .trim()
                .parse::<usize>()
                .map_err(|_| WorkspaceError::State {
                    path: shown.join("rollback"),
                    reason: "is not a layer count".into(),
                })?;
            finish_rollback(dir, rw, keep, shown, false)?;
            events.push(json!({
                "event": "rollback-finished", "time_unix_ms": now_ms(), "snapshot": keep,
                "reason": "the process rolling the session back ended before it was done",
            }));
        }
        Err(WorkspaceError::Sys(e)) if e.errno == sys::Errno::ENOENT => {}
        Err(e) => return Err(e),
    }
    let id = match read_regular(dir, FREEZE_JOURNAL, 64, b"freezing") {
        Ok(data) => String::from_utf8_lossy(&data).trim().to_string(),
        Err(WorkspaceError::Sys(e)) if e.errno == sys::Errno::ENOENT => return Ok(events),
        Err(e) => return Err(e),
    };
    let data = read_regular(dir, c"session.json", 1 << 20, b"session.json")?;
    let info: super::info::SessionInfo =
        serde_json::from_slice(&data).map_err(|e| WorkspaceError::State {
            path: shown.join("session.json"),
            reason: e.to_string(),
        })?;
    if !info.seals.iter().any(|s| s.layer.as_deref() == Some(&id))
        && super::shared::is_id(&id)
    {
        // Not committed: the layer goes back to being the upper.
        let store = Store::lock(state)?;
        let cid = CString::new(id.as_str()).expect("hex");
        if lstat_opt(store.fd(), &cid)?.is_some() {
            if lstat_opt(rw, c"upper")?.is_some() {
                let upper = sys::open_dir_beneath(rw, c"upper")?;
                if !sys::list_dir(upper.as_fd())?.is_empty() {
                    return Err(WorkspaceError::State {
                        path: shown.join("upper"),
                        reason: "an unfinished snapshot left a non-empty upper beside its layer"
                            .into(),
                    });
                }
                drop(upper);
                remove_tree(rw, c"upper")?;
            }
            sys::rename_at(store.fd(), &cid, rw, c"upper")?;
        }
        let seals_dir = sys::open_dir_beneath(dir, c"seals")?;
        let _ = sys::unlink_at(seals_dir.as_fd(), &seal_name(info.seals.len() + 1), false);
        events.push(json!({
            "event": "seal-rolled-back", "time_unix_ms": now_ms(),
            "seal": info.seals.len() + 1,
            "reason": "the process freezing the session ended before the layer was recorded",
        }));
    }
    sys::unlink_at(dir, FREEZE_JOURNAL, false)?;
    Ok(events)
}
