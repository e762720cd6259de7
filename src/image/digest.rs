//! sha256 digests (`sha256:` + 64 lowercase hex digits) and readers that
//! compute them while the data streams through.

use std::fmt;
use std::io::{self, Read};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

/// A content digest. Only sha256 is accepted: it is what every image tool
/// writes, and one algorithm means one name per blob in the store.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// Parse `sha256:<64 lowercase hex>`.
    pub fn parse(text: &str) -> Result<Digest, String> {
        let Some(hex) = text.strip_prefix("sha256:") else {
            return Err(match text.split_once(':') {
                Some((alg, _))
                    if alg.len() <= 16 && alg.bytes().all(|b| b.is_ascii_alphanumeric()) =>
                {
                    format!("digest algorithm {alg:?} is not supported (only sha256)")
                }
                _ => "not a digest (expected sha256:<64 hex digits>)".to_string(),
            });
        };
        Digest::from_hex(hex)
    }

    /// Parse 64 lowercase hex digits.
    pub fn from_hex(hex: &str) -> Result<Digest, String> {
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err("not a sha256 digest (expected 64 lowercase hex digits)".to_string());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex, &mut out).map_err(|_| "bad hex".to_string())?;
        Ok(Digest(out))
    }

    /// The digest of `data`.
    pub fn of(data: &[u8]) -> Digest {
        Digest(Sha256::digest(data).into())
    }

    /// The 64 hex digits (the store's file and directory names).
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Marker error: a stream went past a byte limit. Carried inside an
/// `io::Error` so it survives decompressors and the tar reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverLimit {
    pub limit: u64,
    /// Which limit: "descriptor size" or "unpacked size".
    pub what: &'static str,
}

impl fmt::Display for OverLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "more data than its {} of {} bytes",
            self.what, self.limit
        )
    }
}

impl std::error::Error for OverLimit {}

/// The [`OverLimit`] inside an io::Error, if that is what it is.
pub fn over_limit(e: &io::Error) -> Option<OverLimit> {
    cause_in(e)
}

/// The error of type `T` a reader failed with, inside the io::Error that
/// reached the caller (decompressors may wrap it once more).
pub(crate) fn cause_in<T: std::error::Error + Copy + 'static>(e: &io::Error) -> Option<T> {
    let mut inner: Option<&(dyn std::error::Error + 'static)> = e.get_ref().map(|r| r as _);
    for _ in 0..4 {
        let cur = inner?;
        if let Some(o) = cur.downcast_ref::<T>() {
            return Some(*o);
        }
        if let Some(io) = cur.downcast_ref::<io::Error>() {
            inner = io.get_ref().map(|r| r as _);
        } else {
            inner = cur.source();
        }
    }
    None
}

/// A reader that hashes and counts what passes through, and fails with
/// [`OverLimit`] as soon as more than `limit` bytes arrive.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
    limit: u64,
    what: &'static str,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R, limit: u64, what: &'static str) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
            limit,
            what,
        }
    }

    /// Read to the end (discarding), then return (digest, byte count).
    pub fn finish(mut self) -> io::Result<(Digest, u64)> {
        let mut buf = vec![0u8; 64 * 1024];
        while self.read(&mut buf)? != 0 {}
        Ok((Digest(self.hasher.finalize().into()), self.count))
    }

}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Ask for at most one byte past the limit: enough to notice it.
        let room = self.limit.saturating_sub(self.count).saturating_add(1);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.count += n as u64;
        if self.count > self.limit {
            return Err(io::Error::other(OverLimit {
                limit: self.limit,
                what: self.what,
            }));
        }
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_full_sha256() {
        let d = Digest::of(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Digest::parse(&d.to_string()).unwrap(), d);
        assert!(Digest::parse("sha256:e3b0c442").is_err());
        assert!(Digest::parse(&d.to_string().to_uppercase()).is_err());
        assert!(Digest::parse("sha512:00").unwrap_err().contains("sha512"));
    }

    #[test]
    fn hashing_reader_stops_past_its_limit() {
        let mut r = HashingReader::new(&b"0123456789"[..], 4, "descriptor size");
        let mut buf = [0u8; 16];
        let mut got = 0;
        let e = loop {
            match r.read(&mut buf) {
                Ok(0) => panic!("no error"),
                Ok(n) => got += n,
                Err(e) => break e,
            }
        };
        assert!(got <= 4);
        assert_eq!(over_limit(&e).unwrap().limit, 4);
        let (d, n) = HashingReader::new(&b"abc"[..], 3, "x").finish().unwrap();
        assert_eq!((d, n), (Digest::of(b"abc"), 3));
    }
}
