//! The machine interface the Python package drives (docs/machine.md),
//! through the binary: one envelope per `hutch session VERB --json`,
//! `hutch run --status-fd N --json`, typed errors, and `session glob/grep`
//! searching inside the sandbox with both engines.

mod common;
mod session_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use serde_json::Value;
use session_support::*;

/// The one JSON document of `--json` stdout.
fn envelope(stdout: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one document, one line: {text:?}");
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["hutch"], 1);
    v
}

fn session_json(state: &Path, args: &[&str], unprivileged: bool) -> (Option<i32>, Value) {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let o = hutch(state, &a, unprivileged);
    (o.status.code(), envelope(&o.stdout))
}

fn setup(t: &Tmp, unprivileged: bool) -> Result<(PathBuf, PathBuf)> {
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("pkg/deep"))?;
    std::fs::write(src.join("a.txt"), "alpha\nTODO one\n")?;
    std::fs::write(src.join("pkg/m.py"), "def main():\n    pass  # TODO two\n")?;
    std::fs::write(src.join("pkg/deep/n.py"), "x = 1\n")?;
    std::fs::write(src.join("bin.dat"), b"\x00TODO binary")?;
    std::fs::write(src.join("latin.txt"), b"caf\xe9 TODO\n")?;
    std::os::unix::fs::symlink("/etc", src.join("etc"))?;
    let state = state_dir(t, unprivileged)?;
    Ok((src, state))
}

