//! The library API (`hutch::Command`) as root and as uid 65534, from a
//! multi-threaded process (the test harness is one).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use hutch::{Command, Outcome};

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
    for who in identities() {
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
    for who in identities() {
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

/// `hutch::Session::run` from a thread-spawning process goes through the
/// helper and still brings back the captured head and tail of the output
/// (into the session's audit) and the exit report.
#[test]
fn a_session_command_runs_from_a_multi_threaded_process() {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    let base = TempDir::new("lib-session", As::Root);
    let src = base.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("in.txt"), "from the baseline\n").unwrap();
    let state = base.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let worker = std::thread::spawn(move || {
        let dir = hutch::StateDir::open(&state).unwrap();
        let mut session = dir
            .create(&hutch::workspace::CreateOptions::new(
                hutch::workspace::Source::Dir { path: src },
            ))
            .unwrap();
        let mut spec = hutch::spec::default_profile();
        spec.command = vec![
            "sh".into(),
            "-c".into(),
            "cat in.txt; echo changed > in.txt; echo to-stderr >&2; exit 3".into(),
        ];
        let record = session.run(spec).unwrap();
        (
            record,
            session.path.join("audit.jsonl"),
            session.path.clone(),
        )
    });
    let (record, audit, session_dir) = worker.join().unwrap();
    assert_eq!(
        (record.report.status, record.report.reason),
        (3, Outcome::Exited),
        "{:?}",
        record.report
    );
    let audit = std::fs::read_to_string(audit).unwrap();
    let command: serde_json::Value = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["event"] == "command")
        .expect("a command line in the audit");
    assert_eq!(
        command["stdout"]["head"], "from the baseline\n",
        "{command}"
    );
    assert_eq!(command["stderr"]["head"], "to-stderr\n", "{command}");
    assert_eq!(command["exit"]["status"], 3);
    // The write landed in the session's upper.
    assert_eq!(
        std::fs::read_to_string(session_dir.join("upper/in.txt")).unwrap(),
        "changed\n"
    );
}

