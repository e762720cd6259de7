//! Where the workspace appears and what every command of a session gets
//! (issue 13 §4, §7, §8): `--workspace-path` and `hutch run --workspace
//! DIR:DEST` with relative `--chdir` inside them, create-time options
//! applied to every run (narrowed, never widened where locked),
//! `--pass-env` as the only way into the host environment, and an audit
//! that survives the session.

mod common;
mod session_prod_support;
mod session_support;

use std::os::unix::fs::PermissionsExt;

use anyhow::Result;
use session_prod_support::*;

use crate::common::{can_launch_as, exit_report};

fn src_dir(w: &World) -> Result<std::path::PathBuf> {
    let src = w.path("src");
    std::fs::create_dir_all(src.join("sub"))?;
    std::fs::write(src.join("a.txt"), "a\n")?;
    std::fs::write(src.join("sub/b.txt"), "b\n")?;
    if w.who.drops_to_nobody() {
        chown_nobody(&src);
    }
    Ok(src)
}

fn workspace_path(who: As) -> Result<()> {
    let w = World::new("defaults-path", who);
    let src = src_dir(&w)?;
    let id = w.create(&[
        "--from",
        src.to_str().unwrap(),
        "--workspace-path",
        "/workspace/app",
    ])?;
    let out = ok(&w.session(&[
        "run",
        &id,
        "--",
        "sh",
        "-c",
        "pwd; cat a.txt; ls /workspace",
    ]))?;
    assert_eq!(out, "/workspace/app\na\napp\n");
    let out = ok(&w.session(&[
        "run",
        &id,
        "--chdir",
        "sub",
        "--",
        "sh",
        "-c",
        "pwd; cat b.txt",
    ]))?;
    assert_eq!(out, "/workspace/app/sub\nb\n");
    // glob searches the session's files wherever the workspace appears.
    let out = ok(&w.session(&["--json", "glob", &id, "**/*.txt"]))?;
    let v: serde_json::Value = serde_json::from_str(out.trim())?;
    let found: Vec<_> = v["result"]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(found, ["a.txt", "sub/b.txt"], "{v}");
    // Paths of read/write/export are under it too.
    assert_eq!(
        ok(&w.session(&["read", &id, "/workspace/app/sub/b.txt"]))?,
        "b\n"
    );
    let o = w.session(&["read", &id, "/workspace/a.txt"]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(
        stderr(&o).contains("under /workspace/app"),
        "{}",
        stderr(&o)
    );
    let start = w
        .audit(&id)?
        .into_iter()
        .rfind(|l| l["event"] == "command-start")
        .unwrap();
    assert_eq!(start["workspace"]["path"], "/workspace/app");
    assert_eq!(start["workspace"]["cwd"], "/workspace/app/sub");
    ok(&w.session(&["close", &id]))?;

    // hutch run: DIR at DEST, relative --chdir inside it, the mapping in
    // the report.
    let status = w.path("status.jsonl");
    let o = w.hutch(&[
        "run",
        "--quiet",
        "--workspace",
        &format!("{}:/workspace/app", src.display()),
        "--chdir",
        "sub",
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "pwd; cat ../a.txt",
    ]);
    assert_eq!(ok(&o)?, "/workspace/app/sub\na\n");
    let report = exit_report(&status);
    assert_eq!(report["changes"][0]["dest"], "/workspace/app");
    assert_eq!(report["changes"][0]["lowers"][0], src.to_str().unwrap());
    Ok(())
}

#[test]
fn workspace_path_and_relative_chdir_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    workspace_path(As::Root)
}

#[test]
fn workspace_path_and_relative_chdir_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    workspace_path(As::Nobody)
}

