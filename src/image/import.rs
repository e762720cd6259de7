//! `hutch image import`: read an OCI image layout (directory or tar),
//! a docker-archive, or a plain root filesystem, verify every blob
//! against its descriptor, run the checks, import the layers, and record
//! the image in the index last.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;

use super::checks::{self, LayerFacts, Overrides, Refusal, Verdict};
use super::decompress::{ExpansionCap, ImageTally};
use super::digest::Digest;
use super::error::{ImageError, Result};
use super::layer::{LayerInput, LayerLimits, LayerMeta, check_lowers};
use super::oci::{self, Config, Descriptor, Index, Manifest, Platform};
use super::parallel::LayersAtOnce;
use super::plan::Plan;
use super::source::Source;
use super::store::{ImageRecord, Store};

/// Default of `--max-image-size`: 16 GiB of uncompressed layer data.
pub const DEFAULT_MAX_IMAGE_SIZE: u64 = 16 << 30;
/// Entries allowed in one layer.
pub const DEFAULT_MAX_LAYER_ENTRIES: u64 = 1 << 20;
/// Entries allowed in all layers of one image.
pub const DEFAULT_MAX_IMAGE_ENTRIES: u64 = 4 << 20;
/// Layers allowed in one image (overlayfs stacks at most 500 lowers).
pub const MAX_LAYERS: usize = 128;
/// Default of `--max-expansion`: a compressed layer may unpack to at most
/// this many times its compressed size. Real layers are far below it
/// (gzip and zstd of rootfs trees: 2-6x; a layer of 20 000 empty files,
/// all tar headers: 50-60x), while zeros reach ~1 000x in gzip and
/// ~30 000x in zstd.
pub const DEFAULT_MAX_EXPANSION: u64 = 100;
/// Uncompressed bytes a layer (and an image) may reach whatever its
/// ratio: small layers that are mostly padding or headers (a one-directory
/// layer is 10 KiB of tar in ~130 bytes of gzip, 80x) never trip the cap.
/// It bounds what a bomb writes before it is stopped to this plus
/// `--max-expansion` times its compressed size.
pub const EXPANSION_FLOOR: u64 = 64 << 20;
/// Nesting of image indexes.
const MAX_INDEX_DEPTH: u32 = 4;

/// How to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Name to give the image (else the archive's own, when valid).
    pub name: Option<String>,
    /// Platform to pick and check (default: the host's).
    pub platform: Option<Platform>,
    /// The source is a plain root filesystem (directory or tar).
    pub rootfs: bool,
    /// Which image of a multi-image archive (`org.opencontainers.image.ref.name`
    /// of an OCI index entry, or a docker-archive RepoTag).
    pub select: Option<String>,
    pub overrides: Overrides,
    pub max_image_size: u64,
    pub max_layer_entries: u64,
    pub max_image_entries: u64,
    /// A compressed layer, and the image's layers together, may unpack to
    /// at most this many times their compressed size (beyond
    /// [`EXPANSION_FLOOR`]); checked while streaming.
    pub max_expansion: u64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            name: None,
            platform: None,
            rootfs: false,
            select: None,
            overrides: Overrides::default(),
            max_image_size: DEFAULT_MAX_IMAGE_SIZE,
            max_layer_entries: DEFAULT_MAX_LAYER_ENTRIES,
            max_image_entries: DEFAULT_MAX_IMAGE_ENTRIES,
            max_expansion: DEFAULT_MAX_EXPANSION,
        }
    }
}

/// What an import did.
#[derive(Debug, Clone)]
pub struct ImportReport {
    pub record: ImageRecord,
    /// Layers unpacked by this import (the others were already stored).
    pub new_layers: usize,
    pub verdicts: Vec<Verdict>,
}

/// Whether `name` can name an image: `[A-Za-z0-9][A-Za-z0-9._/:-]*`, at
/// most 255 bytes, no `@`, not starting `sha256:`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/:-".contains(&b))
        && !name.starts_with("sha256:")
}

/// `--name`, when given, must be [`valid_name`].
pub(super) fn check_name(opts: &ImportOptions) -> Result<()> {
    if let Some(n) = &opts.name
        && !valid_name(n)
    {
        return Err(ImageError::Invalid(format!(
            "--name {}: a name is letters, digits and ._/:- (at most 255, no '@'), starting with a letter or digit",
            crate::util::quote::display_name(n.as_bytes())
        )));
    }
    Ok(())
}

