//! `hutch session create --warm N` / `session warm`: a session's commands
//! served from ready sandboxes, as root and on the unprivileged path.

mod common;
mod session_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use common::{wait_for_event, wait_until};
use session_support::*;

fn setup(t: &Tmp, unprivileged: bool, extra: &[&str]) -> Result<(PathBuf, String)> {
    let src = t.0.join("src");
    std::fs::create_dir_all(&src)?;
    std::fs::write(src.join("log"), "")?;
    let state = state_dir(t, unprivileged)?;
    let mut args = vec!["create", "--from", src.to_str().unwrap()];
    args.extend(extra);
    let id = ok(&hutch(&state, &args, unprivileged))?;
    Ok((state, id.trim().to_string()))
}

/// The report of the last command (`--status-file`).
fn report(status: &Path) -> serde_json::Value {
    common::exit_report(status)
}

/// Processes whose command line holds all of `words`.
fn processes_with(words: &[&str]) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            words.iter().all(|w| args.contains(&w.as_bytes()))
        })
        .collect()
}

fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Alive and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

fn server_of(id: &str) -> Vec<i32> {
    processes_with(&["__session-warm", id])
}

/// What one command sees of what the last one left, then what it leaves
/// for the next: a file in /tmp and /dev/shm, a SysV shm segment, an
/// abstract socket held by a daemon in a session of its own, and one more
/// line in the workspace.
const PROBE: &str = r#"echo "pid $$"
echo "procs" /proc/[0-9]*
echo "tmp $(ls -A /tmp | tr '\n' ' ')"
echo "shm $(ls -A /dev/shm | tr '\n' ' ')"
echo "sysv $(tail -n +2 /proc/sysvipc/shm | wc -l) $(tail -n +2 /proc/sysvipc/msg | wc -l) $(tail -n +2 /proc/sysvipc/sem | wc -l)"
echo "abstract $(grep -c ' @' /proc/net/unix)"
echo "count $(wc -l < log)"
echo "stack $(grep -F '[stack]' /proc/self/maps | cut -d' ' -f1)"
touch /tmp/left-behind
: > /dev/shm/left-behind
ipcmk -M 4096 > /dev/null
setsid python3 -c 'import socket, time; s = socket.socket(socket.AF_UNIX); s.bind("\0hutch-left"); s.listen(); open("/tmp/bound", "w"); time.sleep(1000)' < /dev/null > /dev/null 2>&1 &
while [ ! -e /tmp/bound ]; do :; done
echo "abstract-now $(grep -c ' @' /proc/net/unix)"
echo line >> log"#;

/// The sandbox whose `start` event is first in `status` still exists:
/// its pid 1 lives, in the mount namespace the event names.
fn sandbox_alive(status: &Path) -> bool {
    let start = common::wait_for_event(status, "start", Duration::from_secs(5));
    let pid = start["pid"].as_i64().unwrap();
    let mnt = start["namespaces"]["mnt"].as_u64().unwrap();
    alive(pid as i32)
        && std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
            .is_ok_and(|l| l.to_string_lossy() == format!("mnt:[{mnt}]"))
}

