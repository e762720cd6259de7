//! Rendering changes the way git does: unified diff with git extended
//! headers (modes, new/deleted files, symlinks as links, `GIT binary
//! patch` literals with full index lines so `git apply` can check the
//! preimage), `--stat`, and JSON. Names are quoted as git quotes them.

use std::io::Write;

use flate2::Compression;
use flate2::write::ZlibEncoder;
use serde_json::json;
use sha1::{Digest as _, Sha1};
use sha2::Sha256;
use similar::{Algorithm, DiffOp, capture_diff_slices, group_diff_ops};

use super::changes::{Blob, Changes};
use super::error::{Result, WorkspaceError};
use super::quote::{git_quote, git_quote_prefixed};

const ZERO_OID: &str = "0000000000000000000000000000000000000000";

/// Output format of `diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffFormat {
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

/// Render `changes` in `format`; with `max_bytes`, fail whole when the
/// output would be longer.
pub fn render(changes: &Changes, format: DiffFormat, max_bytes: Option<u64>) -> Result<Vec<u8>> {
    let limit = max_bytes.unwrap_or(u64::MAX);
    let out = match format {
        DiffFormat::Unified => unified(changes, limit)?,
        DiffFormat::Stat => stat(changes),
        DiffFormat::Json => {
            let mut v = serde_json::to_vec_pretty(&json_value(changes))
                .map_err(|e| WorkspaceError::io("encode JSON", e.into()))?;
            v.push(b'\n');
            v
        }
    };
    if out.len() as u64 > limit {
        return Err(WorkspaceError::TooLarge {
            what: format!("the diff ({} bytes)", out.len()),
            limit,
        });
    }
    Ok(out)
}

/// git's blob id of `data`.
pub fn git_oid(data: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", data.len()).as_bytes());
    h.update(data);
    hex::encode(h.finalize())
}

/// git's binary heuristic: a NUL in the first 8000 bytes.
pub fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(8000)].contains(&0)
}

fn lines(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|&b| b == b'\n').collect()
}

/// The unified diff of all changes (deletions first so a path can change
/// between file and directory in one patch).
pub fn unified(changes: &Changes, limit: u64) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut parts: Vec<(&[u8], Option<&Blob>, Option<&Blob>)> = Vec::new();
    let mut later = Vec::new();
    for c in &changes.changes {
        match (&c.old, &c.new) {
            (Some(o), Some(n)) if o.is_link() != n.is_link() => {
                parts.push((&c.path, Some(o), None));
                later.push((&c.path[..], None, Some(n)));
            }
            (Some(o), None) => parts.push((&c.path, Some(o), None)),
            (o, n) => later.push((&c.path[..], o.as_ref(), n.as_ref())),
        }
    }
    parts.extend(later);
    for (path, old, new) in parts {
        file_patch(&mut out, path, old, new);
        if out.len() as u64 > limit {
            return Err(WorkspaceError::TooLarge {
                what: "the diff".into(),
                limit,
            });
        }
    }
    Ok(out)
}

