//! Building a sealed baseline: files, directories and symlinks written
//! through directory fds into `baseline/tree`, hashed on the way in. Sources: a host directory (walked through fds, links
//! copied as links, never followed) or a git commit (see `git.rs`).

use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::sys;

use super::error::{Result, WorkspaceError};
use super::layers::lstat_opt;
use super::manifest::{MODE_LINK, Manifest, ManifestEntry, git_file_mode};
use super::quote::display_name;
use super::relpath::join;

/// Caps of a baseline import (`session create --max-files ...`). Exceeding
/// one fails the import whole: nothing of it is left in the state
/// directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportLimits {
    /// Entries: files, symlinks and directories.
    pub max_files: u64,
    /// Bytes of all file contents and symlink targets.
    pub max_bytes: u64,
    /// Bytes of the largest file.
    pub max_file_bytes: u64,
    /// Components of the deepest path.
    pub max_depth: usize,
    /// Bytes of the longest path (relative to the tree, `/`-separated).
    pub max_path_bytes: usize,
}

impl Default for ImportLimits {
    /// 1 M entries, 16 GiB, 4 GiB per file, 512 levels, 4096-byte paths.
    fn default() -> Self {
        ImportLimits {
            max_files: 1_000_000,
            max_bytes: 16 << 30,
            max_file_bytes: 4 << 30,
            max_depth: 512,
            max_path_bytes: 4096,
        }
    }
}

impl ImportLimits {
    /// Refuse a path deeper or longer than the caps (`path` is
    /// `/`-separated, `depth` its number of components).
    pub fn check_path(&self, path: &[u8], depth: usize) -> Result<()> {
        if depth > self.max_depth {
            return Err(WorkspaceError::Refused(
                format!(
                    "the baseline has a path deeper than {} levels ({}...)",
                    self.max_depth,
                    display_name(&path[..path.len().min(64)])
                ),
                "--max-depth N",
            ));
        }
        if path.len() > self.max_path_bytes {
            return Err(WorkspaceError::Refused(
                format!(
                    "the baseline has a path longer than {} bytes ({}...)",
                    self.max_path_bytes,
                    display_name(&path[..64.min(path.len())])
                ),
                "--max-path-bytes N",
            ));
        }
        Ok(())
    }

    fn too_many(&self) -> WorkspaceError {
        WorkspaceError::Refused(
            format!(
                "the baseline has more than {} entries (files, links and directories)",
                self.max_files
            ),
            "--max-files N",
        )
    }

    fn too_big(&self, path: &[u8]) -> WorkspaceError {
        WorkspaceError::Refused(
            format!(
                "{} is larger than {} bytes",
                display_name(path),
                self.max_file_bytes
            ),
            "--max-file-bytes N",
        )
    }

    fn too_much(&self) -> WorkspaceError {
        WorkspaceError::Refused(
            format!("the baseline is larger than {} bytes", self.max_bytes),
            "--max-bytes N",
        )
    }
}

/// Writes a baseline tree and collects its manifest, within
/// [`ImportLimits`].
pub struct BaselineWriter {
    /// The directory chain currently open, from the tree's root.
    chain: sys::DirChain,
    /// The names of the chain's levels below the root.
    names: Vec<CString>,
    limits: ImportLimits,
    entries: u64,
    bytes: u64,
    pub manifest: Manifest,
}

impl BaselineWriter {
    /// Start writing into the empty directory `root` with the default caps.
    pub fn new(root: OwnedFd) -> Result<BaselineWriter> {
        Self::with_limits(root, ImportLimits::default())
    }

    /// Start writing into the empty directory `root`.
    pub fn with_limits(root: OwnedFd, limits: ImportLimits) -> Result<BaselineWriter> {
        Ok(BaselineWriter {
            chain: sys::DirChain::new(root)?,
            names: Vec::new(),
            limits,
            entries: 0,
            bytes: 0,
            manifest: Manifest::default(),
        })
    }

    /// The caps this writer enforces.
    pub fn limits(&self) -> &ImportLimits {
        &self.limits
    }

    fn count_entry(&mut self) -> Result<()> {
        self.entries += 1;
        if self.entries > self.limits.max_files {
            return Err(self.limits.too_many());
        }
        Ok(())
    }

