//! Why a launch failed: [`LaunchError`], and its typed form
//! [`LaunchFailure`] that crosses the helper boundary.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::wire::stage::Stage;
use crate::spec::SpecError;
use crate::sys::SysError;

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
