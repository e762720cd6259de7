//! A streaming tar reader for hostile input: ustar, GNU and PAX headers,
//! with every piece of metadata bounded (a GNU long name or a PAX header
//! is read into memory only up to a small cap, unlike general-purpose tar
//! crates that read them whole). Entry data is never buffered: the caller
//! reads it through [`TarReader::read_data`].

use std::io::{self, Read};

/// The longest path or link target accepted (Linux's PATH_MAX).
pub const MAX_NAME: usize = 4096;
/// The largest PAX extended header accepted.
const MAX_PAX: u64 = 1 << 20;
/// At most this many extension headers (PAX, GNU long names) before one entry.
const MAX_EXTENSIONS: u32 = 16;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Hardlink,
    Symlink,
    Char,
    Block,
    Dir,
    Fifo,
}

impl Kind {
}

/// One entry's header, after PAX and GNU extensions are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    /// The raw name as the archive spells it (not yet normalised).
    pub path: Vec<u8>,
    /// Link target (symlinks, hard links).
    pub link: Vec<u8>,
    /// Permission bits (`& 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Data bytes that follow (0 for everything but regular files).
    pub size: u64,
    pub mtime: i64,
    pub dev_major: u32,
    pub dev_minor: u32,
    /// Extended attributes the archive carried (`SCHILY.xattr.*`,
    /// `LIBARCHIVE.xattr.*`): counted, never applied.
    pub xattrs: u32,
}

/// Why the archive could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Malformed(String),
}

fn bad<T>(why: impl Into<String>) -> Result<T, TarError> {
    Err(TarError::Malformed(why.into()))
}

/// Reads entries one by one from a tar stream.
pub struct TarReader<R> {
    inner: R,
    /// Data bytes of the current entry not yet read.
    remaining: u64,
    /// Padding after the current entry's data.
    padding: u64,
    done: bool,
    /// Offset of the current header in the stream (for messages).
    offset: u64,
    pos: u64,
}

impl<R: Read> TarReader<R> {
    pub fn new(inner: R) -> Self {
        TarReader {
            inner,
            remaining: 0,
            padding: 0,
            done: false,
            offset: 0,
            pos: 0,
        }
    }

    /// Byte offset of the last header read.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Offset in the stream of the current entry's next data byte.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Skip the rest of the current entry by seeking (for indexing a tar file).
    pub fn seek_past_data(&mut self) -> Result<(), TarError>
    where
        R: io::Seek,
    {
        let n = self.remaining + self.padding;
        self.remaining = 0;
        self.padding = 0;
        let n = i64::try_from(n).or_else(|_| bad("an entry size is out of range"))?;
        self.pos = self.inner.seek(io::SeekFrom::Current(n))?;
        Ok(())
    }

    /// The underlying reader (e.g. to drain it after the end-of-archive).
    pub fn into_inner(self) -> R {
        self.inner
    }

    fn read_exact_or_eof(&mut self, buf: &mut [u8]) -> Result<bool, TarError> {
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => return bad("the archive ends inside a header"),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.pos += buf.len() as u64;
        Ok(true)
    }

    fn skip(&mut self, mut n: u64) -> Result<(), TarError> {
        let mut scratch = [0u8; 8192];
        while n > 0 {
            let want = n.min(scratch.len() as u64) as usize;
            let got = self.inner.read(&mut scratch[..want])?;
            if got == 0 {
                return bad("the archive ends inside an entry's data");
            }
            n -= got as u64;
            self.pos += got as u64;
        }
        Ok(())
    }

    /// Skip `n` bytes; false when the stream ends before the first of them.
    fn skip_or_eof(&mut self, n: u64) -> Result<bool, TarError> {
        let mut scratch = [0u8; 512];
        let want = n.min(scratch.len() as u64) as usize;
        let got = self.inner.read(&mut scratch[..want])?;
        if got == 0 {
            return Ok(false);
        }
        self.pos += got as u64;
        self.skip(n - got as u64)?;
        Ok(true)
    }

