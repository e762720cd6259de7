//! Reading a repository's metadata from the host (`session create
//! --from-git`): the repository is attacker-shaped (SECURITY.md §9).
//!
//! hutch reads only what it needs to find the git directory to show the
//! sandboxed git: `REPO/.git` (a directory, or a `gitdir:` file) and
//! `commondir`, and it looks at `objects`, `HEAD` and
//! `objects/info/alternates` for clear errors. Every open is beneath the
//! repository with `openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
//! RESOLVE_NO_MAGICLINKS)`, `O_NOFOLLOW|O_NONBLOCK` (a FIFO never blocks),
//! then must be a regular file (or directory), is read with a small cap,
//! and its content never appears in an error. The git directory must lie
//! beneath `REPO`: a `gitdir:` or `commondir` naming a place elsewhere is
//! refused (for a linked worktree or a submodule checkout, name the
//! repository that holds the objects instead).

use std::ffi::{CString, OsStr};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::sys::{self, Errno, Meta, SysError};

use super::error::{Result, WorkspaceError};

/// Bytes read at most of a metadata file (`.git`, `commondir`).
pub const METADATA_MAX_BYTES: u64 = 4096;

/// A repository directory the caller named, open.
#[derive(Debug)]
pub struct RepoDir {
    fd: OwnedFd,
    /// The canonical path of the repository.
    path: PathBuf,
}

/// Where the git directory lies: an fd of it, its host path (beneath the
/// repository, symlink-free when it was opened) and its metadata.
#[derive(Debug)]
pub struct GitDir {
    pub fd: OwnedFd,
    pub path: PathBuf,
    pub meta: Meta,
}

fn git_err(msg: String) -> WorkspaceError {
    WorkspaceError::Git(msg)
}

