//! Export of selected workspace paths into a zip or tar archive, with a
//! manifest of sha256 digests and sizes.
//!
//! Entries are regular files, directories and symlink entries only; links
//! are recorded, never followed; FIFOs, sockets and devices are listed in
//! the manifest as skipped and never opened. Every entry leaves with plain
//! modes (0644/0755 files, 0755 dirs), uid/gid 0, no setuid/setgid/sticky
//! bits, no xattrs or capabilities. Names are relative, without `..`
//! components or backslashes (a Windows extractor takes `\` for a
//! separator), and no entry lies below a symlink entry (links are never
//! walked into).
//!
//! Bounded whatever the tree: the merged view (every layer of the stack,
//! see `stack.rs`) is walked iteratively over one [`sys::DirChain`] per
//! layer, file contents stream from their fd into the
//! archive (hashed on the way), manifest entries are spooled, and the caps
//! are checked before each entry is written, counting what it will emit
//! (a hardlinked or sparse file by its full size), so an export stops as
//! soon as a cap is certain to be exceeded. Exceeding one fails the export
//! whole: the archive is written to a temporary file renamed into place
//! only on success.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::sys::{self, Meta};
use crate::util::quote::{display_name, git_quote};

use super::changes::special_kind;
use super::error::{Result, WorkspaceError};
use super::json;
use super::layers::{Layers, lstat_opt};
use super::relpath::{RelPath, child_path, join};
use super::spool::Spool;
use super::stack::{Chains, Resolved, members};

/// Prefix of the entries hutch adds to an archive.
pub const RESERVED_DIR: &str = ".hutch";
/// The manifest entry's name.
pub const MANIFEST_NAME: &str = ".hutch/manifest.json";
/// The patch entry's name (with `--patch`).
pub const PATCH_NAME: &str = ".hutch/changes.patch";
/// Longest entry name exported (PATH_MAX: deeper paths could not be
/// extracted by most tools anyway).
pub const MAX_ENTRY_NAME: usize = 4096;

/// Archive format, chosen from the output file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveKind {
    Zip,
    Tar,
}

impl ArchiveKind {
    /// `.zip` or `.tar`.
    pub fn from_path(p: &Path) -> Result<ArchiveKind> {
        match p.extension().and_then(|e| e.to_str()) {
            Some("zip") => Ok(ArchiveKind::Zip),
            Some("tar") => Ok(ArchiveKind::Tar),
            _ => Err(WorkspaceError::BadPath {
                path: p.display().to_string(),
                reason: "the archive must end in .zip or .tar".into(),
            }),
        }
    }
}

/// Caps of an export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Total bytes of file content and entry names.
    pub max_total_bytes: u64,
    /// Bytes of one file.
    pub max_file_bytes: u64,
    /// Number of entries.
    pub max_entries: usize,
    /// What the manifest says the archive comes from (sessions set it).
    pub origin: Option<ExportOrigin>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            max_total_bytes: 1 << 30,
            max_file_bytes: 256 << 20,
            max_entries: 100_000,
            origin: None,
        }
    }
}

/// Where an export comes from, as its manifest names it: the session, the
/// commit and the fingerprints, never a host path.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExportOrigin {
    pub session: String,
    /// The commit of a git baseline.
    pub commit: Option<String>,
    /// The baseline's fingerprint.
    pub fingerprint: String,
    /// The sealed layers: index and fingerprint.
    pub seals: Vec<(usize, String)>,
    /// Where the patch starts (`baseline` or the seal index), with --patch.
    pub patch_since: Option<String>,
}

/// One manifest entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExportEntry {
    pub path: String,
    pub path_quoted: String,
    /// `file`, `dir`, `symlink`, or for skipped entries `fifo`, `socket`,
    /// `char-device`, `block-device`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// True when the entry is not in the archive.
    pub skipped: bool,
}

/// What an export wrote. The manifest itself (the same JSON as the
/// archive's `.hutch/manifest.json`) goes to the caller's writer, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    pub archive: PathBuf,
    /// Manifest entries (skipped ones included).
    pub entries: u64,
    pub skipped: u64,
    /// Bytes of file content and link targets.
    pub total_bytes: u64,
    pub patch_sha256: Option<String>,
}

