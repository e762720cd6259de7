//! References, resolution for runs (pinned, checked), and the store's
//! housekeeping: inspect, rm, gc.
//!
//! Pinning: `sha256:<64 hex>` and `NAME@sha256:<64 hex>` resolve exactly
//! that manifest (the name in the second form is informational: the
//! digest decides). A bare name resolves only with `allow_unpinned`, and
//! the digest used is in the result. A digest *prefix* never pins: a
//! later import could make it name another image; `image inspect` and
//! `image rm`, which a person types, accept unique prefixes.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

use serde::Serialize;

use super::approved::Approved;
use super::checks::{self, LayerFacts, Overrides, Refusal, Verdict};
use super::digest::Digest;
use super::error::{ImageError, Result};
use super::import::valid_name;
use super::layer::LayerMeta;
use super::oci::{Config, Manifest, Platform, RunConfig};
use super::store::{ImageRecord, Store};
use super::unpack::OpaqueXattr;

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// `sha256:<64 hex>`.
    Digest(Digest),
    /// `NAME@sha256:<64 hex>`.
    Named { name: String, digest: Digest },
    /// A bare name (not a pin).
    Name(String),
}

impl Reference {
    pub fn parse(text: &str) -> Result<Reference> {
        let bad = |why: String| {
            ImageError::Invalid(format!(
                "image reference {}: {why}",
                crate::util::quote::display_name(text.as_bytes())
            ))
        };
        if let Some((name, d)) = text.split_once('@') {
            if !valid_name(name) {
                return Err(bad("not a valid name before '@'".into()));
            }
            let digest = Digest::parse(d).map_err(bad)?;
            return Ok(Reference::Named {
                name: name.into(),
                digest,
            });
        }
        if text.starts_with("sha256:") {
            return match Digest::parse(text) {
                Ok(d) => Ok(Reference::Digest(d)),
                Err(_) => Err(bad(
                    "a digest needs all 64 hex digits (a prefix is not a pin)".into(),
                )),
            };
        }
        if valid_name(text) {
            return Ok(Reference::Name(text.into()));
        }
        Err(bad(
            "not a digest (sha256:<64 hex>), NAME@sha256:<64 hex>, or a name".into(),
        ))
    }

    /// Whether it names one manifest exactly.
    pub fn is_pinned(&self) -> bool {
        !matches!(self, Reference::Name(_))
    }
}

/// One layer of a resolved image, ready to be an overlay lower.
#[derive(Debug, Clone, Serialize)]
pub struct ResolvedLayer {
    pub digest: Digest,
    /// The unpacked tree (`layers/HEX/root`).
    pub dir: PathBuf,
    /// Per-entry owners and modes as the archive had them
    /// (`kind mode uid gid escaped-path` lines).
    pub entries: PathBuf,
    pub opaque_xattr: OpaqueXattr,
    /// Directories marked opaque (the layer's root included).
    pub opaque_dirs: u64,
    /// Files carry the archive's owners (root import); otherwise every
    /// file belongs to `unpacked_by` and `uids`/`gids` are only recorded.
    pub owners_kept: bool,
    pub unpacked_by: u32,
    pub uids: BTreeSet<u32>,
    pub gids: BTreeSet<u32>,
}

/// An image resolved for a run.
#[derive(Debug, Clone, Serialize)]
pub struct ResolvedImage {
    pub manifest_digest: Digest,
    pub config_digest: Digest,
    pub platform: Platform,
    /// False when resolved by a bare name (`allow_unpinned`).
    pub pinned: bool,
    pub names: Vec<String>,
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub cmd: Vec<String>,
    pub entrypoint: Vec<String>,
    /// Bottom to top; layers hidden by an opaque layer root are left out.
    pub layers: Vec<ResolvedLayer>,
    pub verdicts: Vec<Verdict>,
}

/// Everything `image inspect` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub image: ImageRecord,
    pub config: RunConfig,
    pub layers: Vec<LayerMeta>,
    /// The checks against the requested platform, without overrides.
    pub verdicts: Vec<Verdict>,
}

