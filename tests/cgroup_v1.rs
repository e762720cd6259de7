//! Limits through the `hutch` binary on a host whose controllers live in
//! cgroup v1 hierarchies (legacy, or hybrid with a cgroup2 mount that holds
//! none of them, like the CI host): as root, `--memory` and `--pids` are
//! enforced by a leaf in each v1 hierarchy, the OOM kill and the refused
//! fork are reported, the leaves are gone afterwards (also after a SIGKILL
//! of the supervisor, at the next launch), `hutch check` says what v1
//! gives, and uid 65534, for whom no v1 subtree is delegated, gets the
//! one-line refusal. On a unified host these tests skip (the kernel VM
//! covers cgroup v2), unless HUTCH_REQUIRE=all.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

/// The v1 hierarchies the tests look into.
const MEMORY: &str = "/sys/fs/cgroup/memory";
const PIDS: &str = "/sys/fs/cgroup/pids";
const CPU: &str = "/sys/fs/cgroup/cpu";

/// Root on a host with writable v1 memory, pids and cpu hierarchies and
/// no cgroup v2 memory controller.
fn v1_host() -> Result<(), String> {
    if !is_root() {
        return Err("not root (the v1 hierarchies are root's here)".into());
    }
    let v2_memory = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - cgroup2 "))
        .filter_map(|l| l.split_whitespace().nth(4))
        .any(|m| {
            std::fs::read_to_string(Path::new(m).join("cgroup.controllers"))
                .unwrap_or_default()
                .split_whitespace()
                .any(|c| c == "memory")
        });
    if v2_memory {
        return Err("cgroup v2 has the memory controller here (the v2 path is used)".into());
    }
    for h in [MEMORY, PIDS, CPU] {
        if !Path::new(h).join("cgroup.procs").exists() {
            return Err(format!("no cgroup v1 hierarchy at {h}"));
        }
    }
    can_launch_as(As::Root)
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hutch-cgroup-v1-{}-{name}", std::process::id()))
}

fn run_with_status(name: &str, args: &[&str]) -> (Output, serde_json::Value) {
    let status = tmp(name);
    let _ = std::fs::remove_file(&status);
    let mut all = vec!["run", "--quiet", "--status-file", status.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = Command::new(hutch_bin())
        .args(&all)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report = exit_report(&status);
    let _ = std::fs::remove_file(&status);
    (out, report)
}

/// The leaf of sandbox `id` in hierarchy `h`.
fn leaf(h: &str, id: &str) -> PathBuf {
    Path::new(h).join("hutch").join(format!("hutch-{id}"))
}

fn enforced_by<'a>(report: &'a serde_json::Value, limit: &str) -> &'a str {
    report["enforced"]["limits"]["enforced"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["limit"] == limit)
        .and_then(|e| e["by"].as_str())
        .unwrap_or_else(|| panic!("no enforced {limit} in {report}"))
}

#[test]
fn memory_256m_kills_a_1gib_allocation_and_reports_oom_killed() {
    require!(v1_host().is_ok(), v1_host().unwrap_err());
    let (out, report) = run_with_status(
        "oom",
        &[
            "--memory",
            "256M",
            "--",
            "python3",
            "-c",
            "b = bytearray(1 << 30); print('survived')",
        ],
    );
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    assert!(!stdout(&out).contains("survived"));
    assert_eq!(report["reason"], "oom-killed", "{report}");
    let limits = &report["enforced"]["limits"];
    assert_eq!(limits["ended_by"], "oom-killed", "{report}");
    assert!(
        limits["stats"]["oom_kill"].as_u64().unwrap() >= 1,
        "{report}"
    );
    assert!(
        limits["stats"]["memory_peak"].as_u64().unwrap() <= 256 << 20,
        "{report}"
    );
    assert!(
        enforced_by(&report, "memory").starts_with("cgroup v1 memory.limit_in_bytes"),
        "{report}"
    );
    let id = report["sandbox_id"].as_str().unwrap();
    assert_eq!(
        limits["cgroup"].as_str(),
        Some(leaf(MEMORY, id).to_str().unwrap())
    );
    for h in [MEMORY, PIDS] {
        assert!(
            !leaf(h, id).exists(),
            "{} left behind",
            leaf(h, id).display()
        );
    }
}

