//! `hutch __glob` / `hutch __grep`: the search itself, run **inside** a
//! session's sandbox (hutch's own static binary, bind-mounted read-only at
//! [`super::HELPER_PATH`]), over `/workspace` as the sandbox sees it.
//!
//! Output: one JSON line per match, then one `{"done": true, ...}` line
//! (or one `{"error": ...}` line and exit 2). The helper keeps its own
//! bounds (matches, bytes) and stops early; the host checks them again.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::pattern::Glob;
use crate::util::quote::git_quote;

/// Lines longer than this are searched in their first this many bytes.
const SCAN_LINE_MAX: usize = 1 << 20;
/// A file with a NUL byte in its first this many bytes is binary: skipped.
const BINARY_PROBE: usize = 8000;
/// Bytes kept free of the output budget for the final line.
const FINAL_LINE_RESERVE: u64 = 512;
/// An `rg --json` line longer than this is skipped (counted as truncated).
const RG_LINE_MAX: u64 = 4 << 20;

/// What to search for.
struct Request {
    /// `glob` or `grep`.
    tool: &'static str,
    /// Where, relative to the workspace (`.` for all of it).
    base: PathBuf,
    glob: Option<Glob>,
    /// `--exclude`: left out, directories with everything below.
    exclude: Vec<Glob>,
    regex: Option<String>,
    ignore_case: bool,
    fixed: bool,
    files_only: bool,
    max_matches: u64,
    max_bytes: u64,
    max_line_bytes: usize,
    engine: String,
}

/// Why a search failed: the kind the host reports, and the line.
struct Failure {
    kind: &'static str,
    message: String,
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        kind: "usage",
        message: message.into(),
    }
}

fn io(message: impl Into<String>) -> Failure {
    Failure {
        kind: "io",
        message: message.into(),
    }
}

/// Entry point of `hutch __glob ARGS` and `hutch __grep ARGS`.
pub fn main(tool: &'static str, args: Vec<OsString>) -> i32 {
    let mut out = Output {
        w: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock()),
        bytes: 0,
        limit: 0,
        matches: 0,
        max_matches: 0,
        truncated_by: None,
    };
    let result = parse(tool, args).and_then(|req| {
        out.limit = req.max_bytes.saturating_sub(FINAL_LINE_RESERVE);
        out.max_matches = req.max_matches;
        let workspace = Path::new(crate::workspace::WORKSPACE_DIR);
        let root = workspace.join(&req.base);
        std::fs::symlink_metadata(&root).map_err(|e| {
            usage(format!(
                "{} {}",
                git_quote(req.base.as_os_str().as_bytes()),
                if e.kind() == std::io::ErrorKind::NotFound {
                    "does not exist in the workspace".to_string()
                } else {
                    format!("cannot be read: {e}")
                }
            ))
        })?;
        let engine = match (req.tool, req.engine.as_str()) {
            ("glob", _) => "builtin",
            (_, "builtin") => "builtin",
            (_, "rg") => {
                find_rg().ok_or_else(|| usage("--engine rg: no `rg` on the sandbox's PATH"))?;
                "rg"
            }
            (_, _) => {
                if find_rg().is_some() {
                    "rg"
                } else {
                    "builtin"
                }
            }
        };
        // The search base must stay inside the workspace (a symlink in
        // `--path` could lead elsewhere in the sandbox).
        let real = std::fs::canonicalize(&root)
            .map_err(|e| io(format!("resolve the search base: {e}")))?;
        if !real.starts_with(workspace) {
            return Err(usage(format!(
                "{} leads outside the workspace (through a symlink)",
                git_quote(req.base.as_os_str().as_bytes())
            )));
        }
        let _ = writeln!(out.w, "{}", json!({"start": true, "engine": engine}));
        let _ = out.w.flush();
        match engine {
            "rg" => grep_rg(&req, workspace, &mut out)?,
            _ => walk(&req, workspace, &mut out)?,
        }
        Ok(engine)
    });
    let code = match result {
        Ok(engine) => {
            let done = json!({
                "done": true, "engine": engine, "matches": out.matches,
                "truncated": out.truncated_by.is_some(), "truncated_by": out.truncated_by,
            });
            let _ = writeln!(out.w, "{done}");
            0
        }
        Err(f) => {
            let _ = writeln!(out.w, "{}", json!({"error": f.message, "kind": f.kind}));
            2
        }
    };
    let _ = out.w.flush();
    code
}

