//! Limits through the `hutch` binary on a host without a usable cgroup v2
//! memory controller (e.g. a hybrid v1 layout): a required --memory fails
//! closed with the reason, the default profile's preferred memory cap is
//! reported unenforced, and --pids is still enforced by RLIMIT_NPROC in the
//! sandbox's user namespace. hutch runs as the unprivileged caller (uid
//! 65534 when the tests run as root): root on a v1 or hybrid host has the
//! v1 hierarchies (tests/cgroup_v1.rs), an unprivileged caller without a
//! delegated subtree has none. On hosts where the controller works for
//! that caller these tests skip (the kernel-VM harness covers them),
//! unless HUTCH_REQUIRE=all.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output};

use common::{As, hutch_as};

const MEMORY_WORKS: &str =
    "this host can enforce --memory (these tests are about hosts that cannot)";
const NO_LAUNCH: &str = "`hutch run -- true` does not work here (user namespaces?)";

/// Whether `hutch check`, run as the unprivileged caller, says `limit`
/// works.
fn limit_works(limit: &str) -> bool {
    let out = hutch(&["check", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["cgroup"]["limits"][limit]["works"] == true
}

fn memory_unavailable() -> bool {
    !limit_works("memory")
}

fn userns_works() -> bool {
    hutch(&["run", "--", "true"]).status.success()
}

/// `hutch ARGS` as the unprivileged caller.
fn hutch(args: &[&str]) -> Output {
    hutch_as(As::Nobody, &std::env::temp_dir(), args)
}

fn exit_event(status_file: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(status_file).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["event"] == "exit")
        .unwrap_or_else(|| panic!("no exit event in {text}"))
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("hutch-cgroup-host-{}-{name}", std::process::id()))
}

