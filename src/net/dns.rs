//! The sandbox's resolver in `transparent` egress mode: DNS queries parsed
//! by hand (a hostile sandbox writes every byte of them), and the answers.
//!
//! Only what a stub resolver sends is understood: one question, class IN,
//! no compression in the question. Everything else gets FORMERR, NOTIMP or
//! REFUSED; nothing here panics or reads out of bounds on any input (see
//! `fuzz/fuzz_targets/dns_query.rs`). Names the policy allows get an
//! address from the synthetic range ([`super::names`]); names it denies
//! get NXDOMAIN. There are no AAAA answers (NODATA): the sandbox has no
//! IPv6 route, and clients fall back to the A answer at once.

use std::net::Ipv4Addr;

/// Header flags and codes (RFC 1035 4.1.1).
const QR: u16 = 0x8000;
const AA: u16 = 0x0400;
const RD: u16 = 0x0100;
const RA: u16 = 0x0080;
const OPCODE_MASK: u16 = 0x7800;

pub const TYPE_A: u16 = 1;
#[cfg(test)]
const TYPE_AAAA: u16 = 28;
const TYPE_ANY: u16 = 255;
const CLASS_IN: u16 = 1;

/// Seconds a synthetic answer may be cached: the name keeps its address
/// for the sandbox's life, so clients may cache it as long as they like.
pub const TTL: u32 = 300;
/// Largest query read (a stub's query is far smaller; EDNS ones too).
pub const MAX_QUERY: usize = 1232;

/// Response codes used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    NoError = 0,
    FormErr = 1,
    NxDomain = 3,
    NotImp = 4,
    Refused = 5,
}

/// A query a stub resolver sent: one question, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query<'a> {
    pub id: u16,
    recursion_desired: bool,
    /// The name in presentation form, lowercase, without the root dot.
    pub name: String,
    pub qtype: u16,
    /// The question section as received (name, type, class), echoed back.
    question: &'a [u8],
}

/// Why a packet is not a query this resolver answers; `id` is known when
/// the header was complete (an answer can then be sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub id: Option<u16>,
    pub rcode: Rcode,
    pub why: &'static str,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// Parse one DNS query. Responses, other opcodes, several questions,
/// compression pointers and non-IN classes are refused.
pub fn parse_query(pkt: &[u8]) -> Result<Query<'_>, Refusal> {
    let short = Refusal {
        id: None,
        rcode: Rcode::FormErr,
        why: "shorter than a DNS header",
    };
    // The whole 12-byte header, or no answer at all (not even FORMERR).
    if pkt.len() < 12 {
        return Err(short);
    }
    let id = be16(pkt, 0).ok_or(short.clone())?;
    let flags = be16(pkt, 2).ok_or(short.clone())?;
    let qdcount = be16(pkt, 4).ok_or(short.clone())?;
    let ancount = be16(pkt, 6).ok_or(short.clone())?;
    let nscount = be16(pkt, 8).ok_or(short)?;
    let refuse = |rcode, why| Refusal {
        id: Some(id),
        rcode,
        why,
    };
    if flags & QR != 0 {
        // Never answer an answer (no reflection loops).
        return Err(Refusal {
            id: None,
            rcode: Rcode::FormErr,
            why: "a response, not a query",
        });
    }
    if flags & OPCODE_MASK != 0 {
        return Err(refuse(Rcode::NotImp, "only standard queries are answered"));
    }
    if qdcount != 1 || ancount != 0 || nscount != 0 {
        return Err(refuse(Rcode::FormErr, "a query has exactly one question"));
    }
    let start = 12;
    let mut at = start;
    let mut name = String::new();
    loop {
        let len = *pkt
            .get(at)
            .ok_or(refuse(Rcode::FormErr, "question cut short"))? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        if len & 0xc0 != 0 {
            return Err(refuse(
                Rcode::FormErr,
                "compressed or extended label in a question",
            ));
        }
        let label = pkt
            .get(at..at + len)
            .ok_or(refuse(Rcode::FormErr, "question cut short"))?;
        at += len;
        if !name.is_empty() {
            name.push('.');
        }
        for &c in label {
            // Letters, digits, '-' and '_' only: anything else (dots
            // inside a label, controls, bytes above 0x7f) is not a host
            // name the policy could allow.
            if !(c.is_ascii_alphanumeric() || c == b'-' || c == b'_') {
                return Err(refuse(Rcode::Refused, "not a host name"));
            }
            name.push(c.to_ascii_lowercase() as char);
        }
        if name.len() > 253 {
            return Err(refuse(Rcode::FormErr, "name longer than 253 bytes"));
        }
    }
    let qtype = be16(pkt, at).ok_or(refuse(Rcode::FormErr, "question cut short"))?;
    let qclass = be16(pkt, at + 2).ok_or(refuse(Rcode::FormErr, "question cut short"))?;
    at += 4;
    if qclass != CLASS_IN {
        return Err(refuse(Rcode::Refused, "only class IN is answered"));
    }
    if name.is_empty() {
        return Err(refuse(Rcode::Refused, "the root is not answered"));
    }
    Ok(Query {
        id,
        recursion_desired: flags & RD != 0,
        name,
        qtype,
        question: &pkt[start..at],
    })
}