/// 200 commands through the warm server: each warm, in a fresh pid
/// namespace with nothing left by the previous one, with a fresh /tmp
/// and a fresh execve, and the workspace carried over exactly as without
/// a server, all in the pool's resident sandboxes (no sandbox built per
/// command). A report may come back while the sandbox's overlay is still
/// being torn down, but only while the session's upper lock is held for
/// it (the next command waits for it): the workspace is never mounted by
/// two overlays at once.
#[test]
fn two_hundred_session_commands_run_warm_and_share_only_the_workspace() -> Result<()> {
    for who in common::identities() {
        let unprivileged = who == As::Nobody;
        crate::require!(can_sandbox(), "cannot sandbox here");
        crate::require!(
            common::have("python3") && common::have("ipcmk"),
            "python3 and ipcmk are needed"
        );
        let t = Tmp::new("warm-session");
        let (state, id) = setup(&t, unprivileged, &["--warm", "2"])?;
        assert_eq!(server_of(&id).len(), 1, "create --warm started the server");
        let status = t.0.join("status");
        let status_arg = status.to_str().unwrap();
        let mut stacks = std::collections::BTreeSet::new();
        let mut sandboxes = std::collections::BTreeSet::new();
        let mut ending = 0;
        const N: usize = 200;
        for i in 0..N {
            let out = ok(&hutch(
                &state,
                &[
                    "run",
                    &id,
                    "--status-file",
                    status_arg,
                    "--",
                    "sh",
                    "-c",
                    PROBE,
                ],
                unprivileged,
            ))?;
            // Read in this order, a lock no longer held means the
            // sandbox was gone first (its supervisor lets go after).
            let (held, _) = flocks_on(&state.join(&id).join("upper.lock"));
            if held == 0 {
                assert!(
                    !sandbox_alive(&status),
                    "#{i}: the sandbox outlived the upper lock"
                );
            } else {
                ending += 1;
            }
            let r = report(&status);
            assert_eq!(r["warm"], true, "#{i} ({unprivileged}): {r}");
            sandboxes.insert(r["sandbox_id"].as_str().unwrap_or_default().to_string());
            // The session's upper holds every command's changes: the
            // report does not count them (that would cost O(all of them)).
            assert!(
                r["changes"].as_array().is_none_or(|c| c.is_empty()),
                "#{i}: {r}"
            );
            let line = |key: &str| -> String {
                out.lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
                    .unwrap_or_else(|| panic!("#{i}: no {key:?} in {out}"))
                    .trim()
                    .to_string()
            };
            assert_eq!(line("pid"), "2", "#{i}");
            assert_eq!(line("procs"), "/proc/1 /proc/2", "#{i}");
            assert_eq!(line("tmp"), "", "#{i}");
            assert_eq!(line("shm"), "", "#{i}");
            assert_eq!(line("sysv"), "0 0 0", "#{i}");
            assert_eq!(line("abstract"), "0", "#{i}");
            assert_eq!(line("abstract-now"), "1", "#{i}: the probe works");
            assert_eq!(line("count"), i.to_string(), "#{i}");
            stacks.insert(line("stack"));
        }
        assert_eq!(stacks.len(), N, "ASLR bases repeat");
        // Resident sandboxes (docs/warm.md): the commands were served by
        // the pool's two sandboxes, each command in a per-command init of
        // its own, not by a sandbox built per command.
        assert!(
            sandboxes.len() <= 2,
            "{} sandboxes for {N} commands ({unprivileged})",
            sandboxes.len()
        );
        println!("{ending} of {N} reports came back before their sandbox's end ({unprivileged})");
        let log = ok(&hutch(&state, &["read", &id, "log"], unprivileged))?;
        assert_eq!(log.lines().count(), N);
        let show: serde_json::Value =
            serde_json::from_str(&ok(&hutch(&state, &["--json", "show", &id], unprivileged))?)?;
        assert_eq!(show["result"]["commands_run"], N as u64, "{show}");
        ok(&hutch(&state, &["close", &id], unprivileged))?;
        // close stops the server and every sandbox with it.
        assert_eq!(server_of(&id), Vec::<i32>::new());
    }
    Ok(())
}