impl Store {
    /// Import the image at `src`.
    pub fn import(&self, src: &Path, opts: &ImportOptions) -> Result<ImportReport> {
        let _shared = self.lock_store(false)?;
        let want = opts.platform.clone().unwrap_or_else(Platform::host);
        check_name(opts)?;
        let plan = if opts.rootfs {
            super::rootfs::plan(src, &want)?
        } else {
            let source = Source::open(src)?;
            plan_archive(&source, &want, opts)?
        };
        // One layer at a time: a tar archive's members share its file.
        self.import_plan(plan, &want, opts, None)
    }

    /// Import an image whose documents are read and verified (`plan`):
    /// check its config, import its layers (read from their readers, a
    /// layout's files or a registry's streams; with `at_once`, several of
    /// them at the same time, each into its own layer directory), record
    /// it in the index last. The caller holds the store lock shared.
    pub(crate) fn import_plan(
        &self,
        plan: Plan,
        want: &Platform,
        opts: &ImportOptions,
        at_once: Option<&LayersAtOnce>,
    ) -> Result<ImportReport> {
        // Config checks first: a refused image unpacks nothing.
        let (_, refusal) = checks::evaluate(&plan.config, &[], want, &opts.overrides);
        if let Some(r) = refusal {
            return Err(r.into());
        }
        if plan.layers.len() > MAX_LAYERS {
            return Err(ImageError::Invalid(format!(
                "{} layers: at most {MAX_LAYERS} are supported",
                plan.layers.len()
            )));
        }
        let mut metas: Vec<LayerMeta> = Vec::new();
        if opts.max_expansion == 0 {
            return Err(ImageError::Invalid(
                "--max-expansion 0: the expansion cap is a ratio of at least 1".into(),
            ));
        }
        let tally = ImageTally::new(opts.max_image_size);
        let limits = || LayerLimits {
            unpacked: opts.max_image_size.saturating_sub(tally.unpacked()),
            image_limit: opts.max_image_size,
            entries: opts.max_layer_entries,
            allow_devices: opts.overrides.allow_devices,
            expansion: ExpansionCap {
                ratio: opts.max_expansion,
                floor: EXPANSION_FLOOR,
            },
            image: &tally,
        };
        // Several layers at once: each is verified and stored on its own,
        // then checked against the layers below it, in order, here.
        let (stored, inputs) = match at_once {
            Some(at_once) if at_once.count > 1 && plan.layers.len() > 1 => (
                self.import_layers_at_once(plan.layers, at_once, &limits)?,
                Vec::new(),
            ),
            _ => (Vec::new(), plan.layers),
        };
        let (mut stored, mut inputs) = (stored.into_iter(), inputs.into_iter());
        let mut used = 0u64;
        let mut entries = 0u64;
        let mut new_layers = 0;
        loop {
            let (meta, new) = if let Some((meta, new)) = stored.next() {
                check_lowers(self, &meta, &metas)?;
                (meta, new)
            } else if let Some(input) = inputs.next() {
                self.import_layer(input, Some(&metas), &limits())?
            } else {
                break;
            };
            used += meta.unpacked_size;
            entries += meta.summary.entries;
            if used > opts.max_image_size {
                return Err(ImageError::Invalid(format!(
                    "the image's layers unpack to more than {} bytes (raise it with --max-image-size)",
                    opts.max_image_size
                )));
            }
            if entries > opts.max_image_entries {
                return Err(ImageError::Invalid(format!(
                    "the image's layers hold more than {} entries",
                    opts.max_image_entries
                )));
            }
            new_layers += usize::from(new);
            metas.push(meta);
        }
        let mut config = plan.config;
        let mut config_bytes = plan.config_bytes;
        if opts.rootfs {
            // The config was waiting for the computed diff_id.
            config.rootfs.diff_ids = metas.iter().map(|m| m.diff_id.clone()).collect();
            config_bytes =
                serde_json::to_vec(&config).map_err(|e| ImageError::Invalid(e.to_string()))?;
        } else {
            let ids: Vec<&Digest> = config.rootfs.diff_ids.iter().collect();
            let got: Vec<&Digest> = metas.iter().map(|m| &m.diff_id).collect();
            if ids != got {
                return Err(ImageError::Invalid(
                    "the layers' uncompressed digests differ from the config's rootfs.diff_ids"
                        .into(),
                ));
            }
        }
        let facts: Vec<LayerFacts> = metas
            .iter()
            .map(|m| LayerFacts {
                digest: m.digest.to_string(),
                device_count: m.summary.device_count,
                setuid_count: m.summary.setuid_count,
            })
            .collect();
        let (verdicts, refusal) = checks::evaluate(&config, &facts, want, &opts.overrides);
        if let Some(r) = refusal {
            return Err(r.into());
        }
        let config_digest = Digest::of(&config_bytes);
        let (manifest_digest, manifest_bytes) = match plan.manifest {
            Some((d, bytes, m)) => {
                if m.config.digest != config_digest {
                    return Err(ImageError::Invalid(
                        "the manifest's config changed while importing".into(),
                    ));
                }
                (d, bytes)
            }
            None => {
                let m = Manifest {
                    schema_version: 2,
                    media_type: Some(oci::MT_OCI_MANIFEST.into()),
                    config: Descriptor {
                        media_type: oci::MT_OCI_CONFIG.into(),
                        digest: config_digest.clone(),
                        size: config_bytes.len() as u64,
                        platform: None,
                        annotations: BTreeMap::new(),
                    },
                    layers: metas
                        .iter()
                        .map(|l| Descriptor {
                            media_type: l.media_type.clone(),
                            digest: l.digest.clone(),
                            size: l.size,
                            platform: None,
                            annotations: BTreeMap::new(),
                        })
                        .collect(),
                };
                let bytes =
                    serde_json::to_vec(&m).map_err(|e| ImageError::Invalid(e.to_string()))?;
                (Digest::of(&bytes), bytes)
            }
        };
        self.put_blob(&config_digest, &config_bytes)?;
        self.put_blob(&manifest_digest, &manifest_bytes)?;

        let name = opts
            .name
            .clone()
            .or(plan.default_name.filter(|n| valid_name(n)));
        let record = ImageRecord {
            manifest: manifest_digest.clone(),
            config: config_digest,
            platform: Platform::of_config(&config),
            names: name.iter().cloned().collect(),
            layers: metas.iter().map(|m| m.digest.clone()).collect(),
            size: metas.iter().map(|m| m.summary.file_bytes).sum(),
            format: plan.format.into(),
            imported: crate::util::clock::now_secs(),
            pulled: None,
        };
        let _index = self.lock_index()?;
        let mut images = self.images()?;
        if let Some(n) = &name {
            for img in images.iter_mut() {
                img.names.retain(|x| x != n);
            }
        }
        let record = match images.iter_mut().find(|i| i.manifest == manifest_digest) {
            Some(existing) => {
                for n in &record.names {
                    if !existing.names.contains(n) {
                        existing.names.push(n.clone());
                    }
                }
                existing.clone()
            }
            None => {
                images.push(record.clone());
                record
            }
        };
        self.write_index(images)?;
        Ok(ImportReport {
            record,
            new_layers,
            verdicts,
        })
    }
}

