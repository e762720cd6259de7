//! `hutch check` and `hutch::internals::probe::run_all()` leave nothing behind: no
//! mount in the caller's mount table, no process. One test in this binary
//! on purpose: it makes the test process a child subreaper, so any probe
//! process that outlived its parent would be reparented to it and seen.

use std::collections::BTreeSet;
use std::process::Command;

use anyhow::Result;

fn mountinfo() -> BTreeSet<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Mount points the probes use inside their private namespaces.
fn is_probe_mount_point(line: &str) -> bool {
    let mp = line.split_whitespace().nth(4).unwrap_or("");
    mp == "/" || mp == "/proc" || mp == "/old" || mp == "/tmp" || mp.starts_with("/tmp/")
}

/// Pids whose parent is this process (other than the harness's threads).
fn children() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may contain spaces, so split after ')'.
        let Some((left, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(me) {
            out.push((pid, left.to_string()));
        }
    }
    out
}

#[test]
fn probes_leave_no_mount_and_no_process() -> Result<()> {
    nix::sys::prctl::set_child_subreaper(true)?;
    let before = mountinfo();

    for _ in 0..5 {
        let out = Command::new(env!("CARGO_BIN_EXE_hutch"))
            .args(["check", "--json"])
            .output()?;
        assert!(
            serde_json::from_slice::<serde_json::Value>(&out.stdout).is_ok(),
            "hutch check --json printed no JSON: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // In-process too, from this multi-threaded test harness.
        let report = hutch::internals::probe::run_all();
        assert!(report.feature("user_namespace").is_some());
        assert_eq!(
            report.ok,
            out.status.code() == Some(0),
            "library and binary disagree"
        );
    }

    let leftover = children();
    assert!(leftover.is_empty(), "processes left behind: {leftover:?}");
    let after = mountinfo();
    let added: Vec<&String> = after
        .difference(&before)
        .filter(|l| is_probe_mount_point(l))
        .collect();
    assert!(added.is_empty(), "mounts left behind: {added:#?}");
    Ok(())
}
