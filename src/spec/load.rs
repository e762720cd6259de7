//! Loading profiles from TOML and JSON, with the key path in every error.
//!
//! Strict: unknown keys, duplicate keys (in structs and in maps, where
//! serde_json would keep the last one), NUL bytes and out-of-range values
//! are refused, each error naming the key (`limits.memory.prefered`,
//! `env.PATH`, `fs[2].mode`). serde names the offending field of a few
//! errors only in the message (a duplicate field, an unknown field of a
//! tagged table); [`spec_error`] moves it into the path, and a TOML
//! duplicate, which the parser refuses before serde runs, gets its path
//! from the document (`toml_path.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::Spec;
use super::key_path::key_segment;
use super::validate::{SpecError, validate};

/// Parse a TOML profile and check its shape ([`validate`]).
pub fn parse_toml(text: &str) -> Result<Spec, SpecError> {
    let de = toml::Deserializer::parse(text).map_err(|e| toml_error(text, None, &e))?;
    let spec: Spec = serde_path_to_error::deserialize(de)
        .map_err(|e| toml_error(text, Some(e.path()), e.inner()))?;
    validate(&spec)?;
    Ok(spec)
}

/// Parse a JSON profile and check its shape ([`validate`]).
pub fn parse_json(text: &str) -> Result<Spec, SpecError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let spec: Spec = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| spec_error(render_path(e.path()), e.inner().to_string()))?;
    de.end()
        .map_err(|e| SpecError::new("", format!("trailing data: {e}")))?;
    validate(&spec)?;
    Ok(spec)
}

/// Load a profile file: JSON when it ends in `.json` or starts with `{`,
/// TOML otherwise. Only the Spec's shape is checked here; the launcher
/// (`launch::validate`) checks the rest.
pub fn load_profile(path: &Path) -> Result<Spec, SpecError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SpecError::new("", format!("cannot read profile {}: {e}", path.display())))?;
    let is_json =
        path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
    let parsed = if is_json {
        parse_json(&text)
    } else {
        parse_toml(&text)
    };
    parsed.map_err(|e| e.in_file(path))
}

/// A TOML error: its message without the source snippet, where it is, and
/// the key path (from serde, or for a duplicate key from the document).
fn toml_error(
    text: &str,
    path: Option<&serde_path_to_error::Path>,
    e: &toml::de::Error,
) -> SpecError {
    let mut message = one_line(e.message());
    let mut key = path.map(render_path).unwrap_or_default();
    if let Some(span) = e.span() {
        if key.is_empty()
            && message.starts_with("duplicate key")
            && let Some(p) = super::toml_path::key_path_at(text, span.start)
        {
            key = p;
        }
        let upto = &text.as_bytes()[..span.start.min(text.len())];
        let line = upto.iter().filter(|b| **b == b'\n').count() + 1;
        let column = upto.iter().rev().take_while(|b| **b != b'\n').count() + 1;
        message.push_str(&format!(" at line {line} column {column}"));
    }
    spec_error(key, message)
}

/// The error for `message` at `path`, with the field serde named only in
/// the message moved into the path, and control characters escaped.
fn spec_error(mut path: String, message: String) -> SpecError {
    for prefix in ["unknown field `", "duplicate field `"] {
        if let Some(rest) = message.strip_prefix(prefix)
            && let Some(end) = rest.find('`')
        {
            push_key(&mut path, &key_segment(&rest[..end]));
        }
    }
    // `unique_map` writes the key already rendered.
    if let Some(rest) = message.strip_prefix("duplicate key `")
        && let Some(end) = rest.rfind('`')
    {
        push_key(&mut path, &rest[..end]);
    }
    SpecError::new(path, escape_controls(&message))
}

/// Append `seg` to `path` unless it already ends with it.
fn push_key(path: &mut String, seg: &str) {
    if path == seg || path.ends_with(&format!(".{seg}")) {
        return;
    }
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(seg);
}

/// A key path as the Spec's errors write it: `fs[2].dest`, `env."A\0"`.
fn render_path(p: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in p.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key_segment(key));
            }
            Segment::Enum { variant } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key_segment(variant));
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    out
}

/// Control characters of a message (from an unknown key's name, say) as
/// escapes: an error is one printable line.
fn escape_controls(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Deserialize a string-keyed map, rejecting duplicate keys (serde_json
/// would otherwise keep the last one silently).
pub fn unique_map<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: serde::Deserialize<'de>,
{
    struct UniqueMap<V>(std::marker::PhantomData<V>);
    impl<'de, V: serde::Deserialize<'de>> Visitor<'de> for UniqueMap<V> {
        type Value = BTreeMap<String, V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of string keys")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if out.contains_key(&key) {
                    return Err(de::Error::custom(format!(
                        "duplicate key `{}`",
                        key_segment(&key)
                    )));
                }
                let value = map.next_value()?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_map(UniqueMap(std::marker::PhantomData))
}

/// `limits.rlimits`: a [`unique_map`] whose values are numbers, or, for the
/// rlimits counted in bytes, sizes such as `"1G"` ([`super::parse_rlimit`]).
pub fn rlimit_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, u64>, D::Error> {
    struct Value<'k>(&'k str);
    impl<'de> serde::de::DeserializeSeed<'de> for Value<'_> {
        type Value = u64;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl Visitor<'_> for Value<'_> {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if super::SIZE_RLIMITS.contains(&self.0) {
                f.write_str("a number of bytes or a size such as \"512M\"")
            } else {
                f.write_str("a non-negative integer")
            }
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            super::parse_rlimit(self.0, v).map_err(E::custom)
        }
    }
    struct RlimitMap;
    impl<'de> Visitor<'de> for RlimitMap {
        type Value = BTreeMap<String, u64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of rlimit names")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if out.contains_key(&key) {
                    return Err(de::Error::custom(format!(
                        "duplicate key `{}`",
                        key_segment(&key)
                    )));
                }
                let value = map.next_value_seed(Value(&key))?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_map(RlimitMap)
}
