//! Errors of the image store: each one line saying what failed and why,
//! naming the blob or entry, never quoting the image's file content.

use super::checks::Refusal;
use super::unpack::UnpackError;
use crate::sys::SysError;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The source path could not be read.
    #[error("{path}: {why}")]
    Input { path: String, why: String },
    /// Malformed input: an image document, a reference, an option.
    #[error("{0}")]
    Invalid(String),
    /// A blob's content does not match its descriptor.
    #[error("blob {digest}: {why}")]
    Blob { digest: String, why: String },
    /// A layer could not be unpacked.
    #[error("layer {digest}: {why}")]
    Layer { digest: String, why: UnpackError },
    /// A check refused the image (each names its override).
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// No such image in the store.
    #[error("{0}")]
    NotFound(String),
    /// The store itself cannot be used.
    #[error("image store {path}: {why}")]
    Store { path: String, why: String },
    #[error("{0}")]
    Sys(#[from] SysError),
}

pub type Result<T, E = ImageError> = std::result::Result<T, E>;