/// Read and verify a blob of the layout (documents only).
fn read_blob(source: &Source, d: &Descriptor) -> Result<Vec<u8>> {
    if d.size > oci::MAX_DOCUMENT {
        return Err(ImageError::Blob {
            digest: d.digest.to_string(),
            why: format!(
                "{} bytes, over the {}-byte limit for a manifest or config",
                d.size,
                oci::MAX_DOCUMENT
            ),
        });
    }
    let name = format!("blobs/sha256/{}", d.digest.hex());
    let data = source
        .read_small(&name, oci::MAX_DOCUMENT)?
        .ok_or_else(|| ImageError::Blob {
            digest: d.digest.to_string(),
            why: format!("missing from {}", source.shown),
        })?;
    verify(&d.digest, d.size, &data)?;
    Ok(data)
}

fn verify(digest: &Digest, size: u64, data: &[u8]) -> Result<()> {
    if data.len() as u64 != size {
        return Err(ImageError::Blob {
            digest: digest.to_string(),
            why: format!("{} bytes, but its descriptor says {size}", data.len()),
        });
    }
    let got = Digest::of(data);
    if got != *digest {
        return Err(ImageError::Blob {
            digest: digest.to_string(),
            why: format!("the content's digest is {got}: the blob was altered or corrupted"),
        });
    }
    Ok(())
}

fn parse<T: for<'de> Deserialize<'de>>(what: &str, digest: &str, data: &[u8]) -> Result<T> {
    serde_json::from_slice(data).map_err(|e| {
        ImageError::Invalid(format!(
            "{what} {digest} is not valid: {}",
            // serde_json's message names the position and the expectation,
            // not the content.
            e
        ))
    })
}

