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
mod defaults;
mod disk;
mod error;
mod export;
mod git;
mod ignore;
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
mod session;
mod show;
mod spool;
mod stack;
pub mod warm;

pub use baseline::{BaselineWriter, ImportLimits, import_dir};
pub use changes::{
    ChangeRef, DEFAULT_MAX_FILE_BYTES, SideRef, Skipped, Visitor as ChangeVisitor,
    walk as walk_changes,
};
pub use close::{CloseOptions, CloseReport};
pub use disk::{DiskMechanism, DiskPolicy, DiskUsage, human as human_bytes};
pub use error::{Result, WorkspaceError};
pub use export::export as export_to;
pub use export::{
    ArchiveKind, ExportEntry, ExportOptions, ExportOrigin, ExportSummary, MANIFEST_NAME,
    MAX_ENTRY_NAME, PATCH_NAME,
};
pub use git::{GitPolicy, GitStaging, import_git, is_full_rev};
pub use ignore::{IgnoreFiles, IgnoreRules};
pub use json::{is_unsafe_char, json_line};
pub use layers::{Layer, Layers};
pub use manifest::{Manifest, ManifestEntry, fingerprint};
pub use relpath::{RelPath, WORKSPACE_DIR};
pub use render::{
    DiffFormat, DiffSummary, IGNORED_LISTED, Ignored, TEXT_DIFF_MAX_BYTES, diff, diff_filtered,
    git_oid,
};
/// The repository metadata reader (public for the fuzzers).
#[doc(hidden)]
pub use repo::{GitDir, METADATA_MAX_BYTES, RepoDir};
pub use run::{
    AUDIT_CAPTURE_BYTES, AUDIT_EGRESS_MAX_BYTES, AUDIT_EGRESS_MAX_LINES, EgressSummary, RunRecord,
};
pub use session::{
    CreateOptions, DiffOptions, GcReport, Lock, RunningCommand, STATE_DIR_ENV, SealInfo, Session,
    SessionInfo, SessionLock, Since, Source, StateDir, valid_id,
};
pub use show::read_audit;
pub use spool::Spool;