fn parse(tool: &'static str, args: Vec<OsString>) -> Result<Request, Failure> {
    let mut req = Request {
        tool,
        base: PathBuf::from("."),
        glob: None,
        exclude: Vec::new(),
        regex: None,
        ignore_case: false,
        fixed: false,
        files_only: false,
        max_matches: 1000,
        max_bytes: 1 << 20,
        max_line_bytes: 1024,
        engine: "auto".into(),
    };
    let mut it = args.into_iter();
    let value = |it: &mut std::vec::IntoIter<OsString>, flag: &str| -> Result<String, Failure> {
        it.next()
            .and_then(|v| v.into_string().ok())
            .ok_or_else(|| usage(format!("{flag} needs a UTF-8 value")))
    };
    while let Some(arg) = it.next() {
        match arg.to_str() {
            Some("--base") => req.base = PathBuf::from(value(&mut it, "--base")?),
            Some("--glob") => {
                req.glob = Some(
                    Glob::new(&value(&mut it, "--glob")?)
                        .map_err(|e| usage(format!("glob: {e}")))?,
                )
            }
            Some("--exclude") => req.exclude.push(
                super::pattern::exclusion(&value(&mut it, "--exclude")?)
                    .map_err(|e| usage(format!("--exclude: {e}")))?,
            ),
            Some("--regex") => req.regex = Some(value(&mut it, "--regex")?),
            Some("--ignore-case") => req.ignore_case = true,
            Some("--fixed-strings") => req.fixed = true,
            Some("--files-with-matches") => req.files_only = true,
            Some("--max-matches") => req.max_matches = number(&value(&mut it, "--max-matches")?)?,
            Some("--max-bytes") => req.max_bytes = number(&value(&mut it, "--max-bytes")?)?,
            Some("--max-line-bytes") => {
                req.max_line_bytes = number(&value(&mut it, "--max-line-bytes")?)? as usize
            }
            Some("--engine") => req.engine = value(&mut it, "--engine")?,
            _ => return Err(usage(format!("unexpected argument {arg:?}"))),
        }
    }
    if tool == "grep" && req.regex.is_none() {
        return Err(usage("grep needs --regex"));
    }
    if tool == "glob" && req.glob.is_none() {
        return Err(usage("glob needs --glob"));
    }
    Ok(req)
}

fn number(v: &str) -> Result<u64, Failure> {
    v.parse()
        .map_err(|_| usage(format!("{v:?} is not a number")))
}

/// The match lines and their budget.
struct Output<W: Write> {
    w: W,
    bytes: u64,
    limit: u64,
    matches: u64,
    max_matches: u64,
    truncated_by: Option<&'static str>,
}

impl<W: Write> Output<W> {
    /// Whether another match may still be written.
    fn open(&self) -> bool {
        self.truncated_by.is_none()
    }

    /// Write one match, or note which bound stopped the search.
    fn record(&mut self, v: &Value) -> Result<(), Failure> {
        if self.matches >= self.max_matches {
            self.truncated_by = Some("max-matches");
            return Ok(());
        }
        let line = v.to_string();
        if self.bytes + line.len() as u64 + 1 > self.limit {
            self.truncated_by = Some("max-bytes");
            return Ok(());
        }
        self.bytes += line.len() as u64 + 1;
        self.matches += 1;
        writeln!(self.w, "{line}").map_err(|e| io(format!("write the results: {e}")))?;
        if self.matches.is_multiple_of(64) {
            // Whatever was found survives a timeout.
            self.w
                .flush()
                .map_err(|e| io(format!("write the results: {e}")))?;
        }
        Ok(())
    }
}

/// `rg` on the sandbox's PATH, if any.
fn find_rg() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("rg"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
}

fn path_fields(rel: &[u8]) -> (String, String) {
    (String::from_utf8_lossy(rel).into_owned(), git_quote(rel))
}