impl RepoDir {
    /// Open the repository `repo` (the caller's path: its own symlinks are
    /// resolved once, here).
    pub fn open(repo: &Path) -> Result<RepoDir> {
        let path = std::fs::canonicalize(repo)
            .map_err(|e| WorkspaceError::io(format!("open {}", repo.display()), e))?;
        let fd = sys::open_dir_path(&path).map_err(|e| {
            git_err(format!(
                "{} is not a directory ({})",
                repo.display(),
                e.errno.desc()
            ))
        })?;
        Ok(RepoDir { fd, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `REPO/rel` for messages.
    fn shown(&self, rel: &[u8]) -> String {
        if rel.is_empty() {
            return self.path.display().to_string();
        }
        self.path.join(OsStr::from_bytes(rel)).display().to_string()
    }

    /// Open `rel` beneath the repository, never following a symlink,
    /// never blocking; `None` when it does not exist.
    fn open_rel(&self, rel: &[u8], flags: libc::c_int) -> Result<Option<OwnedFd>> {
        let name = if rel.is_empty() { &b"."[..] } else { rel };
        let c = CString::new(name)
            .map_err(|_| git_err(format!("{}: NUL in a path", self.shown(rel))))?;
        let extra = if flags & libc::O_PATH != 0 {
            libc::O_NOFOLLOW
        } else {
            libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY
        };
        match sys::openat2(
            Some(self.fd.as_fd()),
            &c,
            flags | extra | libc::O_CLOEXEC,
            0,
            sys::RESOLVE_STRICT,
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if e.errno == Errno::ENOENT => Ok(None),
            Err(e) => Err(self.open_error(rel, &e)),
        }
    }

    fn open_error(&self, rel: &[u8], e: &SysError) -> WorkspaceError {
        let why = match e.errno {
            Errno::ELOOP => "is or passes through a symlink (not followed)",
            Errno::EXDEV => "lies outside the repository",
            Errno::ENOTDIR => "passes through something that is not a directory",
            Errno::EACCES | Errno::EPERM => "is not readable",
            other => other.desc(),
        };
        git_err(format!("{} {why}", self.shown(rel)))
    }

    /// The metadata of `rel` (never following a link), `None` if absent.
    pub fn lstat(&self, rel: &[u8]) -> Result<Option<Meta>> {
        match self.open_rel(rel, libc::O_PATH)? {
            Some(fd) => Ok(Some(sys::fstat(fd.as_fd())?)),
            None => Ok(None),
        }
    }

    /// The content of the regular file `rel` (at most
    /// [`METADATA_MAX_BYTES`]), `None` if absent. Anything else (a link, a
    /// FIFO, a device, a directory, a larger file) is an error that names
    /// the file, never its content.
    pub fn read_small(&self, rel: &[u8]) -> Result<Option<Vec<u8>>> {
        self.read_capped(rel, METADATA_MAX_BYTES)
    }

    /// [`RepoDir::read_small`] with a cap of `cap` bytes.
    pub fn read_capped(&self, rel: &[u8], cap: u64) -> Result<Option<Vec<u8>>> {
        // Look (O_PATH) before opening: a device node is never opened.
        let Some(before) = self.lstat(rel)? else {
            return Ok(None);
        };
        if !before.is_file() {
            return Err(git_err(format!(
                "{} is not a regular file",
                self.shown(rel)
            )));
        }
        let Some(fd) = self.open_rel(rel, libc::O_RDONLY)? else {
            return Ok(None);
        };
        let meta = sys::fstat(fd.as_fd())?;
        if !meta.is_file() || (meta.dev, meta.ino) != (before.dev, before.ino) {
            return Err(git_err(format!(
                "{} changed while being read",
                self.shown(rel)
            )));
        }
        if meta.size > cap {
            return Err(git_err(format!(
                "{} is larger than {cap} bytes; not a git metadata file hutch reads",
                self.shown(rel)
            )));
        }
        let mut data = Vec::new();
        std::fs::File::from(fd)
            .take(cap + 1)
            .read_to_end(&mut data)
            .map_err(|e| WorkspaceError::io(format!("read {}", self.shown(rel)), e))?;
        if data.len() as u64 > cap {
            return Err(git_err(format!(
                "{} is larger than {cap} bytes; not a git metadata file hutch reads",
                self.shown(rel)
            )));
        }
        Ok(Some(data))
    }

    /// A path a metadata file names (`gitdir:` target, `commondir`),
    /// relative to the repository: relative ones are taken from `base`
    /// (itself relative to the repository), absolute ones must lie beneath
    /// the repository. `what` names the file for errors.
    fn relative_target(&self, base: &[u8], target: &[u8], what: &[u8]) -> Result<Vec<u8>> {
        if target.is_empty() || target.contains(&0) {
            return Err(git_err(format!("{} is malformed", self.shown(what))));
        }
        if target.first() == Some(&b'/') {
            let root = self.path.as_os_str().as_bytes();
            let inside = target.strip_prefix(root).and_then(|rest| {
                if rest.is_empty() {
                    Some(&b""[..])
                } else {
                    rest.strip_prefix(b"/")
                }
            });
            return inside.map(<[u8]>::to_vec).ok_or_else(|| {
                git_err(format!(
                    "{} names a git directory outside {}; name the repository that holds the objects instead",
                    self.shown(what),
                    self.path.display()
                ))
            });
        }
        let mut rel = base.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(target);
        Ok(rel)
    }

    /// Find the git directory whose objects the sandbox needs: `REPO/.git`
    /// (a directory, or a `gitdir:` file naming one beneath `REPO`), else
    /// `REPO` itself when bare; then, for a linked worktree's git dir (it
    /// has a `commondir`), its common directory.
    pub fn git_dir(&self) -> Result<GitDir> {
        // Paths read from a metadata file are its content: errors about
        // them name the file they came from, never the path itself.
        let mut named_by: Option<&'static [u8]> = None;
        let gitdir: Vec<u8> = match self.lstat(b".git")? {
            Some(m) if m.is_dir() => b".git".to_vec(),
            Some(m) if m.is_file() => {
                let text = self.read_small(b".git")?.unwrap_or_default();
                let target = text
                    .strip_prefix(b"gitdir: ")
                    .map(|t| t.trim_ascii_end())
                    .ok_or_else(|| {
                        git_err(format!("{} is not a gitdir file", self.shown(b".git")))
                    })?;
                named_by = Some(b".git");
                self.relative_target(b"", target, b".git")?
            }
            Some(m) if m.is_symlink() => {
                return Err(git_err(format!(
                    "{} is a symlink (not followed)",
                    self.shown(b".git")
                )));
            }
            Some(_) => {
                return Err(git_err(format!(
                    "{} is neither a directory nor a gitdir file",
                    self.shown(b".git")
                )));
            }
            None => {
                let objects = self.lstat(b"objects")?.is_some_and(|m| m.is_dir());
                let head = self.lstat(b"HEAD")?.is_some_and(|m| m.is_file());
                if !(objects && head) {
                    return Err(git_err(format!(
                        "{} is not a git repository (no .git, not bare)",
                        self.path.display()
                    )));
                }
                Vec::new()
            }
        };
        let opaque = |named_by: Option<&[u8]>, e: WorkspaceError| match named_by {
            Some(file) => git_err(format!(
                "{} names no usable git directory beneath {} (missing, outside it, through a symlink, or not a directory)",
                self.shown(file),
                self.path.display()
            )),
            None => e,
        };
        let mut commondir_file = gitdir.clone();
        if !commondir_file.is_empty() {
            commondir_file.push(b'/');
        }
        commondir_file.extend_from_slice(b"commondir");
        let common = match self
            .read_small(&commondir_file)
            .map_err(|e| opaque(named_by, e))?
        {
            Some(text) => {
                let target = text.strip_suffix(b"\n").unwrap_or(&text);
                if named_by.is_none() {
                    named_by = Some(if gitdir.is_empty() {
                        b"commondir"
                    } else {
                        b".git/commondir"
                    });
                }
                self.relative_target(&gitdir, target, &commondir_file)
                    .map_err(|e| opaque(named_by, e))?
            }
            None => gitdir,
        };
        let fd = self
            .open_rel(&common, libc::O_PATH | libc::O_DIRECTORY)
            .and_then(|fd| {
                fd.ok_or_else(|| git_err(format!("{} does not exist", self.shown(&common))))
            })
            .map_err(|e| opaque(named_by, e))?;
        let meta = sys::fstat(fd.as_fd())?;
        // The host path of exactly the directory opened (no `..`, no link).
        let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| WorkspaceError::io("resolve the git directory", e))?;
        if !path.starts_with(&self.path) {
            return Err(git_err(format!(
                "the git directory of {} moved while being opened",
                self.path.display()
            )));
        }
        Ok(GitDir { fd, path, meta })
    }

    /// Whether the git directory `git_dir` has `objects/info/alternates`
    /// (objects borrowed from elsewhere, which the sandbox does not show).
    pub fn has_alternates(&self, git_dir: &Path) -> bool {
        let Ok(rel) = git_dir.strip_prefix(&self.path) else {
            return false;
        };
        let mut p = rel.as_os_str().as_bytes().to_vec();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(b"objects/info/alternates");
        self.lstat(&p).ok().flatten().is_some()
    }
}
