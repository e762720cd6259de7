//! `hutch session glob` / `hutch session grep`: the agent's search tools,
//! run **inside** the session's sandbox, never over the host's view of the
//! upper directory.
//!
//! Each search is one sandbox like a session command (default profile, the
//! session's workspace at `/workspace`, here remounted read-only, no
//! network, the session lock held, never past the session deadline) whose
//! program is hutch's own static binary, bind-mounted read-only at
//! [`HELPER_PATH`] and run as `__glob` / `__grep` ([`helper`]). So it works
//! in any image, with or without `rg`; grep uses `rg` when the sandbox has
//! one (`--engine auto`). The helper bounds its output (matches, bytes)
//! and stops early; its output is captured (bounded again by the
//! launcher's output cap) and checked here. Searches do not count against
//! the command budget; each leaves a `search` line in `audit.jsonl`.

pub mod helper;
pub mod pattern;

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde_json::{Value, json};

use super::machine::InternalError;
use crate::launch::{self, Outcome, RunOptions};
use crate::spec::{ByteSize, Duration, FsOp};
use crate::util::clock::now_ms;
use crate::workspace::{RelPath, StateDir, WORKSPACE_DIR, WorkspaceError};

/// Where the helper binary appears inside the sandbox.
pub const HELPER_PATH: &str = "/run/hutch/hutch";

/// Output bytes beyond `--max-bytes` the launcher lets through (the
/// helper's start and final lines).
const OUTPUT_SLACK: u64 = 4096;

/// Default bounds.
const DEFAULT_MAX_MATCHES: u64 = 1000;
const DEFAULT_MAX_BYTES: u64 = 1 << 20;
const DEFAULT_MAX_LINE_BYTES: u64 = 1024;
const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// The largest `--max-bytes`: the output is held in memory.
const MAX_MAX_BYTES: u64 = 256 << 20;

/// What a search found.
#[derive(Debug, Serialize)]
pub struct SearchResult {
    /// The pattern (glob) or regular expression (grep).
    pub pattern: String,
    /// The searched path, relative to the workspace (`.` for all of it).
    pub path: String,
    /// `builtin` or `rg`.
    pub engine: String,
    /// glob: `{path, path_quoted, kind}`; grep: `{path, path_quoted, line,
    /// text, text_truncated}` (with `--files-with-matches`: `{path,
    /// path_quoted}`).
    pub matches: Vec<Value>,
    /// A bound ended the search early (`truncated_by` says which:
    /// `max-matches`, `max-bytes`, `max-line-bytes` or `timeout`).
    pub truncated: bool,
    pub truncated_by: Option<String>,
    pub duration_ms: u64,
}

