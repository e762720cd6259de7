//! Importing one layer: stream the blob through its digest check, the
//! decompressor, the diff-id check and the unpacker into a staging
//! directory; rename it into `layers/` only when every digest matched.

use std::ffi::CString;
use std::io::{BufRead, BufReader, BufWriter, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::decompress::{
    Counting, Expansion, ExpansionCap, ImageTally, decoder, over_expansion, sniff,
};
use super::digest::{Digest, HashingReader, over_limit};
use super::error::{ImageError, Result};
use super::oci::{self, Compression};
use super::store::Store;
use super::tar::TarReader;
use super::unpack::{self, LayerSummary, OpaqueXattr, UnpackError, UnpackOptions};
use crate::sys::{self, Errno};

/// `layers/HEX/meta.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerMeta {
    pub version: u32,
    /// The blob digest (the directory's name).
    pub digest: Digest,
    /// sha256 of the uncompressed tar.
    pub diff_id: Digest,
    pub media_type: String,
    pub compression: Compression,
    /// Size of the blob.
    pub size: u64,
    /// Size of the uncompressed tar stream (what the size limit counts).
    pub unpacked_size: u64,
    /// Which xattr marks opaque directories here.
    pub opaque_xattr: OpaqueXattr,
    /// Whether files carry the archive's owners (root import) or the
    /// importer's (unprivileged: the owners are only in `entries`).
    pub owners_kept: bool,
    /// The uid that unpacked the layer (owner of every file when
    /// `owners_kept` is false).
    pub unpacked_by: u32,
    pub summary: LayerSummary,
}

/// A layer to import.
pub struct LayerInput {
    /// (digest, size) from a descriptor; None when the format gives none
    /// (docker-archive compressed layers, `--rootfs`): computed then.
    pub expected: Option<(Digest, u64)>,
    /// From the descriptor; None: sniffed from the first bytes.
    pub compression: Option<Compression>,
    /// The uncompressed digest the config promises (None: computed).
    pub diff_id: Option<Digest>,
    pub reader: Box<dyn Read + Send>,
    pub media_type: Option<String>,
}

/// Limits for one layer.
pub struct LayerLimits<'a> {
    /// Bytes of uncompressed tar this layer may still use.
    pub unpacked: u64,
    /// The configured whole-image limit (for messages).
    pub image_limit: u64,
    pub entries: u64,
    pub allow_devices: bool,
    /// Uncompressed bytes per compressed byte (a compressed layer's).
    pub expansion: ExpansionCap,
    /// What the image's other layers used (those below this one, and
    /// those unpacking beside it), for the image's expansion and size caps.
    pub image: &'a ImageTally,
}