/// The components of a workspace-relative path, for matching.
fn components(rel: &[u8]) -> Vec<String> {
    rel.split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect()
}

/// Whether the workspace-relative `rel` is left out by `--exclude`.
fn is_excluded(req: &Request, rel: &[u8]) -> bool {
    if req.exclude.is_empty() {
        return false;
    }
    let comps = components(rel);
    let comps: Vec<&str> = comps.iter().map(String::as_str).collect();
    super::pattern::excluded(&req.exclude, &comps)
}

/// Whether `rel` passes `--glob` (a pattern without `/` is matched
/// against the file name, like rg's and gitignore's).
fn glob_accepts(g: &Glob, rel: &[u8], base: &[u8]) -> bool {
    let comps = components(rel);
    if g.basename_only {
        return comps.last().is_some_and(|n| g.matches(&[n.as_str()]));
    }
    // Relative to the search base, as rg takes it.
    let skip = components(base).len();
    let under: Vec<&str> = comps.iter().skip(skip).map(String::as_str).collect();
    g.matches(&under)
}

/// The built-in engine: an iterative walk in name order (symlinks are
/// listed, never followed), glob matching or a line-by-line regex search.
fn walk(req: &Request, workspace: &Path, out: &mut Output<impl Write>) -> Result<(), Failure> {
    let regex = match &req.regex {
        Some(r) => {
            let pattern = if req.fixed {
                regex_lite::escape(r)
            } else {
                r.clone()
            };
            Some(
                regex_lite::RegexBuilder::new(&pattern)
                    .case_insensitive(req.ignore_case)
                    .build()
                    .map_err(|e| usage(format!("invalid regex: {e}")))?,
            )
        }
        None => None,
    };
    let base = req.base.as_os_str().as_bytes().to_vec();
    let base = if base == b"." { Vec::new() } else { base };
    let root_meta = std::fs::symlink_metadata(workspace.join(&req.base))
        .map_err(|e| io(format!("stat the search base: {e}")))?;
    // A stack of directories still to list (workspace-relative).
    if !root_meta.is_dir() {
        return match &regex {
            Some(re) => grep_file(req, re, workspace, &base, out),
            None => Err(usage("glob --path must name a directory")),
        };
    }
    // Depth first, each directory's entries in name order, a directory's
    // contents where its name sorts (as `rg --sort path` walks).
    let mut stack: Vec<(Vec<u8>, std::vec::IntoIter<Entry>)> =
        vec![(base.clone(), list_dir(workspace, &base).into_iter())];
    while let Some((dir, entries)) = stack.last_mut() {
        let Some((name, ty)) = entries.next() else {
            stack.pop();
            continue;
        };
        let mut rel = dir.clone();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(&name);
        if is_excluded(req, &rel) {
            continue;
        }
        if ty.is_dir() {
            let descend = match (&req.glob, &regex) {
                (Some(g), None) => {
                    let comps = components(&rel);
                    let comps: Vec<&str> = comps.iter().map(String::as_str).collect();
                    g.could_match_below(&comps)
                }
                _ => true,
            };
            if descend {
                let listing = list_dir(workspace, &rel);
                stack.push((rel, listing.into_iter()));
            }
            continue;
        }
        match &regex {
            None => {
                let g = req.glob.as_ref().expect("glob has a pattern");
                let comps = components(&rel);
                let comps: Vec<&str> = comps.iter().map(String::as_str).collect();
                if g.matches(&comps) {
                    let (path, quoted) = path_fields(&rel);
                    let kind = if ty.is_file() {
                        "file"
                    } else if ty.is_symlink() {
                        "symlink"
                    } else {
                        "other"
                    };
                    out.record(&json!({"path": path, "path_quoted": quoted, "kind": kind}))?;
                }
            }
            Some(re) => {
                // Links are not followed; FIFOs and devices never opened.
                if ty.is_file()
                    && req
                        .glob
                        .as_ref()
                        .is_none_or(|g| glob_accepts(g, &rel, &base))
                {
                    grep_file(req, re, workspace, &rel, out)?;
                }
            }
        }
        if !out.open() {
            return Ok(());
        }
    }
    Ok(())
}

