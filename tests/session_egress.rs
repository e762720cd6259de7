//! Egress decisions of session commands land in the session's
//! `audit.jsonl`, tagged with their command and bounded in number.

mod common;
mod proxy_support;
mod session_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use serde_json::Value;
use session_support::*;

/// A session over a one-file directory; returns (state dir, id).
fn session(t: &Tmp, unprivileged: bool) -> Result<(PathBuf, String)> {
    let src = t.0.join("src");
    std::fs::create_dir(&src)?;
    std::fs::write(src.join("a.txt"), "a\n")?;
    let state = state_dir(t, unprivileged)?;
    let id = ok(&hutch(
        &state,
        &["create", "--from", src.to_str().unwrap()],
        unprivileged,
    ))?;
    Ok((state, id.trim().to_string()))
}

fn audit(state: &Path, id: &str) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(state.join(id).join("audit.jsonl"))?;
    Ok(text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?)
}

fn events<'a>(lines: &'a [Value], event: &str, seq: u64) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["event"] == event && l["command_seq"] == seq)
        .collect()
}

fn decisions_are_audited(unprivileged: bool) -> Result<()> {
    let up = proxy_support::upstream(0);
    let t = Tmp::new("sess-egress");
    let (state, id) = session(&t, unprivileged)?;
    let user_audit = t.0.join("mine.jsonl");
    let allow = format!("good.test:{}", up.port);
    let script = format!(
        "curl -sS --max-time 5 http://good.test:{p}/one; echo; \
         curl -s --max-time 5 -o /dev/null -w '%{{http_code}}' http://other.test:{p}/two; echo",
        p = up.port
    );
    let out = ok(&hutch(
        &state,
        &[
            "run",
            &id,
            "--allow-host",
            &allow,
            "--resolve",
            "good.test=127.0.0.1",
            "--resolve",
            "other.test=127.0.0.1",
            "--allow-address",
            "127.0.0.1",
            "--audit",
            user_audit.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ],
        unprivileged,
    ))?;
    assert_eq!(out, "upstream-ok /one\n403\n");
    // A second command without the proxy has no egress.
    ok(&hutch(&state, &["run", &id, "--", "true"], unprivileged))?;
    let lines = audit(&state, &id)?;
    let egress = events(&lines, "egress", 1);
    assert_eq!(egress.len(), 2, "{lines:#?}");
    let verdicts: Vec<(&str, &str)> = egress
        .iter()
        .map(|e| {
            (
                e["decision"]["host"].as_str().unwrap(),
                e["decision"]["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(verdicts.contains(&("good.test", "allow")), "{verdicts:?}");
    assert!(verdicts.contains(&("other.test", "deny")), "{verdicts:?}");
    assert_eq!(egress[0]["decision"]["kind"], "egress");
    let cmd = events(&lines, "command", 1);
    assert_eq!(cmd.len(), 1);
    assert_eq!(cmd[0]["egress"]["decisions"], 2);
    assert_eq!(cmd[0]["egress"]["dropped"], 0);
    // The egress lines come between the command's start and end lines.
    let pos = |pred: &dyn Fn(&Value) -> bool| lines.iter().position(pred).unwrap();
    let start = pos(&|l| l["event"] == "command-start" && l["command_seq"] == 1);
    let end = pos(&|l| l["event"] == "command" && l["command_seq"] == 1);
    let first = pos(&|l| l["event"] == "egress");
    assert!(start < first && first < end);
    assert!(events(&lines, "egress", 2).is_empty());
    assert!(events(&lines, "command", 2)[0]["egress"].is_null());
    // The caller's own --audit file got the same decisions.
    let mine = std::fs::read_to_string(&user_audit)?;
    assert_eq!(mine.lines().count(), 2, "{mine}");
    // No per-command file is left in the session.
    assert!(!state.join(&id).join("egress.jsonl").exists());
    Ok(())
}

#[test]
fn egress_decisions_land_in_the_session_audit_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    decisions_are_audited(false)
}

#[test]
fn egress_decisions_land_in_the_session_audit_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    decisions_are_audited(true)
}

/// A command that makes more decisions than the bound leaves exactly the
/// bound in `audit.jsonl` plus one line counting the rest.
#[test]
fn egress_audit_is_bounded_per_command() -> Result<()> {
    let have_python = Command::new("python3").arg("-V").output().is_ok();
    require!(
        can_sandbox() && have_python,
        "needs a working launcher and python3"
    );
    let t = Tmp::new("sess-egress-bound");
    let (state, id) = session(&t, false)?;
    let script = "import socket
for i in range(1100):
    s = socket.create_connection(('127.0.0.1', 3128))
    s.sendall(b'CONNECT denied.test:443 HTTP/1.1\\r\\nHost: denied.test:443\\r\\n\\r\\n')
    while s.recv(4096):
        pass
    s.close()
print('done')";
    let out = ok(&hutch(
        &state,
        &[
            "run",
            &id,
            "--allow-host",
            "good.test",
            "--",
            "python3",
            "-c",
            script,
        ],
        false,
    ))?;
    assert_eq!(out, "done\n");
    let lines = audit(&state, &id)?;
    let egress = events(&lines, "egress", 1);
    assert_eq!(egress.len(), hutch::workspace::AUDIT_EGRESS_MAX_LINES);
    assert!(egress.iter().all(|e| e["decision"]["verdict"] == "deny"));
    let dropped = events(&lines, "egress-dropped", 1);
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0]["decisions"], 1100);
    assert_eq!(dropped[0]["dropped"], 100);
    assert_eq!(events(&lines, "command", 1)[0]["egress"]["recorded"], 1000);
    let size = std::fs::metadata(state.join(&id).join("audit.jsonl"))?.len();
    assert!(size < 2 << 20, "audit.jsonl is {size} bytes");
    Ok(())
}

