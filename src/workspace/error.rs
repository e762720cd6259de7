//! Errors of the workspace module: one line each, naming what and where.

use std::path::PathBuf;

use crate::image::ImageError;
use crate::launch::{LaunchError, LaunchFailure};
use crate::registry::RegistryError;
use crate::sys::SysError;

/// Everything a session operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    Sys(#[from] SysError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid path {path}: {reason}")]
    BadPath { path: String, reason: String },
    #[error("{path}: {reason}")]
    Unsupported { path: String, reason: String },
    #[error("{0} (override with {1})")]
    Refused(String, &'static str),
    #[error("baseline fingerprint {actual} does not match the expected {expected}")]
    FingerprintMismatch { expected: String, actual: String },
    #[error("{what} exceeds the limit of {limit} bytes; nothing was produced")]
    TooLarge { what: String, limit: u64 },
    #[error("no session {id} in {dir}")]
    NoSession { id: String, dir: PathBuf },
    #[error("invalid session id {0:?} (expected 32 lowercase hex digits)")]
    BadId(String),
    #[error("session {0} is busy: another operation holds its lock (use --wait to wait for it)")]
    Busy(String),
    #[error("session {id}: {reason}")]
    Budget { id: String, reason: String },
    #[error("git: {0}")]
    Git(String),
    #[error("session state {path}: {reason}")]
    State { path: PathBuf, reason: String },
    #[error("state directory {path}: {reason}")]
    StateDir { path: PathBuf, reason: String },
    // The variants below hold another layer's error without making it a
    // `source`: their line is already the whole message, and a chain
    // printed with `{:#}` would repeat it.
    /// A sandbox could not be launched: the launcher's failure record
    /// (what failed, where, the errno, a hint).
    #[error("{0}")]
    Launch(LaunchFailure),
    /// A sandbox's own setup failed: the line its exit report gives.
    #[error("{0}")]
    SetupFailed(String),
    /// The session's image could not be pinned or held.
    #[error("{0}")]
    Image(ImageError),
    /// The session's private id range could not be allocated or released.
    #[error(transparent)]
    IdRange(#[from] crate::launch::IdRangeError),
    /// A command named an image other than its session's.
    #[error(
        "session {id} runs every command with its image {digest}; a command cannot name another"
    )]
    OtherImage { id: String, digest: String },
    /// The runtime registry (the live sandboxes) could not be read.
    #[error("{0}")]
    Registry(RegistryError),
    #[error("--disk-max: mkfs.ext4 is not installed (install e2fsprogs)")]
    MkfsMissing,
    #[error("mkfs.ext4 of the session disk image failed ({status}): {first_line:?}")]
    MkfsFailed {
        status: std::process::ExitStatus,
        first_line: String,
    },
    #[error(
        "the session's disk image is still attached elsewhere after {seconds}s (a mount of it outlived its session operation; see `losetup -a`)"
    )]
    DiskAttached { seconds: u64 },
    #[error("a baseline writer thread failed")]
    WriterFailed,
    #[error("a baseline writer thread panicked")]
    WriterPanicked,
    #[error("the egress audit file is not a regular file")]
    EgressAuditNotFile,
    #[error("the warm server closed the connection")]
    WarmClosed,
    #[error("an oversized line on warm.sock")]
    WarmOversized,
    /// A request on warm.sock that is not one.
    #[error("{0}")]
    WarmRequest(serde_json::Error),
    /// The thread that ran a session command (the async API's) failed.
    #[error("the command's thread: {0}")]
    CommandThread(Box<dyn std::error::Error + Send + Sync>),
}

impl From<LaunchError> for WorkspaceError {
    fn from(e: LaunchError) -> Self {
        WorkspaceError::Launch(e.failure())
    }
}

impl WorkspaceError {
    /// Whether this is a write to a pipe whose reader went away.
    pub fn is_broken_pipe(&self) -> bool {
        match self {
            WorkspaceError::Io { source, .. } => source.kind() == std::io::ErrorKind::BrokenPipe,
            WorkspaceError::Sys(e) => e.errno == crate::sys::Errno::EPIPE,
            _ => false,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        WorkspaceError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result of workspace operations.
pub type Result<T, E = WorkspaceError> = std::result::Result<T, E>;
