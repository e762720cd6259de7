//! Arbitrary host strings and rules: canonicalisation never panics, its
//! output is stable (canonical forms canonicalise to themselves), names
//! are plain lowercase ASCII within DNS limits, and a wildcard rule never
//! matches an IP literal.
#![no_main]

use hutch::internals::net::host::{CanonicalHost, canonicalize};
use hutch::internals::net::policy::{HostPattern, Rule};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(host) = canonicalize(text) {
        let shown = host.to_string();
        assert_eq!(canonicalize(&shown).as_ref(), Ok(&host), "{text:?} -> {shown:?}");
        if let CanonicalHost::Name(n) = &host {
            assert!(n.len() <= 253, "{n:?}");
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)),
                "{n:?}"
            );
            assert!(!n.ends_with('.') && !n.contains(".."), "{n:?}");
        }
    }
    if let Ok(rule) = Rule::parse(text) {
        if !matches!(rule.host, HostPattern::Exact(_)) {
            let mut spec = hutch::spec::ProxyPolicy::default();
            spec.allow = vec![text.to_string()];
            let p = hutch::internals::net::Policy::from_spec(&spec).expect("a parsed rule compiles");
            for ip in ["127.0.0.1", "[::1]", "10.0.0.1"] {
                let h = canonicalize(ip).expect("literal");
                for port in [443, 80] {
                    assert!(
                        matches!(p.check(&h, port), hutch::internals::net::policy::Verdict::Deny(_)),
                        "{text:?} matched {ip}"
                    );
                }
            }
        }
    }
});
