//! What a session is, as `session.json` records it: its source, seals,
//! running command, defaults and locks. A leaf of `workspace/`: the
//! session's operations (session.rs and the files beside it) and the
//! progress file build on it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::disk::{DiskPolicy, DiskUsage};
use super::relpath::WORKSPACE_DIR;
use crate::spec::Spec;

/// Host uid (and gid) of the workload when root launches (the launcher's
/// default `identity.host_uid`).
pub const ROOT_LAUNCH_UID: u32 = 65534;

/// Where a baseline comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Source {
    /// A host directory (copied; a top-level `.git` is skipped).
    Dir { path: PathBuf },
    /// A commit of a git repository (exported from its objects).
    Git { repo: PathBuf, rev: String },
}

/// What a session command may not widen beyond the session's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lock {
    /// No egress beyond the session's (no other host, no host network).
    Egress,
    /// No host path bound beyond the session's.
    Binds,
    /// The environment stays the session's.
    Env,
    /// Memory, CPU, process caps and rlimits stay at most the session's.
    Limits,
    /// Seccomp, Landlock and capabilities stay at least as strict.
    Confinement,
}

impl Lock {
    pub const ALL: [Lock; 5] = [
        Lock::Egress,
        Lock::Binds,
        Lock::Env,
        Lock::Limits,
        Lock::Confinement,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Lock::Egress => "egress",
            Lock::Binds => "binds",
            Lock::Env => "env",
            Lock::Limits => "limits",
            Lock::Confinement => "confinement",
        }
    }

    pub fn parse(s: &str) -> Option<Lock> {
        Lock::ALL.into_iter().find(|l| l.name() == s)
    }
}

/// One sealed layer of a session (`session seal`, `session snapshot`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealInfo {
    /// 1 for the first seal.
    pub index: usize,
    pub time_unix_ms: u64,
    /// sha256 of the layer's manifest (`seals/N`): the changes it holds,
    /// one line each, as the baseline's manifest lists files (deletions
    /// with mode 0).
    pub fingerprint: String,
    /// Paths the layer changes.
    pub changes: usize,
    /// Sealed with `--network none`: no later command may have egress.
    pub network_none: bool,
    /// Bytes the layer holds on disk (accounted quotas add them up).
    pub disk_bytes: u64,
    /// `snapshot` (`session snapshot`: the diff's start stays where it
    /// was) or `seal` (`session seal`: the diff starts after it).
    #[serde(default)]
    pub kind: LayerKind,
    /// The name given with `snapshot --name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The layer's id in the state directory's shared store
    /// (`STATE/.layers/ID`), which forks share; None for a layer kept in
    /// the session (`RW/layers/N`: sessions with a disk image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
    /// Bytes of the files and links the layer changes.
    #[serde(default)]
    pub bytes: u64,
    /// The session that made the layer (a fork inherits its parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Set when compaction merged this layer with the ones above it up to
    /// layer N into one (`layer` then names the merged layer, which N
    /// carries): its own state alone no longer exists, so it cannot be
    /// rolled back to, forked from or diffed since (`compact.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_into: Option<usize>,
}

/// What made a layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayerKind {
    #[default]
    Seal,
    Snapshot,
}

/// A command that started and has not recorded its end (its supervisor
/// may have been killed: then the next operation records it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningCommand {
    pub command_seq: u64,
    /// The process running it (pid and start time).
    pub pid: i32,
    pub start_time: u64,
    pub start_unix_ms: u64,
}

/// The persistent description of a session (`session.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub id: String,
    pub source: Source,
    /// Root digest of `baseline/manifest` (sha256 hex).
    pub fingerprint: String,
    pub files: usize,
    pub created_unix_ms: u64,
    /// Last time a command or file operation used the session.
    pub used_unix_ms: u64,
    pub deadline_unix_ms: Option<u64>,
    pub max_commands: Option<u64>,
    pub commands_run: u64,
    /// Where the workspace appears in the session's sandboxes.
    #[serde(default = "default_workspace_path")]
    pub workspace_path: PathBuf,
    /// Sealed layers, oldest first.
    #[serde(default)]
    pub seals: Vec<SealInfo>,
    /// A seal with `--network none` happened: no command may have egress.
    #[serde(default)]
    pub network_sealed: bool,
    #[serde(default)]
    pub disk: Option<DiskPolicy>,
    /// Disk use measured after the last command (or seal).
    #[serde(default)]
    pub disk_usage: Option<DiskUsage>,
    /// Defaults of every command (see `CreateOptions::defaults`).
    #[serde(default)]
    pub defaults: Option<Spec>,
    #[serde(default)]
    pub locks: Vec<Lock>,
    #[serde(default)]
    pub audit_dir: Option<PathBuf>,
    /// Written by hutch versions before the `running` marker file (see
    /// `session::RUNNING`); still read (and cleared) when recovering a session
    /// one of them left with a command running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningCommand>,
    /// The image of every command, pinned (its manifest digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::spec::ImageRef>,
    /// The session this one was forked from (`session fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The session whose baseline this one shares (`STATE/.layers/
    /// base-ID`); None: its own (`STATE/ID/baseline`, or `base-ID` once a
    /// fork published it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_origin: Option<String>,
    /// The first host id of the private id range the session holds for
    /// its image's commands (root without /etc/subuid ranges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_range_start: Option<u32>,
    /// Most frozen layers the session's stack keeps before a snapshot or
    /// seal compacts the oldest ones (`compact.rs`); None: the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_depth: Option<usize>,
}

impl SessionInfo {
    /// The layers that exist on disk (compaction merges several entries
    /// of `seals` into one), oldest first: each is the top of its group.
    pub(crate) fn physical_layers(&self) -> impl DoubleEndedIterator<Item = &SealInfo> {
        self.seals.iter().filter(|s| s.merged_into.is_none())
    }

    /// The number of frozen layers on disk (overlay lowers besides the
    /// baseline).
    pub(crate) fn layer_count(&self) -> usize {
        self.physical_layers().count()
    }
}

fn default_workspace_path() -> PathBuf {
    PathBuf::from(WORKSPACE_DIR)
}

/// Where a diff starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Since {
    /// Changes since the last seal (the baseline when there is none).
    #[default]
    LastSeal,
    /// Every change since the baseline.
    Baseline,
    /// Changes since seal N (1 is the first).
    Seal(usize),
}

impl std::str::FromStr for Since {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Since, String> {
        match s {
            "baseline" | "0" => Ok(Since::Baseline),
            "last-seal" | "seal" => Ok(Since::LastSeal),
            n => n.parse::<usize>().map(Since::Seal).map_err(|_| {
                format!("--since: {n:?} is not `baseline`, `last-seal` or a seal number")
            }),
        }
    }
}