    /// Read up to `buf.len()` bytes of the current entry's data; 0 at its end.
    pub fn read_data(&mut self, buf: &mut [u8]) -> Result<usize, TarError> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let want = self.remaining.min(buf.len() as u64) as usize;
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return bad("the archive ends inside an entry's data");
        }
        self.remaining -= n as u64;
        self.pos += n as u64;
        Ok(n)
    }

    /// Read a small extension body (long name, PAX header) fully.
    fn read_small(&mut self, size: u64, cap: u64, what: &str) -> Result<Vec<u8>, TarError> {
        if size > cap {
            return bad(format!("{what} of {size} bytes (the limit is {cap})"));
        }
        let mut v = vec![0u8; size as usize];
        if !self.read_exact_or_eof(&mut v)? && size > 0 {
            return bad("the archive ends inside an extension header");
        }
        self.skip(pad(size))?;
        Ok(v)
    }

    /// The next entry, or `None` at the end of the archive.
    pub fn next_entry(&mut self) -> Result<Option<Entry>, TarError> {
        if self.done {
            return Ok(None);
        }
        // Whatever the caller left of the previous entry.
        let rest = self.remaining;
        self.remaining = 0;
        self.skip(rest)?;
        // A stream that ends right after the last entry's data, without
        // padding or end-of-archive blocks, is complete (`umoci insert`
        // writes such layers; umoci and Go's reader accept them).
        let padding = std::mem::take(&mut self.padding);
        if padding > 0 && !self.skip_or_eof(padding)? {
            self.done = true;
            return Ok(None);
        }

        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut pax = Pax::default();
        let mut extensions = 0u32;
        loop {
            self.offset = self.pos;
            let mut h = [0u8; 512];
            if !self.read_exact_or_eof(&mut h)? {
                // No end-of-archive blocks: accepted, as GNU tar does.
                if extensions > 0 {
                    return bad("the archive ends after an extension header");
                }
                self.done = true;
                return Ok(None);
            }
            if h.iter().all(|&b| b == 0) {
                if extensions > 0 {
                    return bad("an extension header is followed by the end of the archive");
                }
                self.done = true;
                return Ok(None);
            }
            verify_checksum(&h)?;
            let typeflag = h[156];
            let size = number(&h[124..136], "size")?;
            match typeflag {
                b'x' | b'g' | b'L' | b'K' => {
                    extensions += 1;
                    if extensions > MAX_EXTENSIONS {
                        return bad("too many extension headers before one entry");
                    }
                }
                _ => {}
            }
            match typeflag {
                b'x' => {
                    let body = self.read_small(size, MAX_PAX, "a PAX header")?;
                    pax.parse(&body)?;
                    continue;
                }
                b'g' => {
                    // Global headers (e.g. git archive's comment) carry
                    // nothing an unpacker applies; parsed only to be checked.
                    let body = self.read_small(size, MAX_PAX, "a PAX global header")?;
                    Pax::default().parse(&body)?;
                    continue;
                }
                b'L' => {
                    let body = self.read_small(size, MAX_NAME as u64 + 1, "a GNU long name")?;
                    long_name = Some(gnu_string(body)?);
                    continue;
                }
                b'K' => {
                    let body =
                        self.read_small(size, MAX_NAME as u64 + 1, "a GNU long link name")?;
                    long_link = Some(gnu_string(body)?);
                    continue;
                }
                _ => {}
            }
            if pax.sparse {
                return bad("sparse entries (PAX GNU.sparse) are not supported");
            }
            let kind = match typeflag {
                b'0' | 0 | b'7' => Kind::File,
                b'1' => Kind::Hardlink,
                b'2' => Kind::Symlink,
                b'3' => Kind::Char,
                b'4' => Kind::Block,
                b'5' => Kind::Dir,
                b'6' => Kind::Fifo,
                b'S' => return bad("sparse entries (GNU type S) are not supported"),
                other if other.is_ascii_graphic() => {
                    return bad(format!("entry type {:?} is not supported", other as char));
                }
                other => return bad(format!("entry type byte {other:#04x} is not supported")),
            };
            let ustar = &h[257..263] == b"ustar\0";
            let mut path = match (pax.path.take(), long_name.take()) {
                (Some(p), _) => p,
                (None, Some(p)) => p,
                (None, None) => {
                    let name = cstr_field(&h[0..100]);
                    let prefix = if ustar { cstr_field(&h[345..500]) } else { &[] };
                    let mut p = Vec::with_capacity(prefix.len() + 1 + name.len());
                    if !prefix.is_empty() {
                        p.extend_from_slice(prefix);
                        p.push(b'/');
                    }
                    p.extend_from_slice(name);
                    p
                }
            };
            // Old tars mark directories only by a trailing slash.
            let kind = if kind == Kind::File && typeflag != b'7' && path.ends_with(b"/") {
                Kind::Dir
            } else {
                kind
            };
            if kind == Kind::Dir {
                while path.len() > 1 && path.ends_with(b"/") {
                    path.pop();
                }
            }
            let link = match (pax.link.take(), long_link.take()) {
                (Some(l), _) => l,
                (None, Some(l)) => l,
                (None, None) => cstr_field(&h[157..257]).to_vec(),
            };
            let size = pax.size.unwrap_or(size);
            let data = if kind == Kind::File { size } else { 0 };
            // Hard links, links and directories may declare a size; their
            // data (if any) is skipped, and counted like any other.
            let entry = Entry {
                kind,
                path,
                link,
                mode: (number(&h[100..108], "mode")? & 0o7777) as u32,
                uid: id(pax.uid, number(&h[108..116], "uid")?)?,
                gid: id(pax.gid, number(&h[116..124], "gid")?)?,
                size: data,
                mtime: pax.mtime.unwrap_or(signed_number(&h[136..148], "mtime")?),
                dev_major: if ustar || &h[257..263] == b"ustar " {
                    number(&h[329..337], "devmajor")? as u32
                } else {
                    0
                },
                dev_minor: if ustar || &h[257..263] == b"ustar " {
                    number(&h[337..345], "devminor")? as u32
                } else {
                    0
                },
                xattrs: pax.xattrs,
            };
            // Data of other kinds (a hard link may declare a size) is skipped.
            self.remaining = size;
            self.padding = pad(size);
            return Ok(Some(entry));
        }
    }
}

