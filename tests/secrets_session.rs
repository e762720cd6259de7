//! Secrets in sessions (issue 31, docs/secrets.md): declared once at
//! `session create` by name and given only to the commands that name them
//! (`session run --use-secret NAME`), or given per command (`--secret`);
//! a session sealed with `--network none` gives none; the value is in
//! neither `session.json` nor `audit.jsonl`. Root and uid 65534.

mod common;
mod session_support;

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::Result;
use session_support::*;

const GATEWAY: &str = "name=anthropic,upstream=https://api.anthropic.com,env=ANTHROPIC_BASE_URL";
const DECLARED: &str = "name=anthropic,env=ANTHROPIC_API_KEY,from-env=HUTCH_TEST_MODEL_KEY,host=api.anthropic.com,inject=header:x-api-key";

fn value(tag: &str) -> String {
    let mut b = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!(
        "sk-{tag}-{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

/// `hutch session ARGS` with the model key in hutch's environment.
fn session_cmd(state: &Path, args: &[&str], unprivileged: bool, key: &str) -> Output {
    hutch_command(state, args, unprivileged)
        .env("HUTCH_TEST_MODEL_KEY", key)
        .output()
        .unwrap()
}

fn placeholder_of(out: &str, var: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{var}=")))
        .map(str::to_string)
}

fn declared_by_name_per_command(unprivileged: bool) -> Result<()> {
    let t = Tmp::new("sess-secret");
    let src = t.0.join("src");
    std::fs::create_dir(&src)?;
    std::fs::write(src.join("a.txt"), "a\n")?;
    let state: PathBuf = state_dir(&t, unprivileged)?;
    let key = value("model");
    let id = ok(&session_cmd(
        &state,
        &[
            "create",
            "--from",
            src.to_str().unwrap(),
            "--allow-host",
            "api.anthropic.com",
            "--gateway",
            GATEWAY,
            "--secret",
            DECLARED,
        ],
        unprivileged,
        &key,
    ))?
    .trim()
    .to_string();
    let env_cmd = ["--", "sh", "-c", "env"];

    // A command that does not name the secret does not get it.
    let mut args = vec!["run", id.as_str()];
    args.extend(env_cmd);
    let out = ok(&session_cmd(&state, &args, unprivileged, &key))?;
    assert!(placeholder_of(&out, "ANTHROPIC_API_KEY").is_none(), "{out}");
    assert_eq!(
        placeholder_of(&out, "ANTHROPIC_BASE_URL").as_deref(),
        Some("http://127.0.0.1:3128/anthropic")
    );

    // One that names it gets a placeholder, fresh per command.
    let mut args = vec!["run", id.as_str(), "--use-secret", "anthropic"];
    args.extend(env_cmd);
    let first = ok(&session_cmd(&state, &args, unprivileged, &key))?;
    let second = ok(&session_cmd(&state, &args, unprivileged, &key))?;
    let (p1, p2) = (
        placeholder_of(&first, "ANTHROPIC_API_KEY").expect("a placeholder"),
        placeholder_of(&second, "ANTHROPIC_API_KEY").expect("a placeholder"),
    );
    assert!(p1.starts_with("hutch-placeholder-anthropic-"), "{p1}");
    assert_ne!(p1, p2, "a placeholder is per sandbox");
    assert!(!first.contains(&key) && !second.contains(&key));

    // A secret given to one command only (the registry token of a
    // provisioning step), from a file.
    let token = value("registry");
    let token_file = t.0.join("token");
    std::fs::write(&token_file, &token)?;
    if unprivileged {
        chown_nobody(&token_file);
    }
    let inline = format!(
        "name=registry,env=REGISTRY_TOKEN,from-file={},host=api.anthropic.com,inject=bearer",
        token_file.display()
    );
    let mut args = vec!["run", id.as_str(), "--secret", inline.as_str()];
    args.extend(env_cmd);
    let out = ok(&session_cmd(&state, &args, unprivileged, &key))?;
    assert!(
        placeholder_of(&out, "REGISTRY_TOKEN")
            .is_some_and(|p| p.starts_with("hutch-placeholder-registry-")),
        "{out}"
    );
    assert!(placeholder_of(&out, "ANTHROPIC_API_KEY").is_none(), "{out}");

    // An unknown name is refused, naming what is declared.
    let o = session_cmd(
        &state,
        &["run", &id, "--use-secret", "nope", "--", "true"],
        unprivileged,
        &key,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("declares no secret \"nope\" (declared: anthropic)"),
        "{err}"
    );

    // Sealed with --network none: no command may use a secret.
    ok(&session_cmd(
        &state,
        &["seal", &id, "--network", "none"],
        unprivileged,
        &key,
    ))?;
    let o = session_cmd(
        &state,
        &["run", &id, "--use-secret", "anthropic", "--", "true"],
        unprivileged,
        &key,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no command of it may use secrets"), "{err}");
    // A command without secrets still runs, without network.
    let mut args = vec!["run", id.as_str()];
    args.extend(env_cmd);
    let out = ok(&session_cmd(&state, &args, unprivileged, &key))?;
    assert!(
        placeholder_of(&out, "ANTHROPIC_BASE_URL").is_none(),
        "{out}"
    );

    // Neither value is in what the session stores.
    for file in ["session.json", "audit.jsonl"] {
        let text = std::fs::read_to_string(state.join(&id).join(file))?;
        assert!(!text.contains(&key), "the model key is in {file}");
        assert!(!text.contains(&token), "the registry token is in {file}");
    }
    let shown = ok(&session_cmd(
        &state,
        &["show", &id, "--json"],
        unprivileged,
        &key,
    ))?;
    assert!(!shown.contains(&key), "session show: {shown}");

    // With --lock egress: the declared secret, as declared, and nothing
    // else (a secret is egress with a credential).
    let locked = ok(&session_cmd(
        &state,
        &[
            "create",
            "--from",
            src.to_str().unwrap(),
            "--lock",
            "egress",
            "--allow-host",
            "api.anthropic.com",
            "--gateway",
            GATEWAY,
            "--secret",
            DECLARED,
        ],
        unprivileged,
        &key,
    ))?
    .trim()
    .to_string();
    let mut args = vec!["run", locked.as_str(), "--use-secret", "anthropic"];
    args.extend(env_cmd);
    let out = ok(&session_cmd(&state, &args, unprivileged, &key))?;
    assert!(placeholder_of(&out, "ANTHROPIC_API_KEY").is_some(), "{out}");
    let o = session_cmd(
        &state,
        &["run", &locked, "--secret", &inline, "--", "true"],
        unprivileged,
        &key,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the secret \"registry\" widens the session's egress defaults"),
        "{err}"
    );
    Ok(())
}

#[test]
fn session_secrets_are_declared_by_name_and_given_per_command_as_root() -> Result<()> {
    require!(
        common::can_launch_as(common::As::Root).is_ok(),
        common::can_launch_as(common::As::Root).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    declared_by_name_per_command(false)
}

#[test]
fn session_secrets_are_declared_by_name_and_given_per_command_unprivileged() -> Result<()> {
    require!(
        common::can_launch_as(common::As::Nobody).is_ok(),
        common::can_launch_as(common::As::Nobody).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    declared_by_name_per_command(true)
}
