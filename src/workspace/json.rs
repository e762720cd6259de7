//! JSON for terminals and tools: every string hutch writes as JSON (diff,
//! export manifest, session list, audit lines) may carry workload-chosen
//! names, so characters that steer a terminal or reorder text on screen
//! are written as `\uXXXX` escapes: C0 and C1 controls, DEL, bidi
//! embeddings/overrides/isolates and marks, and the line/paragraph
//! separators. The JSON still decodes to the very same string.

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};

use super::error::{Result, WorkspaceError};

/// Whether `c` is written as an escape.
pub fn is_unsafe_char(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        | '\u{2028}' | '\u{2029}')
}

/// A formatter escaping [`is_unsafe_char`] characters in strings.
struct Safe<F>(F);

impl<F: Formatter> Formatter for Safe<F> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if is_unsafe_char(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                write!(w, "\\u{:04x}", c as u32)?;
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

fn encode<T: Serialize + ?Sized, F: Formatter>(value: &T, f: F) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Safe(f));
    value
        .serialize(&mut ser)
        .map_err(|e| WorkspaceError::io("encode JSON", e.into()))?;
    Ok(out)
}

/// Compact JSON with unsafe characters escaped.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    encode(value, CompactFormatter)
}

/// Indented JSON with unsafe characters escaped.
pub fn to_vec_pretty<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    encode(value, PrettyFormatter::new())
}

/// One compact JSON line (with its newline), unsafe characters escaped.
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut v = to_vec(value)?;
    v.push(b'\n');
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_escaped_and_round_trip() {
        let name = "a\u{9b}31m\u{202e}txt.exe\u{7f}\n";
        let out = String::from_utf8(to_vec(&serde_json::json!({ "path": name })).unwrap()).unwrap();
        assert_eq!(out, r#"{"path":"a\u009b31m\u202etxt.exe\u007f\n"}"#);
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["path"], name);
        let pretty = String::from_utf8(to_vec_pretty(&vec![name]).unwrap()).unwrap();
        assert!(
            pretty.contains("\\u009b") && pretty.contains("\n  \""),
            "{pretty}"
        );
        assert!(!pretty.chars().any(|c| c != '\n' && is_unsafe_char(c)));
    }
}
