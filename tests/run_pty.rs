//! `hutch run --pty` / `hutch session run --pty`: the workload on a
//! terminal of the sandbox's own devpts, as root and as uid 65534.
//!
//! With a terminal as hutch's stdin (a pty this test opens, as a user's
//! terminal would be): the workload's stdio are a terminal, it is the
//! sandbox's (not the host's devpts), its size is the caller's and follows
//! a resize (TIOCSWINSZ + SIGWINCH to hutch), input is answered, ^C
//! interrupts the foreground job, the exit code comes back, TIOCSTI is
//! refused and the caller's terminal leaves raw mode. With pipes:
//! `--pty-size`, stdin's end as ^D. Refusals exit 125 before anything
//! starts.

mod common;

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios;

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// The script the sandbox runs: everything a test below checks, each
/// step after a marker the test waits for. The foreground job prints
/// SLEEPING once it runs with SIGINT's default action (a ^C between the
/// shell's fork and its exec would be caught by the shell's own trap).
const SCRIPT: &str = r#"
tty
test -t 0 -a -t 1 -a -t 2 && echo STDIO-ARE-TTYS
echo "DEVPTS=$(stat -c %d /dev/pts) PTS=$(ls /dev/pts | tr '\n' ,)"
python3 -c '
import fcntl, termios
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x")
    print("TIOCSTI-ALLOWED")
except OSError as e:
    print("TIOCSTI-REFUSED", e.errno)
'
(: < "$HOST_PTY") 2>/dev/null && echo HOST-PTY-OPENED
echo "SIZE1=$(stty size)"
read go
echo "SIZE2=$(stty size)"
printf 'NAME? '
read name
echo "HELLO=$name"
trap 'echo INTERRUPTED; exit 42' INT
sh -c 'echo SLEEPING; exec sleep 1000'
echo NOT-INTERRUPTED
"#;

fn set_size(fd: impl AsFd, cols: u16, rows: u16) {
    let ws = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    nix::ioctl_write_ptr_bad!(tiocswinsz, libc::TIOCSWINSZ, nix::pty::Winsize);
    // SAFETY: TIOCSWINSZ reads a valid winsize.
    unsafe { tiocswinsz(fd.as_fd().as_raw_fd(), &ws) }.expect("TIOCSWINSZ");
}