fn pad(size: u64) -> u64 {
    (512 - size % 512) % 512
}

fn id(pax: Option<u64>, header: u64) -> Result<u32, TarError> {
    let v = pax.unwrap_or(header);
    u32::try_from(v).or_else(|_| bad("a uid or gid does not fit 32 bits"))
}

/// A GNU long name body: the name, NUL-terminated; a NUL inside is refused.
fn gnu_string(mut body: Vec<u8>) -> Result<Vec<u8>, TarError> {
    while body.last() == Some(&0) {
        body.pop();
    }
    if body.contains(&0) {
        return bad("a name contains a NUL byte");
    }
    Ok(body)
}

/// Bytes of a NUL-terminated header field.
fn cstr_field(f: &[u8]) -> &[u8] {
    let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
    &f[..end]
}

fn verify_checksum(h: &[u8; 512]) -> Result<(), TarError> {
    let stored = number(&h[148..156], "checksum")?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in h.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    if stored != unsigned && stored as i64 != signed {
        return bad("a header checksum does not match (not a tar archive, or a corrupt one)");
    }
    Ok(())
}

/// A numeric header field: octal text (spaces/NULs around it), or GNU
/// base-256 when the high bit of the first byte is set.
fn number(f: &[u8], what: &str) -> Result<u64, TarError> {
    let v = signed_number(f, what)?;
    u64::try_from(v).or_else(|_| bad(format!("a negative {what} field")))
}

fn signed_number(f: &[u8], what: &str) -> Result<i64, TarError> {
    if f.first().is_some_and(|&b| b & 0x80 != 0) {
        let negative = f[0] == 0xff;
        let mut v: i128 = if negative {
            -1
        } else {
            i128::from(f[0] & 0x7f)
        };
        for &b in &f[1..] {
            v = (v << 8) | i128::from(b);
            if v.abs() > i128::from(i64::MAX) {
                return bad(format!("the {what} field is out of range"));
            }
        }
        return Ok(v as i64);
    }
    let text: Vec<u8> = f
        .iter()
        .copied()
        .skip_while(|&b| b == b' ' || b == 0)
        .take_while(|&b| b != b' ' && b != 0)
        .collect();
    if text.is_empty() {
        return Ok(0);
    }
    let mut v: i64 = 0;
    for b in text {
        if !(b'0'..=b'7').contains(&b) {
            return bad(format!("the {what} field is not an octal number"));
        }
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add(i64::from(b - b'0')))
            .map_or_else(|| bad(format!("the {what} field is out of range")), Ok)?;
    }
    Ok(v)
}

/// The PAX records hutch applies.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    size: Option<u64>,
    uid: Option<u64>,
    gid: Option<u64>,
    mtime: Option<i64>,
    xattrs: u32,
    sparse: bool,
}

