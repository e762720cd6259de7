//! The merged view of a session's baseline and upper directory, resolved
//! the way overlayfs does (whiteouts hide, opaque directories cut off the
//! baseline), entirely through directory fds: the upper was written by the
//! sandbox and is treated as hostile data (SECURITY.md §8).

use std::ffi::{CStr, CString};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys::{self, Errno, Meta};
use crate::util::quote::display_name;

use super::error::{Result, WorkspaceError};
use super::relpath::RelPath;

/// xattrs marking an opaque upper directory (privileged and `userxattr`
/// overlay mounts). Only the value `y` means opaque.
const OPAQUE_XATTRS: [&CStr; 2] = [c"trusted.overlay.opaque", c"user.overlay.opaque"];

/// Whether the upper directory `fd` is opaque (hides the baseline below it).
pub fn is_opaque(fd: BorrowedFd<'_>) -> Result<bool> {
    for name in OPAQUE_XATTRS {
        if let Some(v) = sys::get_xattr(fd, name)?
            && v == b"y"
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// lstat of `name` in `dir`, `None` when it does not exist.
pub fn lstat_opt(dir: BorrowedFd<'_>, name: &CStr) -> Result<Option<Meta>> {
    match sys::lstat_at(dir, name) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ENOTDIR => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Read the regular file `name` in `dir`, at most `limit` bytes (more is an
/// error). The file is opened only after an `O_PATH` look showed a regular
/// file, and the opened inode must be that same file: FIFOs and devices are
/// never opened.
pub fn read_regular(dir: BorrowedFd<'_>, name: &CStr, limit: u64, what: &[u8]) -> Result<Vec<u8>> {
    let probe = sys::open_beneath(dir, name, libc::O_PATH, 0)?;
    let before = sys::fstat(probe.as_fd())?;
    if !before.is_file() {
        return Err(WorkspaceError::Unsupported {
            path: display_name(what),
            reason: "not a regular file".into(),
        });
    }
    if before.size > limit {
        return Err(WorkspaceError::TooLarge {
            what: format!("{} ({} bytes)", display_name(what), before.size),
            limit,
        });
    }
    let fd = sys::open_beneath(dir, name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
    let after = sys::fstat(fd.as_fd())?;
    if after.dev != before.dev || after.ino != before.ino || !after.is_file() {
        return Err(WorkspaceError::Unsupported {
            path: display_name(what),
            reason: "changed while being read".into(),
        });
    }
    let mut data = Vec::with_capacity(after.size.min(limit) as usize);
    std::fs::File::from(fd)
        .take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| WorkspaceError::io(format!("read {}", display_name(what)), e))?;
    if data.len() as u64 > limit {
        return Err(WorkspaceError::TooLarge {
            what: display_name(what),
            limit,
        });
    }
    Ok(data)
}

/// One entry of the merged view: its parent directory fd, its name there
/// and its metadata.
#[derive(Debug)]
pub struct Found {
    pub dir: OwnedFd,
    pub name: CString,
    pub meta: Meta,
}

/// A directory of the merged view: its upper part (if any) and its
/// visible read-only parts, top first (those not hidden by an opaque
/// directory or a whiteout above them).
#[derive(Debug)]
pub struct MergedDir {
    pub upper: Option<OwnedFd>,
    pub lowers: Vec<OwnedFd>,
}

/// The layers of a session's workspace.
#[derive(Debug)]
pub struct Layers {
    /// The writable layer.
    pub upper: OwnedFd,
    /// The read-only layers below it, top first: sealed layers newest
    /// first, the baseline last.
    pub lowers: Vec<OwnedFd>,
    /// Where a diff starts: the old side of a diff is `lowers[diff_from..]`
    /// (0: changes since the last seal; `lowers.len() - 1`: since the
    /// baseline).
    pub diff_from: usize,
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd> {
    fd.try_clone()
        .map_err(|e| WorkspaceError::io("dup a directory fd", e))
}

impl Layers {
    /// An upper over one baseline (a session without seals).
    pub fn new(base: OwnedFd, upper: OwnedFd) -> Layers {
        Layers {
            upper,
            lowers: vec![base],
            diff_from: 0,
        }
    }

    /// Every layer, top first.
    pub fn stack(&self) -> Vec<BorrowedFd<'_>> {
        std::iter::once(self.upper.as_fd())
            .chain(self.lowers.iter().map(|l| l.as_fd()))
            .collect()
    }

    /// The merged root directory.
    pub fn root(&self) -> Result<MergedDir> {
        let mut lowers = Vec::new();
        if !is_opaque(self.upper.as_fd())? {
            for l in &self.lowers {
                lowers.push(dup(l)?);
                if is_opaque(l.as_fd())? {
                    break;
                }
            }
        }
        Ok(MergedDir {
            upper: Some(dup(&self.upper)?),
            lowers,
        })
    }

    /// Resolve `path` in the merged view; `None` when it does not exist
    /// (or was deleted). Never follows a symlink: a link as an intermediate
    /// component is an error.
    pub fn lookup(&self, path: &RelPath) -> Result<Option<Found>> {
        let comps = path.components();
        let Some((last, parents)) = comps.split_last() else {
            return Err(WorkspaceError::BadPath {
                path: "/workspace".into(),
                reason: "names the workspace itself".into(),
            });
        };
        let mut dir = self.root()?;
        for (i, c) in parents.iter().enumerate() {
            match dir.child_dir(c, &comps[..=i])? {
                Some(d) => dir = d,
                None => return Ok(None),
            }
        }
        dir.entry(last)
    }
}

impl MergedDir {
    /// The entry `name` of this directory in the merged view.
    pub fn entry(&self, name: &CStr) -> Result<Option<Found>> {
        for fd in self.upper.iter().chain(self.lowers.iter()) {
            if let Some(meta) = lstat_opt(fd.as_fd(), name)? {
                if meta.is_whiteout() {
                    return Ok(None);
                }
                return Ok(Some(Found {
                    dir: dup(fd)?,
                    name: name.to_owned(),
                    meta,
                }));
            }
        }
        Ok(None)
    }

    /// The child directory `name`; `None` if absent; an error when it is
    /// something other than a directory (a symlink is never followed).
    pub fn child_dir(&self, name: &CStr, shown: &[CString]) -> Result<Option<MergedDir>> {
        let not_dir = || WorkspaceError::BadPath {
            path: display_name(&super::relpath::join(shown)),
            reason: "is not a directory (links are not followed)".into(),
        };
        let mut upper = None;
        let mut lowers_visible = true;
        if let Some(up) = &self.upper
            && let Some(meta) = lstat_opt(up.as_fd(), name)?
        {
            if meta.is_whiteout() {
                return Ok(None);
            }
            if !meta.is_dir() {
                return Err(not_dir());
            }
            let fd = sys::open_dir_beneath(up.as_fd(), name)?;
            lowers_visible = !is_opaque(fd.as_fd())?;
            upper = Some(fd);
        }
        let mut lowers = Vec::new();
        if lowers_visible {
            for l in &self.lowers {
                match lstat_opt(l.as_fd(), name)? {
                    None => continue,
                    Some(m) if m.is_dir() => {
                        let fd = sys::open_dir_beneath(l.as_fd(), name)?;
                        let opaque = is_opaque(fd.as_fd())?;
                        lowers.push(fd);
                        if opaque {
                            break;
                        }
                    }
                    Some(m) if m.is_whiteout() => {
                        if upper.is_none() && lowers.is_empty() {
                            return Ok(None);
                        }
                        break;
                    }
                    Some(_) => {
                        if upper.is_none() && lowers.is_empty() {
                            return Err(not_dir());
                        }
                        break;
                    }
                }
            }
        }
        if upper.is_none() && lowers.is_empty() {
            return Ok(None);
        }
        Ok(Some(MergedDir { upper, lowers }))
    }

    /// Names visible in this directory (sorted bytewise), whiteouts removed.
    #[cfg(test)]
    pub fn names(&self) -> Result<Vec<CString>> {
        let mut names = std::collections::BTreeSet::new();
        let mut hidden = std::collections::BTreeSet::new();
        for fd in self.upper.iter().chain(self.lowers.iter()) {
            for n in sys::list_dir(fd.as_fd())? {
                if hidden.contains(&n) || names.contains(&n) {
                    continue;
                }
                match lstat_opt(fd.as_fd(), &n)? {
                    Some(m) if m.is_whiteout() => {
                        hidden.insert(n);
                    }
                    Some(_) => {
                        names.insert(n);
                    }
                    None => {}
                }
            }
        }
        Ok(names.into_iter().collect())
    }
}
