//! Running one command in a session: a fresh sandbox whose `/workspace`
//! (also the cwd) is the overlay of the baseline and the session's upper.
//! Commands of a session never overlap (the session lock is held for the
//! whole run), and none outlives the session deadline or exceeds the
//! command budget. Each command leaves an `audit.jsonl` line with its argv,
//! start/end, exit report and the bounded head/tail of stdout/stderr, and
//! (when it uses the egress proxy) one line per proxy decision, bounded.

use std::ffi::CStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::launch::{self, ExitReport, Outcome, RunOptions};
use crate::spec::{Duration, FsOp, Network, Spec};
use crate::sys;
use crate::util::clock::now_ms;

use super::disk::DiskUsage;
use super::error::{Result, WorkspaceError};
use super::session::{RunningCommand, Session};

/// Bytes of the head and of the tail of stdout/stderr kept in the audit.
pub const AUDIT_CAPTURE_BYTES: usize = 4096;
/// Egress decisions of one command copied into `audit.jsonl`; later ones
/// are only counted.
pub const AUDIT_EGRESS_MAX_LINES: usize = 1000;
/// Bytes of egress decisions of one command copied into `audit.jsonl`.
pub const AUDIT_EGRESS_MAX_BYTES: usize = 1 << 20;
/// A longer proxy audit line is counted, not copied.
const EGRESS_LINE_MAX: usize = 16 * 1024;
/// Where the proxy of the running command writes its decisions (in the
/// session directory; moved into `audit.jsonl`, bounded, after the command).
const EGRESS_FILE: &CStr = c"egress.jsonl";
const EGRESS_NAME: &str = "egress.jsonl";

/// What one session command did.
#[derive(Debug)]
pub struct RunRecord {
    pub report: ExitReport,
    /// The session deadline (not the command's own timeout) ended it.
    pub deadline_hit: bool,
    /// Egress decisions, when the command used the proxy.
    pub egress: Option<EgressSummary>,
    /// The session's disk use after the command, when it has a quota.
    pub disk: Option<DiskUsage>,
}

impl Session {
    /// The Spec of one command: `base` (start from
    /// [`Session::base_spec`], the session's defaults, and change what the
    /// command needs; no workspace) plus the overlay of the session's
    /// layers at its workspace path, which is also the cwd unless `base`
    /// sets one (a relative one is inside it), and a wall clock never
    /// beyond the session deadline. Returns the spec and whether the
    /// deadline is what bounds the wall clock.
    pub fn command_spec(&self, spec: Spec) -> Result<(Spec, bool)> {
        let dest = self.info.workspace_path.clone();
        self.command_spec_at(spec, &dest)
    }

    /// [`Session::command_spec`] with the workspace at `dest` instead of
    /// the session's workspace path (hutch's own helpers, e.g. `session
    /// glob`, which report paths relative to the workspace).
    pub fn command_spec_at(&self, mut spec: Spec, dest: &Path) -> Result<(Spec, bool)> {
        if let Some(image) = &self.info.image {
            if spec
                .image
                .as_ref()
                .is_some_and(|i| i.digest != image.digest)
            {
                return Err(WorkspaceError::OtherImage {
                    id: self.info.id.clone(),
                    digest: image.digest.clone().unwrap_or_default(),
                });
            }
            crate::spec::use_image(&mut spec, image.clone());
            if let Some(start) = self.info.id_range_start {
                spec.identity.id_range = Some(crate::spec::IdRange::Session {
                    start,
                    session: self.path.clone(),
                });
            }
        }
        // A quota's image is attached again if it is not (after a reboot).
        drop(self.rw()?);
        let (lowers, upper, work) = self.overlay_dirs();
        let dest = dest.to_path_buf();
        spec.fs.push(FsOp::Overlay {
            lowers,
            upper,
            work,
            dest: dest.clone(),
        });
        spec.cwd = Some(match spec.cwd.take() {
            None => dest,
            // A relative --chdir is inside the workspace.
            Some(c) if c.is_relative() => dest.join(c),
            Some(c) => c,
        });
        let mut bounded_by_deadline = false;
        if let Some(deadline) = self.info.deadline_unix_ms {
            let now = now_ms();
            if now >= deadline {
                return Err(WorkspaceError::Budget {
                    id: self.info.id.clone(),
                    reason: "the session deadline has passed".into(),
                });
            }
            let left = std::time::Duration::from_millis(deadline - now);
            match spec.limits.wall_clock {
                Some(d) if d.0 <= left => {}
                _ => {
                    spec.limits.wall_clock = Some(Duration(left));
                    bounded_by_deadline = true;
                }
            }
        }
        Ok((spec, bounded_by_deadline))
    }

