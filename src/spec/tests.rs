//! The Spec's strictness, as a profile's author meets it: every refusal
//! names the exact key path, in TOML and in JSON alike. Each row goes
//! through the whole front-end check: parse, then `launch::validate`.

use super::*;

/// Parse `text` and run every check a launch would; the refusal's key path
/// and message.
fn refusal(text: &str, json: bool) -> (String, String) {
    let parsed = if json {
        parse_json(text)
    } else {
        parse_toml(text)
    };
    match parsed.and_then(|s| crate::launch::validate(&s)) {
        Ok(()) => panic!("accepted: {text}"),
        Err(e) => (e.path, e.message),
    }
}

/// (what, TOML, JSON, key path, part of the message).
const TABLE: &[(&str, &str, &str, &str, &str)] = &[
    // Unknown keys, at every depth and inside the tagged tables.
    (
        "unknown top-level key",
        "versio = 1\n",
        r#"{"versio": 1}"#,
        "versio",
        "unknown field `versio`",
    ),
    (
        "unknown key of a struct",
        "[limits]\nmemroy = \"1G\"\n",
        r#"{"limits": {"memroy": "1G"}}"#,
        "limits.memroy",
        "unknown field `memroy`",
    ),
    (
        "key another op takes",
        "[[fs]]\nop = \"proc\"\ndest = \"/proc\"\nsrc = \"/x\"\n",
        r#"{"fs": [{"op": "proc", "dest": "/proc", "src": "/x"}]}"#,
        "fs[0].src",
        "op \"proc\" takes dest",
    ),
    (
        "unknown key of no op",
        "[[fs]]\nop = \"tmpfs\"\ndest = \"/t\"\n[[fs]]\ndest = \"/p\"\nop = \"proc\"\nsize = 1\n",
        r#"{"fs": [{"op": "tmpfs", "dest": "/t"}, {"dest": "/p", "op": "proc", "size": 1}]}"#,
        "fs[1].size",
        "unknown field `size`",
    ),
    (
        "unknown key of a preferred limit",
        "[limits]\nmemory = { value = \"1G\", prefered = true }\n",
        r#"{"limits": {"memory": {"value": "1G", "prefered": true}}}"#,
        "limits.memory.prefered",
        "unknown field `prefered`",
    ),
    (
        "unknown key in a list of tables",
        "[limits]\nio = [{ device = \"/dev/vda\", wbps = 2 }, { device = \"/dev/vdb\", wbs = 2 }]\n",
        r#"{"limits": {"io": [{"device": "/dev/vda", "wbps": 2}, {"device": "/dev/vdb", "wbs": 2}]}}"#,
        "limits.io[1].wbs",
        "unknown field `wbs`",
    ),
    (
        "unknown key of the proxy policy",
        "[network]\nmode = \"proxy\"\nalow = [\"a.example\"]\n",
        r#"{"network": {"mode": "proxy", "alow": ["a.example"]}, "namespaces": {"net": true}}"#,
        "network.alow",
        "unknown field `alow`",
    ),
    (
        "policy key without the proxy mode",
        "[network]\nmode = \"none\"\nallow = [\"a.example\"]\n",
        r#"{"network": {"allow": ["a.example"], "mode": "none"}}"#,
        "network.allow",
        "takes no options",
    ),
    (
        "unknown key of the proxy limits",
        "[network]\nmode = \"proxy\"\nlimits = { max_tunnel = 3 }\n",
        r#"{"network": {"mode": "proxy", "limits": {"max_tunnel": 3}}}"#,
        "network.limits.max_tunnel",
        "unknown field `max_tunnel`",
    ),
    // Duplicate keys in structs...
    (
        "duplicate top-level key",
        "version = 1\nversion = 1\n",
        r#"{"version": 1, "version": 1}"#,
        "version",
        "duplicate",
    ),
    (
        "duplicate key of a struct",
        "[limits]\nmemory = \"1G\"\nmemory = \"2G\"\n",
        r#"{"limits": {"memory": "1G", "memory": "2G"}}"#,
        "limits.memory",
        "duplicate",
    ),
    (
        "duplicate key of an op",
        "[[fs]]\nop = \"proc\"\ndest = \"/proc\"\ndest = \"/p\"\n",
        r#"{"fs": [{"op": "proc", "dest": "/proc", "dest": "/p"}]}"#,
        "fs[0].dest",
        "duplicate",
    ),
    (
        "duplicate key of a preferred limit",
        "[limits]\nmemory = { value = \"1G\", value = \"2G\" }\n",
        r#"{"limits": {"memory": {"value": "1G", "value": "2G"}}}"#,
        "limits.memory.value",
        "duplicate",
    ),
    (
        "duplicate table",
        "[limits]\n[limits]\n",
        r#"{"limits": {}, "limits": {}}"#,
        "limits",
        "duplicate",
    ),
    // ... and in maps, where serde_json alone would keep the last one.
    (
        "duplicate environment variable",
        "[env]\nA = \"1\"\nA = \"2\"\n",
        r#"{"env": {"A": "1", "A": "2"}}"#,
        "env.A",
        "duplicate key",
    ),
    (
        "duplicate rlimit",
        "[limits.rlimits]\nnofile = 10\nnofile = 20\n",
        r#"{"limits": {"rlimits": {"nofile": 10, "nofile": 20}}}"#,
        "limits.rlimits.nofile",
        "duplicate key",
    ),
    (
        "duplicate resolution override",
        "[network]\nmode = \"proxy\"\nresolve = { \"a.example\" = \"192.0.2.1\", \"a.example\" = \"192.0.2.2\" }\n",
        r#"{"network": {"mode": "proxy", "resolve": {"a.example": "192.0.2.1", "a.example": "192.0.2.2"}}}"#,
        "network.resolve.a.example",
        "duplicate key",
    ),
    // NUL bytes: in values anywhere, in keys (shown escaped).
    (
        "NUL in a value",
        "cwd = \"/w\\u0000rk\"\n",
        r#"{"cwd": "/w\u0000rk"}"#,
        "cwd",
        "NUL",
    ),
    (
        "NUL in a list item",
        "command = [\"sh\", \"-c\\u0000\"]\n",
        r#"{"command": ["sh", "-c\u0000"]}"#,
        "command[1]",
        "NUL",
    ),
    (
        "NUL in an op's path",
        "[[fs]]\nop = \"proc\"\ndest = \"/pr\\u0000oc\"\n",
        r#"{"fs": [{"op": "proc", "dest": "/pr\u0000oc"}]}"#,
        "fs[0].dest",
        "NUL",
    ),
    (
        "NUL in a map value",
        "[env]\nA = \"x\\u0000\"\n",
        r#"{"env": {"A": "x\u0000"}}"#,
        "env.A",
        "NUL",
    ),
    (
        "NUL in a map key",
        "[env]\n\"A\\u0000B\" = \"x\"\n",
        r#"{"env": {"A\u0000B": "x"}}"#,
        "env.\"A\\0B\"",
        "key contains a NUL byte",
    ),
    (
        "NUL in an unknown key",
        "\"vers\\u0000ion\" = 1\n",
        r#"{"vers\u0000ion": 1}"#,
        "\"vers\\0ion\"",
        "unknown field `vers\\0ion`",
    ),
    // Out-of-range values: refused by serde's types, by the Spec's shape
    // check and by the module that enforces the key.
    (
        "uid above u32",
        "[identity]\nuid = 4294967296\n",
        r#"{"identity": {"uid": 4294967296}}"#,
        "identity.uid",
        "expected u32",
    ),
    (
        "negative count",
        "[limits]\npids = -1\n",
        r#"{"limits": {"pids": -1}}"#,
        "limits.pids",
        "expected u64",
    ),
    (
        "negative count inside an op",
        "[[fs]]\nop = \"tmpfs\"\ndest = \"/t\"\nnr_inodes = -1\n",
        r#"{"fs": [{"op": "tmpfs", "dest": "/t", "nr_inodes": -1}]}"#,
        "fs[0].nr_inodes",
        "expected u64",
    ),
    (
        "negative proxy limit",
        "[network]\nmode = \"proxy\"\n[network.limits]\nmax_tunnels = -3\n",
        r#"{"network": {"mode": "proxy", "limits": {"max_tunnels": -3}}}"#,
        "network.limits.max_tunnels",
        "expected u64",
    ),
    (
        "mode above 0o7777",
        "[[fs]]\nop = \"dir\"\ndest = \"/d\"\nmode = 4096\n",
        r#"{"fs": [{"op": "dir", "dest": "/d", "mode": 4096}]}"#,
        "fs[0].mode",
        "above 0o7777",
    ),
    (
        "unsupported version",
        "version = 2\n",
        r#"{"version": 2}"#,
        "version",
        "unsupported version 2",
    ),
    (
        "hostname too long",
        "[identity]\nhostname = \"hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh\"\n",
        r#"{"identity": {"hostname": "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh"}}"#,
        "identity.hostname",
        "1 to 64 bytes",
    ),
    (
        "zero wall clock",
        "[limits]\nwall_clock = \"0s\"\n",
        r#"{"limits": {"wall_clock": "0s"}}"#,
        "limits.wall_clock",
        "above 0",
    ),
    (
        "zero CPUs",
        "[limits]\ncpus = 0.0\n",
        r#"{"limits": {"cpus": 0.0}}"#,
        "limits.cpus",
        "above 0",
    ),
    (
        "memory below the floor",
        "[limits]\nmemory = { value = \"1K\", preferred = true }\n",
        r#"{"limits": {"memory": {"value": "1K", "preferred": true}}}"#,
        "limits.memory",
        "below the minimum of 4M",
    ),
    (
        "pids above the kernel's maximum",
        "[limits]\npids = 4194305\n",
        r#"{"limits": {"pids": 4194305}}"#,
        "limits.pids",
        "must be 1 to 4194304",
    ),
    (
        "rlimit above its maximum",
        "[limits.rlimits]\nnice = 41\n",
        r#"{"limits": {"rlimits": {"nice": 41}}}"#,
        "limits.rlimits.nice",
        "above the maximum 40",
    ),
    (
        "size suffix on a count rlimit",
        "[limits.rlimits]\nnofile = \"1K\"\n",
        r#"{"limits": {"rlimits": {"nofile": "1K"}}}"#,
        "limits.rlimits.nofile",
        "not a size",
    ),
    (
        "io value below the kernel's minimum",
        "[limits]\nio = [{ device = \"/dev/vda\", riops = 1 }]\n",
        r#"{"limits": {"io": [{"device": "/dev/vda", "riops": 1}]}}"#,
        "limits.io[0].riops",
        "below the minimum of 2",
    ),
    (
        "Landlock ABI 0",
        "[security.landlock]\nmin_abi = 0\n",
        r#"{"security": {"landlock": {"min_abi": 0}}}"#,
        "security.landlock.min_abi",
        "not a Landlock ABI version",
    ),
    (
        "egress rule that cannot match",
        "[network]\nmode = \"proxy\"\nallow = [\"ok.example\", \"*.10.0.0.1\"]\n",
        r#"{"network": {"mode": "proxy", "allow": ["ok.example", "*.10.0.0.1"]}}"#,
        "network.allow[1]",
        "",
    ),
];

