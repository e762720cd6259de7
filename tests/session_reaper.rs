//! Live sandboxes and the reaper (issue 13 §3): every running sandbox is
//! in the runtime registry, `hutch ps` lists it, `hutch kill` ends it and
//! everything it forked (double-forked daemons included) through its pid
//! namespace, never by pid alone; a killed supervisor's record is
//! recognised as stale and cleaned; `session close` ends live commands
//! and exits 0 only when nothing of the session remains.

mod common;
mod session_prod_support;
mod session_support;

use std::os::unix::fs::PermissionsExt;

use anyhow::Result;
use session_prod_support::*;

use crate::common::can_launch_as;

fn src_session(w: &World) -> Result<String> {
    let src = w.path("src");
    std::fs::create_dir(&src)?;
    std::fs::write(src.join("a.txt"), "a\n")?;
    if w.who.drops_to_nobody() {
        chown_nobody(&src);
    }
    w.create(&["--from", src.to_str().unwrap()])
}

/// A session command that leaves a double-forked daemon and two more
/// sleepers, running; their `sleep` arguments are `N1`, `N2`, `N3` (the
/// shell's own command line names them differently).
fn spawn_daemonizing(w: &World, id: &str, status: &std::path::Path, n: u64) -> Bg {
    let script = format!("a={n}; sleep ${{a}}1 & setsid sh -c \"sleep ${{a}}2 &\"; sleep ${{a}}3");
    let child = w.spawn_session(&[
        "run",
        id,
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_for_event(status, "start", READY);
    for k in 1..=3 {
        wait_until(READY, &format!("sleep {n}{k}"), || {
            running(&format!("sleep {n}{k}"))
        });
    }
    child
}

fn all_gone(n: u64) {
    wait_until(READY, "every process of the sandbox to be gone", || {
        (1..=3).all(|k| !running(&format!("sleep {n}{k}")))
    });
}

fn ps_and_kill(who: As) -> Result<()> {
    let w = World::new("reaper-kill", who);
    let id = src_session(&w)?;
    let n = unique();
    let status = w.path("status.jsonl");
    let child = spawn_daemonizing(&w, &id, &status, n);
    let ps = w.ps()?;
    let mine: Vec<_> = ps.iter().filter(|e| e["session"] == id.as_str()).collect();
    assert_eq!(mine.len(), 1, "{ps:?}");
    assert_eq!(mine[0]["state"], "live");
    assert_eq!(mine[0]["command"][0], "sh");
    let sandbox = mine[0]["sandbox_id"].as_str().unwrap().to_string();
    let human = ok(&w.hutch(&["ps"]))?;
    assert!(human.contains(&sandbox) && human.contains(&id), "{human}");
    let killed = ok(&w.hutch(&["kill", "--session", &id]))?;
    assert_eq!(killed.trim(), format!("{sandbox} killed"));
    all_gone(n);
    let out = child.wait_with_output()?;
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert!(
        stderr(&out).contains("killed by `hutch kill`"),
        "{}",
        stderr(&out)
    );
    assert!(w.ps()?.is_empty());
    let audit = w.audit(&id)?;
    assert!(
        audit
            .iter()
            .any(|l| l["event"] == "kill" && l["sandbox_id"] == sandbox.as_str())
    );
    let end = audit.iter().rfind(|l| l["event"] == "command").unwrap();
    assert_eq!(end["exit"]["signal"], 9, "{end}");
    // Nothing left to kill.
    assert_eq!(ok(&w.hutch(&["kill", "--all"]))?, "");
    ok(&w.session(&["close", &id]))?;
    Ok(())
}

#[test]
fn ps_shows_and_kill_ends_a_session_command_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    ps_and_kill(As::Root)
}

#[test]
fn ps_shows_and_kill_ends_a_session_command_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    ps_and_kill(As::Nobody)
}

