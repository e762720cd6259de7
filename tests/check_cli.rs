//! `hutch check` through the binary: the JSON document, the human output,
//! the exit code, both as root and as uid 65534, and agreement with
//! independent tools on what this host supports.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::is_root;
use serde_json::Value;

/// Every feature `hutch check` reports, in order.
const FEATURES: [&str; 22] = [
    "user_namespace",
    "mount_namespace",
    "overlay_userns",
    "pivot_root",
    "new_mount_api",
    "pid_namespace",
    "net_namespace",
    "transparent_egress",
    "ipc_namespace",
    "uts_namespace",
    "cgroup_namespace",
    "idmapped_mount",
    "seccomp",
    "landlock",
    "cgroup_v2",
    "clone3",
    "pidfd",
    "close_range",
    "openat2",
    "image_store",
    "id_range",
    "registry_client",
];

/// The hutch binary copied into a fresh 0755 directory, so that uid 65534
/// can run it (target/ may not be traversable for it). Removed on drop.
struct Reachable {
    dir: PathBuf,
}

impl Reachable {
    fn new(tag: &str) -> Result<Reachable> {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("hutch-check-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let bin = dir.join("hutch");
        std::fs::copy(env!("CARGO_BIN_EXE_hutch"), &bin)?;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))?;
        Ok(Reachable { dir })
    }

    fn bin(&self) -> PathBuf {
        self.dir.join("hutch")
    }
}

impl Drop for Reachable {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run `hutch check ARGS` (as uid 65534 through setpriv when `nobody`),
/// with `cwd` as working directory.
fn run_check(bin: &Path, cwd: &Path, nobody: bool, args: &[&str]) -> Result<Output> {
    let mut cmd = if nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        c.arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.arg("check").args(args).current_dir(cwd);
    let start = Instant::now();
    let out = cmd.output().context("running hutch check")?;
    // A hang guard, not a benchmark: the probes take tens of milliseconds.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "hutch check took {:?}",
        start.elapsed()
    );
    Ok(out)
}

/// Parse and validate the shape of the JSON report; returns it.
fn parse_report(out: &Output) -> Result<Value> {
    let text = String::from_utf8(out.stdout.clone())?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("not JSON:\n{text}"))?;
    let features = v["features"]
        .as_array()
        .context("features is not an array")?;
    let names: Vec<&str> = features.iter().filter_map(|f| f["name"].as_str()).collect();
    assert_eq!(names, FEATURES, "feature names and order");
    for f in features {
        let name = f["name"].as_str().unwrap_or("?");
        let status = f["status"].as_str().context("status")?;
        assert!(
            ["ok", "missing", "restricted", "skipped"].contains(&status),
            "{name}: status {status}"
        );
        assert_eq!(
            f["ok"].as_bool(),
            Some(status == "ok"),
            "{name}: ok vs status"
        );
        assert!(f["required"].is_boolean(), "{name}: required");
        assert!(
            !f["detail"].as_str().context("detail")?.is_empty(),
            "{name}: empty detail"
        );
        if status == "ok" || status == "skipped" {
            assert!(f["fix"].is_null(), "{name}: a fix for a working feature");
        } else {
            assert!(
                !f["fix"].as_str().unwrap_or("").is_empty(),
                "{name}: {status} without a fix"
            );
        }
    }
    assert!(!v["kernel_release"].as_str().unwrap_or("").is_empty());
    assert!(v["cgroup"].is_object(), "cgroup section: {}", v["cgroup"]);
    assert!(v["cgroup"]["layout"].is_string());
    // The exit code follows the `ok` field: required features only.
    let all_required_ok = features
        .iter()
        .all(|f| f["ok"] == Value::Bool(true) || f["required"] == Value::Bool(false));
    assert_eq!(v["ok"].as_bool(), Some(all_required_ok));
    assert_eq!(
        out.status.code(),
        Some(if all_required_ok { 0 } else { 1 }),
        "exit code vs report; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(v)
}

fn feature<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["features"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["name"] == name))
        .unwrap_or(&Value::Null)
}

fn ok(v: &Value, name: &str) -> bool {
    feature(v, name)["ok"] == Value::Bool(true)
}