fn verbs(unprivileged: bool) -> Result<()> {
    let t = Tmp::new("machine");
    let (src, state) = setup(&t, unprivileged)?;
    let src_s = src.to_str().unwrap();
    let (code, v) = session_json(
        &state,
        &[
            "create",
            "--from",
            src_s,
            "--allow-symlinks",
            "--max-commands",
            "9",
        ],
        unprivileged,
    );
    assert_eq!(
        (code, &v["verb"], &v["ok"]),
        (Some(0), &"session.create".into(), &true.into())
    );
    let id = v["result"]["id"].as_str().context("id")?.to_string();
    assert_eq!(v["result"]["source"]["kind"], "dir");
    assert_eq!(v["result"]["max_commands"], 9);
    assert_eq!(v["result"]["fingerprint"].as_str().unwrap().len(), 64);

    // read: text as is, other bytes in base64.
    let (_, v) = session_json(&state, &["read", &id, "a.txt"], unprivileged);
    assert_eq!(v["result"]["encoding"], "utf-8");
    assert_eq!(v["result"]["content"], "alpha\nTODO one\n");
    let (_, v) = session_json(&state, &["read", &id, "latin.txt"], unprivileged);
    assert_eq!(v["result"]["encoding"], "base64");
    assert_eq!(v["result"]["content"], "Y2Fm6SBUT0RPCg==");
    assert_eq!(v["result"]["bytes"], 10);

    let o = hutch_with_stdin(
        &state,
        &["--json", "write", &id, "new/b.txt"],
        unprivileged,
        b"bee\n",
    );
    let v = envelope(&o.stdout);
    assert_eq!(
        v["result"],
        serde_json::json!({"path": "new/b.txt", "bytes": 4})
    );

    // diff in three formats, and bounded.
    let (_, v) = session_json(&state, &["diff", &id], unprivileged);
    let patch = v["result"]["content"].as_str().unwrap();
    assert!(patch.starts_with("diff --git a/new/b.txt b/new/b.txt\nnew file mode 100644\n"));
    assert_eq!(v["result"]["bytes"], patch.len());
    let (_, v) = session_json(&state, &["diff", &id, "--format", "json"], unprivileged);
    assert_eq!(v["result"]["diff"]["files"][0]["status"], "added");
    let (_, v) = session_json(&state, &["diff", &id, "--format", "stat"], unprivileged);
    assert!(
        v["result"]["content"]
            .as_str()
            .unwrap()
            .contains("1 file changed")
    );
    let (code, v) = session_json(&state, &["diff", &id, "--max-bytes", "10"], unprivileged);
    assert_eq!(code, Some(125));
    assert_eq!(
        (&v["ok"], &v["error"]["kind"]),
        (&false.into(), &"too-large".into())
    );

    let archive = t.path().join("out.zip");
    let (_, v) = session_json(
        &state,
        &[
            "export",
            &id,
            "--out",
            archive.to_str().unwrap(),
            "new",
            "a.txt",
        ],
        unprivileged,
    );
    let entries = v["result"]["manifest"]["entries"].as_array().unwrap();
    let paths: Vec<_> = entries
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["a.txt", "new", "new/b.txt"]);
    assert_eq!(v["result"]["entries"], 3);

    // Errors: typed kinds, the session id as `where`.
    let (_, v) = session_json(&state, &["read", &id, "missing"], unprivileged);
    assert_eq!(v["error"]["kind"], "usage");
    let (_, v) = session_json(&state, &["read", "0123", "a.txt"], unprivileged);
    assert_eq!(
        (&v["error"]["kind"], &v["error"]["where"]),
        (&"usage".into(), &"0123".into())
    );
    let (_, v) = session_json(&state, &["list"], unprivileged);
    assert_eq!(v["result"]["sessions"][0]["id"], id.as_str());
    let (_, v) = session_json(&state, &["gc", "--older-than", "1h"], unprivileged);
    assert_eq!(
        v["result"],
        serde_json::json!({"removed": [], "failed": []})
    );
    // seal, show, rm, audit.
    let (code, v) = session_json(&state, &["seal", &id], unprivileged);
    assert_eq!(
        (code, &v["verb"], &v["ok"]),
        (Some(0), &"session.seal".into(), &true.into())
    );
    assert_eq!(v["result"]["index"], 1);
    assert_eq!(v["result"]["network_none"], false);
    assert_eq!(v["result"]["fingerprint"].as_str().unwrap().len(), 64);
    let (_, v) = session_json(&state, &["show", &id], unprivileged);
    assert_eq!(v["verb"], "session.show");
    assert_eq!(v["result"]["id"], id.as_str());
    assert_eq!(v["result"]["seals"].as_array().unwrap().len(), 1);
    assert_eq!(v["result"]["workspace_path"], "/workspace");
    let (_, v) = session_json(&state, &["rm", &id, "a.txt"], unprivileged);
    assert_eq!(v["result"], serde_json::json!({"removed": ["a.txt"]}));
    let (_, v) = session_json(&state, &["diff", &id, "--format", "json"], unprivileged);
    let files = v["result"]["diff"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{v}");
    assert_eq!(files[0]["status"], "deleted");
    let (_, v) = session_json(&state, &["audit", &id], unprivileged);
    assert_eq!(v["verb"], "session.audit");
    let events: Vec<_> = v["result"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap_or(""))
        .collect();
    for want in ["create", "write", "diff", "export", "seal", "rm"] {
        assert!(events.contains(&want), "{want} in {events:?}");
    }
    let (code, v) = session_json(&state, &["close", &id], unprivileged);
    assert_eq!(code, Some(0));
    assert_eq!(
        v["result"],
        serde_json::json!({
            "id": id, "closed": true, "killed": [], "audit_kept": [], "remaining": [],
            "verified": true,
        })
    );
    let (_, v) = session_json(&state, &["close", &id], unprivileged);
    assert_eq!(v["result"]["closed"], false);
    let (_, v) = session_json(&state, &["read", &id, "a.txt"], unprivileged);
    assert_eq!(
        (&v["error"]["kind"], &v["error"]["where"]),
        (&"not-found".into(), &id.as_str().into())
    );
    Ok(())
}

#[test]
fn session_verbs_print_one_envelope_each_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    require!(can_sandbox_bare(), "needs a working launcher");
    verbs(false)
}

#[test]
fn session_verbs_print_one_envelope_each_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    require!(can_sandbox_bare(), "needs a working launcher");
    verbs(true)
}

/// `hutch run --json --status-fd 3 ARGS` (as the caller, or uid 65534)
/// with fd 3 a file the shell opened; returns (exit code, status lines,
/// stdout).
fn run_with_status_fd(
    unprivileged: bool,
    cwd: &Path,
    args: &[&str],
) -> (Option<i32>, Vec<Value>, String) {
    run_with_fd(unprivileged, cwd, "--status-fd", args)
}

