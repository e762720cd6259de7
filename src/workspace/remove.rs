//! Removing session state without ever following a link: every step is an
//! `unlinkat` below an fd opened with `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`,
//! so a symlink planted anywhere (even swapped in meanwhile) is removed as
//! a link or makes the removal fail, never redirects it out of the session.
//!
//! The walk is iterative over a [`sys::DirChain`]: stack and open fds stay
//! bounded whatever the depth of the tree (the upper is workload-shaped),
//! and memory is the names of the directories on the current path.

use std::ffi::{CStr, CString};
use std::os::fd::{BorrowedFd, OwnedFd};

use crate::sys::{self, Errno, SysError};

use super::error::Result;

/// Open the directory `name` below `dir` for removal: readable and
/// writable by us (sealed baselines and overlay work dirs are read-only or
/// mode 0).
fn open_removable(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, SysError> {
    let fd = match sys::open_dir_beneath(dir, name) {
        Err(e) if e.errno == Errno::EACCES => {
            sys::chmod_dir_beneath(dir, name, 0o700)?;
            sys::open_dir_beneath(dir, name)?
        }
        other => other?,
    };
    let _ = sys::fchmod(std::os::fd::AsFd::as_fd(&fd), 0o700);
    Ok(fd)
}

fn absent_ok(r: Result<(), SysError>) -> Result<(), SysError> {
    match r {
        Err(e) if e.errno == Errno::ENOENT => Ok(()),
        other => other,
    }
}

/// Remove `name` in `dir` and everything below it. Absent is fine (also
/// for entries that vanish meanwhile).
pub fn remove_tree(dir: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    let meta = match sys::lstat_at(dir, name) {
        Ok(m) => m,
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if !meta.is_dir() {
        return Ok(absent_ok(sys::unlink_at(dir, name, false))?);
    }
    let root = match open_removable(dir, name) {
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        other => other?,
    };
    // Never into another filesystem (a session's mounted disk image must
    // be unmounted first, not emptied).
    let root_dev = sys::fstat(std::os::fd::AsFd::as_fd(&root))?.dev;
    let mut chain = sys::DirChain::new(root)?;
    // Per level below the root: the directory's name and its names left.
    let mut pending: Vec<(CString, Vec<CString>)> =
        vec![(name.to_owned(), sys::list_dir(chain.current())?)];
    while let Some((_, names)) = pending.last_mut() {
        let Some(child) = names.pop() else {
            let (done, _) = pending.pop().expect("a level");
            if pending.is_empty() {
                break;
            }
            chain.pop()?;
            absent_ok(sys::unlink_at(chain.current(), &done, true))?;
            continue;
        };
        let cur = chain.current();
        let m = match sys::lstat_at(cur, &child) {
            Ok(m) => m,
            Err(e) if e.errno == Errno::ENOENT => continue,
            Err(e) => return Err(e.into()),
        };
        if !m.is_dir() {
            absent_ok(sys::unlink_at(cur, &child, false))?;
            continue;
        }
        if m.dev != root_dev {
            return Err(super::error::WorkspaceError::Unsupported {
                path: child.to_string_lossy().into_owned(),
                reason: "is a mount point: not removed (unmount it first)".into(),
            });
        }
        let fd = match open_removable(cur, &child) {
            Err(e) if e.errno == Errno::ENOENT => continue,
            other => other?,
        };
        chain.push_fd(fd)?;
        let names = sys::list_dir(chain.current())?;
        pending.push((child, names));
    }
    drop(chain);
    Ok(absent_ok(sys::unlink_at(dir, name, true))?)
}
