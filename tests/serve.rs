//! `hutch serve` (docs/machine.md, "hutch serve"), through the binary as
//! a client drives it, as root and as uid 65534: concurrent requests,
//! stdin, signals, cancellation, bad and oversized lines, the end of the
//! server with its stdin, and a second client in Node
//! (tests/serve/client.mjs).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// A `hutch serve` child and its events, read by a thread.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Value>,
    /// Events read but not yet asked for.
    seen: Vec<Value>,
}

impl Server {
    fn start(who: As, cwd: &std::path::Path) -> Server {
        let mut child = hutch_command(who)
            .arg("serve")
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn hutch serve");
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let (tx, events) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("serve wrote a line that is not JSON ({e}): {line}")
                });
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            stdin,
            events,
            seen: Vec::new(),
        };
        let hello = s.next(|e| e["event"] == "hello");
        assert_eq!(hello["protocol"], 1, "{hello}");
        assert_eq!(hello["machine"], 1, "{hello}");
        s
    }

    fn send(&mut self, msg: &Value) {
        self.send_raw(format!("{msg}\n").as_bytes());
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// The first event (seen or to come) that `want` accepts.
    fn next(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.seen.iter().position(&want) {
            return self.seen.remove(i);
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) if want(&e) => return e,
                Ok(e) => self.seen.push(e),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no such event in {WAIT:?}; saw {:?}", self.seen)
                }
                Err(RecvTimeoutError::Disconnected) => panic!("serve ended; saw {:?}", self.seen),
            }
        }
    }

    /// Every event of request `id` up to its exit (or error): (stdout,
    /// stderr, the last event).
    fn finish(&mut self, id: u64) -> (String, String, Value) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        loop {
            let e = self.next(|e| e["id"] == id);
            match e["event"].as_str() {
                Some("stdout") => out.extend(b64(&e["data"])),
                Some("stderr") => err.extend(b64(&e["data"])),
                Some("exit" | "error") => {
                    return (
                        String::from_utf8_lossy(&out).into(),
                        String::from_utf8_lossy(&err).into(),
                        e,
                    );
                }
                _ => {}
            }
        }
    }

    /// Request `id`'s stdout, until it holds `text`.
    fn stdout_until(&mut self, id: u64, text: &str) {
        let mut out = Vec::new();
        while !String::from_utf8_lossy(&out).contains(text) {
            let e =
                self.next(|e| e["id"] == id && (e["event"] == "stdout" || e["event"] == "exit"));
            assert_eq!(
                e["event"], "stdout",
                "request {id} ended before printing {text:?}: {e}"
            );
            out.extend(b64(&e["data"]));
        }
    }

    /// Close stdin and wait (bounded) for the server to exit.
    fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit after its stdin closed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn b64(v: &Value) -> Vec<u8> {
    use std::io::Read;
    // base64 by `base64 -d`: the test needs no decoder of its own.
    let mut p = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin
        .take()
        .unwrap()
        .write_all(v.as_str().unwrap().as_bytes())
        .unwrap();
    let mut out = Vec::new();
    p.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(p.wait().unwrap().success());
    out
}

/// Request `id`: a sandbox whose workload is `sleep N`, returned once
/// that process runs.
fn start_sleep(s: &mut Server, id: u64, n: &str) {
    let script = format!("echo ready; exec sleep {n}");
    s.send(&argv(id, &["run", "--quiet", "--", "sh", "-c", &script]));
    s.stdout_until(id, "ready");
    wait_until(WAIT, "the sandbox's sleep to run", || {
        live_sleeps(n).len() == 1
    });
}

fn argv(id: u64, args: &[&str]) -> Value {
    json!({"id": id, "verb": "argv", "argv": args})
}

