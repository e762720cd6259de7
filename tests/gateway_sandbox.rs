//! Gateways (issue 31) through `hutch run`: a plain-HTTP URL inside the
//! sandbox, `http://127.0.0.1:3128/<name>/...`, reaches one HTTPS upstream
//! (here a local server with a test CA the proxy trusts through
//! `SSL_CERT_FILE`, reached under a real-looking name by a resolve
//! override). Server-sent events arrive one by one; rules, budgets and
//! the audit line hold. curl and python3 urllib inside; root and 65534.

#[macro_use]
mod common;
#[path = "common/tls_upstream.rs"]
mod tls_upstream;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use common::{As, TempDir, can_launch_as, hutch_command, stderr, stdout, write_as};
use tls_upstream::TlsUpstream;

const NAME: &str = "api.anthropic.com";

/// A policy file with one profile `t`: the upstream allowed under
/// [`NAME`] at its port, resolved to loopback, and `gateways` (TOML).
fn policy(dir: &TempDir, who: As, up: &TlsUpstream, gateways: &str) -> String {
    let path = dir.path().join("policy.toml");
    let text = format!(
        r#"[profiles.t]
allow = ["{NAME}:{port}"]
allow_address = ["127.0.0.1/32"]
resolve = {{ "{NAME}" = "127.0.0.1" }}
audit = "{audit}"
{gateways}
"#,
        port = up.port,
        audit = dir.path().join("audit.jsonl").display(),
    );
    write_as(&path, &text, who);
    path.display().to_string()
}

fn hutch_run(
    who: As,
    dir: &TempDir,
    up: &TlsUpstream,
    policy: &str,
    script: &str,
) -> std::process::Command {
    let mut cmd = hutch_command(who);
    cmd.args([
        "run",
        "--quiet",
        "--egress-policy",
        policy,
        "--",
        "sh",
        "-c",
        script,
    ])
    .current_dir(dir.path())
    .env("SSL_CERT_FILE", &up.ca_file)
    .stdin(Stdio::null());
    cmd
}

/// The audit log's gateway lines, once there are `want` of them (a line
/// is written when its request ends) or after 10 s.
fn audit(dir: &TempDir, want: usize) -> Vec<serde_json::Value> {
    let path = dir.path().join("audit.jsonl");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &serde_json::Value| v.to_string().contains("\"via\":\"gateway\""))
            .collect();
        if lines.len() >= want || std::time::Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of `key` in an audit line, wherever the sink nests it.
fn field<'a>(line: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    if let Some(v) = line.get(key) {
        return v;
    }
    for v in line.as_object().into_iter().flat_map(|o| o.values()) {
        if let Some(x) = v.get(key) {
            return x;
        }
    }
    &serde_json::Value::Null
}

/// An upstream offering h2 is still reached over HTTP/1.1: a gateway
/// request comes in over HTTP/1.1, and the upstream protocol follows the
/// sandbox's (h2 halves a streamed answer's throughput: docs/egress.md).
#[test]
fn events_stream_one_by_one_from_an_h2_upstream_over_http1_root() {
    events_stream_one_by_one(As::Root, &["h2", "http/1.1"], "HTTP/1.1");
}

#[test]
fn events_stream_one_by_one_over_http1_unprivileged() {
    events_stream_one_by_one(As::Nobody, &["http/1.1"], "HTTP/1.1");
}

const SSE_SCRIPT: &str = r#"
set -e
python3 -u - <<'PY'
import urllib.request
req = urllib.request.Request("http://127.0.0.1:3128/anthropic/sse/3?beta=true",
                             headers={"accept": "text/event-stream"})
with urllib.request.urlopen(req, timeout=30) as r:
    print("status", r.status, r.headers.get("content-type"), flush=True)
    for line in r:
        line = line.decode().strip()
        if line.startswith("data:"):
            print("got", line, flush=True)
print("done", flush=True)
PY
curl -sS --max-time 10 -X POST -d '{"model":"m"}' http://127.0.0.1:3128/anthropic/v1/messages; echo
curl -sS --max-time 10 --proxy http://127.0.0.1:3128 --noproxy '' http://127.0.0.1:3128/anthropic/v1/absolute; echo
"#;

