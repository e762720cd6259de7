//! The approved list: which images may run. Entries are manifest digests
//! (`sha256:<64 hex>`) or `REPOSITORY@sha256:<64 hex>` pairs; a pulled
//! multi-platform image also answers to its index's digest. A list given
//! (file `--approved FILE`, Spec `image.approved`, a session's defaults)
//! refuses every other image before launch, naming its digest; no list
//! means no such policy.

use std::path::Path;

use super::checks::{Outcome, Verdict};
use super::digest::Digest;
use super::error::{ImageError, Result};
use super::import::valid_name;
use super::store::ImageRecord;

/// Largest approved-list file read.
const MAX_FILE: u64 = 4 << 20;
/// Most entries in a list.
pub const MAX_ENTRIES: usize = 100_000;

/// One approved entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Digest(Digest),
    Pair { repository: String, digest: Digest },
}

/// A parsed list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved(Vec<Entry>);

/// Parse one entry; the error says why (never quoting more than the entry).
fn entry(text: &str) -> std::result::Result<Entry, String> {
    match text.split_once('@') {
        Some((repo, d)) => {
            if !valid_name(repo) {
                return Err("not a valid repository before '@'".into());
            }
            Ok(Entry::Pair {
                repository: repo.to_string(),
                digest: Digest::parse(d)?,
            })
        }
        None => Ok(Entry::Digest(Digest::parse(text).map_err(|e| {
            format!("{e}; an entry is sha256:<64 hex> or REPOSITORY@sha256:<64 hex>")
        })?)),
    }
}

impl Approved {
    /// Parse entries; an error names the index of the bad one.
    pub fn parse(entries: &[String]) -> std::result::Result<Approved, (usize, String)> {
        if entries.len() > MAX_ENTRIES {
            return Err((MAX_ENTRIES, format!("more than {MAX_ENTRIES} entries")));
        }
        entries
            .iter()
            .enumerate()
            .map(|(i, e)| entry(e).map_err(|why| (i, why)))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Approved)
    }

    /// Whether `img` is approved: its manifest digest (or the index digest
    /// it was pulled by) is listed alone, or with a repository the image
    /// came from (`pulled.repository`) or is named (`NAME` or `NAME:TAG`).
    pub fn approves(&self, img: &ImageRecord) -> bool {
        let index = img.pulled.as_ref().and_then(|p| p.index.as_ref());
        let digest_fits = |d: &Digest| *d == img.manifest || Some(d) == index;
        let repo_fits = |r: &str| {
            img.pulled.as_ref().is_some_and(|p| p.repository == r)
                || img.names.iter().any(|n| {
                    n == r
                        || n.strip_prefix(r)
                            .is_some_and(|t| t.starts_with(':') && !t[1..].contains('/'))
                })
        };
        self.0.iter().any(|e| match e {
            Entry::Digest(d) => digest_fits(d),
            Entry::Pair { repository, digest } => digest_fits(digest) && repo_fits(repository),
        })
    }

    /// Whether an image of `repository` known by any of `digests` (an
    /// index's and its manifest's) is approved: what a pull checks before
    /// it fetches a layer.
    pub fn approves_any(&self, repository: &str, digests: &[&Digest]) -> bool {
        self.0.iter().any(|e| match e {
            Entry::Digest(d) => digests.contains(&d),
            Entry::Pair {
                repository: r,
                digest,
            } => r == repository && digests.contains(&digest),
        })
    }

    /// The `approved` check's verdict for `img`.
    pub fn verdict(&self, img: &ImageRecord) -> Verdict {
        let ok = self.approves(img);
        Verdict {
            check: "approved".into(),
            outcome: if ok { Outcome::Pass } else { Outcome::Refused },
            detail: if ok {
                format!("{} is on the approved list", img.manifest)
            } else {
                format!(
                    "{} is not on the approved list ({} entr{})",
                    img.manifest,
                    self.0.len(),
                    if self.0.len() == 1 { "y" } else { "ies" }
                )
            },
            override_flag: None,
        }
    }
}

/// Read an approved-list file: one entry a line, `#` comments and blank
/// lines ignored. Every entry is checked; the error names the line.
pub fn read_file(path: &Path) -> Result<Vec<String>> {
    let bad = |why: String| ImageError::Input {
        path: path.display().to_string(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if meta.len() > MAX_FILE {
        return Err(bad(format!("over {MAX_FILE} bytes")));
    }
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8(text).map_err(|_| bad("not UTF-8".into()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        entry(line).map_err(|why| bad(format!("line {}: {why}", n + 1)))?;
        out.push(line.to_string());
        if out.len() > MAX_ENTRIES {
            return Err(bad(format!("more than {MAX_ENTRIES} entries")));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::oci::Platform;

    fn record(manifest: &Digest, names: &[&str]) -> ImageRecord {
        ImageRecord {
            manifest: manifest.clone(),
            config: Digest::of(b"c"),
            platform: Platform::host(),
            names: names.iter().map(|s| s.to_string()).collect(),
            layers: vec![],
            size: 0,
            format: "oci".into(),
            imported: 0,
            pulled: None,
        }
    }

    #[test]
    fn digests_and_repository_pairs() {
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        let img = record(&a, &["reg:5000/team/tools:1"]);
        let list = |e: &[String]| Approved::parse(e).unwrap();
        assert!(list(&[a.to_string()]).approves(&img));
        assert!(!list(&[b.to_string()]).approves(&img));
        assert!(list(&[format!("reg:5000/team/tools@{a}")]).approves(&img));
        assert!(!list(&[format!("reg:5000/team/other@{a}")]).approves(&img));
        assert!(!list(&[format!("reg:5000/team@{a}")]).approves(&img));
        assert!(!list(&[]).approves(&img));
        assert_eq!(list(&[b.to_string()]).verdict(&img).outcome, Outcome::Refused);
        let e = Approved::parse(&[a.to_string(), "sha256:12".into()]).unwrap_err();
        assert_eq!(e.0, 1);
    }
}
