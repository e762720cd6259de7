//! The server name of a TLS ClientHello, read by hand from the first
//! bytes a sandbox sends on a captured connection (`transparent` egress),
//! so that a connection to an allowed name cannot ask the upstream (a CDN
//! serving many names on one address) for another one. Every length is
//! checked against what is there; nothing here panics on any input.

/// What the first bytes of a connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not a TLS handshake record: another protocol, nothing to check.
    NotTls,
    /// A TLS ClientHello, but more bytes are needed (`.0` in all).
    Incomplete(usize),
    /// A ClientHello without a server name extension.
    NoName,
    /// The host name asked for (raw bytes, as sent).
    Name(Vec<u8>),
    /// A TLS record that is not a well-formed ClientHello.
    Malformed,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|s| s[0] as usize)
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(|s| (s[0] as usize) << 8 | s[1] as usize)
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|s| (s[0] as usize) << 16 | (s[1] as usize) << 8 | s[2] as usize)
    }
}

/// Largest ClientHello waited for (one TLS record's payload at most).
pub const MAX_HELLO: usize = 5 + (1 << 14);

/// Read the server name of the ClientHello at the start of `b`.
pub fn client_hello_name(b: &[u8]) -> Hello {
    if b.first() != Some(&0x16) {
        return Hello::NotTls;
    }
    if b.len() < 5 {
        return Hello::Incomplete(5);
    }
    if b[1] != 3 {
        return Hello::NotTls;
    }
    let record_len = (b[3] as usize) << 8 | b[4] as usize;
    let need = 5 + record_len;
    if record_len == 0 || need > MAX_HELLO {
        return Hello::Malformed;
    }
    if b.len() < need {
        return Hello::Incomplete(need);
    }
    parse_hello(&b[5..need]).unwrap_or(Hello::Malformed)
}

fn parse_hello(record: &[u8]) -> Option<Hello> {
    let mut r = Reader { b: record, at: 0 };
    if r.u8()? != 1 {
        return None; // not a ClientHello
    }
    let len = r.u24()?;
    // A ClientHello split over several records is not read (none of the
    // usual clients does that); it counts as malformed.
    let body = r.take(len)?;
    let mut r = Reader { b: body, at: 0 };
    r.take(2 + 32)?; // legacy version, random
    let sid = r.u8()?;
    r.take(sid)?;
    let suites = r.u16()?;
    r.take(suites)?;
    let comp = r.u8()?;
    r.take(comp)?;
    if r.at == body.len() {
        return Some(Hello::NoName);
    }
    let ext_len = r.u16()?;
    let exts = r.take(ext_len)?;
    let mut e = Reader { b: exts, at: 0 };
    while e.at < exts.len() {
        let kind = e.u16()?;
        let len = e.u16()?;
        let data = e.take(len)?;
        if kind != 0 {
            continue;
        }
        let mut s = Reader { b: data, at: 0 };
        let list = s.u16()?;
        let list = s.take(list)?;
        let mut l = Reader { b: list, at: 0 };
        while l.at < list.len() {
            let name_type = l.u8()?;
            let n = l.u16()?;
            let name = l.take(n)?;
            if name_type == 0 {
                return Some(Hello::Name(name.to_vec()));
            }
        }
        return Some(Hello::NoName);
    }
    Some(Hello::NoName)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello with `name` in its server_name extension.
    pub(crate) fn hello(name: Option<&str>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one suite
        body.extend([1, 0]); // null compression
        let mut exts = Vec::new();
        exts.extend([0, 0x2b, 0, 3, 2, 3, 4]); // supported_versions
        if let Some(n) = name {
            let n = n.as_bytes();
            let mut sni = Vec::new();
            sni.extend(((n.len() + 3) as u16).to_be_bytes());
            sni.push(0);
            sni.extend((n.len() as u16).to_be_bytes());
            sni.extend(n);
            exts.extend([0, 0]);
            exts.extend((sni.len() as u16).to_be_bytes());
            exts.extend(sni);
        }
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut hs = vec![1];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn the_name_is_read_and_everything_else_is_told_apart() {
        let h = hello(Some("api.example.com"));
        assert_eq!(
            client_hello_name(&h),
            Hello::Name(b"api.example.com".to_vec())
        );
        assert_eq!(client_hello_name(&hello(None)), Hello::NoName);
        assert_eq!(client_hello_name(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(client_hello_name(b"SSH-2.0-x\r\n"), Hello::NotTls);
        assert_eq!(client_hello_name(&h[..3]), Hello::Incomplete(5));
        assert_eq!(client_hello_name(&h[..20]), Hello::Incomplete(h.len()));
        let mut bad = h.clone();
        bad[5] = 2; // a ServerHello
        assert_eq!(client_hello_name(&bad), Hello::Malformed);
    }

    #[test]
    fn mutated_hellos_never_panic() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seed = hello(Some("a.example"));
        for _ in 0..50_000 {
            let mut p = seed.clone();
            for _ in 0..(next() % 4) {
                let at = next() as usize % p.len();
                p[at] = next() as u8;
            }
            if next() % 2 == 0 {
                p.truncate(next() as usize % (p.len() + 1));
            }
            if let Hello::Incomplete(n) = client_hello_name(&p) {
                assert!(n > p.len() && n <= MAX_HELLO);
            }
        }
    }
}
