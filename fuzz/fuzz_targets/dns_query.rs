//! Arbitrary packets to the sandbox's resolver (transparent egress): the
//! parser never panics or reads out of bounds, what it accepts is a plain
//! lowercase host name within DNS limits, and every answer is a response
//! to the same id, with the question echoed and at most one A record.
#![no_main]

use hutch::internals::net::dns::parse_query;
use hutch::internals::net::fuzzing::resolver_answer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = parse_query(data) {
        assert!(!q.name.is_empty() && q.name.len() <= 253, "{:?}", q.name);
        assert!(
            q.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)),
            "{:?}",
            q.name
        );
    }
    if let Some(out) = resolver_answer(data) {
        assert!(
            out.len() >= 12 && data.len() >= 12,
            "answer to a headerless packet"
        );
        assert_eq!(out[..2], data[..2], "id");
        assert_ne!(out[2] & 0x80, 0, "QR must be set");
        assert_eq!(data[2] & 0x80, 0, "answered a response");
        let ancount = u16::from_be_bytes([out[6], out[7]]);
        assert!(ancount <= 1);
        assert!(
            out.len() <= data.len() + 16,
            "{} for {}",
            out.len(),
            data.len()
        );
    }
});
