//! The content-addressed store.
//!
//! ```text
//! ROOT/
//!   index.json            images (manifest digest, names, platform, layers); replaced by rename
//!   blobs/sha256/HEX      verified manifests and configs
//!   layers/HEX/           one per layer blob digest, unpacked once:
//!     root/               the tree, ready to be an overlay lower
//!     meta.json           digests, sizes, what the checks need, the xattr kind
//!     entries             one line per entry: kind mode uid gid escaped-path
//!   locks/HEX             flock held while a layer is being unpacked
//!   refs/HEX              an image a session uses (see `refs.rs`)
//!   tmp/                  staging; everything is built here and renamed into place
//!   lock                  shared by imports and runs, exclusive for gc
//!   index.lock            held while index.json is rewritten
//! ```
//!
//! Crash safety: a layer, blob or index appears only by `rename` of a
//! complete staged copy, and the index (what makes an image exist) is
//! written last; leftovers in `tmp/` are removed by `gc`.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::error::{ImageError, Result};
use super::oci::Platform;
use crate::sys::{self, Errno};

/// One image in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    pub manifest: Digest,
    pub config: Digest,
    pub platform: Platform,
    #[serde(default)]
    pub names: Vec<String>,
    /// Layer blob digests, bottom to top.
    pub layers: Vec<Digest>,
    /// Bytes of file data in the layers.
    pub size: u64,
    /// What it was imported from: `oci`, `docker-archive`, `rootfs`.
    pub format: String,
    /// Seconds since the epoch.
    pub imported: u64,
    /// Where `hutch image pull` got it (absent for an import).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulled: Option<Pulled>,
}

/// Where a pulled image came from (kept in its index entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pulled {
    /// `HOST[:PORT]/REPOSITORY`.
    pub repository: String,
    /// The reference as given (a tag, a digest or both).
    pub reference: String,
    /// The index (manifest list) digest the platform's manifest was chosen from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<Digest>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct IndexFile {
    version: u32,
    images: Vec<ImageRecord>,
}

/// An open store.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
}

/// Environment variable naming the store directory.
pub const STORE_ENV: &str = "HUTCH_IMAGE_STORE";

/// The store directory when none is given: `$HUTCH_IMAGE_STORE`; for root
/// `/var/lib/hutch/images`; else `$XDG_DATA_HOME/hutch/images` or
/// `~/.local/share/hutch/images`.
pub fn default_root() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(STORE_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if sys::geteuid() == 0 {
        return Ok(PathBuf::from("/var/lib/hutch/images"));
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|p| Path::new(p).is_absolute()) {
        return Ok(PathBuf::from(x).join("hutch/images"));
    }
    match std::env::var_os("HOME").filter(|p| Path::new(p).is_absolute()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/share/hutch/images")),
        None => Err(ImageError::Store {
            path: "(default)".into(),
            why: "neither HOME nor XDG_DATA_HOME is set; pass --image-store DIR".into(),
        }),
    }
}

fn io_err(path: &Path, e: std::io::Error) -> ImageError {
    ImageError::Store {
        path: path.display().to_string(),
        why: e.to_string(),
    }
}

