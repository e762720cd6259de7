//! Secrets through a gateway, end to end (issue 31): `hutch run` with a
//! policy profile holding the gateway and the secret's source, a local
//! HTTPS upstream under a real-looking name (test CA trusted by the proxy
//! through `SSL_CERT_FILE`), curl and python3 urllib inside holding only
//! the placeholder. The upstream sees the real value; an echo of it comes
//! back as the placeholder; another secret's placeholder sent to this
//! host is refused (403, X-Hutch-Error) and audited; the value is in no
//! output, audit line or status line. Root and uid 65534.

#[macro_use]
mod common;
#[path = "common/tls_upstream.rs"]
mod tls_upstream;

use std::process::Stdio;

use common::{As, TempDir, hutch_command, identities, stderr, stdout, write_as};
use tls_upstream::TlsUpstream;

const NAME: &str = "api.anthropic.com";
const OTHER: &str = "other.test";

fn fresh_value() -> String {
    let mut b = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!(
        "sk-ant-e2e-{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

/// A policy file with one profile: both names allowed at the upstream's
/// port and resolved to loopback, a gateway to each, and a secret bound
/// to each (sources: hutch's environment).
fn policy(dir: &TempDir, who: As, up: &TlsUpstream) -> String {
    let path = dir.path().join("policy.toml");
    let port = up.port;
    let text = format!(
        r#"[profiles.agent]
allow = ["{NAME}:{port}", "{OTHER}:{port}"]
allow_address = ["127.0.0.1/32"]
resolve = {{ "{NAME}" = "127.0.0.1", "{OTHER}" = "127.0.0.1" }}
audit = "{audit}"
[[profiles.agent.gateways]]
name = "anthropic"
upstream = "https://{NAME}:{port}"
env = ["ANTHROPIC_BASE_URL"]
[[profiles.agent.gateways]]
name = "other"
upstream = "https://{OTHER}:{port}"
[[profiles.agent.secrets]]
name = "anthropic"
env = "ANTHROPIC_API_KEY"
from = {{ env = "HUTCH_E2E_MODEL_KEY" }}
hosts = ["{NAME}:{port}"]
[[profiles.agent.secrets]]
name = "other"
env = "OTHER_KEY"
from = {{ env = "HUTCH_E2E_OTHER_KEY" }}
hosts = ["{OTHER}:{port}"]
"#,
        audit = dir.path().join("audit.jsonl").display(),
    );
    write_as(&path, &text, who);
    path.display().to_string()
}

const SCRIPT: &str = r#"
echo "placeholder $ANTHROPIC_API_KEY"
echo "post $(curl -sS --max-time 10 -X POST -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' "$ANTHROPIC_BASE_URL/v1/messages")"
echo "echo $(curl -sS --max-time 10 -H "x-api-key: $ANTHROPIC_API_KEY" "$ANTHROPIC_BASE_URL/echo")"
echo "foreign $(curl -s --max-time 10 -o /dev/null -D - -H "x-api-key: $OTHER_KEY" "$ANTHROPIC_BASE_URL/v1/messages" | tr -d '\r' | grep -iE '^(HTTP|x-hutch-error)' | tr '\n' ' ')"
python3 - <<'PY'
import os, urllib.request
req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=b"{}",
                             headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]}, method="POST")
with urllib.request.urlopen(req, timeout=10) as r:
    print("urllib", r.status, r.read().decode())
PY
"#;

#[test]
fn the_upstream_gets_the_value_and_the_sandbox_only_the_placeholder() {
    for who in identities() {
        let dir = TempDir::new("secret-gateway", who);
        let up = TlsUpstream::start(dir.path(), &[NAME, OTHER], &["h2", "http/1.1"]);
        let policy = policy(&dir, who, &up);
        let (value, other_value) = (fresh_value(), fresh_value());
        let status = dir.path().join("status.jsonl");
        let o = hutch_command(who)
            .args([
                "run",
                "--quiet",
                "--json",
                "--status-file",
                status.to_str().unwrap(),
                "--egress-policy",
                &policy,
                "--",
                "sh",
                "-c",
                SCRIPT,
            ])
            .current_dir(dir.path())
            .env("SSL_CERT_FILE", &up.ca_file)
            .env("HUTCH_E2E_MODEL_KEY", &value)
            .env("HUTCH_E2E_OTHER_KEY", &other_value)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(o.status.success(), "{who:?}: {out} {err}");
        let line = |tag: &str| -> String {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{tag} ")))
                .unwrap_or_else(|| panic!("{who:?}: no {tag:?} line in {out}"))
                .to_string()
        };
        let placeholder = line("placeholder");
        assert!(
            placeholder.starts_with("hutch-placeholder-anthropic-"),
            "{placeholder}"
        );
        assert_eq!(line("post"), r#"{"ok":true,"path":"/v1/messages"}"#);
        assert_eq!(line("urllib"), r#"200 {"ok":true,"path":"/v1/messages"}"#);
        // The upstream's echo of the key comes back as the placeholder.
        let echo = line("echo");
        assert!(echo.contains(&placeholder), "{who:?}: {echo}");
        // Another secret's placeholder towards this host: refused here.
        let foreign = line("foreign");
        assert!(foreign.contains(" 403"), "{who:?}: {foreign}");
        assert!(
            foreign.to_ascii_lowercase().contains("x-hutch-error"),
            "{foreign}"
        );

        // The upstream saw the value, never a placeholder, and not the
        // refused request.
        let seen = up.seen();
        let keys: Vec<&str> = seen.iter().filter_map(|s| s.header("x-api-key")).collect();
        assert_eq!(keys.len(), 3, "{who:?}: {seen:?}");
        assert!(keys.iter().all(|k| *k == value), "{who:?}: {keys:?}");
        assert!(
            seen.iter()
                .all(|s| !format!("{s:?}").contains("hutch-placeholder"))
        );

        // The refusal is audited, naming the secret, and no line, output or
        // status line holds either value.
        let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
        let refused: Vec<&str> = audit
            .lines()
            .filter(|l| l.contains("\"status\":403"))
            .collect();
        assert_eq!(refused.len(), 1, "{who:?}: {audit}");
        assert!(refused[0].contains("secret other"), "{who:?}: {audit}");
        for (what, text) in [
            ("stdout", out.clone()),
            ("stderr", err.clone()),
            ("audit", audit),
            ("status", std::fs::read_to_string(&status).unwrap()),
        ] {
            assert!(
                !text.contains(&value),
                "{who:?}: the value is in {what}: {text}"
            );
            assert!(
                !text.contains(&other_value),
                "{who:?}: the other value is in {what}"
            );
        }
    }
}