/// Read the master until `text` has come (or fail after the deadline,
/// showing what came).
fn read_until(master: &OwnedFd, seen: &mut Vec<u8>, text: &str, deadline: Instant) {
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(seen).contains(text) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out waiting for {text:?}; the terminal showed:\n{}",
            String::from_utf8_lossy(seen)
        );
        let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(left.as_millis().min(1000) as i32).unwrap();
        if poll(&mut fds, ms).unwrap() == 0 {
            continue;
        }
        match nix::unistd::read(master, &mut buf) {
            Ok(0) | Err(_) => panic!(
                "the terminal closed before {text:?}:\n{}",
                String::from_utf8_lossy(seen)
            ),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

fn wait_exit(child: &mut Child, deadline: Instant) -> std::process::ExitStatus {
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hutch did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value after `key=` on its line.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    let at = text
        .match_indices(&format!("{key}="))
        .map(|(at, _)| at)
        .find(|&at| at == 0 || !text.as_bytes()[at - 1].is_ascii_alphabetic())
        .unwrap_or_else(|| panic!("no {key}= in:\n{text}"));
    text[at + key.len() + 1..]
        .split(['\r', '\n', ' '])
        .next()
        .unwrap()
}

#[test]
fn a_terminal_of_the_sandboxs_own_devpts_with_resize_input_and_ctrl_c() {
    require!(have("python3"), "python3 (the TIOCSTI probe)");
    for who in identities() {
        let ws = TempDir::new("pty", who);
        // The caller's terminal is not the host's first pty (the
        // sandbox's own first one is /dev/pts/0 in its devpts).
        let _first = nix::pty::openpty(None, None).unwrap();
        let pty = nix::pty::openpty(None, None).unwrap();
        let host_pty =
            std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
        if who.drops_to_nobody() {
            nix::unistd::fchown(&pty.slave, Some(NOBODY.into()), None).unwrap();
        }
        set_size(&pty.master, 100, 30);
        let before = termios::tcgetattr(&pty.slave).unwrap();
        let stdio = || Stdio::from(pty.slave.try_clone().unwrap());
        let mut child = hutch_command(who)
            .args(["run", "--quiet", "--pty", "--setenv", "HOST_PTY"])
            .arg(&host_pty)
            .args(["--", "sh", "-c", SCRIPT])
            .current_dir(ws.path())
            .stdin(stdio())
            .stdout(stdio())
            .stderr(stdio())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + LIMIT;
        let mut seen = Vec::new();
        read_until(&pty.master, &mut seen, "SIZE1=", deadline);
        read_until(&pty.master, &mut seen, "\n", deadline);
        let text = String::from_utf8_lossy(&seen).into_owned();
        assert!(text.contains("/dev/pts/0"), "{who:?}: tty:\n{text}");
        assert!(text.contains("STDIO-ARE-TTYS"), "{who:?}:\n{text}");
        let host_devpts = std::fs::metadata("/dev/pts").unwrap().dev();
        let inner: u64 = field(&text, "DEVPTS").parse().unwrap();
        assert_ne!(inner, host_devpts, "{who:?}: the host's devpts:\n{text}");
        assert_eq!(field(&text, "PTS"), "0,ptmx,", "{who:?}:\n{text}");
        assert!(text.contains("TIOCSTI-REFUSED"), "{who:?}:\n{text}");
        assert!(!text.contains("HOST-PTY-OPENED"), "{who:?}: {host_pty:?}");
        assert!(
            text.contains("SIZE1=30 100"),
            "{who:?}: initial size:\n{text}"
        );

        // Resize the caller's terminal, tell hutch, then answer.
        set_size(&pty.master, 132, 40);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::SIGWINCH,
        )
        .unwrap();
        let mut master = std::fs::File::from(pty.master.try_clone().unwrap());
        master.write_all(b"go\r").unwrap();
        read_until(&pty.master, &mut seen, "NAME? ", deadline);
        assert!(
            String::from_utf8_lossy(&seen).contains("SIZE2=40 132"),
            "{who:?}: resized:\n{}",
            String::from_utf8_lossy(&seen)
        );
        master.write_all(b"hutch\r").unwrap();
        read_until(&pty.master, &mut seen, "HELLO=hutch", deadline);
        read_until(&pty.master, &mut seen, "SLEEPING", deadline);
        master.write_all(b"\x03").unwrap();
        read_until(&pty.master, &mut seen, "INTERRUPTED", deadline);
        let status = wait_exit(&mut child, deadline);
        assert_eq!(status.code(), Some(42), "{who:?}: exit code");
        let text = String::from_utf8_lossy(&seen);
        assert!(!text.contains("NOT-INTERRUPTED"), "{who:?}:\n{text}");
        // The caller's terminal is as it was (hutch made it raw).
        let after = termios::tcgetattr(&pty.slave).unwrap();
        assert_eq!(
            (after.local_flags, after.input_flags, after.output_flags),
            (before.local_flags, before.input_flags, before.output_flags),
            "{who:?}: the caller's terminal mode was not restored"
        );
    }
}