/// Forks up to 100 children that wait on a pipe, prints how many
/// processes the sandbox's pid namespace then holds, and lets them go.
const FORK_100: &str = "
import os
r, w = os.pipe()
kids = []
for i in range(100):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    kids.append(pid)
print('running', sum(1 for p in os.listdir('/proc') if p.isdigit()), flush=True)
os.close(w)
for k in kids:
    os.waitpid(k, 0)
";

#[test]
fn pids_64_holds_and_the_refused_fork_is_reported() {
    require!(v1_host().is_ok(), v1_host().unwrap_err());
    let (out, report) = run_with_status("pids", &["--pids", "64", "--", "python3", "-c", FORK_100]);
    let text = stdout(&out);
    let running: u32 = text
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("stdout {text:?} stderr {}", stderr(&out)));
    // hutch init, python and its children: up to the cap, never above.
    assert!(
        (60..=64).contains(&running),
        "{running} processes under --pids 64"
    );
    let limits = &report["enforced"]["limits"];
    assert_eq!(
        enforced_by(&report, "pids"),
        "cgroup v1 pids.max",
        "{report}"
    );
    assert!(
        limits["stats"]["pids_max_events"].as_u64().unwrap() >= 1,
        "{report}"
    );
    assert_eq!(limits["ended_by"], "pids-limit-hit", "{report}");
    let id = report["sandbox_id"].as_str().unwrap();
    assert!(!leaf(PIDS, id).exists());
}

