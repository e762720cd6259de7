//! How to run a launch (as opposed to what: that is the [`Spec`](crate::spec::Spec)).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the supervisor of a launch runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Mode {
    /// In this process when it is single-threaded, else through the
    /// helper found by [`helper::find_binary`].
    #[default]
    Auto,
    /// In this process, which must be single-threaded.
    InProcess,
    /// Through this `hutch` binary (or any binary calling
    /// [`crate::supervisor_main`]) as the helper.
    Helper(PathBuf),
}

/// What the workload's stdio is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadStdio {
    /// The caller's (relayed through pipes when the output is capped or
    /// captured, or when it is a terminal).
    #[default]
    Inherit,
    /// /dev/null for all three.
    Null,
}

/// How to run (as opposed to what: that is the [`Spec`](crate::spec::Spec)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunOptions {
    /// Write the start event and the exit report here (JSON lines).
    pub status_file: Option<PathBuf>,
    /// Keep the first and last N bytes of stdout and stderr (they are still
    /// relayed to the caller's stdout/stderr).
    pub capture_bytes: Option<usize>,
    /// No notices on stderr (changed paths, layers without idmapping,
    /// preferred limits not enforced).
    pub quiet: bool,
    #[serde(default)]
    pub stdio: WorkloadStdio,
    /// Report no `changes` entry for writable overlays whose upper is kept
    /// on the host (`--changes`, a session's workspace), instead of
    /// counting the paths in it. Such an upper holds the changes of every
    /// command that used it (a session's: tens of thousands of files after
    /// a dependency install), and counting them walked all of it at every
    /// command's end: a session command cost O(the session's changes).
    /// Sessions set it (`session diff` shows their changes).
    #[serde(default)]
    pub skip_kept_changes: bool,
    /// Take an exclusive lock on each host upper directory before the
    /// sandbox is made and keep it until it is gone (`launch::uppers`):
    /// a [`crate::Pool`]'s command launched cold, so that it never mounts
    /// an upper one of the pool's warm commands has mounted.
    #[serde(default)]
    pub lock_host_uppers: bool,
    /// bubblewrap's status protocol, for the `hutch-bwrap` front end:
    /// fds of this process written as bubblewrap writes them. In-process
    /// launches only (fds do not cross to the helper).
    #[serde(skip)]
    pub status_fds: StatusFds,
}

/// bubblewrap's status fds (`docs/bwrap.md`). Right after the sandbox is
/// created, `info` gets the pretty JSON object and `json_status` one line
/// with `child-pid` (the host pid of the sandbox's first process, hutch
/// init) and the inode of every namespace the sandbox made of its own
/// among `cgroup ipc mnt net pid uts` (`"mnt-namespace": N`, ...); `info`
/// is then closed. Then each `block` fd is read (one byte or EOF) and
/// closed before the sandbox goes on. When the workload was started and
/// has ended, `json_status` gets `{ "exit-code": N }`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusFds {
    pub info: Option<i32>,
    pub json_status: Option<i32>,
    pub block: Vec<i32>,
}
