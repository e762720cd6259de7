//! Rendering changes the way git does: unified diff with git extended
//! headers (modes, new/deleted files, symlinks as links, `GIT binary
//! patch` literals with full index lines so `git apply` can check the
//! preimage), `--stat`, and JSON. Names are quoted as git quotes them (in
//! JSON: with controls and bidi characters escaped, see `json.rs`).
//!
//! Memory is bounded whatever the sizes and link counts of the files: a
//! change is rendered while the walk has its directories open, file
//! contents are streamed (hashing, comparing, deflating) in 64 KiB
//! chunks, and only text sides of at most [`TEXT_DIFF_MAX_BYTES`] are held
//! to be diffed line by line (larger ones become one hunk replacing the
//! whole file, which still applies). Output goes to a [`Spool`] counted
//! against the byte limit on every write, so a diff stops as soon as the
//! limit is certain to be exceeded, and prints nothing then.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::write::ZlibEncoder;
use serde_json::json;
use sha1::{Digest as _, Sha1};
use sha2::Sha256;
use similar::{Algorithm, DiffOp, capture_diff_slices_deadline, group_diff_ops};

use crate::sys;
use crate::util::quote::{display_name, git_quote, git_quote_prefixed};

use super::changes::{ChangeRef, DEFAULT_MAX_FILE_BYTES, SideRef, Skipped, Visitor, walk};
use super::error::{Result, WorkspaceError};
use super::ignore::IgnoreRules;
use super::json;
use super::layers::Layers;
use super::manifest::{MODE_LINK, git_file_mode};
use super::spool::{Limited, Spool, is_limit};

const ZERO_OID: &str = "0000000000000000000000000000000000000000";

/// Text sides up to this size are diffed line by line in memory; a larger
/// one makes its change one hunk replacing the whole file.
pub const TEXT_DIFF_MAX_BYTES: u64 = 4 << 20;
/// Time the line diff of one file may take before it settles for a
/// correct but less minimal diff.
const LINE_DIFF_DEADLINE: Duration = Duration::from_secs(2);
/// Read size of streamed contents.
const CHUNK: usize = 64 * 1024;
/// git's binary heuristic looks at this many leading bytes.
const BINARY_PROBE: u64 = 8000;

/// Output format of `diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiffFormat {
    #[default]
    Unified,
    Json,
    Stat,
}

impl std::str::FromStr for DiffFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "unified" | "patch" => Ok(DiffFormat::Unified),
            "json" => Ok(DiffFormat::Json),
            "stat" => Ok(DiffFormat::Stat),
            _ => Err(format!(
                "unknown diff format {s:?} (use unified, json or stat)"
            )),
        }
    }
}

/// One side of a change, open for reading.
enum Side {
    File { file: File, size: u64, exec: bool },
    Link { target: Vec<u8> },
}