/// The archive being written.
enum Archive {
    Tar(tar::Builder<File>),
    Zip(Box<zip::ZipWriter<File>>),
}

fn zip_opts(mode: u32, size: u64) -> zip::write::SimpleFileOptions {
    zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(mode)
        .large_file(size >= u32::MAX as u64)
}

fn tar_header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h
}

fn utf8_name(path: &[u8]) -> Result<String> {
    std::str::from_utf8(path)
        .map(str::to_string)
        .map_err(|_| WorkspaceError::Unsupported {
            path: display_name(path),
            reason: "zip entries need UTF-8 names; export to .tar instead".into(),
        })
}

impl Archive {
    fn io(e: std::io::Error) -> WorkspaceError {
        WorkspaceError::io("write the archive", e)
    }
    fn zerr(e: zip::result::ZipError) -> WorkspaceError {
        WorkspaceError::io("write the archive", std::io::Error::other(e))
    }

    fn dir(&mut self, name: &[u8]) -> Result<()> {
        match self {
            Archive::Tar(b) => {
                let mut h = tar_header(tar::EntryType::Directory, 0o755, 0);
                b.append_data(
                    &mut h,
                    Path::new(std::ffi::OsStr::from_bytes(name)),
                    std::io::empty(),
                )
                .map_err(Self::io)
            }
            Archive::Zip(z) => z
                .add_directory(utf8_name(name)?, zip_opts(0o755, 0))
                .map_err(Self::zerr),
        }
    }

    fn link(&mut self, name: &[u8], target: &[u8]) -> Result<()> {
        match self {
            Archive::Tar(b) => {
                let mut h = tar_header(tar::EntryType::Symlink, 0o777, 0);
                b.append_link(
                    &mut h,
                    Path::new(std::ffi::OsStr::from_bytes(name)),
                    Path::new(std::ffi::OsStr::from_bytes(target)),
                )
                .map_err(Self::io)
            }
            Archive::Zip(z) => z
                .add_symlink(utf8_name(name)?, utf8_name(target)?, zip_opts(0o777, 0))
                .map_err(Self::zerr),
        }
    }

    fn file(&mut self, name: &[u8], mode: u32, size: u64, data: &mut dyn Read) -> Result<()> {
        match self {
            Archive::Tar(b) => {
                let mut h = tar_header(tar::EntryType::Regular, mode, size);
                b.append_data(&mut h, Path::new(std::ffi::OsStr::from_bytes(name)), data)
                    .map_err(Self::io)
            }
            Archive::Zip(z) => {
                z.start_file(utf8_name(name)?, zip_opts(mode, size))
                    .map_err(Self::zerr)?;
                std::io::copy(data, z.as_mut()).map_err(Self::io)?;
                Ok(())
            }
        }
    }

    fn finish(self) -> Result<()> {
        match self {
            Archive::Tar(b) => {
                let mut f = b.into_inner().map_err(Self::io)?;
                f.flush().map_err(Self::io)
            }
            Archive::Zip(z) => z.finish().map(drop).map_err(Self::zerr),
        }
    }
}

/// Reads exactly `size` bytes of a file, hashing them; a file that is
/// shorter or longer than when it was looked at is an error.
struct ExactReader<'a> {
    file: &'a File,
    size: u64,
    off: u64,
    hash: Sha256,
    changed: bool,
}

impl Read for ExactReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.off == self.size {
            let mut probe = [0u8; 1];
            if self.file.read_at(&mut probe, self.off)? != 0 {
                self.changed = true;
                return Err(std::io::Error::other("the file changed while being read"));
            }
            return Ok(0);
        }
        let want = ((self.size - self.off) as usize).min(buf.len());
        let n = self.file.read_at(&mut buf[..want], self.off)?;
        if n == 0 {
            self.changed = true;
            return Err(std::io::Error::other("the file changed while being read"));
        }
        self.hash.update(&buf[..n]);
        self.off += n as u64;
        Ok(n)
    }
}