#[test]
fn cpus_write_the_cfs_quota_of_the_v1_leaf() {
    require!(v1_host().is_ok(), v1_host().unwrap_err());
    let status = tmp("cpus");
    let _ = std::fs::remove_file(&status);
    let mut child = Command::new(hutch_bin())
        .args([
            "run",
            "--quiet",
            "--cpus",
            "0.5",
            "--status-file",
            status.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "cat >/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = wait_for_event(&status, "start", Duration::from_secs(20));
    let id = start["sandbox_id"].as_str().unwrap();
    let cpu = leaf(CPU, id);
    let read = |f: &str| std::fs::read_to_string(cpu.join(f)).unwrap();
    assert_eq!(read("cpu.cfs_quota_us").trim(), "50000");
    assert_eq!(read("cpu.cfs_period_us").trim(), "100000");
    // hutch init and the workload are in the leaf of every hierarchy.
    let init = start["pid"].as_i64().unwrap().to_string();
    for h in [MEMORY, PIDS, CPU] {
        let procs = std::fs::read_to_string(leaf(h, id).join("cgroup.procs")).unwrap();
        assert!(procs.lines().any(|p| p == init), "{h}: {procs}");
        assert!(procs.lines().count() >= 2, "{h}: {procs}");
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let report = exit_report(&status);
    let _ = std::fs::remove_file(&status);
    assert_eq!(
        enforced_by(&report, "cpus"),
        "cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us"
    );
    assert!(!cpu.exists());
}

#[test]
fn a_sigkilled_supervisors_leaves_go_at_the_next_launch() {
    require!(v1_host().is_ok(), v1_host().unwrap_err());
    let status = tmp("sigkill");
    let _ = std::fs::remove_file(&status);
    let mut child = Command::new(hutch_bin())
        .args([
            "run",
            "--quiet",
            "--memory",
            "64M",
            "--status-file",
            status.to_str().unwrap(),
            "--",
            "sleep",
            "600",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let start = wait_for_event(&status, "start", Duration::from_secs(20));
    let _ = std::fs::remove_file(&status);
    let id = start["sandbox_id"].as_str().unwrap().to_string();
    let leaves: Vec<PathBuf> = [MEMORY, PIDS].iter().map(|h| leaf(h, &id)).collect();
    for l in &leaves {
        assert!(l.is_dir(), "{}", l.display());
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The sandbox dies with its supervisor (PDEATHSIG); its leaves stay,
    // empty and unlocked.
    wait_until(Duration::from_secs(20), "the sandbox's end", || {
        leaves.iter().all(|l| {
            std::fs::read_to_string(l.join("cgroup.procs"))
                .map(|p| p.trim().is_empty())
                .unwrap_or(true)
        })
    });
    let out = Command::new(hutch_bin())
        .args(["run", "--quiet", "--memory", "64M", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    for l in &leaves {
        assert!(!l.exists(), "{} outlived the next launch", l.display());
    }
}

#[test]
fn check_lists_what_cgroup_v1_gives() {
    require!(v1_host().is_ok(), v1_host().unwrap_err());
    let out = Command::new(hutch_bin())
        .args(["check", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cg = &v["cgroup"];
    for (limit, by) in [
        ("memory", "cgroup v1 memory.limit_in_bytes"),
        ("pids", "cgroup v1 pids.max"),
        ("cpus", "cgroup v1 cpu.cfs_quota_us"),
    ] {
        assert_eq!(cg["limits"][limit]["works"], true, "{cg}");
        assert!(
            cg["limits"][limit]["by"].as_str().unwrap().starts_with(by),
            "{cg}"
        );
    }
    let memory = cg["v1"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["controllers"][0] == "memory")
        .expect("the memory hierarchy");
    assert_eq!(memory["usable"], true);
    assert_eq!(memory["parent"], format!("{MEMORY}/hutch"));
    let text = Command::new(hutch_bin()).arg("check").output().unwrap();
    assert!(
        stdout(&text).contains("works (cgroup v1 memory.limit_in_bytes"),
        "{}",
        stdout(&text)
    );
}

#[test]
fn uid_65534_without_a_delegated_v1_subtree_is_refused_in_one_line() {
    require!(v1_host().is_ok(), v1_host().unwrap_err());
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    let out = hutch_as(
        As::Nobody,
        &std::env::temp_dir(),
        &["run", "--memory", "256M", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("hutch: limits.memory: cgroup v2 memory controller not available ("),
        "{err}"
    );
    assert!(
        err.contains("cgroup v1 memory hierarchy: ") && err.contains("not writable by uid 65534"),
        "{err}"
    );
    assert!(err.contains("run hutch as root"), "{err}");
}

/// A warm pool (the library's `hutch::Pool`, as sessions' `--warm` use)
/// limits its sandboxes through v1 as a cold launch does: a pooled
/// command over its memory cap is OOM-killed and reported so, and the
/// sandbox's leaves are gone once the pool is.
#[test]
fn a_warm_pools_command_is_held_to_its_v1_memory_cap() {
    require!(v1_host().is_ok(), v1_host().unwrap_err());
    let mut c = hutch::Command::new("true");
    c.spec_mut().limits.memory = Some(hutch::spec::Limit::Required(hutch::spec::ByteSize(
        128 << 20,
    )));
    let spec = c.as_spec().clone();
    let pool = hutch::Pool::with_binary(spec, 1, hutch_bin()).unwrap();
    assert!(
        pool.wait_ready(1, Duration::from_secs(30)),
        "a warm sandbox"
    );
    let out = pool
        .command(["python3", "-c", "b = bytearray(1 << 30); print('survived')"])
        .output()
        .unwrap();
    let r = &out.report;
    assert!(r.warm, "{r:?}");
    assert_eq!(r.reason, hutch::Outcome::OomKilled, "{r:?}");
    let limits = r.enforced.limits.as_ref().expect("limits");
    assert!(
        limits
            .enforced
            .iter()
            .any(|e| e.limit == "memory" && e.by.starts_with("cgroup v1 memory.limit_in_bytes")),
        "{limits:?}"
    );
    let leaf = limits.cgroup.clone().expect("a v1 leaf");
    drop(pool);
    wait_until(Duration::from_secs(20), "the leaf's removal", || {
        !leaf.exists()
    });
}