#[test]
fn requests_run_concurrently_with_stdin_and_envelopes() {
    for who in identities() {
        let dir = TempDir::new("serve", who);
        let mut s = Server::start(who, dir.path());
        // Two commands that each wait for a line of stdin: the second is
        // answered (and ends) while the first still waits.
        let reader = ["run", "--quiet", "--", "sh", "-c", "read x; echo got-$x"];
        let mut first = argv(1, &reader);
        first["stdin"] = json!(true);
        let mut second = argv(2, &reader);
        second["stdin"] = json!(true);
        s.send(&first);
        s.send(&second);
        s.send(&json!({"id": 2, "verb": "stdin", "data": "dHdvCg==", "eof": true}));
        let (out2, _, exit2) = s.finish(2);
        assert_eq!(
            (out2.as_str(), &exit2["code"]),
            ("got-two\n", &json!(0)),
            "{exit2}"
        );
        s.send(&json!({"id": 1, "verb": "stdin", "data": "b25lCg==", "eof": true}));
        let (out1, _, exit1) = s.finish(1);
        assert_eq!(
            (out1.as_str(), &exit1["code"]),
            ("got-one\n", &json!(0)),
            "{exit1}"
        );

        // The envelope of --result-fd and of --json stdout, in the exit
        // event, as the CLI writes them; stderr streamed apart.
        let mut run = argv(
            3,
            &[
                "run",
                "--quiet",
                "--json",
                "--result-fd",
                "5",
                "--",
                "sh",
                "-c",
                "echo out; echo err >&2; exit 4",
            ],
        );
        run["report_fd"] = json!(5);
        s.send(&run);
        let (out, err, exit) = s.finish(3);
        assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
        assert_eq!(exit["code"], 4, "{exit}");
        assert_eq!(exit["envelope"]["verb"], "run", "{exit}");
        assert_eq!(exit["envelope"]["result"]["status"], 4, "{exit}");
        let mut list = argv(
            4,
            &[
                "session",
                "--state-dir",
                dir.path().to_str().unwrap(),
                "list",
                "--json",
            ],
        );
        list["json_stdout"] = json!(true);
        s.send(&list);
        let (out, _, exit) = s.finish(4);
        assert_eq!(out, "", "the envelope is not also streamed");
        assert_eq!(exit["envelope"]["verb"], "session.list", "{exit}");
        assert_eq!(exit["envelope"]["ok"], true, "{exit}");
        // A CLI error keeps its exit status and its typed envelope.
        let mut missing = argv(
            5,
            &[
                "session",
                "--state-dir",
                dir.path().to_str().unwrap(),
                "show",
                "nosuchid",
                "--json",
            ],
        );
        missing["json_stdout"] = json!(true);
        s.send(&missing);
        let (_, err, exit) = s.finish(5);
        assert_ne!(exit["code"], 0, "{exit}");
        assert_eq!(exit["envelope"]["ok"], false, "{exit}");
        assert!(!err.is_empty(), "the human line still goes to stderr");
        assert!(s.close().success());
    }
}

#[test]
fn signal_reaches_the_workload_and_cancel_ends_it() {
    for who in identities() {
        let dir = TempDir::new("serve-signal", who);
        let mut s = Server::start(who, dir.path());
        s.send(&argv(
            1,
            &[
                "run",
                "--quiet",
                "--",
                "sh",
                "-c",
                "trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 1; done",
            ],
        ));
        s.stdout_until(1, "ready");
        s.send(&json!({"id": 1, "verb": "signal", "signal": "USR1"}));
        let (out, _, exit) = s.finish(1);
        assert!(out.contains("got-usr1"), "{out:?}");
        assert_eq!(exit["code"], 7, "{exit}");
        assert_eq!(exit["cancelled"], false, "{exit}");

        start_sleep(&mut s, 2, "9372");
        let t = Instant::now();
        s.send(&json!({"id": 2, "verb": "cancel"}));
        let (_, _, exit) = s.finish(2);
        assert_eq!(exit["event"], "exit", "{exit}");
        assert_eq!(exit["cancelled"], true, "{exit}");
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "cancel took {:?}",
            t.elapsed()
        );
        wait_until(
            Duration::from_secs(10),
            "the cancelled sleep to be gone",
            || live_sleeps("9372").is_empty(),
        );
        // An ended request takes no more control messages.
        s.send(&json!({"id": 2, "verb": "signal", "signal": "TERM"}));
        let e = s.next(|e| e["id"] == 2);
        assert_eq!(
            (&e["event"], &e["error"]["kind"]),
            (&json!("error"), &json!("not-found")),
            "{e}"
        );
        assert!(s.close().success());
    }
}