/// A directory of the merged view being walked.
struct Frame {
    /// Length of the walk's path buffer at this directory's parent.
    parent_len: usize,
    /// The layers holding it (each entered on its chain).
    set: u64,
    /// Entries left (name, metadata, layer), reverse-sorted.
    items: Vec<(CString, Meta, usize)>,
}

/// The visible entries of the merged directory `set` (the first layer
/// holding a name wins; whiteouts hide), reverse-sorted with directories
/// keyed as `name/`.
fn merged_items(chains: &Chains, set: u64) -> Result<Vec<(CString, Meta, usize)>> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for i in members(set) {
        let dir = chains.dir(i);
        for n in sys::list_dir(dir)? {
            if seen.contains(&n) {
                continue;
            }
            if let Some(m) = lstat_opt(dir, &n)? {
                if !m.is_whiteout() {
                    out.push((n.clone(), m, i));
                }
                seen.insert(n);
            }
        }
    }
    let key = |(n, m, _): &(CString, Meta, usize)| {
        let mut k = n.as_bytes().to_vec();
        if m.is_dir() {
            k.push(b'/');
        }
        std::cmp::Reverse(k)
    };
    out.sort_unstable_by_key(key);
    Ok(out)
}

/// The export in progress.
struct Exporter<'a> {
    opts: &'a ExportOptions,
    kind: ArchiveKind,
    archive: Archive,
    /// One chain per layer, top first.
    chains: Chains,
    manifest: Spool,
    entries: u64,
    skipped: u64,
    content: u64,
    names: u64,
    /// Directory entries already written (parents of requested paths).
    dirs: BTreeSet<Vec<u8>>,
}