/// Options that change the sandbox are served cold (the report says so);
/// the command's own options (timeout, environment) stay warm.
#[test]
fn a_command_that_changes_the_sandbox_runs_cold() -> Result<()> {
    for who in common::identities() {
        let unprivileged = who == As::Nobody;
        crate::require!(can_sandbox(), "cannot sandbox here");
        let t = Tmp::new("warm-shape");
        let (state, id) = setup(&t, unprivileged, &["--warm", "1"])?;
        let status = t.0.join("status");
        let s = status.to_str().unwrap();
        let run = |opts: &[&str]| -> Result<serde_json::Value> {
            let mut args = vec!["run", &id, "--status-file", s];
            args.extend(opts);
            args.extend(["--", "sh", "-c", "test -d /mnt/etc-copy || test \"$X\" = 1"]);
            ok(&hutch(&state, &args, unprivileged))?;
            Ok(report(&status))
        };
        assert_eq!(
            run(&["--timeout", "30s", "--setenv", "X", "1"])?["warm"],
            true
        );
        assert_eq!(run(&["--ro-bind", "/etc", "/mnt/etc-copy"])?["warm"], false);
        assert_eq!(run(&["--share-net", "--setenv", "X", "1"])?["warm"], false);
        // Another limit: another sandbox.
        let limited = run(&["--pids", "64", "--setenv", "X", "1"])?;
        assert_eq!(limited["warm"], false, "{limited}");
        let pids = limited["enforced"]["limits"]["enforced"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["limit"] == "pids");
        assert_eq!(pids.map(|p| &p["value"]), Some(&64.into()), "{limited}");
        assert_eq!(run(&["--setenv", "X", "1"])?["warm"], true);
        // `warm --ready` waits for the refill after that command.
        let ready: serde_json::Value = serde_json::from_str(&ok(&hutch(
            &state,
            &["warm", &id, "--ready"],
            unprivileged,
        ))?)?;
        assert_eq!(
            ready,
            serde_json::json!({"size": 1, "ready": 1, "warming": 0, "claimed": 0})
        );
        ok(&hutch(&state, &["close", &id], unprivileged))?;
        // Without a server it fails with one line.
        let t2 = Tmp::new("warm-ready-none");
        let (state2, id2) = setup(&t2, unprivileged, &[])?;
        let o = hutch(&state2, &["warm", &id2, "--ready"], unprivileged);
        assert_eq!(o.status.code(), Some(125));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("has no warm server"),
            "{o:?}"
        );
        ok(&hutch(&state2, &["close", &id2], unprivileged))?;
    }
    Ok(())
}

/// SIGKILL of the server mid-command ends the command (reported killed)
/// and leaves no process, cgroup leaf, mount or listening socket behind;
/// later commands launch cold.
#[test]
fn killing_the_server_ends_its_command_and_leaves_nothing() -> Result<()> {
    for who in common::identities() {
        let unprivileged = who == As::Nobody;
        crate::require!(can_sandbox(), "cannot sandbox here");
        let t = Tmp::new("warm-kill");
        let (state, id) = setup(&t, unprivileged, &["--warm", "2"])?;
        let status = t.0.join("status");
        let s = status.to_str().unwrap();
        let child = hutch_command(
            &state,
            &[
                "run",
                &id,
                "--status-file",
                s,
                "--",
                "sh",
                "-c",
                "sleep 4711 & sleep 4711",
            ],
            unprivileged,
        )
        .spawn()?;
        wait_for_event(&status, "start", Duration::from_secs(30));
        let servers = server_of(&id);
        assert_eq!(servers.len(), 1);
        let helpers = children(servers[0]);
        assert_eq!(helpers.len(), 2, "the claimed helper and a refill");
        let sandbox_id = std::fs::read_to_string(&status)?
            .lines()
            .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .and_then(|v| v["sandbox_id"].as_str().map(str::to_string))
            .expect("the start event names the sandbox");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(servers[0]),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        let out = child.wait_with_output()?;
        let r = report(&status);
        assert_eq!(out.status.code(), Some(137), "{r}");
        assert_eq!(r["reason"], "killed", "{r}");
        assert_eq!(r["warm"], true, "{r}");
        wait_until(Duration::from_secs(10), "every sandbox to end", || {
            processes_with(&["sleep", "4711"]).is_empty() && helpers.iter().all(|p| !alive(*p))
        });
        assert!(
            !Path::new("/sys/fs/cgroup").join(&sandbox_id).exists(),
            "no cgroup leaf is left"
        );
        // The sandboxes' mounts were in their own namespaces only: none of
        // the session's directories is mounted here.
        let here = t.0.to_str().unwrap();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
        assert!(!mounts.contains(here), "{mounts}");
        // Nothing listens on the server's socket any more.
        let refused = std::os::unix::net::UnixStream::connect(state.join(&id).join("warm.sock"));
        assert_eq!(
            refused.map_err(|e| e.raw_os_error()).err(),
            Some(Some(libc::ECONNREFUSED))
        );
        ok(&hutch(
            &state,
            &["run", &id, "--status-file", s, "--", "true"],
            unprivileged,
        ))?;
        assert_eq!(report(&status)["warm"], false);
        ok(&hutch(&state, &["close", &id], unprivileged))?;
    }
    Ok(())
}

