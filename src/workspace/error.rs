//! Errors of the workspace module: one line each, naming what and where.

use std::path::PathBuf;

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
    #[error("{0}")]
    Launch(String),
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