impl Side {
    /// Open a side the walk found: a regular file is opened only when
    /// still the same inode (never a FIFO or device), and only up to
    /// `max_file` bytes; a link's target is read, never followed.
    fn open(r: &SideRef<'_>, max_file: u64, path: &[u8]) -> Result<Side> {
        if r.meta.is_symlink() {
            return Ok(Side::Link {
                target: sys::readlink_at(r.dir, r.name)?,
            });
        }
        if r.meta.size > max_file {
            return Err(WorkspaceError::TooLarge {
                what: format!(
                    "the diff (a changed file: {}, {} bytes)",
                    display_name(path),
                    r.meta.size
                ),
                limit: max_file,
            });
        }
        let fd = sys::open_beneath(r.dir, r.name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        let now = sys::fstat(fd.as_fd())?;
        if !now.is_file() || (now.dev, now.ino) != (r.meta.dev, r.meta.ino) {
            return Err(changed(path));
        }
        Ok(Side::File {
            file: File::from(fd),
            size: now.size,
            exec: now.mode & 0o100 != 0,
        })
    }

    fn git_mode(&self) -> u32 {
        match self {
            Side::File { exec: true, .. } => git_file_mode(0o755),
            Side::File { .. } => git_file_mode(0o644),
            Side::Link { .. } => MODE_LINK,
        }
    }

    fn size(&self) -> u64 {
        match self {
            Side::File { size, .. } => *size,
            Side::Link { target } => target.len() as u64,
        }
    }

    fn is_link(&self) -> bool {
        matches!(self, Side::Link { .. })
    }

    /// Hand the content, in order, to `f` in chunks of at most 64 KiB.
    fn chunks(&self, path: &[u8], f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        match self {
            Side::Link { target } => f(target),
            Side::File { file, size, .. } => {
                let mut buf = vec![0u8; CHUNK];
                let mut off = 0u64;
                while off < *size {
                    let want = (*size - off).min(CHUNK as u64) as usize;
                    let n = file.read_at(&mut buf[..want], off).map_err(|e| {
                        WorkspaceError::io(format!("read {}", display_name(path)), e)
                    })?;
                    if n == 0 {
                        return Err(changed(path));
                    }
                    f(&buf[..n])?;
                    off += n as u64;
                }
                Ok(())
            }
        }
    }

    /// The whole content (only for sides of at most
    /// [`TEXT_DIFF_MAX_BYTES`]).
    fn read_all(&self, path: &[u8]) -> Result<Vec<u8>> {
        let mut data = Vec::with_capacity(self.size().min(TEXT_DIFF_MAX_BYTES) as usize);
        self.chunks(path, &mut |c| {
            data.extend_from_slice(c);
            Ok(())
        })?;
        Ok(data)
    }
}

fn changed(path: &[u8]) -> WorkspaceError {
    WorkspaceError::Unsupported {
        path: display_name(path),
        reason: "changed while being read".into(),
    }
}

/// What a pass over a side tells (only what the format needs is
/// computed: hashing is not free on gigabytes of hardlinks).
#[derive(Default)]
struct Summary {
    /// git's blob id (unified diffs).
    oid: String,
    /// sha256 (JSON).
    sha256: [u8; 32],
    binary: bool,
    /// Lines as a unified diff counts them (a last line without newline
    /// counts); only for text too large to diff in memory.
    lines: u64,
}

/// A unified diff needs git blob ids.
const PATCH_WANT: Want = Want {
    oid: true,
    sha256: false,
};

/// What to compute in [`summarize`].
#[derive(Clone, Copy)]
struct Want {
    oid: bool,
    sha256: bool,
}

fn summarize(side: Option<&Side>, path: &[u8], want: Want) -> Result<Option<Summary>> {
    let Some(side) = side else { return Ok(None) };
    // The binary probe first: it decides whether lines are counted.
    let binary = match side {
        Side::Link { target } => target[..target.len().min(BINARY_PROBE as usize)].contains(&0),
        Side::File { file, size, .. } => {
            let mut probe = vec![0u8; (*size).min(BINARY_PROBE) as usize];
            let mut done = 0;
            while done < probe.len() {
                let n = file
                    .read_at(&mut probe[done..], done as u64)
                    .map_err(|e| WorkspaceError::io(format!("read {}", display_name(path)), e))?;
                if n == 0 {
                    return Err(changed(path));
                }
                done += n;
            }
            probe.contains(&0)
        }
    };
    let count_lines = !binary && side.size() > TEXT_DIFF_MAX_BYTES;
    let mut summary = Summary {
        binary,
        ..Summary::default()
    };
    if !(want.oid || want.sha256 || count_lines) {
        return Ok(Some(summary));
    }
    let mut sha1 = Sha1::new();
    sha1.update(format!("blob {}\0", side.size()).as_bytes());
    let mut sha256 = Sha256::new();
    let (mut newlines, mut last) = (0u64, b'\n');
    side.chunks(path, &mut |c| {
        if want.oid {
            sha1.update(c);
        }
        if want.sha256 {
            sha256.update(c);
        }
        if count_lines {
            newlines += c.iter().filter(|&&b| b == b'\n').count() as u64;
            if let Some(&b) = c.last() {
                last = b;
            }
        }
        Ok(())
    })?;
    if want.oid {
        summary.oid = hex::encode(sha1.finalize());
    }
    if want.sha256 {
        summary.sha256 = sha256.finalize().into();
    }
    summary.lines = newlines + u64::from(count_lines && last != b'\n');
    Ok(Some(summary))
}

/// Whether two sides of equal size hold the same bytes (compared, not
/// hashed).
fn same_content(a: &Side, b: &Side, path: &[u8]) -> Result<bool> {
    match (a, b) {
        (Side::Link { target: x }, Side::Link { target: y }) => Ok(x == y),
        (Side::File { file: fa, size, .. }, Side::File { file: fb, .. }) => {
            let (mut ba, mut bb) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
            let mut off = 0u64;
            while off < *size {
                let want = (*size - off).min(CHUNK as u64) as usize;
                let read =
                    |f: &File, buf: &mut [u8]| {
                        let mut done = 0;
                        while done < want {
                            let n = f.read_at(&mut buf[done..want], off + done as u64).map_err(
                                |e| WorkspaceError::io(format!("read {}", display_name(path)), e),
                            )?;
                            if n == 0 {
                                return Err(changed(path));
                            }
                            done += n;
                        }
                        Ok(())
                    };
                read(fa, &mut ba)?;
                read(fb, &mut bb)?;
                if ba[..want] != bb[..want] {
                    return Ok(false);
                }
                off += want as u64;
            }
            Ok(true)
        }
        _ => Ok(false),
    }
}

fn lines(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|&b| b == b'\n').collect()
}

