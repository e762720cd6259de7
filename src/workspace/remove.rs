//! Removing session state without ever following a link: every step is an
//! `unlinkat` below an fd opened with `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`,
//! so a symlink planted anywhere (even swapped in meanwhile) is removed as
//! a link or makes the removal fail, never redirects it out of the session.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};

use crate::sys::{self, Errno};

use super::error::Result;

/// Remove `name` in `dir` and everything below it. Absent is fine.
pub fn remove_tree(dir: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    let meta = match sys::lstat_at(dir, name) {
        Ok(m) => m,
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if meta.is_dir() {
        let sub = match sys::open_dir_beneath(dir, name) {
            Err(e) if e.errno == Errno::EACCES => {
                sys::chmod_dir_beneath(dir, name, 0o700)?;
                sys::open_dir_beneath(dir, name)?
            }
            other => other?,
        };
        // Sealed baselines and overlay work dirs are read-only or mode 0.
        let _ = sys::fchmod(sub.as_fd(), 0o700);
        for child in sys::list_dir(sub.as_fd())? {
            remove_tree(sub.as_fd(), &child)?;
        }
        match sys::unlink_at(dir, name, true) {
            Err(e) if e.errno != Errno::ENOENT => return Err(e.into()),
            _ => {}
        }
    } else {
        match sys::unlink_at(dir, name, false) {
            Err(e) if e.errno != Errno::ENOENT => return Err(e.into()),
            _ => {}
        }
    }
    Ok(())
}
