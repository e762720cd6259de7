//! The exit report: how the workload ended, and what was enforced.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cgroup::LimitsReport;
use crate::confine::ConfinementReport;
use crate::launch::wire::stage::Stage;

/// Why the sandbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The workload exited on its own.
    Exited,
    /// The workload was killed by a signal.
    Signaled,
    /// The wall-clock limit expired; the whole tree was killed.
    TimedOut,
    /// The sandbox was killed on request (`Child::kill`, or the process
    /// that started it went away); the whole tree was killed.
    Killed,
    /// The memory limit was hit and the sandbox OOM-killed.
    OomKilled,
    /// The pid limit was hit.
    PidsLimitHit,
    /// A session command filled the session's disk quota (set by the
    /// session layer after the command, see `docs/sessions.md`).
    DiskLimitHit,
    /// hutch could not build the sandbox (exit 125).
    SetupFailed,
    /// The command could not be executed (126/127).
    ExecFailed,
}

/// Paths the workload changed in one overlay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangesReport {
    /// The overlay's mount point inside the sandbox.
    pub dest: PathBuf,
    /// Files, links, deletions and empty directories written.
    pub changed_paths: u64,
    /// Where the upper directory was kept, or `None` when discarded.
    pub kept_in: Option<PathBuf>,
    /// The host directories shown there (the overlay's lowers, top
    /// first): with `dest`, where the workspace was mapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lowers: Vec<PathBuf>,
}

/// Fill in [`ChangesReport::lowers`] from the Spec's overlays.
pub fn with_lowers(
    mut changes: Vec<ChangesReport>,
    spec: &crate::spec::Spec,
) -> Vec<ChangesReport> {
    use crate::spec::FsOp;
    for c in &mut changes {
        c.lowers = spec
            .fs
            .iter()
            .rev()
            .find_map(|op| match op {
                FsOp::Overlay { lowers, dest, .. } | FsOp::TmpOverlay { lowers, dest, .. }
                    if *dest == c.dest =>
                {
                    Some(lowers.clone())
                }
                _ => None,
            })
            .unwrap_or_default();
    }
    changes
}

/// What hutch enforced (and what it could not).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Enforcement {
    /// Namespaces created.
    pub namespaces: Vec<String>,
    /// uid/gid inside the sandbox and the host ids they map to.
    pub uid: u32,
    pub gid: u32,
    pub host_uid: u32,
    pub host_gid: u32,
    pub no_new_privs: bool,
    /// Capabilities the workload keeps (empty by default).
    pub capabilities: Vec<String>,
    /// `none`, `host` or `proxy`.
    pub network: String,
    /// Wall-clock limit in milliseconds.
    pub wall_clock_ms: Option<u64>,
    /// Output cap in bytes.
    pub output_bytes: Option<u64>,
    /// Seccomp and Landlock, as reported by the confinement layer.
    pub confinement: Option<ConfinementReport>,
    /// Resource limits, as reported by the cgroup layer.
    pub limits: Option<LimitsReport>,
    /// Root launches: workspace layers on a filesystem without idmapped
    /// mounts (tmpfs before Linux 6.3, ramfs, some FUSE and network
    /// filesystems). They are attached without an idmapping, so the
    /// workload sees them with their host owners, as its unprivileged host
    /// id: what only their owner may read stays unreadable to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers_without_idmap: Vec<PathBuf>,
    /// The container image the sandbox's system came from (manifest
    /// digest, platform, whether it was pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::launch::prepare::image::ImageReport>,
}

/// Which step of the sandbox's setup failed, for programs (the `error`
/// line is for people).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupFailure {
    pub stage: Stage,
    /// The errno of the failed call (`ENOENT`, ...), when there was one.
    pub errno: Option<String>,
}

/// The final report of one sandbox (`--status-file`, library `wait`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitReport {
    /// Always `"exit"` (the status file also holds a `"start"` event).
    pub event: String,
    pub sandbox_id: String,
    /// hutch's own exit code: the workload's code, 128+signal, 124, 125,
    /// 126 or 127.
    pub status: i32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Outcome,
    /// The one-line error when hutch failed.
    pub error: Option<String>,
    /// The failed step, when the sandbox's setup or execve failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<SetupFailure>,
    pub duration_ms: u64,
    /// Bytes the workload wrote to stdout and stderr (when relayed), all
    /// of them: also what `output_limit` discarded.
    pub output_bytes: u64,
    /// Of those, the bytes relayed (within the output cap).
    #[serde(default)]
    pub output_kept: u64,
    pub output_truncated: bool,
    /// Relayed bytes that never reached the reader: it did not keep up
    /// before the sandbox's time was over, or stopped reading.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_undelivered: u64,
    pub changes: Vec<ChangesReport>,
    pub enforced: Enforcement,
    /// Limits or features requested as *preferred* that were not enforced.
    pub unenforced: Vec<String>,
    /// What the command used (CPU, peak memory, block I/O, peak process
    /// count): from its cgroup where it has one, else from the reaped
    /// tree's rusage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::usage::Usage>,
    /// The command ran in a warm sandbox (built before it was asked for,
    /// from a pool of its shape), not one launched for it.
    #[serde(default)]
    pub warm: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ExitReport {
    /// Whether the workload ran and exited 0.
    pub fn success(&self) -> bool {
        self.status == 0 && self.reason == Outcome::Exited
    }
}
