//! Scrubbing a response: a secret's value echoed by the upstream (an error
//! quoting the key) is replaced by its placeholder before it reaches the
//! sandbox, in header values and in the body, also when the value is split
//! across chunks. Only the shortest tail that could begin a value is held
//! back, so a server-sent event reaches the client as soon as it arrives.

use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderValue};
use memchr::memmem;

use crate::secret::SecretValue;

/// The values to look for and what replaces each.
pub(crate) struct Scrubber {
    finders: Vec<(memmem::Finder<'static>, Vec<u8>)>,
    /// Longest value, in bytes.
    longest: usize,
    /// The end of the stream so far that may be the start of a value.
    held: Vec<u8>,
}

impl Scrubber {
    pub(crate) fn new(pairs: &[(SecretValue, Vec<u8>)]) -> Scrubber {
        let finders: Vec<_> = pairs
            .iter()
            .filter(|(v, _)| !v.expose().is_empty())
            .map(|(v, p)| (memmem::Finder::new(v.expose()).into_owned(), p.clone()))
            .collect();
        let longest = finders
            .iter()
            .map(|(f, _)| f.needle().len())
            .max()
            .unwrap_or(0);
        Scrubber {
            finders,
            longest,
            held: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.finders.is_empty()
    }

    /// Scrub header values in place.
    pub(crate) fn headers(&self, headers: &mut HeaderMap) {
        for v in headers.values_mut() {
            let mut bytes = v.as_bytes().to_vec();
            let mut changed = false;
            for (f, ph) in &self.finders {
                if let Some(out) = replace(&bytes, f, ph) {
                    bytes = out;
                    changed = true;
                }
            }
            if changed && let Ok(nv) = HeaderValue::from_bytes(&bytes) {
                *v = nv;
            }
        }
    }

    /// The next chunk of the body; returns what may be sent now (possibly
    /// empty, when all of it could still begin a value).
    pub(crate) fn push(&mut self, chunk: Bytes) -> Bytes {
        if self.finders.is_empty() {
            return chunk;
        }
        let joined;
        let buf: &[u8] = if self.held.is_empty() {
            &chunk
        } else {
            let mut j = std::mem::take(&mut self.held);
            j.extend_from_slice(&chunk);
            joined = j;
            &joined
        };
        let mut out: Option<Vec<u8>> = None;
        let mut start = 0;
        loop {
            // The earliest match from `start`; the longest value on a tie.
            let next = self
                .finders
                .iter()
                .filter_map(|(f, ph)| {
                    f.find(&buf[start..])
                        .map(|at| (start + at, f.needle().len(), ph))
                })
                .min_by_key(|&(at, len, _)| (at, usize::MAX - len));
            let Some((at, len, ph)) = next else { break };
            let o = out.get_or_insert_with(|| Vec::with_capacity(buf.len()));
            o.extend_from_slice(&buf[start..at]);
            o.extend_from_slice(ph);
            start = at + len;
        }
        let hold_from = self.hold_from(buf, start);
        self.held = buf[hold_from..].to_vec();
        match out {
            Some(mut o) => {
                o.extend_from_slice(&buf[start..hold_from]);
                Bytes::from(o)
            }
            // Nothing replaced: pass the chunk itself on when nothing of
            // it is held back either (the common case: no copy).
            None if hold_from == buf.len() && buf.len() == chunk.len() => chunk,
            None => Bytes::copy_from_slice(&buf[start..hold_from]),
        }
    }

    /// The end of the stream: whatever was held back (it did not complete
    /// a value).
    pub(crate) fn finish(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.held))
    }

    /// The first position at or after `from` where the rest of `buf` is a
    /// proper prefix of some value.
    fn hold_from(&self, buf: &[u8], from: usize) -> usize {
        let lo = from.max(buf.len().saturating_sub(self.longest.saturating_sub(1)));
        (lo..buf.len())
            .find(|&k| {
                let tail = &buf[k..];
                self.finders
                    .iter()
                    .any(|(f, _)| f.needle().len() > tail.len() && f.needle().starts_with(tail))
            })
            .unwrap_or(buf.len())
    }
}

