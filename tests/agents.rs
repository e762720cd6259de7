//! The real agent CLIs inside `hutch run --agent NAME` (issues 31 and 32):
//! Claude Code and Codex, as installed by `tests/setup` from npm (pinned),
//! each with its shipped profile (agents/NAME.toml), each against
//! the fake model server (tests/model_support) over HTTPS with a test CA,
//! reached only through hutch's model-API gateway (issue 31): the
//! profile's gateway and secret (which name the vendor's API) replaced by
//! ones of the same name pointing at the fake model; the CLI's base URL is
//! `http://127.0.0.1:3128/<gateway>`, its key a placeholder, the real key
//! only in hutch's environment on the host. The model asks the CLI to run
//! a shell command that writes foo.txt and tries a host off the allow-list;
//! the CLI runs it inside the sandbox, sends the result back, the model
//! ends. Checked: exit 0 in bounded time, foo.txt in the kept upper and not
//! in the host repository, the command's output came back to the model,
//! the disallowed host refused and audited, the model saw the real key and
//! the sandbox never held it (no process's environ or cmdline, no file under
//! the workspace, HOME or /tmp, not hutch's output), the CLI run as the profile's
//! non-root uid with its fresh HOME, and with the model out of reach the
//! CLI ended by the wall clock (`timed-out`), never a hang. Root and uid
//! 65534 callers, proxy and transparent egress.
//!
//! What the profiles set and why: docs/agents.md.

#[macro_use]
mod common;
mod model_support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use model_support::{FakeModel, Script};

/// Where `tests/setup` installs the CLIs: one npm prefix per CLI and
/// version, so the binary's path ends in `node_modules/.bin/NAME` (codex.js
/// finds its native binary next to it in node_modules).
const AGENTS_DIR: &str = "/opt/hutch-test-agents";

/// Who the profiles run the CLIs as inside (agents/*.toml): not root
/// (Claude Code refuses to skip its permission prompts as root), with a
/// fresh HOME.
const AGENT_IDENTITY: &str = "uid:1000 home:/home/agent";

/// The name the sandbox reaches the fake model by (`--resolve`).
const MODEL_HOST: &str = "model.test";
/// A name with no allow rule: the scripted command tries it.
const FORBIDDEN_HOST: &str = "forbidden.test";

/// The real key: only in hutch's environment (a secret's `from-env`), the
/// sandbox holds a placeholder. Its two halves: the scripted command
/// searches the sandbox for the key without ever carrying it whole (the
/// command's text is in the CLI's memory and session log).
const KEY_HEAD: &str = "sk-test-REAL-";
const KEY_TAIL: &str = "KEY-5f0c2a9e";
const REAL_KEY: &str = "sk-test-REAL-KEY-5f0c2a9e";

/// The variable of hutch's (host) environment the secret reads the key from.
const KEY_SOURCE: &str = "HUTCH_TEST_MODEL_KEY";

/// Whether the key is inside the sandbox: with `--setenv` it was (the
/// scripted search found it in the CLI's /proc/PID/environ, which proves
/// the search finds a key); through the gateway it must be nowhere.
const KEY_INSIDE: bool = false;

/// The exit a wall-clock kill reports.
const TIMEOUT_EXIT: i32 = 124;

/// What a test adds to an agent's profile (`hutch run --agent NAME`,
/// agents/NAME.toml): the gateway to the model and the key's secret.
struct Agent {
    /// The profile's name.
    name: &'static str,
    /// The binary, relative to AGENTS_DIR.
    bin: &'static str,
    /// The variable holding the API key (inside: the placeholder).
    key_var: &'static str,
    /// The header the key travels in, and how.
    key_header: &'static str,
    key_value: fn(&str) -> String,
    /// The gateway's name: the first segment of its URL inside.
    gateway: &'static str,
    /// The variable the CLI reads its base URL from, if it has one (the
    /// gateway's `env` sets it).
    base_env: Option<&'static str>,
    /// How the proxy puts the key into the request (`--secret inject=`).
    inject: &'static str,
    /// The command line after the binary.
    args: fn(prompt: &str) -> Vec<String>,
}