fn file_patch(out: &mut Vec<u8>, path: &[u8], old: Option<&Blob>, new: Option<&Blob>) {
    let a = git_quote_prefixed("a/", path);
    let b = git_quote_prefixed("b/", path);
    let _ = writeln!(out, "diff --git {a} {b}");
    let empty: &[u8] = b"";
    let (old_data, new_data) = (old.map_or(empty, Blob::data), new.map_or(empty, Blob::data));
    let (old_oid, new_oid) = (
        old.map_or(ZERO_OID.to_string(), |o| git_oid(o.data())),
        new.map_or(ZERO_OID.to_string(), |n| git_oid(n.data())),
    );
    match (old, new) {
        (None, Some(n)) => {
            let _ = writeln!(out, "new file mode {:o}", n.git_mode());
            let _ = writeln!(out, "index {old_oid}..{new_oid}");
        }
        (Some(o), None) => {
            let _ = writeln!(out, "deleted file mode {:o}", o.git_mode());
            let _ = writeln!(out, "index {old_oid}..{new_oid}");
        }
        (Some(o), Some(n)) => {
            if o.git_mode() != n.git_mode() {
                let _ = writeln!(out, "old mode {:o}", o.git_mode());
                let _ = writeln!(out, "new mode {:o}", n.git_mode());
            }
            if o.data() == n.data() {
                return;
            }
            if o.git_mode() == n.git_mode() {
                let _ = writeln!(out, "index {old_oid}..{new_oid} {:o}", n.git_mode());
            } else {
                let _ = writeln!(out, "index {old_oid}..{new_oid}");
            }
        }
        (None, None) => return,
    }
    if old_data.is_empty() && new_data.is_empty() {
        return;
    }
    if is_binary(old_data) || is_binary(new_data) {
        out.extend_from_slice(b"GIT binary patch\n");
        binary_literal(out, new_data);
        binary_literal(out, old_data);
        return;
    }
    let tab = |p: &[u8]| if p.contains(&b' ') { "\t" } else { "" };
    if old.is_some() {
        let _ = writeln!(out, "--- {a}{}", tab(path));
    } else {
        out.extend_from_slice(b"--- /dev/null\n");
    }
    if new.is_some() {
        let _ = writeln!(out, "+++ {b}{}", tab(path));
    } else {
        out.extend_from_slice(b"+++ /dev/null\n");
    }
    hunks(out, old_data, new_data);
}

fn range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

fn hunks(out: &mut Vec<u8>, old: &[u8], new: &[u8]) {
    let (ol, nl) = (lines(old), lines(new));
    let ops = capture_diff_slices(Algorithm::Myers, &ol, &nl);
    for group in group_diff_ops(ops, 3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let (os, oe) = (first.old_range().start, last.old_range().end);
        let (ns, ne) = (first.new_range().start, last.new_range().end);
        let _ = writeln!(out, "@@ -{} +{} @@", range(os, oe - os), range(ns, ne - ns));
        for op in &group {
            let (tag, or, nr) = op.as_tag_tuple();
            let mut emit = |sign: u8, line: &[u8]| {
                out.push(sign);
                out.extend_from_slice(line);
                if !line.ends_with(b"\n") {
                    out.extend_from_slice(b"\n\\ No newline at end of file\n");
                }
            };
            match tag {
                similar::DiffTag::Equal => or.clone().for_each(|i| emit(b' ', ol[i])),
                similar::DiffTag::Delete => or.clone().for_each(|i| emit(b'-', ol[i])),
                similar::DiffTag::Insert => nr.clone().for_each(|i| emit(b'+', nl[i])),
                similar::DiffTag::Replace => {
                    or.clone().for_each(|i| emit(b'-', ol[i]));
                    nr.clone().for_each(|i| emit(b'+', nl[i]));
                }
            }
        }
    }
}

/// Lines added and removed between two texts.
fn line_counts(old: &[u8], new: &[u8]) -> (usize, usize) {
    let (ol, nl) = (lines(old), lines(new));
    let mut ins = 0;
    let mut del = 0;
    for op in capture_diff_slices(Algorithm::Myers, &ol, &nl) {
        match op {
            DiffOp::Equal { .. } => {}
            DiffOp::Delete { old_len, .. } => del += old_len,
            DiffOp::Insert { new_len, .. } => ins += new_len,
            DiffOp::Replace {
                old_len, new_len, ..
            } => {
                del += old_len;
                ins += new_len;
            }
        }
    }
    (ins, del)
}

const EN85: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// One `literal` hunk of a git binary patch: zlib data in base85 lines.
fn binary_literal(out: &mut Vec<u8>, data: &[u8]) {
    let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
    let _ = z.write_all(data);
    let deflated = z.finish().unwrap_or_default();
    let _ = writeln!(out, "literal {}", data.len());
    for chunk in deflated.chunks(52) {
        let n = chunk.len() as u8;
        out.push(if n <= 26 { b'A' + n - 1 } else { b'a' + n - 27 });
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
            out.extend_from_slice(&enc);
        }
        out.push(b'\n');
    }
    out.push(b'\n');
}

