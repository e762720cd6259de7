//! The wall clock and forwarded signals hold whatever the caller does with
//! hutch's stdout: a reader that comes late, one that never reads (a pipe
//! or a FIFO held open), as root and as uid 65534.

mod common;

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn hutch_cmd(who: As, cwd: &Path, args: &[&str]) -> Command {
    let mut cmd = hutch_command(who);
    cmd.args(args).current_dir(cwd).stdin(Stdio::null());
    cmd
}

/// Wait for `child` to exit, at most `limit`; kill it after that (so a
/// failing test leaves nothing behind) and return None.
fn exit_within(child: &mut Child, limit: Duration) -> Option<(ExitStatus, Duration)> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some((status, start.elapsed()));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--timeout 2s` with a reader that only starts reading 6 s later: the
/// sandbox is killed at the limit and hutch is gone long before the reader
/// wakes up.
#[test]
fn a_late_reader_does_not_stretch_the_timeout() {
    for who in identities() {
        let ws = TempDir::new("late-reader", who);
        let mut child = hutch_cmd(
            who,
            ws.path(),
            &[
                "run",
                "--quiet",
                "--timeout",
                "2s",
                "--output-limit",
                "10M",
                "--",
                "yes",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let started = Instant::now();
        // Nobody reads stdout for 6 s.
        let ended = exit_within(&mut child, Duration::from_secs(6));
        let (status, _) = ended
            .unwrap_or_else(|| panic!("{who:?}: hutch was still running 6 s into a 2 s timeout"));
        let took = started.elapsed();
        assert_eq!(status.code(), Some(124), "{who:?}: {status:?}");
        assert!(
            took < Duration::from_secs(5),
            "{who:?}: ended after {took:?}"
        );
        // What the pipe held is still there for the late reader.
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        assert!(out.starts_with(b"y\ny\n"), "{who:?}");
    }
}

/// stdout is a FIFO whose reader holds it open and never reads.
#[test]
fn a_fifo_nobody_reads_ends_at_the_timeout() {
    for who in identities() {
        let dir = TempDir::new("fifo", who);
        let fifo = dir.path().join("out.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        // The reader end, opened first (non-blocking) and never read.
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        let mut child = hutch_cmd(
            who,
            dir.path(),
            &[
                "run",
                "--quiet",
                "--timeout",
                "2s",
                "--output-limit",
                "10M",
                "--",
                "yes",
            ],
        )
        .stdout(writer)
        .spawn()
        .unwrap();
        let (status, took) = exit_within(&mut child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{who:?}: hutch ignored its 2 s timeout for 20 s"));
        assert_eq!(status.code(), Some(124), "{who:?}");
        assert!(
            took < Duration::from_secs(5),
            "{who:?}: ended after {took:?}"
        );
    }
}

/// SIGTERM to hutch while its stdout is stalled reaches the workload, and
/// hutch ends with it.
#[test]
fn sigterm_is_forwarded_while_stdout_is_stalled() {
    for who in identities() {
        let dir = TempDir::new("stalled-term", who);
        let status_file = dir.path().join("status.jsonl");
        let mut child = hutch_cmd(
            who,
            dir.path(),
            &[
                "run",
                "--quiet",
                "--timeout",
                "60s",
                "--output-limit",
                "10M",
                "--status-file",
                status_file.to_str().unwrap(),
                "--",
                "yes",
            ],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
        // Readiness: the start event (the workload has exec'd).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&status_file).is_ok_and(|t| t.contains("\"start\"")) {
            assert!(Instant::now() < deadline, "{who:?}: no start event");
            std::thread::sleep(Duration::from_millis(20));
        }
        // stdout is a pipe nobody reads: `yes` fills it within moments.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let (status, took) = exit_within(&mut child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{who:?}: SIGTERM was ignored for 20 s"));
        assert_eq!(
            (status.code(), status.signal()),
            (Some(128 + 15), None),
            "{who:?}: the workload died of the forwarded SIGTERM"
        );
        assert!(
            took < Duration::from_secs(5),
            "{who:?}: ended after {took:?}"
        );
        let report = exit_report(&status_file);
        assert_eq!(report["reason"], "signaled", "{report}");
    }
}

/// With the relay on (an output cap) and stdout a regular file, every byte
/// up to the cap arrives, the last ones included.
#[test]
fn relayed_output_to_a_file_arrives_whole() {
    for who in identities() {
        let dir = TempDir::new("relay-file", who);
        for _ in 0..5 {
            let path = dir.path().join("out.bin");
            let file = std::fs::File::create(&path).unwrap();
            own_as(&path, who);
            let status = hutch_cmd(
                who,
                dir.path(),
                &[
                    "run",
                    "--quiet",
                    "--output-limit",
                    "10M",
                    "--",
                    "sh",
                    "-c",
                    "head -c 3000000 /dev/zero",
                ],
            )
            .stdout(file)
            .status()
            .unwrap();
            assert_eq!(status.code(), Some(0), "{who:?}");
            assert_eq!(
                std::fs::metadata(&path).unwrap().len(),
                3_000_000,
                "{who:?}"
            );
        }
    }
}
