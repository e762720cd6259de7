//! Deserialization of the Spec's enums without losing the key path.
//!
//! serde's untagged and internally tagged enums buffer their input before
//! choosing a variant, so an error inside them names only the enum's own
//! path (`limits.memory: data did not match any variant`). These read
//! every field through the caller's deserializer instead, so that
//! `serde_path_to_error` sees each key: `limits.memory.prefered`,
//! `fs[2].mode`, `network.limits.max_tunnels`.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};

use super::{ByteSize, DetailedLimit, FsOp, Limit, Network, ProxyLimits, ProxyPolicy};

/// A bare value is `Required`; a table is `{ value, preferred }`, read
/// strictly (unknown and duplicate keys are refused at their own path).
impl<'de, T: Deserialize<'de>> Deserialize<'de> for Limit<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Limit<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value, or a table { value = ..., preferred = true }")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Limit<T>, A::Error> {
                DetailedLimit::deserialize(MapAccessDeserializer::new(map)).map(Limit::Detailed)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Limit<T>, A::Error> {
                T::deserialize(SeqAccessDeserializer::new(seq)).map(Limit::Required)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Limit<T>, E> {
                T::deserialize(v.into_deserializer()).map(Limit::Required)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Limit<T>, E> {
                T::deserialize(v.into_deserializer()).map(Limit::Required)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Limit<T>, E> {
                T::deserialize(v.into_deserializer()).map(Limit::Required)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Limit<T>, E> {
                T::deserialize(v.into_deserializer()).map(Limit::Required)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Limit<T>, E> {
                T::deserialize(v.into_deserializer()).map(Limit::Required)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Every key any filesystem operation takes; which ones an `op` accepts
/// is checked once the whole table is read (the tag may come last).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FsOpFields {
    op: Option<String>,
    src: Option<PathBuf>,
    dest: Option<PathBuf>,
    optional: Option<bool>,
    lowers: Option<Vec<PathBuf>>,
    upper: Option<PathBuf>,
    work: Option<PathBuf>,
    size: Option<ByteSize>,
    nr_inodes: Option<u64>,
    mode: Option<u32>,
    content: Option<String>,
    target: Option<PathBuf>,
    fstype: Option<String>,
    options: Option<Vec<String>>,
    kind: Option<String>,
    major: Option<u32>,
    minor: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    recursive: Option<bool>,
    encoding: Option<super::Encoding>,
    writable: Option<bool>,
    layout: Option<super::DevLayout>,
}

/// The `op` names, as written in profiles.
const OPS: &[&str] = &[
    "bind",
    "ro-bind",
    "dev-bind",
    "overlay",
    "tmp-overlay",
    "ro-overlay",
    "tmpfs",
    "proc",
    "dev",
    "mqueue",
    "dir",
    "file",
    "bind-data",
    "symlink",
    "chmod",
    "remount-ro",
    "mount",
    "device",
    "mask",
    "readonly-path",
];

impl FsOpFields {
    /// The keys set, in declaration order.
    fn present(&self) -> Vec<&'static str> {
        [
            ("src", self.src.is_some()),
            ("dest", self.dest.is_some()),
            ("optional", self.optional.is_some()),
            ("lowers", self.lowers.is_some()),
            ("upper", self.upper.is_some()),
            ("work", self.work.is_some()),
            ("size", self.size.is_some()),
            ("nr_inodes", self.nr_inodes.is_some()),
            ("mode", self.mode.is_some()),
            ("content", self.content.is_some()),
            ("target", self.target.is_some()),
            ("fstype", self.fstype.is_some()),
            ("options", self.options.is_some()),
            ("kind", self.kind.is_some()),
            ("major", self.major.is_some()),
            ("minor", self.minor.is_some()),
            ("uid", self.uid.is_some()),
            ("gid", self.gid.is_some()),
            ("recursive", self.recursive.is_some()),
            ("encoding", self.encoding.is_some()),
            ("writable", self.writable.is_some()),
            ("layout", self.layout.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect()
    }

    fn into_op(self) -> Result<FsOp, String> {
        let op = self.op.clone().ok_or("missing field `op`")?;
        let keys: &[&str] = match op.as_str() {
            "bind" | "ro-bind" | "dev-bind" => &["src", "dest", "optional"],
            "overlay" => &["lowers", "upper", "work", "dest"],
            "tmp-overlay" => &["lowers", "dest", "size"],
            "ro-overlay" => &["lowers", "dest"],
            "tmpfs" => &["dest", "size", "nr_inodes", "mode"],
            "proc" | "mqueue" | "mask" | "readonly-path" => &["dest"],
            "dev" => &["dest", "layout"],
            "remount-ro" => &["dest", "recursive"],
            "mount" => &["fstype", "src", "dest", "options", "optional"],
            "device" => &["dest", "kind", "major", "minor", "mode", "uid", "gid"],
            "dir" => &["dest", "mode"],
            "file" => &["dest", "content", "encoding", "mode"],
            "bind-data" => &["dest", "content", "encoding", "mode", "writable"],
            "symlink" => &["target", "dest"],
            "chmod" => &["dest", "mode"],
            other => {
                return Err(format!(
                    "unknown op {other:?}, expected one of {}",
                    OPS.join(", ")
                ));
            }
        };
        if let Some(k) = self.present().into_iter().find(|k| !keys.contains(k)) {
            return Err(format!(
                "unknown field `{k}`, op {op:?} takes {}",
                keys.join(", ")
            ));
        }
        fn need<T>(v: Option<T>, key: &str) -> Result<T, String> {
            v.ok_or_else(|| format!("missing field `{key}`"))
        }
        let dest = need(self.dest, "dest")?;
        let optional = self.optional.unwrap_or(false);
        Ok(match op.as_str() {
            "bind" => FsOp::Bind {
                src: need(self.src, "src")?,
                dest,
                optional,
            },
            "ro-bind" => FsOp::RoBind {
                src: need(self.src, "src")?,
                dest,
                optional,
            },
            "dev-bind" => FsOp::DevBind {
                src: need(self.src, "src")?,
                dest,
                optional,
            },
            "overlay" => FsOp::Overlay {
                lowers: need(self.lowers, "lowers")?,
                upper: need(self.upper, "upper")?,
                work: need(self.work, "work")?,
                dest,
            },
            "tmp-overlay" => FsOp::TmpOverlay {
                lowers: need(self.lowers, "lowers")?,
                dest,
                size: self.size,
            },
            "ro-overlay" => FsOp::RoOverlay {
                lowers: need(self.lowers, "lowers")?,
                dest,
            },
            "tmpfs" => FsOp::Tmpfs {
                dest,
                size: self.size,
                nr_inodes: self.nr_inodes,
                mode: self.mode,
            },
            "proc" => FsOp::Proc { dest },
            "dev" => FsOp::Dev {
                dest,
                layout: self.layout.unwrap_or_default(),
            },
            "mqueue" => FsOp::Mqueue { dest },
            "remount-ro" => FsOp::RemountRo {
                dest,
                recursive: self.recursive.unwrap_or(true),
            },
            "dir" => FsOp::Dir {
                dest,
                mode: self.mode,
            },
            "file" => FsOp::File {
                dest,
                content: need(self.content, "content")?,
                encoding: self.encoding.unwrap_or_default(),
                mode: self.mode,
            },
            "bind-data" => FsOp::BindData {
                dest,
                content: need(self.content, "content")?,
                encoding: self.encoding.unwrap_or_default(),
                mode: self.mode,
                writable: self.writable.unwrap_or(false),
            },
            "symlink" => FsOp::Symlink {
                target: need(self.target, "target")?,
                dest,
            },
            "mount" => FsOp::Mount {
                fstype: need(self.fstype, "fstype")?,
                src: self.src,
                dest,
                options: self.options.unwrap_or_default(),
                optional,
            },
            "device" => FsOp::Device {
                dest,
                kind: need(self.kind, "kind")?,
                major: need(self.major, "major")?,
                minor: need(self.minor, "minor")?,
                mode: self.mode,
                uid: self.uid,
                gid: self.gid,
            },
            "mask" => FsOp::Mask { dest },
            "readonly-path" => FsOp::ReadonlyPath { dest },
            _ => FsOp::Chmod {
                dest,
                mode: need(self.mode, "mode")?,
            },
        })
    }
}

impl<'de> Deserialize<'de> for FsOp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        FsOpFields::deserialize(d)?
            .into_op()
            .map_err(de::Error::custom)
    }
}

/// `network`: the `mode` tag and, for `proxy`, the policy's keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkFields {
    mode: Option<String>,
    allow: Option<Vec<String>>,
    deny: Option<Vec<String>>,
    allow_address: Option<Vec<String>>,
    #[serde(default, deserialize_with = "unique_map_opt")]
    resolve: Option<BTreeMap<String, String>>,
    audit: Option<PathBuf>,
    plain_http: Option<bool>,
    egress_mode: Option<super::EgressMode>,
    limits: Option<ProxyLimits>,
    gateways: Option<Vec<super::Gateway>>,
    intercept: Option<Vec<super::Intercept>>,
}

fn unique_map_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    super::load::unique_map(d).map(Some)
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = NetworkFields::deserialize(d)?;
        let mode = f
            .mode
            .as_deref()
            .ok_or_else(|| de::Error::custom("missing field `mode`"))?;
        let policy_key = [
            ("allow", f.allow.is_some()),
            ("deny", f.deny.is_some()),
            ("allow_address", f.allow_address.is_some()),
            ("resolve", f.resolve.is_some()),
            ("audit", f.audit.is_some()),
            ("plain_http", f.plain_http.is_some()),
            ("egress_mode", f.egress_mode.is_some()),
            ("limits", f.limits.is_some()),
            ("gateways", f.gateways.is_some()),
            ("intercept", f.intercept.is_some()),
        ]
        .into_iter()
        .find_map(|(k, set)| set.then_some(k));
        match mode {
            "none" | "host" => match policy_key {
                Some(k) => Err(de::Error::custom(format!(
                    "unknown field `{k}`, network mode {mode:?} takes no options (the egress policy is mode \"proxy\")"
                ))),
                None if mode == "none" => Ok(Network::None),
                None => Ok(Network::Host),
            },
            "proxy" => Ok(Network::Proxy(ProxyPolicy {
                allow: f.allow.unwrap_or_default(),
                deny: f.deny.unwrap_or_default(),
                allow_address: f.allow_address.unwrap_or_default(),
                resolve: f.resolve.unwrap_or_default(),
                audit: f.audit,
                plain_http: f.plain_http.unwrap_or(false),
                egress_mode: f.egress_mode.unwrap_or_default(),
                limits: f.limits.unwrap_or_default(),
                gateways: f.gateways.unwrap_or_default(),
                intercept: f.intercept.unwrap_or_default(),
            })),
            other => Err(de::Error::custom(format!(
                "unknown network mode {other:?}, expected none, host or proxy"
            ))),
        }
    }
}
