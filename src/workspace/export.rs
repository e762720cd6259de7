//! Export of selected workspace paths into a zip or tar archive, with a
//! manifest of sha256 digests and sizes.
//!
//! Entries are regular files, directories and symlink entries only; links
//! are recorded, never followed; FIFOs, sockets and devices are listed in
//! the manifest as skipped and never opened. Every entry leaves with plain
//! modes (0644/0755 files, 0755 dirs), uid/gid 0, no setuid/setgid/sticky
//! bits, no xattrs or capabilities. Names are relative, without `..`, and
//! no entry lies below a symlink entry. Size caps fail the export whole:
//! the archive is written to a temporary file renamed into place only on
//! success.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::sys;

use super::changes::special_kind;
use super::error::{Result, WorkspaceError};
use super::layers::{Layers, MergedDir, read_regular};
use super::quote::{display_name, git_quote};
use super::relpath::{RelPath, join};

/// Prefix of the entries hutch adds to an archive.
pub const RESERVED_DIR: &str = ".hutch";
/// The manifest entry's name.
pub const MANIFEST_NAME: &str = ".hutch/manifest.json";
/// The patch entry's name (with `--patch`).
pub const PATCH_NAME: &str = ".hutch/changes.patch";

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
    /// Total bytes of file content.
    pub max_total_bytes: u64,
    /// Bytes of one file.
    pub max_file_bytes: u64,
    /// Number of entries.
    pub max_entries: usize,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            max_total_bytes: 1 << 30,
            max_file_bytes: 256 << 20,
            max_entries: 100_000,
        }
    }
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

/// The manifest written into the archive and returned to the caller.
#[derive(Debug, Clone, Serialize)]
pub struct ExportManifest {
    pub archive: PathBuf,
    pub entries: Vec<ExportEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_sha256: Option<String>,
    pub total_bytes: u64,
}

enum Content {
    File { data: Vec<u8>, exec: bool },
    Dir,
    Link(Vec<u8>),
    Special(&'static str),
}

struct Collect<'a> {
    opts: &'a ExportOptions,
    total: u64,
    items: BTreeMap<Vec<u8>, Content>,
}

impl Collect<'_> {
    fn add(&mut self, path: Vec<u8>, c: Content) -> Result<()> {
        if let Content::File { data, .. } = &c {
            self.total += data.len() as u64;
            if self.total > self.opts.max_total_bytes {
                return Err(WorkspaceError::TooLarge {
                    what: "the export".into(),
                    limit: self.opts.max_total_bytes,
                });
            }
        }
        self.items.insert(path, c);
        if self.items.len() > self.opts.max_entries {
            return Err(WorkspaceError::TooLarge {
                what: "the number of exported entries".into(),
                limit: self.opts.max_entries as u64,
            });
        }
        Ok(())
    }

    fn entry(
        &mut self,
        parent: &MergedDir,
        name: &std::ffi::CStr,
        comps: &mut Vec<CString>,
    ) -> Result<()> {
        let path = join(comps);
        let Some(found) = parent.entry(name)? else {
            return Err(WorkspaceError::BadPath {
                path: display_name(&path),
                reason: "does not exist in the workspace".into(),
            });
        };
        let m = found.meta;
        if m.is_file() {
            let data = read_regular(found.dir.as_fd(), name, self.opts.max_file_bytes, &path)?;
            self.add(
                path,
                Content::File {
                    data,
                    exec: m.mode & 0o100 != 0,
                },
            )
        } else if m.is_symlink() {
            let t = sys::readlink_at(found.dir.as_fd(), name)?;
            self.add(path, Content::Link(t))
        } else if m.is_dir() {
            self.add(path, Content::Dir)?;
            let Some(sub) = parent.child_dir(name, comps)? else {
                return Ok(());
            };
            for child in sub.names()? {
                comps.push(child.clone());
                self.entry(&sub, &child, comps)?;
                comps.pop();
            }
            Ok(())
        } else {
            self.add(path, Content::Special(special_kind(&m)))
        }
    }
}