const CLAUDE_CODE: Agent = Agent {
    name: "claude-code",
    bin: "claude-code-2.1.332/node_modules/.bin/claude",
    key_var: "ANTHROPIC_API_KEY",
    key_header: "x-api-key",
    key_value: |k| k.to_string(),
    gateway: "anthropic",
    base_env: Some("ANTHROPIC_BASE_URL"),
    inject: "header:x-api-key",
    // No --dangerously-skip-permissions: the profile's settings.json
    // bypasses the prompts.
    args: |prompt| ["-p", prompt].map(String::from).to_vec(),
};

const CODEX: Agent = Agent {
    name: "codex",
    bin: "codex-0.171.0/node_modules/.bin/codex",
    key_var: "OPENAI_API_KEY",
    key_header: "authorization",
    key_value: |k| format!("Bearer {k}"),
    gateway: "openai",
    // Codex reads no base-URL variable for a custom provider.
    base_env: None,
    inject: "bearer",
    // The profile's provider is at the gateway; its config.toml turns the
    // approvals, Codex's own sandbox and analytics off.
    args: |prompt| {
        ["exec", "--skip-git-repo-check", prompt]
            .map(String::from)
            .to_vec()
    },
};

fn agent_bin(agent: &Agent) -> PathBuf {
    Path::new(AGENTS_DIR).join(agent.bin)
}

/// The flags that point the profile's gateway and secret (agents/NAME.toml,
/// which name the vendor's API) at the fake model on `port`: a gateway and
/// a secret of the same name replace the profile's. The key is read from
/// hutch's KEY_SOURCE; the CLI's key variable holds a placeholder.
fn gateway_flags(agent: &Agent, port: u16) -> Vec<String> {
    let mut gateway = format!(
        "name={},upstream=https://{MODEL_HOST}:{port}",
        agent.gateway
    );
    if let Some(var) = agent.base_env {
        gateway.push_str(&format!(",env={var}"));
    }
    vec![
        "--gateway".to_string(),
        gateway,
        "--secret".to_string(),
        format!(
            "name={},from-env={KEY_SOURCE},host={MODEL_HOST}:{port},env={},inject={}",
            agent.gateway, agent.key_var, agent.inject
        ),
    ]
}

/// hutch's own environment for a gateway run: the real key (the secret's
/// source, and the profile's, which is the CLI's usual variable) and the
/// test CA the proxy verifies the fake model against.
fn gateway_env(cmd: &mut std::process::Command, agent: &Agent, ca: &Path) {
    cmd.env(KEY_SOURCE, REAL_KEY).env(agent.key_var, REAL_KEY);
    if ca.exists() {
        cmd.env("SSL_CERT_FILE", ca);
    }
}

/// The CLI is installed (by tests/setup) and `who` can launch hutch.
fn ready(agent: &Agent, who: As) -> Result<(), String> {
    can_launch_as(who)?;
    let bin = agent_bin(agent);
    if !bin.exists() {
        return Err(format!(
            "{} is not installed at {} (tests/setup installs it)",
            agent.name,
            bin.display()
        ));
    }
    Ok(())
}

/// One `hutch run` of an agent CLI and what it left.
struct Run {
    out: Output,
    elapsed: Duration,
    /// The host directory mounted at /workspace/repo.
    repo: PathBuf,
    /// `--changes DIR`'s upper.
    upper: PathBuf,
    audit: Vec<serde_json::Value>,
    audit_text: String,
    report: serde_json::Value,
    _dir: TempDir,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}\naudit:\n{}",
            self.out.status.code(),
            self.elapsed,
            stdout(&self.out),
            stderr(&self.out),
            self.audit
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        )
    }
}

enum Net<'a> {
    /// The fake model allowed (and the profile's model API), in this
    /// egress mode.
    Model(&'a FakeModel, &'a str),
    /// The gateway's upstream out of reach: nothing listens on its port.
    Unreachable,
}

/// A port nothing listens on (tcpmux): the unreachable model's.
const DEAD_PORT: u16 = 1;