impl Store {
    /// The meta of an already stored layer, or None.
    pub fn layer_meta(&self, d: &Digest) -> Result<Option<LayerMeta>> {
        let p = self.layer_dir(d).join("meta.json");
        match std::fs::read(&p) {
            Ok(t) => serde_json::from_slice(&t)
                .map(Some)
                .map_err(|e| ImageError::Store {
                    path: p.display().to_string(),
                    why: format!("unreadable layer metadata: {e}"),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ImageError::Store {
                path: p.display().to_string(),
                why: e.to_string(),
            }),
        }
    }

    /// The unpacked tree of a stored layer.
    pub fn layer_root(&self, d: &Digest) -> PathBuf {
        self.layer_dir(d).join("root")
    }

    /// Import a layer (or find it stored). `lowers` are the layers below
    /// it in this image, bottom first, for the lower-path check (None:
    /// the caller runs [`check_lowers`] once the layers below are stored;
    /// the layer is then stored before that check). Returns its meta and
    /// whether it was new.
    pub(crate) fn import_layer(
        &self,
        input: LayerInput,
        lowers: Option<&[LayerMeta]>,
        limits: &LayerLimits,
    ) -> Result<(LayerMeta, bool)> {
        let check = |meta: &LayerMeta| match lowers {
            Some(lowers) => check_lowers(self, meta, lowers),
            None => Ok(()),
        };
        if let Some((d, size)) = &input.expected {
            let _lock = self.lock_layer(d)?;
            if let Some(meta) = self.layer_meta(d)? {
                check_known(&meta, *size, input.diff_id.as_ref())?;
                check(&meta)?;
                // Not streamed: counted whole for the image's caps.
                limits.image.add(meta.unpacked_size, meta.size);
                return Ok((meta, false));
            }
            let (meta, staging) = self.unpack_layer(input, limits)?;
            check(&meta)?;
            let placed = self.place(&meta, staging)?;
            return Ok((meta, placed));
        }
        let (meta, staging) = self.unpack_layer(input, limits)?;
        let _lock = self.lock_layer(&meta.digest)?;
        if let Some(known) = self.layer_meta(&meta.digest)? {
            check(&known)?;
            return Ok((known, false));
        }
        check(&meta)?;
        let placed = self.place(&meta, staging)?;
        Ok((meta, placed))
    }

    fn place(&self, meta: &LayerMeta, mut staging: super::store::Staging) -> Result<bool> {
        let tmp = sys::open_dir_path(&self.tmp())?;
        let layers = sys::open_dir_path(&self.root().join("layers"))?;
        let name = staging
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let placed = sys::image::rename_noreplace(
            tmp.as_fd(),
            &CString::new(name).unwrap_or_default(),
            layers.as_fd(),
            &CString::new(meta.digest.hex()).unwrap_or_default(),
        )?;
        if placed {
            staging.keep();
        }
        Ok(placed)
    }

    fn unpack_layer(
        &self,
        input: LayerInput,
        limits: &LayerLimits,
    ) -> Result<(LayerMeta, super::store::Staging)> {
        let staging = self.staging("layer")?;
        let shown = match (&input.expected, &input.diff_id) {
            (Some((d, _)), _) => d.to_string(),
            (None, Some(diff)) => format!("(the layer of diff_id {diff})"),
            (None, None) => "(new)".to_string(),
        };
        let root_path = staging.path.join("root");
        std::fs::create_dir(&root_path).map_err(|e| ImageError::Store {
            path: root_path.display().to_string(),
            why: e.to_string(),
        })?;
        let root = sys::open_dir_path(&root_path)?;
        let entries_path = staging.path.join("entries");
        let entries = std::fs::File::create(&entries_path).map_err(|e| ImageError::Store {
            path: entries_path.display().to_string(),
            why: e.to_string(),
        })?;
        let mut records = BufWriter::with_capacity(256 * 1024, entries);
        let euid = sys::geteuid();
        let opts = UnpackOptions {
            max_entries: limits.entries,
            max_file_bytes: limits.unpacked,
            allow_devices: limits.allow_devices,
            keep_owners: euid == 0,
            // hutch mounts every overlay inside the sandbox's user
            // namespace, with `userxattr`: root's layers too.
            opaque_xattr: OpaqueXattr::User,
        };
        let blob_limit = input.expected.as_ref().map_or(u64::MAX, |(_, s)| *s);
        let mut blob = HashingReader::new(input.reader, blob_limit, "descriptor size");
        // Two threads: this one unpacks (tar, diff_id, files), a scoped one
        // hashes the blob and decompresses it (flate2 on zlib-rs: under
        // miniz_oxide this was half of an import's CPU), handing on
        // chunks through a short
        // bounded channel: the stages overlap instead of taking turns.
        let streamed = std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel(PIPELINE_CHUNKS);
            let blob = &mut blob;
            let expansion = limits.expansion;
            let image = limits.image;
            let declared = input.compression;
            let decompressing = scope.spawn(move || decompress(blob, declared, expansion, image, tx));
            let plain = Chunks {
                rx,
                current: Vec::new(),
                at: 0,
            };
            let counted = HashingReader::new(plain, limits.unpacked, "unpacked size");
            let mut tar = TarReader::new(counted);
            let unpacked = unpack::unpack(&mut tar, root.as_fd(), &mut records, &opts)
                .map_err(|e| layer_error(&shown, e, limits.image_limit))
                .and_then(|summary| {
                    // The rest of the stream (end-of-archive padding) is hashed too.
                    let finished = tar.into_inner().finish().map_err(|e| {
                        if over_limit(&e).is_some() {
                            layer_error(
                                &shown,
                                UnpackError::TooBig {
                                    limit: limits.image_limit,
                                },
                                limits.image_limit,
                            )
                        } else {
                            read_error(&shown, e)
                        }
                    })?;
                    Ok((summary, finished))
                });
            // (On an error the receiver is gone with `tar`: the decompressing
            // thread's next send fails and it ends.)
            let compression = decompressing.join().map_err(|_| ImageError::Blob {
                digest: shown.clone(),
                why: "the decompressing thread panicked".into(),
            })?;
            let (summary, (diff, n)) = unpacked?;
            Ok((summary, compression, diff, n))
        });
        let (summary, compression, diff, unpacked_size) = match streamed {
            Ok(done) => done,
            Err(e) => return Err(corrupt_or(e, blob, input.expected.as_ref())),
        };
        let (digest, size) = blob.finish().map_err(|e| read_error(&shown, e))?;
        if let Some((want, want_size)) = &input.expected {
            if size != *want_size {
                return Err(ImageError::Blob {
                    digest: want.to_string(),
                    why: format!("{size} bytes, but its descriptor says {want_size}"),
                });
            }
            if digest != *want {
                return Err(ImageError::Blob {
                    digest: want.to_string(),
                    why: format!(
                        "the content's digest is {digest}: the blob was altered or corrupted"
                    ),
                });
            }
        }
        if let Some(want) = &input.diff_id
            && diff != *want
        {
            return Err(ImageError::Blob {
                digest: digest.to_string(),
                why: format!(
                    "its uncompressed content is {diff}, but the image config's diff_id says {want}"
                ),
            });
        }
        std::io::Write::flush(&mut records).map_err(|e| read_error(&shown, e))?;
        drop(records);
        let media_type = input.media_type.unwrap_or_else(|| {
            match compression {
                Compression::None => oci::MT_OCI_LAYER,
                Compression::Gzip => oci::MT_OCI_LAYER_GZIP,
                Compression::Zstd => oci::MT_OCI_LAYER_ZSTD,
            }
            .to_string()
        });
        let meta = LayerMeta {
            version: 1,
            digest,
            diff_id: diff,
            media_type,
            compression,
            size,
            unpacked_size,
            opaque_xattr: opts.opaque_xattr,
            owners_kept: opts.keep_owners,
            unpacked_by: euid,
            summary,
        };
        let text =
            serde_json::to_vec_pretty(&meta).map_err(|e| ImageError::Invalid(e.to_string()))?;
        let meta_path = staging.path.join("meta.json");
        std::fs::write(&meta_path, text).map_err(|e| ImageError::Store {
            path: meta_path.display().to_string(),
            why: e.to_string(),
        })?;
        Ok((meta, staging))
    }
}