#[test]
fn bad_and_oversized_lines_get_error_events_and_serving_goes_on() {
    let who = caller();
    let dir = TempDir::new("serve-bad", who);
    let mut s = Server::start(who, dir.path());
    let error_of = |s: &mut Server| s.next(|e| e["event"] == "error");
    s.send_raw(b"not json\n");
    let e = error_of(&mut s);
    assert_eq!(
        (&e["id"], &e["error"]["kind"]),
        (&Value::Null, &json!("usage")),
        "{e}"
    );
    assert!(
        e["error"]["what"].as_str().unwrap().contains("not JSON"),
        "{e}"
    );
    // Over the 16 MiB line cap, sent in pieces: one error, the rest of the
    // line skipped, and the next line served.
    let big = vec![b'x'; 1 << 20];
    for _ in 0..17 {
        s.send_raw(&big);
    }
    s.send_raw(b"\n");
    let e = error_of(&mut s);
    assert_eq!(e["error"]["kind"], "too-large", "{e}");
    s.send(&json!({"id": 7, "verb": "frob"}));
    let e = error_of(&mut s);
    assert_eq!(
        (&e["id"], &e["error"]["kind"]),
        (&json!(7), &json!("usage")),
        "{e}"
    );
    s.send(&json!({"id": 8, "verb": "argv", "argv": []}));
    let e = error_of(&mut s);
    assert_eq!((&e["id"], &e["verb"]), (&json!(8), &json!("argv")), "{e}");
    s.send(&json!({"id": 9, "verb": "stdin", "data": "aGk=", "eof": true}));
    let e = error_of(&mut s);
    assert_eq!(
        (&e["id"], &e["error"]["kind"]),
        (&json!(9), &json!("not-found")),
        "{e}"
    );
    s.send(&json!({"id": 10, "verb": "hello", "protocol": 99}));
    let e = error_of(&mut s);
    assert_eq!(e["verb"], "hello", "{e}");
    let mut v = argv(11, &["version", "--json"]);
    v["json_stdout"] = json!(true);
    s.send(&v);
    let (_, _, exit) = s.finish(11);
    assert_eq!(exit["envelope"]["result"]["machine"], 1, "{exit}");
    assert!(s.close().success());
}

#[test]
fn closing_stdin_ends_and_reaps_what_the_server_started() {
    for who in identities() {
        let dir = TempDir::new("serve-close", who);
        let mut s = Server::start(who, dir.path());
        let server_pid = s.child.id() as i32;
        start_sleep(&mut s, 1, "9373");
        let t = Instant::now();
        assert!(s.close().success());
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "exit took {:?}",
            t.elapsed()
        );
        assert!(
            live_sleeps("9373").is_empty(),
            "the sandbox outlived the server"
        );
        let orphans: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|p: &i32| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .ok()
                    .and_then(|s| {
                        s.rsplit_once(')')?
                            .1
                            .split_whitespace()
                            .nth(1)?
                            .parse()
                            .ok()
                    })
                    == Some(server_pid)
            })
            .collect();
        assert!(
            orphans.is_empty(),
            "children of the server left: {orphans:?}"
        );
    }
}

