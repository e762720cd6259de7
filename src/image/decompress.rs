//! Layer decompression: gzip (flate2, every member of a multi-member
//! stream) and zstd (ruzstd, a pure-Rust decoder: no C code parses
//! attacker-controlled frames, and the static build needs no C library;
//! every frame of a multi-frame stream). Output size is bounded by the
//! caller's counting reader, memory by the decoders' window limits.

use std::io::{self, BufRead, Read};

use super::oci::Compression;

/// zstd windows above this are refused (the decoder allocates the window):
/// 128 MiB, zstd's own default limit for `--long` streams.
const MAX_ZSTD_WINDOW: u64 = 128 << 20;

/// A reader of the uncompressed bytes of `input`.
pub fn decoder<'a, R: BufRead + 'a>(kind: Compression, input: R) -> io::Result<Box<dyn Read + 'a>> {
    Ok(match kind {
        Compression::None => Box::new(input),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
        Compression::Zstd => Box::new(Zstd::new(input)?),
    })
}

/// The compression a blob's first bytes show (for archives whose
/// manifests do not say: docker-archive layers, `--rootfs FILE`).
pub fn sniff(head: &[u8]) -> Compression {
    if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

/// Decodes frame after frame until the input ends.
struct Zstd<R: BufRead> {
    frame: Option<ruzstd::decoding::StreamingDecoder<R, ruzstd::decoding::FrameDecoder>>,
}

fn zerr(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {e}"))
}

impl<R: BufRead> Zstd<R> {
    fn new(input: R) -> io::Result<Self> {
        let d =
            ruzstd::decoding::StreamingDecoder::new_with_max_window_size(input, MAX_ZSTD_WINDOW)
                .map_err(zerr)?;
        Ok(Zstd { frame: Some(d) })
    }
}

impl<R: BufRead> Read for Zstd<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(frame) = self.frame.as_mut() else {
                return Ok(0);
            };
            let n = frame.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            // This frame is done: another one may follow.
            let frame = self.frame.take().expect("checked above");
            let (mut input, mut dec) = frame.into_parts();
            if input.fill_buf()?.is_empty() {
                return Ok(0);
            }
            dec.reset(&mut input).map_err(zerr)?;
            self.frame = Some(
                ruzstd::decoding::StreamingDecoder::new_with_decoder(input, dec).map_err(zerr)?,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_members_are_all_read() {
        use flate2::write::GzEncoder;
        use std::io::Write;
        let mut out = Vec::new();
        for part in [&b"hello "[..], b"world"] {
            let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(part).unwrap();
            out.extend(e.finish().unwrap());
        }
        assert_eq!(sniff(&out), Compression::Gzip);
        let mut s = String::new();
        decoder(Compression::Gzip, &out[..])
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hello world");
    }

    #[test]
    fn zstd_garbage_is_an_error() {
        let bad = [0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0xff, 0xff, 0, 0, 0];
        let r = decoder(Compression::Zstd, &bad[..]).and_then(|mut d| {
            let mut v = Vec::new();
            d.read_to_end(&mut v).map(|_| v)
        });
        assert!(r.is_err());
    }
}
