//! Container images as the sandbox's system layer: a content-addressed
//! store, import of OCI image layouts, docker-archives and plain root
//! filesystems, the checks an image must pass, and resolution of a pinned
//! reference into the layer directories a run stacks as overlay lowers.
//!
//! See `docs/images.md` for the formats, the store layout, the checks and
//! the rules for hostile input.

pub mod approved;
pub mod checks;
mod decompress;
pub mod digest;
mod error;
mod import;
pub mod layer;
pub mod oci;
mod parallel;
pub mod passwd;
mod plan;
pub mod pull;
mod refs;
mod resolve;
mod rootfs;
mod source;
pub mod spec;
pub mod store;
pub mod tar;
pub mod unpack;

pub use checks::Outcome;
pub use error::ImageError;
// For the tests and fuzzers (cargo feature `internals`).
#[cfg(feature = "internals")]
pub use digest::Digest;
pub use import::ImportOptions;
pub use oci::Platform;
pub use pull::PullOptions;
pub use resolve::{Inspection, ResolvedImage};
pub use store::{Lock, Store};