fn run_agent(agent: &Agent, who: As, net: Net, timeout: &str) -> Run {
    let dir = TempDir::new(&format!("agent-{}", agent.name), who);
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    own_as(&repo, who);
    write_as(&repo.join("README"), "the host repository\n", who);
    let changes = dir.path().join("changes");
    let audit = dir.path().join("audit.jsonl");
    let status = dir.path().join("status.jsonl");
    let ca = dir.path().join("ca.pem");

    let bin = agent_bin(agent);
    let (port, mode) = match &net {
        Net::Model(server, mode) => (server.https_port, *mode),
        Net::Unreachable => (DEAD_PORT, "proxy"),
    };
    let mut args: Vec<String> = [
        "run",
        "--agent",
        agent.name,
        "--workspace",
        &format!("{}:/workspace/repo", repo.display()),
        "--changes",
        changes.to_str().unwrap(),
        "--chdir",
        "/workspace/repo",
        "--status-file",
        status.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
        "--timeout",
        timeout,
    ]
    .map(String::from)
    .to_vec();
    if let Net::Model(server, _) = &net {
        server.write_ca(&ca);
        own_as(&ca, who);
    }
    args.extend(gateway_flags(agent, port));
    args.extend(
        [
            "--allow-host",
            &format!("{MODEL_HOST}:{port}"),
            "--resolve",
            &format!("{MODEL_HOST}=127.0.0.1"),
            "--resolve",
            &format!("{FORBIDDEN_HOST}=127.0.0.1"),
            "--allow-address",
            "127.0.0.1/32",
            "--egress-mode",
            mode,
        ]
        .map(String::from),
    );
    args.push("--".to_string());
    args.push(bin.display().to_string());
    args.extend((agent.args)("Create foo.txt in the working directory."));

    let mut cmd = hutch_command(who);
    cmd.args(&args)
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null());
    gateway_env(&mut cmd, agent, &ca);
    let start = Instant::now();
    let out = cmd.output().expect("spawn hutch");
    let elapsed = start.elapsed();
    let audit_text = std::fs::read_to_string(&audit).unwrap_or_default();
    let audit = audit_text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let report = if status.exists() {
        exit_report(&status)
    } else {
        serde_json::Value::Null
    };
    Run {
        out,
        elapsed,
        repo,
        upper: changes.join("upper"),
        audit,
        audit_text,
        report,
        _dir: dir,
    }
}

/// The scripted exchange: write foo.txt, try a host off the allow-list
/// (through the proxy variables, as any tool the agent runs would), say
/// who it runs as, search the sandbox for the real key (every readable
/// /proc/*/environ and /proc/*/cmdline, files under the workspace, HOME
/// and /tmp: one `key-in:` line per place), print a marker the model must
/// get back.
fn script() -> Script {
    Script::shell(
        &format!(
            "echo written-by-the-agent > foo.txt; \
             curl -sS --max-time 10 -o /dev/null -w 'forbidden-connect:%{{http_connect}}\\n' https://{FORBIDDEN_HOST}/ 2>&1; \
             echo forbidden-exit:$?; echo uid:$(id -u) home:$HOME; \
             k={KEY_HEAD}; k=${{k}}{KEY_TAIL}; \
             for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do \
               tr '\\0' '\\n' < $f 2>/dev/null | grep -qF \"$k\" && echo key-in:$f; done; \
             grep -rlsF \"$k\" /workspace/repo $HOME /tmp | sed 's/^/key-in:/'; \
             echo key-search-done; echo TOOL-RAN-IN-SANDBOX"
        ),
        "All done: foo.txt is written.",
    )
}

