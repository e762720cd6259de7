//! Unpacking one layer tar into its own directory, as hostile input.
//!
//! - Every name is normalised and checked first: no absolute names, no
//!   `..`, no NUL or newline, components of at most 255 bytes.
//! - Every lookup is fd-relative below the layer root with
//!   `openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS)`,
//!   and every creation is one name below an open directory fd with
//!   `O_CREAT|O_EXCL`/`mkdirat`/`symlinkat`/`mknodat`/`linkat`: a path
//!   through a symlink fails (ELOOP), nothing is ever opened for writing
//!   that existed before, and no link is followed while writing.
//! - OCI whiteouts become overlayfs ones: `.wh.NAME` a character device
//!   0/0, `.wh..wh..opq` the opaque xattr on its directory
//!   (`trusted.overlay.opaque` for root-made layers, `user.overlay.opaque`
//!   for unprivileged ones, whose overlays mount with `userxattr`).
//! - The archive's xattrs are dropped; owners are applied only by root
//!   (an unprivileged caller cannot chown) and always recorded, one line
//!   per entry, for the launcher's id mapping.
//! - Bounded: entry count and data size caps, fixed buffers, metadata
//!   kept per directory only.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use serde::{Deserialize, Serialize};

use super::digest::over_limit;
use super::tar::{Entry, Kind, MAX_NAME, TarError, TarReader};
use crate::sys::image as fsx;
use crate::sys::{self, Errno, SysError};

/// Which xattr marks an opaque directory in this layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpaqueXattr {
    /// `trusted.overlay.opaque`: what root's imports of an earlier hutch
    /// wrote. A run cannot use it (its overlays live in a user namespace,
    /// with `userxattr`): such a layer with opaque directories must be
    /// imported again.
    #[serde(rename = "trusted.overlay.opaque")]
    Trusted,
    /// `user.overlay.opaque`: what every import writes (root's too), read
    /// by overlays mounted with `userxattr`, as hutch's runs are.
    #[serde(rename = "user.overlay.opaque")]
    User,
}

impl OpaqueXattr {
    pub fn name(self) -> &'static CStr {
        match self {
            OpaqueXattr::Trusted => c"trusted.overlay.opaque",
            OpaqueXattr::User => c"user.overlay.opaque",
        }
    }
}

/// How to unpack.
#[derive(Debug, Clone)]
pub struct UnpackOptions {
    /// Refuse the layer past this many entries.
    pub max_entries: u64,
    /// Refuse a file whose data would take the total past this.
    pub max_file_bytes: u64,
    /// Create device nodes (root only) instead of refusing the layer.
    pub allow_devices: bool,
    /// Apply the archive's owners (root). Otherwise files belong to the caller.
    pub keep_owners: bool,
    pub opaque_xattr: OpaqueXattr,
}

/// At most this many paths are listed per kind of note.
const LISTED: usize = 16;

/// What a layer holds, as far as the checks and the launcher care.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerSummary {
    pub entries: u64,
    /// Bytes of regular-file data written.
    pub file_bytes: u64,
    pub whiteouts: u64,
    pub opaque_dirs: u64,
    /// The layer's root is opaque: nothing below it shows through.
    pub root_opaque: bool,
    pub hardlinks: u64,
    /// Extended attributes in the archive, all dropped.
    pub xattrs_dropped: u64,
    /// AUFS metadata entries (`.wh..wh.*`), skipped.
    pub aufs_skipped: u64,
    /// Owners in the archive (applied only when root unpacked the layer).
    pub uids: BTreeSet<u32>,
    pub gids: BTreeSet<u32>,
    /// Device nodes other than whiteouts (only present when allowed).
    pub device_count: u64,
    pub devices: Vec<String>,
    /// Files with the setuid or setgid bit (kept; layers mount nosuid).
    pub setuid_count: u64,
    pub setuid: Vec<String>,
    /// Directories the archive used without an entry of their own,
    /// escaped ([`escape_path`]): checked against the lower layers, where a
    /// symlink or file at that path would make the entry's meaning depend
    /// on following it.
    pub implicit_dirs: Vec<String>,
}