/// Does a shell command (optionally as uid 65534) succeed?
fn succeeds(nobody: bool, script: &str) -> bool {
    let mut cmd = if nobody {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ]);
        c
    } else {
        let mut c = Command::new("sh");
        c.arg("-c");
        c
    };
    cmd.arg(script)
        .current_dir("/")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

const UNSHARE_USERNS: &str = "unshare --user --map-root-user true";
/// What transparent egress needs, with iproute2 instead of hutch's own
/// rtnetlink message.
const LOCAL_ROUTE_IN_NETNS: &str = "unshare --user --map-root-user --net sh -c '\
    ip link set lo up && ip route add local 198.18.0.0/15 dev lo && \
    ip route show table local | grep -q 198.18.0.0/15'";
const OVERLAY_IN_USERNS: &str = "unshare --user --map-root-user --mount sh -c '\
    mount -t tmpfs none /tmp && mkdir /tmp/l /tmp/u /tmp/w /tmp/m && \
    mount -t overlay overlay -o lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w,userxattr /tmp/m && \
    mkdir /tmp/m/new && test -d /tmp/u/new'";

/// The Landlock ABI by a direct syscall from python (independent of hutch).
fn landlock_abi_python() -> Option<i64> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import ctypes; l=ctypes.CDLL(None, use_errno=True); print(l.syscall(444, None, 0, 1))",
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The report agrees with independent tools about this host, for the
/// current user or uid 65534.
fn assert_matches_host(v: &Value, nobody: bool) {
    assert_eq!(
        ok(v, "user_namespace"),
        succeeds(nobody, UNSHARE_USERNS),
        "user_namespace vs `{UNSHARE_USERNS}`: {}",
        feature(v, "user_namespace")
    );
    assert_eq!(
        ok(v, "overlay_userns"),
        succeeds(nobody, OVERLAY_IN_USERNS),
        "overlay_userns vs unshare+mount: {}",
        feature(v, "overlay_userns")
    );
    assert_eq!(
        ok(v, "transparent_egress"),
        succeeds(nobody, LOCAL_ROUTE_IN_NETNS),
        "transparent_egress vs `{LOCAL_ROUTE_IN_NETNS}`: {}",
        feature(v, "transparent_egress")
    );
    // The kernel lists its seccomp actions in sysctl form too.
    let avail = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail");
    require!(
        avail.is_ok(),
        "/proc/sys/kernel/seccomp/actions_avail is unreadable: no independent seccomp check"
    );
    if let Ok(avail) = avail {
        let mut from_kernel: Vec<&str> = avail.split_whitespace().collect();
        from_kernel.sort();
        let mut reported: Vec<&str> = v["seccomp_actions"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, on)| **on == Value::Bool(true))
            .map(|(name, _)| name.as_str())
            .collect();
        reported.sort();
        assert_eq!(reported, from_kernel, "seccomp actions vs actions_avail");
        let needed = ["kill_process", "errno", "allow"];
        assert_eq!(
            ok(v, "seccomp"),
            needed.iter().all(|n| from_kernel.contains(n)),
            "seccomp: {}",
            feature(v, "seccomp")
        );
    }
    let abi = landlock_abi_python();
    require!(
        abi.is_some(),
        "python3 with ctypes is needed for the independent Landlock check"
    );
    if let Some(abi) = abi {
        let reported = v["landlock_abi"].as_i64();
        if abi > 0 {
            assert_eq!(reported, Some(abi), "landlock ABI");
            assert!(ok(v, "landlock"), "landlock: {}", feature(v, "landlock"));
        } else {
            assert_eq!(reported, None, "landlock ABI when the syscall fails");
            assert!(!ok(v, "landlock"));
        }
    }
    // What the CI host must support (COMMON.md: this machine has them).
    for name in ["user_namespace", "overlay_userns", "seccomp", "landlock"] {
        require!(
            ok(v, name),
            format!("{name} does not work here: {}", feature(v, name))
        );
    }
}