/// The spawner's manual probe and its first two tests, for one CLI: the
/// exchange completes, foo.txt lands in the kept upper and not in the host
/// repository, the disallowed host is refused and audited.
fn exchange_completes(agent: &Agent) {
    for who in identities_ready(|who| ready(agent, who)) {
        for mode in ["proxy", "transparent"] {
            // A server per run: its record is this run's alone.
            let server = FakeModel::start(script(), &[MODEL_HOST]);
            let run = run_agent(agent, who, Net::Model(&server, mode), "120s");
            let what = format!("{} as {who:?}, {mode}: {}", agent.name, run.describe());
            assert_eq!(run.out.status.code(), Some(0), "{what}");
            assert!(
                stdout(&run.out).contains("All done: foo.txt is written."),
                "{what}"
            );
            assert!(run.elapsed < Duration::from_secs(60), "{what}");

            // The tool ran inside the sandbox: its write is in the upper,
            // never in the host repository.
            assert_eq!(
                std::fs::read_to_string(run.upper.join("foo.txt"))
                    .ok()
                    .as_deref(),
                Some("written-by-the-agent\n"),
                "{what}"
            );
            assert!(!run.repo.join("foo.txt").exists(), "{what}");

            // The model got the command's output back, and the key.
            let model = server.model_requests();
            let kinds: Vec<&str> = model.iter().map(|r| r.answered).collect();
            assert!(
                kinds.contains(&"tool_use") && kinds.contains(&"final"),
                "{what}\nmodel requests: {kinds:?}"
            );
            let result = model
                .iter()
                .find_map(|r| r.tool_result())
                .unwrap_or_default();
            assert!(
                result.contains("TOOL-RAN-IN-SANDBOX"),
                "{what}\ntool result: {result}"
            );
            assert!(
                result.contains(AGENT_IDENTITY),
                "{what}\ntool result: {result}"
            );
            assert!(
                result.contains("key-search-done"),
                "{what}\ntool result: {result}"
            );
            let key_in: Vec<&str> = result
                .lines()
                .filter(|l| l.starts_with("key-in:"))
                .collect();
            if KEY_INSIDE {
                // --setenv: the CLI's own environment holds it.
                assert!(
                    key_in.iter().any(|l| l.ends_with("/environ")),
                    "{what}\ntool result: {result}"
                );
            } else {
                assert!(key_in.is_empty(), "{what}\nthe key is inside: {key_in:?}");
                assert!(
                    !stdout(&run.out).contains(REAL_KEY) && !stderr(&run.out).contains(REAL_KEY),
                    "{what}"
                );
                assert!(!run.audit_text.contains(REAL_KEY), "{what}");
            }
            // Inside, the key's variable held the placeholder: the CLI sent
            // it, the gateway put the real key in its place.
            assert!(model.iter().all(|r| r.tls), "{what}");
            for r in &model {
                assert_eq!(
                    r.header(agent.key_header),
                    Some((agent.key_value)(REAL_KEY).as_str()),
                    "{what}"
                );
            }

            // The disallowed host: refused (the proxy's 403 to the CONNECT,
            // or no address in transparent mode) and audited.
            assert!(
                !result.contains("forbidden-exit:0"),
                "{what}\ntool result: {result}"
            );
            assert!(
                run.audit
                    .iter()
                    .any(|l| l["host"] == FORBIDDEN_HOST && l["verdict"] == "deny"),
                "{what}"
            );
            // The model's host was reached through the gateway, allowed,
            // with the secret.
            assert!(
                run.audit.iter().any(|l| l["host"] == MODEL_HOST
                    && l["verdict"] == "allow"
                    && l["via"] == "gateway"
                    && l["gateway"] == agent.gateway
                    && l["secrets"] == serde_json::json!([agent.gateway])),
                "{what}"
            );
            // Nothing else was tried: no telemetry, no update check.
            let others: Vec<_> = run
                .audit
                .iter()
                .filter(|l| l["host"] != MODEL_HOST && l["host"] != FORBIDDEN_HOST)
                .collect();
            assert!(others.is_empty(), "{what}\nunexpected egress: {others:?}");
        }
    }
}

#[test]
fn claude_code_completes_a_tool_call_inside_hutch() {
    exchange_completes(&CLAUDE_CODE);
}

#[test]
fn codex_completes_a_tool_call_inside_hutch() {
    exchange_completes(&CODEX);
}

/// With the model out of reach (the gateway answers 502) the CLI retries
/// for ever (Codex: "Reconnecting..."; Claude Code backs off for
/// minutes): the wall clock ends it, reported `timed-out`, within the
/// timeout and a bounded grace.
fn unreachable_model_ends_by_the_wall_clock(agent: &Agent) {
    for who in identities_ready(|who| ready(agent, who)) {
        let run = run_agent(agent, who, Net::Unreachable, "5s");
        let what = format!("{} as {who:?}: {}", agent.name, run.describe());
        assert_eq!(run.out.status.code(), Some(TIMEOUT_EXIT), "{what}");
        assert_eq!(
            run.report["reason"], "timed-out",
            "{what}\nreport: {}",
            run.report
        );
        assert!(run.elapsed < Duration::from_secs(20), "{what}");
        assert!(!run.upper.join("foo.txt").exists(), "{what}");
        // Every attempt reached the gateway, which could not reach the
        // model (502), and was audited.
        assert!(
            !run.audit.is_empty()
                && run.audit.iter().all(|l| l["host"] == MODEL_HOST
                    && l["via"] == "gateway"
                    && l["verdict"] == "error"
                    && l["status"] == 502),
            "{what}"
        );
    }
}