/// `hutch session glob|grep ID ...` (`tool` is `glob` or `grep`).
pub fn search(
    state: &StateDir,
    tool: &'static str,
    args: Vec<OsString>,
    wait: bool,
) -> Result<SearchResult> {
    let req = parse(tool, args)?;
    let exe = std::env::current_exe().context("the path of the hutch binary")?;
    let mut spec = crate::spec::default_profile();
    spec.fs.push(FsOp::RoBind {
        src: exe,
        dest: HELPER_PATH.into(),
        optional: false,
    });
    spec.limits.wall_clock = Some(Duration(req.timeout));
    spec.limits.output_bytes = Some(ByteSize(req.max_bytes + OUTPUT_SLACK));
    spec.command = req.helper_argv();
    let mut session = state.open_session(&req.id)?.with_wait(wait);
    let started = now_ms();
    let (report, stdout) = {
        let _lock = session.lock()?;
        let (mut spec, _) = session.command_spec_at(spec, std::path::Path::new(WORKSPACE_DIR))?;
        // Searching never changes the workspace.
        spec.fs.push(FsOp::RemountRo {
            dest: WORKSPACE_DIR.into(),
            recursive: true,
        });
        let opts = RunOptions {
            status_file: None,
            capture_bytes: Some((req.max_bytes + OUTPUT_SLACK) as usize),
            quiet: true,
            // Counting the session's upper would cost O(its size).
            skip_kept_changes: true,
            ..RunOptions::default()
        };
        let finished = with_stdout_discarded(|| launch::launch(&spec, &opts, launch::Mode::Auto))?
            .map_err(anyhow::Error::new)?;
        let [stdout, _] = finished.captured;
        let report = finished.report;
        (report, stdout)
    };
    if report.reason == Outcome::SetupFailed {
        let line = report
            .error
            .clone()
            .unwrap_or_else(|| "the search sandbox failed".into());
        return Err(WorkspaceError::SetupFailed(line).into());
    }
    let stdout = stdout.ok_or_else(|| {
        InternalError(format!(
            "{tool}: the search helper's output was not captured"
        ))
    })?;
    let mut result = SearchResult {
        pattern: req.pattern.clone(),
        path: req.base.clone(),
        engine: String::new(),
        matches: Vec::new(),
        truncated: false,
        truncated_by: None,
        duration_ms: report.duration_ms,
    };
    let mut done = false;
    let complete = match stdout.head.iter().rposition(|b| *b == b'\n') {
        Some(end) => &stdout.head[..end],
        None => &[][..],
    };
    for line in complete.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line).map_err(|_| {
            InternalError(format!(
                "{tool}: the search helper wrote a line that is not JSON"
            ))
        })?;
        if let Some(e) = v.get("error") {
            let message = e.as_str().unwrap_or("the search failed");
            return Err(match v["kind"].as_str() {
                Some("usage") => anyhow!("{tool}: {message}"),
                _ => WorkspaceError::Io {
                    what: tool.to_string(),
                    source: std::io::Error::other(message.to_string()),
                }
                .into(),
            });
        }
        if v.get("start").is_some() {
            result.engine = v["engine"].as_str().unwrap_or_default().to_string();
        } else if v.get("done").is_some() {
            done = true;
            result.truncated_by = v["truncated_by"].as_str().map(str::to_string);
        } else if check_match(&v) {
            if result.matches.len() as u64 >= req.max_matches {
                result.truncated_by.get_or_insert("max-matches".into());
                continue;
            }
            result.matches.push(v);
        } else {
            let e = format!("{tool}: the search helper wrote a malformed match");
            return Err(InternalError(e).into());
        }
    }
    if report.reason == Outcome::TimedOut {
        result.truncated_by = Some("timeout".into());
    } else if stdout.total > stdout.head.len() as u64 || report.output_truncated {
        result.truncated_by.get_or_insert("max-bytes".into());
    } else if !done {
        let why = report.error.as_deref().unwrap_or(match report.reason {
            Outcome::OomKilled => "out of memory",
            Outcome::PidsLimitHit => "process limit",
            _ => "no final line",
        });
        let e = format!("{tool}: the search helper ended ({why}) without a result");
        return Err(InternalError(e).into());
    }
    result.truncated = result.truncated_by.is_some();
    session.update_info(|i| i.used_unix_ms = now_ms())?;
    session.audit(&json!({
        "event": "search", "tool": tool, "time_unix_ms": started,
        "pattern": result.pattern, "path": result.path, "engine": result.engine,
        "matches": result.matches.len(), "truncated_by": result.truncated_by,
        "duration_ms": result.duration_ms,
    }))?;
    Ok(result)
}

/// A match line has a relative `path` without `..` (and `path_quoted`).
fn check_match(v: &Value) -> bool {
    let Some(p) = v["path"].as_str() else {
        return false;
    };
    v["path_quoted"].is_string()
        && !p.is_empty()
        && !p.starts_with('/')
        && !p.split('/').any(|c| c == "..")
}