fn replace(hay: &[u8], f: &memmem::Finder<'_>, to: &[u8]) -> Option<Vec<u8>> {
    let mut it = f.find_iter(hay).peekable();
    it.peek()?;
    let n = f.needle().len();
    let mut out = Vec::with_capacity(hay.len());
    let mut last = 0;
    for at in it {
        out.extend_from_slice(&hay[last..at]);
        out.extend_from_slice(to);
        last = at + n;
    }
    out.extend_from_slice(&hay[last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubber(pairs: &[(&str, &str)]) -> Scrubber {
        let p: Vec<_> = pairs
            .iter()
            .map(|(v, ph)| {
                (
                    SecretValue::new(v.as_bytes().to_vec()),
                    ph.as_bytes().to_vec(),
                )
            })
            .collect();
        Scrubber::new(&p)
    }

    fn run(s: &mut Scrubber, chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&s.push(Bytes::copy_from_slice(c)));
        }
        out.extend_from_slice(&s.finish());
        out
    }

    #[test]
    fn every_split_of_an_echo_is_scrubbed() {
        let body =
            b"{\"error\":\"invalid x-api-key sk-ant-SECRET-42 (sk-ant-SECRET-42)\"} tail sk-ant";
        let want = b"{\"error\":\"invalid x-api-key PH (PH)\"} tail sk-ant".to_vec();
        // Every split into two and three chunks, and byte by byte.
        for i in 0..=body.len() {
            let mut s = scrubber(&[("sk-ant-SECRET-42", "PH")]);
            assert_eq!(run(&mut s, &[&body[..i], &body[i..]]), want, "split at {i}");
            for j in i..=body.len() {
                let mut s = scrubber(&[("sk-ant-SECRET-42", "PH")]);
                assert_eq!(
                    run(&mut s, &[&body[..i], &body[i..j], &body[j..]]),
                    want,
                    "{i} {j}"
                );
            }
        }
        let mut s = scrubber(&[("sk-ant-SECRET-42", "PH")]);
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(run(&mut s, &bytes), want);
    }

    #[test]
    fn several_values_overlapping_prefixes_and_longer_placeholders() {
        let mut s = scrubber(&[("abcabd", "<ONE-LONGER>"), ("bca", "<2>")]);
        let body = b"xxabcabcabdyy";
        // Leftmost first: "bca" at 3 comes before "abcabd" at 5, and the
        // next "bca" (at 6) before anything else.
        let want = b"xxa<2><2>bdyy".to_vec();
        for i in 0..=body.len() {
            let mut t = scrubber(&[("abcabd", "<ONE-LONGER>"), ("bca", "<2>")]);
            assert_eq!(run(&mut t, &[&body[..i], &body[i..]]), want, "split at {i}");
        }
        assert_eq!(run(&mut s, &[body]), want);
        let mut t = scrubber(&[("abcabd", "<ONE-LONGER>"), ("bca", "<2>")]);
        assert_eq!(run(&mut t, &[b"zzabcabdzz"]), b"zz<ONE-LONGER>zz".to_vec());
    }

    #[test]
    fn a_chunk_without_a_value_goes_out_whole_and_at_once() {
        let mut s = scrubber(&[("sk-ant-SECRET", "PH")]);
        let ev = Bytes::from_static(b"event: content_block_delta\ndata: {\"text\":\"hi\"}\n\n");
        let out = s.push(ev.clone());
        assert_eq!(out, ev);
        // Same buffer: passed on without a copy.
        assert_eq!(out.as_ptr(), ev.as_ptr());
        // Only a possible start of a value is held: "sk-" here.
        assert_eq!(&s.push(Bytes::from_static(b"data: sk-"))[..], b"data: ");
        assert_eq!(&s.push(Bytes::from_static(b"x\n"))[..], b"sk-x\n");
        assert!(s.finish().is_empty());
    }

    #[test]
    fn headers_are_scrubbed_too() {
        let s = scrubber(&[("sk-SECRET", "PH")]);
        let mut h = HeaderMap::new();
        h.insert("x-echo", "key sk-SECRET bad".parse().unwrap());
        h.insert("x-other", "fine".parse().unwrap());
        s.headers(&mut h);
        assert_eq!(h["x-echo"], "key PH bad");
        assert_eq!(h["x-other"], "fine");
    }
}