#[test]
fn a_node_client_streams_output_and_reads_the_envelope() {
    require!(have("node"), "node (tests/setup installs it)");
    let who = caller();
    let dir = TempDir::new("serve-node", who);
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve/client.mjs");
    let mut p = Command::new("node")
        .arg(client)
        .arg(hutch_bin())
        .args([
            "--report-fd",
            "3",
            "--",
            "run",
            "--quiet",
            "--json",
            "--result-fd",
            "3",
            "--",
        ])
        .args(["sh", "-c", "cat; echo to-stderr >&2; exit 3"])
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    p.stdin
        .take()
        .unwrap()
        .write_all(b"from node's stdin\n")
        .unwrap();
    let o = p.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "from node's stdin\n");
    let exit_line = stderr
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("exit: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(stderr.starts_with("to-stderr\n"), "{stderr}");
    let exit: Value = serde_json::from_str(exit_line).unwrap();
    assert_eq!(exit["envelope"]["verb"], "run", "{exit}");
    assert_eq!(exit["envelope"]["result"]["status"], 3, "{exit}");
}

/// `hutch session --state-dir STATE ARGS` as `who`, to completion.
fn session_cli(who: As, state: &std::path::Path, args: &[&str]) -> std::process::Output {
    hutch_command(who)
        .arg("session")
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn session_run_through_serve_shares_the_session_lock_with_the_cli() {
    for who in identities() {
        let dir = TempDir::new("serve-session", who);
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        own_as(&src, who);
        write_as(&src.join("a.txt"), "base\n", who);
        let state = dir.path().join("state");
        let st = state.to_str().unwrap();
        let o = session_cli(who, &state, &["create", "--from", src.to_str().unwrap()]);
        assert!(o.status.success(), "{o:?}");
        let id = String::from_utf8(o.stdout).unwrap().trim().to_string();
        // `session run ID --quiet -- CMD` as request `n`.
        let session_run = |n: u64, cmd: &[&str]| {
            let mut args = vec!["session", "--state-dir", st, "run", &id, "--quiet", "--"];
            args.extend_from_slice(cmd);
            argv(n, &args)
        };
        let mut s = Server::start(who, dir.path());
        // A command through the server holds the session's lock while it
        // runs.
        let script = "echo kept > n.txt; echo ready; exec sleep 9373";
        s.send(&session_run(1, &["sh", "-c", script]));
        s.stdout_until(1, "ready");
        // The CLI beside it refuses with one line (or waits with --wait).
        let o = session_cli(who, &state, &["run", &id, "--", "true"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("busy"), "{err}");
        s.send(&json!({"id": 1, "verb": "cancel"}));
        let (_, _, exit) = s.finish(1);
        assert_eq!(exit["cancelled"], true, "{exit}");
        // The next command, through the CLI, sees what it wrote; then one
        // through the server again.
        let o = session_cli(who, &state, &["run", &id, "--", "cat", "n.txt"]);
        assert_eq!(String::from_utf8_lossy(&o.stdout), "kept\n", "{o:?}");
        s.send(&session_run(2, &["cat", "n.txt"]));
        let (out, _, exit) = s.finish(2);
        assert_eq!(exit["code"], 0, "{exit}");
        assert_eq!(out, "kept\n", "{exit}");
        // Closed by another process: the server's next request says so.
        let o = session_cli(who, &state, &["close", &id]);
        assert!(o.status.success(), "{o:?}");
        s.send(&session_run(3, &["true"]));
        let (_, err, exit) = s.finish(3);
        assert_eq!(exit["code"], 125, "{exit}");
        assert!(err.contains("no session"), "{err}");
        assert!(s.close().success());
    }
}

/// Children of `pid` (every thread's).
fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .flat_map(|tid| {
                    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children"))
                        .unwrap_or_default()
                        .split_whitespace()
                        .filter_map(|p| p.parse().ok())
                        .collect::<Vec<i32>>()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// While no request runs the server keeps the next request's process
/// forked ahead (docs/decisions/0007, "s7"): a request is served by a
/// process that existed before it was sent, with its stdin, output,
/// cwd, environment and envelope as a freshly forked one's; a request
/// sent while another runs forks; after them a new spare waits.
#[test]
fn a_request_is_served_by_a_process_forked_before_it() {
    for who in identities() {
        let dir = TempDir::new("serve-spare", who);
        let mut s = Server::start(who, dir.path());
        let server_pid = s.child.id() as i32;
        let mut spare = Vec::new();
        wait_until(WAIT, "the server's spare request process", || {
            spare = children_of(server_pid);
            spare.len() == 1
        });
        let comm =
            |pid: &Value| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        // Named by itself once forked: wait for it, not for a moment.
        wait_until(WAIT, "the spare to take its name", || {
            comm(&json!(spare[0])) == "hutch-spare\n"
        });
        let mut first = argv(
            1,
            &[
                "run",
                "--quiet",
                "--json",
                "--result-fd",
                "5",
                "--pass-env",
                "FROM_CLIENT",
                "--",
                "sh",
                "-c",
                "read x; echo \"got-$x $FROM_CLIENT\"; pwd >&2",
            ],
        );
        first["stdin"] = json!(true);
        first["report_fd"] = json!(5);
        first["env"] = json!({"FROM_CLIENT": "yes"});
        s.send(&first);
        let started = s.next(|e| e["id"] == 1 && e["event"] == "started");
        assert_eq!(started["pid"], spare[0], "served by the spare: {started}");
        // Named as the server again once it has its request.
        wait_until(
            WAIT,
            "the request's process to take the server's name",
            || comm(&started["pid"]) == comm(&json!(server_pid)),
        );
        // A second request while the first runs: no spare then, a fork.
        s.send(&argv(2, &["run", "--quiet", "--", "sh", "-c", "echo two"]));
        let second = s.next(|e| e["id"] == 2 && e["event"] == "started");
        assert_ne!(second["pid"], spare[0], "{second}");
        let (out2, _, exit2) = s.finish(2);
        assert_eq!(
            (out2.as_str(), &exit2["code"]),
            ("two\n", &json!(0)),
            "{exit2}"
        );
        s.send(&json!({"id": 1, "verb": "stdin", "data": "b25lCg==", "eof": true}));
        let (out1, _, exit1) = s.finish(1);
        assert_eq!(out1, "got-one yes\n", "{exit1}");
        assert_eq!(exit1["code"], 0, "{exit1}");
        assert_eq!(exit1["envelope"]["verb"], "run", "{exit1}");
        assert_eq!(exit1["envelope"]["result"]["status"], 0, "{exit1}");
        // The next spare, once nothing runs.
        wait_until(WAIT, "a new spare", || {
            let now = children_of(server_pid);
            now.len() == 1 && now[0] != spare[0]
        });
        assert!(s.close().success());
        assert!(children_of(server_pid).is_empty());
    }
}

/// Wait until the resident request process `pid` is idle: blocked in
/// `recvmsg` on its channel (fd 100 or above) for the next request, the
/// last one's reset done.
fn wait_idle(pid: &Value) {
    wait_until(
        WAIT,
        "the resident process to wait for its next request",
        || {
            let syscall =
                std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
            let mut fields = syscall.split_whitespace();
            fields.next() == Some("47")
                && fields
                    .next()
                    .and_then(|fd| i64::from_str_radix(fd.trim_start_matches("0x"), 16).ok())
                    .is_some_and(|fd| fd >= 100)
        },
    );
}

/// Descriptor targets of `pid` (`/proc/PID/fd`), by number.
fn fds_of(pid: &Value) -> Vec<(i32, String)> {
    let mut fds: Vec<(i32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| {
                let e = e.ok()?;
                let n = e.file_name().to_str()?.parse().ok()?;
                let to = std::fs::read_link(e.path()).ok()?;
                Some((n, to.to_string_lossy().into_owned()))
            })
            .collect()
        })
        .unwrap_or_default();
    fds.sort();
    fds
}

/// The session loop's verbs (`session run`, `read`, `write`, ...) are
/// served one after another by one resident process (docs/decisions/0007,
/// "s8"), each exactly as a fresh process serves it: its own descriptors,
/// stdin, environment, cwd and `--json` or not; between requests that
/// process holds none of them. A second such request while one runs gets
/// a process of its own; a cancelled one ends with its process, and the
/// next request starts a new one.
#[test]
fn the_session_loop_is_served_by_one_resident_process() {
    for who in identities() {
        let dir = TempDir::new("serve-resident", who);
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        own_as(&src, who);
        write_as(&src.join("a.txt"), "base\n", who);
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        own_as(&elsewhere, who);
        let state = dir.path().join("state");
        let st = state.to_str().unwrap().to_string();
        let o = session_cli(who, &state, &["create", "--from", src.to_str().unwrap()]);
        assert!(o.status.success(), "{o:?}");
        let id = String::from_utf8(o.stdout).unwrap().trim().to_string();
        let session = |n: u64, verb: &[&str], rest: &[&str]| {
            let mut args: Vec<&str> = vec!["session", "--state-dir", &st];
            args.extend_from_slice(verb);
            args.push(&id);
            args.extend_from_slice(rest);
            argv(n, &args)
        };
        let mut s = Server::start(who, dir.path());
        let server_pid = s.child.id() as i32;
        // 1: --json, a report descriptor, the client's environment and cwd.
        let mut first = session(
            1,
            &["--json", "run"],
            &[
                "--quiet",
                "--result-fd",
                "5",
                "--",
                "sh",
                "-c",
                "echo one; echo two > b.txt",
            ],
        );
        first["report_fd"] = json!(5);
        first["env"] = json!({"FROM_CLIENT": "yes"});
        first["cwd"] = json!(elsewhere.to_str().unwrap());
        s.send(&first);
        let runner = s.next(|e| e["id"] == 1 && e["event"] == "started")["pid"].clone();
        let (out, _, exit) = s.finish(1);
        assert_eq!(out, "one\n", "{exit}");
        assert_eq!(exit["code"], 0, "{exit}");
        assert_eq!(exit["envelope"]["verb"], "session.run", "{exit}");
        // Between requests it holds nothing of the last one: /dev/null on
        // 0-2, its channel and the server's cwd only; the server's
        // environment and cwd (put back after `done`, off the request's
        // path: looked at once it waits for the next request).
        wait_idle(&runner);
        let server_cwd = std::fs::read_link(format!("/proc/{server_pid}/cwd")).unwrap();
        let fds = fds_of(&runner);
        assert_eq!(fds.len(), 5, "{fds:?}");
        for (n, to) in &fds[..3] {
            assert_eq!((n, to.as_str()), (n, "/dev/null"), "{fds:?}");
        }
        assert!(
            fds[3].0 >= 100 && fds[3].1.starts_with("socket:"),
            "{fds:?}"
        );
        assert!(
            fds[4].0 > 100 && fds[4].1 == server_cwd.to_str().unwrap(),
            "{fds:?}"
        );
        let environ = std::fs::read(format!("/proc/{runner}/environ")).unwrap();
        assert!(
            !String::from_utf8_lossy(&environ).contains("FROM_CLIENT"),
            "the request's environment stayed"
        );
        assert_eq!(
            std::fs::read_link(format!("/proc/{runner}/cwd")).unwrap(),
            server_cwd
        );
        // 2: `read` without --json: the same process, and no envelope.
        s.send(&session(2, &["read"], &["b.txt"]));
        let started = s.next(|e| e["id"] == 2 && e["event"] == "started");
        assert_eq!(started["pid"], runner, "{started}");
        let (out, err, exit) = s.finish(2);
        assert_eq!(
            (out.as_str(), &exit["code"]),
            ("two\n", &json!(0)),
            "{err} {exit}"
        );
        assert!(exit.get("envelope").is_none_or(Value::is_null), "{exit}");
        // A write refused as too long leaves its input unread: never the
        // next request's.
        let mut long = session(30, &["write"], &["c.txt", "--max-bytes", "8"]);
        long["stdin"] = json!(true);
        s.send(&long);
        assert_eq!(
            s.next(|e| e["id"] == 30 && e["event"] == "started")["pid"],
            runner
        );
        s.send(&json!({"id": 30, "verb": "stdin", "data": "eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4Cg==", "eof": true}));
        let (_, err, exit) = s.finish(30);
        assert_ne!(exit["code"], 0, "{err} {exit}");
        // 3: `write` from the request's stdin, then `run` reads it back.
        let mut write = session(3, &["write"], &["c.txt"]);
        write["stdin"] = json!(true);
        s.send(&write);
        assert_eq!(
            s.next(|e| e["id"] == 3 && e["event"] == "started")["pid"],
            runner
        );
        s.send(&json!({"id": 3, "verb": "stdin", "data": "dGhyZWUK", "eof": true}));
        let (_, err, exit) = s.finish(3);
        assert_eq!(exit["code"], 0, "{err} {exit}");
        // 4 runs; 5, sent meanwhile, gets its own process.
        s.send(&session(
            4,
            &["run"],
            &["--quiet", "--", "sh", "-c", "echo ready; exec sleep 9374"],
        ));
        assert_eq!(
            s.next(|e| e["id"] == 4 && e["event"] == "started")["pid"],
            runner
        );
        s.stdout_until(4, "ready");
        s.send(&argv(
            5,
            &[
                "session",
                "--state-dir",
                &st,
                "--wait",
                "read",
                &id,
                "c.txt",
            ],
        ));
        let fifth = s.next(|e| e["id"] == 5 && e["event"] == "started");
        assert_ne!(fifth["pid"], runner, "{fifth}");
        // Killed: the request ends with its process, the next request
        // starts a new one.
        s.send(&json!({"id": 4, "verb": "signal", "signal": "KILL"}));
        let (_, _, exit) = s.finish(4);
        assert_eq!(exit["signal"], "KILL", "{exit}");
        let (out, err, exit) = s.finish(5);
        assert_eq!(
            (out.as_str(), &exit["code"]),
            ("three\n", &json!(0)),
            "{err} {exit}"
        );
        s.send(&session(
            6,
            &["run"],
            &["--quiet", "--", "cat", "c.txt", "b.txt"],
        ));
        let sixth = s.next(|e| e["id"] == 6 && e["event"] == "started");
        assert_ne!(sixth["pid"], runner, "{sixth}");
        let (out, err, exit) = s.finish(6);
        assert_eq!(
            (out.as_str(), &exit["code"]),
            ("three\ntwo\n", &json!(0)),
            "{err} {exit}"
        );
        // An error is a request's end like any other; the process stays.
        let mut seventh = argv(
            7,
            &[
                "session",
                "--state-dir",
                &st,
                "--json",
                "read",
                &id,
                "nope.txt",
            ],
        );
        seventh["json_stdout"] = json!(true);
        s.send(&seventh);
        assert_eq!(
            s.next(|e| e["id"] == 7 && e["event"] == "started")["pid"],
            sixth["pid"]
        );
        let (_, err, exit) = s.finish(7);
        assert_ne!(exit["code"], 0, "{exit}");
        assert_eq!(exit["envelope"]["verb"], "session.read", "{err} {exit}");
        assert_eq!(exit["envelope"]["ok"], false, "{exit}");
        // Cancelled, a session command ends its sandbox and reports
        // (TERM is forwarded to it): the process stays for the next.
        s.send(&session(
            8,
            &["run"],
            &["--quiet", "--", "sh", "-c", "echo ready; exec sleep 9374"],
        ));
        assert_eq!(
            s.next(|e| e["id"] == 8 && e["event"] == "started")["pid"],
            sixth["pid"]
        );
        s.stdout_until(8, "ready");
        s.send(&json!({"id": 8, "verb": "cancel"}));
        let (_, _, exit) = s.finish(8);
        assert_eq!(exit["cancelled"], true, "{exit}");
        s.send(&session(9, &["run"], &["--quiet", "--", "cat", "c.txt"]));
        let (out, err, exit) = s.finish(9);
        assert_eq!(
            (out.as_str(), &exit["code"]),
            ("three\n", &json!(0)),
            "{err} {exit}"
        );
        assert!(s.close().success());
        assert!(children_of(server_pid).is_empty());
    }
}
