//! Building a sealed baseline: files, directories and symlinks written
//! through directory fds into `baseline/tree`, hashed on the way in. Sources: a host directory (walked through fds, links
//! copied as links, never followed) or a git commit (see `git.rs`).

use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::sys;

use super::error::{Result, WorkspaceError};
use super::layers::lstat_opt;
use super::manifest::{MODE_LINK, Manifest, ManifestEntry, git_file_mode};
use super::quote::display_name;
use super::relpath::join;

/// Writes a baseline tree and collects its manifest.
pub struct BaselineWriter {
    root: OwnedFd,
    /// The directory chain currently open: (components, fd) from the root.
    stack: Vec<(CString, OwnedFd)>,
    /// Every directory created, to seal once the tree is complete.
    dirs: Vec<Vec<CString>>,
    pub manifest: Manifest,
}

impl BaselineWriter {
    /// Start writing into the empty directory `root`.
    pub fn new(root: OwnedFd) -> BaselineWriter {
        BaselineWriter {
            root,
            stack: Vec::new(),
            dirs: Vec::new(),
            manifest: Manifest::default(),
        }
    }

    fn current(&self) -> BorrowedFd<'_> {
        self.stack
            .last()
            .map_or(self.root.as_fd(), |(_, fd)| fd.as_fd())
    }

    /// Make `parents` the open directory chain, creating what is missing.
    fn enter(&mut self, parents: &[CString]) -> Result<()> {
        let common = self
            .stack
            .iter()
            .zip(parents)
            .take_while(|((a, _), b)| a == *b)
            .count();
        self.stack.truncate(common);
        for c in &parents[common..] {
            let cur = self.current();
            match lstat_opt(cur, c)? {
                None => {
                    sys::mkdirat(cur, c, 0o755)?;
                    let mut p: Vec<CString> = self.stack.iter().map(|(n, _)| n.clone()).collect();
                    p.push(c.clone());
                    self.dirs.push(p);
                }
                Some(m) if m.is_dir() => {}
                Some(_) => {
                    return Err(WorkspaceError::Unsupported {
                        path: display_name(&join(parents)),
                        reason: "is both a file and a directory in the source".into(),
                    });
                }
            }
            let fd = sys::open_dir_beneath(self.current(), c)?;
            self.stack.push((c.clone(), fd));
        }
        Ok(())
    }

    /// An (empty) directory.
    pub fn add_dir(&mut self, path: &[CString]) -> Result<()> {
        self.enter(path)
    }

    /// A regular file with the content read from `src`, executable or not.
    pub fn add_file(&mut self, path: &[CString], exec: bool, src: &mut dyn Read) -> Result<()> {
        let (name, parents) = split(path)?;
        self.enter(parents)?;
        let fd = sys::open_beneath(
            self.current(),
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )?;
        let shown = join(path);
        let mut file = std::fs::File::from(fd);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut size = 0u64;
        loop {
            let n = src
                .read(&mut buf)
                .map_err(|e| WorkspaceError::io(format!("read {}", display_name(&shown)), e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| WorkspaceError::io(format!("write {}", display_name(&shown)), e))?;
            size += n as u64;
        }
        let mode = if exec { 0o755 } else { 0o644 };
        sys::fchmod(file.as_fd(), mode)?;
        self.manifest.entries.push(ManifestEntry {
            path: shown,
            mode: git_file_mode(mode),
            size,
            sha256: hasher.finalize().into(),
        });
        Ok(())
    }

    /// A symlink with `target` (stored, never resolved).
    pub fn add_symlink(&mut self, path: &[CString], target: &[u8]) -> Result<()> {
        let (name, parents) = split(path)?;
        self.enter(parents)?;
        let shown = join(path);
        let t = CString::new(target).map_err(|_| WorkspaceError::Unsupported {
            path: display_name(&shown),
            reason: "symlink target contains NUL".into(),
        })?;
        sys::symlinkat(&t, self.current(), name)?;
        self.manifest.entries.push(ManifestEntry {
            path: shown,
            mode: MODE_LINK,
            size: target.len() as u64,
            sha256: Sha256::digest(target).into(),
        });
        Ok(())
    }

    /// Finish the tree (plain git-like modes: directories 0755, files
    /// 0644/0755, so the workload can change them through the overlay's
    /// copy-up) and return the manifest. The tree is sealed by never being
    /// written again: it is only ever an overlay lower, and the manifest's
    /// digest fingerprints it.
    pub fn finish(mut self) -> Result<Manifest> {
        self.stack.clear();
        for dir in &self.dirs {
            let mut fd = sys::open_dir_beneath(self.root.as_fd(), c".")?;
            for c in dir {
                fd = sys::open_dir_beneath(fd.as_fd(), c)?;
            }
            sys::fchmod(fd.as_fd(), 0o755)?;
        }
        sys::fchmod(self.root.as_fd(), 0o755)?;
        Ok(self.manifest)
    }
}