fn plan_archive(source: &Source, want: &Platform, opts: &ImportOptions) -> Result<Plan> {
    let has_index = source.exists("index.json");
    if has_index && (source.exists("oci-layout") || !source.exists("manifest.json")) {
        return plan_oci(source, want, opts);
    }
    if source.exists("manifest.json") {
        return plan_docker(source, opts);
    }
    Err(ImageError::Input {
        path: source.shown.clone(),
        why: "neither an OCI image layout (index.json) nor a docker-archive (manifest.json); \
              for a plain root filesystem use --rootfs"
            .into(),
    })
}

fn plan_oci(source: &Source, want: &Platform, opts: &ImportOptions) -> Result<Plan> {
    if let Some(layout) = source.read_small("oci-layout", 4096)? {
        #[derive(Deserialize)]
        struct Layout {
            #[serde(rename = "imageLayoutVersion")]
            version: String,
        }
        let l: Layout = parse("oci-layout", "file", &layout)?;
        if !l.version.starts_with("1.") {
            return Err(ImageError::Invalid(
                "oci-layout: an image layout version other than 1.x".into(),
            ));
        }
    }
    let index_bytes = source
        .read_small("index.json", oci::MAX_DOCUMENT)?
        .ok_or_else(|| ImageError::Invalid("index.json is missing".into()))?;
    let index: Index = parse("index.json", "file", &index_bytes)?;
    let candidates = collect(source, &index)?;
    let desc = choose(candidates, want, opts)?;
    let bytes = read_blob(source, &desc)?;
    let manifest: Manifest = parse("manifest", &desc.digest.to_string(), &bytes)?;
    let config_bytes = read_blob(source, &manifest.config)?;
    plan_manifest(desc, bytes, manifest, config_bytes, |l| {
        let name = format!("blobs/sha256/{}", l.digest.hex());
        let blob = source.open_member(&name)?.ok_or_else(|| ImageError::Blob {
            digest: l.digest.to_string(),
            why: format!("missing from {}", source.shown),
        })?;
        if blob.size != l.size {
            return Err(ImageError::Blob {
                digest: l.digest.to_string(),
                why: format!("{} bytes, but its descriptor says {}", blob.size, l.size),
            });
        }
        Ok(blob.reader)
    })
}

/// The plan of an OCI image from its verified manifest (`desc`, `bytes`)
/// and config bytes (verified against the manifest's descriptor): the
/// media type, diff_ids and layer media types checked, each layer read
/// from what `open_layer` gives for its descriptor (a layout's file, a
/// registry's stream).
pub(super) fn plan_manifest(
    desc: Descriptor,
    bytes: Vec<u8>,
    manifest: Manifest,
    config_bytes: Vec<u8>,
    mut open_layer: impl FnMut(&Descriptor) -> Result<Box<dyn Read + Send>>,
) -> Result<Plan> {
    match manifest
        .media_type
        .as_deref()
        .unwrap_or(desc.media_type.as_str())
    {
        oci::MT_OCI_MANIFEST | oci::MT_DOCKER_MANIFEST | "" => {}
        _ => {
            return Err(ImageError::Invalid(format!(
                "manifest {}: not an image manifest media type",
                desc.digest
            )));
        }
    }
    let config: Config = parse("config", &manifest.config.digest.to_string(), &config_bytes)?;
    if config.rootfs.diff_ids.len() != manifest.layers.len() {
        return Err(ImageError::Invalid(format!(
            "manifest {}: {} layers but the config lists {} diff_ids",
            desc.digest,
            manifest.layers.len(),
            config.rootfs.diff_ids.len()
        )));
    }
    let mut layers = Vec::new();
    for (l, diff) in manifest.layers.iter().zip(&config.rootfs.diff_ids) {
        let compression =
            oci::layer_compression(&l.media_type).ok_or_else(|| ImageError::Blob {
                digest: l.digest.to_string(),
                why: "a layer media type hutch cannot unpack".into(),
            })?;
        layers.push(LayerInput {
            expected: Some((l.digest.clone(), l.size)),
            compression: Some(compression),
            diff_id: Some(diff.clone()),
            reader: open_layer(l)?,
            media_type: Some(l.media_type.clone()),
        });
    }
    let default_name = desc
        .annotations
        .get("org.opencontainers.image.ref.name")
        .cloned();
    Ok(Plan {
        format: "oci",
        manifest: Some((desc.digest.clone(), bytes, manifest)),
        config_bytes,
        config,
        layers,
        default_name,
    })
}