    /// Run `base.command` in the session (see [`Session::command_spec`]).
    /// The launcher relays the workload's stdout/stderr to ours. Refused
    /// (and audited) when the budget, deadline, disk quota, a `--network
    /// none` seal or a lock of the session's defaults forbids it.
    pub fn run(&mut self, base: Spec) -> Result<RunRecord> {
        self.run_with_status(base, None)
    }

    /// [`Session::run`], also writing the launcher's start event and exit
    /// report to `status_file` (JSON lines, like `hutch run --status-file`).
    pub fn run_with_status(
        &mut self,
        base: Spec,
        status_file: Option<PathBuf>,
    ) -> Result<RunRecord> {
        self.run_on_terminal(base, status_file, None)
    }

    /// [`Session::run_with_status`], the command on a terminal of its
    /// sandbox when `terminal` is given (`session run --pty`: see
    /// [`crate::RunOptions::terminal`]); such a command is always launched
    /// cold (a warm sandbox's stdio is fixed when it is built).
    pub fn run_on_terminal(
        &mut self,
        base: Spec,
        status_file: Option<PathBuf>,
        terminal: Option<crate::launch::TerminalOptions>,
    ) -> Result<RunRecord> {
        // `session.json` as read under the lock (only read: the command's
        // start writes it once, below).
        let lock = self.lock_reloaded()?;
        let argv = base.command.clone();
        if let Err(e) = self.admit(&base) {
            self.audit(&json!({
                "event": "refused", "what": "run", "time_unix_ms": now_ms(),
                "argv": argv, "reason": e.to_string(),
            }))?;
            return Err(e);
        }
        let (mut spec, bounded) = self.command_spec(base)?;
        spec.labels
            .insert(crate::registry::SESSION_LABEL.into(), self.info.id.clone());
        if let Some(state) = self.path.parent().and_then(|p| p.to_str()) {
            spec.labels
                .insert(crate::registry::STATE_LABEL.into(), state.to_string());
        }
        // The proxy's decisions go to a file of the session first; the
        // caller's own `--audit` file, if any, gets them all afterwards.
        let user_audit = match &mut spec.network {
            Network::Proxy(policy) => {
                remove_file_at(self.dir_fd(), EGRESS_FILE)?;
                let user = policy.audit.take();
                policy.audit = Some(self.path.join(EGRESS_NAME));
                Some(user)
            }
            _ => None,
        };
        let start = now_ms();
        // The command's start is a new marker file, not a rewrite of
        // `session.json` (its end is: once, below); a marker that outlives
        // this process makes the next operation record the end and count
        // the command.
        let seq = self.info.commands_run + 1;
        let me = crate::registry::ProcessRef::of(std::process::id() as i32);
        self.mark_running(&RunningCommand {
            command_seq: seq,
            pid: me.map_or(0, |me| me.pid),
            start_time: me.map_or(0, |me| me.start_time),
            start_unix_ms: start,
        })?;
        self.info.commands_run = seq;
        self.info.used_unix_ms = start;
        self.audit(&json!({
            "event": "command-start", "command_seq": seq, "time_unix_ms": start,
            "argv": spec.command,
            "timeout_ms": spec.limits.wall_clock.map(|d| d.0.as_millis() as u64),
            "workspace": {
                "path": self.info.workspace_path,
                "layers": self.info.layer_count() + 1,
                "cwd": spec.cwd,
            },
        }))?;
        let opts = RunOptions {
            status_file: status_file.clone(),
            capture_bytes: Some(AUDIT_CAPTURE_BYTES),
            quiet: true,
            // The session's upper holds every command's changes: counting
            // it would cost O(all of them) per command.
            skip_kept_changes: true,
            terminal,
            ..Default::default()
        };
        // From the session's warm server when it has a sandbox of this
        // command's shape (docs/warm.md); else launched now: in-process
        // from a single-threaded caller, else through the helper.
        let warm = match terminal {
            Some(_) => None,
            None => super::warm::claim(self, &spec, &opts, lock.upper()),
        };
        let result = match warm {
            Some(r) => r,
            None => launch::launch(&spec, &opts, launch::Mode::Auto),
        }
        .map(|f| (f.report, f.captured));
        let end = now_ms();
        let egress = match user_audit {
            Some(user) => Some(self.collect_egress(seq, user.as_deref())?),
            None => None,
        };
        let disk = self.measure_disk().ok().flatten();
        let (mut report, captured) = match result {
            Ok(r) => r,
            Err(e) => {
                self.audit(&json!({
                    "event": "command", "command_seq": seq, "argv": spec.command,
                    "start_unix_ms": start, "end_unix_ms": end, "error": e.to_string(),
                    "egress": egress, "disk": disk,
                }))?;
                self.record_progress(seq, start, disk)?;
                self.clear_running()?;
                return Err(e.into());
            }
        };
        let deadline_hit = bounded && report.reason == Outcome::TimedOut;
        let disk_limit_hit = disk.is_some_and(|d| d.limit_hit);
        if disk_limit_hit && matches!(report.reason, Outcome::Exited | Outcome::Signaled) {
            let limit = self.info.disk.map_or(0, |d| d.max_bytes);
            report.reason = Outcome::DiskLimitHit;
            report.error.get_or_insert_with(|| {
                format!(
                    "the session's disk limit ({}) was reached: {}",
                    super::disk::human(limit),
                    match self.info.disk.map(|d| d.mechanism) {
                        Some(super::disk::DiskMechanism::LoopExt4) =>
                            "writes beyond it failed with ENOSPC".to_string(),
                        _ => "further commands are refused until files are removed (session rm)"
                            .to_string(),
                    }
                )
            });
            if let Some(path) = &status_file {
                rewrite_exit_line(path, &report);
            }
        }
        let stream = |c: &Option<launch::Captured>| match c {
            None => serde_json::Value::Null,
            Some(c) => json!({
                "total_bytes": c.total,
                "head": String::from_utf8_lossy(&c.head),
                "tail": String::from_utf8_lossy(&c.tail),
            }),
        };
        self.audit(&json!({
            "event": "command", "command_seq": seq, "argv": spec.command,
            "start_unix_ms": start, "end_unix_ms": end, "deadline_hit": deadline_hit,
            "egress": egress, "disk": disk,
            "exit": serde_json::to_value(&report).unwrap_or(serde_json::Value::Null),
            "stdout": stream(&captured[0]), "stderr": stream(&captured[1]),
        }))?;
        self.record_progress(seq, end, disk)?;
        self.clear_running()?;
        Ok(RunRecord {
            report,
            deadline_hit,
            egress,
            disk,
        })
    }

