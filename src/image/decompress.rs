//! Layer decompression: gzip (flate2, every member of a multi-member
//! stream) and zstd (ruzstd, a pure-Rust decoder: no C code parses
//! attacker-controlled frames, and the static build needs no C library;
//! every frame of a multi-frame stream). Output size is bounded by the
//! caller's counting reader, memory by the decoders' window limits, and
//! output per input byte by [`Expansion`] (a decompression bomb: gzip
//! reaches ~1 000x, zstd ~30 000x on zeros).

use std::cell::Cell;
use std::fmt;
use std::io::{self, BufRead, Read};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// How far a layer's uncompressed stream may outgrow its compressed
/// blob: at most `ratio` times the compressed bytes read so far, or
/// `floor` bytes whatever the ratio (small layers that are mostly zeros
/// or tar headers are legitimately far above any ratio).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpansionCap {
    pub ratio: u64,
    pub floor: u64,
}

impl ExpansionCap {
    fn allows(&self, unpacked: u64, compressed: u64) -> bool {
        unpacked <= self.floor.max(self.ratio.saturating_mul(compressed))
    }
}

/// Marker error: a decompressed stream outgrew [`ExpansionCap`]. Carried
/// inside an `io::Error` (like [`OverLimit`](super::digest::OverLimit)) so
/// it survives the tar reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverExpansion {
    pub cap: ExpansionCap,
    /// Uncompressed bytes when the cap tripped.
    pub unpacked: u64,
    /// Compressed bytes read by then.
    pub compressed: u64,
    /// The whole image so far tripped it (else this layer alone).
    pub image: bool,
}

impl fmt::Display for OverExpansion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} bytes from {} compressed bytes ({}x), over the expansion cap of {}x \
             (or {} bytes at any ratio): a decompression bomb? (raise the cap with \
             --max-expansion N)",
            if self.image {
                "the image's layers unpack to"
            } else {
                "unpacks to"
            },
            self.unpacked,
            self.compressed,
            self.unpacked / self.compressed.max(1),
            self.cap.ratio,
            self.cap.floor
        )
    }
}

impl std::error::Error for OverExpansion {}

/// The [`OverExpansion`] inside an io::Error, if that is what it is.
pub fn over_expansion(e: &io::Error) -> Option<OverExpansion> {
    super::digest::cause_in(e)
}

/// Counts the bytes a decoder consumes of its (buffered) input, the
/// compressed side of a layer, into a cell that [`Expansion`] reads.
pub struct Counting<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Counting<R> {
    pub fn new(inner: R) -> (Self, Rc<Cell<u64>>) {
        let count = Rc::new(Cell::new(0));
        (
            Counting {
                inner,
                count: count.clone(),
            },
            count,
        )
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.count.set(self.count.get() + n as u64);
        self.inner.consume(n);
    }
}

/// What an image's layers have used so far, all of them together: the
/// layers before the current one, and (a pull unpacks several layers at
/// once) every layer still streaming. Each layer's [`Expansion`] adds its
/// bytes as they pass, so the image's caps hold at every moment.
#[derive(Debug)]
pub struct ImageTally {
    /// Uncompressed (tar) bytes.
    unpacked: AtomicU64,
    /// Compressed bytes the decoders consumed.
    compressed: AtomicU64,
    /// The image's cap on uncompressed bytes (`--max-image-size`).
    limit: u64,
}

impl ImageTally {
    pub fn new(limit: u64) -> ImageTally {
        ImageTally {
            unpacked: AtomicU64::new(0),
            compressed: AtomicU64::new(0),
            limit,
        }
    }

    /// Count a layer that did not stream (the store had it).
    pub fn add(&self, unpacked: u64, compressed: u64) {
        self.unpacked.fetch_add(unpacked, Ordering::Relaxed);
        self.compressed.fetch_add(compressed, Ordering::Relaxed);
    }

    /// Uncompressed bytes so far.
    pub fn unpacked(&self) -> u64 {
        self.unpacked.load(Ordering::Relaxed)
    }
}