/// Nested image indexes read at the most while looking for the image
/// manifests of a layout. Real layouts nest one or two (a multi-platform
/// index under the layout's `index.json`); each is read once however often
/// it is referenced, so this bounds the work of a hostile layout.
pub const MAX_NESTED_INDEXES: usize = 64;
/// Bytes of nested index documents read at the most, all of them together
/// (one may be up to [`oci::MAX_DOCUMENT`]).
pub const MAX_NESTED_INDEX_BYTES: u64 = 16 << 20;
/// Image manifests collected from a layout's indexes at the most.
pub const MAX_INDEX_MANIFESTS: usize = 1024;

/// What the walk over a layout's indexes has read so far.
#[derive(Default)]
struct IndexWalk {
    /// Digests of the nested indexes already read (and walked).
    seen: std::collections::HashSet<Digest>,
    bytes: u64,
    manifests: Vec<Descriptor>,
    /// The manifests' descriptors as JSON, to list each one once.
    listed: std::collections::HashSet<Vec<u8>>,
}

/// Every image manifest reachable from `index` (nested indexes followed,
/// each read, verified and walked once however many times it is named; a
/// manifest named twice with the same descriptor is listed once).
fn collect(source: &Source, index: &Index) -> Result<Vec<Descriptor>> {
    let mut walk = IndexWalk::default();
    collect_into(source, index, 0, &mut walk)?;
    Ok(walk.manifests)
}

fn collect_into(source: &Source, index: &Index, depth: u32, walk: &mut IndexWalk) -> Result<()> {
    for d in &index.manifests {
        match d.media_type.as_str() {
            oci::MT_OCI_INDEX | oci::MT_DOCKER_LIST => {
                if depth >= MAX_INDEX_DEPTH {
                    return Err(ImageError::Invalid(format!(
                        "image indexes nested more than {MAX_INDEX_DEPTH} deep"
                    )));
                }
                if walk.seen.contains(&d.digest) {
                    continue;
                }
                if walk.seen.len() >= MAX_NESTED_INDEXES {
                    return Err(ImageError::Invalid(format!(
                        "the layout names more than {MAX_NESTED_INDEXES} distinct nested image indexes (the most hutch reads)"
                    )));
                }
                walk.bytes = walk.bytes.saturating_add(d.size);
                if walk.bytes > MAX_NESTED_INDEX_BYTES {
                    return Err(ImageError::Invalid(format!(
                        "the layout's nested image indexes hold more than {MAX_NESTED_INDEX_BYTES} bytes (the most hutch reads)"
                    )));
                }
                walk.seen.insert(d.digest.clone());
                let bytes = read_blob(source, d)?;
                let nested: Index = parse("index", &d.digest.to_string(), &bytes)?;
                collect_into(source, &nested, depth + 1, walk)?;
            }
            oci::MT_OCI_MANIFEST | oci::MT_DOCKER_MANIFEST => {
                let key = serde_json::to_vec(d).map_err(|e| ImageError::Invalid(e.to_string()))?;
                if walk.listed.insert(key) {
                    walk.manifests.push(d.clone());
                }
            }
            // Attestations, signatures and other artifacts are not images.
            _ => {}
        }
        if walk.manifests.len() > MAX_INDEX_MANIFESTS {
            return Err(ImageError::Invalid(format!(
                "more than {MAX_INDEX_MANIFESTS} manifests in the index"
            )));
        }
    }
    Ok(())
}

pub(super) fn choose(
    mut candidates: Vec<Descriptor>,
    want: &Platform,
    opts: &ImportOptions,
) -> Result<Descriptor> {
    if let Some(sel) = &opts.select {
        candidates.retain(|d| d.annotations.get("org.opencontainers.image.ref.name") == Some(sel));
        if candidates.is_empty() {
            return Err(ImageError::NotFound(format!(
                "no manifest in the index has the ref name {}",
                crate::util::quote::display_name(sel.as_bytes())
            )));
        }
    }
    if candidates.is_empty() {
        return Err(ImageError::Invalid(
            "the index lists no image manifest".into(),
        ));
    }
    if candidates.len() == 1 {
        // Its config's platform is checked like any other.
        return Ok(candidates.remove(0));
    }
    let matching: Vec<&Descriptor> = candidates
        .iter()
        .filter(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| want.accepts(&Platform::of_desc(p)))
        })
        .collect();
    let unlabelled: Vec<&Descriptor> = candidates.iter().filter(|d| d.platform.is_none()).collect();
    let pick = if !matching.is_empty() {
        matching
    } else {
        unlabelled
    };
    match pick.len() {
        1 => Ok(pick[0].clone()),
        0 => {
            let have: Vec<String> = candidates
                .iter()
                .filter_map(|d| {
                    d.platform
                        .as_ref()
                        .map(|p| Platform::of_desc(p).to_string())
                })
                .take(8)
                .collect();
            Err(Refusal::Platform {
                have: have.join(", "),
                want: want.to_string(),
            }
            .into())
        }
        n => Err(ImageError::Invalid(format!(
            "{n} manifests in the index fit {want}; choose one with --ref NAME \
             (its org.opencontainers.image.ref.name)"
        ))),
    }
}