/// A ready sandbox whose helper was killed (with the sandbox) is never
/// handed to a command: the server's pool drops it and builds another,
/// and the next command runs warm. (It used to stay "ready": `warm
/// --ready` said settled at once, and the next command took it and failed
/// with `sending the claim: Broken pipe`.)
#[test]
fn a_killed_ready_sandbox_is_replaced_not_handed_out() -> Result<()> {
    for who in common::identities() {
        let unprivileged = who == As::Nobody;
        crate::require!(can_sandbox(), "cannot sandbox here");
        let t = Tmp::new("warm-killed-helper");
        let (state, id) = setup(&t, unprivileged, &["--warm", "2"])?;
        let status = t.0.join("status");
        let s = status.to_str().unwrap();
        ok(&hutch(&state, &["warm", &id, "--ready"], unprivileged))?;
        let servers = server_of(&id);
        assert_eq!(servers.len(), 1);
        let helpers = children(servers[0]);
        assert_eq!(helpers.len(), 2, "two ready sandboxes: {helpers:?}");
        for &helper in &helpers {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(helper),
                nix::sys::signal::Signal::SIGKILL,
            )?;
        }
        wait_until(Duration::from_secs(10), "the killed helpers to die", || {
            helpers.iter().all(|p| !alive(*p))
        });
        let ready: serde_json::Value = serde_json::from_str(&ok(&hutch(
            &state,
            &["warm", &id, "--ready"],
            unprivileged,
        ))?)?;
        assert_eq!(ready["ready"], 2, "{ready}");
        let now = children(servers[0]);
        assert!(
            now.iter().all(|p| !helpers.contains(p)),
            "ready again with new sandboxes only: {now:?} (killed {helpers:?})"
        );
        ok(&hutch(
            &state,
            &["run", &id, "--status-file", s, "--", "true"],
            unprivileged,
        ))?;
        let r = report(&status);
        assert_eq!(
            (r["warm"].clone(), r["status"].clone()),
            (true.into(), 0.into()),
            "{r}"
        );
        ok(&hutch(&state, &["close", &id], unprivileged))?;
    }
    Ok(())
}

/// The idle timeout stops the server and removes its socket; `session
/// warm` starts one for an existing session.
#[test]
fn the_idle_timeout_stops_the_server() -> Result<()> {
    for who in common::identities() {
        let unprivileged = who == As::Nobody;
        crate::require!(can_sandbox(), "cannot sandbox here");
        let t = Tmp::new("warm-idle");
        let (state, id) = setup(&t, unprivileged, &[])?;
        assert!(server_of(&id).is_empty());
        ok(&hutch(
            &state,
            &["warm", &id, "1", "--warm-idle", "1s"],
            unprivileged,
        ))?;
        let servers = server_of(&id);
        assert_eq!(servers.len(), 1);
        let helpers = children(servers[0]);
        assert_eq!(helpers.len(), 1);
        let socket = state.join(&id).join("warm.sock");
        wait_until(Duration::from_secs(20), "the idle server to stop", || {
            server_of(&id).is_empty() && !socket.exists()
        });
        wait_until(Duration::from_secs(10), "its sandbox to end", || {
            helpers.iter().all(|p| !alive(*p))
        });
        ok(&hutch(&state, &["close", &id], unprivileged))?;
    }
    Ok(())
}