/// The uncompressed stream of a layer, failing with [`OverExpansion`]
/// before it hands on a byte beyond the cap, for the layer alone and for
/// the image (its [`ImageTally`], this layer included), and with
/// [`OverLimit`](super::digest::OverLimit) ("unpacked size") once the
/// image's layers together pass the tally's limit. The compressed count
/// is what the decoder consumed ([`Counting`] over its buffered input).
pub struct Expansion<'t, R> {
    inner: R,
    cap: ExpansionCap,
    compressed: Rc<Cell<u64>>,
    unpacked: u64,
    /// Compressed bytes of this layer already added to `image`.
    counted: u64,
    image: &'t ImageTally,
}

impl<'t, R: Read> Expansion<'t, R> {
    pub fn new(
        inner: R,
        cap: ExpansionCap,
        compressed: Rc<Cell<u64>>,
        image: &'t ImageTally,
    ) -> Self {
        Expansion {
            inner,
            cap,
            compressed,
            unpacked: 0,
            counted: 0,
            image,
        }
    }
}

impl<R: Read> Read for Expansion<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.unpacked += n as u64;
        let compressed = self.compressed.get();
        let over = |unpacked, compressed, image| {
            io::Error::other(OverExpansion {
                cap: self.cap,
                unpacked,
                compressed,
                image,
            })
        };
        if !self.cap.allows(self.unpacked, compressed) {
            return Err(over(self.unpacked, compressed, false));
        }
        let more = compressed.saturating_sub(self.counted);
        self.counted = compressed;
        let u = self
            .image
            .unpacked
            .fetch_add(n as u64, Ordering::Relaxed)
            .saturating_add(n as u64);
        let c = self
            .image
            .compressed
            .fetch_add(more, Ordering::Relaxed)
            .saturating_add(more);
        if u > self.image.limit {
            return Err(io::Error::other(super::digest::OverLimit {
                limit: self.image.limit,
                what: "unpacked size",
            }));
        }
        if !self.cap.allows(u, c) {
            return Err(over(u, c, true));
        }
        Ok(n)
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
    fn expansion_stops_a_bomb_before_handing_on_its_bytes() {
        use flate2::write::GzEncoder;
        use std::io::Write;
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&vec![0u8; 8 << 20]).unwrap();
        let bomb = e.finish().unwrap();
        let cap = ExpansionCap {
            ratio: 100,
            floor: 1 << 20,
        };
        let (input, count) = Counting::new(&bomb[..]);
        let plain = decoder(Compression::Gzip, input).unwrap();
        let image = ImageTally::new(u64::MAX);
        let mut r = Expansion::new(plain, cap, count, &image);
        let mut out = 0u64;
        let mut buf = vec![0u8; 64 << 10];
        let e = loop {
            match r.read(&mut buf) {
                Ok(0) => panic!("an 8 MiB gzip of zeros passed a 100x cap"),
                Ok(n) => out += n as u64,
                Err(e) => break e,
            }
        };
        let o = over_expansion(&e).expect("the marker");
        assert!(!o.image && o.unpacked > cap.floor, "{o}");
        // The ratio is gzip's on zeros (~1 000x), not diluted by read-ahead.
        assert!(o.unpacked / o.compressed > 500, "{o}");
        // Only what the cap allowed was handed on.
        assert!(out <= cap.floor.max(100 * o.compressed), "{out} {o}");
        assert!(o.to_string().contains("--max-expansion N"), "{o}");
        // Earlier layers count: a small layer over an image already at
        // the floor trips the image's cap.
        let (input, count) = Counting::new(&bomb[..]);
        let plain = decoder(Compression::Gzip, input).unwrap();
        let image = ImageTally::new(u64::MAX);
        image.add(cap.floor, 0);
        let mut r = Expansion::new(plain, cap, count, &image);
        let e = r.read_to_end(&mut Vec::new()).unwrap_err();
        assert!(over_expansion(&e).unwrap().image);
        // A layer within the ratio passes whole.
        let text = b"hello, world\n".repeat(1000);
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&text).unwrap();
        let gz = e.finish().unwrap();
        let (input, count) = Counting::new(&gz[..]);
        let plain = decoder(Compression::Gzip, input).unwrap();
        let tight = ExpansionCap {
            ratio: 1000,
            floor: 0,
        };
        let mut got = Vec::new();
        Expansion::new(plain, tight, count, &ImageTally::new(u64::MAX))
            .read_to_end(&mut got)
            .unwrap();
        assert_eq!(got, text);
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