fn split(path: &[CString]) -> Result<(&CStr, &[CString])> {
    match path.split_last() {
        Some((name, parents)) => Ok((name.as_c_str(), parents)),
        None => Err(WorkspaceError::BadPath {
            path: "\"\"".into(),
            reason: "empty path".into(),
        }),
    }
}

/// Copy the host directory `src` into the writer: regular files,
/// directories and symlinks (as links). A top-level `.git` is skipped (the
/// workspace carries no repository metadata); FIFOs, sockets and devices
/// are refused.
pub fn import_dir(src: &Path, writer: &mut BaselineWriter) -> Result<()> {
    let root = sys::open_dir_path(src)?;
    let mut path = Vec::new();
    copy_dir(root.as_fd(), &mut path, writer, src)
}

fn copy_dir(
    dir: BorrowedFd<'_>,
    path: &mut Vec<CString>,
    writer: &mut BaselineWriter,
    src: &Path,
) -> Result<()> {
    let mut names = sys::list_dir(dir)?;
    names.sort();
    for name in names {
        if path.is_empty() && name.as_bytes() == b".git" {
            continue;
        }
        let Some(meta) = lstat_opt(dir, &name)? else {
            continue;
        };
        path.push(name.clone());
        let shown = || {
            let mut p = src.as_os_str().as_bytes().to_vec();
            p.push(b'/');
            p.extend_from_slice(&join(path));
            display_name(&p)
        };
        if meta.is_dir() {
            writer.add_dir(path)?;
            let sub = sys::open_dir_beneath(dir, &name)?;
            copy_dir(sub.as_fd(), path, writer, src)?;
        } else if meta.is_file() {
            let fd = sys::open_beneath(dir, &name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
            let now = sys::fstat(fd.as_fd())?;
            if now.ino != meta.ino || !now.is_file() {
                return Err(WorkspaceError::Unsupported {
                    path: shown(),
                    reason: "changed while being copied".into(),
                });
            }
            let mut file = std::fs::File::from(fd);
            writer.add_file(path, meta.mode & 0o100 != 0, &mut file)?;
        } else if meta.is_symlink() {
            let target = sys::readlink_at(dir, &name)?;
            writer.add_symlink(path, &target)?;
        } else {
            return Err(WorkspaceError::Unsupported {
                path: shown(),
                reason: "FIFOs, sockets and device nodes cannot be part of a baseline".into(),
            });
        }
        path.pop();
    }
    Ok(())
}

/// Split a slash-separated path from an untrusted listing into components,
/// refusing empty, `.` and `..` components.
pub fn split_components(path: &[u8]) -> Result<Vec<CString>> {
    let mut out = Vec::new();
    for part in path.split(|&b| b == b'/') {
        if part.is_empty() || part == b"." || part == b".." || part.contains(&0) {
            return Err(WorkspaceError::BadPath {
                path: display_name(path),
                reason: "has an empty, `.` or `..` component".into(),
            });
        }
        out.push(CString::new(part).map_err(|_| WorkspaceError::BadPath {
            path: display_name(path),
            reason: "contains NUL".into(),
        })?);
    }
    Ok(out)
}