/// `Child::kill` ends the sandbox through its supervisor: every process of
/// it is gone, and the supervisor still reports (it was not killed).
#[test]
fn kill_ends_the_sandbox_through_its_supervisor_and_reports() {
    for who in identities() {
        let tools = TempDir::new("lib-tools", As::Root);
        let status = TempDir::new("lib-kill", who);
        let status_file = status.path().join("status.jsonl");
        let marker = format!(
            "{}",
            700_000 + std::process::id() % 90_000 + if who == As::Root { 0 } else { 1 }
        );
        let mut child = command(
            who,
            &tools,
            &format!("setsid sleep {marker} & sleep {marker}"),
        )
        .status_file(&status_file)
        .spawn()
        .unwrap();
        // Readiness: the start event.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&status_file).is_ok_and(|t| t.contains("\"start\"")) {
            assert!(
                std::time::Instant::now() < deadline,
                "{who:?}: no start event"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(child.try_wait().unwrap().is_none(), "{who:?}: running");
        child.kill().unwrap();
        let report = child.wait().unwrap();
        assert_eq!(
            (report.status, report.reason, report.signal),
            (137, Outcome::Killed, Some(9)),
            "{who:?}: {report:?}"
        );
        let left = std::process::Command::new("pgrep")
            .args(["-f", &format!("sleep {marker}")])
            .output()
            .unwrap();
        assert!(
            stdout(&left).trim().is_empty(),
            "{who:?}: processes survived the kill: {}",
            stdout(&left)
        );
        // The status file got the report too: the supervisor finished its
        // cleanup rather than dying.
        assert_eq!(exit_report(&status_file)["reason"], "killed");
    }
}

#[test]
fn output_collects_stdout_and_stderr_and_try_wait_reports_the_end() {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    let out = Command::new("sh")
        .args([
            "-c",
            "head -c 300000 /dev/zero | tr '\\0' o; echo err >&2; exit 4",
        ])
        .hutch_binary(hutch_bin())
        .output()
        .unwrap();
    assert_eq!(out.report.status, 4);
    assert_eq!(out.stdout.len(), 300_000);
    assert_eq!(out.stderr, b"err\n");
    let mut child = Command::new("true")
        .hutch_binary(hutch_bin())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let report = loop {
        if let Some(r) = child.try_wait().unwrap() {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "never ended");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(report.success(), "{report:?}");
}

/// `changes()` before `workspace()` keeps the workspace's upper all the
/// same; `changes()` with no workspace at all is refused, not ignored.
#[test]
fn changes_is_order_independent_and_never_silently_ignored() {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    let ws = TempDir::new("lib-order-ws", As::Root);
    let keep = TempDir::new("lib-order-keep", As::Root);
    let changes = keep.path().join("c");
    let report = Command::new("sh")
        .args(["-c", "echo kept > new.txt"])
        .hutch_binary(hutch_bin())
        .changes(&changes)
        .workspace(ws.path())
        .status()
        .unwrap();
    assert_eq!(report.status, 0, "{report:?}");
    assert_eq!(
        std::fs::read_to_string(changes.join("upper/new.txt")).unwrap(),
        "kept\n"
    );
    match Command::new("true")
        .hutch_binary(hutch_bin())
        .changes(&changes)
        .spawn()
    {
        Err(hutch::SpawnError::Spec(e)) => assert!(e.to_string().contains("workspace"), "{e}"),
        Err(other) => panic!("expected a Spec error, got {other}"),
        Ok(_) => panic!("changes() without a workspace was accepted"),
    }
}

/// A launch failure crosses the helper boundary typed.
#[test]
fn launch_failures_arrive_typed() {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    match Command::new("true")
        .hutch_binary(hutch_bin())
        .status_file("/hutch/no/such/dir/status.jsonl")
        .status()
    {
        Err(hutch::SpawnError::Launch(f)) => {
            assert_eq!(f.kind, hutch::launch::FailureKind::Prepare, "{f:?}");
            assert!(f.message.contains("cannot write status file"), "{f:?}");
        }
        other => panic!("expected a typed launch failure, got {other:?}"),
    }
}

/// `Spec::inherit_open_fds` through the library: an fd the caller opened
/// without close-on-exec reaches the workload at its number (through the
/// helper, which inherits it), one with close-on-exec does not, and
/// without the field neither does.
#[test]
fn inherit_open_fds_passes_the_callers_open_fds() {
    use std::os::fd::AsRawFd;
    for who in identities() {
        let tools = TempDir::new("lib-tools", As::Root);
        let dir = TempDir::new("lib-fds", As::Root);
        let path = dir.path().join("data");
        std::fs::write(&path, "through fd 37\n").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: plain fd calls on fds this test owns; 37 and 38 are
        // free in a test process of its own (nextest).
        unsafe {
            assert_eq!(libc::dup2(file.as_raw_fd(), 37), 37);
            assert_eq!(libc::dup3(file.as_raw_fd(), 38, libc::O_CLOEXEC), 38);
        }
        // (dash takes single-digit fds only: bash reads fd 37 itself.)
        let script = "for fd in 37 38; do [ -e /proc/self/fd/$fd ] && echo \"fd $fd open\"; done; [ -e /proc/self/fd/37 ] && bash -c 'cat <&37'; true";
        let run = |inherit: bool| {
            let mut c = command(who, &tools, script);
            c.spec_mut().inherit_open_fds = inherit;
            let out = c.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.report.status, 0, "{who:?} {inherit}: {err}");
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(run(true), "fd 37 open\nthrough fd 37\n", "{who:?}");
        assert_eq!(run(false), "", "{who:?}");
        // SAFETY: the fds duplicated above, closed once.
        unsafe {
            libc::close(37);
            libc::close(38);
        }
    }
}

/// `Spec::init = none`: the command is pid 1 of the sandbox's pid
/// namespace, its exit status and output are the sandbox's.
#[test]
fn init_none_makes_the_command_pid_1() {
    for who in identities() {
        let tools = TempDir::new("lib-tools", As::Root);
        let mut c = command(who, &tools, "echo pid $$; exit 9");
        c.spec_mut().init = hutch::spec::Init::None;
        let out = c.output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "pid 1\n", "{who:?}");
        let r = &out.report;
        assert_eq!(
            (r.status, r.exit_code, r.reason),
            (9, Some(9), Outcome::Exited),
            "{who:?}: {r:?}"
        );
        let mut c = command(
            who,
            &tools,
            "kill -KILL $$; echo survived-own-sigkill; kill -USR1 $$; exit 3",
        );
        c.spec_mut().init = hutch::spec::Init::None;
        let r = c.status().unwrap();
        // A namespace's init ignores signals it has no handler for.
        assert_eq!((r.status, r.reason), (3, Outcome::Exited), "{who:?}: {r:?}");
        let mut c = Command::new("hutch-no-such-program");
        c.hutch_binary(hutch_bin());
        c.spec_mut().init = hutch::spec::Init::None;
        let r = c.status().unwrap();
        assert_eq!((r.status, r.reason), (127, Outcome::ExecFailed), "{r:?}");
    }
}