    /// Whether a command with `spec` may start now: budget, disk quota,
    /// seal and locked defaults. The caller holds the lock.
    fn admit(&mut self, spec: &Spec) -> Result<()> {
        if let Some(max) = self.info.max_commands
            && self.info.commands_run >= max
        {
            return Err(WorkspaceError::Budget {
                id: self.info.id.clone(),
                reason: format!("the command budget ({max}) is spent"),
            });
        }
        if let Some(d) = self.info.disk
            && d.mechanism == super::disk::DiskMechanism::Accounted
            && self.info.disk_usage.is_some_and(|u| u.limit_hit)
        {
            // Files may have been removed since (session rm).
            let now = self.measure_disk()?;
            self.update_info(|i| i.disk_usage = now)?;
            if let Some(u) = now.filter(|u| u.limit_hit) {
                return Err(WorkspaceError::Budget {
                    id: self.info.id.clone(),
                    reason: format!(
                        "the session uses {} of its {} disk limit (--disk-max-preferred): remove files (hutch session rm) before running more commands",
                        super::disk::human(u.used_bytes),
                        super::disk::human(d.max_bytes)
                    ),
                });
            }
        }
        if let Some(why) = super::defaults::widening(&self.info, spec) {
            return Err(WorkspaceError::Budget {
                id: self.info.id.clone(),
                reason: why,
            });
        }
        Ok(())
    }

    /// The session's disk use now, when it has a quota.
    pub fn measure_disk(&self) -> Result<Option<DiskUsage>> {
        let Some(d) = self.info.disk else {
            return Ok(None);
        };
        let rw = self.rw()?;
        Ok(Some(match d.mechanism {
            super::disk::DiskMechanism::LoopExt4 => super::disk::image_usage(rw.as_fd())?,
            super::disk::DiskMechanism::Accounted => {
                let upper = sys::open_dir_beneath(rw.as_fd(), c"upper")?;
                let sealed: u64 = self.info.seals.iter().map(|s| s.disk_bytes).sum();
                let used = super::disk::allocated_bytes(upper.as_fd())?.saturating_add(sealed);
                DiskUsage {
                    used_bytes: used,
                    limit_bytes: d.max_bytes,
                    limit_hit: used > d.max_bytes,
                }
            }
        }))
    }
}

/// Replace the exit line of a status file with `report` (the session
/// layer changed it after the launcher wrote it).
fn rewrite_exit_line(path: &Path, report: &ExitReport) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let mut out: String = text
        .lines()
        .filter(|l| !l.contains("\"event\":\"exit\""))
        .map(|l| format!("{l}\n"))
        .collect();
    out += &serde_json::to_string(report).unwrap_or_default();
    out.push('\n');
    let tmp = path.with_extension("hutch-tmp");
    if std::fs::write(&tmp, out).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// How many egress decisions a command made and how many reached
