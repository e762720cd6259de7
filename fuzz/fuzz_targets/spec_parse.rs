//! Spec parsing from arbitrary TOML and JSON must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(spec) = hutch::spec::parse_json(text) {
            // What parses must round-trip through validation again.
            let again = serde_json::to_string(&spec).expect("serialize");
            hutch::spec::parse_json(&again).expect("round trip");
        }
        let _ = hutch::spec::parse_toml(text);
    }
});