/// `hutch run --json FLAG 3 ARGS` (FLAG: `--status-fd` or `--result-fd`).
fn run_with_fd(
    unprivileged: bool,
    cwd: &Path,
    flag: &str,
    args: &[&str],
) -> (Option<i32>, Vec<Value>, String) {
    let status = cwd.with_extension("status");
    let _ = std::fs::remove_file(&status);
    let mut c = if unprivileged && is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
        ]);
        c
    } else {
        Command::new("sh")
    };
    c.current_dir(cwd)
        .env("STATUS", &status)
        .args(["-c", "exec \"$0\" run --json \"$@\" 3>\"$STATUS\""])
        .arg(env!("CARGO_BIN_EXE_hutch"))
        .args([flag, "3"])
        .args(args)
        .stdin(Stdio::null());
    let out = c.output().unwrap();
    let text = std::fs::read_to_string(&status).unwrap();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn status_fd(unprivileged: bool) -> Result<()> {
    let t = Tmp::new("statusfd");
    let cwd = t.path().join("w");
    std::fs::create_dir(&cwd)?;
    if unprivileged && is_root() {
        chown_nobody(t.path());
        chown_nobody(&cwd);
    }
    let (code, lines, out) =
        run_with_status_fd(unprivileged, &cwd, &["--", "sh", "-c", "echo hi; exit 7"]);
    assert_eq!((code, out.as_str()), (Some(7), "hi\n"));
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["event"], "start");
    assert_eq!(lines[1]["event"], "exit");
    assert_eq!(
        (&lines[2]["verb"], &lines[2]["ok"]),
        (&"run".into(), &true.into())
    );
    assert_eq!(lines[2]["result"]["exit_code"], 7);
    assert_eq!(lines[2]["result"], lines[1]);

    // hutch's own failures: typed, with what/where/errno/hint.
    let (code, lines, _) = run_with_status_fd(
        unprivileged,
        &cwd,
        &["--ro-bind", "/nonexistent-xyz", "/x", "--", "true"],
    );
    assert_eq!(code, Some(125));
    let e = &lines.last().unwrap()["error"];
    assert_eq!(
        (&e["kind"], &e["errno"]),
        (&"setup".into(), &"ENOENT".into())
    );
    assert!(e["where"].as_str().unwrap().contains("/nonexistent-xyz"));
    assert!(e["hint"].as_str().unwrap().contains("optional bind"));
    assert_eq!(lines.last().unwrap()["result"]["reason"], "setup-failed");
    let (_, lines, _) = run_with_status_fd(unprivileged, &cwd, &["--pids", "0", "--", "true"]);
    let e = &lines.last().unwrap()["error"];
    assert_eq!(
        (&e["kind"], &e["where"], &e["hint"]),
        (
            &"spec".into(),
            &"limits.pids".into(),
            &"set by --pids".into()
        )
    );
    let (_, lines, _) =
        run_with_status_fd(unprivileged, &cwd, &["--allow-host", "a b", "--", "true"]);
    assert_eq!(lines.last().unwrap()["error"]["kind"], "policy");
    // A command line refused before anything ran still ends the stream.
    let (code, lines, _) =
        run_with_status_fd(unprivileged, &cwd, &["--no-such-flag", "--", "true"]);
    assert_eq!(code, Some(125));
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (&lines[0]["event"], &lines[0]["status"]),
        (&"exit".into(), &125.into())
    );
    assert_eq!(lines[1]["error"]["kind"], "usage");
    // --result-fd: the envelope alone, success or failure.
    let (code, lines, out) = run_with_fd(
        unprivileged,
        &cwd,
        "--result-fd",
        &["--", "sh", "-c", "echo hi; exit 3"],
    );
    assert_eq!((code, out.as_str(), lines.len()), (Some(3), "hi\n", 1));
    assert_eq!(
        (&lines[0]["verb"], &lines[0]["result"]["exit_code"]),
        (&"run".into(), &3.into())
    );
    let (code, lines, _) = run_with_fd(
        unprivileged,
        &cwd,
        "--result-fd",
        &["--ro-bind", "/nonexistent-xyz", "/x", "--", "true"],
    );
    assert_eq!((code, lines.len()), (Some(125), 1));
    assert_eq!(lines[0]["error"]["errno"], "ENOENT");
    let (_, lines, _) = run_with_fd(
        unprivileged,
        &cwd,
        "--result-fd",
        &["--pids", "x", "--", "true"],
    );
    assert_eq!(
        (lines.len(), &lines[0]["error"]["kind"]),
        (1, &"usage".into())
    );
    Ok(())
}

#[test]
fn run_status_fd_ends_with_the_envelope_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    status_fd(false)
}

#[test]
fn run_status_fd_ends_with_the_envelope_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    status_fd(true)
}