impl Exporter<'_> {
    /// Count an entry and check every cap before anything of it is
    /// written.
    fn admit(&mut self, path: &[u8], content: u64) -> Result<()> {
        if path.len() > MAX_ENTRY_NAME {
            return Err(WorkspaceError::Unsupported {
                path: format!("{}...", display_name(&path[..64])),
                reason: format!("is longer than {MAX_ENTRY_NAME} bytes, too long to export"),
            });
        }
        if path.contains(&b'\\')
            || path
                .split(|&b| b == b'/')
                .any(|c| c == b".." || c.is_empty())
        {
            return Err(WorkspaceError::Unsupported {
                path: display_name(path),
                reason: "has a backslash or `..` in its name, which archive extractors may take for a path; rename it to export it".into(),
            });
        }
        if self.kind == ArchiveKind::Zip {
            utf8_name(path)?;
        }
        self.entries += 1;
        if self.entries > self.opts.max_entries as u64 {
            return Err(WorkspaceError::TooLarge {
                what: "the number of exported entries".into(),
                limit: self.opts.max_entries as u64,
            });
        }
        // The name appears in the archive and in the manifest.
        self.names = self.names.saturating_add(2 * path.len() as u64);
        self.content = self.content.saturating_add(content);
        if self.content.saturating_add(self.names) > self.opts.max_total_bytes {
            return Err(WorkspaceError::TooLarge {
                what: "the export".into(),
                limit: self.opts.max_total_bytes,
            });
        }
        Ok(())
    }

    fn record(&mut self, e: &ExportEntry) -> Result<()> {
        let text = json::to_vec_pretty(e)?;
        let mut piece = Vec::with_capacity(text.len() + 16);
        piece.extend_from_slice(if self.entries == 1 {
            b"\n    "
        } else {
            b",\n    "
        });
        for &b in &text {
            piece.push(b);
            if b == b'\n' {
                piece.extend_from_slice(b"    ");
            }
        }
        self.manifest
            .write_all(&piece)
            .map_err(|e| WorkspaceError::io("write the export manifest", e))
    }

    fn entry_base(path: &[u8], kind: &'static str) -> ExportEntry {
        ExportEntry {
            path: String::from_utf8_lossy(path).into_owned(),
            path_quoted: git_quote(path),
            kind,
            mode: None,
            size: None,
            sha256: None,
            target: None,
            skipped: false,
        }
    }

    fn add_dir(&mut self, path: &[u8]) -> Result<()> {
        self.admit(path, 0)?;
        self.archive.dir(path)?;
        let mut e = Self::entry_base(path, "dir");
        e.mode = Some("0755".into());
        self.record(&e)
    }

    /// Export the non-directory `name` (in layer `layer`'s chain's
    /// current directory) at `path`.
    fn add_leaf(&mut self, path: &[u8], name: &CStr, meta: &Meta, layer: usize) -> Result<()> {
        let dir = self.chains.dir(layer);
        if meta.is_file() {
            if meta.size > self.opts.max_file_bytes {
                return Err(WorkspaceError::TooLarge {
                    what: format!("{} ({} bytes)", display_name(path), meta.size),
                    limit: self.opts.max_file_bytes,
                });
            }
            let fd = sys::open_beneath(dir, name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
            let now = sys::fstat(fd.as_fd())?;
            if !now.is_file() || (now.dev, now.ino) != (meta.dev, meta.ino) {
                return Err(WorkspaceError::Unsupported {
                    path: display_name(path),
                    reason: "changed while being exported".into(),
                });
            }
            self.admit(path, meta.size)?;
            let file = File::from(fd);
            let mode = if meta.mode & 0o100 != 0 { 0o755 } else { 0o644 };
            let mut r = ExactReader {
                file: &file,
                size: meta.size,
                off: 0,
                hash: Sha256::new(),
                changed: false,
            };
            let written = self.archive.file(path, mode, meta.size, &mut r);
            if r.changed {
                return Err(WorkspaceError::Unsupported {
                    path: display_name(path),
                    reason: "changed while being exported".into(),
                });
            }
            written?;
            let mut e = Self::entry_base(path, "file");
            e.mode = Some(format!("{mode:04o}"));
            e.size = Some(meta.size);
            e.sha256 = Some(hex::encode(r.hash.finalize()));
            self.record(&e)
        } else if meta.is_symlink() {
            let target = sys::readlink_at(dir, name)?;
            self.admit(path, target.len() as u64)?;
            self.archive.link(path, &target)?;
            let mut e = Self::entry_base(path, "symlink");
            e.target = Some(String::from_utf8_lossy(&target).into_owned());
            e.size = Some(target.len() as u64);
            e.sha256 = Some(hex::encode(Sha256::digest(&target)));
            self.record(&e)
        } else {
            self.admit(path, 0)?;
            self.skipped += 1;
            let mut e = Self::entry_base(path, special_kind(meta));
            e.skipped = true;
            self.record(&e)
        }
    }

    /// Export the tree below the merged directory `set` the chains are at.
    fn tree(&mut self, prefix: Vec<u8>, set: u64) -> Result<()> {
        // One path buffer for the walk: memory linear in the depth.
        let mut dir_path = prefix;
        let items = merged_items(&self.chains, set)?;
        let mut stack = vec![Frame {
            parent_len: 0,
            set,
            items,
        }];
        while let Some(frame) = stack.last_mut() {
            let Some((name, meta, layer)) = frame.items.pop() else {
                let done = stack.pop().expect("a frame");
                if stack.is_empty() {
                    break;
                }
                dir_path.truncate(done.parent_len);
                self.chains.leave(done.set)?;
                continue;
            };
            let path = child_path(&dir_path, name.as_bytes());
            if !meta.is_dir() {
                self.add_leaf(&path, &name, &meta, layer)?;
                continue;
            }
            self.add_dir(&path)?;
            let parent = frame.set;
            let (child, _) = self.chains.enter(parent, &name)?;
            let items = merged_items(&self.chains, child)?;
            let parent_len = dir_path.len();
            dir_path = path;
            stack.push(Frame {
                parent_len,
                set: child,
                items,
            });
        }
        Ok(())
    }

    /// Export the requested path `rel`: its parents as directory entries,
    /// then it (recursively when a directory).
    fn root(&mut self, rel: &RelPath) -> Result<()> {
        let comps = rel.components();
        let shown = rel.to_bytes();
        let missing = || WorkspaceError::BadPath {
            path: display_name(&shown),
            reason: "does not exist in the workspace".into(),
        };
        let not_dir = |i: usize| WorkspaceError::BadPath {
            path: display_name(&join(&comps[..=i])),
            reason: "is not a directory (links are not followed)".into(),
        };
        let (mut set, _) = self.chains.root_set(0, self.chains.chains.len())?;
        // The sets entered, to leave them again.
        let mut entered: Vec<u64> = Vec::new();
        let result = (|| -> Result<()> {
            let Some((last, parents)) = comps.split_last() else {
                return Err(missing());
            };
            for (i, c) in parents.iter().enumerate() {
                match self.chains.resolve(set, c)? {
                    Resolved::Missing | Resolved::Deleted => return Err(missing()),
                    Resolved::Leaf(..) => return Err(not_dir(i)),
                    Resolved::Dir => {}
                }
                let (child, _) = self.chains.enter(set, c)?;
                entered.push(child);
                set = child;
                let parent = join(&comps[..=i]);
                if !self.dirs.contains(&parent) {
                    self.add_dir(&parent)?;
                    self.dirs.insert(parent);
                }
            }
            match self.chains.resolve(set, last)? {
                Resolved::Missing | Resolved::Deleted => Err(missing()),
                Resolved::Leaf(layer, meta) => self.add_leaf(&shown, last, &meta, layer),
                Resolved::Dir => {
                    self.add_dir(&shown)?;
                    self.dirs.insert(shown.clone());
                    let (child, _) = self.chains.enter(set, last)?;
                    entered.push(child);
                    self.tree(shown.clone(), child)
                }
            }
        })();
        for s in entered.into_iter().rev() {
            self.chains.leave(s)?;
        }
        result
    }
}

