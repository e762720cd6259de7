//! What changed in a session: computed from the upper directory only, so
//! the cost grows with the change, not with the baseline.
//!
//! The upper is attacker-written data (SECURITY.md §8): it is walked through
//! fds (`openat2` beneath, no symlinks), symlinks are recorded as links and
//! never read through, FIFOs, sockets and device nodes are reported and
//! never opened. Whiteouts (char 0/0) and opaque directories become
//! deletions of what they hide in the baseline; other `*.overlay.*` xattrs
//! are ignored.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};

use crate::sys::{self, Meta};

use super::error::Result;
use super::layers::{Layers, is_opaque, lstat_opt, read_regular};
use super::manifest::{MODE_LINK, git_file_mode};
use super::relpath::child_path;

/// Default cap on the size of one file read for a diff.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;

/// One side of a change: what git would track at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blob {
    File { exec: bool, data: Vec<u8> },
    Link { target: Vec<u8> },
}

impl Blob {
    /// git's mode for this blob.
    pub fn git_mode(&self) -> u32 {
        match self {
            Blob::File { exec: true, .. } => git_file_mode(0o755),
            Blob::File { exec: false, .. } => git_file_mode(0o644),
            Blob::Link { .. } => MODE_LINK,
        }
    }

    /// The bytes git hashes: file content or link target.
    pub fn data(&self) -> &[u8] {
        match self {
            Blob::File { data, .. } => data,
            Blob::Link { target } => target,
        }
    }

    pub fn is_link(&self) -> bool {
        matches!(self, Blob::Link { .. })
    }
}

/// A path whose content differs between baseline and workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub old: Option<Blob>,
    pub new: Option<Blob>,
}

/// An entry of the upper that git cannot represent (never opened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: Vec<u8>,
    /// `fifo`, `socket`, `char-device` or `block-device`.
    pub kind: &'static str,
}

/// All changes of a workspace, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub changes: Vec<Change>,
    pub skipped: Vec<Skipped>,
}

/// The kind name of a special file.
pub fn special_kind(meta: &Meta) -> &'static str {
    match meta.kind() {
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "char-device",
        libc::S_IFBLK => "block-device",
        _ => "unknown",
    }
}

#[derive(Default)]
struct Collector {
    max_file_bytes: u64,
    sides: BTreeMap<Vec<u8>, (Option<Blob>, Option<Blob>)>,
    skipped: Vec<Skipped>,
}

impl Collector {
    /// Read what git would track at `name` in `dir`; `None` for
    /// directories; special files go to `skipped` when `report` is set.
    fn blob(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        meta: &Meta,
        path: &[u8],
        report: bool,
    ) -> Result<Option<Blob>> {
        if meta.is_file() {
            let data = read_regular(dir, name, self.max_file_bytes, path)?;
            Ok(Some(Blob::File {
                exec: meta.mode & 0o100 != 0,
                data,
            }))
        } else if meta.is_symlink() {
            Ok(Some(Blob::Link {
                target: sys::readlink_at(dir, name)?,
            }))
        } else {
            if report && !meta.is_dir() && !meta.is_whiteout() {
                self.skipped.push(Skipped {
                    path: path.to_vec(),
                    kind: special_kind(meta),
                });
            }
            Ok(None)
        }
    }

    /// Everything under baseline entry `name` (a file, link or directory)
    /// is gone from the workspace.
    fn deleted(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        meta: &Meta,
        path: &[u8],
    ) -> Result<()> {
        if meta.is_dir() {
            let sub = sys::open_dir_beneath(dir, name)?;
            let mut names = sys::list_dir(sub.as_fd())?;
            names.sort();
            for n in names {
                if let Some(m) = lstat_opt(sub.as_fd(), &n)? {
                    self.deleted(sub.as_fd(), &n, &m, &child_path(path, n.to_bytes()))?;
                }
            }
        } else if let Some(b) = self.blob(dir, name, meta, path, false)? {
            self.sides.entry(path.to_vec()).or_default().0 = Some(b);
        }
        Ok(())
    }

    /// Walk upper directory `up` (with the baseline directory it covers,
    /// if visible).
    fn walk(
        &mut self,
        up: BorrowedFd<'_>,
        base: Option<BorrowedFd<'_>>,
        prefix: &[u8],
    ) -> Result<()> {
        let mut names = sys::list_dir(up)?;
        names.sort();
        for name in names {
            let path = child_path(prefix, name.to_bytes());
            let Some(um) = lstat_opt(up, &name)? else {
                continue;
            };
            let bm = match base {
                Some(b) => lstat_opt(b, &name)?,
                None => None,
            };
            if um.is_dir() {
                let sub = sys::open_dir_beneath(up, &name)?;
                let opaque = is_opaque(sub.as_fd())?;
                match (base, bm) {
                    (Some(b), Some(m)) if m.is_dir() && !opaque => {
                        let bsub = sys::open_dir_beneath(b, &name)?;
                        self.walk(sub.as_fd(), Some(bsub.as_fd()), &path)?;
                    }
                    (Some(b), Some(m)) => {
                        self.deleted(b, &name, &m, &path)?;
                        self.walk(sub.as_fd(), None, &path)?;
                    }
                    _ => self.walk(sub.as_fd(), None, &path)?,
                }
                continue;
            }
            // Anything but a directory hides the whole baseline entry.
            if let (Some(b), Some(m)) = (base, bm) {
                self.deleted(b, &name, &m, &path)?;
            }
            if let Some(blob) = self.blob(up, &name, &um, &path, true)? {
                self.sides.entry(path).or_default().1 = Some(blob);
            }
        }
        Ok(())
    }
}

/// Compute the changes of the workspace `layers`.
pub fn compute(layers: &Layers, max_file_bytes: u64) -> Result<Changes> {
    let mut c = Collector {
        max_file_bytes,
        ..Default::default()
    };
    let root_opaque = is_opaque(layers.upper.as_fd())?;
    if root_opaque {
        let mut names = sys::list_dir(layers.base.as_fd())?;
        names.sort();
        for n in names {
            if let Some(m) = lstat_opt(layers.base.as_fd(), &n)? {
                c.deleted(layers.base.as_fd(), &n, &m, n.to_bytes())?;
            }
        }
        c.walk(layers.upper.as_fd(), None, b"")?;
    } else {
        c.walk(layers.upper.as_fd(), Some(layers.base.as_fd()), b"")?;
    }
    let changes = c
        .sides
        .into_iter()
        .filter(|(_, (old, new))| old != new)
        .map(|(path, (old, new))| Change { path, old, new })
        .collect();
    let mut skipped = c.skipped;
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Changes { changes, skipped })
}