/// `audit.jsonl`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EgressSummary {
    pub decisions: u64,
    pub recorded: u64,
    pub dropped: u64,
}

/// Unlink `name` in `dir`; absent is fine.
fn remove_file_at(dir: std::os::fd::BorrowedFd<'_>, name: &CStr) -> Result<()> {
    match sys::unlink_at(dir, name, false) {
        Ok(()) => Ok(()),
        Err(e) if e.errno == sys::Errno::ENOENT => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl Session {
    /// Move the proxy's decisions of command `seq` into `audit.jsonl`: one
    /// `egress` line each (the proxy's event under `decision`), at most
    /// [`AUDIT_EGRESS_MAX_LINES`] lines and [`AUDIT_EGRESS_MAX_BYTES`]
    /// bytes, then an `egress-dropped` line counting the rest. All of them
    /// are also appended to the caller's own audit file, if one was named.
    fn collect_egress(&self, seq: u64, user_audit: Option<&Path>) -> Result<EgressSummary> {
        let mut summary = EgressSummary::default();
        let file = match sys::open_beneath(
            self.dir_fd(),
            EGRESS_FILE,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            0,
        ) {
            Ok(fd) => File::from(fd),
            Err(e) if e.errno == sys::Errno::ENOENT => return Ok(summary),
            Err(e) => return Err(e.into()),
        };
        let result = self.copy_egress(seq, file, user_audit, &mut summary);
        remove_file_at(self.dir_fd(), EGRESS_FILE)?;
        result?;
        if summary.dropped > 0 {
            self.audit(&json!({
                "event": "egress-dropped", "command_seq": seq,
                "decisions": summary.decisions, "recorded": summary.recorded,
                "dropped": summary.dropped,
                "reason": format!(
                    "at most {AUDIT_EGRESS_MAX_LINES} decisions ({AUDIT_EGRESS_MAX_BYTES} bytes, {EGRESS_LINE_MAX} per line) are kept per command"
                ),
            }))?;
        }
        Ok(summary)
    }

    fn copy_egress(
        &self,
        seq: u64,
        file: File,
        user_audit: Option<&Path>,
        summary: &mut EgressSummary,
    ) -> Result<()> {
        if !file
            .metadata()
            .map_err(|e| WorkspaceError::io("stat the egress audit", e))?
            .is_file()
        {
            return Err(WorkspaceError::EgressAuditNotFile);
        }
        if let Some(path) = user_audit {
            let mut out = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(|e| WorkspaceError::io(format!("open {}", path.display()), e))?;
            let mut src = file
                .try_clone()
                .map_err(|e| WorkspaceError::io("read the egress audit", e))?;
            std::io::copy(&mut src, &mut out)
                .map_err(|e| WorkspaceError::io(format!("append to {}", path.display()), e))?;
            out.flush()
                .map_err(|e| WorkspaceError::io(format!("append to {}", path.display()), e))?;
            std::io::Seek::rewind(&mut src)
                .map_err(|e| WorkspaceError::io("read the egress audit", e))?;
        }
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        let mut bytes = 0usize;
        let read_err = |e| WorkspaceError::io("read the egress audit", e);
        loop {
            line.clear();
            let n = (&mut reader)
                .take(EGRESS_LINE_MAX as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(read_err)?;
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') && line.len() > EGRESS_LINE_MAX {
                // Too long: skip to the end of the line.
                loop {
                    let buf = reader.fill_buf().map_err(read_err)?;
                    if buf.is_empty() {
                        break;
                    }
                    match buf.iter().position(|&b| b == b'\n') {
                        Some(i) => {
                            reader.consume(i + 1);
                            break;
                        }
                        None => {
                            let len = buf.len();
                            reader.consume(len);
                        }
                    }
                }
                summary.decisions += 1;
                summary.dropped += 1;
                continue;
            }
            let text = line.trim_ascii();
            if text.is_empty() {
                continue;
            }
            summary.decisions += 1;
            let decision = serde_json::from_slice::<serde_json::Value>(text);
            match decision {
                Ok(decision)
                    if (summary.recorded as usize) < AUDIT_EGRESS_MAX_LINES
                        && bytes + text.len() <= AUDIT_EGRESS_MAX_BYTES =>
                {
                    bytes += text.len();
                    summary.recorded += 1;
                    self.audit(&json!({
                        "event": "egress", "command_seq": seq, "decision": decision,
                    }))?;
                }
                _ => summary.dropped += 1,
            }
        }
        Ok(())
    }
}
