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
//! - [`launch`]: the one launch entry ([`launch::launch`] and its
//!   [`launch::Mode`]s), for callers that want to pick where the
//!   supervisor runs;
//! - [`spec`]: the schema;
//! - [`workspace`]: sessions over a sealed baseline ([`StateDir`],
//!   [`Session`]);
//! - [`supervisor_main`]: let a program be its own helper binary.
//!
//! See `docs/architecture.md` for what is built and why.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod agent;
pub mod launch;
pub mod spec;
pub mod workspace;

// Not API: reached through [`internals`] by the binary, tests and fuzzers.
#[doc(hidden)]
pub mod audit;
#[doc(hidden)]
pub mod bwrap;
#[doc(hidden)]
pub mod cgroup;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod confine;
#[doc(hidden)]
pub mod fs;
#[doc(hidden)]
pub mod image;
#[doc(hidden)]
pub mod net;
#[doc(hidden)]
pub mod oci;
#[doc(hidden)]
pub mod probe;
#[doc(hidden)]
pub mod registry;
#[doc(hidden)]
pub mod sys;

mod api;
/// Secret values on the host side (issue 31).
#[allow(dead_code)] // used by the proxy and the launcher as issue 31 lands
mod secret;
#[cfg(test)]
mod test_support;
mod util;

pub use api::{Child, Command, Output, Pool, PoolCommand, Redirect, SpawnError, find_binary};

/// The async API (cargo feature `tokio`): [`tokio::Command`],
/// [`tokio::Child`], [`tokio::Pool`], [`tokio::Session`].
#[cfg(feature = "tokio")]
pub mod tokio;
pub use launch::{ExitReport, LaunchFailure, Outcome};
pub use spec::Spec;
pub use workspace::{Session, StateDir};

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

/// hutch's modules that are not API, for the `hutch` binary, tests and
/// fuzzers. Nothing here is stable.
#[doc(hidden)]
pub mod internals {
    pub use crate::util::clock;
    pub use crate::{
        audit, bwrap, cgroup, cli, confine, fs, image, net, oci, probe, registry, sys,
    };
}
