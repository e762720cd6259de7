//! Loading profiles from TOML and JSON, with the key path in every error.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::Spec;
use super::validate::{SpecError, validate};

/// Parse and validate a TOML profile.
pub fn parse_toml(text: &str) -> Result<Spec, SpecError> {
    let de = toml::Deserializer::parse(text)
        .map_err(|e| SpecError::new("", one_line(&e.to_string())))?;
    let spec: Spec = serde_path_to_error::deserialize(de)
        .map_err(|e| SpecError::new(e.path().to_string(), one_line(&e.inner().to_string())))?;
    validate(&spec)?;
    Ok(spec)
}

/// Parse and validate a JSON profile.
pub fn parse_json(text: &str) -> Result<Spec, SpecError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let spec: Spec = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| SpecError::new(e.path().to_string(), one_line(&e.inner().to_string())))?;
    de.end()
        .map_err(|e| SpecError::new("", format!("trailing data: {e}")))?;
    validate(&spec)?;
    Ok(spec)
}

/// Load a profile file: JSON when it ends in `.json` or starts with `{`,
/// TOML otherwise.
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
                    return Err(de::Error::custom(format!("duplicate key {key:?}")));
                }
                let value = map.next_value()?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_map(UniqueMap(std::marker::PhantomData))
}
