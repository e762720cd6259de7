//! Secrets through gateways (issue 31), end to end with `hutch run`
//! `--secret` / `--gateway`: the sandbox holds a placeholder, the local
//! HTTPS upstream (test CA) receives the real value; an echo of the value
//! comes back as the placeholder (body and header, also with python3
//! urllib); the placeholder sent to a gateway whose host the secret is not
//! bound to is refused (403, `X-Hutch-Error`) and audited, and reaches no
//! upstream; no output or audit line holds the value. Root and 65534.

#[macro_use]
mod common;
#[path = "common/tls_upstream.rs"]
mod tls_upstream;

use std::process::Stdio;
use std::time::Duration;

use common::{As, TempDir, can_launch_as, hutch_command, stderr, stdout};
use tls_upstream::TlsUpstream;

const NAME: &str = "api.anthropic.com";
const OTHER: &str = "other.example";

fn fresh_value() -> String {
    let mut rnd = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut rnd))
        .unwrap();
    let hex: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
    format!("sk-ant-test-{hex}")
}

const SCRIPT: &str = r#"
g=http://127.0.0.1:3128
echo "placeholder=$ANTHROPIC_API_KEY"
c() { curl -sS --max-time 10 -D /tmp/h -o /tmp/b -w '%{http_code} %header{x-hutch-error}\n' "$@"; tr -d '\r' </tmp/h | grep -i '^x-echo' || true; cat /tmp/b; echo; }
c -X POST -H "x-api-key: $ANTHROPIC_API_KEY" -d '{"m":1}' $g/anthropic/v1/messages
c -X POST -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' $g/anthropic/echo
c -X POST -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' $g/other/v1/messages
python3 - <<'PY'
import os, urllib.request, urllib.error
req = urllib.request.Request("http://127.0.0.1:3128/anthropic/echo", data=b"{}", method="POST",
                             headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]})
try:
    urllib.request.urlopen(req, timeout=10)
except urllib.error.HTTPError as e:
    print("urllib", e.code, e.headers.get("x-echo"), e.read().decode())
PY
"#;

#[test]
fn a_secret_goes_to_its_host_only_and_never_comes_back_root() {
    a_secret_goes_to_its_host_only(As::Root);
}

#[test]
fn a_secret_goes_to_its_host_only_and_never_comes_back_unprivileged() {
    a_secret_goes_to_its_host_only(As::Nobody);
}

fn a_secret_goes_to_its_host_only(who: As) {
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    let dir = TempDir::new("gateway-secrets", who);
    let up = TlsUpstream::start(dir.path(), &[NAME, OTHER], &["h2", "http/1.1"]);
    let value = fresh_value();
    let audit = dir.path().join("audit.jsonl");
    let p = up.port;
    let args: Vec<String> = vec![
        "run".into(),
        "--quiet".into(),
        "--audit".into(),
        audit.display().to_string(),
        "--allow-host".into(),
        format!("{NAME}:{p}"),
        "--allow-host".into(),
        format!("{OTHER}:{p}"),
        "--allow-address".into(),
        "127.0.0.1/32".into(),
        "--resolve".into(),
        format!("{NAME}=127.0.0.1"),
        "--resolve".into(),
        format!("{OTHER}=127.0.0.1"),
        "--gateway".into(),
        format!("name=anthropic,upstream=https://{NAME}:{p}"),
        "--gateway".into(),
        format!("name=other,upstream=https://{OTHER}:{p}"),
        "--secret".into(),
        format!(
            "name=anthropic,from-env=HUTCH_TEST_KEY,host={NAME}:{p},env=ANTHROPIC_API_KEY,\
             inject=header:x-api-key"
        ),
        "--".into(),
        "sh".into(),
        "-c".into(),
        SCRIPT.into(),
    ];
    let out = hutch_command(who)
        .args(&args)
        .current_dir(dir.path())
        .env("SSL_CERT_FILE", &up.ca_file)
        .env("HUTCH_TEST_KEY", &value)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{so}\n{se}");
    assert!(!so.contains(&value) && !se.contains(&value), "{so}\n{se}");
    let lines: Vec<&str> = so.lines().collect();
    let placeholder = lines[0].strip_prefix("placeholder=").unwrap();
    assert!(!placeholder.is_empty() && placeholder != value);

    // 1. Injected: the upstream saw the value, not the placeholder.
    assert!(lines[1].starts_with("200 "), "{so}");
    let seen = up.seen();
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].header("x-api-key"), Some(value.as_str()));
    // 2. The echo (an error quoting the key) comes back as the
    // placeholder, in the header and in the body.
    // (line 2 is the first answer's body)
    assert!(lines[3].starts_with("401 "), "{so}");
    assert_eq!(lines[4], format!("x-echo: {placeholder}"), "{so}");
    assert!(lines[5].contains(placeholder), "{so}");
    // 3. The placeholder to a host it is not bound to: refused.
    assert!(lines[6].starts_with("403 secret: "), "{so}");
    assert!(
        lines[6].contains(&format!(
            "the placeholder of secret anthropic may not be sent to {OTHER}:{p}"
        )),
        "{so}"
    );
    assert!(!lines[6].contains(placeholder), "{so}");
    // 4. python3 urllib sees the echo scrubbed too.
    let py = lines
        .iter()
        .find(|l| l.starts_with("urllib "))
        .expect("{so}");
    assert!(
        py.starts_with(&format!("urllib 401 {placeholder} ")) && py.contains(placeholder),
        "{py}"
    );
    let seen = up.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.iter().all(|s| s.authority.starts_with(NAME)),
        "{seen:?}"
    );

    // The audit: the secret's name on the brokered lines, the refusal as
    // a denial, the value nowhere.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let t = std::fs::read_to_string(&audit).unwrap_or_default();
        if t.matches("\"via\":\"gateway\"").count() >= 4 || std::time::Instant::now() > deadline {
            break t;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!text.contains(&value), "{text}");
    let gw: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.contains("\"via\":\"gateway\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(gw.len(), 4, "{text}");
    let get = |l: &serde_json::Value, k: &str| l.get(k).cloned().unwrap_or_default();
    assert_eq!(get(&gw[0], "secrets"), serde_json::json!(["anthropic"]));
    assert_eq!(get(&gw[0], "status"), 200);
    let refused = gw
        .iter()
        .find(|l| get(l, "gateway") == "other")
        .expect("the refusal's line");
    assert_eq!(get(refused, "verdict"), "deny");
    assert_eq!(get(refused, "status"), 403);
}