/// A held flock (released on drop).
pub struct Lock(#[allow(dead_code)] OwnedFd);

impl Store {
    /// Open (creating it, mode 0700) the store at `root`, or the default.
    /// Refuses a store directory not owned by the caller or writable by others.
    pub fn open(root: Option<&Path>) -> Result<Store> {
        let root = match root {
            Some(r) => r.to_path_buf(),
            None => default_root()?,
        };
        if !root.is_absolute() {
            let cwd = std::env::current_dir().map_err(|e| io_err(&root, e))?;
            return Store::open(Some(&cwd.join(&root)));
        }
        if !root.exists() {
            std::fs::create_dir_all(&root).map_err(|e| io_err(&root, e))?;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| io_err(&root, e))?;
        }
        let meta = std::fs::symlink_metadata(&root).map_err(|e| io_err(&root, e))?;
        if !meta.is_dir() {
            return Err(ImageError::Store {
                path: root.display().to_string(),
                why: "not a directory".into(),
            });
        }
        if meta.uid() != sys::geteuid() || meta.mode() & 0o022 != 0 {
            return Err(ImageError::Store {
                path: root.display().to_string(),
                why: format!(
                    "owned by uid {} with mode {:o}: a store must belong to the caller (uid {}) \
                     and not be writable by others",
                    meta.uid(),
                    meta.mode() & 0o7777,
                    sys::geteuid()
                ),
            });
        }
        for sub in ["blobs/sha256", "layers", "locks", "refs", "tmp"] {
            let p = root.join(sub);
            std::fs::create_dir_all(&p).map_err(|e| io_err(&p, e))?;
        }
        Ok(Store { root })
    }

    /// [`Store::open`] for a run: a store that does not exist yet is an
    /// error (a run creates nothing in the state directory).
    pub fn open_existing(root: Option<&Path>) -> Result<Store> {
        let root = match root {
            Some(r) => std::path::absolute(r).map_err(|e| io_err(r, e))?,
            None => default_root()?,
        };
        if std::fs::symlink_metadata(&root).is_err() {
            return Err(ImageError::Store {
                path: root.display().to_string(),
                why: "does not exist: import an image into it first (`hutch image import`), or \
                      name another store (--image-store DIR)"
                    .into(),
            });
        }
        Store::open(Some(&root))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub(crate) fn layer_dir(&self, d: &Digest) -> PathBuf {
        self.root.join("layers").join(d.hex())
    }

    pub(crate) fn blob_path(&self, d: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(d.hex())
    }

    fn lock_file(&self, path: &Path) -> Result<OwnedFd> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| io_err(path, e))?;
        Ok(OwnedFd::from(f))
    }

    /// The store lock, shared (imports) or exclusive (gc).
    pub(crate) fn lock_store(&self, exclusive: bool) -> Result<Lock> {
        let fd = self.lock_file(&self.root.join("lock"))?;
        if exclusive {
            sys::flock_exclusive(fd.as_fd(), true)?;
        } else {
            sys::image::flock_shared(fd.as_fd())?;
        }
        Ok(Lock(fd))
    }

    pub(crate) fn lock_index(&self) -> Result<Lock> {
        let fd = self.lock_file(&self.root.join("index.lock"))?;
        sys::flock_exclusive(fd.as_fd(), true)?;
        Ok(Lock(fd))
    }

    pub(crate) fn lock_layer(&self, d: &Digest) -> Result<Lock> {
        let fd = self.lock_file(&self.root.join("locks").join(d.hex()))?;
        sys::flock_exclusive(fd.as_fd(), true)?;
        Ok(Lock(fd))
    }

    /// A fresh private staging directory in `tmp/`, removed on drop
    /// unless [`Staging::keep`] is called.
    pub(crate) fn staging(&self, tag: &str) -> Result<Staging> {
        let mut rnd = [0u8; 8];
        sys::getrandom(&mut rnd)?;
        let path = self
            .tmp()
            .join(format!("{tag}-{}-{}", std::process::id(), hex::encode(rnd)));
        std::fs::create_dir(&path).map_err(|e| io_err(&path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io_err(&path, e))?;
        Ok(Staging { path, keep: false })
    }

    /// Read the index (empty when absent).
    pub fn images(&self) -> Result<Vec<ImageRecord>> {
        let p = self.root.join("index.json");
        let text = match std::fs::read(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&p, e)),
        };
        let idx: IndexFile = serde_json::from_slice(&text).map_err(|e| ImageError::Store {
            path: p.display().to_string(),
            why: format!("unreadable index: {e}"),
        })?;
        Ok(idx.images)
    }

    /// Replace the index (the caller holds the index lock).
    pub(crate) fn write_index(&self, images: Vec<ImageRecord>) -> Result<()> {
        let idx = IndexFile { version: 1, images };
        let text =
            serde_json::to_vec_pretty(&idx).map_err(|e| ImageError::Invalid(e.to_string()))?;
        self.write_atomic(&self.root.join("index.json"), &text)
    }

    /// Write `path` by a temporary file in `tmp/`, fsync and rename.
    pub(crate) fn write_atomic(&self, path: &Path, data: &[u8]) -> Result<()> {
        let mut rnd = [0u8; 8];
        sys::getrandom(&mut rnd)?;
        let tmp = self
            .tmp()
            .join(format!("w-{}-{}", std::process::id(), hex::encode(rnd)));
        let mut f = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        f.write_all(data).map_err(|e| io_err(&tmp, e))?;
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io_err(path, e)
        })
    }

    /// Store a verified blob (no-op when present).
    pub(crate) fn put_blob(&self, d: &Digest, data: &[u8]) -> Result<()> {
        let p = self.blob_path(d);
        if p.exists() {
            return Ok(());
        }
        self.write_atomic(&p, data)
    }

    /// Read a stored blob, verifying its digest again (the store is ours,
    /// but a blob is always checked before use).
    pub fn blob(&self, d: &Digest) -> Result<Vec<u8>> {
        let p = self.blob_path(d);
        let data = std::fs::read(&p).map_err(|e| io_err(&p, e))?;
        if Digest::of(&data) != *d {
            return Err(ImageError::Blob {
                digest: d.to_string(),
                why: "the stored copy does not match its digest (the store is damaged; remove \
                      the image and import it again)"
                    .into(),
            });
        }
        Ok(data)
    }

    /// Remove `name` (a layer directory, a staging directory) below `dir`
    /// of the store: renamed away first, so it disappears at once, then
    /// removed without following links.
    pub(crate) fn remove_dir_entry(&self, dir: &Path, name: &str) -> Result<()> {
        let tmp = self.tmp();
        let mut rnd = [0u8; 8];
        sys::getrandom(&mut rnd)?;
        let doomed = format!("rm-{}-{}", std::process::id(), hex::encode(rnd));
        let from = dir.join(name);
        if dir != tmp {
            match std::fs::rename(&from, tmp.join(&doomed)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(io_err(&from, e)),
            }
            let tfd = sys::open_dir_path(&tmp)?;
            remove_tree(tfd.as_fd(), &cstr(&doomed))
        } else {
            let tfd = sys::open_dir_path(&tmp)?;
            remove_tree(tfd.as_fd(), &cstr(name))
        }
    }
}

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| c"?".to_owned())
}