#[test]
fn every_refusal_names_its_key_path_in_toml_and_json() {
    for (what, toml, json, path, says) in TABLE {
        for (format, text, is_json) in [("TOML", toml, false), ("JSON", json, true)] {
            let (got, message) = refusal(text, is_json);
            assert_eq!(got, *path, "{what} ({format}): {message}");
            assert!(
                message.contains(says),
                "{what} ({format}): {got}: {message}"
            );
            assert!(
                !message.contains('\n') && !message.chars().any(|c| c.is_control()),
                "{what} ({format}): not one printable line: {message:?}"
            );
        }
    }
}

#[test]
fn what_serializes_reads_back() {
    let mut s = default_profile();
    s.command = vec!["make".into()];
    s.fs.push(workspace_overlay(
        std::path::Path::new("/w"),
        Some(std::path::Path::new("/c")),
    ));
    s.fs.push(FsOp::Chmod {
        dest: "/w".into(),
        mode: 0o700,
    });
    s.fs.push(FsOp::File {
        dest: "/etc/x".into(),
        content: "x".into(),
        encoding: Encoding::Text,
        mode: None,
    });
    s.limits.pids = Some(Limit::required(64));
    let mut io = IoMax::new("/dev/vda");
    io.wbps = Some(ByteSize(1 << 20));
    s.limits.io = Some(Limit::preferred(vec![io]));
    s.limits.rlimits.insert("nofile".into(), 64);
    let mut p = ProxyPolicy {
        allow: vec!["a.example".into()],
        ..ProxyPolicy::default()
    };
    p.resolve.insert("a.example".into(), "192.0.2.1".into());
    p.limits.max_tunnels = Some(3);
    p.plain_http = true;
    p.egress_mode = crate::spec::EgressMode::Transparent;
    s.network = Network::Proxy(p);
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(parse_json(&json).unwrap(), s, "{json}");
    let toml = toml::to_string(&s).unwrap();
    assert_eq!(parse_toml(&toml).unwrap(), s, "{toml}");
    s.network = Network::Host;
    s.namespaces.net = false;
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(parse_json(&json).unwrap(), s, "{json}");
}