/// The supervisor of a `hutch run` is SIGKILLed: its sandbox dies with it
/// (PDEATHSIG), its record stays behind, is shown as stale once and
/// removed, and `hutch kill` does not take it for a live sandbox. Records
/// naming other processes (a pid with another start time, or a process
/// that is no sandbox's pid 1) never get anything killed.
fn stale_records(who: As) -> Result<()> {
    let w = World::new("reaper-stale", who);
    let n = unique();
    let status = w.path("status.jsonl");
    let mut child = w.spawn(&[
        "run",
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sleep",
        &format!("{n}4"),
    ]);
    let start = wait_for_event(&status, "start", READY);
    let sandbox = start["sandbox_id"].as_str().unwrap().to_string();
    child.kill()?;
    wait_until(READY, "the sandbox to die with its supervisor", || {
        !running(&format!("sleep {n}4"))
    });
    let v: serde_json::Value = serde_json::from_str(&ok(&w.hutch(&["ps", "--json"]))?)?;
    let listed = v["result"]["sandboxes"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{v}");
    assert_eq!(listed[0]["sandbox_id"], sandbox.as_str());
    assert_eq!(listed[0]["state"], "stale");
    assert_eq!(v["result"]["cleaned"][0], sandbox.as_str());
    assert!(w.ps()?.is_empty(), "cleaned once seen");
    let o = w.hutch(&["kill", &sandbox]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(stderr(&o).contains("no live sandbox"), "{}", stderr(&o));

    // Forged records about a bystander process of the same user.
    let mut bystander = if who.drops_to_nobody() {
        std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
                "sleep",
            ])
            .arg(format!("{n}5"))
            .spawn()?
    } else {
        std::process::Command::new("sleep")
            .arg(format!("{n}5"))
            .spawn()?
    };
    let pid = bystander.id() as i32;
    wait_until(READY, "the bystander", || running(&format!("sleep {n}5")));
    let start_time: u64 = std::fs::read_to_string(format!("/proc/{pid}/stat"))?
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()?;
    let uid = if who.drops_to_nobody() {
        65534
    } else {
        nix::unistd::getuid().as_raw()
    };
    let forge = |id: &str, start: u64| {
        let record = serde_json::json!({
            "version": 1, "sandbox_id": id, "labels": {}, "uid": uid,
            "supervisor": {"pid": pid, "start_time": start},
            "init": {"pid": pid, "start_time": start},
            "cgroup": null, "started_unix_ms": 1, "command": ["sleep"],
        });
        let path = w.runtime.join(format!("{id}.json"));
        std::fs::write(&path, record.to_string()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if who.drops_to_nobody() {
            chown_nobody(&path);
        }
    };
    // Same pid, another start time: a reused pid, stale.
    forge("00000000000000aa", start_time + 1);
    // The right start time, but no sandbox's pid 1.
    forge("00000000000000bb", start_time);
    let ps = w.ps()?;
    let state = |id: &str| {
        ps.iter()
            .find(|e| e["sandbox_id"] == id)
            .map(|e| e["state"].as_str().unwrap().to_string())
    };
    assert_eq!(
        state("00000000000000aa").as_deref(),
        Some("stale"),
        "{ps:?}"
    );
    assert_ne!(state("00000000000000bb").as_deref(), Some("live"), "{ps:?}");
    let _ = w.hutch(&["kill", "--all"]);
    assert!(running(&format!("sleep {n}5")), "a bystander was killed");
    bystander.kill()?;
    Ok(())
}

#[test]
fn stale_records_are_cleaned_not_killed_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    stale_records(As::Root)
}

#[test]
fn stale_records_are_cleaned_not_killed_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    stale_records(As::Nobody)
}