/// A staging directory in the store's `tmp/`.
pub(crate) struct Staging {
    pub path: PathBuf,
    keep: bool,
}

impl Staging {
    /// It was renamed into place: nothing to remove.
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let (Some(parent), Some(name)) = (self.path.parent(), self.path.file_name())
            && let Ok(fd) = sys::open_dir_path(parent)
        {
            let _ = remove_tree(fd.as_fd(), &cstr(&name.to_string_lossy()));
        }
    }
}

/// Remove the tree `name` below `parent` (a directory or not): iterative,
/// fd-relative, never following a link; directories the caller cannot
/// enter or empty are made 0700 first (an unprivileged unpack keeps the
/// archive's modes, e.g. 0555 directories).
pub fn remove_tree(parent: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    let meta = match sys::lstat_at(parent, name) {
        Ok(m) => m,
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if !meta.is_dir() {
        return Ok(sys::unlink_at(parent, name, false)?);
    }
    let open = |dir: BorrowedFd<'_>, n: &CStr| -> Result<OwnedFd> {
        match sys::open_dir_beneath(dir, n) {
            Ok(fd) => Ok(fd),
            Err(e) if e.errno == Errno::EACCES => {
                sys::chmod_dir_beneath(dir, n, 0o700)?;
                Ok(sys::open_dir_beneath(dir, n)?)
            }
            Err(e) => Err(e.into()),
        }
    };
    let first = open(parent, name)?;
    let root = sys::geteuid() == 0;
    if !root {
        sys::fchmod(first.as_fd(), 0o700)?;
    }
    // (directory fd, its name in the directory above)
    let mut stack: Vec<(OwnedFd, CString)> = vec![(first, name.to_owned())];
    while let Some((fd, _)) = stack.last() {
        let mut descend = None;
        for n in sys::list_dir(fd.as_fd())? {
            let m = match sys::lstat_at(fd.as_fd(), &n) {
                Ok(m) => m,
                Err(e) if e.errno == Errno::ENOENT => continue,
                Err(e) => return Err(e.into()),
            };
            if m.is_dir() {
                descend = Some(n);
                break;
            }
            sys::unlink_at(fd.as_fd(), &n, false)?;
        }
        match descend {
            Some(n) => {
                let child = open(fd.as_fd(), &n)?;
                if !root {
                    sys::fchmod(child.as_fd(), 0o700)?;
                }
                stack.push((child, n));
            }
            None => {
                let (_, n) = stack.pop().expect("non-empty");
                let above = stack.last().map_or(parent, |(f, _)| f.as_fd());
                sys::unlink_at(above, &n, true)?;
            }
        }
    }
    Ok(())
}