#[test]
fn json_report_as_current_user() -> Result<()> {
    let bin = Reachable::new("cur")?;
    let out = run_check(&bin.bin(), &bin.dir, false, &["--json"])?;
    let v = parse_report(&out)?;
    let uid = nix::unistd::geteuid().as_raw();
    assert_eq!(v["uid"].as_u64(), Some(uid as u64));
    assert_eq!(v["root"].as_bool(), Some(uid == 0));
    let idmap = feature(&v, "idmapped_mount");
    // Optional even for root: without it a root launch falls back to a
    // plain (not idmapped) workspace layer.
    assert_eq!(idmap["required"], Value::Bool(false), "{idmap}");
    if uid == 0 {
        assert_ne!(idmap["status"], "skipped", "{idmap}");
    } else {
        assert_eq!(idmap["status"], "skipped", "{idmap}");
    }
    // Root always has ids for an image of several owners: its own
    // /etc/subuid range or a private one (the region is never full here).
    let ids = feature(&v, "id_range");
    assert_eq!(ids["required"], Value::Bool(false), "{ids}");
    if uid == 0 {
        assert_eq!(ids["ok"], Value::Bool(true), "{ids}");
        let detail = ids["detail"].as_str().unwrap();
        assert!(
            detail.contains("private 65536-id ranges") || detail.contains("root's ranges"),
            "{ids}"
        );
    }
    assert_matches_host(&v, false);
    Ok(())
}

#[test]
fn json_report_as_uid_65534() -> Result<()> {
    require!(
        is_root(),
        "dropping to uid 65534 needs root (the current-user test covers a non-root run)"
    );
    let bin = Reachable::new("nobody")?;
    let out = run_check(&bin.bin(), &bin.dir, true, &["--json"])?;
    let v = parse_report(&out)?;
    assert_eq!(v["uid"].as_u64(), Some(65534));
    assert_eq!(v["root"].as_bool(), Some(false));
    let idmap = feature(&v, "idmapped_mount");
    assert_eq!(idmap["status"], "skipped", "{idmap}");
    assert_eq!(idmap["required"], Value::Bool(false));
    // Its own /etc/subuid range, or the line to add.
    let ids = feature(&v, "id_range");
    if ids["ok"] == Value::Bool(false) {
        let fix = ids["fix"].as_str().unwrap_or("");
        assert!(
            fix.contains("nobody:100000:65536") || fix.contains("uidmap"),
            "{ids}"
        );
    }
    assert_matches_host(&v, true);
    Ok(())
}

#[test]
fn human_output_has_one_aligned_line_per_feature() -> Result<()> {
    let bin = Reachable::new("human")?;
    let json = parse_report(&run_check(&bin.bin(), &bin.dir, false, &["--json"])?)?;
    let out = run_check(&bin.bin(), &bin.dir, false, &[])?;
    let text = String::from_utf8(out.stdout)?;
    let lines: Vec<&str> = text.lines().collect();
    let mut status_column = None;
    for f in json["features"].as_array().into_iter().flatten() {
        let name = f["name"].as_str().unwrap_or("?");
        let status = f["status"].as_str().unwrap_or("?");
        let line = lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .with_context(|| format!("no line for {name} in:\n{text}"))?;
        let col = line[name.len()..]
            .find(|c: char| !c.is_whitespace())
            .map(|i| i + name.len());
        let Some(col) = col else {
            bail!("no status on {line:?}")
        };
        assert!(
            line[col..].starts_with(status),
            "{line:?} should say {status}"
        );
        assert_eq!(
            *status_column.get_or_insert(col),
            col,
            "status column of {line:?}"
        );
        if let Some(fix) = f["fix"].as_str() {
            assert!(
                text.contains(&format!("fix: {fix}")),
                "fix for {name} missing"
            );
        }
    }
    // Same verdict as --json.
    assert_eq!(
        out.status.code(),
        Some(if json["ok"] == Value::Bool(true) {
            0
        } else {
            1
        })
    );
    Ok(())
}

#[test]
fn bad_argument_is_one_line_and_exit_2() -> Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_hutch"))
        .args(["check", "--frobnicate"])
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr)?;
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--frobnicate"), "{err}");
    assert!(out.stdout.is_empty());
    Ok(())
}