#[test]
fn required_memory_fails_closed_with_the_reason() {
    require!(memory_unavailable(), MEMORY_WORKS);
    let out = hutch(&["run", "--memory", "256M", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    let line = lines[0];
    assert!(
        line.starts_with("hutch: limits.memory: cgroup v2 memory controller not available ("),
        "{line}"
    );
    // What hutch found and the fix.
    assert!(line.contains(" layout"), "{line}");
    assert!(
        line.contains("systemd-run --user --scope -p Delegate=yes hutch"),
        "{line}"
    );
}

#[test]
fn preferred_default_memory_is_reported_unenforced() {
    require!(memory_unavailable(), MEMORY_WORKS);
    require!(userns_works(), NO_LAUNCH);
    let status = tmp("preferred");
    let out = hutch(&[
        "run",
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exit = exit_event(&status);
    let _ = std::fs::remove_file(&status);
    let unenforced = exit["unenforced"].as_array().unwrap();
    assert!(
        unenforced.iter().any(|u| u
            .as_str()
            .unwrap()
            .starts_with("limits.memory: cgroup v2 memory controller not available (")),
        "{exit}"
    );
    let limits = &exit["enforced"]["limits"];
    assert_eq!(limits["unenforced"][0]["limit"], "memory", "{exit}");
    assert_eq!(limits["unenforced"][0]["value"], 2u64 << 30, "{exit}");
    assert!(limits["cgroup"].is_null());
}

/// 20 processes of the sandbox's host uid run outside; --pids 16 still
/// lets the sandbox start about 13 (init and its shell take the rest) and
/// then refuses forks: the limit counts only the sandbox's user namespace.
#[test]
fn pids_enforced_by_rlimit_nproc_in_the_user_namespace() {
    require!(memory_unavailable(), MEMORY_WORKS);
    require!(userns_works(), NO_LAUNCH);
    let root = nix::unistd::getuid().is_root();
    let mut outside: Vec<Child> = (0..20)
        .map(|_| {
            let mut c = Command::new("sleep");
            c.arg("30");
            if root {
                // Root launches run the workload as host uid 65534.
                c.uid(65534).gid(65534);
            }
            c.spawn().unwrap()
        })
        .collect();
    let status = tmp("pids");
    let out = hutch(&[
        "run",
        "--pids",
        "16",
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "n=0; for i in $(seq 40); do sh -c 'sleep 3 &' 2>/dev/null && n=$((n+1)); done; echo started $n",
    ]);
    for c in &mut outside {
        let _ = c.kill();
        let _ = c.wait();
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let started: u32 = stdout
        .trim()
        .strip_prefix("started ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "stdout {stdout:?} stderr {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        (8..16).contains(&started),
        "started {started} of 40 under --pids 16"
    );
    let exit = exit_event(&status);
    let _ = std::fs::remove_file(&status);
    let pids = exit["enforced"]["limits"]["enforced"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["limit"] == "pids")
        .cloned()
        .unwrap_or_default();
    assert_eq!(pids["value"], 16, "{exit}");
    assert!(
        pids["by"]
            .as_str()
            .unwrap_or("")
            .starts_with("RLIMIT_NPROC"),
        "{exit}"
    );
}

#[test]
fn bad_rlimit_name_is_a_spec_error() {
    let out = hutch(&["run", "--rlimit", "nofiles=10", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limits.rlimits.nofiles"), "{err}");
    assert!(err.contains("unknown rlimit"), "{err}");
}

#[test]
fn rlimit_applies_in_the_sandbox() {
    require!(userns_works(), NO_LAUNCH);
    let out = hutch(&[
        "run",
        "--rlimit",
        "nofile=123",
        "--",
        "sh",
        "-c",
        "ulimit -n; ulimit -c",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "123\n0\n");
}

/// Issue 10 §11: `--rlimit as=1G` was refused ("not a number"). Sizes take
/// suffixes where the rlimit counts bytes; counts stay numbers.
#[test]
fn rlimit_sizes_take_suffixes() {
    require!(userns_works(), NO_LAUNCH);
    let out = hutch(&[
        "run",
        "--rlimit",
        "as=1G",
        "--rlimit",
        "fsize=10M",
        "--rlimit",
        "nofile=100",
        "--",
        "cat",
        "/proc/self/limits",
    ]);
    let limits = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{limits}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |name: &str| -> Vec<String> {
        limits
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {limits}"))[name.len()..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("Max address space")[..2], ["1073741824", "1073741824"]);
    assert_eq!(row("Max file size")[..2], ["10485760", "10485760"]);
    assert_eq!(row("Max open files")[..2], ["100", "100"]);
    // A count takes no suffix: one line naming the flag and why.
    let out = hutch(&["run", "--rlimit", "nofile=1K", "--", "true"]);
    let line = one_line_125(&out);
    assert!(
        line.contains("--rlimit nofile") && line.contains("not a size"),
        "{line}"
    );
}

fn io_unavailable() -> bool {
    !limit_works("io")
}

/// A whole-disk block device of this host, from /sys/block.
fn some_disk() -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    std::fs::read_dir("/sys/block")
        .ok()?
        .flatten()
        .find_map(|e| {
            let dev = format!("/dev/{}", e.file_name().to_string_lossy());
            std::fs::metadata(&dev)
                .ok()?
                .file_type()
                .is_block_device()
                .then_some(dev)
        })
}

fn one_line_125(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    err.trim_end().to_string()
}

#[test]
fn io_max_on_a_character_device_is_refused() {
    let out = hutch(&["run", "--io-max", "/dev/null:wbps=1M", "--", "true"]);
    let line = one_line_125(&out);
    assert!(
        line.starts_with("hutch: limits.io[0].device: /dev/null: not a block device"),
        "{line}"
    );
}

#[test]
fn io_max_bad_flag_values_are_one_line_errors() {
    for (value, says) in [
        (
            "/dev/vda",
            "--io-max: \"/dev/vda\": expected DEVICE:KEY=VALUE",
        ),
        (
            "/dev/vda:wbps=lots",
            "--io-max: wbps: \"lots\" is not a size",
        ),
        ("/dev/vda:bps=1M", "--io-max: unknown key \"bps\""),
        (
            "/dev/vda:wiops=1",
            "at `limits.io[0].wiops`: 1 is below the minimum of 2",
        ),
        (
            "vda:wbps=1M",
            "at `limits.io[0].device`: \"vda\" must be an absolute path",
        ),
    ] {
        let out = hutch(&["run", "--io-max", value, "--", "true"]);
        let line = one_line_125(&out);
        assert!(line.contains(says), "{value}: {line}");
    }
    let out = hutch(&[
        "run",
        "--io-max",
        "/dev/vda:wbps=1M",
        "--io-max",
        "/dev/vda:rbps=1M",
        "--",
        "true",
    ]);
    let line = one_line_125(&out);
    assert!(
        line.contains("at `limits.io[1].device`: /dev/vda is already limited by io[0]"),
        "{line}"
    );
}

#[test]
fn required_io_max_fails_closed_with_the_reason() {
    require!(
        io_unavailable(),
        "this host can enforce --io-max (these tests are about hosts that cannot)"
    );
    let disk = some_disk();
    require!(disk.is_some(), "no block device under /sys/block");
    let disk = disk.unwrap();
    let out = hutch(&["run", "--io-max", &format!("{disk}:wbps=1M"), "--", "true"]);
    let line = one_line_125(&out);
    assert!(
        line.starts_with("hutch: limits.io: cgroup v2 io controller not available ("),
        "{line}"
    );
    assert!(
        line.contains("systemd-run --user --scope -p Delegate=yes hutch"),
        "{line}"
    );
}

#[test]
fn help_lists_io_max() {
    let out = hutch(&["run", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--io-max DEVICE:KEY=VALUE"), "{text}");
}