/// What `image rm` removed.
#[derive(Debug, Clone, Serialize)]
pub struct Removed {
    pub manifest: Digest,
    pub names: Vec<String>,
    /// The image record is gone (its layers wait for `gc`).
    pub image_removed: bool,
}

/// What `image gc` removed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    pub layers: Vec<Digest>,
    pub blobs: Vec<Digest>,
    /// Leftovers of interrupted imports in `tmp/`.
    pub staging: usize,
    /// References of sessions that no longer exist.
    #[serde(default)]
    pub stale_refs: usize,
}

impl Store {
    fn find(&self, images: &[ImageRecord], r: &Reference) -> Result<ImageRecord> {
        let found = match r {
            Reference::Digest(d) | Reference::Named { digest: d, .. } => {
                // A pulled multi-platform image answers to its index's digest too.
                images.iter().find(|i| i.manifest == *d).or_else(|| {
                    images
                        .iter()
                        .find(|i| i.pulled.as_ref().and_then(|p| p.index.as_ref()) == Some(d))
                })
            }
            Reference::Name(n) => images.iter().find(|i| i.names.contains(n)),
        };
        found.cloned().ok_or_else(|| {
            ImageError::NotFound(match r {
                Reference::Name(n) => format!(
                    "no image named {} in {} (see `hutch image list`)",
                    crate::util::quote::display_name(n.as_bytes()),
                    self.root().display()
                ),
                Reference::Digest(d) | Reference::Named { digest: d, .. } => format!(
                    "no image with manifest {d} in {} (import it first)",
                    self.root().display()
                ),
            })
        })
    }