/// Decompressed chunks in flight between the two threads of a layer's
/// import (each at most [`PIPELINE_CHUNK`] bytes).
const PIPELINE_CHUNKS: usize = 4;
const PIPELINE_CHUNK: usize = 256 * 1024;

/// The decompressing half of a layer's import: the blob (hashed and
/// counted by `blob`) through the decoder and the expansion and image
/// caps, in chunks to `tx`; any error is sent on, so the unpacker never
/// mistakes a failure for the end. Returns the compression used.
fn decompress<R: Read>(
    blob: &mut HashingReader<R>,
    declared: Option<Compression>,
    expansion: ExpansionCap,
    image: &ImageTally,
    tx: std::sync::mpsc::SyncSender<std::io::Result<Vec<u8>>>,
) -> Compression {
    let (mut buffered, compressed) = Counting::new(BufReader::with_capacity(256 * 1024, blob));
    let compression = match declared {
        Some(c) => c,
        None => match buffered.fill_buf() {
            Ok(head) => sniff(head),
            Err(e) => {
                let _ = tx.send(Err(e));
                return Compression::None;
            }
        },
    };
    let plain = match decoder(compression, buffered) {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(Err(e));
            return compression;
        }
    };
    // Checked while streaming: a bomb stops at the cap, before its bytes
    // reach the unpacker (and the disk). An uncompressed layer passes the
    // ratio trivially but counts towards the image's caps.
    let mut plain = Expansion::new(plain, expansion, compressed, image);
    loop {
        let mut chunk = vec![0u8; PIPELINE_CHUNK];
        let mut filled = 0;
        let end = loop {
            match plain.read(&mut chunk[filled..]) {
                Ok(0) => break true,
                Ok(n) => {
                    filled += n;
                    if filled == chunk.len() {
                        break false;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return compression;
                }
            }
        };
        chunk.truncate(filled);
        if (!chunk.is_empty() && tx.send(Ok(chunk)).is_err()) || end {
            return compression;
        }
    }
}

