//! `hutch image pull`: an image fetched by digest from a registry over
//! the OCI distribution API (oci-client for authentication, reqwest for
//! the bodies) and imported as it arrives: the manifest and config are
//! read and verified first, then each layer streams from the registry
//! through import's blob digest check, decompressor, expansion and size
//! caps, diff_id check and hostile-input tar reader into a staging
//! directory, so a pulled image passes exactly the checks and caps of
//! `hutch image import` without the blob ever landing on disk. Up to
//! three layers (`LAYERS_AT_ONCE`) stream at the same time (`parallel.rs`).
//!
//! A layer is committed (renamed into `layers/`) only once its blob
//! digest and diff_id matched; a stream that is cut short, longer than
//! its descriptor, or of another digest leaves nothing (its staging
//! directory is removed). Layers verified before a failure stay stored,
//! so a pull cut short resumes at the first layer the store lacks; the
//! config is kept in `tmp/pulled/HEX` until the image is stored. The
//! index is written last (a failed pull leaves no image). Concurrent
//! pulls of one image are safe: layers are unpacked once under import's
//! per-layer lock (the second pull finds the layer stored and does not
//! fetch it), and the config enters the cache by link, never half-written.

mod auth;
mod registry;
mod stream;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

use super::approved::Approved;
use super::checks::{Refusal, Verdict};
use super::digest::Digest;
use super::error::ImageError;
use super::import::{ImportOptions, MAX_LAYERS};
use super::oci::{self, Descriptor, Index, Manifest, Platform};
use super::parallel::LayersAtOnce;
use super::store::{ImageRecord, Pulled, Store};

pub use auth::Credentials;
use registry::Registry;
use stream::{Failure, StreamedBlob};

/// Layers of one image fetched and unpacked at the same time: each
/// streams through its own decompressing and unpacking threads into its
/// own layer directory, so a multi-layer image keeps both cores busy.
const LAYERS_AT_ONCE: usize = 3;

/// `hutch check`'s `registry_client` line: the client builds over rustls
/// with the host's trust store; the number of trust anchors.
pub fn check_client() -> Result<usize, PullError> {
    registry::check_client()
}

/// Why a pull failed: one line naming the registry, blob or file.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("image reference {reference}: {why}")]
    Reference { reference: String, why: String },
    #[error(
        "{reference} is not pinned: name the image by digest (REPOSITORY@sha256:<64 hex>), \
         or pass --allow-unpinned (the digest used is then reported)"
    )]
    Unpinned { reference: String },
    #[error("registry credential file {path}: {why}")]
    AuthFile { path: String, why: String },
    #[error("the host's trust store (SSL_CERT_FILE, SSL_CERT_DIR or the system's): {0}")]
    TrustStore(String),
    #[error("registry {host}: {why}")]
    Registry { host: String, why: String },
    #[error("blob {digest}: {why}; nothing was stored")]
    Tampered { digest: String, why: String },
    #[error("image store {path}: {why}")]
    Store { path: String, why: String },
    #[error(transparent)]
    Image(#[from] ImageError),
}

/// How to pull.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// Registries (`HOST[:PORT]`) reached over plain http.
    pub insecure_registries: Vec<String>,
    /// A docker-style credential file; else the first of the defaults
    /// that exists (`$REGISTRY_AUTH_FILE`, `$XDG_RUNTIME_DIR/containers/auth.json`,
    /// `~/.docker/config.json`).
    pub auth_file: Option<PathBuf>,
    /// Credentials given directly (a hutch secret's value): win over any file.
    pub credentials: Option<Credentials>,
    /// Platform, caps and overrides, as for an import (`allow_unpinned`
    /// lets a bare tag through). `name` defaults to `HOST/REPOSITORY`.
    pub import: ImportOptions,
}

/// What a pull did.
#[derive(Debug, Clone, Serialize)]
pub struct PullReport {
    pub image: ImageRecord,
    /// The digest the reference resolved to at the registry (the index's
    /// for a multi-platform image): the pin to use next time.
    pub digest: Digest,
    /// The reference named that digest itself (false: an unpinned tag).
    pub pinned: bool,
    pub new_layers: usize,
    /// Blobs fetched, and blobs not fetched because the store had the
    /// layer or a cut-short earlier pull had fetched the config.
    pub downloaded: usize,
    pub reused: usize,
    pub verdicts: Vec<Verdict>,
}

fn store_err(path: &Path, e: std::io::Error) -> PullError {
    PullError::Store {
        path: path.display().to_string(),
        why: e.to_string(),
    }
}