struct Stat {
    name: String,
    binary: Option<(usize, usize)>,
    ins: usize,
    del: usize,
}

fn stats(changes: &Changes) -> Vec<Stat> {
    let empty: &[u8] = b"";
    changes
        .changes
        .iter()
        .map(|c| {
            let o = c.old.as_ref().map_or(empty, Blob::data);
            let n = c.new.as_ref().map_or(empty, Blob::data);
            let name = git_quote(&c.path);
            if is_binary(o) || is_binary(n) {
                Stat {
                    name,
                    binary: Some((o.len(), n.len())),
                    ins: 0,
                    del: 0,
                }
            } else {
                let (ins, del) = line_counts(o, n);
                Stat {
                    name,
                    binary: None,
                    ins,
                    del,
                }
            }
        })
        .collect()
}

/// `git diff --stat`-style summary.
pub fn stat(changes: &Changes) -> Vec<u8> {
    let stats = stats(changes);
    let mut out = Vec::new();
    let name_w = stats
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    let max_total = stats.iter().map(|s| s.ins + s.del).max().unwrap_or(0);
    let num_w = max_total.to_string().len();
    let graph_w = 50usize;
    let (mut ti, mut td) = (0, 0);
    for s in &stats {
        ti += s.ins;
        td += s.del;
        let pad = name_w - s.name.chars().count();
        match s.binary {
            Some((a, b)) => {
                let _ = writeln!(out, " {}{} | Bin {a} -> {b} bytes", s.name, " ".repeat(pad));
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
                let _ = writeln!(
                    out,
                    " {}{} | {:>num_w$} {}{}",
                    s.name,
                    " ".repeat(pad),
                    total,
                    "+".repeat(gi),
                    "-".repeat(gd)
                );
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
        let _ = writeln!(out, "{line}");
    }
    out
}

fn side(b: Option<&Blob>) -> serde_json::Value {
    match b {
        None => serde_json::Value::Null,
        Some(b) => {
            let mut v = json!({
                "kind": if b.is_link() { "symlink" } else { "file" },
                "mode": format!("{:o}", b.git_mode()),
                "size": b.data().len(),
                "sha256": hex::encode(Sha256::digest(b.data())),
            });
            if let Blob::Link { target } = b {
                v["target"] = json!(String::from_utf8_lossy(target));
                v["target_quoted"] = json!(git_quote(target));
            }
            v
        }
    }
}

/// The JSON document of `diff --format json`.
pub fn json_value(changes: &Changes) -> serde_json::Value {
    let stats = stats(changes);
    let files: Vec<_> = changes
        .changes
        .iter()
        .zip(&stats)
        .map(|(c, s)| {
            let status = match (&c.old, &c.new) {
                (None, _) => "added",
                (_, None) => "deleted",
                (Some(o), Some(n)) if o.is_link() != n.is_link() => "type-changed",
                _ => "modified",
            };
            json!({
                "path": String::from_utf8_lossy(&c.path),
                "path_quoted": git_quote(&c.path),
                "status": status,
                "old": side(c.old.as_ref()),
                "new": side(c.new.as_ref()),
                "binary": s.binary.is_some(),
                "insertions": s.ins,
                "deletions": s.del,
            })
        })
        .collect();
    let skipped: Vec<_> = changes
        .skipped
        .iter()
        .map(|s| {
            json!({
                "path": String::from_utf8_lossy(&s.path),
                "path_quoted": git_quote(&s.path),
                "kind": s.kind,
            })
        })
        .collect();
    json!({
        "files": files,
        "skipped": skipped,
        "files_changed": stats.len(),
        "insertions": stats.iter().map(|s| s.ins).sum::<usize>(),
        "deletions": stats.iter().map(|s| s.del).sum::<usize>(),
    })
}
