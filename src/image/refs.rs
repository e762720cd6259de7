//! What keeps an image in the store besides the index: running sandboxes
//! hold the store lock shared for their whole life ([`Store::hold`]), so
//! `gc` (exclusive) waits for them; a session records a reference
//! (`refs/HEX`, naming the session's directory) when it is created, so
//! `image rm` refuses its image and `gc` keeps its layers for as long as
//! that directory exists. A reference whose directory is gone is stale
//! and removed by `gc`: closing a session needs no call here.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::error::{ImageError, Result};
use super::store::{Lock, Store};

/// `refs/HEX`: HEX is the sha256 of the holder's path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageUse {
    pub manifest: Digest,
    /// The directory whose existence keeps the image (a session's).
    pub holder: PathBuf,
}

impl Store {
    /// The store lock, shared, held by a run for as long as its layers are
    /// mounted: `gc` waits for it.
    pub fn hold(&self) -> Result<Lock> {
        self.lock_store(false)
    }

    /// Record that `holder` (an absolute directory) uses `manifest`.
    pub fn add_ref(&self, manifest: &Digest, holder: &Path) -> Result<()> {
        let _index = self.lock_index()?;
        let text = serde_json::to_vec_pretty(&ImageUse {
            manifest: manifest.clone(),
            holder: holder.to_path_buf(),
        })
        .map_err(|e| ImageError::Invalid(e.to_string()))?;
        let name = Digest::of(holder.as_os_str().as_encoded_bytes()).hex();
        self.write_atomic(&self.root().join("refs").join(name), &text)
    }

    /// Every reference whose holder still exists.
    pub fn live_refs(&self) -> Result<Vec<ImageUse>> {
        Ok(self
            .refs()?
            .into_iter()
            .filter_map(|(_, r)| r.filter(|r| exists(&r.holder)))
            .collect())
    }

    /// Remove the references whose holder is gone (or that are unreadable);
    /// returns how many. The caller holds the index lock.
    pub(crate) fn drop_stale_refs(&self) -> Result<usize> {
        let mut n = 0;
        for (name, r) in self.refs()? {
            if r.is_some_and(|r| exists(&r.holder)) {
                continue;
            }
            let p = self.root().join("refs").join(&name);
            std::fs::remove_file(&p).map_err(|e| ImageError::Store {
                path: p.display().to_string(),
                why: e.to_string(),
            })?;
            n += 1;
        }
        Ok(n)
    }

    fn refs(&self) -> Result<Vec<(String, Option<ImageUse>)>> {
        let dir = self.root().join("refs");
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(ImageError::Store {
                    path: dir.display().to_string(),
                    why: e.to_string(),
                });
            }
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if Digest::from_hex(&name).is_err() {
                continue;
            }
            // Small files of our own; an unreadable one counts as stale.
            let parsed = std::fs::read(e.path())
                .ok()
                .filter(|t| t.len() < 64 * 1024)
                .and_then(|t| serde_json::from_slice::<ImageUse>(&t).ok());
            out.push((name, parsed));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

fn exists(p: &Path) -> bool {
    p.is_absolute() && std::fs::symlink_metadata(p).is_ok()
}
