//! A seal's state on disk before its commit point (see `seal.rs`): the
//! names of a seal's files, and the roll-back of one that a crash left
//! half-done, which every operation on a session runs under its lock.
//! Below the session: it takes directory fds, not a `Session`.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd};

use super::error::{Result, WorkspaceError};
use super::remove::remove_tree;
use crate::sys::{self, Errno};

/// Test hook: `HUTCH_FAULT=NAME` kills the process with SIGKILL at the
/// point `NAME` (to test what a crash there leaves behind).
pub(crate) fn fault_point(name: &str) {
    if std::env::var_os("HUTCH_FAULT").is_some_and(|v| v == name) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

/// The name of seal `n`'s layer and manifest.
pub(crate) fn seal_name(n: usize) -> CString {
    CString::new(n.to_string()).expect("digits")
}

/// Whether `name` exists in `dir` (without following a link).
pub(crate) fn exists(dir: BorrowedFd<'_>, name: &CStr) -> Result<bool> {
    Ok(super::layers::lstat_opt(dir, name)?.is_some())
}

/// Roll back a seal that did not reach its commit point (see `seal.rs`). `seals` is the number of committed seals; the caller
/// holds the session lock. Returns whether there was one.
pub(crate) fn recover(dir: BorrowedFd<'_>, rw: BorrowedFd<'_>, seals: usize) -> Result<bool> {
    let pending = seal_name(seals + 1);
    let layers_dir = sys::open_dir_beneath(rw, c"layers")?;
    let mut recovered = false;
    if exists(layers_dir.as_fd(), &pending)? {
        if exists(rw, c"upper")? {
            let upper = sys::open_dir_beneath(rw, c"upper")?;
            if !sys::list_dir(upper.as_fd())?.is_empty() {
                return Err(WorkspaceError::State {
                    path: "upper".into(),
                    reason: format!(
                        "an unfinished seal {} left a non-empty upper beside its layer",
                        seals + 1
                    ),
                });
            }
            drop(upper);
            remove_tree(rw, c"upper")?;
        }
        sys::rename_at(layers_dir.as_fd(), &pending, rw, c"upper")?;
        recovered = true;
    } else if !exists(rw, c"upper")? {
        return Err(WorkspaceError::State {
            path: "upper".into(),
            reason: "is missing".into(),
        });
    }
    let seals_dir = sys::open_dir_beneath(dir, c"seals")?;
    for name in [pending.as_c_str(), c".tmp"] {
        match sys::unlink_at(seals_dir.as_fd(), name, false) {
            Ok(()) => recovered = true,
            Err(e) if e.errno == Errno::ENOENT => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(recovered)
}