/// A directory entry: its name and type.
type Entry = (Vec<u8>, std::fs::FileType);

/// The entries of a workspace directory, sorted by name (an unreadable
/// directory is skipped, as rg does).
fn list_dir(workspace: &Path, rel: &[u8]) -> Vec<Entry> {
    let Ok(entries) = std::fs::read_dir(workspace.join(std::ffi::OsStr::from_bytes(rel))) else {
        return Vec::new();
    };
    let mut names: Vec<Entry> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let t = e.file_type().ok()?;
            Some((e.file_name().as_bytes().to_vec(), t))
        })
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    names
}

/// Search one regular file line by line.
fn grep_file(
    req: &Request,
    re: &regex_lite::Regex,
    workspace: &Path,
    rel: &[u8],
    out: &mut Output<impl Write>,
) -> Result<(), Failure> {
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(workspace.join(std::ffi::OsStr::from_bytes(rel)))
    else {
        return Ok(());
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    if reader
        .fill_buf()
        .is_ok_and(|b| b[..b.len().min(BINARY_PROBE)].contains(&0))
    {
        return Ok(());
    }
    let (path, quoted) = path_fields(rel);
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let n = match (&mut reader)
            .take(SCAN_LINE_MAX as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(n) => n,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        number += 1;
        if line.last() != Some(&b'\n') && line.len() >= SCAN_LINE_MAX {
            skip_line(&mut reader);
        }
        if line.contains(&0) {
            return Ok(()); // binary from here on
        }
        let text = String::from_utf8_lossy(strip_eol(&line));
        if !re.is_match(&text) {
            continue;
        }
        if req.files_only {
            return out.record(&json!({"path": path, "path_quoted": quoted}));
        }
        let (shown, cut) = cut_line(&text, req.max_line_bytes);
        out.record(&json!({
            "path": path, "path_quoted": quoted, "line": number,
            "text": shown, "text_truncated": cut,
        }))?;
        if !out.open() {
            return Ok(());
        }
    }
}

fn skip_line(reader: &mut impl BufRead) {
    loop {
        let Ok(buf) = reader.fill_buf() else { return };
        if buf.is_empty() {
            return;
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return;
            }
            None => {
                let len = buf.len();
                reader.consume(len);
            }
        }
    }
}

