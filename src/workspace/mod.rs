//! Sessions: a persistent workspace over a sealed baseline.
//!
//! A session is a directory owned by the host under the state directory:
//! `baseline/tree` (the read-only lower, imported from a directory or a git
//! commit) with `baseline/manifest` (sha256 per file; its digest is the
//! fingerprint), `upper/` and `work/` (the overlay's), `audit.jsonl`,
//! `session.json` and a `lock` file. Each command runs in a fresh sandbox
//! whose `/workspace` is the overlay of baseline + upper. Diff and export
//! read only the upper (plus the baseline entries it hides), through fds,
//! as attacker-written data (SECURITY.md §8).

mod baseline;
mod changes;
mod close;
mod compact;
mod compact_journal;
mod defaults;
mod disk;
mod error;
mod export;
mod fork;
mod git;
mod ignore;
mod info;
mod json;
mod layers;
mod manifest;
mod progress;
mod relpath;
mod remove;
mod render;
mod repo;
mod run;
mod seal;
mod seal_journal;
mod session;
mod shared;
mod show;
mod snapshot;
mod snapshot_journal;
mod spool;
mod stack;
pub mod warm;

pub use baseline::ImportLimits;
pub use close::{CloseOptions, CloseReport, GcReport};
pub use compact::{COMPACT_DEPTH_RANGE, CompactReport, DEFAULT_COMPACT_DEPTH};
pub use disk::{DiskUsage, human as human_bytes};
pub use error::WorkspaceError;
pub use export::{ArchiveKind, ExportOptions, ExportSummary};
pub use fork::{ForkOptions, ForkReport};
pub use info::LayerKind;
pub use snapshot::SnapshotInfo;
pub use git::GitPolicy;
pub(crate) use git::is_full_rev;
pub use json::{is_unsafe_char, json_line};
pub use relpath::{RelPath, WORKSPACE_DIR};
pub use render::{DiffFormat, DiffSummary};
pub use run::RunRecord;
pub use session::{
    CreateOptions, DiffOptions, Lock, SealInfo, Session, SessionInfo, Since, Source, StateDir,
    valid_id,
};
pub use show::read_audit;

// For the tests and fuzzers (cargo feature `internals`).
#[cfg(any(test, feature = "internals"))]
pub use {export::export as export_to, layers::Layers, render::diff};
#[cfg(feature = "internals")]
pub use {
    baseline::{BaselineWriter, import_dir},
    export::MAX_ENTRY_NAME,
    repo::RepoDir,
    run::AUDIT_EGRESS_MAX_LINES,
};