impl Pax {
    /// Records are `LEN KEY=VALUE\n`, LEN counting the whole record.
    fn parse(&mut self, mut body: &[u8]) -> Result<(), TarError> {
        while !body.is_empty() {
            let sp = body
                .iter()
                .take(20)
                .position(|&b| b == b' ')
                .map_or_else(|| bad("a malformed PAX record"), Ok)?;
            let len: usize = std::str::from_utf8(&body[..sp])
                .ok()
                .and_then(|s| s.parse().ok())
                .map_or_else(|| bad("a malformed PAX record length"), Ok)?;
            if len <= sp + 1 || len > body.len() || body[len - 1] != b'\n' {
                return bad("a malformed PAX record");
            }
            let rec = &body[sp + 1..len - 1];
            body = &body[len..];
            let eq = rec
                .iter()
                .position(|&b| b == b'=')
                .map_or_else(|| bad("a PAX record without '='"), Ok)?;
            let (key, value) = (&rec[..eq], &rec[eq + 1..]);
            let text = |v: &[u8]| -> Result<u64, TarError> {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .map_or_else(|| bad("a PAX number is malformed"), Ok)
            };
            match key {
                b"path" => self.path = Some(pax_name(value)?),
                b"linkpath" => self.link = Some(pax_name(value)?),
                b"size" => self.size = Some(text(value)?),
                b"uid" => self.uid = Some(text(value)?),
                b"gid" => self.gid = Some(text(value)?),
                b"mtime" => {
                    // Seconds with an optional fraction; the fraction is dropped.
                    let whole = value.split(|&b| b == b'.').next().unwrap_or(b"");
                    let s = std::str::from_utf8(whole).unwrap_or("x");
                    self.mtime = Some(
                        s.parse()
                            .map_or_else(|_| bad("a PAX mtime is malformed"), Ok)?,
                    );
                }
                k if k.starts_with(b"GNU.sparse.") => self.sparse = true,
                k if k.starts_with(b"SCHILY.xattr.") || k.starts_with(b"LIBARCHIVE.xattr.") => {
                    self.xattrs = self.xattrs.saturating_add(1)
                }
                _ => {}
            }
        }
        Ok(())
    }
}

fn pax_name(v: &[u8]) -> Result<Vec<u8>, TarError> {
    if v.contains(&0) {
        return bad("a name contains a NUL byte");
    }
    if v.len() > MAX_NAME {
        return bad(format!("a name longer than {MAX_NAME} bytes"));
    }
    Ok(v.to_vec())
}