#[test]
fn status_fd_and_json_refuse_what_cannot_work() {
    let o = Command::new(env!("CARGO_BIN_EXE_hutch"))
        .args(["run", "--json", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--json needs --status-fd"));
    for (fd, why) in [
        ("1", "stdin, stdout or stderr"),
        ("77", "not open"),
        ("x", "not a descriptor"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_hutch"))
            .args(["run", "--status-fd", fd, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(125));
        assert!(String::from_utf8_lossy(&o.stderr).contains(why), "{fd}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_hutch"))
        .args(["version", "--json"])
        .output()
        .unwrap();
    let v = envelope(&o.stdout);
    assert_eq!(v["result"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["result"]["machine"], 1);
}

fn search(unprivileged: bool) -> Result<()> {
    let t = Tmp::new("search");
    let (src, state) = setup(&t, unprivileged)?;
    let id = ok(&hutch(
        &state,
        &[
            "create",
            "--from",
            src.to_str().unwrap(),
            "--allow-symlinks",
        ],
        unprivileged,
    ))?
    .trim()
    .to_string();
    // A change made by a command is what the search sees.
    ok(&hutch(
        &state,
        &[
            "run",
            &id,
            "--",
            "sh",
            "-c",
            "echo 'TODO three' > pkg/deep/made.txt; rm a.txt",
        ],
        unprivileged,
    ))?;
    let (_, v) = session_json(&state, &["glob", &id, "**/*.py"], unprivileged);
    let paths: Vec<_> = v["result"]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["pkg/deep/n.py", "pkg/m.py"]);
    assert_eq!(v["result"]["engine"], "builtin");
    let human = ok(&hutch(&state, &["glob", &id, "*"], unprivileged))?;
    assert_eq!(human, "bin.dat\netc\nlatin.txt\n");

    let mut engines = vec!["builtin"];
    if common::have("rg") {
        engines.push("rg");
    }
    require!(
        engines.len() == 2,
        "needs ripgrep (`rg`) to compare the engines"
    );
    let mut seen = Vec::new();
    for engine in &engines {
        let (_, v) = session_json(
            &state,
            &["grep", &id, "TODO", "--engine", engine],
            unprivileged,
        );
        assert_eq!(v["result"]["engine"], *engine);
        let m: Vec<(String, u64, String)> = v["result"]["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["path"].as_str().unwrap().to_string(),
                    m["line"].as_u64().unwrap(),
                    m["text"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        seen.push(m);
        let human = ok(&hutch(
            &state,
            &["grep", &id, "TODO", "--engine", engine, "--path", "pkg"],
            unprivileged,
        ))?;
        assert_eq!(
            human,
            "pkg/deep/made.txt:1:TODO three\npkg/m.py:2:    pass  # TODO two\n"
        );
        let (_, v) = session_json(
            &state,
            &[
                "grep",
                &id,
                "TODO",
                "--engine",
                engine,
                "--max-matches",
                "1",
            ],
            unprivileged,
        );
        assert_eq!(v["result"]["truncated_by"], "max-matches");
        assert_eq!(v["result"]["matches"].as_array().unwrap().len(), 1);
        let (code, v) = session_json(
            &state,
            &["grep", &id, "(", "--engine", engine],
            unprivileged,
        );
        assert_eq!((code, &v["error"]["kind"]), (Some(125), &"usage".into()));
    }
    assert_eq!(seen[0], seen[1], "rg and the built-in engine agree");
    assert_eq!(
        seen[0],
        [
            ("latin.txt".to_string(), 1, "caf\u{fffd} TODO".to_string()),
            ("pkg/deep/made.txt".to_string(), 1, "TODO three".to_string()),
            (
                "pkg/m.py".to_string(),
                2,
                "    pass  # TODO two".to_string()
            ),
        ]
    );
    // Never through a link to outside the workspace.
    let (_, v) = session_json(
        &state,
        &["grep", &id, "root", "--path", "etc"],
        unprivileged,
    );
    assert!(
        v["error"]["what"]
            .as_str()
            .unwrap()
            .contains("outside the workspace")
    );
    // Searches leave the workspace as it was, and are audited.
    let (_, v) = session_json(&state, &["diff", &id, "--format", "json"], unprivileged);
    assert_eq!(v["result"]["diff"]["files_changed"], 2);
    let audit = std::fs::read_to_string(state.join(&id).join("audit.jsonl"))?;
    assert!(
        audit
            .lines()
            .filter(|l| l.contains("\"event\":\"search\""))
            .count()
            >= 5
    );
    Ok(())
}

#[test]
fn glob_and_grep_search_inside_the_sandbox_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    require!(can_sandbox_bare(), "needs a working launcher");
    search(false)
}

#[test]
fn glob_and_grep_search_inside_the_sandbox_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    require!(can_sandbox_bare(), "needs a working launcher");
    search(true)
}