/// Run `f` with hutch's stdout on /dev/null: the launcher relays the
/// sandbox's output there while the capture keeps it. Stdout is restored
/// whatever `f` returns.
fn with_stdout_discarded<T>(f: impl FnOnce() -> T) -> Result<T> {
    let mut stdout = std::io::stdout();
    let _ = stdout.flush();
    let saved = stdout
        .as_fd()
        .try_clone_to_owned()
        .context("duplicate stdout")?;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("open /dev/null")?;
    crate::sys::dup2(null.as_fd(), 1)?;
    let out = f();
    crate::sys::dup2(saved.as_fd(), 1)?;
    Ok(out)
}

/// A parsed search request.
struct Request {
    tool: &'static str,
    id: String,
    pattern: String,
    /// Workspace-relative, `.` for the root.
    base: String,
    glob: Option<String>,
    /// `--exclude`: paths left out, directories with everything below.
    exclude: Vec<String>,
    ignore_case: bool,
    fixed: bool,
    files_only: bool,
    max_matches: u64,
    max_bytes: u64,
    max_line_bytes: u64,
    engine: String,
    timeout: std::time::Duration,
}

impl Request {
    fn helper_argv(&self) -> Vec<String> {
        let mut v = vec![
            HELPER_PATH.to_string(),
            format!("__{}", self.tool),
            "--base".into(),
            self.base.clone(),
            "--max-matches".into(),
            self.max_matches.to_string(),
            "--max-bytes".into(),
            self.max_bytes.to_string(),
        ];
        for x in &self.exclude {
            v.extend(["--exclude".into(), x.clone()]);
        }
        if self.tool == "glob" {
            v.extend(["--glob".into(), self.pattern.clone()]);
            return v;
        }
        v.extend(["--regex".into(), self.pattern.clone()]);
        v.extend(["--max-line-bytes".into(), self.max_line_bytes.to_string()]);
        v.extend(["--engine".into(), self.engine.clone()]);
        if let Some(g) = &self.glob {
            v.extend(["--glob".into(), g.clone()]);
        }
        if self.ignore_case {
            v.push("--ignore-case".into());
        }
        if self.fixed {
            v.push("--fixed-strings".into());
        }
        if self.files_only {
            v.push("--files-with-matches".into());
        }
        v
    }
}

