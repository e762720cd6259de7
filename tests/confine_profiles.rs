//! Profile loading and `security.*` validation: good errors that name the
//! failing filter and rule, and the one-line messages of `prepare`.

use hutch::internals::confine::{self, ConfineError, seccomp};
use hutch::spec::{Security, Spec};

fn err(json: &str) -> String {
    match seccomp::compile("test", json.as_bytes()) {
        Ok(_) => panic!("profile accepted: {json}"),
        Err(e) => e.to_string(),
    }
}

fn contains_all(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{msg:?} should contain {p:?}");
    }
}

#[test]
fn unknown_syscall_names_filter_rule_and_syscall() {
    let e = err(
        r#"{"deny": {"mismatch_action": "allow", "match_action": {"errno": 1},
        "filter": [{"syscall": "mount"}, {"syscall": "mountt"}]}}"#,
    );
    contains_all(
        &e,
        &["filter \"deny\"", "rule 1", "\"mountt\"", "unknown syscall"],
    );
}

#[test]
fn bad_fields_name_the_rule_and_condition() {
    let e = err(
        r#"{"deny": {"mismatch_action": "allow", "match_action": {"errno": 1},
        "filter": [{"syscall": "mount"}, {"syscall": "ioctl", "args": [{"index": 1, "type": "dword", "op": "eqq", "val": 1}]}]}}"#,
    );
    contains_all(&e, &["filter \"deny\"", "rule 1", "condition 0", "eqq"]);
    let e = err(
        r#"{"deny": {"mismatch_action": "allow", "match_action": {"errno": 1},
        "filter": [{"syscall": "mount", "argz": []}]}}"#,
    );
    contains_all(&e, &["rule 0", "argz"]);
    let e = err(r#"{"deny": {"mismatch_action": "allow", "match_action": "allow", "filter": []}}"#);
    contains_all(&e, &["filter \"deny\"", "same"]);
    let e = err(
        r#"{"deny": {"mismatch_action": "allow", "match_action": {"errno": 5000}, "filter": []}}"#,
    );
    contains_all(&e, &["match_action", "5000"]);
    let e = err(
        r#"{"deny": {"mismatch_action": "allow", "match_action": {"errno": 1}, "filter": [
        {"syscall": "ioctl", "args": [{"index": 6, "type": "dword", "op": "eq", "val": 1}]}]}}"#,
    );
    contains_all(&e, &["rule 0", "condition 0"]);
    let e = err(
        r#"{"deny": {"mismatch_action": "allow", "match_action": {"errno": 1}, "filter": [
        {"syscall": "ioctl", "args": [{"index": 1, "type": "dword", "op": "eq", "val": 4294967296}]}]}}"#,
    );
    contains_all(&e, &["rule 0", "32-bit"]);
    let e = err(
        r#"{"deny": {"mismatch_action": "allow", "match_action": {"errno": 1}, "filter": [
        {"syscall": "ioctl", "args": []}]}}"#,
    );
    contains_all(&e, &["rule 0", "empty"]);
}

#[test]
fn ambiguous_and_degenerate_profiles_are_refused() {
    // seccompiler would silently drop the unconditional rule here.
    let e = err(
        r#"{"deny": {"mismatch_action": "allow", "match_action": {"errno": 1}, "filter": [
        {"syscall": "ioctl"},
        {"syscall": "ioctl", "args": [{"index": 1, "type": "dword", "op": "eq", "val": 21522}]}]}}"#,
    );
    contains_all(&e, &["rule 1", "unconditionally"]);
    let e = err(
        r#"{"a": {"mismatch_action": "allow", "match_action": "log", "filter": []},
                    "a": {"mismatch_action": "allow", "match_action": "log", "filter": []}}"#,
    );
    contains_all(&e, &["duplicate filter \"a\""]);
    contains_all(&err("{}"), &["no filter", "unconfined"]);
    contains_all(&err("[]"), &["object of named filters"]);
    contains_all(&err("{\"a\": 1}"), &["filter \"a\"", "a filter object"]);
    contains_all(&err("{\"a\": "), &["EOF"]);
}

/// A Security section with `seccomp` set to `name`.
fn with_seccomp(name: &str) -> Security {
    let mut s = Security::default();
    s.seccomp = name.into();
    s
}

#[test]
fn security_section_validation() {
    let ok = Security::default();
    assert_eq!(confine::validate(&ok), Ok(()));
    for name in ["default", "strict", "log", "unconfined"] {
        assert_eq!(confine::validate(&with_seccomp(name)), Ok(()), "{name}");
    }
    let bad = |s: Security| confine::validate(&s).unwrap_err();
    let e = bad(with_seccomp("defualt"));
    assert_eq!(e.path, "security.seccomp");
    contains_all(
        &e.message,
        &[
            "unknown seccomp profile \"defualt\"",
            "default",
            "unconfined",
        ],
    );
    let e = bad(with_seccomp("/nonexistent/profile.json"));
    assert_eq!(e.path, "security.seccomp");
    contains_all(&e.message, &["/nonexistent/profile.json", "No such file"]);
    let mut s = Security::default();
    s.landlock.min_abi = Some(65);
    assert_eq!(bad(s).path, "security.landlock.min_abi");
    let mut s = Security::default();
    s.landlock.min_abi = Some(0);
    assert_eq!(bad(s).path, "security.landlock.min_abi");
    let mut s = Security::default();
    s.landlock.enabled = false;
    s.landlock.min_abi = Some(2);
    assert_eq!(bad(s).path, "security.landlock.min_abi");
    let mut s = Security::default();
    s.cap_add = vec!["CAP_NOPE".into()];
    let e = bad(s);
    assert_eq!(e.path, "security.cap_add");
    contains_all(&e.message, &["CAP_NOPE"]);
}

