//! The egress proxy from inside a sandbox (`hutch run --allow-host ...`):
//! programs honouring the proxy variables and the Unix door reach allowed
//! hosts; direct TCP and UDP fail; denials carry their reason.

#[macro_use]
mod common;
mod proxy_support;

use std::process::Output;

use common::{As, TempDir, caller, can_launch_as, hutch_as};
use proxy_support::*;

fn run_in_sandbox(who: As, dir: &TempDir, args: &[&str], script: &str) -> Output {
    let mut all = vec!["run", "--quiet"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", script]);
    hutch_as(who, dir.path(), &all)
}

#[test]
fn egress_from_a_root_launched_sandbox() {
    egress_through_the_proxy_only(As::Root, "proxy");
}

#[test]
fn egress_from_an_unprivileged_sandbox() {
    egress_through_the_proxy_only(As::Nobody, "proxy");
}

// The same with `--egress-mode transparent`: the doors behave exactly as
// in proxy mode, and what went around them is still refused (a connect to
// the host's loopback port is captured and reset, and audited).
#[test]
fn egress_from_a_root_launched_sandbox_transparent() {
    egress_through_the_proxy_only(As::Root, "transparent");
}

#[test]
fn egress_from_an_unprivileged_sandbox_transparent() {
    egress_through_the_proxy_only(As::Nobody, "transparent");
}

fn egress_through_the_proxy_only(who: As, mode: &str) {
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    let up = upstream(0);
    let dir = TempDir::new("proxy", who);
    let audit = dir.path().join("audit.jsonl");
    let allow = format!("good.test:{}", up.port);
    let audit_s = audit.display().to_string();
    let script = format!(
        r#"
set -u
u=http://good.test:{port}
echo "A:$(curl -sS --max-time 5 $u/env-absolute)"
echo "B:$(curl -sS --max-time 5 -p $u/env-connect)"
echo "C:$(curl -sS --max-time 5 --unix-socket /run/hutch/proxy.sock $u/unix-door)"
echo "D:$(curl -sS --max-time 5 -o /dev/null -w '%{{http_connect}}' -p http://other.test:{port}/ 2>/dev/null)"
curl -sS --max-time 3 --noproxy '*' http://127.0.0.1:{port}/direct >/dev/null 2>&1; echo "E:$?"
python3 - <<'EOF'
import socket
for fam, addr in ((socket.AF_INET, ("1.1.1.1", 443)), (socket.AF_INET, ("127.0.0.1", {port}))):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect(addr)
        # Transparent mode accepts on the captured port, then resets.
        print("F:connected", addr) if s.recv(1) else print("F:refused eof")
    except OSError as e:
        print("F:refused", e.errno)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("8.8.8.8", 53)); print("G:sent")
except OSError as e:
    print("G:refused", e.errno)
EOF
echo "H:$HTTPS_PROXY:$http_proxy"
"#,
        port = up.port
    );
    let out = run_in_sandbox(
        who,
        &dir,
        &[
            "--allow-host",
            &allow,
            "--resolve",
            "good.test=127.0.0.1",
            "--allow-address",
            "127.0.0.1",
            "--audit",
            &audit_s,
            "--egress-mode",
            mode,
        ],
        &script,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = |tag: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("no {tag} line\nstdout:\n{stdout}\nstderr:\n{stderr}"))
            .to_string()
    };
    assert_eq!(line("A:"), "upstream-ok /env-absolute", "{stderr}");
    assert_eq!(line("B:"), "upstream-ok /env-connect", "{stderr}");
    assert_eq!(line("C:"), "upstream-ok /unix-door", "{stderr}");
    assert_eq!(line("D:"), "403");
    assert_ne!(line("E:"), "0", "direct TCP to the host's loopback worked");
    assert!(
        stdout
            .lines()
            .filter(|l| l.starts_with("F:refused"))
            .count()
            == 2,
        "direct connect() worked:\n{stdout}"
    );
    assert!(line("G:").starts_with("refused"), "UDP left the sandbox");
    assert_eq!(line("H:"), "http://127.0.0.1:3128:http://127.0.0.1:3128");
    // Only the three requests through the proxy reached the upstream.
    assert_eq!(
        up.hits.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "{stdout}"
    );
    let text = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let captured = if mode == "transparent" { 2 } else { 0 };
    assert_eq!(lines.len(), 4 + captured, "{text}");
    let reset: Vec<_> = lines
        .iter()
        .filter(|l| l["door"] == "transparent")
        .collect();
    assert_eq!(reset.len(), captured, "{text}");
    assert!(
        reset
            .iter()
            .all(|l| l["verdict"] == "deny" && l["destination"] == format!("127.0.0.1:{}", up.port)),
        "{text}"
    );
    let doors: Vec<&str> = lines.iter().map(|l| l["door"].as_str().unwrap()).collect();
    assert_eq!(doors.iter().filter(|d| **d == "unix").count(), 1, "{text}");
    assert!(
        lines
            .iter()
            .all(|l| l["sandbox"].as_str().unwrap().len() == 16)
    );
    // The private directory of the Unix door is gone after the run.
    for l in &lines {
        let id = l["sandbox"].as_str().unwrap();
        let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(std::path::PathBuf::from);
        for base in [std::env::temp_dir()].into_iter().chain(runtime) {
            let d = base.join(format!("hutch-proxy-{id}"));
            assert!(!d.exists(), "door directory left behind: {}", d.display());
        }
    }
}

#[test]
fn egress_policy_file_profile_and_bad_rules() {
    // Needs no particular identity: root in CI, else the unprivileged path.
    let who = caller();
    let up = upstream(0);
    let dir = TempDir::new("proxy-policy", who);
    let file = dir.path().join("egress.toml");
    std::fs::write(
        &file,
        format!(
            "[profiles.agent]\nallow = [\"agent.test:{0}\"]\nallow_address = [\"127.0.0.1\"]\n\
             resolve = {{ \"agent.test\" = \"127.0.0.1\" }}\n",
            up.port
        ),
    )
    .unwrap();
    let f = file.display().to_string();
    let script = format!(
        "curl -sS --max-time 5 http://agent.test:{0}/p; echo; curl -s -o /dev/null -w '%{{http_code}}' http://x.test:{0}/",
        up.port
    );
    let out = run_in_sandbox(
        who,
        &dir,
        &["--egress-policy", &f, "--egress-profile", "agent"],
        &script,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("upstream-ok /p"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.ends_with("403"), "{stdout}");
    // A bad rule fails before anything runs, naming the entry.
    let out = run_in_sandbox(who, &dir, &["--allow-host", "*.127.0.0.1"], "true");
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("network.allow[0]"), "{err}");
}