    fn count_bytes(&mut self, n: u64) -> Result<()> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.limits.max_bytes {
            return Err(self.limits.too_much());
        }
        Ok(())
    }

    /// Make `parents` the open directory chain, creating what is missing
    /// (directories 0755: plain git-like modes, so the workload can change
    /// them through the overlay's copy-up).
    fn enter(&mut self, parents: &[CString]) -> Result<()> {
        let common = self
            .names
            .iter()
            .zip(parents)
            .take_while(|(a, b)| a == b)
            .count();
        while self.names.len() > common {
            self.chain.pop()?;
            self.names.pop();
        }
        for c in &parents[common..] {
            match lstat_opt(self.chain.current(), c)? {
                None => {
                    self.count_entry()?;
                    let cur = self.chain.current();
                    sys::mkdirat(cur, c, 0o755)?;
                    let fd = sys::open_dir_beneath(cur, c)?;
                    sys::fchmod(fd.as_fd(), 0o755)?;
                    self.chain.push_fd(fd)?;
                }
                Some(m) if m.is_dir() => self.chain.push(c)?,
                Some(_) => {
                    return Err(WorkspaceError::Unsupported {
                        path: display_name(&join(parents)),
                        reason: "is both a file and a directory in the source".into(),
                    });
                }
            }
            self.names.push(c.clone());
        }
        Ok(())
    }

    /// Check the path caps, count the entry and enter its parents.
    fn start_entry<'p>(&mut self, path: &'p [CString]) -> Result<(&'p CStr, Vec<u8>)> {
        let (name, parents) = split(path)?;
        let shown = join(path);
        self.limits.check_path(&shown, path.len())?;
        self.enter(parents)?;
        self.count_entry()?;
        Ok((name, shown))
    }

    /// An (empty) directory.
    pub fn add_dir(&mut self, path: &[CString]) -> Result<()> {
        self.limits.check_path(&join(path), path.len())?;
        self.enter(path)
    }

    /// A regular file with the content read from `src`, executable or not.
    pub fn add_file(&mut self, path: &[CString], exec: bool, src: &mut dyn Read) -> Result<()> {
        let (name, shown) = self.start_entry(path)?;
        let fd = sys::open_beneath(
            self.chain.current(),
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )?;
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
            size += n as u64;
            if size > self.limits.max_file_bytes {
                return Err(self.limits.too_big(&shown));
            }
            self.count_bytes(n as u64)?;
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| WorkspaceError::io(format!("write {}", display_name(&shown)), e))?;
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
        let (name, shown) = self.start_entry(path)?;
        self.count_bytes(target.len() as u64)?;
        let t = CString::new(target).map_err(|_| WorkspaceError::Unsupported {
            path: display_name(&shown),
            reason: "symlink target contains NUL".into(),
        })?;
        sys::symlinkat(&t, self.chain.current(), name)?;
        self.manifest.entries.push(ManifestEntry {
            path: shown,
            mode: MODE_LINK,
            size: target.len() as u64,
            sha256: Sha256::digest(target).into(),
        });
        Ok(())
    }

    /// Finish the tree and return the manifest. The tree is sealed by
    /// never being written again: it is only ever an overlay lower, and
    /// the manifest's digest fingerprints it.
    pub fn finish(mut self) -> Result<Manifest> {
        while !self.names.is_empty() {
            self.chain.pop()?;
            self.names.pop();
        }
        sys::fchmod(self.chain.current(), 0o755)?;
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
/// are refused (never opened). The walk is iterative with a bounded number
/// of open fds, whatever the depth; the writer's caps bound the rest.
pub fn import_dir(src: &Path, writer: &mut BaselineWriter) -> Result<()> {
    let root = sys::open_dir_path(src)?;
    let mut chain = sys::DirChain::new(root)?;
    let mut path: Vec<CString> = Vec::new();
    let mut top = sys::list_dir(chain.current())?;
    top.retain(|n| n.as_bytes() != b".git");
    // Names left per level (reverse-sorted: `pop` gives the next).
    let mut pending = vec![sorted_rev(top)];
    while let Some(names) = pending.last_mut() {
        let Some(name) = names.pop() else {
            pending.pop();
            if !pending.is_empty() {
                chain.pop()?;
                path.pop();
            }
            continue;
        };
        let dir = chain.current();
        let Some(meta) = lstat_opt(dir, &name)? else {
            continue;
        };
        path.push(name.clone());
        let shown = || {
            let mut p = src.as_os_str().as_bytes().to_vec();
            p.push(b'/');
            p.extend_from_slice(&join(&path));
            display_name(&p)
        };
        if meta.is_dir() {
            writer.add_dir(&path)?;
            chain.push(&name)?;
            pending.push(sorted_rev(sys::list_dir(chain.current())?));
            continue;
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
            writer.add_file(&path, meta.mode & 0o100 != 0, &mut file)?;
        } else if meta.is_symlink() {
            let target = sys::readlink_at(dir, &name)?;
            writer.add_symlink(&path, &target)?;
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

fn sorted_rev(mut names: Vec<CString>) -> Vec<CString> {
    names.sort_unstable_by(|a, b| b.cmp(a));
    names
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
