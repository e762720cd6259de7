//! How to run a launch (as opposed to what: that is the [`Spec`]).

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::spec::Spec;
use crate::sys::SysError;

/// Where the supervisor of a launch runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Mode {
    /// In this process when it is single-threaded, else through the
    /// helper found by [`crate::find_binary`].
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

/// The workload's terminal ([`RunOptions::terminal`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalOptions {
    /// The initial size (columns, rows). `None`: the size of the
    /// supervisor's stdin when that is a terminal, else 80x24.
    pub size: Option<(u16, u16)>,
}

/// How to run (as opposed to what: that is the [`Spec`]).
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
    /// Run the workload on a terminal of the sandbox's own devpts
    /// (`hutch run --pty`): its stdin, stdout and stderr are that
    /// terminal, its controlling terminal; the supervisor relays the
    /// master to and from its own stdin and stdout (docs/pty.md).
    #[serde(default)]
    pub terminal: Option<TerminalOptions>,
    /// A front end's own status protocol, spoken by the supervisor at the
    /// sandbox's start and end (`hutch-bwrap`'s status fds). In-process
    /// launches only (it does not cross to the helper).
    #[serde(skip)]
    pub status_protocol: Option<FrontEndStatus>,
}

/// A front end's status protocol (bubblewrap's status fds,
/// `bwrap::status`): the supervisor tells it when the sandbox has started
/// and when it has ended, and knows nothing of what it writes.
pub trait StatusProtocol: std::fmt::Debug + Send + Sync {
    /// The sandbox exists (`pid` is its first process, hutch init) and its
    /// workload has not started yet; an error fails the launch.
    fn started(&self, pid: libc::pid_t, spec: &Spec) -> Result<(), SysError>;
    /// The sandbox has ended with `status`; `workload_started` is false
    /// when its setup or the execve of its command failed.
    fn ended(&self, workload_started: bool, status: i32);
    /// Whether the front end tells its caller hutch init's pid, whose
    /// `/proc/PID/ns/*` the caller opens to join the sandbox's
    /// namespaces (bubblewrap's `child-pid`): hutch init then stays
    /// dumpable where no process of the sandbox can reach it
    /// (`ChildPlan::init_joinable`).
    fn tells_init_pid(&self) -> bool {
        false
    }
}

/// A [`StatusProtocol`] in [`RunOptions`] (equal only to itself).
#[derive(Debug, Clone)]
pub struct FrontEndStatus(pub Arc<dyn StatusProtocol>);

impl PartialEq for FrontEndStatus {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