#[test]
fn profile_file_is_read_and_checked() {
    let dir = std::env::temp_dir().join(format!("hutch-confine-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    std::fs::write(
        &good,
        r#"{"no_ptrace": {"mismatch_action": "allow", "match_action": {"errno": 1},
            "filter": [{"syscall": "ptrace"}]}}"#,
    )
    .unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"no_ptrace": {"mismatch_action": "allow", "match_action": {"errno": 1},
            "filter": [{"syscall": "ptrace"}, {"syscall": "pttrace"}]}}"#,
    )
    .unwrap();
    let sec = |p: &std::path::Path| with_seccomp(&p.display().to_string());
    assert_eq!(confine::validate(&sec(&good)), Ok(()));
    let e = confine::validate(&sec(&bad)).unwrap_err();
    assert_eq!(e.path, "security.seccomp");
    contains_all(&e.message, &["rule 1", "pttrace"]);
    // Through the launcher's validation the key is the same; the Spec's
    // own shape check does not look at confinement.
    let mut spec = Spec::default();
    spec.security = sec(&bad);
    assert_eq!(hutch::spec::validate(&spec), Ok(()));
    let e = hutch::launch::validate(&spec).unwrap_err();
    assert_eq!(e.path, "security.seccomp");
    // prepare() reports the key, the file and the rule, one line, and names
    // no command-line flag (the CLI adds those).
    let e = confine::prepare(&spec).unwrap_err();
    let line = e.to_string();
    assert!(matches!(e, ConfineError::Profile { .. }));
    assert!(!line.contains('\n'));
    contains_all(
        &line,
        &["security.seccomp", "bad.json", "rule 1", "pttrace"],
    );
    assert!(!line.contains("--"), "{line}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prepare_fails_closed_below_the_landlock_floor() {
    let available = hutch::internals::sys::landlock_abi_version();
    let mut spec = Spec::default();
    spec.security.landlock.min_abi = Some(available + 1);
    let e = confine::prepare(&spec).unwrap_err();
    let line = e.to_string();
    if available == 0 {
        assert!(matches!(e, ConfineError::LandlockUnavailable), "{line}");
        return;
    }
    assert!(matches!(e, ConfineError::LandlockTooOld { .. }), "{line}");
    contains_all(
        &line,
        &[
            &format!("Landlock ABI {} is required", available + 1),
            &format!("this kernel provides ABI {available}"),
            "security.landlock.min_abi",
        ],
    );
    assert!(!line.contains("--"), "{line}");
    // At the kernel's own ABI it prepares, and the report says so.
    spec.security.landlock.min_abi = Some(available.min(7));
    let c = confine::prepare(&spec).unwrap();
    let r = c.report();
    assert_eq!(r.landlock.available, available);
    assert_eq!(r.landlock.enforced_abi, Some(available.min(7)));
    assert_eq!(r.seccomp.profile, "default");
    assert!(r.seccomp.enforced);
    assert_eq!(r.seccomp.killed_abis, vec!["i386", "x32"]);
    assert!(r.caps_kept.is_empty());
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["landlock"]["tcp"], "own-namespace");
}

#[test]
fn report_for_unconfined_and_caps() {
    let mut spec = Spec::default();
    spec.security.seccomp = "unconfined".into();
    spec.security.landlock.enabled = false;
    spec.security.cap_add = vec!["net_raw".into(), "CAP_CHOWN".into()];
    let c = confine::prepare(&spec).unwrap();
    let r = c.report();
    assert!(!r.seccomp.enforced);
    assert_eq!(r.seccomp.profile, "unconfined");
    assert!(!r.landlock.requested);
    assert_eq!(r.landlock.enforced_abi, None);
    assert_eq!(r.caps_kept, vec!["CAP_CHOWN", "CAP_NET_RAW"]);
    assert_eq!(c.keep_caps().len(), 2);
}

/// A cheap, deterministic stand-in for the fuzz target that runs in every
/// test run: truncations and byte flips of the embedded profiles must load
/// or fail with one line, never panic, and what loads must be well formed.
#[test]
fn mutated_profiles_never_panic() {
    for (_, text) in seccomp::BUILTIN {
        let bytes = text.as_bytes();
        let mut inputs: Vec<Vec<u8>> = (0..bytes.len())
            .step_by(61)
            .map(|n| bytes[..n].to_vec())
            .collect();
        for (i, flip) in (0..bytes.len())
            .step_by(29)
            .zip([b'"', b'}', b'\n', b'0', b'x', 0xff].iter().cycle())
        {
            let mut m = bytes.to_vec();
            m[i] = *flip;
            inputs.push(m);
        }
        for input in inputs {
            match seccomp::compile("mutant", &input) {
                Ok(f) => {
                    assert!(f.program.len() <= seccomp::MAX_INSTRUCTIONS);
                    assert_eq!(f.program.last().map(|i| i.code), Some(0x06));
                }
                Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
            }
        }
    }
    let e = err(
        "{\"a\nb\": {\"mismatch_action\": \"allow\", \"match_action\": \"log\", \"filter\": [], \"x\ny\": 1}}",
    );
    assert!(!e.contains('\n'), "{e}");
}