/// The requested paths in order, without duplicates and without those
/// inside another requested directory (exported with it).
fn roots(paths: &[RelPath]) -> Vec<&RelPath> {
    let mut sorted: Vec<&RelPath> = paths.iter().collect();
    sorted.sort_by(|a, b| a.components().cmp(b.components()));
    let mut out: Vec<&RelPath> = Vec::new();
    for p in sorted {
        if out
            .iter()
            .any(|q| p.components().starts_with(q.components()))
        {
            continue;
        }
        out.push(p);
    }
    out
}

/// Export `paths` of the workspace `layers` to the archive `out`, with
/// `patch` (a spooled unified diff) as `.hutch/changes.patch`. Temporary
/// data goes to `spool_dir`. The manifest JSON is also written to
/// `manifest_out` once the archive is in place.
pub fn export(
    layers: &Layers,
    paths: &[RelPath],
    mut patch: Option<&mut Spool>,
    out: &Path,
    opts: &ExportOptions,
    spool_dir: BorrowedFd<'_>,
    manifest_out: Option<&mut dyn Write>,
) -> Result<ExportSummary> {
    let kind = ArchiveKind::from_path(out)?;
    for p in paths {
        if p.components()
            .first()
            .is_some_and(|f| f.as_bytes() == RESERVED_DIR.as_bytes())
        {
            return Err(WorkspaceError::BadPath {
                path: display_name(&p.to_bytes()),
                reason: format!("{RESERVED_DIR}/ is reserved for hutch's own entries"),
            });
        }
        if p.is_root() {
            return Err(WorkspaceError::BadPath {
                path: "/workspace".into(),
                reason: "export names files or directories inside the workspace".into(),
            });
        }
    }
    let patch_sha256 = match patch.as_deref_mut() {
        Some(p) => {
            let mut h = Sha256::new();
            p.copy_to(&mut HashWriter(&mut h))
                .map_err(|e| WorkspaceError::io("read the patch", e))?;
            Some(hex::encode(h.finalize()))
        }
        None => None,
    };
    let tmp = temp_name(out);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags_nofollow()
        .open(&tmp)
        .map_err(|e| WorkspaceError::io(format!("create {}", tmp.display()), e))?;
    let archive = match kind {
        ArchiveKind::Tar => {
            let mut b = tar::Builder::new(file);
            b.mode(tar::HeaderMode::Deterministic);
            b.follow_symlinks(false);
            Archive::Tar(b)
        }
        ArchiveKind::Zip => Archive::Zip(Box::new(zip::ZipWriter::new(file))),
    };
    let result = (|| {
        let mut ex = Exporter {
            opts,
            kind,
            archive,
            chains: Chains::new(&layers.stack())?,
            manifest: Spool::new(spool_dir)?,
            entries: 0,
            skipped: 0,
            content: 0,
            names: 0,
            dirs: BTreeSet::new(),
        };
        for rel in roots(paths) {
            ex.root(rel)?;
        }
        if let Some(p) = patch {
            let size = p.len();
            let mut data = p
                .reader()
                .map_err(|e| WorkspaceError::io("read the patch", e))?;
            ex.archive
                .file(PATCH_NAME.as_bytes(), 0o644, size, &mut data)?;
        }
        let summary = ExportSummary {
            archive: out.to_path_buf(),
            entries: ex.entries,
            skipped: ex.skipped,
            total_bytes: ex.content,
            patch_sha256: patch_sha256.clone(),
        };
        let (head, tail) = manifest_frame(&summary, opts.origin.as_ref(), ex.entries > 0)?;
        let size = head.len() as u64 + ex.manifest.len() + tail.len() as u64;
        {
            let body = ex
                .manifest
                .reader()
                .map_err(|e| WorkspaceError::io("read the export manifest", e))?;
            let mut data = (&head[..]).chain(body).chain(&tail[..]);
            ex.archive
                .file(MANIFEST_NAME.as_bytes(), 0o644, size, &mut data)?;
        }
        ex.archive.finish()?;
        Ok((summary, ex.manifest, head, tail))
    })();
    let renamed = result.and_then(|r| {
        std::fs::rename(&tmp, out)
            .map_err(|e| WorkspaceError::io(format!("rename to {}", out.display()), e))?;
        Ok(r)
    });
    let (summary, mut manifest, head, tail) = match renamed {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Some(w) = manifest_out {
        let werr = |e| WorkspaceError::io("write the export manifest", e);
        w.write_all(&head).map_err(werr)?;
        manifest.copy_to(w).map_err(werr)?;
        w.write_all(&tail).map_err(werr)?;
        w.flush().map_err(werr)?;
    }
    Ok(summary)
}

/// The manifest's JSON before and after its entries (which are spooled):
/// `{"archive": ..., "entries": [ ... ], "patch_sha256": ..., "total_bytes": N}`.
fn manifest_frame(
    s: &ExportSummary,
    origin: Option<&ExportOrigin>,
    has_entries: bool,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut head = b"{".to_vec();
    if let Some(o) = origin {
        head.extend_from_slice(b"\n  \"session\": ");
        head.extend_from_slice(&json::to_vec(&o.session)?);
        head.extend_from_slice(b",\n  \"commit\": ");
        head.extend_from_slice(&json::to_vec(&o.commit)?);
        head.extend_from_slice(b",\n  \"fingerprint\": ");
        head.extend_from_slice(&json::to_vec(&o.fingerprint)?);
        head.extend_from_slice(b",\n  \"seals\": ");
        let seals: Vec<_> = o
            .seals
            .iter()
            .map(|(i, f)| serde_json::json!({"index": i, "fingerprint": f}))
            .collect();
        head.extend_from_slice(&json::to_vec(&seals)?);
        if let Some(since) = &o.patch_since {
            head.extend_from_slice(b",\n  \"patch_since\": ");
            head.extend_from_slice(&json::to_vec(since)?);
        }
        head.push(b',');
    }
    head.extend_from_slice(b"\n  \"entries\": [");
    let mut tail = if has_entries {
        b"\n  ],".to_vec()
    } else {
        b"],".to_vec()
    };
    if let Some(p) = &s.patch_sha256 {
        tail.extend_from_slice(format!("\n  \"patch_sha256\": \"{p}\",").as_bytes());
    }
    tail.extend_from_slice(format!("\n  \"total_bytes\": {}\n}}\n", s.total_bytes).as_bytes());
    Ok((head, tail))
}

/// A writer into a hasher.
struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn temp_name(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(format!(".tmp-{}", std::process::id()));
    PathBuf::from(name)
}

trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NOFOLLOW).mode(0o644)
    }
}
