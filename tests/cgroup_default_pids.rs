//! Issue 11 §8: the default profile caps the number of processes. A
//! workload forks until the kernel refuses (a fork bomb that keeps every
//! child alive); under the default profile the refusal comes at the
//! default cap, from cgroup `pids.max` where the pids controller is
//! delegated and from RLIMIT_NPROC in the sandbox's user namespace where
//! it is not, as root and as uid 65534. Before the default existed the
//! forks went on until the program's own bound (the host's limits, for a
//! real fork bomb).

#[macro_use]
mod common;

use std::path::Path;
use std::process::Command;

use common::{As, TempDir};

/// Forks children that wait on a pipe until the parent is done, and stops
/// at the first refused fork or at its own bound (argv[1]). Prints
/// `refused N ERRNO` or `unstopped N`, then lets the children go and reaps
/// them, so the run ends by itself.
const FORK_UNTIL_REFUSED: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long bound = argc > 1 ? atol(argv[1]) : 0;
    int gate[2];
    if (pipe(gate) != 0) { perror("pipe"); return 2; }
    long n = 0;
    int refused = 0;
    for (; n < bound; n++) {
        pid_t c = fork();
        if (c < 0) { refused = errno; break; }
        if (c == 0) {
            char b;
            close(gate[1]);
            while (read(gate[0], &b, 1) < 0 && errno == EINTR) {}
            _exit(0);
        }
    }
    if (refused) printf("refused %ld %d\n", n, refused);
    else printf("unstopped %ld\n", n);
    fflush(stdout);
    close(gate[1]);
    while (wait(NULL) > 0) {}
    return 0;
}
"#;

/// Compile the fork program into `dir` (readable and executable by all).
fn compile(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("fork_until_refused.c");
    std::fs::write(&src, FORK_UNTIL_REFUSED).unwrap();
    let out = dir.join("fork_until_refused");
    let st = Command::new("gcc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(st.success(), "compiling the fork program");
    out
}

fn default_profile_stops_a_fork_bomb(who: As) {
    require!(
        common::can_launch_as(who).is_ok(),
        "launching as root and as uid 65534 needs root"
    );
    require!(common::have("gcc"), "gcc builds the fork program");
    let dir = TempDir::new("forkbomb", who);
    compile(dir.path());
    let cap = hutch::spec::DEFAULT_PIDS;
    // The program's own bound, well past the cap, keeps a regression from
    // taking the host's pids with it.
    let bound = (cap + 1024).to_string();
    let status = dir.path().join("status.jsonl");
    let out = common::hutch_as(
        who,
        dir.path(),
        &[
            "run",
            "--quiet",
            "--timeout",
            "120s",
            "--status-file",
            status.to_str().unwrap(),
            "--",
            "./fork_until_refused",
            &bound,
        ],
    );
    let stdout = common::stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{who:?}: stdout {stdout} stderr {}",
        common::stderr(&out)
    );
    let words: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(
        words.first(),
        Some(&"refused"),
        "{who:?}: the default profile let {stdout:?} forks through (cap {cap})"
    );
    let started: u64 = words[1].parse().unwrap();
    assert_eq!(words[2], libc::EAGAIN.to_string(), "{who:?}: {stdout}");
    // hutch's init and the program itself count too: the children that
    // started fill the cap, and not one more.
    assert!(
        started + 2 <= cap && started + 16 >= cap,
        "{who:?}: {started} children started under a cap of {cap}"
    );
    // The report says how the cap was enforced, and that it was preferred.
    let report = common::exit_report(&status);
    assert_eq!(report["reason"], "exited", "{report}");
    let pids = report["enforced"]["limits"]["enforced"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["limit"] == "pids")
        .cloned()
        .unwrap_or_else(|| panic!("no pids limit enforced: {report}"));
    assert_eq!(pids["value"], cap, "{report}");
    let by = pids["by"].as_str().unwrap();
    assert!(
        by == "cgroup pids.max"
            || by == "cgroup v1 pids.max"
            || by.starts_with("RLIMIT_NPROC in the sandbox user namespace"),
        "{by}"
    );
}

#[test]
fn default_profile_stops_a_fork_bomb_as_root() {
    default_profile_stops_a_fork_bomb(As::Root);
}

#[test]
fn default_profile_stops_a_fork_bomb_as_nobody() {
    default_profile_stops_a_fork_bomb(As::Nobody);
}

/// The cap is overridable: `--pids unlimited` lifts it (the program's own
/// bound then stops it), `--pids N` replaces it.
#[test]
fn default_pids_cap_is_overridable() {
    require!(
        common::can_launch_as(As::Root).is_ok(),
        "launching needs root"
    );
    require!(common::have("gcc"), "gcc builds the fork program");
    let dir = TempDir::new("forkbomb-override", As::Root);
    compile(dir.path());
    let beyond = (hutch::spec::DEFAULT_PIDS + 64).to_string();
    let out = common::hutch_as(
        As::Root,
        dir.path(),
        &[
            "run",
            "--quiet",
            "--pids",
            "unlimited",
            "--",
            "./fork_until_refused",
            &beyond,
        ],
    );
    assert_eq!(
        common::stdout(&out).trim(),
        format!("unstopped {beyond}"),
        "{}",
        common::stderr(&out)
    );
    let out = common::hutch_as(
        As::Root,
        dir.path(),
        &[
            "run",
            "--quiet",
            "--pids",
            "32",
            "--",
            "./fork_until_refused",
            "100",
        ],
    );
    let stdout = common::stdout(&out);
    let started: u64 = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout} {}", common::stderr(&out)));
    assert!(
        stdout.starts_with("refused ") && (16..=30).contains(&started),
        "{stdout}"
    );
    let out = common::hutch_as(
        As::Root,
        dir.path(),
        &["run", "--pids", "many", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(
        common::stderr(&out).contains("--pids"),
        "{}",
        common::stderr(&out)
    );
}