/// While the session's upper lock is held (by the supervisor of a warm
/// command whose report is out and whose sandbox is still ending), the
/// next operation on the session's upper waits for it, and goes on once
/// it is let go.
#[test]
fn the_next_operation_waits_for_the_last_sandbox_to_end() -> Result<()> {
    use std::os::fd::AsRawFd;
    for who in common::identities() {
        let unprivileged = who == As::Nobody;
        crate::require!(can_sandbox(), "cannot sandbox here");
        let t = Tmp::new("warm-upper-lock");
        let (state, id) = setup(&t, unprivileged, &["--warm", "1"])?;
        ok(&hutch(
            &state,
            &["run", &id, "--", "sh", "-c", "echo a > a"],
            unprivileged,
        ))?;
        let lock_path = state.join(&id).join("upper.lock");
        for op in [&["run", &id, "--", "cat", "a"][..], &["diff", &id][..]] {
            // Held as an ending sandbox's supervisor holds it.
            let lock = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&lock_path)?;
            // SAFETY: flock on an fd this test owns.
            assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
            let mut child = hutch_command(&state, op, unprivileged)
                .stdout(std::process::Stdio::piped())
                .spawn()?;
            wait_until(
                Duration::from_secs(30),
                "the operation to wait for the lock",
                || flocks_on(&lock_path).1 == 1,
            );
            assert!(child.try_wait()?.is_none(), "{op:?} went on under the lock");
            drop(lock);
            let out = child.wait_with_output()?;
            assert!(out.status.success(), "{op:?}: {out:?}");
            assert!(
                String::from_utf8_lossy(&out.stdout).contains('a'),
                "{op:?}: {out:?}"
            );
        }
        ok(&hutch(&state, &["close", &id], unprivileged))?;
    }
    Ok(())
}

/// The host directory of the cgroup leaf `pid` is in: its v1 memory leaf,
/// else its v2 one (None when it is in no leaf of hutch's).
fn leaf_of(pid: i64) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let line = |pick: &dyn Fn(&str) -> bool| {
        text.lines()
            .map(|l| l.splitn(3, ':').collect::<Vec<_>>())
            .find(|f| f.len() == 3 && pick(f[1]) && f[2].contains("/hutch-"))
            .map(|f| f[2].trim_start_matches('/').to_string())
    };
    if let Some(p) = line(&|c| c.split(',').any(|c| c == "memory")) {
        return Some(Path::new("/sys/fs/cgroup/memory").join(p));
    }
    let p = line(&|c| c.is_empty())?;
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .iter()
        .map(|m| Path::new(m).join(&p))
        .find(|d| d.is_dir())
}

/// A warm command's report does not wait for its sandbox's cgroup leaf to
/// be removed (nor for its pid 1's end): the counters are read when the
/// workload exits, the leaf removed after the report. A stray process in
/// a child group of the leaf holds its removal up (cgroup v1 does not
/// kill below the leaf; the rmdir retries for 5 s): the report arrives
/// regardless, with no cleanup error, and the leaf goes once the stray
/// does. Before, the report waited 5 s and carried `rmdir ... EBUSY`. A
/// sandbox used once (a workload with a capability is never resident)
/// gives the next command a leaf of its own; a resident sandbox
/// (docs/warm.md) serves the next command in the same leaf, removed when
/// the session closes.
#[test]
fn a_warm_report_does_not_wait_for_the_cgroup_leaf_removal() -> Result<()> {
    crate::require!(can_sandbox(), "cannot sandbox here");
    crate::require!(
        nix::unistd::geteuid().is_root(),
        "needs root (a stray cgroup member)"
    );
    leaf_removal_after_the_report(true)?;
    leaf_removal_after_the_report(false)
}