fn parse(tool: &'static str, args: Vec<OsString>) -> Result<Request> {
    let mut it = args.into_iter();
    let string = |v: Option<OsString>, what: &str| -> Result<String> {
        v.with_context(|| format!("{what} needs a value"))?
            .into_string()
            .map_err(|_| anyhow!("{what}: value is not UTF-8"))
    };
    let id = string(it.next(), "missing session ID;")?;
    let mut req = Request {
        tool,
        id,
        pattern: String::new(),
        base: ".".into(),
        glob: None,
        exclude: Vec::new(),
        ignore_case: false,
        fixed: false,
        files_only: false,
        max_matches: DEFAULT_MAX_MATCHES,
        max_bytes: DEFAULT_MAX_BYTES,
        max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        engine: "auto".into(),
        timeout: DEFAULT_TIMEOUT,
    };
    let mut pattern = None;
    let size = |v: String, flag: &str| -> Result<u64> {
        ByteSize::parse(&v)
            .map(|b| b.0)
            .map_err(|e| anyhow!("{flag}: {e}"))
    };
    let count = |v: String, flag: &str| -> Result<u64> {
        v.parse::<u64>()
            .map_err(|_| anyhow!("{flag}: {v:?} is not a count"))
    };
    while let Some(arg) = it.next() {
        let grep_only = |flag: &str| -> Result<()> {
            if tool == "glob" {
                bail!("glob: {flag} is an option of grep");
            }
            Ok(())
        };
        match arg.to_str() {
            Some("--path") => req.base = string(it.next(), "--path")?,
            Some("--max-matches") => {
                req.max_matches = count(string(it.next(), "--max-matches")?, "--max-matches")?
            }
            Some("--max-bytes") => {
                req.max_bytes = size(string(it.next(), "--max-bytes")?, "--max-bytes")?
            }
            Some("--timeout") => {
                let v = string(it.next(), "--timeout")?;
                req.timeout = Duration::parse(&v)
                    .map_err(|e| anyhow!("--timeout: {e}"))?
                    .0;
            }
            Some("--glob") => {
                grep_only("--glob")?;
                req.glob = Some(string(it.next(), "--glob")?);
            }
            Some("--exclude") => {
                let x = string(it.next(), "--exclude")?;
                pattern::exclusion(&x).map_err(|e| anyhow!("--exclude: {e}"))?;
                req.exclude.push(x);
            }
            Some("-i" | "--ignore-case") => {
                grep_only("--ignore-case")?;
                req.ignore_case = true;
            }
            Some("-F" | "--fixed-strings") => {
                grep_only("--fixed-strings")?;
                req.fixed = true;
            }
            Some("-l" | "--files-with-matches") => {
                grep_only("--files-with-matches")?;
                req.files_only = true;
            }
            Some("--max-line-bytes") => {
                grep_only("--max-line-bytes")?;
                req.max_line_bytes =
                    size(string(it.next(), "--max-line-bytes")?, "--max-line-bytes")?;
            }
            Some("--engine") => {
                grep_only("--engine")?;
                req.engine = string(it.next(), "--engine")?;
                if !matches!(req.engine.as_str(), "auto" | "rg" | "builtin") {
                    bail!("--engine: {:?} is not auto, rg or builtin", req.engine);
                }
            }
            Some("--") => {
                if pattern.is_some() {
                    bail!("{tool}: more than one pattern");
                }
                pattern = Some(string(it.next(), "--")?);
                if let Some(extra) = it.next() {
                    bail!("{tool}: unexpected argument {extra:?} after the pattern");
                }
            }
            Some(flag) if flag.starts_with('-') && flag.len() > 1 => {
                bail!("{tool}: unknown option {flag} (see `hutch session {tool} --help`)")
            }
            _ if pattern.is_none() => pattern = Some(string(Some(arg), "the pattern")?),
            _ => bail!("{tool}: unexpected argument {arg:?}"),
        }
    }
    req.pattern = pattern.with_context(|| {
        format!(
            "{tool}: missing {}",
            if tool == "glob" { "PATTERN" } else { "REGEX" }
        )
    })?;
    if tool == "glob" {
        pattern::Glob::new(&req.pattern).map_err(|e| anyhow!("glob: {e}"))?;
    } else if req.pattern.is_empty() {
        bail!("grep: the regular expression is empty");
    }
    if let Some(g) = &req.glob {
        pattern::Glob::new(g).map_err(|e| anyhow!("--glob: {e}"))?;
    }
    if req.max_bytes > MAX_MAX_BYTES {
        bail!("--max-bytes: at most {MAX_MAX_BYTES} (the results are held in memory)");
    }
    if req.max_line_bytes > req.max_bytes {
        req.max_line_bytes = req.max_bytes;
    }
    let rel = RelPath::parse(Path::new(&req.base))?;
    req.base = if rel.is_root() {
        ".".into()
    } else {
        String::from_utf8(rel.to_bytes()).map_err(|_| anyhow!("--path is not UTF-8"))?
    };
    Ok(req)
}

/// `path:line:text` (or the path alone), names quoted as git does and
/// control characters of the text escaped, so a match cannot steer a
/// terminal.
pub fn human_line(m: &Value) -> String {
    let path = m["path_quoted"].as_str().unwrap_or_default();
    match (m["line"].as_u64(), m["text"].as_str()) {
        (Some(line), Some(text)) => {
            let mut shown = String::with_capacity(text.len());
            for c in text.chars() {
                if c.is_control() || crate::workspace::is_unsafe_char(c) {
                    shown.push_str(&c.escape_unicode().to_string());
                } else {
                    shown.push(c);
                }
            }
            format!("{path}:{line}:{shown}")
        }
        _ => path.to_string(),
    }
}