/// `--egress-mode transparent` as a session default: a later command's
/// program that ignores the proxy variables reaches the allowed host by
/// name, and its decisions land in the session's audit as `transparent`.
fn transparent_default(unprivileged: bool) -> Result<()> {
    let up = proxy_support::upstream(0);
    let t = Tmp::new("sess-transparent");
    let src = t.0.join("src");
    std::fs::create_dir(&src)?;
    let state = state_dir(&t, unprivileged)?;
    let allow = format!("good.test:{}", up.port);
    let id = ok(&hutch(
        &state,
        &[
            "create",
            "--from",
            src.to_str().unwrap(),
            "--egress-mode",
            "transparent",
            "--allow-host",
            &allow,
            "--resolve",
            "good.test=127.0.0.1",
            "--allow-address",
            "127.0.0.1",
        ],
        unprivileged,
    ))?;
    let id = id.trim().to_string();
    let script = format!(
        "curl -sS --max-time 5 --noproxy '*' http://good.test:{p}/direct",
        p = up.port
    );
    let out = ok(&hutch(
        &state,
        &["run", &id, "--", "sh", "-c", &script],
        unprivileged,
    ))?;
    assert_eq!(out, "upstream-ok /direct");
    let lines = audit(&state, &id)?;
    let egress = events(&lines, "egress", 1);
    let tcp: Vec<_> = egress
        .iter()
        .filter(|e| e["decision"]["method"] == "TCP")
        .collect();
    assert_eq!(tcp.len(), 1, "{lines:#?}");
    assert_eq!(tcp[0]["decision"]["door"], "transparent");
    assert_eq!(tcp[0]["decision"]["host"], "good.test");
    assert_eq!(tcp[0]["decision"]["verdict"], "allow");
    Ok(())
}

#[test]
fn transparent_egress_as_a_session_default_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    transparent_default(false)
}

#[test]
fn transparent_egress_as_a_session_default_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    transparent_default(true)
}
