//! Commands in sessions (needs the launcher: user namespaces, overlayfs).

mod session_support;

use std::path::PathBuf;

use anyhow::Result;
use session_support::*;

fn setup(t: &Tmp, unprivileged: bool) -> Result<(PathBuf, String)> {
    let src = t.0.join("src");
    std::fs::create_dir_all(src.join("d"))?;
    std::fs::write(src.join("a.txt"), "base\n")?;
    std::fs::write(src.join("d/x"), "x\n")?;
    let state = state_dir(t, unprivileged)?;
    let id = ok(&hutch(
        &state,
        &[
            "create",
            "--from",
            src.to_str().unwrap(),
            "--deadline",
            "60s",
            "--max-commands",
            "5",
        ],
        unprivileged,
    ))?;
    Ok((state, id.trim().to_string()))
}

fn flow(unprivileged: bool) -> Result<()> {
    let t = Tmp::new("run");
    let (state, id) = setup(&t, unprivileged)?;
    let out = ok(&hutch(
        &state,
        &[
            "run",
            &id,
            "--",
            "sh",
            "-c",
            "pwd; cat a.txt; echo new > n.txt; echo more >> a.txt; rm d/x",
        ],
        unprivileged,
    ))?;
    assert_eq!(out, "/workspace\nbase\n");
    // Files persist across commands; processes do not.
    let out = ok(&hutch(
        &state,
        &["run", &id, "--", "cat", "n.txt", "a.txt"],
        unprivileged,
    ))?;
    assert_eq!(out, "new\nbase\nmore\n");
    ok(&hutch(&state, &["write", &id, "host.txt"], unprivileged))?;
    let out = ok(&hutch(
        &state,
        &[
            "run",
            &id,
            "--",
            "sh",
            "-c",
            "echo w >> host.txt && cat host.txt",
        ],
        unprivileged,
    ))?;
    assert_eq!(out, "w\n");
    let stat = ok(&hutch(
        &state,
        &["diff", &id, "--format", "json"],
        unprivileged,
    ))?;
    let j: serde_json::Value = serde_json::from_str(&stat)?;
    let paths: Vec<_> = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, ["a.txt", "d/x", "host.txt", "n.txt"]);
    let audit = std::fs::read_to_string(state.join(&id).join("audit.jsonl"))?;
    let cmds: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["event"] == "command")
        .collect();
    assert_eq!(cmds.len(), 3);
    assert_eq!(
        cmds[1]["argv"],
        serde_json::json!(["cat", "n.txt", "a.txt"])
    );
    assert_eq!(cmds[1]["stdout"]["head"], "new\nbase\nmore\n");
    assert_eq!(cmds[1]["exit"]["status"], 0);
    // Budget: 5 commands in all.
    ok(&hutch(&state, &["run", &id, "--", "true"], unprivileged))?;
    ok(&hutch(&state, &["run", &id, "--", "true"], unprivileged))?;
    let o = hutch(&state, &["run", &id, "--", "true"], unprivileged);
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("budget"));
    ok(&hutch(&state, &["close", &id], unprivileged))?;
    assert!(!state.join(&id).exists());
    Ok(())
}

#[test]
fn session_commands_share_files_as_root() -> Result<()> {
    if !require(
        hutch::internals::sys::geteuid() == 0 && can_sandbox_bare(),
        "needs root and a working launcher",
    ) {
        return Ok(());
    }
    flow(false)
}

#[test]
fn session_commands_share_files_unprivileged() -> Result<()> {
    if !require(
        hutch::internals::sys::geteuid() == 0 && can_sandbox_bare(),
        "needs root (to switch to uid 65534) and a working launcher",
    ) {
        return Ok(());
    }
    flow(true)
}

#[test]
fn session_deadline_kills_a_running_command() -> Result<()> {
    if !require(can_sandbox_bare(), "needs a working launcher") {
        return Ok(());
    }
    let t = Tmp::new("deadline");
    let src = t.0.join("src");
    std::fs::create_dir(&src)?;
    let state = t.0.join("state");
    let id = ok(&hutch(
        &state,
        &[
            "create",
            "--from",
            src.to_str().unwrap(),
            "--deadline",
            "3s",
        ],
        false,
    ))?;
    let id = id.trim();
    let start = std::time::Instant::now();
    let o = hutch(
        &state,
        &["run", id, "--timeout", "1h", "--", "sleep", "60"],
        false,
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(124));
    assert!(String::from_utf8_lossy(&o.stderr).contains("session deadline"));
    let o = hutch(&state, &["run", id, "--", "true"], false);
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("deadline has passed"));
    Ok(())
}

#[test]
fn concurrent_runs_do_not_interleave() -> Result<()> {
    if !require(can_sandbox_bare(), "needs a working launcher") {
        return Ok(());
    }
    let t = Tmp::new("lock");
    let src = t.0.join("src");
    std::fs::create_dir(&src)?;
    let state = t.0.join("state");
    let id = ok(&hutch(
        &state,
        &["create", "--from", src.to_str().unwrap()],
        false,
    ))?;
    let id = id.trim();
    let script = "for i in 1 2 3 4 5; do echo $1 >> log; sleep 0.2; done";
    let a = hutch_command(
        &state,
        &["--wait", "run", id, "--", "sh", "-c", script, "sh", "A"],
        false,
    )
    .spawn()?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Without --wait a second command is refused while the first runs.
    let busy = hutch(&state, &["run", id, "--", "true"], false);
    assert_eq!(busy.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&busy.stderr).contains("busy"));
    let b = hutch_command(
        &state,
        &["--wait", "run", id, "--", "sh", "-c", script, "sh", "B"],
        false,
    )
    .spawn()?;
    ok(&a.wait_with_output()?)?;
    ok(&b.wait_with_output()?)?;
    let log = ok(&hutch(&state, &["read", id, "log"], false))?;
    assert_eq!(log, "A\nA\nA\nA\nA\nB\nB\nB\nB\nB\n");
    Ok(())
}

/// `session run --status-file` writes the launcher's start event and exit
/// report, like `hutch run`; a command that never starts still ends the
/// file with an exit event.
#[test]
fn session_run_writes_the_status_file() -> Result<()> {
    if !require(can_sandbox_bare(), "needs a working launcher") {
        return Ok(());
    }
    let t = Tmp::new("status");
    let (state, id) = setup(&t, false)?;
    let status = t.0.join("status.jsonl");
    let o = hutch(
        &state,
        &[
            "run",
            &id,
            "--status-file",
            status.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "exit 3",
        ],
        false,
    );
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let text = std::fs::read_to_string(&status)?;
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.first().map(|l| &l["event"]), Some(&"start".into()));
    assert_eq!(
        lines.last().map(|l| &l["status"]),
        Some(&3.into()),
        "{text}"
    );
    // Spend the budget (5 commands), then one more cannot start.
    for _ in 0..4 {
        ok(&hutch(&state, &["run", &id, "--", "true"], false))?;
    }
    let refused = t.0.join("refused.jsonl");
    let o = hutch(
        &state,
        &[
            "run",
            &id,
            "--status-file",
            refused.to_str().unwrap(),
            "--",
            "true",
        ],
        false,
    );
    assert_eq!(o.status.code(), Some(125));
    let text = std::fs::read_to_string(&refused)?;
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or(""))?;
    assert_eq!(last["status"], 125);
    assert_eq!(last["reason"], "setup-failed");
    assert!(
        last["error"].as_str().unwrap_or("").contains("budget"),
        "{text}"
    );
    Ok(())
}
