//! The launcher: prepare (supervisor, before clone) → clone3 → the sandbox
//! builds itself ([`child`]) while the supervisor ([`supervise`]) writes id
//! maps, relays output, forwards signals and enforces the wall clock.
//!
//! [`run`] launches in-process and requires a single-threaded caller;
//! multi-threaded programs use [`crate::Command`], which runs the `hutch`
//! binary as the supervisor.

mod child;
pub mod message;
pub mod prepare;
mod real_fs;
pub mod report;
mod supervise;
mod validate;

use std::path::PathBuf;

pub use report::{ChangesReport, Enforcement, ExitReport, Outcome};
pub use supervise::Captured;
pub use validate::validate;

use crate::spec::{Spec, SpecError};
use crate::sys::SysError;

/// How to run (as opposed to what: that is the [`Spec`]).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Write the start event and the exit report here (JSON lines).
    pub status_file: Option<PathBuf>,
    /// Keep the first and last N bytes of stdout and stderr (they are still
    /// relayed to hutch's own stdout/stderr).
    pub capture_bytes: Option<usize>,
    /// Do not print the changed-paths notice on stderr.
    pub quiet: bool,
}

/// Why a sandbox could not be launched. Display is one line: what, where,
/// why, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(
        "the launching process has {0} threads; an in-process launch needs a single-threaded caller (use hutch::Command, which runs the hutch binary)"
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
    #[error("idmapping workspace layer {}: {err} (idmapped mounts need Linux 5.12+ and a filesystem that supports them)", path.display())]
    Idmap { path: PathBuf, err: SysError },
}

/// Launch a sandbox in-process and wait for it. The caller must be
/// single-threaded.
pub fn run(spec: &Spec, opts: &RunOptions) -> Result<ExitReport, LaunchError> {
    supervise::run(spec, opts).map(|(report, _)| report)
}

/// Like [`run`], also returning the captured head and tail of stdout and
/// stderr (`opts.capture_bytes` must be set for captures to exist).
pub fn run_captured(
    spec: &Spec,
    opts: &RunOptions,
) -> Result<(ExitReport, [Option<Captured>; 2]), LaunchError> {
    supervise::run(spec, opts)
}