#[test]
fn claude_code_without_its_model_is_ended_by_the_wall_clock() {
    unreachable_model_ends_by_the_wall_clock(&CLAUDE_CODE);
}

#[test]
fn codex_without_its_model_is_ended_by_the_wall_clock() {
    unreachable_model_ends_by_the_wall_clock(&CODEX);
}

/// The fake model server itself, through curl on the host (no CLI): both
/// APIs over HTTPS with the test CA and over plain HTTP, the two turns of
/// the exchange streamed as server-sent events in order, every request
/// recorded with its headers, anything else a 404.
#[test]
fn fake_model_server_speaks_both_apis() {
    require!(have("curl"), "curl (tests/setup installs it)");
    let server = FakeModel::start(Script::shell("touch foo.txt", "Finished."), &["localhost"]);
    let dir = TempDir::new("fake-model", As::Root);
    let ca = dir.path().join("ca.pem");
    server.write_ca(&ca);
    let post = |url: &str, body: serde_json::Value| -> String {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&ca)
            .args(["-H", "content-type: application/json", "-H"])
            .arg(format!("x-api-key: {REAL_KEY}"))
            .arg("--data-binary")
            .arg(body.to_string())
            .arg(url)
            .output()
            .unwrap();
        assert!(out.status.success(), "{url}: {}", stderr(&out));
        stdout(&out)
    };
    let events = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .map(String::from)
            .collect()
    };
    let https = format!("https://localhost:{}", server.https_port);
    let http = format!("http://127.0.0.1:{}", server.http_port);

    let first = post(
        &format!("{https}/v1/messages?beta=true"),
        serde_json::json!({"stream": true, "messages": [{"role": "user", "content": "go"}]}),
    );
    assert_eq!(
        events(&first),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{first}"
    );
    assert!(
        first.contains(r#""name":"Bash""#) && first.contains("touch foo.txt"),
        "{first}"
    );
    let second = post(
        &format!("{http}/v1/messages"),
        serde_json::json!({"stream": false, "messages": [
            {"role": "user", "content": "go"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_fake_01", "content": "ok"}]}]}),
    );
    let second: serde_json::Value = serde_json::from_str(&second).unwrap();
    assert_eq!(second["content"][0]["text"], "Finished.");
    assert_eq!(second["stop_reason"], "end_turn");

    let call = post(
        &format!("{https}/v1/responses"),
        serde_json::json!({"stream": true, "input": [{"type": "message", "role": "user", "content": "go"}]}),
    );
    assert_eq!(
        events(&call).last().map(String::as_str),
        Some("response.completed")
    );
    assert!(call.contains(r#""name":"exec_command""#), "{call}");
    let done = post(
        &format!("{https}/v1/responses"),
        serde_json::json!({"stream": true, "input": [
            {"type": "function_call_output", "call_id": "call_fake_01", "output": "ran"}]}),
    );
    assert!(
        events(&done).contains(&"response.output_text.delta".to_string()),
        "{done}"
    );
    assert!(done.contains("Finished."), "{done}");
    let missing = post(&format!("{http}/v1/models"), serde_json::json!({}));
    assert!(missing.contains("not_found_error"), "{missing}");

    let seen = server.requests();
    let answered: Vec<(&str, bool)> = seen.iter().map(|r| (r.answered, r.tls)).collect();
    assert_eq!(
        answered,
        [
            ("tool_use", true),
            ("final", false),
            ("tool_use", true),
            ("final", true),
            ("not_found", false)
        ]
    );
    assert!(seen.iter().all(|r| r.header("x-api-key") == Some(REAL_KEY)));
    assert_eq!(seen[0].path, "/v1/messages?beta=true");
    assert_eq!(seen[1].tool_result().as_deref(), Some("ok"));
    assert_eq!(seen[3].tool_result().as_deref(), Some("ran"));
}

/// `hutch agent check NAME` says what the host still lacks, each with what
/// to do (exit 1), and `ready` (exit 0) once nothing is: the CLI found
/// where a sandbox shows it, the key's variable set, a trial start of the
/// CLI through `hutch run --agent` (`CLI --version`).
#[test]
fn agent_check_says_what_the_host_lacks() {
    for agent in [&CLAUDE_CODE, &CODEX] {
        for who in identities_ready(|who| ready(agent, who)) {
            let dir = TempDir::new("agent-check", who);
            let check = |command: &Path, key: bool| -> Output {
                let mut c = hutch_command(who);
                c.args(["agent", "check", agent.name, "--command"])
                    .arg(command)
                    .current_dir(dir.path())
                    .env_remove(agent.key_var)
                    .stdin(std::process::Stdio::null());
                if key {
                    c.env(agent.key_var, REAL_KEY);
                }
                c.output().unwrap()
            };
            let what =
                |o: &Output| format!("{} as {who:?}: {}{}", agent.name, stdout(o), stderr(o));

            let missing = check(Path::new("/nonexistent/bin/agent"), false);
            assert_eq!(missing.status.code(), Some(1), "{}", what(&missing));
            let text = stdout(&missing);
            assert!(
                text.lines()
                    .any(|l| l.starts_with("lacks") && l.contains("not found")),
                "{}",
                what(&missing)
            );
            assert!(
                text.lines()
                    .any(|l| l.starts_with("lacks") && l.contains(agent.key_var)),
                "{}",
                what(&missing)
            );

            let found = check(&agent_bin(agent), true);
            assert_eq!(found.status.code(), Some(0), "{}", what(&found));
            let text = stdout(&found);
            assert!(
                text.lines().any(|l| l.starts_with("ok")
                    && l.contains(&format!("hutch run --agent {} --", agent.name))
                    && (l.contains("2.1.332") || l.contains("0.171.0"))),
                "{}",
                what(&found)
            );
            assert!(
                text.ends_with(&format!("{}: ready\n", agent.name)),
                "{}",
                what(&found)
            );
            // The key's value is never printed.
            assert!(!text.contains(REAL_KEY));
        }
    }
}

/// A mistake in `--agent` is one line and exit 125 before anything starts:
/// an unknown name (the built-in ones listed), a profile file with an
/// unknown key or a bad value (the file and the key named).
#[test]
fn agent_profile_mistakes_exit_125_before_anything_starts() {
    let who = caller();
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    let dir = TempDir::new("agent-bad", who);
    let marker = dir.path().join("started");
    let touch = format!("touch {}", marker.display());
    let bad_key = dir.path().join("bad-key.toml");
    write_as(
        &bad_key,
        "description = \"x\"\ncommand = \"x\"\ncolour = \"blue\"\n",
        who,
    );
    let bad_value = dir.path().join("bad-value.toml");
    write_as(
        &bad_value,
        "description = \"x\"\ncommand = \"x\"\ntimeout = \"soon\"\n",
        who,
    );
    let cases: [(&str, &[&str]); 3] = [
        (
            "no-such-agent",
            &["no agent profile \"no-such-agent\"", "claude-code, codex"],
        ),
        (bad_key.to_str().unwrap(), &["bad-key.toml", "colour"]),
        (bad_value.to_str().unwrap(), &["bad-value.toml", "timeout"]),
    ];
    for (agent, says) in cases {
        let out = hutch_as(
            who,
            dir.path(),
            &["run", "--agent", agent, "--", "sh", "-c", &touch],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{agent}: {err}");
        assert_eq!(err.lines().count(), 1, "{agent}: {err}");
        for s in says {
            assert!(err.contains(s), "{agent}: {err:?} does not say {s:?}");
        }
        assert!(!marker.exists(), "{agent}: the command ran");
        let check = hutch_as(who, dir.path(), &["agent", "check", agent]);
        assert_eq!(
            check.status.code(),
            Some(125),
            "{agent}: {}",
            stderr(&check)
        );
    }
}

/// The same in a session: `hutch session run ID --agent NAME -- CLI ...`
/// (the agent spawner's per-invocation run over a persistent workspace):
/// the exchange completes and foo.txt is in the session's workspace
/// (`session diff`), not in the directory it was created from.
#[test]
fn an_agent_runs_in_a_session() {
    let agent = &CODEX;
    for who in identities_ready(|who| ready(agent, who)) {
        let dir = TempDir::new("agent-session", who);
        let repo = dir.path().join("repo");
        let state = dir.path().join("state");
        for d in [&repo, &state] {
            std::fs::create_dir(d).unwrap();
            own_as(d, who);
        }
        write_as(&repo.join("README"), "the host repository\n", who);
        let ca = dir.path().join("ca.pem");
        let server = FakeModel::start(script(), &[MODEL_HOST]);
        server.write_ca(&ca);
        own_as(&ca, who);
        let session = |args: &[&str]| -> Output {
            let mut c = hutch_command(who);
            c.arg("session")
                .arg("--state-dir")
                .arg(&state)
                .args(args)
                .current_dir(dir.path())
                .stdin(std::process::Stdio::null());
            gateway_env(&mut c, agent, &ca);
            c.output().unwrap()
        };
        let created = session(&[
            "create",
            "--from",
            repo.to_str().unwrap(),
            "--workspace-path",
            "/workspace/repo",
        ]);
        assert_eq!(
            created.status.code(),
            Some(0),
            "{who:?}: {}",
            stderr(&created)
        );
        let id = stdout(&created).trim().to_string();

        let mut args: Vec<String> = [
            "run",
            &id,
            "--agent",
            agent.name,
            "--allow-host",
            &format!("{MODEL_HOST}:{}", server.https_port),
            "--resolve",
            &format!("{MODEL_HOST}=127.0.0.1"),
            "--allow-address",
            "127.0.0.1/32",
            "--timeout",
            "120s",
        ]
        .map(String::from)
        .to_vec();
        args.extend(gateway_flags(agent, server.https_port));
        args.push("--".to_string());
        args.push(agent_bin(agent).display().to_string());
        args.extend((agent.args)("Create foo.txt."));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ran = session(&args);
        let what = format!("{who:?}: {}\n{}", stdout(&ran), stderr(&ran));
        assert_eq!(ran.status.code(), Some(0), "{what}");
        let model = server.model_requests();
        for r in &model {
            assert_eq!(
                r.header(agent.key_header),
                Some((agent.key_value)(REAL_KEY).as_str()),
                "{what}"
            );
        }
        let result = model
            .iter()
            .find_map(|r| r.tool_result())
            .unwrap_or_default();
        assert!(
            !result.lines().any(|l| l.starts_with("key-in:")),
            "{what}\nthe key is inside: {result}"
        );
        assert!(
            result.contains(AGENT_IDENTITY),
            "{what}\ntool result: {result}"
        );

        let read = session(&["read", &id, "foo.txt"]);
        assert_eq!(
            stdout(&read),
            "written-by-the-agent\n",
            "{who:?}: {}",
            stderr(&read)
        );
        assert!(!repo.join("foo.txt").exists());
        let closed = session(&["close", &id]);
        assert_eq!(
            closed.status.code(),
            Some(0),
            "{who:?}: {}",
            stderr(&closed)
        );
    }
}

/// The spawner's third test: with the profile and a required memory cap
/// (`--memory`), a runaway allocation is killed where the host can enforce
/// the cap (`oom-killed`), and otherwise the run is refused before it
/// starts, exit 125, one line saying why and naming the flag; never a run
/// without the cap it asked for.
#[test]
fn a_runaway_allocation_is_killed_or_the_run_refused() {
    let agent = &CLAUDE_CODE;
    for who in identities_ready(|who| ready(agent, who)) {
        let dir = TempDir::new("agent-memory", who);
        // The profile's uid 1000 writes the marker.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let status = dir.path().join("status.jsonl");
        let marker = dir.path().join("started");
        let script = format!(
            "touch {}; python3 -c 'a = bytearray(1 << 30); print(\"allocated\")'",
            marker.display()
        );
        // The profile's secret reads the key from hutch's environment.
        let mut cmd = hutch_command(who);
        cmd.current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .env(agent.key_var, REAL_KEY)
            .args([
                "run",
                "--agent",
                agent.name,
                "--memory",
                "256M",
                "--bind",
                dir.path().to_str().unwrap(),
                dir.path().to_str().unwrap(),
                "--status-file",
                status.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &script,
            ]);
        let out = cmd.output().expect("spawn hutch");
        let (err, report) = (stderr(&out), exit_report(&status));
        let what = format!(
            "{who:?}: exit {:?}\n{err}\nreport: {report}",
            out.status.code()
        );
        assert!(!stdout(&out).contains("allocated"), "{what}");
        if out.status.code() == Some(125) {
            // Refused: before anything started, the reason and the flag.
            assert!(!marker.exists(), "{what}");
            assert_eq!(err.lines().count(), 1, "{what}");
            assert!(
                err.contains("limits.memory") && err.contains("--memory"),
                "{what}"
            );
        } else {
            assert!(marker.exists(), "{what}");
            assert_eq!(report["reason"], "oom-killed", "{what}");
        }
    }
}
