//! Arbitrary bytes as a proxy request head on the Unix door: the proxy
//! must answer (or close) without panicking, and never with a success,
//! since the fuzz policy's only resolvable name points at a refused
//! address and every other host is denied or not allowed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(status) = hutch::internals::net::fuzzing::answer_status(data) {
        assert!(
            status >= 400,
            "request {:?} got {status}",
            String::from_utf8_lossy(data)
        );
    }
});
