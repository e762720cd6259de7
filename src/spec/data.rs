//! The content of `file` and `bind-data` operations: text as it is, or
//! any bytes as standard base64 (`encoding = "base64"`), so that a Spec
//! stays a JSON/TOML document and still carries binary data (bubblewrap's
//! `--file FD` and `--bind-data FD` take any bytes).

use serde::{Deserialize, Serialize};

/// How an operation's `content` is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// The content is the file's bytes (UTF-8 text).
    #[default]
    Text,
    /// The content is standard base64 (RFC 4648, with padding) of the
    /// file's bytes.
    Base64,
}

impl Encoding {
    pub fn is_text(&self) -> bool {
        *self == Encoding::Text
    }

    /// The file's bytes; None when `content` is not valid base64.
    pub fn decode(&self, content: &str) -> Option<Vec<u8>> {
        match self {
            Encoding::Text => Some(content.as_bytes().to_vec()),
            Encoding::Base64 => base64_decode(content),
        }
    }

    /// `data` as a content and its encoding: text when it is UTF-8,
    /// base64 otherwise.
    pub fn encode(data: Vec<u8>) -> (String, Encoding) {
        match String::from_utf8(data) {
            Ok(text) => (text, Encoding::Text),
            Err(e) => (base64_encode(e.as_bytes()), Encoding::Base64),
        }
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (RFC 4648, with padding).
pub(crate) fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Strict: length a multiple of 4, padding only at the end, no other
/// characters.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let s = text.as_bytes();
    if !s.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for (c, chunk) in s.chunks(4).enumerate() {
        let last = c == s.len() / 4 - 1;
        let pad = chunk.iter().rev().take_while(|b| **b == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for (i, b) in chunk[..4 - pad].iter().enumerate() {
            let v = ALPHABET.iter().position(|a| a == b)? as u32;
            n |= v << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_is_strict() {
        for data in [
            &b""[..],
            b"f",
            b"fo",
            b"foo",
            b"foob",
            b"\xff\x00abc\x80\xfe",
        ] {
            let enc = base64_encode(data);
            assert_eq!(base64_decode(&enc).as_deref(), Some(data), "{enc}");
        }
        assert_eq!(base64_encode(b"foob"), "Zm9vYg==");
        for bad in ["Zm9", "Zm=v", "Zm9vYg=a", "Z===", "Zm9v!g==", "Zg==Zg=="] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
        assert_eq!(
            Encoding::encode(b"text".to_vec()),
            ("text".into(), Encoding::Text)
        );
        assert_eq!(
            Encoding::encode(vec![0xff, 0]),
            ("/wA=".into(), Encoding::Base64)
        );
    }
}