/// Building archives, for tests, the fuzz target and `--rootfs DIR`.
pub mod write {
    /// A ustar header for `path` (PAX records are emitted first when the
    /// name or link does not fit), returned as the bytes to write.
    pub struct Header<'a> {
        pub typeflag: u8,
        pub path: &'a [u8],
        pub link: &'a [u8],
        pub mode: u32,
        pub uid: u32,
        pub gid: u32,
        pub size: u64,
        pub mtime: i64,
        pub dev_major: u32,
        pub dev_minor: u32,
    }

    fn octal(field: &mut [u8], v: u64) {
        let width = field.len() - 1;
        let s = format!("{v:0width$o}");
        if s.len() > width {
            // GNU base-256 for values that do not fit.
            field.fill(0);
            field[0] = 0x80;
            let bytes = v.to_be_bytes();
            let n = field.len() - 1;
            let take = bytes.len().min(n);
            let len = field.len();
            field[len - take..].copy_from_slice(&bytes[bytes.len() - take..]);
            return;
        }
        field[..width].copy_from_slice(s.as_bytes());
        field[width] = 0;
    }

    fn raw(h: &Header<'_>, name: &[u8], link: &[u8], typeflag: u8, size: u64) -> [u8; 512] {
        let mut b = [0u8; 512];
        b[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
        octal(&mut b[100..108], u64::from(h.mode));
        octal(&mut b[108..116], u64::from(h.uid));
        octal(&mut b[116..124], u64::from(h.gid));
        octal(&mut b[124..136], size);
        octal(&mut b[136..148], h.mtime.max(0) as u64);
        b[156] = typeflag;
        b[157..157 + link.len().min(100)].copy_from_slice(&link[..link.len().min(100)]);
        b[257..263].copy_from_slice(b"ustar\0");
        b[263..265].copy_from_slice(b"00");
        octal(&mut b[329..337], u64::from(h.dev_major));
        octal(&mut b[337..345], u64::from(h.dev_minor));
        b[148..156].fill(b' ');
        let sum: u64 = b.iter().map(|&x| u64::from(x)).sum();
        let s = format!("{sum:06o}\0 ");
        b[148..156].copy_from_slice(s.as_bytes());
        b
    }

    /// One PAX record `LEN key=value\n`.
    pub fn pax_record(key: &[u8], value: &[u8]) -> Vec<u8> {
        let base = key.len() + value.len() + 3;
        let mut len = base + base.to_string().len();
        if len.to_string().len() + base != len {
            len = base + len.to_string().len();
        }
        let mut r = format!("{len} ").into_bytes();
        r.extend_from_slice(key);
        r.push(b'=');
        r.extend_from_slice(value);
        r.push(b'\n');
        r
    }

    /// The header blocks (a PAX header first when needed).
    pub fn header(h: &Header<'_>) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024);
        let mut pax = Vec::new();
        if h.path.len() > 100 {
            pax.extend(pax_record(b"path", h.path));
        }
        if h.link.len() > 100 {
            pax.extend(pax_record(b"linkpath", h.link));
        }
        if h.size >= 1 << 33 {
            pax.extend(pax_record(b"size", h.size.to_string().as_bytes()));
        }
        if !pax.is_empty() {
            out.extend_from_slice(&raw(h, b"PaxHeader", b"", b'x', pax.len() as u64));
            out.extend_from_slice(&pax);
            out.resize(out.len() + super::pad(pax.len() as u64) as usize, 0);
        }
        out.extend_from_slice(&raw(h, h.path, h.link, h.typeflag, h.size));
        out
    }

    /// Zero bytes that pad `size` bytes of data to a block.
    pub fn padding(size: u64) -> usize {
        super::pad(size) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::write::{Header, header, padding, pax_record};
    use super::*;

    fn file(path: &[u8], data: &[u8]) -> Vec<u8> {
        let mut out = header(&Header {
            typeflag: b'0',
            path,
            link: b"",
            mode: 0o644,
            uid: 1,
            gid: 2,
            size: data.len() as u64,
            mtime: 1000,
            dev_major: 0,
            dev_minor: 0,
        });
        out.extend_from_slice(data);
        out.resize(out.len() + padding(data.len() as u64), 0);
        out
    }

    fn all(bytes: &[u8]) -> Result<Vec<(Entry, Vec<u8>)>, TarError> {
        let mut r = TarReader::new(bytes);
        let mut out = Vec::new();
        while let Some(e) = r.next_entry()? {
            let mut data = Vec::new();
            let mut buf = [0u8; 7];
            loop {
                let n = r.read_data(&mut buf)?;
                if n == 0 {
                    break;
                }
                data.extend_from_slice(&buf[..n]);
            }
            out.push((e, data));
        }
        Ok(out)
    }

    #[test]
    fn reads_files_long_names_and_end_blocks() {
        let long = vec![b'a'; 300];
        let mut t = file(b"x/y", b"hello");
        t.extend(file(&long, b"world!"));
        t.extend([0u8; 1024]);
        let got = all(&t).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0.path, b"x/y");
        assert_eq!((got[0].0.uid, got[0].0.gid, got[0].0.mode), (1, 2, 0o644));
        assert_eq!(got[0].1, b"hello");
        assert_eq!(got[1].0.path, long);
        assert_eq!(got[1].1, b"world!");
    }

    #[test]
    fn refuses_bad_checksums_nul_names_and_oversized_pax() {
        let mut t = file(b"a", b"");
        t[0] = b'b';
        assert!(all(&t).unwrap_err().to_string().contains("checksum"));

        let mut pax = pax_record(b"path", b"a\0b");
        let mut t = header(&Header {
            typeflag: b'x',
            path: b"p",
            link: b"",
            mode: 0,
            uid: 0,
            gid: 0,
            size: pax.len() as u64,
            mtime: 0,
            dev_major: 0,
            dev_minor: 0,
        });
        let n = pax.len() as u64;
        t.append(&mut pax);
        t.resize(t.len() + padding(n), 0);
        t.extend(file(b"a", b""));
        assert!(all(&t).unwrap_err().to_string().contains("NUL"));

        let t = header(&Header {
            typeflag: b'L',
            path: b"././@LongLink",
            link: b"",
            mode: 0,
            uid: 0,
            gid: 0,
            size: 1 << 40,
            mtime: 0,
            dev_major: 0,
            dev_minor: 0,
        });
        assert!(all(&t).unwrap_err().to_string().contains("limit"));
    }

    #[test]
    fn refuses_sparse_and_truncated_archives() {
        let mut t = file(b"a", b"");
        t[156] = b'S';
        t[148..156].fill(b' ');
        let sum: u64 = t[..512].iter().map(|&x| u64::from(x)).sum();
        t[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        assert!(all(&t).unwrap_err().to_string().contains("sparse"));
        let t = file(b"a", b"0123456789");
        assert!(all(&t[..515]).is_err());
    }

    #[test]
    fn base256_and_octal_numbers() {
        assert_eq!(number(b"0000644\0", "m").unwrap(), 0o644);
        assert_eq!(number(b"  644 \0", "m").unwrap(), 0o644);
        assert_eq!(number(&[0x80, 0, 0, 0, 0, 0, 1, 0], "s").unwrap(), 256);
        assert!(number(b"0009\0", "m").is_err());
        assert_eq!(signed_number(&[0xff; 8], "t").unwrap(), -1);
    }
}