/// Parse a registry reference (`HOST[:PORT]/REPO[:TAG][@sha256:HEX]`).
pub(crate) fn parse_reference(
    text: &str,
) -> Result<(oci_client::Reference, Option<Digest>), PullError> {
    let bad = |why: String| PullError::Reference {
        reference: crate::util::quote::display_name(text.as_bytes()),
        why,
    };
    if text.len() > 1024 || text.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("not a registry reference".into()));
    }
    let r = oci_client::Reference::try_from(text).map_err(|e| bad(e.to_string()))?;
    let digest = match r.digest() {
        Some(d) => Some(Digest::parse(d).map_err(bad)?),
        None => None,
    };
    Ok((r, digest))
}

impl Store {
    /// Pull `reference` into the store.
    pub fn pull(&self, reference: &str, opts: &PullOptions) -> Result<PullReport, PullError> {
        let (r, pinned) = parse_reference(reference)?;
        if pinned.is_none() && !opts.import.overrides.allow_unpinned {
            return Err(PullError::Unpinned {
                reference: crate::util::quote::display_name(reference.as_bytes()),
            });
        }
        let host = r.registry().to_string();
        let credentials = match &opts.credentials {
            Some(c) => Some(c.clone()),
            None => match &opts.auth_file {
                Some(f) => auth::lookup(f, &host)?,
                None => match auth::default_files().into_iter().find(|f| f.is_file()) {
                    Some(f) => auth::lookup(&f, &host)?,
                    None => None,
                },
            },
        };
        super::import::check_name(&opts.import)?;
        let insecure = opts.insecure_registries.contains(&host);
        let want = opts.import.platform.clone().unwrap_or_else(Platform::host);
        // gc (exclusive) waits while blobs are fetched into tmp/.
        let _shared = self.lock_store(false)?;
        let cache = self.tmp().join("pulled");
        std::fs::create_dir_all(&cache).map_err(|e| store_err(&cache, e))?;
        let staging = self.staging("pull")?;
        let blobs = staging.path.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).map_err(|e| store_err(&blobs, e))?;

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| store_err(Path::new("(tokio runtime)"), e))?;
        let repository = oci_client::Reference::with_tag(
            r.registry().to_string(),
            r.repository().to_string(),
            "latest".into(),
        );
        let fetched = runtime.block_on(async {
            let reg = Registry::connect(repository, insecure, credentials)?;
            let (top_bytes, top) = reg.manifest(&r, pinned.as_ref(), None).await?;
            let top_type = media_type(&top_bytes);
            let (index, desc, manifest_bytes) = if is_index(&top_type, &top_bytes) {
                let idx: Index = serde_json::from_slice(&top_bytes).map_err(|e| {
                    ImageError::Invalid(format!("index {top}: {}", one_line(&e)))
                })?;
                let candidates: Vec<Descriptor> = idx
                    .manifests
                    .into_iter()
                    .filter(|d| !is_index(&d.media_type, b""))
                    .collect();
                let mut import = opts.import.clone();
                import.platform = Some(want.clone());
                let desc = super::import::choose(candidates, &want, &import)?;
                // Read with the size the index declares (refused over the
                // cap, and unless the body is exactly that long).
                let bytes = reg.manifest_by_digest(&desc.digest, desc.size).await?;
                (Some(top.clone()), desc, bytes)
            } else {
                let desc = Descriptor {
                    media_type: if top_type.is_empty() {
                        oci::MT_OCI_MANIFEST.into()
                    } else {
                        top_type
                    },
                    digest: top.clone(),
                    size: top_bytes.len() as u64,
                    platform: None,
                    annotations: Default::default(),
                };
                (None, desc, top_bytes)
            };
            let manifest: Manifest = serde_json::from_slice(&manifest_bytes).map_err(|e| {
                ImageError::Invalid(format!("manifest {}: {}", desc.digest, one_line(&e)))
            })?;
            if manifest.layers.len() > MAX_LAYERS {
                return Err(ImageError::Invalid(format!(
                    "{} layers: at most {MAX_LAYERS} are supported",
                    manifest.layers.len()
                ))
                .into());
            }
            if manifest.config.size > oci::MAX_DOCUMENT {
                return Err(PullError::Tampered {
                    digest: manifest.config.digest.to_string(),
                    why: format!(
                        "a config of {} bytes, over the {}-byte cap for configs",
                        manifest.config.size,
                        oci::MAX_DOCUMENT
                    ),
                });
            }
            if let Some(list) = &opts.import.overrides.approved {
                let list = Approved::parse(list).map_err(|(i, why)| {
                    ImageError::Invalid(format!("approved list entry {i}: {why}"))
                })?;
                let repository = format!("{}/{}", r.registry(), r.repository());
                if !list.approves_any(&repository, &[&top, &desc.digest]) {
                    return Err(ImageError::Refused(Refusal::NotApproved {
                        digest: desc.digest.to_string(),
                    })
                    .into());
                }
            }
            let compressed: u64 = manifest.layers.iter().map(|l| l.size).sum();
            if compressed > opts.import.max_image_size {
                return Err(ImageError::Invalid(format!(
                    "the image's layers are {compressed} bytes compressed, over the {}-byte \
                     cap (raise it with --max-image-size)",
                    opts.import.max_image_size
                ))
                .into());
            }
            // The config: fetched whole (it is small) and kept for a retry
            // until the image is stored. Layers stream below.
            let d = &manifest.config;
            let dest = blobs.join(d.digest.hex());
            let cached = cache.join(d.digest.hex());
            let config_fetched = if std::fs::hard_link(&cached, &dest).is_ok() {
                false
            } else {
                reg.blob_to_file(&d.digest, d.size, &dest).await?;
                // Verified (another pull may have put it there first: the same bytes).
                let _ = std::fs::hard_link(&dest, &cached);
                true
            };
            let config_bytes = std::fs::read(&dest).map_err(|e| store_err(&dest, e))?;
            Ok::<_, PullError>((
                reg,
                top,
                index,
                desc,
                manifest_bytes,
                manifest,
                config_bytes,
                config_fetched,
            ))
        })?;
        let (reg, top, index, desc, manifest_bytes, manifest, config_bytes, config_fetched) =
            fetched;
        let mut import = opts.import.clone();
        let repo_name = format!("{}/{}", r.registry(), r.repository());
        if import.name.is_none() {
            import.name = Some(match r.tag() {
                Some(t) if pinned.is_none() => format!("{repo_name}:{t}"),
                _ => repo_name.clone(),
            });
        }
        // Each layer streams from the registry through the import's digest
        // check, decompressor and unpacker at once; a download starts when
        // the import reads its layer (one the store has is not fetched).
        let registry = Arc::new(reg);
        let failure = Failure::default();
        let at_once = LayersAtOnce {
            count: LAYERS_AT_ONCE,
            stop: Arc::default(),
        };
        let streamed = Arc::new(AtomicUsize::new(0));
        let handle = runtime.handle().clone();
        let plan = super::import::plan_manifest(
            desc,
            manifest_bytes,
            manifest.clone(),
            config_bytes,
            |l| {
                Ok(Box::new(StreamedBlob::new(
                    handle.clone(),
                    registry.clone(),
                    l.digest.clone(),
                    l.size,
                    failure.clone(),
                    streamed.clone(),
                    at_once.stop.clone(),
                )))
            },
        )?;
        let (done, until_done) = tokio::sync::oneshot::channel::<()>();
        let imported = std::thread::scope(|s| {
            // The downloads run on this thread while the import reads.
            s.spawn(|| runtime.block_on(until_done));
            let imported = self.import_plan(plan, &want, &import, Some(&at_once));
            drop(done);
            imported
        });
        // Downloads still running (an import that failed early) end here.
        drop(runtime);
        let report = match imported {
            Ok(report) => report,
            // What the registry did is the cause, not what the unpacker
            // made of the stream it cut.
            Err(e) => return Err(failure.take().unwrap_or(e.into())),
        };
        let pulled = Pulled {
            repository: repo_name,
            reference: reference.to_string(),
            index,
        };
        let image = self.set_pulled(&report.record.manifest, pulled)?;
        let _ = std::fs::remove_file(cache.join(manifest.config.digest.hex()));
        let streamed = streamed.load(Ordering::Relaxed);
        let blobs_wanted = 1 + manifest.layers.len();
        let downloaded = streamed + usize::from(config_fetched);
        Ok(PullReport {
            image,
            digest: top,
            pinned: pinned.is_some(),
            new_layers: report.new_layers,
            downloaded,
            reused: blobs_wanted.saturating_sub(downloaded),
            verdicts: report.verdicts,
        })
    }

    /// Record where the image `manifest` was pulled from.
    fn set_pulled(&self, manifest: &Digest, pulled: Pulled) -> Result<ImageRecord, PullError> {
        let _index = self.lock_index()?;
        let mut images = self.images()?;
        let Some(rec) = images.iter_mut().find(|i| i.manifest == *manifest) else {
            return Err(ImageError::NotFound(format!(
                "image {manifest} left the index while it was pulled"
            ))
            .into());
        };
        rec.pulled = Some(pulled);
        let out = rec.clone();
        self.write_index(images)?;
        Ok(out)
    }
}

fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().replace(['\n', '\r'], " ")
}

/// The document's `mediaType` field (empty when absent or unreadable).
fn media_type(bytes: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "mediaType", default)]
        media_type: String,
    }
    serde_json::from_slice::<Typed>(bytes)
        .map(|t| t.media_type)
        .unwrap_or_default()
}

/// Whether a document is an index: by media type, or (untyped) by having
/// `manifests` and no `layers`.
fn is_index(media_type: &str, bytes: &[u8]) -> bool {
    if media_type == oci::MT_OCI_INDEX || media_type == oci::MT_DOCKER_LIST {
        return true;
    }
    if !media_type.is_empty() || bytes.is_empty() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .is_some_and(|v| v.get("manifests").is_some() && v.get("layers").is_none())
}
