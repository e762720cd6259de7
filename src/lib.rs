//! hutch: a Linux sandbox runtime built on kernel primitives.
//!
//! A sandbox is described by one schema, [`Spec`], and run by the launcher:
//! user/mount/pid/ipc/uts/net/cgroup namespaces, a new root built on a tmpfs
//! (read-only system directories, fresh /proc, minimal /dev, private /tmp,
//! the workspace through an overlay), `pivot_root`, no capabilities,
//! no-new-privs, and `hutch init` as pid 1.
//!
//! See `docs/architecture.md` for what is built and why.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod audit;
pub mod cgroup;
pub mod cli;
pub mod confine;
pub mod fs;
pub mod launch;
pub mod net;
pub mod probe;
pub mod registry;
pub mod spec;
pub mod sys;
pub mod workspace;

mod api;
#[cfg(test)]
mod test_support;

pub use api::{Child, Command, ExitReport, Outcome, SpawnError, find_binary};
pub use spec::Spec;
