//! The state directory's store of shared layers (`STATE/.layers`): the
//! frozen layers of snapshots and seals, and baselines a fork published
//! (`base-ID`), which any number of sessions use read-only as overlay
//! lowers.
//!
//! Reference counting is by marking, not by counters: a layer is in use
//! while a session's `session.json` (or its freeze journal, see
//! `snapshot.rs`) names it. [`sweep`] removes the others; it runs after a
//! close, a rollback and in gc, so the last user's close removes a layer
//! and nothing is left once every session is gone. A crash can only leave
//! an unreferenced layer behind, which the next sweep removes; never a
//! reference to a removed one.
//!
//! Everything that adds a reference (a freeze, a fork) or removes a layer
//! (a sweep) holds [`Store`]'s lock: an `flock` on the store directory
//! itself, so that a sweep removing the empty store leaves nothing behind
//! (a waiter that locked the removed directory notices and starts again).

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::error::{Result, WorkspaceError};
use super::layers::{lstat_opt, read_regular};
use super::remove::remove_tree;
use crate::sys;

/// The store's name in the state directory.
pub(crate) const STORE: &CStr = c".layers";
/// A session's journal of a freeze into the store (the layer's id, written
/// before the upper is renamed into the store).
pub(crate) const FREEZE_JOURNAL: &CStr = c"freezing";
/// A session's journal of a compaction under way (the merged layer's id,
/// written before the layer is made; `compact.rs`).
pub(crate) const COMPACT_JOURNAL: &CStr = c"compacting";

/// The store's name of the baseline of session `origin`.
pub(crate) fn baseline_name(origin: &str) -> CString {
    CString::new(format!("base-{origin}")).expect("hex id")
}

/// Whether `s` has the shape of a session or layer id (32 hex digits).
pub(crate) fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is a store entry name hutch makes (32 hex digits, or
/// `base-` and 32 hex digits): anything else in the store is left alone.
fn is_entry(name: &str) -> bool {
    is_id(name) || name.strip_prefix("base-").is_some_and(is_id)
}

/// The store, locked (held until dropped).
#[derive(Debug)]
pub(crate) struct Store {
    fd: OwnedFd,
}

impl Store {
    /// Create (0700) and lock the store of the state directory `state`.
    pub(crate) fn lock(state: BorrowedFd<'_>) -> Result<Store> {
        loop {
            match sys::mkdirat(state, STORE, 0o700) {
                Ok(()) => {}
                Err(e) if e.errno == sys::Errno::EEXIST => {}
                Err(e) => return Err(e.into()),
            }
            let fd = match sys::open_dir_beneath(state, STORE) {
                Ok(fd) => fd,
                // Removed by a sweep meanwhile.
                Err(e) if e.errno == sys::Errno::ENOENT => continue,
                Err(e) => return Err(e.into()),
            };
            while let Err(e) = sys::flock_exclusive(fd.as_fd(), true) {
                if e.errno != sys::Errno::EINTR {
                    return Err(e.into());
                }
            }
            // A sweep removed the directory while we waited for it.
            if sys::fstat(fd.as_fd())?.nlink == 0 {
                continue;
            }
            return Ok(Store { fd });
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The ids a session names in the store: its layers, its baseline when
/// shared, and a layer its freeze journal names.
pub(crate) fn references(state: BorrowedFd<'_>, id: &str, out: &mut BTreeSet<String>) -> Result<()> {
    let name = CString::new(id).map_err(|_| WorkspaceError::BadId(id.into()))?;
    let dir = match sys::open_dir_beneath(state, &name) {
        Ok(d) => d,
        Err(e) if e.errno == sys::Errno::ENOENT => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    // The journal first: a freeze removes it only after its commit point
    // (session.json), so one of the two names the layer.
    match read_regular(dir.as_fd(), FREEZE_JOURNAL, 64, b"freezing") {
        Ok(data) => {
            out.insert(String::from_utf8_lossy(&data).trim().to_string());
        }
        Err(WorkspaceError::Sys(e)) if e.errno == sys::Errno::ENOENT => {}
        Err(e) => return Err(e),
    }
    match read_regular(dir.as_fd(), COMPACT_JOURNAL, 64, b"compacting") {
        Ok(data) => {
            out.insert(String::from_utf8_lossy(&data).trim().to_string());
        }
        Err(WorkspaceError::Sys(e)) if e.errno == sys::Errno::ENOENT => {}
        Err(e) => return Err(e),
    }
    let data = read_regular(dir.as_fd(), c"session.json", 1 << 20, b"session.json")?;
    let info: super::info::SessionInfo =
        serde_json::from_slice(&data).map_err(|e| WorkspaceError::State {
            path: format!("{id}/session.json").into(),
            reason: e.to_string(),
        })?;
    out.extend(info.seals.iter().filter_map(|s| s.layer.clone()));
    if lstat_opt(dir.as_fd(), c"baseline")?.is_none() {
        let origin = info.baseline_origin.as_deref().unwrap_or(id);
        out.insert(format!("base-{origin}"));
    }
    Ok(())
}

/// Remove the store's layers no session uses, and the store when it is
/// empty. Returns the number removed. A session whose state cannot be
/// read stops the sweep before anything is removed (its layers are not
/// known, so none may go).
pub(crate) fn sweep(state: BorrowedFd<'_>) -> Result<usize> {
    if lstat_opt(state, STORE)?.is_none() {
        return Ok(0);
    }
    let store = Store::lock(state)?;
    let mut used = BTreeSet::new();
    for name in sys::list_dir(state)? {
        let Ok(id) = name.to_str() else { continue };
        if is_id(id) {
            references(state, id, &mut used)?;
        }
    }
    let mut removed = 0;
    let mut left = 0;
    for name in sys::list_dir(store.fd())? {
        let Ok(text) = name.to_str() else {
            left += 1;
            continue;
        };
        if is_entry(text) && !used.contains(text) {
            remove_tree(store.fd(), &name)?;
            removed += 1;
        } else {
            left += 1;
        }
    }
    if left == 0 {
        // Under the lock: a waiter sees nlink 0 and makes a new one.
        match sys::unlink_at(state, STORE, true) {
            Ok(()) => {}
            Err(e) if e.errno == sys::Errno::ENOENT || e.errno == sys::Errno::ENOTEMPTY => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}
