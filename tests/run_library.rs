//! The library API (`hutch::Command`) as root and as uid 65534, from a
//! multi-threaded process (the test harness is one).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use hutch::{Command, Outcome};

// The unprivileged path first: when the tests do not run as root it runs,
// and the root launch after it skips.
const BOTH: [As; 2] = [As::Nobody, As::Root];

fn command(who: As, tools: &TempDir, script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    if who == As::Nobody {
        c.hutch_binary(nobody_wrapper(tools.path()));
    } else {
        c.hutch_binary(hutch_bin());
    }
    c
}

#[test]
fn library_run_confines_and_keeps_writes_in_the_upper() {
    for who in BOTH {
        require!(can_launch_as(who).is_ok(), can_launch_as(who).unwrap_err());
        let tools = TempDir::new("lib-tools", As::Root);
        let ws = TempDir::new("lib-ws", who);
        write_as(&ws.path().join("in.txt"), "host\n", who);
        let keep = TempDir::new("lib-keep", who);
        let changes = keep.path().join("c");
        let out = command(
            who,
            &tools,
            "cat in.txt; echo sandbox > in.txt; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; env | grep -c CARGO; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
        )
        .workspace(ws.path())
        .changes(&changes)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
        let mut out = out;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut out.stdout().unwrap(), &mut text).unwrap();
        let report = out.wait().unwrap();
        assert_eq!(report.status, 0, "{who:?}: {report:?}");
        // The harness's CARGO_* variables do not reach the workload.
        assert_eq!(
            text,
            "host\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n0\nlo\n",
            "{who:?}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("in.txt")).unwrap(),
            "host\n"
        );
        assert_eq!(
            std::fs::read_to_string(changes.join("upper/in.txt")).unwrap(),
            "sandbox\n"
        );
        assert_eq!(
            report.changes[0].kept_in.as_deref(),
            Some(changes.join("upper").as_path())
        );
        assert_eq!(report.enforced.capabilities, Vec::<String>::new());
        assert!(report.enforced.namespaces.iter().any(|n| n == "net"));
    }
}

#[test]
fn library_reports_exit_codes_signals_and_timeouts() {
    for who in BOTH {
        require!(can_launch_as(who).is_ok(), can_launch_as(who).unwrap_err());
        let tools = TempDir::new("lib-tools", As::Root);
        let r = command(who, &tools, "exit 9").status().unwrap();
        assert_eq!(
            (r.status, r.exit_code, r.reason),
            (9, Some(9), Outcome::Exited)
        );
        let r = command(who, &tools, "kill -USR1 $$").status().unwrap();
        assert_eq!(
            (r.status, r.signal, r.reason),
            (128 + 10, Some(10), Outcome::Signaled)
        );
        let r = command(who, &tools, "sleep 30")
            .timeout(Duration::from_millis(300))
            .status()
            .unwrap();
        assert_eq!((r.status, r.reason), (124, Outcome::TimedOut));
        let r = Command::new("hutch-no-such-program")
            .hutch_binary(hutch_bin())
            .status()
            .unwrap();
        assert_eq!((r.status, r.reason), (127, Outcome::ExecFailed));
    }
}

#[test]
fn library_rejects_bad_specs_before_spawning() {
    let mut c = Command::new("true");
    c.hutch_binary(hutch_bin()).ro_bind("/usr", "relative");
    match c.spawn() {
        Err(hutch::SpawnError::Spec(e)) => {
            assert!(e.to_string().contains("is not an absolute path"), "{e}")
        }
        Err(other) => panic!("expected a Spec error, got {other}"),
        Ok(_) => panic!("a relative destination was accepted"),
    }
    let mut c = Command::new("true");
    c.hutch_binary(hutch_bin())
        .ro_bind("/hutch/missing/source", "/x");
    let r = c.status().unwrap();
    assert_eq!(r.status, 125);
    assert!(
        r.error
            .as_deref()
            .unwrap_or("")
            .contains("/hutch/missing/source"),
        "{r:?}"
    );
}

#[test]
fn spawning_from_many_threads_at_once_is_safe() {
    // Needs no particular identity: root in CI, else the unprivileged path.
    let handles: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let r = Command::new("sh")
                    .args(["-c", &format!("exit {i}")])
                    .hutch_binary(hutch_bin())
                    .status()
                    .unwrap();
                assert_eq!(r.status, i);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn in_process_launch_refuses_a_multi_threaded_caller() {
    // The test harness runs tests on threads, so this process has several.
    let mut spec = hutch::spec::default_profile();
    spec.command = vec!["true".into()];
    std::thread::spawn(|| std::thread::sleep(Duration::from_millis(200)));
    match hutch::launch::run(&spec, &Default::default()) {
        Err(hutch::launch::LaunchError::MultiThreaded(n)) => assert!(n > 1),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
