//! Nothing a run creates on the host outlives a SIGKILL of `hutch run` at
//! any moment of its setup: in proxy mode (two doors, a policy engine) as
//! root and as uid 65534, 50 kills at random moments of the first 80 ms
//! leave the temp directories hutch would use empty.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn random_ms(below: u64) -> u64 {
    let mut b = [0u8; 8];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut b).unwrap();
    u64::from_le_bytes(b) % below
}

#[test]
fn sigkill_during_a_proxy_mode_launch_leaves_nothing_in_the_temp_dir() {
    for who in identities() {
        let tmp = TempDir::new("sigkill-tmp", who);
        let runtime = TempDir::new("sigkill-runtime", who);
        let ws = TempDir::new("sigkill-ws", who);
        let marker = format!(
            "{}",
            600_000 + std::process::id() % 90_000 + if who == As::Root { 0 } else { 1 }
        );
        for i in 0..50 {
            let mut cmd = hutch_command(who);
            let mut child = cmd
                .args([
                    "run",
                    "--quiet",
                    "--allow-host",
                    "example.test",
                    "--",
                    "sleep",
                    &marker,
                ])
                .current_dir(ws.path())
                .env("TMPDIR", tmp.path())
                .env("XDG_RUNTIME_DIR", tmp.path())
                // The registry's records (`hutch ps`) have a directory of
                // their own, checked below.
                .env("HUTCH_RUNTIME_DIR", runtime.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(random_ms(80)));
            // setpriv execs hutch, so the pid is hutch's either way.
            let _ = child.kill();
            child.wait().unwrap();
            let _ = i;
        }
        // The sandboxes die with their supervisor (PDEATHSIG); wait for
        // that, with a deadline.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = Command::new("pgrep")
                .args(["-f", &format!("sleep {marker}")])
                .output()
                .unwrap();
            if stdout(&left).trim().is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{who:?}: sandboxes outlived their supervisor: {}",
                stdout(&left)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{who:?}: left in the temp dir: {left:?}");
        // The records of the killed supervisors are stale: the next
        // `hutch ps` recognises and removes them, and lists none as live.
        let mut ps = hutch_command(who);
        let out = ps
            .args(["ps", "--json"])
            .env("HUTCH_RUNTIME_DIR", runtime.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{who:?}: hutch ps: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let live: Vec<_> = v["result"]["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["state"] != "stale")
            .collect();
        assert!(live.is_empty(), "{who:?}: live after the kills: {live:?}");
        let records: Vec<_> = std::fs::read_dir(runtime.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| !n.to_string_lossy().starts_with(".tmp-"))
            .collect();
        assert!(
            records.is_empty(),
            "{who:?}: left in the runtime dir: {records:?}"
        );
    }
}