    /// For commands a person types: a name, a full digest, `NAME@digest`,
    /// or a unique prefix of a manifest digest (at least 4 hex digits,
    /// with or without `sha256:`).
    pub fn find_loose(&self, text: &str) -> Result<ImageRecord> {
        let images = self.images()?;
        if let Ok(r) = Reference::parse(text)
            && let Ok(img) = self.find(&images, &r)
        {
            return Ok(img);
        }
        let hex = text.strip_prefix("sha256:").unwrap_or(text);
        if hex.len() >= 4
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            let hits: Vec<&ImageRecord> = images
                .iter()
                .filter(|i| i.manifest.hex().starts_with(hex))
                .collect();
            match hits.len() {
                1 => return Ok(hits[0].clone()),
                0 => {}
                n => {
                    return Err(ImageError::Invalid(format!(
                        "{n} images have digests starting {hex}; give more digits"
                    )));
                }
            }
        }
        let r = Reference::parse(text)?;
        self.find(&images, &r)
    }

    fn load(&self, img: &ImageRecord) -> Result<(Config, Vec<LayerMeta>)> {
        let manifest: Manifest = serde_json::from_slice(&self.blob(&img.manifest)?)
            .map_err(|e| ImageError::Invalid(format!("stored manifest {}: {e}", img.manifest)))?;
        let config: Config = serde_json::from_slice(&self.blob(&img.config)?)
            .map_err(|e| ImageError::Invalid(format!("stored config {}: {e}", img.config)))?;
        let listed: Vec<&Digest> = manifest.layers.iter().map(|l| &l.digest).collect();
        if listed != img.layers.iter().collect::<Vec<_>>() || manifest.config.digest != img.config {
            return Err(ImageError::Store {
                path: self.root().display().to_string(),
                why: format!(
                    "the index entry of {} disagrees with its manifest",
                    img.manifest
                ),
            });
        }
        let mut metas = Vec::new();
        for d in &img.layers {
            let m = self.layer_meta(d)?.ok_or_else(|| ImageError::Store {
                path: self.root().display().to_string(),
                why: format!(
                    "layer {d} of {} is missing; import the image again",
                    img.manifest
                ),
            })?;
            metas.push(m);
        }
        Ok((config, metas))
    }

    /// Resolve `reference` for a run on `want` with `overrides`: the
    /// manifest, its config's run defaults and its layer directories, or a
    /// typed refusal ([`ImageError::Refused`]) naming the override.
    pub fn resolve(
        &self,
        reference: &str,
        want: &Platform,
        overrides: &Overrides,
    ) -> Result<ResolvedImage> {
        let r = Reference::parse(reference)?;
        if !r.is_pinned() && !overrides.allow_unpinned {
            return Err(Refusal::Unpinned {
                reference: crate::util::quote::display_name(reference.as_bytes()),
            }
            .into());
        }
        let images = self.images()?;
        let img = self.find(&images, &r)?;
        // The approved list first: an image not on it is not even read.
        let approval = match &overrides.approved {
            Some(list) => {
                let list = Approved::parse(list).map_err(|(i, why)| {
                    ImageError::Invalid(format!("approved list entry {i}: {why}"))
                })?;
                if !list.approves(&img) {
                    return Err(Refusal::NotApproved {
                        digest: img.manifest.to_string(),
                    }
                    .into());
                }
                Some(list.verdict(&img))
            }
            None => None,
        };
        let (config, metas) = self.load(&img)?;
        let facts = facts(&metas);
        let (mut verdicts, refusal) = checks::evaluate(&config, &facts, want, overrides);
        if let Some(r) = refusal {
            return Err(r.into());
        }
        verdicts.extend(approval);
        // A layer whose root is opaque hides everything below it.
        let start = metas
            .iter()
            .rposition(|m| m.summary.root_opaque)
            .unwrap_or(0);
        let layers = metas[start..]
            .iter()
            .map(|m| ResolvedLayer {
                digest: m.digest.clone(),
                dir: self.layer_root(&m.digest),
                entries: self.layer_dir(&m.digest).join("entries"),
                opaque_xattr: m.opaque_xattr,
                opaque_dirs: m.summary.opaque_dirs,
                owners_kept: m.owners_kept,
                unpacked_by: m.unpacked_by,
                uids: m.summary.uids.clone(),
                gids: m.summary.gids.clone(),
            })
            .collect();
        let rc = config.config.clone();
        Ok(ResolvedImage {
            manifest_digest: img.manifest.clone(),
            config_digest: img.config.clone(),
            platform: Platform::of_config(&config),
            pinned: r.is_pinned(),
            names: img.names.clone(),
            env: rc.env,
            working_dir: (!rc.working_dir.is_empty()).then_some(rc.working_dir),
            user: (!rc.user.is_empty()).then_some(rc.user),
            cmd: rc.cmd,
            entrypoint: rc.entrypoint,
            layers,
            verdicts,
        })
    }

    /// The image `text` names (loosely), with its config, layers and
    /// verdicts; with `approved` (an approved list's entries) also the
    /// `approved` verdict.
    pub fn inspect(
        &self,
        text: &str,
        want: &Platform,
        approved: Option<&[String]>,
    ) -> Result<Inspection> {
        let img = self.find_loose(text)?;
        let (config, metas) = self.load(&img)?;
        let (mut verdicts, _) =
            checks::evaluate(&config, &facts(&metas), want, &Overrides::default());
        if let Some(list) = approved {
            let list = Approved::parse(list).map_err(|(i, why)| {
                ImageError::Invalid(format!("approved list entry {i}: {why}"))
            })?;
            verdicts.push(list.verdict(&img));
        }
        Ok(Inspection {
            image: img,
            config: config.config,
            layers: metas,
            verdicts,
        })
    }

    /// Remove a name (the image goes when its last name does) or, given
    /// a digest, the image and all its names. Layers wait for `gc`.
    pub fn remove(&self, text: &str) -> Result<Removed> {
        let img = self.find_loose(text)?;
        let by_name = img.names.iter().any(|n| n == text);
        if !(by_name && img.names.len() > 1)
            && let Some(u) = self
                .live_refs()?
                .into_iter()
                .find(|u| u.manifest == img.manifest)
        {
            return Err(ImageError::Invalid(format!(
                "image {} is used by {} (a session): close it first",
                img.manifest,
                u.holder.display()
            )));
        }
        let _index = self.lock_index()?;
        let mut images = self.images()?;
        let removed = if by_name && img.names.len() > 1 {
            for i in images.iter_mut().filter(|i| i.manifest == img.manifest) {
                i.names.retain(|n| n != text);
            }
            Removed {
                manifest: img.manifest.clone(),
                names: vec![text.to_string()],
                image_removed: false,
            }
        } else {
            images.retain(|i| i.manifest != img.manifest);
            Removed {
                manifest: img.manifest.clone(),
                names: img.names.clone(),
                image_removed: true,
            }
        };
        self.write_index(images)?;
        Ok(removed)
    }

    /// Remove every layer and blob no image in the index references, and
    /// what interrupted imports left in `tmp/`. Waits for running imports.
    pub fn gc(&self) -> Result<GcReport> {
        let _exclusive = self.lock_store(true)?;
        let _index = self.lock_index()?;
        let images = self.images()?;
        let mut keep_layers: HashSet<String> = HashSet::new();
        let mut keep_blobs: HashSet<String> = HashSet::new();
        for i in &images {
            keep_blobs.insert(i.manifest.hex());
            keep_blobs.insert(i.config.hex());
            keep_layers.extend(i.layers.iter().map(|l| l.hex()));
        }
        let mut report = GcReport {
            stale_refs: self.drop_stale_refs()?,
            ..GcReport::default()
        };
        // A session's image stays whole even if its index entry went.
        for u in self.live_refs()? {
            if keep_blobs.contains(&u.manifest.hex()) {
                continue;
            }
            if let Ok(m) = self.blob(&u.manifest).and_then(|b| {
                serde_json::from_slice::<Manifest>(&b)
                    .map_err(|e| ImageError::Invalid(e.to_string()))
            }) {
                keep_blobs.insert(u.manifest.hex());
                keep_blobs.insert(m.config.digest.hex());
                keep_layers.extend(m.layers.iter().map(|l| l.digest.hex()));
            }
        }
        let layers_dir = self.root().join("layers");
        for name in list(&layers_dir)? {
            if keep_layers.contains(&name) {
                continue;
            }
            self.remove_dir_entry(&layers_dir, &name)?;
            if let Ok(d) = Digest::from_hex(&name) {
                report.layers.push(d);
            }
        }
        let blobs_dir = self.root().join("blobs/sha256");
        for name in list(&blobs_dir)? {
            if keep_blobs.contains(&name) {
                continue;
            }
            std::fs::remove_file(blobs_dir.join(&name)).map_err(|e| ImageError::Store {
                path: blobs_dir.join(&name).display().to_string(),
                why: e.to_string(),
            })?;
            if let Ok(d) = Digest::from_hex(&name) {
                report.blobs.push(d);
            }
        }
        let locks_dir = self.root().join("locks");
        for name in list(&locks_dir)? {
            if !keep_layers.contains(&name) {
                let _ = std::fs::remove_file(locks_dir.join(&name));
            }
        }
        // No import runs (they hold the store lock shared): all of tmp/ is stale.
        let tmp = self.tmp();
        for name in list(&tmp)? {
            self.remove_dir_entry(&tmp, &name)?;
            report.staging += 1;
        }
        report.layers.sort();
        report.blobs.sort();
        Ok(report)
    }
}