/// The unpacking half's reader of the decompressed chunks.
struct Chunks {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    current: Vec<u8>,
    at: usize,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.current.len() {
            match self.rx.recv() {
                Ok(Ok(chunk)) => {
                    self.current = chunk;
                    self.at = 0;
                }
                Ok(Err(e)) => return Err(e),
                // The decompressing thread is done: every chunk was sent.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A layer the tar reader found malformed (the blob as streamed, before
/// its digest could be checked: a registry's layer is unpacked as it
/// arrives): when the blob, read to its end (at most its declared size,
/// only hashed), is not the one its descriptor names, that is the error
/// to report: the blob was altered or corrupted, not a bad archive.
fn corrupt_or<R: Read>(
    e: ImageError,
    blob: HashingReader<R>,
    expected: Option<&(Digest, u64)>,
) -> ImageError {
    let malformed = matches!(
        e,
        ImageError::Layer {
            why: UnpackError::Tar { .. },
            ..
        }
    );
    let Some((want, _)) = expected.filter(|_| malformed) else {
        return e;
    };
    match blob.finish() {
        Ok((got, _)) if got != *want => ImageError::Blob {
            digest: want.to_string(),
            why: format!("the content's digest is {got}: the blob was altered or corrupted"),
        },
        _ => e,
    }
}

fn read_error(shown: &str, e: std::io::Error) -> ImageError {
    if let Some(o) = over_expansion(&e) {
        return ImageError::Blob {
            digest: shown.to_string(),
            why: o.to_string(),
        };
    }
    if let Some(o) = over_limit(&e) {
        return ImageError::Blob {
            digest: shown.to_string(),
            why: o.to_string(),
        };
    }
    ImageError::Blob {
        digest: shown.to_string(),
        why: format!("cannot be read: {e}"),
    }
}

fn layer_error(shown: &str, e: UnpackError, image_limit: u64) -> ImageError {
    let e = match e {
        UnpackError::TooBig { .. } => UnpackError::TooBig { limit: image_limit },
        UnpackError::Tar {
            why: super::tar::TarError::Io(io),
            offset,
        } => {
            if let Some(o) = over_expansion(&io) {
                return ImageError::Blob {
                    digest: shown.to_string(),
                    why: o.to_string(),
                };
            }
            if let Some(o) = over_limit(&io) {
                return ImageError::Blob {
                    digest: shown.to_string(),
                    why: o.to_string(),
                };
            }
            UnpackError::Tar {
                offset,
                why: super::tar::TarError::Io(io),
            }
        }
        other => other,
    };
    ImageError::Layer {
        digest: shown.to_string(),
        why: e,
    }
}

/// A stored layer found again: its size and diff_id must agree with what
/// this image's descriptor and config say.
fn check_known(meta: &LayerMeta, size: u64, diff_id: Option<&Digest>) -> Result<()> {
    if meta.size != size {
        return Err(ImageError::Blob {
            digest: meta.digest.to_string(),
            why: format!(
                "its descriptor says {size} bytes, but the blob is {}",
                meta.size
            ),
        });
    }
    if let Some(want) = diff_id
        && *want != meta.diff_id
    {
        return Err(ImageError::Blob {
            digest: meta.digest.to_string(),
            why: format!(
                "its uncompressed content is {}, but the image config's diff_id says {want}",
                meta.diff_id
            ),
        });
    }
    Ok(())
}

/// The layer's implicit directories must not sit where a lower layer has
/// a symlink or a non-directory (overlayfs would hide that entry instead
/// of writing through it, as other unpackers that follow links would).
pub(crate) fn check_lowers(store: &Store, meta: &LayerMeta, lowers: &[LayerMeta]) -> Result<()> {
    if meta.summary.implicit_dirs.is_empty() || lowers.is_empty() {
        return Ok(());
    }
    // Top first, down to the first layer whose root is opaque.
    let mut stack: Vec<(OwnedFd, OpaqueXattr)> = Vec::new();
    for l in lowers.iter().rev() {
        stack.push((
            sys::open_dir_path(&store.layer_root(&l.digest))?,
            l.opaque_xattr,
        ));
        if l.summary.root_opaque {
            break;
        }
    }
    for p in &meta.summary.implicit_dirs {
        let Some(bytes) = unpack::unescape_path(p) else {
            continue;
        };
        if !merged_is_dir_or_absent(&stack, &bytes)? {
            return Err(super::checks::Refusal::LowerPath {
                layer: meta.digest.to_string(),
                entry: crate::util::quote::display_name(&bytes),
            }
            .into());
        }
    }
    Ok(())
}

/// Walk `path` through the layers as overlayfs would (top first; a
/// whiteout ends the lookup, an opaque directory hides what is below).
fn merged_is_dir_or_absent(layers: &[(OwnedFd, OpaqueXattr)], path: &[u8]) -> Result<bool> {
    let mut active: Vec<(OwnedFd, OpaqueXattr)> = Vec::with_capacity(layers.len());
    for (fd, x) in layers {
        active.push((
            rustix::io::dup(fd).map_err(|e| {
                sys::SysError::new("dup(layer root)", Errno::from_raw(e.raw_os_error()))
            })?,
            *x,
        ));
    }
    for comp in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        let name = CString::new(comp).map_err(|_| ImageError::Invalid("NUL in a path".into()))?;
        let mut next = Vec::new();
        for (fd, x) in &active {
            let m = match sys::lstat_at(fd.as_fd(), &name) {
                Ok(m) => m,
                Err(e) if e.errno == Errno::ENOENT => continue,
                Err(e) => return Err(e.into()),
            };
            if m.is_whiteout() {
                break;
            }
            if !m.is_dir() {
                if next.is_empty() {
                    return Ok(false);
                }
                break;
            }
            let dir = sys::open_dir_beneath(fd.as_fd(), &name)?;
            let opaque = is_opaque(dir.as_fd(), *x)?;
            next.push((dir, *x));
            if opaque {
                break;
            }
        }
        if next.is_empty() {
            return Ok(true);
        }
        active = next;
    }
    Ok(true)
}

fn is_opaque(fd: BorrowedFd<'_>, x: OpaqueXattr) -> Result<bool> {
    Ok(sys::get_xattr(fd, x.name())?.as_deref() == Some(b"y"))
}
