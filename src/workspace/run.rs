//! Running one command in a session: a fresh sandbox whose `/workspace`
//! (also the cwd) is the overlay of the baseline and the session's upper.
//! Commands of a session never overlap (the session lock is held for the
//! whole run), and none outlives the session deadline or exceeds the
//! command budget. Each command leaves an `audit.jsonl` line with its argv,
//! start/end, exit report and the bounded head/tail of stdout/stderr.

use std::path::PathBuf;

use serde_json::json;

use crate::launch::{self, ExitReport, Outcome, RunOptions};
use crate::spec::{Duration, FsOp, Spec};

use super::error::{Result, WorkspaceError};
use super::relpath::WORKSPACE_DIR;
use super::session::{Session, now_ms};

/// Bytes of the head and of the tail of stdout/stderr kept in the audit.
pub const AUDIT_CAPTURE_BYTES: usize = 4096;

/// What one session command did.
#[derive(Debug)]
pub struct RunRecord {
    pub report: ExitReport,
    /// The session deadline (not the command's own timeout) ended it.
    pub deadline_hit: bool,
}

impl Session {
    /// The Spec of one command: `base` (e.g. `spec::default_profile()` or
    /// what `hutch run` options built, without a workspace) plus the
    /// session overlay at `/workspace`, cwd `/workspace` unless set, and a
    /// wall clock never beyond the session deadline. Returns the spec and
    /// whether the deadline is what bounds the wall clock.
    pub fn command_spec(&self, mut spec: Spec) -> Result<(Spec, bool)> {
        let (lower, upper, work) = self.overlay_dirs();
        spec.fs.push(FsOp::Overlay {
            lowers: vec![lower],
            upper,
            work,
            dest: WORKSPACE_DIR.into(),
        });
        if spec.cwd.is_none() {
            spec.cwd = Some(PathBuf::from(WORKSPACE_DIR));
        }
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
    /// The launcher relays the workload's stdout/stderr to ours.
    pub fn run(&mut self, base: Spec) -> Result<RunRecord> {
        let _lock = self.lock()?;
        self.update_info(|_| {})?;
        if let Some(max) = self.info.max_commands
            && self.info.commands_run >= max
        {
            return Err(WorkspaceError::Budget {
                id: self.info.id.clone(),
                reason: format!("the command budget ({max}) is spent"),
            });
        }
        let (spec, bounded) = self.command_spec(base)?;
        let start = now_ms();
        self.update_info(|i| {
            i.commands_run += 1;
            i.used_unix_ms = start;
        })?;
        self.audit(&json!({
            "event": "command-start", "time_unix_ms": start, "argv": spec.command,
            "timeout_ms": spec.limits.wall_clock.map(|d| d.0.as_millis() as u64),
        }))?;
        let opts = RunOptions {
            status_file: None,
            capture_bytes: Some(AUDIT_CAPTURE_BYTES),
            quiet: true,
        };
        let result = launch::run_captured(&spec, &opts);
        let end = now_ms();
        let (report, captured) = match result {
            Ok(r) => r,
            Err(e) => {
                self.audit(&json!({
                    "event": "command", "argv": spec.command, "start_unix_ms": start,
                    "end_unix_ms": end, "error": e.to_string(),
                }))?;
                return Err(WorkspaceError::Launch(e.to_string()));
            }
        };
        let deadline_hit = bounded && report.reason == Outcome::TimedOut;
        let stream = |c: &Option<launch::Captured>| match c {
            None => serde_json::Value::Null,
            Some(c) => json!({
                "total_bytes": c.total,
                "head": String::from_utf8_lossy(&c.head),
                "tail": String::from_utf8_lossy(&c.tail),
            }),
        };
        self.audit(&json!({
            "event": "command", "argv": spec.command, "start_unix_ms": start,
            "end_unix_ms": end, "deadline_hit": deadline_hit,
            "exit": serde_json::to_value(&report).unwrap_or(serde_json::Value::Null),
            "stdout": stream(&captured[0]), "stderr": stream(&captured[1]),
        }))?;
        self.update_info(|i| i.used_unix_ms = end)?;
        Ok(RunRecord {
            report,
            deadline_hit,
        })
    }
}
