//! Locks on the host upper directories a sandbox mounts.
//!
//! An overlay's upper must never be mounted by two overlays at once (the
//! kernel only warns, and what either shows is then undefined). Every
//! sandbox of a [`crate::launch::helper::pool::Pool`] names the same upper, so two of its
//! commands at once would: a claim (and a pool's cold fallback, with
//! [`crate::launch::options::RunOptions::lock_host_uppers`]) takes an exclusive `flock` on
//! each host upper directory of its Spec first, waiting for the command
//! that holds it, and its supervisor keeps the locks until hutch init, and
//! with it the overlay, is gone. The lock is on the host directory's own
//! inode, which no sandbox reaches (inside, the workspace is the overlay's
//! inode). A helper waiting for the lock answers a kill only once it has
//! it; the caller then kills the helper itself ([`crate::launch::helper`]: after
//! two seconds), and the ready sandbox dies with it.

use std::os::fd::{AsFd, OwnedFd};

use crate::spec::{FsOp, Spec};
use crate::sys;

/// Lock every host upper directory of `spec`'s writable overlays, in the
/// Spec's order (the same order for every sandbox of a shape: no two
/// claims can hold one each and wait for the other's).
pub(crate) fn lock_host_uppers(spec: &Spec) -> Result<Vec<OwnedFd>, sys::SysError> {
    let mut locks = Vec::new();
    for op in &spec.fs {
        if let FsOp::Overlay { upper, .. } = op {
            let fd = sys::open_dir_path(upper)?;
            while let Err(e) = sys::flock_exclusive(fd.as_fd(), true) {
                if e.errno != sys::Errno::EINTR {
                    return Err(e);
                }
            }
            locks.push(fd);
        }
    }
    Ok(locks)
}
