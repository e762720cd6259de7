//! Container images as the sandbox's system layer: a content-addressed
//! store, import of OCI image layouts, docker-archives and plain root
//! filesystems, the checks an image must pass, and resolution of a pinned
//! reference into the layer directories a run stacks as overlay lowers.
//!
//! See `docs/images.md` for the formats, the store layout, the checks and
//! the rules for hostile input.

pub mod checks;
mod decompress;
pub mod digest;
mod error;
mod import;
pub mod layer;
pub mod oci;
pub mod passwd;
mod plan;
mod refs;
mod resolve;
mod rootfs;
mod source;
pub mod spec;
pub mod store;
pub mod tar;
pub mod unpack;

pub use checks::{Outcome, Overrides, Refusal, Verdict};
pub use digest::Digest;
pub use error::{ImageError, Result};
pub use import::{
    DEFAULT_MAX_EXPANSION, DEFAULT_MAX_IMAGE_ENTRIES, DEFAULT_MAX_IMAGE_SIZE,
    DEFAULT_MAX_LAYER_ENTRIES, EXPANSION_FLOOR, ImportOptions, ImportReport, valid_name,
};
pub use layer::LayerMeta;
pub use oci::Platform;
pub use refs::ImageUse;
pub use resolve::{GcReport, Inspection, Reference, Removed, ResolvedImage, ResolvedLayer};
pub use store::{ImageRecord, Lock, STORE_ENV, Store, default_root};

/// Resolve `reference` in the store at `store` (None: the default store)
/// for a run on `platform` with `overrides`: what the launcher calls.
pub fn resolve(
    store: Option<&std::path::Path>,
    reference: &str,
    platform: &Platform,
    overrides: &Overrides,
) -> Result<ResolvedImage> {
    Store::open(store)?.resolve(reference, platform, overrides)
}
