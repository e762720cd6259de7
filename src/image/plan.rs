//! What an import has read of an image before its layers are unpacked:
//! the same for every source (an OCI layout or docker-archive,
//! `import.rs`; a plain root filesystem, `rootfs.rs`).

use super::digest::Digest;
use super::layer::LayerInput;
use super::oci::{Config, Manifest};

/// The pieces of an image before its layers are imported.
pub(crate) struct Plan {
    pub format: &'static str,
    /// The original manifest (OCI); None: synthesised after the layers.
    pub manifest: Option<(Digest, Vec<u8>, Manifest)>,
    pub config_bytes: Vec<u8>,
    pub config: Config,
    pub layers: Vec<LayerInput>,
    pub default_name: Option<String>,
}