fn line_ops(old: &[&[u8]], new: &[&[u8]]) -> Vec<DiffOp> {
    let deadline = Instant::now() + LINE_DIFF_DEADLINE;
    capture_diff_slices_deadline(Algorithm::Myers, old, new, Some(deadline))
}

fn range(start: usize, len: u64) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

/// Write one diff line (`sign` + `line`), marking a missing final newline.
fn emit_line(w: &mut dyn Write, sign: u8, line: &[u8]) -> std::io::Result<()> {
    w.write_all(&[sign])?;
    w.write_all(line)?;
    if !line.ends_with(b"\n") {
        w.write_all(b"\n\\ No newline at end of file\n")?;
    }
    Ok(())
}

fn hunks(w: &mut dyn Write, old: &[u8], new: &[u8]) -> std::io::Result<()> {
    let (ol, nl) = (lines(old), lines(new));
    let ops = line_ops(&ol, &nl);
    for group in group_diff_ops(ops, 3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let (os, oe) = (first.old_range().start, last.old_range().end);
        let (ns, ne) = (first.new_range().start, last.new_range().end);
        writeln!(
            w,
            "@@ -{} +{} @@",
            range(os, (oe - os) as u64),
            range(ns, (ne - ns) as u64)
        )?;
        for op in &group {
            let (tag, or, nr) = op.as_tag_tuple();
            match tag {
                similar::DiffTag::Equal => {
                    for i in or {
                        emit_line(w, b' ', ol[i])?;
                    }
                }
                similar::DiffTag::Delete => {
                    for i in or {
                        emit_line(w, b'-', ol[i])?;
                    }
                }
                similar::DiffTag::Insert => {
                    for i in nr {
                        emit_line(w, b'+', nl[i])?;
                    }
                }
                similar::DiffTag::Replace => {
                    for i in or {
                        emit_line(w, b'-', ol[i])?;
                    }
                    for i in nr {
                        emit_line(w, b'+', nl[i])?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Lines added and removed between two texts held in memory.
fn line_counts(old: &[u8], new: &[u8]) -> (u64, u64) {
    let (ol, nl) = (lines(old), lines(new));
    let (mut ins, mut del) = (0u64, 0u64);
    for op in line_ops(&ol, &nl) {
        match op {
            DiffOp::Equal { .. } => {}
            DiffOp::Delete { old_len, .. } => del += old_len as u64,
            DiffOp::Insert { new_len, .. } => ins += new_len as u64,
            DiffOp::Replace {
                old_len, new_len, ..
            } => {
                del += old_len as u64;
                ins += new_len as u64;
            }
        }
    }
    (ins, del)
}

const EN85: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// The base85 lines of a git binary literal, 52 deflated bytes a line.
struct Base85Lines<'w> {
    out: &'w mut dyn Write,
    buf: [u8; 52],
    len: usize,
}

impl Base85Lines<'_> {
    fn line(&mut self) -> std::io::Result<()> {
        let chunk = &self.buf[..self.len];
        let n = chunk.len() as u8;
        let mut line = Vec::with_capacity(67);
        line.push(if n <= 26 { b'A' + n - 1 } else { b'a' + n - 27 });
        for group in chunk.chunks(4) {
            let mut acc: u32 = 0;
            for (i, &b) in group.iter().enumerate() {
                acc |= (b as u32) << (24 - 8 * i);
            }
            let mut enc = [0u8; 5];
            for slot in enc.iter_mut().rev() {
                *slot = EN85[(acc % 85) as usize];
                acc /= 85;
            }
            line.extend_from_slice(&enc);
        }
        line.push(b'\n');
        self.len = 0;
        self.out.write_all(&line)
    }

    fn finish(mut self) -> std::io::Result<()> {
        if self.len > 0 {
            self.line()?;
        }
        Ok(())
    }
}

impl Write for Base85Lines<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let mut rest = data;
        while !rest.is_empty() {
            let take = (52 - self.len).min(rest.len());
            self.buf[self.len..self.len + take].copy_from_slice(&rest[..take]);
            self.len += take;
            rest = &rest[take..];
            if self.len == 52 {
                self.line()?;
            }
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Stream `side` as a line-prefixed body (`sign` before every line).
fn stream_lines(w: &mut dyn Write, sign: u8, side: &Side, path: &[u8]) -> Result<()> {
    let mut at_start = true;
    let mut failed = None;
    side.chunks(path, &mut |c| {
        let mut emit = || -> std::io::Result<()> {
            for seg in c.split_inclusive(|&b| b == b'\n') {
                if at_start {
                    w.write_all(&[sign])?;
                }
                w.write_all(seg)?;
                at_start = seg.ends_with(b"\n");
            }
            Ok(())
        };
        emit().map_err(|e| {
            failed = Some(());
            WorkspaceError::io("write the diff", e)
        })
    })?;
    let _ = failed;
    if !at_start {
        w.write_all(b"\n\\ No newline at end of file\n")
            .map_err(|e| WorkspaceError::io("write the diff", e))?;
    }
    Ok(())
}

/// Which part of a unified diff a patch goes to: deletions come first, so
/// a path can change between file and directory in one patch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Deletions,
    Rest,
}

/// One `--stat` line's numbers.
struct Stat {
    name: String,
    binary: Option<(u64, u64)>,
    ins: u64,
    del: u64,
}

/// Renders changes, one at a time, into spools.
struct Renderer {
    format: DiffFormat,
    max_file: u64,
    limit: u64,
    total: u64,
    deletions: Spool,
    rest: Spool,
    stats: Vec<Stat>,
    files: u64,
    ins: u64,
    del: u64,
}

impl Renderer {
    fn too_large(&self) -> WorkspaceError {
        WorkspaceError::TooLarge {
            what: "the diff".into(),
            limit: self.limit,
        }
    }

    /// Map a write error: past the limit, or the spool failing.
    fn out_err(&self, e: std::io::Error) -> WorkspaceError {
        if is_limit(&e) {
            self.too_large()
        } else {
            WorkspaceError::io("write the diff", e)
        }
    }

    /// Count `n` bytes the output will certainly hold.
    fn reserve(&mut self, n: u64) -> Result<()> {
        self.total = self.total.saturating_add(n);
        if self.total > self.limit {
            return Err(self.too_large());
        }
        Ok(())
    }

    fn change(&mut self, c: &ChangeRef<'_>) -> Result<()> {
        let old = c
            .old
            .map(|s| Side::open(&s, self.max_file, c.path))
            .transpose()?;
        let new = c
            .new
            .map(|s| Side::open(&s, self.max_file, c.path))
            .transpose()?;
        if let (Some(o), Some(n)) = (&old, &new)
            && o.git_mode() == n.git_mode()
            && o.size() == n.size()
            && same_content(o, n, c.path)?
        {
            // Copied up but unchanged: not a change.
            return Ok(());
        }
        match self.format {
            DiffFormat::Unified => match (old, new) {
                (Some(o), Some(n)) if o.is_link() != n.is_link() => {
                    self.patch(Part::Deletions, c.path, Some(&o), None)?;
                    self.patch(Part::Rest, c.path, None, Some(&n))
                }
                (Some(o), None) => self.patch(Part::Deletions, c.path, Some(&o), None),
                (o, n) => self.patch(Part::Rest, c.path, o.as_ref(), n.as_ref()),
            },
            DiffFormat::Stat => {
                let (so, sn) = (
                    summarize(
                        old.as_ref(),
                        c.path,
                        Want {
                            oid: false,
                            sha256: false,
                        },
                    )?,
                    summarize(
                        new.as_ref(),
                        c.path,
                        Want {
                            oid: false,
                            sha256: false,
                        },
                    )?,
                );
                let stat = self.stat(c.path, old.as_ref(), new.as_ref(), &so, &sn)?;
                // Its line is at least the name and the bar.
                self.reserve(stat.name.len() as u64 + 6)?;
                self.stats.push(stat);
                Ok(())
            }
            DiffFormat::Json => self.json_entry(c.path, old.as_ref(), new.as_ref()),
        }
    }

    fn stat(
        &self,
        path: &[u8],
        old: Option<&Side>,
        new: Option<&Side>,
        so: &Option<Summary>,
        sn: &Option<Summary>,
    ) -> Result<Stat> {
        let name = git_quote(path);
        let size = |s: Option<&Side>| s.map_or(0, Side::size);
        let binary = so.as_ref().is_some_and(|s| s.binary) || sn.as_ref().is_some_and(|s| s.binary);
        if binary {
            return Ok(Stat {
                name,
                binary: Some((size(old), size(new))),
                ins: 0,
                del: 0,
            });
        }
        let (ins, del) = if size(old) <= TEXT_DIFF_MAX_BYTES && size(new) <= TEXT_DIFF_MAX_BYTES {
            let o = old
                .map(|s| s.read_all(path))
                .transpose()?
                .unwrap_or_default();
            let n = new
                .map(|s| s.read_all(path))
                .transpose()?
                .unwrap_or_default();
            line_counts(&o, &n)
        } else {
            // Rendered as one hunk replacing the whole file.
            (
                sn.as_ref().map_or(0, |s| s.lines),
                so.as_ref().map_or(0, |s| s.lines),
            )
        };
        Ok(Stat {
            name,
            binary: None,
            ins,
            del,
        })
    }

    /// The patch of one path (one side may be absent).
    fn patch(
        &mut self,
        part: Part,
        path: &[u8],
        old: Option<&Side>,
        new: Option<&Side>,
    ) -> Result<()> {
        let (so, sn) = (
            summarize(old, path, PATCH_WANT)?,
            summarize(new, path, PATCH_WANT)?,
        );
        let limit = self.limit;
        let spool = match part {
            Part::Deletions => &mut self.deletions,
            Part::Rest => &mut self.rest,
        };
        let mut w = Limited {
            inner: spool,
            total: &mut self.total,
            limit,
        };
        let result = write_patch(&mut w, path, old, new, &so, &sn);
        result.map_err(|e| match e {
            WorkspaceError::Io { source, .. } if is_limit(&source) => WorkspaceError::TooLarge {
                what: "the diff".into(),
                limit,
            },
            other => other,
        })
    }

    fn json_entry(&mut self, path: &[u8], old: Option<&Side>, new: Option<&Side>) -> Result<()> {
        let want = Want {
            oid: false,
            sha256: true,
        };
        let (so, sn) = (summarize(old, path, want)?, summarize(new, path, want)?);
        let stat = self.stat(path, old, new, &so, &sn)?;
        let status = match (old, new) {
            (None, _) => "added",
            (_, None) => "deleted",
            (Some(o), Some(n)) if o.is_link() != n.is_link() => "type-changed",
            _ => "modified",
        };
        let side = |s: Option<&Side>, sum: &Option<Summary>| match (s, sum) {
            (Some(s), Some(sum)) => {
                let mut v = json!({
                    "kind": if s.is_link() { "symlink" } else { "file" },
                    "mode": format!("{:o}", s.git_mode()),
                    "size": s.size(),
                    "sha256": hex::encode(sum.sha256),
                });
                if let Side::Link { target } = s {
                    v["target"] = json!(String::from_utf8_lossy(target));
                    v["target_quoted"] = json!(git_quote(target));
                }
                v
            }
            _ => serde_json::Value::Null,
        };
        let entry = json!({
            "path": String::from_utf8_lossy(path),
            "path_quoted": git_quote(path),
            "status": status,
            "old": side(old, &so),
            "new": side(new, &sn),
            "binary": stat.binary.is_some(),
            "insertions": stat.ins,
            "deletions": stat.del,
        });
        self.ins += stat.ins;
        self.del += stat.del;
        let text = json::to_vec_pretty(&entry)?;
        let mut piece = Vec::with_capacity(text.len() + 16);
        piece.extend_from_slice(if self.files == 0 {
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
        self.files += 1;
        let limit = self.limit;
        let mut w = Limited {
            inner: &mut self.rest,
            total: &mut self.total,
            limit,
        };
        w.write_all(&piece).map_err(|e| self.out_err(e))
    }

    /// Write the whole output to `out` (nothing was written before).
    fn finish(mut self, skipped: &[Skipped], ignored: &Ignored, out: &mut dyn Write) -> Result<()> {
        let werr = |e| WorkspaceError::io("write the diff", e);
        match self.format {
            DiffFormat::Unified => {
                self.deletions.copy_to(out).map_err(werr)?;
                self.rest.copy_to(out).map_err(werr)?;
            }
            DiffFormat::Stat => {
                let stats = std::mem::take(&mut self.stats);
                let mut text = Spool::new(self.rest.dir())?;
                let mut total = 0u64;
                let limit = self.limit;
                let mut w = Limited {
                    inner: &mut text,
                    total: &mut total,
                    limit,
                };
                write_stat(&mut w, &stats).map_err(|e| self.out_err(e))?;
                text.copy_to(out).map_err(werr)?;
            }
            DiffFormat::Json => {
                let skipped: Vec<_> = skipped
                    .iter()
                    .map(|s| {
                        json!({
                            "path": String::from_utf8_lossy(&s.path),
                            "path_quoted": git_quote(&s.path),
                            "kind": s.kind,
                        })
                    })
                    .collect();
                let head: &[u8] = b"{\n  \"files\": [";
                let files_end: &[u8] = if self.files == 0 { b"]," } else { b"\n  ]," };
                let mut tail = Vec::new();
                tail.extend_from_slice(b"\n  \"skipped\": ");
                let sk = json::to_vec_pretty(&skipped)?;
                for &b in &sk {
                    tail.push(b);
                    if b == b'\n' {
                        tail.extend_from_slice(b"  ");
                    }
                }
                if ignored.active {
                    let list: Vec<_> = ignored
                        .paths
                        .iter()
                        .map(|(p, dir)| {
                            json!({
                                "path": String::from_utf8_lossy(p),
                                "path_quoted": git_quote(p),
                                "kind": if *dir { "dir" } else { "file" },
                            })
                        })
                        .collect();
                    tail.extend_from_slice(b",\n  \"ignored\": ");
                    let ig = json::to_vec_pretty(&list)?;
                    for &b in &ig {
                        tail.push(b);
                        if b == b'\n' {
                            tail.extend_from_slice(b"  ");
                        }
                    }
                    tail.extend_from_slice(
                        format!(",\n  \"ignored_count\": {}", ignored.count).as_bytes(),
                    );
                }
                tail.extend_from_slice(
                    format!(
                        ",\n  \"files_changed\": {},\n  \"insertions\": {},\n  \"deletions\": {}\n}}\n",
                        self.files, self.ins, self.del
                    )
                    .as_bytes(),
                );
                self.reserve((head.len() + files_end.len() + tail.len()) as u64)?;
                out.write_all(head).map_err(werr)?;
                self.rest.copy_to(out).map_err(werr)?;
                out.write_all(files_end).map_err(werr)?;
                out.write_all(&tail).map_err(werr)?;
            }
        }
        out.flush().map_err(werr)
    }
}

/// The patch of one path into `w`.
fn write_patch(
    w: &mut dyn Write,
    path: &[u8],
    old: Option<&Side>,
    new: Option<&Side>,
    so: &Option<Summary>,
    sn: &Option<Summary>,
) -> Result<()> {
    let io = |e| WorkspaceError::io("write the diff", e);
    let a = git_quote_prefixed("a/", path);
    let b = git_quote_prefixed("b/", path);
    writeln!(w, "diff --git {a} {b}").map_err(io)?;
    let oid = |s: &Option<Summary>| s.as_ref().map_or(ZERO_OID.to_string(), |s| s.oid.clone());
    let (old_oid, new_oid) = (oid(so), oid(sn));
    match (old, new) {
        (None, Some(n)) => {
            writeln!(w, "new file mode {:o}", n.git_mode()).map_err(io)?;
            writeln!(w, "index {old_oid}..{new_oid}").map_err(io)?;
        }
        (Some(o), None) => {
            writeln!(w, "deleted file mode {:o}", o.git_mode()).map_err(io)?;
            writeln!(w, "index {old_oid}..{new_oid}").map_err(io)?;
        }
        (Some(o), Some(n)) => {
            if o.git_mode() != n.git_mode() {
                writeln!(w, "old mode {:o}", o.git_mode()).map_err(io)?;
                writeln!(w, "new mode {:o}", n.git_mode()).map_err(io)?;
            }
            if o.size() == n.size() && same_content(o, n, path)? {
                return Ok(());
            }
            if o.git_mode() == n.git_mode() {
                writeln!(w, "index {old_oid}..{new_oid} {:o}", n.git_mode()).map_err(io)?;
            } else {
                writeln!(w, "index {old_oid}..{new_oid}").map_err(io)?;
            }
        }
        (None, None) => return Ok(()),
    }
    let size = |s: Option<&Side>| s.map_or(0, Side::size);
    let (old_size, new_size) = (size(old), size(new));
    if old_size == 0 && new_size == 0 {
        return Ok(());
    }
    let binary = so.as_ref().is_some_and(|s| s.binary) || sn.as_ref().is_some_and(|s| s.binary);
    if binary {
        w.write_all(b"GIT binary patch\n").map_err(io)?;
        literal(w, new, path)?;
        literal(w, old, path)?;
        return Ok(());
    }
    let tab = if path.contains(&b' ') { "\t" } else { "" };
    if old.is_some() {
        writeln!(w, "--- {a}{tab}").map_err(io)?;
    } else {
        w.write_all(b"--- /dev/null\n").map_err(io)?;
    }
    if new.is_some() {
        writeln!(w, "+++ {b}{tab}").map_err(io)?;
    } else {
        w.write_all(b"+++ /dev/null\n").map_err(io)?;
    }
    if old_size <= TEXT_DIFF_MAX_BYTES && new_size <= TEXT_DIFF_MAX_BYTES {
        let o = old
            .map(|s| s.read_all(path))
            .transpose()?
            .unwrap_or_default();
        let n = new
            .map(|s| s.read_all(path))
            .transpose()?
            .unwrap_or_default();
        return hunks(w, &o, &n).map_err(io);
    }
    // Too large to diff by lines in bounded memory: one hunk replacing it
    // all, streamed.
    let count = |s: &Option<Summary>| s.as_ref().map_or(0, |s| s.lines);
    writeln!(w, "@@ -{} +{} @@", range(0, count(so)), range(0, count(sn))).map_err(io)?;
    if let Some(o) = old {
        stream_lines(w, b'-', o, path)?;
    }
    if let Some(n) = new {
        stream_lines(w, b'+', n, path)?;
    }
    Ok(())
}

/// One `literal` hunk of a git binary patch: the side's content deflated,
/// in base85 lines, streamed.
fn literal(w: &mut dyn Write, side: Option<&Side>, path: &[u8]) -> Result<()> {
    let io = |e| WorkspaceError::io("write the diff", e);
    writeln!(w, "literal {}", side.map_or(0, Side::size)).map_err(io)?;
    let mut lines = Base85Lines {
        out: &mut *w,
        buf: [0; 52],
        len: 0,
    };
    {
        let mut z = ZlibEncoder::new(&mut lines, Compression::default());
        if let Some(s) = side {
            s.chunks(path, &mut |c| z.write_all(c).map_err(io))?;
        }
        z.finish().map_err(io)?;
    }
    lines.finish().map_err(io)?;
    w.write_all(b"\n").map_err(io)
}

/// `git diff --stat`-style summary.
fn write_stat(out: &mut dyn Write, stats: &[Stat]) -> std::io::Result<()> {
    let name_w = stats
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    let max_total = stats.iter().map(|s| s.ins + s.del).max().unwrap_or(0);
    let num_w = max_total.to_string().len();
    let graph_w = 50u64;
    let (mut ti, mut td) = (0, 0);
    for s in stats {
        ti += s.ins;
        td += s.del;
        let pad = name_w - s.name.chars().count();
        match s.binary {
            Some((a, b)) => {
                writeln!(out, " {}{} | Bin {a} -> {b} bytes", s.name, " ".repeat(pad))?;
            }
            None => {
                let total = s.ins + s.del;
                let (gi, gd) = if max_total > graph_w && total > 0 {
                    let scaled = (total * graph_w).div_ceil(max_total).max(1);
                    let gi = (s.ins * scaled).div_ceil(total.max(1)).min(scaled);
                    (gi, scaled - gi)
                } else {
                    (s.ins, s.del)
                };
                writeln!(
                    out,
                    " {}{} | {:>num_w$} {}{}",
                    s.name,
                    " ".repeat(pad),
                    total,
                    "+".repeat(gi as usize),
                    "-".repeat(gd as usize)
                )?;
            }
        }
    }
    if !stats.is_empty() {
        let n = stats.len();
        let mut line = format!(" {n} file{} changed", if n == 1 { "" } else { "s" });
        if ti > 0 || td == 0 {
            line += &format!(", {ti} insertion{}(+)", if ti == 1 { "" } else { "s" });
        }
        if td > 0 {
            line += &format!(", {td} deletion{}(-)", if td == 1 { "" } else { "s" });
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Paths a diff left out because the baseline's ignore rules name them
/// (directories once, not what is inside).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ignored {
    /// Whether rules were applied at all.
    pub active: bool,
    /// The first [`IGNORED_LISTED`] paths left out, with whether each is a
    /// directory.
    pub paths: Vec<(Vec<u8>, bool)>,
    /// All paths left out.
    pub count: u64,
}

/// Ignored paths listed by name in a JSON diff (the rest are counted).
pub const IGNORED_LISTED: usize = 10_000;

/// What a diff reported beside the changes.
#[derive(Debug, Clone, Default)]
pub struct DiffSummary {
    /// Entries git cannot represent (never opened).
    pub skipped: Vec<Skipped>,
    pub ignored: Ignored,
}

/// The walk's visitor: untracked paths the rules ignore are left out (an
/// ignored untracked directory is not even walked), the rest rendered.
struct Filtered<'r> {
    renderer: &'r mut Renderer,
    rules: Option<&'r IgnoreRules>,
    /// The path of the deepest directory entered (its ancestors are its
    /// prefixes), and per level its length and whether it is ignored:
    /// memory linear in the depth, not quadratic.
    dir: Vec<u8>,
    levels: Vec<(usize, bool)>,
    ignored: Ignored,
}

impl Filtered<'_> {
    /// Whether a directory containing `path` is ignored (levels that do
    /// not contain it are left).
    fn parent_ignored(&mut self, path: &[u8]) -> bool {
        while let Some(&(len, _)) = self.levels.last() {
            if path.len() > len && path[len] == b'/' && path[..len] == self.dir[..len] {
                break;
            }
            self.levels.pop();
        }
        self.levels.last().is_some_and(|(_, ig)| *ig)
    }

    fn leave_out(&mut self, path: &[u8], dir: bool) {
        self.ignored.count += 1;
        if self.ignored.paths.len() < IGNORED_LISTED {
            self.ignored.paths.push((path.to_vec(), dir));
        }
    }
}

impl Visitor for Filtered<'_> {
    fn change(&mut self, c: &ChangeRef<'_>) -> Result<()> {
        if let Some(rules) = self.rules {
            let parent = self.parent_ignored(c.path);
            let left_out = rules.is_excluded(c.path, false)
                || (!c.tracked && (parent || rules.is_ignored(c.path, false)));
            if left_out {
                self.leave_out(c.path, false);
                return Ok(());
            }
        }
        self.renderer.change(c)
    }

    fn enter(&mut self, path: &[u8], tracked: bool) -> Result<bool> {
        let Some(rules) = self.rules else {
            return Ok(true);
        };
        let ignored = self.parent_ignored(path) || rules.is_ignored(path, true);
        if rules.is_excluded(path, true) || (ignored && !tracked) {
            self.leave_out(path, true);
            return Ok(false);
        }
        self.dir.clear();
        self.dir.extend_from_slice(path);
        self.levels.push((path.len(), ignored));
        Ok(true)
    }
}

#[cfg(any(test, feature = "internals"))]
/// Render the diff of `layers` in `format` into `out`, whole or not at
/// all: with `max_bytes`, a longer diff is an error (detected as soon as
/// it is certain) and nothing is written. Temporary output beyond 1 MiB
/// goes to an unnamed file in `spool_dir`. Returns the entries git cannot
/// represent (never opened).
pub fn diff(
    layers: &Layers,
    format: DiffFormat,
    max_bytes: Option<u64>,
    spool_dir: BorrowedFd<'_>,
    out: &mut dyn Write,
) -> Result<Vec<Skipped>> {
    diff_filtered(layers, format, max_bytes, None, spool_dir, out).map(|s| s.skipped)
}

/// [`diff`], leaving out the untracked paths `rules` ignore (as `git add
/// -A` would) and reporting them.
pub fn diff_filtered(
    layers: &Layers,
    format: DiffFormat,
    max_bytes: Option<u64>,
    rules: Option<&IgnoreRules>,
    spool_dir: BorrowedFd<'_>,
    out: &mut dyn Write,
) -> Result<DiffSummary> {
    let mut r = Renderer {
        format,
        max_file: DEFAULT_MAX_FILE_BYTES,
        limit: max_bytes.unwrap_or(u64::MAX),
        total: 0,
        deletions: Spool::new(spool_dir)?,
        rest: Spool::new(spool_dir)?,
        stats: Vec::new(),
        files: 0,
        ins: 0,
        del: 0,
    };
    let mut visitor = Filtered {
        renderer: &mut r,
        rules: rules.filter(|r| !r.is_empty()),
        dir: Vec::new(),
        levels: Vec::new(),
        ignored: Ignored {
            active: rules.is_some(),
            ..Ignored::default()
        },
    };
    let skipped = walk(layers, &mut visitor)?;
    let ignored = visitor.ignored;
    r.finish(&skipped, &ignored, out)?;
    Ok(DiffSummary { skipped, ignored })
}