#[test]
fn egress_mode_is_a_network_key() {
    let s = parse_toml("[network]\nmode = \"proxy\"\negress_mode = \"transparent\"\n").unwrap();
    let Network::Proxy(p) = &s.network else {
        panic!("{:?}", s.network)
    };
    assert_eq!(p.egress_mode, crate::spec::EgressMode::Transparent);
    let e = parse_toml("[network]\nmode = \"proxy\"\negress_mode = \"sideways\"\n").unwrap_err();
    assert!(e.to_string().contains("network"), "{e}");
    let e = parse_toml("[network]\nmode = \"none\"\negress_mode = \"transparent\"\n").unwrap_err();
    assert!(e.to_string().contains("egress_mode"), "{e}");
}

#[test]
fn size_rlimits_take_suffixes() {
    let s = parse_toml("[limits.rlimits]\nas = \"1G\"\nfsize = 4096\nstack = \"8M\"\n").unwrap();
    assert_eq!(s.limits.rlimits["as"], 1 << 30);
    assert_eq!(s.limits.rlimits["fsize"], 4096);
    assert_eq!(s.limits.rlimits["stack"], 8 << 20);
    let s = parse_json(r#"{"limits": {"rlimits": {"memlock": "64K", "nofile": 10}}}"#).unwrap();
    assert_eq!(s.limits.rlimits["memlock"], 64 << 10);
    assert_eq!(s.limits.rlimits["nofile"], 10);
    assert_eq!(parse_rlimit("msgqueue", "1M"), Ok(1 << 20));
    assert_eq!(parse_rlimit("nproc", "100"), Ok(100));
    assert!(parse_rlimit("cpu", "10s").is_err());
}

#[test]
fn labels_are_checked_and_read_back() {
    let mut s = default_profile();
    s.command = vec!["true".into()];
    s.labels.insert("job".into(), "issue-123".into());
    s.labels.insert("hutch.session".into(), "ab".repeat(16));
    assert!(validate(&s).is_ok());
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(parse_json(&json).unwrap(), s, "{json}");
    let mut bad = s.clone();
    bad.labels.insert("has space".into(), "x".into());
    assert_eq!(validate(&bad).unwrap_err().path, "labels.\"has space\"");
    let mut bad = s.clone();
    bad.labels.insert("job".into(), "a\u{1b}[2J".into());
    assert_eq!(validate(&bad).unwrap_err().path, "labels.job");
    let e = parse_json(r#"{"labels": {"a": "1", "a": "2"}}"#).unwrap_err();
    assert!(e.to_string().contains("labels"), "{e}");
}

#[test]
fn inherit_fds_are_3_or_above_and_listed_once() {
    let mut s = Spec {
        command: vec!["true".into()],
        ..Spec::default()
    };
    s.inherit_fds = vec![5, 7];
    super::validate(&s).unwrap();
    s.inherit_fds = vec![2];
    assert_eq!(super::validate(&s).unwrap_err().path, "inherit_fds[0]");
    s.inherit_fds = vec![5, 5];
    assert_eq!(super::validate(&s).unwrap_err().path, "inherit_fds[1]");
    let j: Spec = super::parse_json(
        r#"{"inherit_fds": [4], "inherit_open_fds": true, "new_session": false}"#,
    )
    .unwrap();
    assert_eq!(j.inherit_fds, [4]);
    assert!(j.inherit_open_fds && !j.new_session);
}

#[test]
fn init_none_needs_an_own_pid_namespace_and_no_discarded_upper() {
    // Old Specs have no `init`: hutch init, and it is not written back.
    let old: Spec = super::parse_json(r#"{"command": ["true"]}"#).unwrap();
    assert_eq!(old.init, Init::Hutch);
    assert!(!serde_json::to_string(&old).unwrap().contains("init"));
    let j: Spec = super::parse_json(r#"{"command": ["true"], "init": "none"}"#).unwrap();
    assert_eq!(j.init, Init::None);
    assert!(
        serde_json::to_string(&j)
            .unwrap()
            .contains(r#""init":"none""#)
    );
    super::validate(&j).unwrap();
    let t: Spec = super::parse_toml("command = [\"true\"]\ninit = \"none\"\n").unwrap();
    assert_eq!(t.init, Init::None);
    assert!(super::parse_json(r#"{"init": "bwrap"}"#).is_err());
    let mut s = j.clone();
    s.namespaces.pid = false;
    let e = super::validate(&s).unwrap_err();
    assert_eq!(e.path, "init");
    assert!(e.message.contains("namespaces.pid"), "{e}");
    let mut s = j;
    s.fs.push(FsOp::TmpOverlay {
        lowers: vec!["/usr".into()],
        dest: "/usr".into(),
        size: None,
    });
    let e = super::validate(&s).unwrap_err();
    assert_eq!(e.path, "fs[0]");
    assert!(e.message.contains("count"), "{e}");
}

#[test]
fn remount_ro_is_recursive_unless_told() {
    let s: Spec = super::parse_json(
        r#"{"fs": [{"op": "remount-ro", "dest": "/a"}, {"op": "remount-ro", "dest": "/b", "recursive": false}]}"#,
    )
    .unwrap();
    let want = [("/a", true), ("/b", false)];
    for (op, (dest, rec)) in s.fs.iter().zip(want) {
        assert_eq!(
            op,
            &FsOp::RemountRo {
                dest: dest.into(),
                recursive: rec
            }
        );
    }
    let text = serde_json::to_string(&s.fs).unwrap();
    assert_eq!(text.matches("recursive").count(), 1, "{text}");
    assert_eq!(
        super::parse_json(&format!(r#"{{"fs": {text}}}"#))
            .unwrap()
            .fs,
        s.fs
    );
    assert!(
        super::parse_json(r#"{"fs": [{"op": "proc", "dest": "/p", "recursive": false}]}"#).is_err()
    );
}

#[test]
fn file_content_may_be_base64_and_bind_data_writable() {
    let s: Spec = super::parse_json(
        r#"{"command": ["true"], "fs": [
            {"op": "file", "dest": "/a", "content": "/wA=", "encoding": "base64"},
            {"op": "bind-data", "dest": "/b", "content": "x", "writable": true},
            {"op": "bind-data", "dest": "/c", "content": "y"}]}"#,
    )
    .unwrap();
    super::validate(&s).unwrap();
    match &s.fs[0] {
        FsOp::File {
            content, encoding, ..
        } => assert_eq!(encoding.decode(content), Some(vec![0xff, 0])),
        other => panic!("{other:?}"),
    }
    assert!(matches!(s.fs[1], FsOp::BindData { writable: true, .. }));
    assert!(matches!(
        s.fs[2],
        FsOp::BindData {
            writable: false,
            ..
        }
    ));
    let text = serde_json::to_string(&s.fs).unwrap();
    assert_eq!(text.matches("encoding").count(), 1, "{text}");
    assert_eq!(text.matches("writable").count(), 1, "{text}");
    let back = super::parse_json(&format!(r#"{{"command": ["true"], "fs": {text}}}"#)).unwrap();
    assert_eq!(back.fs, s.fs);
    let (path, _) = refusal(
        r#"{"command": ["true"], "fs": [{"op": "file", "dest": "/a", "content": "!!", "encoding": "base64"}]}"#,
        true,
    );
    assert_eq!(path, "fs[0].content");
    let (path, _) = refusal(
        r#"{"command": ["true"], "fs": [{"op": "file", "dest": "/a", "content": "x", "writable": true}]}"#,
        true,
    );
    assert_eq!(path, "fs[0].writable");
}

#[test]
fn only_a_pid_namespace_may_be_both_joined_and_new() {
    let mut s = Spec {
        command: vec!["true".into()],
        ..Spec::default()
    };
    s.namespaces.join.pid = Some(NamespaceRef::fd(5));
    s.namespaces.pid = true;
    super::validate(&s).unwrap();
    s.namespaces.join.net = Some(NamespaceRef::fd(6));
    s.namespaces.net = true;
    assert_eq!(super::validate(&s).unwrap_err().path, "namespaces.join.net");
}

/// A mount namespace is made, or joined with `mount = false`; never
/// neither nor both, and a joined one not with a user namespace of the
/// sandbox's own.
#[test]
fn a_mount_namespace_is_made_or_joined() {
    let mut s = Spec {
        command: vec!["true".into()],
        ..Spec::default()
    };
    s.namespaces.join.mount = Some(NamespaceRef::fd(5));
    assert_eq!(super::validate(&s).unwrap_err().path, "namespaces.mount");
    s.namespaces.mount = false;
    s.namespaces.user = false;
    super::validate(&s).unwrap();
    s.namespaces.user = true;
    assert_eq!(
        super::validate(&s).unwrap_err().path,
        "namespaces.join.mount"
    );
    s.namespaces.user = false;
    s.namespaces.join.mount = None;
    assert_eq!(super::validate(&s).unwrap_err().path, "namespaces.mount");
}

/// A NUL anywhere is refused at its key path; text that only looks like
/// JSON's escape of one (a backslash, then `u0000`) is not a NUL.
#[test]
fn a_nul_is_found_wherever_it_is_and_its_escape_text_is_not_one() {
    let mut spec = super::default_profile();
    spec.command = vec!["printf".into(), "\\u0000".into()];
    spec.env.insert("A".into(), "x\\u0000y".into());
    assert_eq!(super::validate::validate(&spec), Ok(()));
    spec.env.insert("B".into(), "x\0y".into());
    let e = super::validate::validate(&spec).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.message.as_str()),
        ("env.B", "contains a NUL byte")
    );
    spec.env.remove("B");
    spec.command.push("\0".into());
    assert_eq!(
        super::validate::validate(&spec).unwrap_err().path,
        "command[2]"
    );
}

#[test]
fn secrets_gateways_and_intercepts_parse_from_toml_with_sources_not_values() {
    let spec = parse_toml(
        r#"
command = ["true"]
[network]
mode = "proxy"
allow = ["api.anthropic.com", "github.com"]
[[network.gateways]]
name = "anthropic"
upstream = "https://api.anthropic.com"
env = ["ANTHROPIC_BASE_URL"]
methods = ["POST"]
paths = ["/v1/messages"]
max_requests = 100
[[network.intercept]]
host = "github.com"
[[secrets]]
name = "anthropic"
env = "ANTHROPIC_API_KEY"
from = { env = "REAL_ANTHROPIC_KEY" }
hosts = ["api.anthropic.com"]
inject = { header = "x-api-key" }
[[secrets]]
name = "gh"
from = { file = "/run/keys/gh" }
hosts = ["github.com"]
inject = { basic = "x-access-token" }
[[secrets]]
name = "bearer"
from = { fd = 3 }
hosts = ["github.com"]
inject = "bearer"
"#,
    )
    .unwrap();
    assert_eq!(spec.secrets.len(), 3);
    assert_eq!(
        spec.secrets[0].from,
        SecretSource::Env("REAL_ANTHROPIC_KEY".into())
    );
    assert_eq!(
        spec.secrets[0].inject,
        Injection::Header("x-api-key".into())
    );
    assert_eq!(
        spec.secrets[1].inject,
        Injection::Basic("x-access-token".into())
    );
    assert_eq!(spec.secrets[2].inject, Injection::Bearer);
    let Network::Proxy(p) = &spec.network else {
        panic!("proxy")
    };
    assert_eq!(p.gateways[0].max_requests, Some(100));
    assert_eq!(p.intercept[0].host, "github.com");
    // The round trip keeps the shape (session.json stores Specs).
    let back: Spec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
    assert_eq!(back, spec);
}
