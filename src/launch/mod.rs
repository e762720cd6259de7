//! The launcher: prepare (supervisor, before clone) → clone3 → the sandbox
//! builds itself ([`child`]) while the supervisor ([`supervise`]) writes id
//! maps, relays output, forwards signals and enforces the wall clock.
//!
//! [`launch`] is the one entry for every caller; [`Mode`] says where the
//! supervisor runs: in this process (only when it is single-threaded: the
//! sandbox is forked from it), or in the `hutch` helper (`hutch
//! __supervise`, see [`helper`]), which is how a multi-threaded program
//! launches. [`Mode::Auto`] picks. The library's [`crate::Command`] always
//! uses the helper, so that its [`crate::Child`] can be waited for, polled
//! and killed while the caller goes on.

mod child;
mod child_sys;
pub mod claim;
pub mod create;
mod describe;
pub mod ending;
pub mod exec;
pub mod helper;
mod identity;
mod image;
mod join;
mod maps;
pub mod message;
pub mod pool;
mod prepare;
mod real_sys;
mod relay;
pub mod report;
pub mod stage;
mod steps;
mod subid;
mod summary;
mod supervise;
#[cfg(test)]
mod tests;
mod uppers;
mod validate;
mod warm;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use image::ImageReport;
pub use prepare::{DEFAULT_ROOT_HOST_ID, network_name};
pub use relay::Captured;
pub use report::{ChangesReport, Enforcement, ExitReport, Outcome, SetupFailure};
pub use stage::Stage;
pub use supervise::Finished;
pub use validate::validate;

use crate::spec::{Spec, SpecError};
use crate::sys::SysError;

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

/// Why a sandbox could not be launched. Display is one line: what, where,
/// why, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(
        "the launching process has {0} threads; an in-process launch needs a single-threaded caller (use Mode::Auto or hutch::Command, which run the hutch helper)"
    )]
    MultiThreaded(usize),
    #[error("{0}")]
    Prepare(String),
    #[error("{0}")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    #[error("{0}")]
    Sys(#[from] SysError),
    #[error(
        "creating the sandbox: {0} (user namespaces may be disabled or restricted here: run `hutch check`)"
    )]
    Clone(SysError),
    /// The Spec's image could not be used (resolution, a check, its
    /// config, the id maps it needs).
    #[error("{0}")]
    Image(String),
    #[error("idmapping workspace layer {}: {err} (idmapped mounts need Linux 5.12+ and a filesystem that supports them)", path.display())]
    Idmap { path: PathBuf, err: SysError },
    #[error(
        "cannot find the hutch binary to supervise the sandbox (set HUTCH_BIN, or name it with Mode::Helper / Command::hutch_binary)"
    )]
    HelperNotFound,
    #[error("the hutch helper {}: {why}", binary.display())]
    Helper { binary: PathBuf, why: String },
    /// The helper could not launch the sandbox; the failure it reported.
    #[error(transparent)]
    Failed(LaunchFailure),
    /// A step of the sandbox's own setup failed (a created sandbox reports
    /// it this way; `exit_status` is what the workload would have exited
    /// with: 125, or 126/127 when its command cannot be executed or found).
    #[error("{line}")]
    Setup {
        stage: Stage,
        errno: crate::sys::Errno,
        exit_status: i32,
        line: String,
    },
}

/// What kind of failure a [`LaunchFailure`] is, for programs (the Python
/// package maps these to exceptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The Spec is invalid (`where` is the key path).
    InvalidSpec,
    /// An in-process launch from a multi-threaded process.
    MultiThreaded,
    /// Preparing the sandbox failed (policy, status file, upper dir...).
    Prepare,
    /// A resource limit could not be set up as required.
    Limits,
    /// A system call on the host failed (`where` is the call).
    System,
    /// The sandbox's namespaces could not be created.
    Namespaces,
    /// A workspace layer could not be idmapped (`where` is its path).
    Idmap,
    /// The Spec's image was refused or could not be used.
    Image,
    /// The helper could not be found, started or understood.
    Helper,
}

/// A launch failure in a form that crosses the helper boundary: typed,
/// with what failed, where, the errno and a hint. Display is the one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct LaunchFailure {
    pub kind: FailureKind,
    /// The whole line: what, where, why, what to do.
    pub message: String,
    /// A key path, a host path or a call.
    #[serde(rename = "where")]
    pub location: Option<String>,
    /// `ENOENT`, ...
    pub errno: Option<String>,
    pub hint: Option<String>,
}

impl LaunchError {
    /// The typed form of this error.
    pub fn failure(&self) -> LaunchFailure {
        let errno = |e: &SysError| Some(format!("{:?}", e.errno));
        let (kind, location, errno, hint) = match self {
            LaunchError::Spec(e) => (
                FailureKind::InvalidSpec,
                (!e.path.is_empty()).then(|| e.path.clone()),
                None,
                None,
            ),
            LaunchError::MultiThreaded(_) => (
                FailureKind::MultiThreaded,
                None,
                None,
                Some("use Mode::Auto or hutch::Command".into()),
            ),
            LaunchError::Prepare(_) => (FailureKind::Prepare, None, None, None),
            LaunchError::Image(_) => (FailureKind::Image, None, None, None),
            LaunchError::Cgroup(_) => (FailureKind::Limits, None, None, None),
            LaunchError::Sys(e) => (FailureKind::System, Some(e.call.clone()), errno(e), None),
            LaunchError::Clone(e) => (
                FailureKind::Namespaces,
                Some(e.call.clone()),
                errno(e),
                Some(
                    "user namespaces may be disabled or restricted here: run `hutch check`".into(),
                ),
            ),
            LaunchError::Idmap { path, err } => (
                FailureKind::Idmap,
                Some(path.display().to_string()),
                errno(err),
                Some("idmapped mounts need Linux 5.12+ and a filesystem that supports them".into()),
            ),
            LaunchError::HelperNotFound => (
                FailureKind::Helper,
                None,
                None,
                Some("set HUTCH_BIN, or name the binary".into()),
            ),
            LaunchError::Helper { binary, .. } => (
                FailureKind::Helper,
                Some(binary.display().to_string()),
                None,
                None,
            ),
            LaunchError::Failed(f) => return f.clone(),
            LaunchError::Setup { stage, errno, .. } => (
                FailureKind::System,
                Some(stage.what().to_string()),
                Some(format!("{errno:?}")),
                None,
            ),
        };
        LaunchFailure {
            kind,
            message: self.to_string(),
            location,
            errno,
            hint,
        }
    }
}

/// Launch a sandbox and wait for it: the one entry for every caller.
pub fn launch(spec: &Spec, opts: &RunOptions, mode: Mode) -> Result<Finished, LaunchError> {
    let mode = match mode {
        Mode::Auto if crate::sys::self_status().threads == 1 => Mode::InProcess,
        Mode::Auto => Mode::Helper(helper::find_binary().ok_or(LaunchError::HelperNotFound)?),
        m => m,
    };
    match mode {
        Mode::Helper(binary) => {
            let stdio = || match opts.stdio {
                WorkloadStdio::Inherit => std::process::Stdio::inherit(),
                WorkloadStdio::Null => std::process::Stdio::null(),
            };
            let mut child =
                helper::HelperChild::spawn(&binary, spec, opts, [stdio(), stdio(), stdio()])?;
            child.wait()
        }
        _ => supervise::run(spec, opts, None),
    }
}

/// Launch in-process and wait for the report (single-threaded callers).
pub fn run(spec: &Spec, opts: &RunOptions) -> Result<ExitReport, LaunchError> {
    launch(spec, opts, Mode::InProcess).map(|f| f.report)
}