/// Options given at create hold for every command, without repeating
/// them; a command may add to them unless the session locked that part;
/// `--pass-env` copies one variable, nothing else of the caller's
/// environment enters.
fn create_time_options(who: As) -> Result<()> {
    let w = World::new("defaults-apply", who);
    let src = src_dir(&w)?;
    let data = w.path("data.txt");
    std::fs::write(&data, "host data\n")?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644))?;
    let id = ok(&w
        .session_command(&[
            "create",
            "--from",
            src.to_str().unwrap(),
            "--setenv",
            "MODE",
            "test",
            "--pass-env",
            "HUTCH_TEST_CA",
            "--ro-bind",
            data.to_str().unwrap(),
            "/data/in.txt",
            "--rlimit",
            "nofile=123",
            "--lock",
            "binds",
        ])
        .env("HUTCH_TEST_CA", "/etc/ssl/ca.pem")
        .output()?)?
    .trim()
    .to_string();
    let probe = "echo MODE=$MODE CA=$HUTCH_TEST_CA SECRET=${HUTCH_TEST_SECRET:-unset}; cat /data/in.txt; ulimit -n";
    for _ in 0..2 {
        let out = ok(&w
            .session_command(&["run", &id, "--", "sh", "-c", probe])
            .env("HUTCH_TEST_SECRET", "leaked")
            .env("HUTCH_TEST_CA", "changed-since-create")
            .output()?)?;
        assert_eq!(
            out,
            "MODE=test CA=/etc/ssl/ca.pem SECRET=unset\nhost data\n123\n"
        );
    }
    // A command may add a variable (env is not locked), pass one of its
    // caller's, and narrow a limit.
    let out = ok(&w
        .session_command(&[
            "run",
            &id,
            "--setenv",
            "EXTRA",
            "1",
            "--pass-env",
            "HUTCH_TEST_SECRET",
            "--rlimit",
            "nofile=64",
            "--",
            "sh",
            "-c",
            "echo $EXTRA $HUTCH_TEST_SECRET $MODE; ulimit -n",
        ])
        .env("HUTCH_TEST_SECRET", "passed")
        .output()?)?;
    assert_eq!(out, "1 passed test\n64\n");
    // Binds are locked: another host path is refused, and audited.
    let o = w.session(&[
        "run",
        &id,
        "--ro-bind",
        "/etc/passwd",
        "/data/p",
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--lock binds") && err.contains("/etc/passwd"),
        "{err}"
    );
    assert!(w.audit(&id)?.iter().any(|l| l["event"] == "refused"));
    // A variable the caller does not have is an error, not an empty one.
    let o = w
        .session_command(&["run", &id, "--pass-env", "HUTCH_TEST_NOT_SET", "--", "true"])
        .env_remove("HUTCH_TEST_NOT_SET")
        .output()?;
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(stderr(&o).contains("HUTCH_TEST_NOT_SET"), "{}", stderr(&o));
    let show: serde_json::Value = serde_json::from_str(&ok(&w.session(&["show", &id, "--json"]))?)?;
    assert_eq!(show["result"]["locks"][0], "binds");
    assert_eq!(show["result"]["defaults"]["env"]["MODE"], "test");
    ok(&w.session(&["close", &id]))?;
    Ok(())
}

#[test]
fn create_time_options_apply_to_every_run_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    create_time_options(As::Root)
}

#[test]
fn create_time_options_apply_to_every_run_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    create_time_options(As::Nobody)
}

/// With `--audit-dir`, the audit outlives the session: create, commands,
/// refused runs, writes (with their digests), diffs, exports and the
/// close with its verification, mode 0600; `session audit` prints it.
fn audit_survives(who: As) -> Result<()> {
    let w = World::new("defaults-audit", who);
    let src = src_dir(&w)?;
    let keep = w.path("audit");
    std::fs::create_dir(&keep)?;
    if who.drops_to_nobody() {
        chown_nobody(&keep);
    }
    let id = w.create(&[
        "--from",
        src.to_str().unwrap(),
        "--max-commands",
        "1",
        "--audit-dir",
        keep.to_str().unwrap(),
    ])?;
    ok(&w.session(&["run", &id, "--", "sh", "-c", "echo x >> a.txt"]))?;
    let o = w.session(&["run", &id, "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "the budget refuses: {o:?}");
    let mut write = w.session_command(&["write", &id, "notes.txt"]);
    write.stdin(std::process::Stdio::piped());
    let mut child = write.spawn()?;
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"hello\n")?;
    ok(&child.wait_with_output()?)?;
    ok(&w.session(&["diff", &id]))?;
    let archive = w.path("out.zip");
    ok(&w.session(&["export", &id, "--out", archive.to_str().unwrap(), "a.txt"]))?;
    ok(&w.session(&["close", &id]))?;
    assert!(!w.state.join(&id).exists());
    let kept = keep.join(format!("{id}.audit.jsonl"));
    assert_eq!(
        std::fs::metadata(&kept)?.permissions().mode() & 0o777,
        0o600
    );
    let text = ok(&w.session(&["audit", &id, "--audit-dir", keep.to_str().unwrap()]))?;
    let audit = lines(&text)?;
    let has = |event: &str| audit.iter().any(|l| l["event"] == event);
    for e in [
        "create",
        "command-start",
        "command",
        "refused",
        "write",
        "diff",
        "export",
        "close",
        "close-verified",
    ] {
        assert!(has(e), "{e} in {text}");
    }
    let write = audit.iter().find(|l| l["event"] == "write").unwrap();
    assert_eq!(
        write["sha256"],
        "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
    );
    let create = audit.iter().find(|l| l["event"] == "create").unwrap();
    assert_eq!(create["session"], id.as_str());
    assert!(create["fingerprint"].as_str().unwrap().len() == 64);
    // Not found once closed, without the directory it was kept in.
    let o = w.session(&["audit", &id]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    Ok(())
}

#[test]
fn audit_survives_close_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    audit_survives(As::Root)
}

#[test]
fn audit_survives_close_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    audit_survives(As::Nobody)
}
