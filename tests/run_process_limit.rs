//! Issue 32, fault 6: what RLIMIT_NPROC counts when sandboxes of one user
//! run side by side. The kernel counts a user's tasks per user namespace
//! and checks each level up to the initial one: `--pids` (RLIMIT_NPROC in
//! the sandbox's user namespace where there is no pids cgroup) counts the
//! sandbox's own processes only, but the launching user's own `ulimit -u`
//! counts every process of that uid on the host, every one of its
//! sandboxes included. Reproduced deterministically with a uid of its own
//! (no other test runs as it, so its task count is known).

#[macro_use]
mod common;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// A uid no other test uses: its task count is this test's alone.
const UID: u32 = 64_901;

/// Tasks (threads included: RLIMIT_NPROC counts them) whose real uid is
/// `uid`, host-wide.
fn tasks_of(uid: u32) -> u64 {
    let mut n = 0;
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
                continue;
            };
            let real = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok());
            if real == Some(uid) {
                n += 1;
            }
        }
    }
    n
}

/// `hutch ARGS` as [`UID`] in `dir`, with RLIMIT_NPROC `limit` (soft and
/// hard, set by prlimit before it execs hutch) when given.
fn hutch_as_uid(dir: &std::path::Path, limit: Option<u64>, args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={UID}"),
        &format!("--regid={UID}"),
        "--clear-groups",
    ]);
    if let Some(l) = limit {
        c.args(["prlimit", &format!("--nproc={l}:{l}")]);
    }
    c.arg(hutch_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null());
    c
}

/// Sandbox A, ended (its supervisor killed, pid 1 follows by its
/// parent-death signal) when dropped.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sandbox A: six tasks of [`UID`] (its supervisor, hutch init, sh, three
/// sleeps) once it printed `ready`.
fn holder(dir: &std::path::Path) -> Holder {
    let mut a = hutch_as_uid(
        dir,
        None,
        &[
            "run",
            "--quiet",
            "--pids",
            "64",
            "--timeout",
            "2m",
            "--",
            "sh",
            "-c",
            "sleep 1000 & sleep 1000 & sleep 1000 & echo ready; wait",
        ],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(a.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let a = Holder(a);
    assert_eq!(line, "ready\n");
    a
}

#[test]
fn the_launching_users_limit_counts_its_other_sandboxes_and_pids_does_not() {
    require!(
        is_root() && have("setpriv") && have("prlimit"),
        "switching to a uid of the test's own needs root, setpriv and prlimit"
    );
    let dir = std::env::temp_dir().join(format!("hutch-test-nproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(UID), Some(UID)).unwrap();
    assert_eq!(
        tasks_of(UID),
        0,
        "uid {UID} is in use; this test needs it alone"
    );

    let a = holder(&dir);
    let held = tasks_of(UID);
    assert!(held >= 6, "sandbox A holds {held} tasks");

    // --pids is per sandbox: B's cap of 4 does not count A's processes.
    let out = hutch_as_uid(
        &dir,
        None,
        &[
            "run",
            "--quiet",
            "--pids",
            "4",
            "--",
            "sh",
            "-c",
            "sleep 0 & wait; echo ok",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));

    // The user's own limit is not: with room for B's supervisor and no
    // more, B's sandbox cannot be made while A runs, and the error says
    // what counted.
    let limit = held + 1;
    let out = hutch_as_uid(
        &dir,
        Some(limit),
        &["run", "--quiet", "--pids", "8", "--", "true"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    for part in [
        "EAGAIN",
        "a process limit (RLIMIT_NPROC) was reached",
        &format!(
            "uid {UID}'s limit of {limit} (ulimit -u) counts every process and thread of uid {UID} on this host, each of its sandboxes included; run fewer sandboxes as uid {UID} at once or raise its ulimit -u"
        ),
    ] {
        assert!(err.contains(part), "missing {part:?} in: {err}");
    }

    // Without A the same launch fits: A's processes were what counted.
    drop(a);
    wait_until(Duration::from_secs(10), "sandbox A's tasks to end", || {
        tasks_of(UID) == 0
    });
    let out = hutch_as_uid(
        &dir,
        Some(limit),
        &["run", "--quiet", "--pids", "8", "--", "true"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