#[test]
fn with_pipes_the_size_is_pty_size_and_stdin_ends_as_eof() {
    for who in identities() {
        let ws = TempDir::new("pty-pipes", who);
        let mut child = hutch_command(who)
            .args(["run", "--quiet", "--pty", "--pty-size", "90x20", "--"])
            .args([
                "sh",
                "-c",
                "stty size; read a; echo a=$a; cat; echo CAT-ENDED; exit 5",
            ])
            .current_dir(ws.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"answer\nmore\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let text = stdout(&out);
        assert_eq!(
            out.status.code(),
            Some(5),
            "{who:?}: {text} {}",
            stderr(&out)
        );
        assert!(text.contains("20 90\r\n"), "{who:?}: {text:?}");
        assert!(text.contains("a=answer\r\n"), "{who:?}: {text:?}");
        assert!(text.contains("CAT-ENDED"), "{who:?}: {text:?}");
        // One stream: nothing of the workload's on hutch's stderr.
        assert_eq!(stderr(&out), "", "{who:?}");
    }
}

#[test]
fn session_run_pty_runs_on_a_terminal() {
    let who = caller();
    let ws = TempDir::new("pty-session", who);
    let state = TempDir::new("pty-state", who);
    let hutch = |args: &[&str]| {
        let mut c = hutch_command(who);
        c.env("HUTCH_STATE_DIR", state.path())
            .args(args)
            .current_dir(ws.path());
        c
    };
    let out = hutch(&["session", "create", "--from", ws.path().to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    let out = hutch(&["session", "run", &id, "--pty", "--pty-size", "70x10", "--"])
        .args(["sh", "-c", "tty; stty size; test -t 0 && echo TTY; exit 3"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(3), "{text} {}", stderr(&out));
    assert!(text.contains("/dev/pts/0\r\n10 70\r\nTTY\r\n"), "{text:?}");
    let _ = hutch(&["session", "close", &id])
        .stdin(Stdio::null())
        .output();
}

#[test]
fn pty_refusals_exit_125_before_anything_starts() {
    let who = caller();
    let ws = TempDir::new("pty-refused", who);
    for (args, says) in [
        (&["--pty", "--dev-bind", "/dev", "/dev"][..], "devpts"),
        (&["--pty", "--pty-size", "0x24"], "COLSxROWS"),
        (&["--pty-size", "80x24"], "needs --pty"),
    ] {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "touch", "started"]);
        let out = hutch_as(who, ws.path(), &all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!ws.path().join("started").exists(), "{args:?}");
    }
}

/// `hutch serve`: an `argv` request with `"pty": true` and a `resize`
/// (the protocol the Python package and other clients speak).
#[test]
fn serve_pty_requests_resize_and_end_input_with_eof() {
    use base64::Engine;
    use std::io::{BufRead, BufReader};
    let b64 = base64::engine::general_purpose::STANDARD;
    for who in identities() {
        let ws = TempDir::new("pty-serve", who);
        let mut server = hutch_command(who)
            .arg("serve")
            .current_dir(ws.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = server.stdin.take().unwrap();
        let (tx, events) = std::sync::mpsc::channel::<serde_json::Value>();
        let out = server.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + LIMIT;
        let next = || {
            events
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("a serve event in time")
        };
        let hello = next();
        let features = hello["features"].as_array().unwrap();
        assert!(features.contains(&"pty".into()) && features.contains(&"resize".into()));
        let mut send = |v: serde_json::Value| {
            input.write_all(format!("{v}\n").as_bytes()).unwrap();
        };
        let script = "stty size; read a; stty size; echo a=$a; cat; echo CAT-ENDED; exit 6";
        send(serde_json::json!({
            "id": 1, "verb": "argv", "pty": true, "pty_size": [91, 21],
            "argv": ["run", "--quiet", "--pty", "--", "sh", "-c", script],
        }));
        let mut text = String::new();
        let mut until = |want: &str| {
            while !text.contains(want) {
                let e = next();
                match e["event"].as_str() {
                    Some("stdout") => text.push_str(&String::from_utf8_lossy(
                        &b64.decode(e["data"].as_str().unwrap()).unwrap(),
                    )),
                    Some("exit") => return (text.clone(), Some(e)),
                    _ => {}
                }
            }
            (text.clone(), None)
        };
        let (seen, _) = until("21 91\r\n");
        assert!(seen.starts_with("21 91"), "{who:?}: {seen:?}");
        send(serde_json::json!({"id": 1, "verb": "resize", "cols": 101, "rows": 31}));
        send(serde_json::json!({"id": 1, "verb": "stdin", "data": b64.encode("x\r")}));
        let (seen, _) = until("a=x\r\n");
        assert!(seen.contains("31 101\r\na=x"), "{who:?}: resized: {seen:?}");
        // The last line and the end of input in one message: both arrive.
        send(
            serde_json::json!({"id": 1, "verb": "stdin", "data": b64.encode("last\r"), "eof": true}),
        );
        let (seen, exit) = until("never printed");
        assert!(seen.contains("last\r\nCAT-ENDED"), "{who:?}: {seen:?}");
        assert_eq!(exit.unwrap()["code"], 6, "{who:?}");
        // A request without a terminal cannot be resized.
        send(
            serde_json::json!({"id": 2, "verb": "argv", "argv": ["run", "--quiet", "--", "sh", "-c", "echo up; read x"], "stdin": true}),
        );
        loop {
            let e = next();
            if e["event"] == "stdout" {
                break;
            }
        }
        send(serde_json::json!({"id": 2, "verb": "resize", "cols": 10, "rows": 10}));
        let err = loop {
            let e = next();
            if e["event"] == "error" {
                break e;
            }
        };
        assert_eq!(err["error"]["kind"], "usage", "{err}");
        drop(input);
        assert!(server.wait().unwrap().success());
    }
}