/// Why a layer could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("entry {entry}: {why}")]
    Entry { entry: String, why: String },
    #[error(
        "entry {entry} is a device node ({kind} {major}:{minor}); layers with device nodes are \
         refused (--allow-devices imports them, as root only)"
    )]
    Device {
        entry: String,
        kind: &'static str,
        major: u32,
        minor: u32,
    },
    #[error("unpacked size over the limit of {limit} bytes (raise it with --max-image-size)")]
    TooBig { limit: u64 },
    #[error("more than {limit} entries (the per-layer entry limit)")]
    TooManyEntries { limit: u64 },
    #[error("the archive at byte {offset}: {why}")]
    Tar { offset: u64, why: TarError },
    #[error("{0}")]
    Sys(#[from] SysError),
}

/// Escape a path for records and metadata: bytes outside printable ASCII,
/// and `%`, become `%XX`. Reversible with [`unescape_path`].
pub fn escape_path(p: &[u8]) -> String {
    let mut s = String::with_capacity(p.len());
    for &b in p {
        if (0x21..0x7f).contains(&b) && b != b'%' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// The bytes [`escape_path`] escaped.
pub fn unescape_path(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

fn shown(p: &[u8]) -> String {
    let cut = &p[..p.len().min(200)];
    crate::util::quote::display_name(cut)
}

/// Normalise an archive name into its components: `./` and empty
/// components dropped; absolute names, `..`, NUL, newlines and overlong
/// names refused. The empty list is the layer root.
pub fn normalize(raw: &[u8]) -> Result<Vec<&[u8]>, String> {
    if raw.is_empty() {
        return Err("an empty name".into());
    }
    if raw.len() > MAX_NAME {
        return Err(format!("a name longer than {MAX_NAME} bytes"));
    }
    if raw.contains(&0) {
        return Err("the name contains a NUL byte".into());
    }
    if raw.contains(&b'\n') || raw.contains(&b'\r') {
        return Err("the name contains a newline".into());
    }
    if raw[0] == b'/' {
        // umoci writes the layer root as "/": that one is unambiguous.
        if raw.iter().all(|&b| b == b'/') {
            return Ok(Vec::new());
        }
        return Err("an absolute name".into());
    }
    let mut out = Vec::new();
    for c in raw.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("the name contains `..`".into()),
            c if c.len() > 255 => return Err("a name component longer than 255 bytes".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn cstring(b: &[u8]) -> CString {
    // Names were checked for NUL bytes by `normalize` / the tar reader.
    CString::new(b).unwrap_or_else(|_| c"?".to_owned())
}

fn join(c: &[&[u8]]) -> Vec<u8> {
    c.join(&b'/')
}

/// A directory's final mode and mtime (None: leave it).
type DirMeta = (u32, Option<i64>);

struct Unpacker<'a> {
    root: BorrowedFd<'a>,
    opts: &'a UnpackOptions,
    records: &'a mut dyn Write,
    summary: LayerSummary,
    /// Directories created without an entry of their own (so far).
    implicit: HashSet<Vec<u8>>,
    /// Final mode and mtime of every directory, applied at the end (a
    /// directory's own mode may forbid creating its children, and creating
    /// them changes its mtime).
    dirs: HashMap<Vec<u8>, DirMeta>,
    root_seen: bool,
    cache: Option<(Vec<u8>, OwnedFd)>,
    buf: Vec<u8>,
}

/// Unpack the tar stream `tar` into the empty directory `root`, writing
/// one record per entry to `records`. Stops at the end-of-archive blocks;
/// the caller drains and verifies the rest of the stream.
pub fn unpack<R: Read>(
    tar: &mut TarReader<R>,
    root: BorrowedFd<'_>,
    records: &mut dyn Write,
    opts: &UnpackOptions,
) -> Result<LayerSummary, UnpackError> {
    let mut u = Unpacker {
        root,
        opts,
        records,
        summary: LayerSummary::default(),
        implicit: HashSet::new(),
        dirs: HashMap::new(),
        root_seen: false,
        cache: None,
        buf: vec![0u8; 256 * 1024],
    };
    loop {
        let entry = match tar.next_entry() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) => return Err(tar_error(tar.offset(), e)),
        };
        u.summary.entries += 1;
        if u.summary.entries > opts.max_entries {
            return Err(UnpackError::TooManyEntries {
                limit: opts.max_entries,
            });
        }
        u.summary.xattrs_dropped += u64::from(entry.xattrs);
        u.summary.uids.insert(entry.uid);
        u.summary.gids.insert(entry.gid);
        u.entry(tar, &entry)?;
    }
    u.finish()
}

fn tar_error(offset: u64, e: TarError) -> UnpackError {
    if let TarError::Io(io) = &e
        && over_limit(io).is_some_and(|o| o.what == "unpacked size")
    {
        return UnpackError::TooBig {
            limit: over_limit(io).map_or(0, |o| o.limit),
        };
    }
    UnpackError::Tar { offset, why: e }
}

fn refuse(raw: &[u8], why: impl Into<String>) -> UnpackError {
    UnpackError::Entry {
        entry: shown(raw),
        why: why.into(),
    }
}

fn sys_err(raw: &[u8], e: SysError) -> UnpackError {
    refuse(raw, e.to_string())
}

impl<'a> Unpacker<'a> {
    fn record(
        &mut self,
        kind: char,
        mode: u32,
        uid: u32,
        gid: u32,
        path: &[u8],
    ) -> Result<(), UnpackError> {
        writeln!(
            self.records,
            "{kind} {mode:o} {uid} {gid} {}",
            escape_path(path)
        )
        .map_err(|e| {
            UnpackError::Sys(SysError::new(
                "write(layer records)",
                Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            ))
        })
    }

    /// An fd of directory `parent` (components), creating missing ones.
    fn parent(&mut self, raw: &[u8], parent: &[&[u8]]) -> Result<BorrowedFd<'_>, UnpackError> {
        if parent.is_empty() {
            return Ok(self.root);
        }
        let key = join(parent);
        if self.cache.as_ref().is_some_and(|(p, _)| *p == key) {
            return Ok(self
                .cache
                .as_ref()
                .map(|(_, fd)| fd.as_fd())
                .unwrap_or(self.root));
        }
        let fd = match open_dir(self.root, &cstring(&key)) {
            Ok(fd) => fd,
            Err(e) if e.errno == Errno::ENOENT => self.create_parents(raw, parent)?,
            Err(e) if matches!(e.errno, Errno::ENOTDIR | Errno::ELOOP) => {
                return Err(refuse(raw, explain_parent(self.root, parent)));
            }
            Err(e) => return Err(lookup_error(raw, e)),
        };
        self.cache = Some((key, fd));
        Ok(self
            .cache
            .as_ref()
            .map(|(_, fd)| fd.as_fd())
            .unwrap_or(self.root))
    }
}

/// Why `parent` cannot be opened as a directory: the first component that
/// is a symlink or not a directory (lstat only, nothing followed).
fn explain_parent(root: BorrowedFd<'_>, parent: &[&[u8]]) -> &'static str {
    let mut cur: Option<OwnedFd> = None;
    for c in parent {
        let name = cstring(c);
        let at = cur.as_ref().map_or(root, |f| f.as_fd());
        match sys::lstat_at(at, &name) {
            Ok(m) if m.is_symlink() => return "the path goes through a symlink",
            Ok(m) if !m.is_dir() => return "a parent of the path is not a directory",
            Ok(_) => {}
            Err(_) => break,
        }
        match open_dir(at, &name) {
            Ok(fd) => cur = Some(fd),
            Err(_) => break,
        }
    }
    "a parent of the path cannot be opened as a directory"
}

fn lookup_error(raw: &[u8], e: SysError) -> UnpackError {
    match e.errno {
        Errno::ELOOP => refuse(raw, "the path goes through a symlink"),
        Errno::ENOTDIR => refuse(raw, "a parent of the path is not a directory"),
        Errno::EXDEV => refuse(raw, "the path leaves the layer"),
        _ => sys_err(raw, e),
    }
}

impl<'a> Unpacker<'a> {
    fn create_parents(&mut self, raw: &[u8], parent: &[&[u8]]) -> Result<OwnedFd, UnpackError> {
        let mut cur: Option<OwnedFd> = None;
        for i in 0..parent.len() {
            let name = cstring(parent[i]);
            let at = cur.as_ref().map_or(self.root, |f| f.as_fd());
            let next = match open_dir(at, &name) {
                Ok(fd) => fd,
                Err(e) if e.errno == Errno::ENOENT => {
                    sys::mkdirat(at, &name, 0o700).map_err(|e| sys_err(raw, e))?;
                    let prefix = join(&parent[..=i]);
                    self.dirs.insert(prefix.clone(), (0o755, None));
                    self.implicit.insert(prefix);
                    open_dir(at, &name).map_err(|e| sys_err(raw, e))?
                }
                Err(e) if matches!(e.errno, Errno::ENOTDIR | Errno::ELOOP) => {
                    return Err(refuse(raw, explain_parent(self.root, parent)));
                }
                Err(e) => return Err(lookup_error(raw, e)),
            };
            cur = Some(next);
        }
        cur.ok_or_else(|| refuse(raw, "no parent"))
    }

    fn entry<R: Read>(&mut self, tar: &mut TarReader<R>, e: &Entry) -> Result<(), UnpackError> {
        let raw = e.path.as_slice();
        let comps = normalize(raw).map_err(|why| refuse(raw, why))?;
        let Some((&last, parent)) = comps.split_last() else {
            return self.root_entry(e);
        };
        // AUFS metadata (`.wh..wh.plnk/...`): meaningless to overlayfs.
        if comps.iter().any(|c| c.starts_with(b".wh..wh.")) && last != b".wh..wh..opq" {
            self.summary.aufs_skipped += 1;
            return Ok(());
        }
        if parent.iter().any(|c| c.starts_with(b".wh.")) {
            return Err(refuse(raw, "the path goes through a whiteout name"));
        }
        if last == b".wh..wh..opq" {
            return self.opaque(raw, parent);
        }
        if let Some(target) = last.strip_prefix(b".wh.") {
            if target.is_empty() || target == b"." || target == b".." {
                return Err(refuse(raw, "a whiteout without a valid name"));
            }
            return self.whiteout(raw, parent, target);
        }
        let path = join(&comps);
        match e.kind {
            Kind::Dir => self.dir(raw, parent, last, &path, e),
            Kind::File => self.file(tar, raw, parent, last, &path, e),
            Kind::Symlink => self.symlink(raw, parent, last, &path, e),
            Kind::Hardlink => self.hardlink(raw, parent, last, &path, e),
            Kind::Fifo => self.node(raw, parent, last, &path, e, fsx::NodeKind::Fifo),
            Kind::Char if e.dev_major == 0 && e.dev_minor == 0 => {
                // An overlay-style whiteout in the archive itself.
                self.whiteout(raw, parent, last)
            }
            Kind::Char | Kind::Block => {
                let kind = if e.kind == Kind::Char {
                    "character device"
                } else {
                    "block device"
                };
                if !self.opts.allow_devices {
                    return Err(UnpackError::Device {
                        entry: shown(raw),
                        kind,
                        major: e.dev_major,
                        minor: e.dev_minor,
                    });
                }
                if !self.opts.keep_owners {
                    return Err(refuse(
                        raw,
                        format!("a {kind}: only root can create device nodes (import as root)"),
                    ));
                }
                self.summary.device_count += 1;
                if self.summary.devices.len() < LISTED {
                    self.summary.devices.push(escape_path(&path));
                }
                let k = if e.kind == Kind::Char {
                    fsx::NodeKind::Char
                } else {
                    fsx::NodeKind::Block
                };
                self.node(raw, parent, last, &path, e, k)
            }
        }
    }

    fn root_entry(&mut self, e: &Entry) -> Result<(), UnpackError> {
        if e.kind != Kind::Dir {
            return Err(refuse(&e.path, "the layer root must be a directory"));
        }
        if std::mem::replace(&mut self.root_seen, true) {
            return Err(refuse(&e.path, "a duplicate entry for the layer root"));
        }
        if self.opts.keep_owners {
            sys::fchown(self.root, e.uid, e.gid).map_err(|x| sys_err(&e.path, x))?;
        }
        self.dirs.insert(Vec::new(), (e.mode, Some(e.mtime)));
        self.record('d', e.mode, e.uid, e.gid, b"")
    }

    fn opaque(&mut self, raw: &[u8], parent: &[&[u8]]) -> Result<(), UnpackError> {
        let name = self.opts.opaque_xattr.name();
        let fd = self.parent(raw, parent)?;
        let r = sys::set_xattr(fd, name, b"y");
        r.map_err(|x| sys_err(raw, x))?;
        if parent.is_empty() {
            self.summary.root_opaque = true;
        }
        self.summary.opaque_dirs += 1;
        self.record('o', 0, 0, 0, &join(parent))
    }

    fn whiteout(&mut self, raw: &[u8], parent: &[&[u8]], target: &[u8]) -> Result<(), UnpackError> {
        let name = cstring(target);
        let opaque = self.opts.opaque_xattr.name();
        let fd = self.parent(raw, parent)?;
        match sys::mknod_whiteout(fd, &name) {
            Ok(()) => {}
            Err(x) if x.errno == Errno::EEXIST => {
                // The name is also an entry of this layer: a whiteout only
                // hides lower layers, so a directory here becomes opaque
                // and anything else already hides what is below.
                let meta = sys::lstat_at(fd, &name).map_err(|x| sys_err(raw, x))?;
                if meta.is_dir() {
                    let dir = open_dir(fd, &name).map_err(|x| sys_err(raw, x))?;
                    sys::set_xattr(dir.as_fd(), opaque, b"y").map_err(|x| sys_err(raw, x))?;
                    self.summary.opaque_dirs += 1;
                }
            }
            Err(x) => return Err(sys_err(raw, x)),
        }
        self.summary.whiteouts += 1;
        let mut p = join(parent);
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(target);
        self.record('w', 0, 0, 0, &p)
    }
}

/// `create` made `name` or failed with EEXIST. On EEXIST: replace a
/// whiteout this layer made (returning true: the new entry must hide the
/// lower layers), refuse anything else.
fn replace_whiteout(raw: &[u8], fd: BorrowedFd<'_>, name: &CStr) -> Result<bool, UnpackError> {
    let meta = sys::lstat_at(fd, name).map_err(|x| sys_err(raw, x))?;
    if meta.is_whiteout() {
        sys::unlink_at(fd, name, false).map_err(|x| sys_err(raw, x))?;
        return Ok(true);
    }
    Err(refuse(
        raw,
        "a duplicate entry (the name already exists in this layer)",
    ))
}

impl<'a> Unpacker<'a> {
    fn dir(
        &mut self,
        raw: &[u8],
        parent: &[&[u8]],
        last: &[u8],
        path: &[u8],
        e: &Entry,
    ) -> Result<(), UnpackError> {
        let name = cstring(last);
        let keep = self.opts.keep_owners;
        let opaque = self.opts.opaque_xattr.name();
        let was_implicit = self.implicit.contains(path);
        let fd = self.parent(raw, parent)?;
        let mut made_opaque = false;
        match sys::mkdirat(fd, &name, 0o700) {
            Ok(()) => {}
            Err(x) if x.errno == Errno::EEXIST && was_implicit => {}
            Err(x) if x.errno == Errno::EEXIST => {
                let meta = sys::lstat_at(fd, &name).map_err(|x| sys_err(raw, x))?;
                if !meta.is_whiteout() {
                    return Err(refuse(
                        raw,
                        "a duplicate entry (the name already exists in this layer)",
                    ));
                }
                sys::unlink_at(fd, &name, false).map_err(|x| sys_err(raw, x))?;
                sys::mkdirat(fd, &name, 0o700).map_err(|x| sys_err(raw, x))?;
                let dir = open_dir(fd, &name).map_err(|x| sys_err(raw, x))?;
                sys::set_xattr(dir.as_fd(), opaque, b"y").map_err(|x| sys_err(raw, x))?;
                made_opaque = true;
            }
            Err(x) => return Err(sys_err(raw, x)),
        }
        if keep {
            fsx::lchown_at(fd, &name, e.uid, e.gid).map_err(|x| sys_err(raw, x))?;
        }
        if made_opaque {
            self.summary.opaque_dirs += 1;
        }
        self.implicit.remove(path);
        self.dirs.insert(path.to_vec(), (e.mode, Some(e.mtime)));
        self.record('d', e.mode, e.uid, e.gid, path)
    }

    fn file<R: Read>(
        &mut self,
        tar: &mut TarReader<R>,
        raw: &[u8],
        parent: &[&[u8]],
        last: &[u8],
        path: &[u8],
        e: &Entry,
    ) -> Result<(), UnpackError> {
        let budget = self
            .opts
            .max_file_bytes
            .saturating_sub(self.summary.file_bytes);
        if e.size > budget {
            return Err(UnpackError::TooBig {
                limit: self.opts.max_file_bytes,
            });
        }
        let name = cstring(last);
        let keep = self.opts.keep_owners;
        let fd = self.parent(raw, parent)?;
        let file = match fsx::create_file_at(fd, &name, 0o600) {
            Ok(f) => f,
            Err(x) if x.errno == Errno::EEXIST => {
                replace_whiteout(raw, fd, &name)?;
                fsx::create_file_at(fd, &name, 0o600).map_err(|x| sys_err(raw, x))?
            }
            Err(x) => return Err(sys_err(raw, x)),
        };
        let mut out = std::fs::File::from(file);
        loop {
            let n = match tar.read_data(&mut self.buf) {
                Ok(n) => n,
                Err(x) => return Err(tar_error(tar.offset(), x)),
            };
            if n == 0 {
                break;
            }
            out.write_all(&self.buf[..n])
                .map_err(|x| refuse(raw, format!("write: {x}")))?;
        }
        self.summary.file_bytes += e.size;
        let f = out.as_fd();
        if keep {
            sys::fchown(f, e.uid, e.gid).map_err(|x| sys_err(raw, x))?;
        }
        sys::fchmod(f, e.mode).map_err(|x| sys_err(raw, x))?;
        fsx::set_mtime(f, e.mtime).map_err(|x| sys_err(raw, x))?;
        if e.mode & 0o6000 != 0 {
            self.summary.setuid_count += 1;
            if self.summary.setuid.len() < LISTED {
                self.summary.setuid.push(escape_path(path));
            }
        }
        self.record('f', e.mode, e.uid, e.gid, path)
    }

    fn symlink(
        &mut self,
        raw: &[u8],
        parent: &[&[u8]],
        last: &[u8],
        path: &[u8],
        e: &Entry,
    ) -> Result<(), UnpackError> {
        if e.link.is_empty() || e.link.len() >= MAX_NAME || e.link.contains(&0) {
            return Err(refuse(
                raw,
                "a symlink with an empty, overlong or NUL-containing target",
            ));
        }
        let name = cstring(last);
        let target = cstring(&e.link);
        let keep = self.opts.keep_owners;
        let fd = self.parent(raw, parent)?;
        match sys::symlinkat(&target, fd, &name) {
            Ok(()) => {}
            Err(x) if x.errno == Errno::EEXIST => {
                replace_whiteout(raw, fd, &name)?;
                sys::symlinkat(&target, fd, &name).map_err(|x| sys_err(raw, x))?;
            }
            Err(x) => return Err(sys_err(raw, x)),
        }
        if keep {
            fsx::lchown_at(fd, &name, e.uid, e.gid).map_err(|x| sys_err(raw, x))?;
        }
        fsx::set_mtime_at(fd, &name, e.mtime).map_err(|x| sys_err(raw, x))?;
        self.summary.file_bytes += e.link.len() as u64;
        self.record('l', 0o777, e.uid, e.gid, path)
    }

    fn hardlink(
        &mut self,
        raw: &[u8],
        parent: &[&[u8]],
        last: &[u8],
        path: &[u8],
        e: &Entry,
    ) -> Result<(), UnpackError> {
        let tcomps =
            normalize(&e.link).map_err(|why| refuse(raw, format!("hard link target: {why}")))?;
        let Some((&tlast, tparent)) = tcomps.split_last() else {
            return Err(refuse(raw, "a hard link to the layer root"));
        };
        if tcomps.iter().any(|c| c.starts_with(b".wh.")) {
            return Err(refuse(raw, "a hard link to a whiteout name"));
        }
        let tparent_fd = if tparent.is_empty() {
            None
        } else {
            match open_dir(self.root, &cstring(&join(tparent))) {
                Ok(fd) => Some(fd),
                Err(x) if x.errno == Errno::ENOENT => {
                    return Err(refuse(raw, "a hard link to a name not (yet) in this layer"));
                }
                Err(x) if matches!(x.errno, Errno::ENOTDIR | Errno::ELOOP) => {
                    let why = explain_parent(self.root, tparent);
                    return Err(refuse(raw, format!("hard link target: {why}")));
                }
                Err(x) => return Err(lookup_error(raw, x)),
            }
        };
        let tname = cstring(tlast);
        let tdir = tparent_fd.as_ref().map_or(self.root, |f| f.as_fd());
        match sys::lstat_at(tdir, &tname) {
            Ok(m) if m.is_dir() => return Err(refuse(raw, "a hard link to a directory")),
            Ok(m) if m.is_whiteout() => return Err(refuse(raw, "a hard link to a whiteout")),
            Ok(_) => {}
            Err(x) if x.errno == Errno::ENOENT => {
                return Err(refuse(raw, "a hard link to a name not (yet) in this layer"));
            }
            Err(x) => return Err(sys_err(raw, x)),
        }
        let name = cstring(last);
        // The target's directory fd must outlive the parent lookup below.
        let tdir_fd = match tparent_fd {
            Some(f) => f,
            None => rustix::io::dup(self.root).map_err(|x| {
                sys_err(
                    raw,
                    SysError::new("dup(layer root)", Errno::from_raw(x.raw_os_error())),
                )
            })?,
        };
        let fd = self.parent(raw, parent)?;
        match fsx::link_at(tdir_fd.as_fd(), &tname, fd, &name) {
            Ok(()) => {}
            Err(x) if x.errno == Errno::EEXIST => {
                replace_whiteout(raw, fd, &name)?;
                fsx::link_at(tdir_fd.as_fd(), &tname, fd, &name).map_err(|x| sys_err(raw, x))?;
            }
            Err(x) => return Err(sys_err(raw, x)),
        }
        self.summary.hardlinks += 1;
        self.record('h', e.mode, e.uid, e.gid, path)
    }

    fn node(
        &mut self,
        raw: &[u8],
        parent: &[&[u8]],
        last: &[u8],
        path: &[u8],
        e: &Entry,
        kind: fsx::NodeKind,
    ) -> Result<(), UnpackError> {
        let name = cstring(last);
        let keep = self.opts.keep_owners;
        let fd = self.parent(raw, parent)?;
        let make = || fsx::mknod_at(fd, &name, kind, 0o600, e.dev_major, e.dev_minor);
        match make() {
            Ok(()) => {}
            Err(x) if x.errno == Errno::EEXIST => {
                replace_whiteout(raw, fd, &name)?;
                make().map_err(|x| sys_err(raw, x))?;
            }
            Err(x) => return Err(sys_err(raw, x)),
        }
        if keep {
            fsx::lchown_at(fd, &name, e.uid, e.gid).map_err(|x| sys_err(raw, x))?;
        }
        fsx::chmod_at(fd, &name, e.mode).map_err(|x| sys_err(raw, x))?;
        fsx::set_mtime_at(fd, &name, e.mtime).map_err(|x| sys_err(raw, x))?;
        let letter = match kind {
            fsx::NodeKind::Fifo => 'p',
            fsx::NodeKind::Char => 'c',
            fsx::NodeKind::Block => 'b',
        };
        self.record(letter, e.mode, e.uid, e.gid, path)
    }

    fn finish(mut self) -> Result<LayerSummary, UnpackError> {
        self.cache = None;
        let mut implicit: Vec<Vec<u8>> = self.implicit.drain().collect();
        implicit.sort();
        for p in &implicit {
            self.record('d', 0o755, 0, 0, p)?;
        }
        self.summary.implicit_dirs = implicit.iter().map(|p| escape_path(p)).collect();
        self.dirs.entry(Vec::new()).or_insert((0o755, None));
        // Deepest first: a parent's final mode may forbid reaching its children.
        let mut dirs: Vec<(Vec<u8>, DirMeta)> = self.dirs.drain().collect();
        dirs.sort_by_key(|(p, _)| {
            std::cmp::Reverse(p.iter().filter(|&&b| b == b'/').count() + usize::from(!p.is_empty()))
        });
        for (path, (mode, mtime)) in dirs {
            let owned;
            let fd = if path.is_empty() {
                self.root
            } else {
                owned = open_dir(self.root, &cstring(&path)).map_err(|x| sys_err(&path, x))?;
                owned.as_fd()
            };
            if let Some(t) = mtime {
                fsx::set_mtime(fd, t).map_err(|x| sys_err(&path, x))?;
            }
            sys::fchmod(fd, mode).map_err(|x| sys_err(&path, x))?;
        }
        self.records.flush().map_err(|e| {
            UnpackError::Sys(SysError::new(
                "write(layer records)",
                Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            ))
        })?;
        Ok(self.summary)
    }
}

/// Open directory `path` below `dir` without following any link.
pub fn open_dir(dir: BorrowedFd<'_>, path: &CStr) -> Result<OwnedFd, SysError> {
    sys::openat2(
        Some(dir),
        path,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
        sys::RESOLVE_STRICT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_or_refused() {
        assert_eq!(normalize(b"./a//b/").unwrap(), vec![&b"a"[..], b"b"]);
        assert!(normalize(b"./").unwrap().is_empty());
        assert!(normalize(b"/").unwrap().is_empty());
        assert!(normalize(b"/etc/passwd").unwrap_err().contains("absolute"));
        assert!(normalize(b"a/../../b").unwrap_err().contains(".."));
        assert!(normalize(b"a\nb").unwrap_err().contains("newline"));
        assert!(normalize(&[b'a'; 300]).unwrap_err().contains("255"));
    }

    fn unpack_bytes(tar: &[u8], max_entries: u64) -> Result<LayerSummary, UnpackError> {
        let mut rnd = [0u8; 8];
        crate::sys::getrandom(&mut rnd).unwrap();
        let dir = std::env::temp_dir().join(format!("hutch-unpack-test-{}", hex::encode(rnd)));
        std::fs::create_dir(&dir).unwrap();
        let root = crate::sys::open_dir_path(&dir).unwrap();
        let opts = UnpackOptions {
            max_entries,
            max_file_bytes: 1 << 20,
            allow_devices: false,
            keep_owners: false,
            opaque_xattr: OpaqueXattr::User,
        };
        let mut records = Vec::new();
        let r = unpack(&mut TarReader::new(tar), root.as_fd(), &mut records, &opts);
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    fn entries(n: usize) -> Vec<u8> {
        use crate::image::tar::write::{Header, header};
        let mut t = Vec::new();
        for i in 0..n {
            t.extend(header(&Header {
                typeflag: b'5',
                path: format!("d{i}").as_bytes(),
                link: b"",
                mode: 0o755,
                uid: 0,
                gid: 0,
                size: 0,
                mtime: 0,
                dev_major: 0,
                dev_minor: 0,
            }));
        }
        t.extend([0u8; 1024]);
        t
    }

    #[test]
    fn the_entry_cap_stops_a_layer() {
        assert_eq!(unpack_bytes(&entries(3), 3).unwrap().entries, 3);
        let e = unpack_bytes(&entries(5), 3).unwrap_err();
        assert!(matches!(e, UnpackError::TooManyEntries { limit: 3 }), "{e}");
    }

    #[test]
    fn escaping_round_trips() {
        for p in [&b"usr/bin/ls"[..], b"a b%c\n\xff", b""] {
            assert_eq!(unescape_path(&escape_path(p)).unwrap(), p);
        }
        assert_eq!(escape_path(b"a b"), "a%20b");
    }
}
