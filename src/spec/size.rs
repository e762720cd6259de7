//! Human-friendly sizes (`2G`, `512M`, `1048576`) and durations (`5m`, `30s`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// A byte count. Parses `123`, `4K`, `512M`, `2G`, `1T` (binary units; an
/// optional trailing `B`/`iB` is accepted). Serializes as a plain integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        if digits_end == 0 {
            return Err(format!(
                "{text:?} is not a size (expected e.g. 512M, 2G, 1048576)"
            ));
        }
        let number: u64 = t[..digits_end]
            .parse()
            .map_err(|_| format!("{text:?} is too large"))?;
        let unit = t[digits_end..].trim();
        let unit = unit
            .strip_suffix("iB")
            .or_else(|| unit.strip_suffix('B'))
            .unwrap_or(unit);
        let shift = match unit.to_ascii_uppercase().as_str() {
            "" => 0,
            "K" => 10,
            "M" => 20,
            "G" => 30,
            "T" => 40,
            _ => return Err(format!("{text:?}: unknown unit (use K, M, G or T)")),
        };
        number
            .checked_mul(1u64 << shift)
            .map(ByteSize)
            .ok_or_else(|| format!("{text:?} is too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count or a size string like \"512M\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration in milliseconds. Parses `250ms`, `30s`, `5m`, `2h`, `1d`, or a
/// bare number of seconds. Serializes as a string like `300s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let digits_end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let number: f64 = t[..digits_end]
            .parse()
            .map_err(|_| format!("{text:?} is not a duration (expected e.g. 30s, 5m, 2h)"))?;
        let scale = match &t[digits_end..] {
            "ms" => 0.001,
            "" | "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(format!("{text:?}: unknown unit (use ms, s, m, h or d)")),
        };
        let secs = number * scale;
        if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
            return Err(format!("{text:?} is out of range"));
        }
        Ok(Duration(std::time::Duration::from_secs_f64(secs)))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration like \"30s\" or \"5m\", or a number of seconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                Duration::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                Duration::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
                Duration::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                Duration::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(ByteSize::parse("2G").unwrap().0, 2 << 30);
        assert_eq!(ByteSize::parse("512MiB").unwrap().0, 512 << 20);
        assert_eq!(ByteSize::parse("17").unwrap().0, 17);
        assert!(ByteSize::parse("-1").is_err());
        assert!(ByteSize::parse("2X").is_err());
        assert!(ByteSize::parse("99999999999T").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(Duration::parse("5m").unwrap().0.as_secs(), 300);
        assert_eq!(Duration::parse("250ms").unwrap().0.as_millis(), 250);
        assert_eq!(Duration::parse("1.5").unwrap().0.as_millis(), 1500);
        assert!(Duration::parse("5 parsecs").is_err());
        assert!(Duration::parse("").is_err());
    }
}
