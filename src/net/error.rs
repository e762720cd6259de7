//! The errors of the egress proxy and its policy.

use std::path::PathBuf;

/// Errors of the egress proxy and its policy.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A policy entry is invalid; `key` is its path, e.g. `allow[2]`.
    #[error("{key}: {message}")]
    Policy { key: String, message: String },
    #[error("policy file {}: {message}", path.display())]
    PolicyFile { path: PathBuf, message: String },
    /// A policy file with several profiles and no `default`, and no
    /// profile named by the caller (front ends add how to name one).
    #[error("policy file {}: several profiles and no `default`; choose one (profiles: {profiles})", path.display())]
    NoProfileChosen { path: PathBuf, profiles: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Sys(#[from] crate::sys::SysError),
}

impl NetError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        NetError::Io {
            what: what.into(),
            source,
        }
    }
}
