//! The OCI image-spec documents hutch reads (index, manifest, config) and
//! their Docker schema-2 equivalents, plus platforms.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::digest::Digest;

pub const MT_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MT_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MT_OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MT_OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const MT_OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MT_OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const MT_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const MT_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const MT_DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar";
pub const MT_DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// The largest index, manifest or config document read (they are parsed
/// in memory).
pub const MAX_DOCUMENT: u64 = 8 << 20;

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The compression of a layer media type, or None when it is not a layer
/// type hutch can unpack.
pub fn layer_compression(media_type: &str) -> Option<Compression> {
    match media_type {
        MT_OCI_LAYER
        | MT_DOCKER_LAYER
        | "application/vnd.oci.image.layer.nondistributable.v1.tar" => Some(Compression::None),
        MT_OCI_LAYER_GZIP
        | MT_DOCKER_LAYER_GZIP
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => Some(Compression::Gzip),
        MT_OCI_LAYER_ZSTD | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" => {
            Some(Compression::Zstd)
        }
        _ => None,
    }
}

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<DescPlatform>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The platform field of an index entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescPlatform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// An image index (or Docker manifest list).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub manifests: Vec<Descriptor>,
}

/// An image manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// The parts of an image config hutch uses.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Config {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(default)]
    pub config: RunConfig,
    pub rootfs: RootFs,
}

/// `config.config`: the defaults of a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunConfig {
    #[serde(rename = "Env", default, deserialize_with = "null_default")]
    pub env: Vec<String>,
    #[serde(rename = "Cmd", default, deserialize_with = "null_default")]
    pub cmd: Vec<String>,
    #[serde(rename = "Entrypoint", default, deserialize_with = "null_default")]
    pub entrypoint: Vec<String>,
    #[serde(rename = "WorkingDir", default, deserialize_with = "null_default")]
    pub working_dir: String,
    #[serde(rename = "User", default, deserialize_with = "null_default")]
    pub user: String,
    #[serde(rename = "Volumes", default, deserialize_with = "null_default")]
    pub volumes: BTreeMap<String, serde_json::Value>,
}

/// `null` where a list or map is expected (Docker writes that) reads as empty.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `config.rootfs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<Digest>,
}

/// `os/architecture[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// Parse `os/arch[/variant]` (e.g. `linux/amd64`, `linux/arm64/v8`).
    pub fn parse(text: &str) -> Result<Platform, String> {
        let parts: Vec<&str> = text.split('/').collect();
        let ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 32
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| ok(p)) {
            return Err(format!(
                "{text:?} is not a platform (expected os/architecture[/variant], e.g. linux/amd64)"
            ));
        }
        Ok(Platform {
            os: parts[0].to_string(),
            architecture: parts[1].to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
        })
    }

    /// The platform this hutch runs on (`linux/amd64` on x86_64).
    pub fn host() -> Platform {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", None),
            "x86" => ("386", None),
            "arm" => ("arm", Some("v7")),
            "powerpc64" if cfg!(target_endian = "little") => ("ppc64le", None),
            "riscv64" => ("riscv64", None),
            "s390x" => ("s390x", None),
            other => (other, None),
        };
        Platform {
            os: "linux".into(),
            architecture: architecture.into(),
            variant: variant.map(str::to_string),
        }
    }

    /// Whether an image of platform `have` runs where `self` is requested:
    /// os and architecture equal, and the variant equal when both name one
    /// (arm64's `v8` is its default).
    pub fn accepts(&self, have: &Platform) -> bool {
        let norm = |p: &Platform| match (p.architecture.as_str(), p.variant.as_deref()) {
            ("arm64", Some("v8")) => None,
            (_, v) => v.map(str::to_string),
        };
        self.os == have.os
            && self.architecture == have.architecture
            && match (norm(self), norm(have)) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }

    pub fn of_config(c: &Config) -> Platform {
        Platform {
            os: c.os.clone(),
            architecture: c.architecture.clone(),
            variant: c.variant.clone(),
        }
    }

    pub fn of_desc(p: &DescPlatform) -> Platform {
        Platform {
            os: p.os.clone(),
            architecture: p.architecture.clone(),
            variant: p.variant.clone(),
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let safe = |s: &str| -> String {
            s.chars()
                .take(32)
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '?'
                    }
                })
                .collect()
        };
        let os = if self.os.is_empty() {
            "?".into()
        } else {
            safe(&self.os)
        };
        let arch = if self.architecture.is_empty() {
            "?".into()
        } else {
            safe(&self.architecture)
        };
        write!(f, "{os}/{arch}")?;
        if let Some(v) = &self.variant {
            write!(f, "/{}", safe(v))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_parse_and_match() {
        let p = Platform::parse("linux/arm64/v8").unwrap();
        assert!(p.accepts(&Platform::parse("linux/arm64").unwrap()));
        assert!(!Platform::parse("linux/amd64").unwrap().accepts(&p));
        assert!(Platform::parse("linux").is_err());
        assert!(Platform::parse("Linux/amd64").is_err());
        assert_eq!(Platform::host().to_string(), "linux/amd64");
    }

    #[test]
    fn docker_nulls_read_as_empty() {
        let c: Config = serde_json::from_str(
            r#"{"architecture":"amd64","os":"linux","config":{"Env":null,"Cmd":null,"Volumes":null},
                "rootfs":{"type":"layers","diff_ids":[]}}"#,
        )
        .unwrap();
        assert!(c.config.env.is_empty() && c.config.volumes.is_empty());
    }
}