fn utf8_name(path: &[u8], kind: ArchiveKind) -> Result<String> {
    match std::str::from_utf8(path) {
        Ok(s) => Ok(s.to_string()),
        Err(_) if kind == ArchiveKind::Tar => Ok(String::from_utf8_lossy(path).into_owned()),
        Err(_) => Err(WorkspaceError::Unsupported {
            path: display_name(path),
            reason: "zip entries need UTF-8 names; export to .tar instead".into(),
        }),
    }
}

/// Export `paths` of the workspace to `out`.
pub fn export(
    layers: &Layers,
    paths: &[RelPath],
    patch: Option<&[u8]>,
    out: &Path,
    opts: &ExportOptions,
) -> Result<ExportManifest> {
    let kind = ArchiveKind::from_path(out)?;
    let mut c = Collect {
        opts,
        total: 0,
        items: BTreeMap::new(),
    };
    for p in paths {
        let comps = p.components();
        let shown = p.to_bytes();
        if comps
            .first()
            .is_some_and(|f| f.as_bytes() == RESERVED_DIR.as_bytes())
        {
            return Err(WorkspaceError::BadPath {
                path: display_name(&shown),
                reason: format!("{RESERVED_DIR}/ is reserved for hutch's own entries"),
            });
        }
        let Some((last, parents)) = comps.split_last() else {
            return Err(WorkspaceError::BadPath {
                path: "/workspace".into(),
                reason: "export names files or directories inside the workspace".into(),
            });
        };
        let mut dir = layers.root()?;
        let mut walked = Vec::new();
        for comp in parents {
            walked.push(comp.clone());
            match dir.child_dir(comp, &walked)? {
                Some(d) => {
                    // Parents become directory entries so extraction is plain.
                    c.add(join(&walked), Content::Dir)?;
                    dir = d;
                }
                None => {
                    return Err(WorkspaceError::BadPath {
                        path: display_name(&shown),
                        reason: "does not exist in the workspace".into(),
                    });
                }
            }
        }
        let mut comps = comps.to_vec();
        c.entry(&dir, last, &mut comps)?;
    }

    let mut entries = Vec::new();
    let mut link_prefixes: Vec<Vec<u8>> = Vec::new();
    for (path, content) in &c.items {
        if link_prefixes
            .iter()
            .any(|l| path.starts_with(l) && path.get(l.len()) == Some(&b'/'))
        {
            return Err(WorkspaceError::Unsupported {
                path: display_name(path),
                reason: "lies below a symlink entry".into(),
            });
        }
        let mut e = ExportEntry {
            path: String::from_utf8_lossy(path).into_owned(),
            path_quoted: git_quote(path),
            kind: "file",
            mode: None,
            size: None,
            sha256: None,
            target: None,
            skipped: false,
        };
        match content {
            Content::File { data, exec } => {
                e.mode = Some(if *exec { "0755" } else { "0644" }.into());
                e.size = Some(data.len() as u64);
                e.sha256 = Some(hex::encode(Sha256::digest(data)));
            }
            Content::Dir => {
                e.kind = "dir";
                e.mode = Some("0755".into());
            }
            Content::Link(t) => {
                e.kind = "symlink";
                e.target = Some(String::from_utf8_lossy(t).into_owned());
                e.size = Some(t.len() as u64);
                e.sha256 = Some(hex::encode(Sha256::digest(t)));
                link_prefixes.push(path.clone());
            }
            Content::Special(k) => {
                e.kind = k;
                e.skipped = true;
            }
        }
        entries.push(e);
    }
    let manifest = ExportManifest {
        archive: out.to_path_buf(),
        entries,
        patch_sha256: patch.map(|p| hex::encode(Sha256::digest(p))),
        total_bytes: c.total,
    };
    let manifest_json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| WorkspaceError::io("encode the export manifest", e.into()))?;

    let tmp = temp_name(out);
    let result = write_archive(kind, &tmp, &c.items, patch, &manifest_json);
    match result.and_then(|()| {
        std::fs::rename(&tmp, out)
            .map_err(|e| WorkspaceError::io(format!("rename to {}", out.display()), e))
    }) {
        Ok(()) => Ok(manifest),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn temp_name(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(format!(".tmp-{}", std::process::id()));
    PathBuf::from(name)
}

fn write_archive(
    kind: ArchiveKind,
    tmp: &Path,
    items: &BTreeMap<Vec<u8>, Content>,
    patch: Option<&[u8]>,
    manifest: &[u8],
) -> Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags_nofollow()
        .open(tmp)
        .map_err(|e| WorkspaceError::io(format!("create {}", tmp.display()), e))?;
    let werr = |e: std::io::Error| WorkspaceError::io(format!("write {}", tmp.display()), e);
    match kind {
        ArchiveKind::Tar => {
            let mut b = tar::Builder::new(file);
            b.mode(tar::HeaderMode::Deterministic);
            b.follow_symlinks(false);
            let add_file =
                |b: &mut tar::Builder<std::fs::File>, name: &[u8], data: &[u8], mode: u32| {
                    let mut h = tar::Header::new_gnu();
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(mode);
                    h.set_uid(0);
                    h.set_gid(0);
                    h.set_mtime(0);
                    h.set_size(data.len() as u64);
                    b.append_data(&mut h, Path::new(std::ffi::OsStr::from_bytes(name)), data)
                };
            for (path, content) in items {
                let name = Path::new(std::ffi::OsStr::from_bytes(path));
                match content {
                    Content::File { data, exec } => {
                        add_file(&mut b, path, data, if *exec { 0o755 } else { 0o644 })
                            .map_err(werr)?
                    }
                    Content::Dir => {
                        let mut h = tar::Header::new_gnu();
                        h.set_entry_type(tar::EntryType::Directory);
                        h.set_mode(0o755);
                        h.set_mtime(0);
                        h.set_size(0);
                        b.append_data(&mut h, name, std::io::empty())
                            .map_err(werr)?;
                    }
                    Content::Link(t) => {
                        let mut h = tar::Header::new_gnu();
                        h.set_entry_type(tar::EntryType::Symlink);
                        h.set_mode(0o777);
                        h.set_mtime(0);
                        h.set_size(0);
                        b.append_link(&mut h, name, Path::new(std::ffi::OsStr::from_bytes(t)))
                            .map_err(werr)?;
                    }
                    Content::Special(_) => {}
                }
            }
            if let Some(p) = patch {
                add_file(&mut b, PATCH_NAME.as_bytes(), p, 0o644).map_err(werr)?;
            }
            add_file(&mut b, MANIFEST_NAME.as_bytes(), manifest, 0o644).map_err(werr)?;
            let mut f = b.into_inner().map_err(werr)?;
            f.flush().map_err(werr)?;
        }
        ArchiveKind::Zip => {
            use zip::write::SimpleFileOptions;
            let zerr = |e: zip::result::ZipError| {
                WorkspaceError::io(format!("write {}", tmp.display()), std::io::Error::other(e))
            };
            let mut z = zip::ZipWriter::new(file);
            let opts = |mode: u32| {
                SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Deflated)
                    .unix_permissions(mode)
            };
            for (path, content) in items {
                let name = utf8_name(path, ArchiveKind::Zip)?;
                match content {
                    Content::File { data, exec } => {
                        z.start_file(name, opts(if *exec { 0o755 } else { 0o644 }))
                            .map_err(zerr)?;
                        z.write_all(data).map_err(werr)?;
                    }
                    Content::Dir => z.add_directory(name, opts(0o755)).map_err(zerr)?,
                    Content::Link(t) => {
                        let target = utf8_name(t, ArchiveKind::Zip)?;
                        z.add_symlink(name, target, opts(0o777)).map_err(zerr)?
                    }
                    Content::Special(_) => {}
                }
            }
            if let Some(p) = patch {
                z.start_file(PATCH_NAME, opts(0o644)).map_err(zerr)?;
                z.write_all(p).map_err(werr)?;
            }
            z.start_file(MANIFEST_NAME, opts(0o644)).map_err(zerr)?;
            z.write_all(manifest).map_err(werr)?;
            z.finish().map_err(zerr)?;
        }
    }
    Ok(())
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