/// python3 urllib reads an SSE stream through the gateway; the upstream
/// sends each event only after the test saw the previous one printed by
/// the sandbox, so a proxy that buffered would never finish. Then curl:
/// origin-form and absolute-form (a client sending all to its proxy).
fn events_stream_one_by_one(who: As, alpn: &[&str], version: &str) {
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    let dir = TempDir::new("gateway-sse", who);
    let up = TlsUpstream::start(dir.path(), &[NAME], alpn);
    let policy = policy(
        &dir,
        who,
        &up,
        &format!(
            "[[profiles.t.gateways]]\nname = \"anthropic\"\nupstream = \"https://{NAME}:{}\"",
            up.port
        ),
    );
    let mut child = hutch_run(who, &dir, &up, &policy, SSE_SCRIPT)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| -> String {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(l) => l,
            Err(_) => panic!("no line from the sandbox while waiting for {what}"),
        }
    };
    assert_eq!(next("the status line"), "status 200 text/event-stream");
    for i in 1..=3 {
        // The upstream has not sent event i yet: nothing can be printed.
        assert!(
            rx.try_recv().is_err(),
            "a line arrived before event {i} was sent"
        );
        up.release(1);
        assert_eq!(
            next(&format!("event {i}")),
            format!("got data: {{\"n\":{i}}}")
        );
    }
    assert_eq!(next("the end of the stream"), "done");
    assert_eq!(
        next("the POST answer"),
        r#"{"ok":true,"path":"/v1/messages"}"#
    );
    assert_eq!(
        next("the absolute-form answer"),
        r#"{"ok":true,"path":"/v1/absolute"}"#
    );
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{status:?} {err}");
    reader.join().unwrap();

    let seen = up.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("GET", "/sse/3?beta=true")
    );
    assert_eq!(
        (seen[1].method.as_str(), seen[1].body.as_slice()),
        ("POST", &br#"{"model":"m"}"#[..])
    );
    for s in &seen {
        assert_eq!(s.version, version);
        assert_eq!(s.authority, format!("{NAME}:{}", up.port));
        assert!(s.header("proxy-connection").is_none());
    }
    let lines = audit(&dir, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let sse = lines
        .iter()
        .find(|l| field(l, "path") == "/sse/3")
        .expect("an audit line for the stream");
    assert_eq!(field(sse, "gateway"), "anthropic");
    assert_eq!(field(sse, "status"), 200);
    assert_eq!(field(sse, "host"), NAME);
    assert_eq!(field(sse, "method"), "GET");
    assert!(
        field(sse, "bytes_down").as_u64().unwrap() >= 3 * 25,
        "{sse}"
    );
    assert!(field(sse, "duration_ms").is_u64());
}

#[test]
fn rules_budgets_and_refusals_root() {
    rules_budgets_and_refusals(As::Root);
}

#[test]
fn rules_budgets_and_refusals_unprivileged() {
    rules_budgets_and_refusals(As::Nobody);
}

const RULES_SCRIPT: &str = r#"
g=http://127.0.0.1:3128
c() { curl -sS --max-time 10 -o /dev/null -w '%{http_code} %header{x-hutch-error}\n' "$@"; }
c -X POST -d x $g/model/v1/messages
c $g/model/v1/messages
c -X POST -d x $g/model/v1/models
c -X POST -d x --path-as-is $g/model/v1/messages/../../admin
c -X POST -d x $g/nope/v1/messages
c -X POST -d x $g/model/v1/messages/count_tokens
c -X POST -d x $g/model/v1/messages
c -X POST -d x $g/model/v1/messages
"#;

/// Only `POST /v1/messages`, three times: a GET, another path, a
/// dot-segment and an unknown gateway are refused with their reason, the
/// fourth POST meets the budget, and none of them reaches the upstream.
fn rules_budgets_and_refusals(who: As) {
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    let dir = TempDir::new("gateway-rules", who);
    let up = TlsUpstream::start(dir.path(), &[NAME], &["h2", "http/1.1"]);
    let policy = policy(
        &dir,
        who,
        &up,
        &format!(
            "[[profiles.t.gateways]]\nname = \"model\"\nupstream = \"https://{NAME}:{}/\"\n\
             methods = [\"POST\"]\npaths = [\"/v1/messages\"]\nmax_requests = 3",
            up.port
        ),
    );
    let out = hutch_run(who, &dir, &up, &policy, RULES_SCRIPT)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let got: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    let status: Vec<&str> = got.iter().map(|l| &l[..3]).collect();
    assert_eq!(
        status,
        ["200", "403", "403", "400", "404", "200", "200", "429"],
        "{got:#?}"
    );
    assert!(
        got[1].contains("denied: GET") && got[1].contains("method GET is not allowed"),
        "{}",
        got[1]
    );
    assert!(
        got[2].contains("path /v1/models is not under an allowed prefix"),
        "{}",
        got[2]
    );
    assert!(got[3].contains("'..' segment"), "{}", got[3]);
    assert!(got[4].contains("no gateway named \"nope\""), "{}", got[4]);
    assert!(
        got[7].contains("limit:") && got[7].contains("request budget (3 requests)"),
        "{}",
        got[7]
    );
    let seen = up.seen();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/v1/messages", "/v1/messages/count_tokens", "/v1/messages"]
    );
    // One connection, kept by the proxy, carried all three; HTTP/1.1
    // although the upstream offers h2 (the sandbox's requests are 1.1).
    assert!(seen.iter().all(|s| s.version == "HTTP/1.1"), "{seen:?}");
    assert_eq!(up.connections(), 1);
    let lines = audit(&dir, 8);
    let statuses: Vec<u64> = lines
        .iter()
        .map(|l| field(l, "status").as_u64().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [200, 403, 403, 400, 404, 200, 200, 429],
        "{lines:#?}"
    );
    let verdicts: Vec<&str> = lines
        .iter()
        .map(|l| field(l, "verdict").as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        [
            "allow", "deny", "deny", "invalid", "invalid", "allow", "allow", "limit"
        ]
    );
}