fn leaf_removal_after_the_report(resident: bool) -> Result<()> {
    use std::io::Write;
    let t = Tmp::new("warm-leaf-after");
    let extra: &[&str] = match resident {
        true => &["--warm", "1"],
        false => &["--warm", "1", "--cap-add", "CAP_CHOWN"],
    };
    let (state, id) = setup(&t, false, extra)?;
    ok(&hutch(&state, &["warm", &id, "--ready"], false))?;
    let status = t.0.join("status");
    let mut child = hutch_command(
        &state,
        &[
            "run",
            &id,
            "--status-file",
            status.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "read x",
        ],
        false,
    )
    .stdin(std::process::Stdio::piped())
    .spawn()?;
    let start = wait_for_event(&status, "start", Duration::from_secs(30));
    let pid = start["pid"].as_i64().expect("the start event names pid 1");
    let leaf = leaf_of(pid).expect("a session command runs in a cgroup leaf as root");
    let v1 = leaf.starts_with("/sys/fs/cgroup/memory");
    let held = leaf.join("stray");
    std::fs::create_dir(&held)?;
    // Killed on every way out, a failed assertion's included.
    struct Stray(std::process::Child);
    impl Drop for Stray {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut stray = Stray(std::process::Command::new("sleep").arg("4712").spawn()?);
    std::fs::write(held.join("cgroup.procs"), stray.0.id().to_string())?;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\n")?;
    drop(stdin);
    let begun = std::time::Instant::now();
    let out = child.wait_with_output()?;
    let took = begun.elapsed();
    let r = report(&status);
    assert!(out.status.success(), "{out:?} {r}");
    assert_eq!(r["warm"], true, "{r}");
    assert_eq!(
        r["enforced"]["limits"]["cgroup"],
        leaf.to_str().unwrap(),
        "{r}"
    );
    assert!(
        r["enforced"]["limits"]["cleanup_error"].is_null(),
        "the report waited for the leaf's removal: {r}"
    );
    if v1 {
        // Deterministic on v1: nothing kills the stray, so the leaf
        // cannot be gone yet.
        assert!(leaf.exists(), "the leaf went before its stray member");
        assert!(stray.0.try_wait()?.is_none(), "the stray member was killed");
        assert!(took < Duration::from_secs(4), "the report took {took:?}");
    }
    drop(stray);
    if resident {
        // The leaf is the resident sandbox's: kept for its next command.
        assert!(leaf.exists(), "a resident sandbox's leaf went");
    } else {
        // The removal still happens, once the leaf can go.
        wait_until(Duration::from_secs(10), "the leaf's removal", || {
            !leaf.exists()
        });
    }
    let status2 = t.0.join("status2");
    ok(&hutch(
        &state,
        &[
            "run",
            &id,
            "--status-file",
            status2.to_str().unwrap(),
            "--",
            "true",
        ],
        false,
    ))?;
    let r2 = report(&status2);
    assert_eq!(r2["warm"], true, "{r2}");
    let leaf2 = r2["enforced"]["limits"]["cgroup"].as_str().expect("a leaf");
    assert_eq!(
        r2["sandbox_id"] == r["sandbox_id"],
        resident,
        "resident {resident}: {r} {r2}"
    );
    if resident {
        assert_eq!(leaf2, leaf.to_str().unwrap(), "{r2}");
        ok(&hutch(&state, &["close", &id], false))?;
        wait_until(
            Duration::from_secs(10),
            "the leaf's removal at close",
            || !leaf.exists(),
        );
        return Ok(());
    }
    assert_ne!(
        leaf2,
        leaf.to_str().unwrap(),
        "the next command got the old leaf"
    );
    wait_until(Duration::from_secs(10), "the next leaf's removal", || {
        !Path::new(leaf2).exists()
    });
    ok(&hutch(&state, &["close", &id], false))?;
    Ok(())
}