/// `session close` with a live command: it is killed (daemon and all),
/// the close verifies nothing is left and exits 0, the kept audit ends
/// with the verification.
fn close_live(who: As) -> Result<()> {
    let w = World::new("reaper-close", who);
    let id = src_session(&w)?;
    let keep = w.path("keep");
    std::fs::create_dir(&keep)?;
    if who.drops_to_nobody() {
        chown_nobody(&keep);
    }
    let n = unique();
    let status = w.path("status.jsonl");
    let child = spawn_daemonizing(&w, &id, &status, n);
    let o = w.session(&["close", &id, "--keep-audit", keep.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        stderr(&o).contains("killed the live command"),
        "{}",
        stderr(&o)
    );
    all_gone(n);
    let out = child.wait_with_output()?;
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert_eq!(std::fs::read_dir(&w.state)?.count(), 0);
    let records: Vec<_> = std::fs::read_dir(&w.runtime)?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(records.is_empty(), "{records:?}");
    let kept = keep.join(format!("{id}.audit.jsonl"));
    assert_eq!(
        std::fs::metadata(&kept)?.permissions().mode() & 0o777,
        0o600
    );
    let audit = lines(&std::fs::read_to_string(&kept)?)?;
    let events: Vec<&str> = audit.iter().map(|l| l["event"].as_str().unwrap()).collect();
    for e in ["create", "command-start", "command", "close"] {
        assert!(events.contains(&e), "{e} in {events:?}");
    }
    let last = audit.last().unwrap();
    assert_eq!(last["event"], "close-verified");
    assert_eq!(last["ok"], true);
    // The audit of the closed session, from where it was kept.
    let printed = ok(&w.session(&["audit", &id, "--audit-dir", keep.to_str().unwrap()]))?;
    assert_eq!(printed, std::fs::read_to_string(&kept)?);
    Ok(())
}

#[test]
fn close_ends_live_commands_and_verifies_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    close_live(As::Root)
}

#[test]
fn close_ends_live_commands_and_verifies_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    close_live(As::Nobody)
}

/// Something of the session that close cannot remove (a mount inside it)
/// makes it exit non-zero naming it, and keeps the session; once it is
/// gone, close succeeds.
#[test]
fn close_names_what_remains_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    let w = World::new("reaper-remains", As::Root);
    let id = src_session(&w)?;
    let at = w.state.join(&id).join("baseline/tree");
    let st = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=1m",
            "hutch-test",
            at.to_str().unwrap(),
        ])
        .status()?;
    assert!(st.success());
    let o = w.session(&["close", &id]);
    let _ = std::process::Command::new("umount").arg(&at).status();
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = stderr(&o);
    assert!(
        err.contains("a mount at") && err.contains("baseline/tree"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(w.state.join(&id).exists());
    ok(&w.session(&["close", &id]))?;
    assert!(!w.state.join(&id).exists());
    Ok(())
}

/// The process running a session command is SIGKILLed: the command gets
/// its end line the next time the session is used, and no live record of
/// it remains.
fn supervisor_killed(who: As) -> Result<()> {
    let w = World::new("reaper-lost", who);
    let id = src_session(&w)?;
    let n = unique();
    let status = w.path("status.jsonl");
    let mut child = w.spawn_session(&[
        "run",
        &id,
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sleep",
        &format!("{n}6"),
    ]);
    wait_for_event(&status, "start", READY);
    // The running command is counted while it runs (its marker file).
    let marker = w.state.join(&id).join("running");
    assert!(marker.exists());
    assert_eq!(show(&w, &id)?["commands_run"], 1);
    child.kill()?;
    wait_until(READY, "the sandbox to die with its supervisor", || {
        !running(&format!("sleep {n}6"))
    });
    ok(&w.session(&["diff", &id]))?;
    let audit = w.audit(&id)?;
    let end = audit
        .iter()
        .find(|l| l["event"] == "command" && l["command_seq"] == 1)
        .expect("an end line for command 1");
    assert_eq!(end["supervisor_lost"], true, "{end}");
    assert!(w.ps()?.is_empty());
    assert!(!marker.exists());
    // The lost command counts against the budget.
    assert_eq!(show(&w, &id)?["commands_run"], 1);
    // The session goes on.
    ok(&w.session(&["run", &id, "--", "true"]))?;
    assert!(!marker.exists());
    assert_eq!(show(&w, &id)?["commands_run"], 2);
    // A marker whose command's end is recorded (its process was killed
    // after writing session.json) is only removed.
    std::fs::write(
        &marker,
        r#"{"command_seq":2,"pid":1,"start_time":1,"start_unix_ms":1}"#,
    )?;
    ok(&w.session(&["diff", &id]))?;
    assert!(!marker.exists());
    let lost = |audit: &[serde_json::Value]| {
        audit
            .iter()
            .filter(|l| l["supervisor_lost"] == true)
            .count()
    };
    assert_eq!(lost(&w.audit(&id)?), 1);
    // An unreadable one (empty: written just before a power loss) is a
    // command that started and never recorded its end: the next number.
    std::fs::write(&marker, "")?;
    ok(&w.session(&["diff", &id]))?;
    assert!(!marker.exists());
    let audit = w.audit(&id)?;
    assert_eq!(lost(&audit), 2);
    assert!(
        audit
            .iter()
            .any(|l| l["supervisor_lost"] == true && l["command_seq"] == 3),
        "{audit:?}"
    );
    assert_eq!(show(&w, &id)?["commands_run"], 3);
    ok(&w.session(&["close", &id]))?;
    Ok(())
}

/// `session show --json`'s result.
fn show(w: &World, id: &str) -> Result<serde_json::Value> {
    let doc: serde_json::Value = serde_json::from_str(&ok(&w.session(&["--json", "show", id]))?)?;
    Ok(doc["result"].clone())
}

#[test]
fn killed_supervisor_gets_an_end_line_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    supervisor_killed(As::Root)
}