fn header(out: &mut Vec<u8>, id: u16, rd: bool, rcode: Rcode, qd: u16, an: u16) {
    let flags = QR | AA | RA | if rd { RD } else { 0 } | rcode as u16;
    for v in [id, flags, qd, an, 0, 0] {
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// The answer to `q`: its A record when `addr` is given and it asked for
/// A (or ANY), NODATA for other types of an allowed name, else `rcode`.
pub fn answer(q: &Query<'_>, addr: Option<Ipv4Addr>, rcode: Rcode) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + q.question.len() + 16);
    let record = addr.filter(|_| q.qtype == TYPE_A || q.qtype == TYPE_ANY);
    let rcode = if addr.is_some() {
        Rcode::NoError
    } else {
        rcode
    };
    header(
        &mut out,
        q.id,
        q.recursion_desired,
        rcode,
        1,
        record.is_some() as u16,
    );
    out.extend_from_slice(q.question);
    if let Some(a) = record {
        out.extend_from_slice(&0xc00cu16.to_be_bytes()); // the question's name
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&a.octets());
    }
    out
}

/// The answer to a packet that is not a query we answer: a bare header
/// with the code, or nothing when not even the id is known (or it was a
/// response).
pub fn refusal(r: &Refusal) -> Option<Vec<u8>> {
    let id = r.id?;
    let mut out = Vec::with_capacity(12);
    header(&mut out, id, false, r.rcode, 0, 0);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut p = Vec::new();
        for v in [id, RD, 1, 0, 0, 0] {
            p.extend_from_slice(&v.to_be_bytes());
        }
        for l in name.split('.') {
            p.push(l.len() as u8);
            p.extend_from_slice(l.as_bytes());
        }
        p.push(0);
        p.extend_from_slice(&qtype.to_be_bytes());
        p.extend_from_slice(&CLASS_IN.to_be_bytes());
        p
    }

    #[test]
    fn a_packet_shorter_than_the_header_gets_no_answer() {
        // Found by the dns_query fuzz target: ten bytes (no arcount) were
        // answered with FORMERR.
        let pkt = [2, 49, 10, 53, 0, 64, 10, 0, 130, 2];
        let r = parse_query(&pkt).unwrap_err();
        assert_eq!(r.id, None);
        assert_eq!(refusal(&r), None);
    }

    #[test]
    fn a_query_is_parsed_and_answered_with_its_address() {
        let pkt = query(0x1234, "Api.Example.COM", TYPE_A);
        let q = parse_query(&pkt).unwrap();
        assert_eq!(
            (q.id, q.name.as_str(), q.qtype),
            (0x1234, "api.example.com", 1)
        );
        let a = answer(&q, Some(Ipv4Addr::new(198, 18, 0, 7)), Rcode::NxDomain);
        assert_eq!(&a[..2], &[0x12, 0x34]);
        assert_eq!(be16(&a, 2).unwrap() & 0x800f, QR); // a response, NOERROR
        assert_eq!((be16(&a, 4), be16(&a, 6)), (Some(1), Some(1)));
        assert_eq!(&a[a.len() - 4..], &[198, 18, 0, 7]);
        // AAAA of an allowed name: NODATA.
        let pkt6 = query(7, "api.example.com", TYPE_AAAA);
        let q6 = parse_query(&pkt6).unwrap();
        let a6 = answer(&q6, Some(Ipv4Addr::new(198, 18, 0, 7)), Rcode::NxDomain);
        assert_eq!((be16(&a6, 2).unwrap() & 0xf, be16(&a6, 6)), (0, Some(0)));
        // Denied: NXDOMAIN, no record.
        let d = answer(&q, None, Rcode::NxDomain);
        assert_eq!((be16(&d, 2).unwrap() & 0xf, be16(&d, 6)), (3, Some(0)));
    }

    /// A cheap stand-in for the fuzz target in every `cargo test`: valid
    /// queries with random bytes changed, cut or appended.
    #[test]
    fn mutated_queries_never_panic_and_answers_keep_the_id() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds = [
            query(1, "a.example", TYPE_A),
            query(2, "x-y_z.b.example", TYPE_AAAA),
        ];
        for i in 0..50_000 {
            let mut p = seeds[i % 2].clone();
            for _ in 0..(next() % 4) {
                let at = next() as usize % p.len();
                p[at] = next() as u8;
            }
            match next() % 3 {
                0 => p.truncate(next() as usize % (p.len() + 1)),
                1 => p.extend((0..next() % 8).map(|_| next() as u8)),
                _ => {}
            }
            match parse_query(&p) {
                Ok(q) => {
                    assert!(!q.name.is_empty() && q.name.len() <= 253);
                    let a = answer(&q, Some(Ipv4Addr::new(198, 18, 0, 1)), Rcode::NxDomain);
                    assert_eq!((a[0], a[1]), (p[0], p[1]));
                    assert!(a.len() <= p.len() + 16);
                }
                Err(r) => {
                    if let Some(a) = refusal(&r) {
                        assert_eq!((a[0], a[1], a.len()), (p[0], p[1], 12));
                    }
                }
            }
        }
    }

    #[test]
    fn hostile_packets_are_refused_without_panicking() {
        let ok = query(1, "a.example", TYPE_A);
        for cut in 0..ok.len() {
            assert!(parse_query(&ok[..cut]).is_err(), "cut at {cut}");
        }
        let mut response = ok.clone();
        response[2] |= 0x80;
        assert_eq!(parse_query(&response).unwrap_err().id, None);
        let mut two = ok.clone();
        two[5] = 2;
        assert_eq!(parse_query(&two).unwrap_err().rcode, Rcode::FormErr);
        let mut pointer = ok.clone();
        pointer[12] = 0xc0;
        assert_eq!(parse_query(&pointer).unwrap_err().rcode, Rcode::FormErr);
        let mut dot = query(1, "ab.example", TYPE_A);
        dot[14] = b'.'; // "a.b" inside one label
        assert_eq!(parse_query(&dot).unwrap_err().rcode, Rcode::Refused);
        let long = format!("{}.x", vec!["a".repeat(63); 4].join("."));
        assert!(parse_query(&query(1, &long, TYPE_A)).is_err());
        let mut chaos = ok.clone();
        let n = chaos.len();
        chaos[n - 1] = 3;
        assert_eq!(parse_query(&chaos).unwrap_err().rcode, Rcode::Refused);
        let r = parse_query(&two).unwrap_err();
        let a = refusal(&r).unwrap();
        assert_eq!((a.len(), be16(&a, 2).unwrap() & 0x800f), (12, QR | 1));
    }
}