fn strip_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn cut_line(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// The `rg` engine: `rg --json`, translated and bounded; rg is killed as
/// soon as a bound is reached.
fn grep_rg(req: &Request, workspace: &Path, out: &mut Output<impl Write>) -> Result<(), Failure> {
    let rg = find_rg().ok_or_else(|| usage("no `rg` on the sandbox's PATH"))?;
    let mut cmd = Command::new(rg);
    cmd.current_dir(workspace)
        .env_remove("RIPGREP_CONFIG_PATH")
        .args([
            "--json",
            "--no-config",
            "--no-ignore",
            "--hidden",
            "--no-follow",
            "--no-messages",
            "--sort",
            "path",
        ]);
    if req.ignore_case {
        cmd.arg("--ignore-case");
    } else {
        cmd.arg("--case-sensitive");
    }
    if req.fixed {
        cmd.arg("--fixed-strings");
    }
    if req.files_only {
        cmd.args(["--max-count", "1"]);
    }
    let base = req.base.as_os_str().as_bytes().to_vec();
    let regex = req.regex.as_deref().unwrap_or_default();
    cmd.arg("--regexp").arg(regex).arg("--").arg(&req.base);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| io(format!("cannot start rg: {e}")))?;
    let stderr = child.stderr.take().expect("piped");
    // Drained aside (bounded), so rg never blocks on a full stderr pipe.
    let errors = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut r = stderr;
        let _ = (&mut r).take(4096).read_to_end(&mut kept);
        let _ = std::io::copy(&mut r, &mut std::io::sink());
        kept
    });
    let mut reader = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = Vec::new();
    let result = (|| -> Result<(), Failure> {
        loop {
            line.clear();
            let n = (&mut reader)
                .take(RG_LINE_MAX)
                .read_until(b'\n', &mut line)
                .map_err(|e| io(format!("read rg's output: {e}")))?;
            if n == 0 {
                return Ok(());
            }
            if line.last() != Some(&b'\n') && line.len() as u64 >= RG_LINE_MAX {
                skip_line(&mut reader);
                out.truncated_by.get_or_insert("max-line-bytes");
                continue;
            }
            let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if v["type"] != "match" {
                continue;
            }
            let data = &v["data"];
            let Some(rel) = rg_bytes(&data["path"]) else {
                continue;
            };
            let rel = rel.strip_prefix(b"./").map(<[u8]>::to_vec).unwrap_or(rel);
            if is_excluded(req, &rel) {
                continue;
            }
            if let Some(g) = &req.glob
                && !glob_accepts(g, &rel, if base == b"." { b"" } else { &base })
            {
                continue;
            }
            let (path, quoted) = path_fields(&rel);
            if req.files_only {
                out.record(&json!({"path": path, "path_quoted": quoted}))?;
            } else {
                let text = rg_bytes(&data["lines"]).unwrap_or_default();
                let text = String::from_utf8_lossy(strip_eol(&text)).into_owned();
                let (shown, cut) = cut_line(&text, req.max_line_bytes);
                out.record(&json!({
                    "path": path, "path_quoted": quoted,
                    "line": data["line_number"].as_u64().unwrap_or(0),
                    "text": shown, "text_truncated": cut,
                }))?;
            }
            if !out.open() {
                return Ok(());
            }
        }
    })();
    let _ = child.kill();
    let status = child.wait().map_err(|e| io(format!("wait for rg: {e}")))?;
    let errors = errors.join().unwrap_or_default();
    result?;
    // 0: matches, 1: none; 2 with a message: a bad pattern (rg reports
    // unreadable files only as 2 with --no-messages, and still searched
    // the rest). Killed by us: a bound was reached.
    if status.code() == Some(2) && !errors.is_empty() && out.matches == 0 {
        // rg's message: a heading, the pattern with a caret, the reason last.
        let text = String::from_utf8_lossy(&errors);
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next().unwrap_or_default();
        let last = lines.next_back().unwrap_or_default();
        return Err(usage(format!("rg: {first} {last}").trim_end().to_string()));
    }
    Ok(())
}

/// An rg JSON "arbitrary data" value: `{"text": ...}` or `{"bytes": base64}`.
fn rg_bytes(v: &Value) -> Option<Vec<u8>> {
    if let Some(t) = v["text"].as_str() {
        return Some(t.as_bytes().to_vec());
    }
    v["bytes"].as_str().and_then(unbase64)
}

/// Decode standard base64 (rg's encoding of non-UTF-8 data).
fn unbase64(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= val(*c)? << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_with_the_encoder() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"\xff\x00abc\x80"] {
            let enc = crate::cli::machine::base64(data);
            assert_eq!(unbase64(&enc).as_deref(), Some(data));
        }
        assert_eq!(unbase64("!!"), None);
    }

    #[test]
    fn lines_are_cut_at_character_boundaries() {
        assert_eq!(cut_line("abc", 5), ("abc", false));
        assert_eq!(cut_line("abcdef", 3), ("abc", true));
        assert_eq!(cut_line("aé", 2), ("a", true));
    }

    #[test]
    fn the_output_budget_stops_at_either_bound() {
        let mut out = Output {
            w: Vec::new(),
            bytes: 0,
            limit: 30,
            matches: 0,
            max_matches: 2,
            truncated_by: None,
        };
        out.record(&json!({"p": "a"})).ok();
        out.record(&json!({"p": "b"})).ok();
        assert!(out.open());
        out.record(&json!({"p": "c"})).ok();
        assert_eq!(out.truncated_by, Some("max-matches"));
        let mut out = Output {
            w: Vec::new(),
            bytes: 0,
            limit: 12,
            matches: 0,
            max_matches: 10,
            truncated_by: None,
        };
        out.record(&json!({"p": "a"})).ok();
        out.record(&json!({"p": "b"})).ok();
        assert_eq!(out.truncated_by, Some("max-bytes"));
        assert_eq!(out.matches, 1);
    }
}