#[test]
fn killed_supervisor_gets_an_end_line_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    supervisor_killed(As::Nobody)
}

/// A sandbox of the library (`hutch::Command`, through `hutch
/// __supervise`) is registered too, with its labels: `hutch ps` shows it,
/// `hutch kill --label` ends it, and its report says so.
fn library_sandbox(who: As) -> Result<()> {
    let w = World::new("reaper-lib", who);
    let wrapper = w.path("hutch-wrapper");
    let drop = if who.drops_to_nobody() {
        "setpriv --reuid=65534 --regid=65534 --clear-groups "
    } else {
        ""
    };
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nHUTCH_RUNTIME_DIR={} exec {drop}{} \"$@\"\n",
            w.runtime.display(),
            env!("CARGO_BIN_EXE_hutch")
        ),
    )?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    let n = unique();
    let status = w.path("status.jsonl");
    let mut cmd = hutch::Command::new("sleep");
    cmd.arg(format!("{n}7"))
        .workspace(w.path("src-lib"))
        .hutch_binary(&wrapper)
        .status_file(&status);
    std::fs::create_dir(w.path("src-lib"))?;
    if who.drops_to_nobody() {
        chown_nobody(&w.path("src-lib"));
    }
    cmd.spec_mut().labels.insert("job".into(), format!("j{n}"));
    let mut child = cmd.spawn()?;
    wait_for_event(&status, "start", READY);
    let ps = w.ps()?;
    assert_eq!(ps.len(), 1, "{ps:?}");
    assert_eq!(ps[0]["labels"]["job"], format!("j{n}"));
    assert_eq!(ps[0]["session"], serde_json::Value::Null);
    ok(&w.hutch(&["kill", "--label", &format!("job=j{n}")]))?;
    let report = child.wait()?;
    assert_eq!(report.status, 137, "{report:?}");
    assert_eq!(report.reason, hutch::Outcome::Killed);
    assert!(
        report.error.as_deref().unwrap_or("").contains("hutch kill"),
        "{report:?}"
    );
    assert!(!running(&format!("sleep {n}7")));
    assert!(w.ps()?.is_empty());
    Ok(())
}

#[test]
fn library_sandboxes_are_registered_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    library_sandbox(As::Root)
}

#[test]
fn library_sandboxes_are_registered_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    library_sandbox(As::Nobody)
}
