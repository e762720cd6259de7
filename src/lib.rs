//! hutch: a Linux sandbox runtime built on kernel primitives.
//!
//! A sandbox is described by one schema, [`Spec`], and run by the launcher:
//! user/mount/pid/ipc/uts/net/cgroup namespaces, a new root built on a tmpfs
//! (read-only system directories, fresh /proc, minimal /dev, private /tmp,
//! the workspace through an overlay), `pivot_root`, no capabilities,
//! no-new-privs, and `hutch init` as pid 1.
//!
//! The library's face:
//! - [`Command`] → [`Child`] → [`ExitReport`] (or [`Output`]): run a
//!   command in a sandbox from any thread of any program;
//! - [`launch()`]: the one launch entry (and its [`Mode`]s), for callers
//!   that want to pick where the supervisor runs; [`run()`] in this process;
//! - [`spec`]: the schema;
//! - sessions over a sealed baseline: [`StateDir`], [`Session`];
//! - [`supervisor_main`]: let a program be its own helper binary.
//!
//! See `docs/architecture.md` for what is built and why.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod spec;

// Not API: private unless the cargo feature `internals` is on (the tests,
// fuzzers and benches turn it on, through [`internals`]); the binaries
// reach them through [`entry`]. Private, the compiler's dead-code lint
// sees them (docs/decisions/0012-library-face.md).
macro_rules! internal_modules {
    ($($(#[$attr:meta])* $name:ident),* $(,)?) => {$(
        $(#[$attr])*
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "internals"))]
        mod $name;
    )*};
}
internal_modules!(
    agent, audit, bwrap, cgroup, cli, confine, fs, image, launch, net, oci, probe, registry, sys,
    workspace,
);

mod api;
/// Secret values on the host side (issue 31).
mod secret;
#[cfg(test)]
mod test_support;
mod util;

pub use api::{Child, Command, Output, Pool, PoolCommand, Redirect, SpawnError, find_binary};

/// The async API (cargo feature `tokio`): [`tokio::Command`],
/// [`tokio::Child`], [`tokio::Pool`], [`tokio::Session`].
#[cfg(feature = "tokio")]
pub mod tokio;
pub use spec::{Gateway, Injection, Intercept, Secret, SecretSource, Spec};

// The one launch entry, for callers that pick where the supervisor runs,
// and what a launch reports.
pub use launch::Usage;
pub use launch::{
    Captured, ChangesReport, Enforcement, ExitReport, FailureKind, Finished, FrontEndStatus,
    ImageReport, LaunchError, LaunchFailure, Mode, Outcome, PrepareError, ProxyDoorsError,
    RunOptions, SetupFailure, StatusFileError, StatusProtocol, TerminalOptions, WorkloadStdio,
    launch, run, validate,
};

// Sessions: a persistent workspace over a sealed baseline.
pub use workspace::{
    ArchiveKind, CloseOptions, CloseReport, CreateOptions, DiffFormat, DiffOptions, DiffSummary,
    DiskUsage, ExportOptions, ExportSummary, GcReport, RunRecord, SealInfo, Session, SessionInfo,
    Since, Source, StateDir, WorkspaceError,
};
pub use workspace::{
    COMPACT_DEPTH_RANGE, CompactReport, DEFAULT_COMPACT_DEPTH, ForkOptions, ForkReport, LayerKind,
    SnapshotInfo,
};

/// Run as the library's helper (`hutch __supervise`) when this process was
/// started as one, and return its exit code; `None` otherwise. A program
/// that wants to be its own helper calls this first thing in `main`
/// (before it starts any thread) and names its own executable with
/// [`Command::hutch_binary`]:
///
/// ```no_run
/// // first thing in main:
/// if let Some(code) = hutch::supervisor_main() {
///     std::process::exit(code);
/// }
/// let exe = std::env::current_exe().unwrap();
/// let report = hutch::Command::new("true").hutch_binary(exe).status().unwrap();
/// assert!(report.success());
/// ```
pub fn supervisor_main() -> Option<i32> {
    let first = std::env::args_os().nth(1)?;
    (first == launch::helper::SUBCOMMAND).then(launch::helper::serve)
}

/// hutch's modules that are not API, for tests, fuzzers and benches (cargo
/// feature `internals`). Nothing here is stable.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::util::clock;
    pub use crate::{
        audit, bwrap, cgroup, cli, confine, fs, image, net, oci, probe, registry, sys,
    };
}

/// The entry points of hutch's own binaries (`hutch`, `hutch-oci`,
/// `hutch-bwrap`): not API.
#[doc(hidden)]
pub mod entry {
    use std::ffi::OsString;

    /// Refuse to run set-user-id, set-group-id or with file capabilities:
    /// prints one line (`prefix`: ..., naming `binary`) and exits with `code`.
    pub fn refuse_elevated_start(prefix: &str, binary: &str, code: i32) {
        crate::cli::privileged::refuse_elevated_start(prefix, binary, code)
    }

    /// `hutch ARGS`: the exit code.
    pub fn hutch(args: Vec<OsString>) -> i32 {
        crate::cli::main(args)
    }

    /// `hutch-oci ARGS`: the exit code.
    pub fn hutch_oci(args: Vec<OsString>) -> i32 {
        crate::cli::oci::main(args)
    }

    /// `hutch-bwrap ARGS` (called as `program`): the exit code.
    pub fn hutch_bwrap(program: &str, args: Vec<OsString>) -> i32 {
        crate::bwrap::main(program, args)
    }
}