fn facts(metas: &[LayerMeta]) -> Vec<LayerFacts> {
    metas
        .iter()
        .map(|m| LayerFacts {
            digest: m.digest.to_string(),
            device_count: m.summary.device_count,
            setuid_count: m.summary.setuid_count,
        })
        .collect()
}

fn list(dir: &std::path::Path) -> Result<Vec<String>> {
    let rd = std::fs::read_dir(dir).map_err(|e| ImageError::Store {
        path: dir.display().to_string(),
        why: e.to_string(),
    })?;
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| ImageError::Store {
            path: dir.display().to_string(),
            why: e.to_string(),
        })?;
        out.push(e.file_name().to_string_lossy().into_owned());
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_pin_only_by_full_digest() {
        let d = Digest::of(b"x");
        assert_eq!(
            Reference::parse(&d.to_string()).unwrap(),
            Reference::Digest(d.clone())
        );
        let named = Reference::parse(&format!("debian@{d}")).unwrap();
        assert!(named.is_pinned());
        assert!(!Reference::parse("debian:12").unwrap().is_pinned());
        let e = Reference::parse(&d.to_string()[..20])
            .unwrap_err()
            .to_string();
        assert!(e.contains("prefix is not a pin"), "{e}");
        assert!(Reference::parse("a b").is_err());
    }
}