#[derive(Deserialize)]
struct DockerEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default, deserialize_with = "null_vec")]
    repo_tags: Vec<String>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

fn null_vec<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

/// The digest a docker-archive member name carries (`HEX.json`,
/// `blobs/sha256/HEX`), if any.
fn named_digest(name: &str) -> Option<Digest> {
    let base = name.rsplit('/').next()?;
    let hex = base.strip_suffix(".json").unwrap_or(base);
    if name.starts_with("blobs/sha256/") || name.ends_with(".json") {
        Digest::from_hex(hex).ok()
    } else {
        None
    }
}

fn plan_docker(source: &Source, opts: &ImportOptions) -> Result<Plan> {
    let bytes = source
        .read_small("manifest.json", oci::MAX_DOCUMENT)?
        .ok_or_else(|| ImageError::Invalid("manifest.json is missing".into()))?;
    let mut entries: Vec<DockerEntry> = parse("docker-archive manifest.json", "file", &bytes)?;
    if let Some(sel) = &opts.select {
        entries.retain(|e| e.repo_tags.contains(sel));
    }
    let entry = match entries.len() {
        1 => entries.remove(0),
        0 if opts.select.is_some() => {
            return Err(ImageError::NotFound(
                "no image in the archive has that RepoTag".into(),
            ));
        }
        0 => return Err(ImageError::Invalid("manifest.json lists no image".into())),
        n => {
            return Err(ImageError::Invalid(format!(
                "the archive holds {n} images; choose one with --ref REPO:TAG (its RepoTags)"
            )));
        }
    };
    let config_bytes = source
        .read_small(&entry.config, oci::MAX_DOCUMENT)?
        .ok_or_else(|| {
            ImageError::Invalid("the config named by manifest.json is missing".into())
        })?;
    let config_digest = Digest::of(&config_bytes);
    if let Some(named) = named_digest(&entry.config)
        && named != config_digest
    {
        return Err(ImageError::Blob {
            digest: named.to_string(),
            why: format!(
                "the config's content digest is {config_digest}: the blob was altered or corrupted"
            ),
        });
    }
    let config: Config = parse("config", &config_digest.to_string(), &config_bytes)?;
    if config.rootfs.diff_ids.len() != entry.layers.len() {
        return Err(ImageError::Invalid(format!(
            "manifest.json lists {} layers but the config lists {} diff_ids",
            entry.layers.len(),
            config.rootfs.diff_ids.len()
        )));
    }
    let mut layers = Vec::new();
    for (name, diff) in entry.layers.iter().zip(&config.rootfs.diff_ids) {
        let missing = || ImageError::Blob {
            digest: diff.to_string(),
            why: format!(
                "the layer file {} is missing",
                crate::util::quote::display_name(name.as_bytes())
            ),
        };
        let mut head = [0u8; 4];
        let mut probe = source.open_member(name)?.ok_or_else(missing)?;
        let n = read_head(&mut probe.reader, &mut head);
        let compression = super::decompress::sniff(&head[..n]);
        let blob = source.open_member(name)?.ok_or_else(missing)?;
        // An uncompressed layer's blob digest is its diff_id, so a stored
        // copy is found without reading it; a blob named by its digest
        // (docker 25+) is checked against that name.
        let expected = match (named_digest(name), compression) {
            (Some(d), _) => Some((d, blob.size)),
            (None, oci::Compression::None) => Some((diff.clone(), blob.size)),
            (None, _) => None,
        };
        layers.push(LayerInput {
            expected,
            compression: Some(compression),
            diff_id: Some(diff.clone()),
            reader: blob.reader,
            media_type: None,
        });
    }
    Ok(Plan {
        format: "docker-archive",
        manifest: None,
        config_bytes,
        config,
        layers,
        default_name: entry.repo_tags.first().cloned(),
    })
}

fn read_head(r: &mut dyn Read, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}
