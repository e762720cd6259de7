//! `--egress-mode transparent` from inside a sandbox: programs that ignore
//! the proxy variables (node's `fetch()` and `https.get`, `curl --noproxy`,
//! Java's `HttpClient`, a C client with getaddrinfo + connect, git over
//! ssh) reach allowed hosts by name; denied names do not resolve; literal
//! addresses, other ports and UDP go nowhere; every decision is audited
//! with `door: transparent`. Upstreams are loopback servers the test
//! starts; `--resolve`/`--allow-address` point the names at them.

#[macro_use]
mod common;
mod proxy_support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{As, TempDir, can_launch_as, have, hutch_as, identities};
use proxy_support::*;
use serde_json::Value;

/// A TLS upstream (node's https server with a throwaway self-signed
/// certificate for `tls.test`), answering `tls-ok PATH`.
struct TlsUpstream {
    child: Child,
    port: u16,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_upstream(dir: &Path) -> TlsUpstream {
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=tls.test",
            "-addext",
            "subjectAltName=DNS:tls.test",
            "-keyout",
        ])
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success(), "openssl req failed");
    for f in ["key.pem", "cert.pem"] {
        common::own_as(&dir.join(f), As::Nobody);
        std::fs::set_permissions(
            dir.join(f),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
    }
    let server = r#"
const fs = require("fs"), https = require("https");
const s = https.createServer({key: fs.readFileSync(process.argv[1]), cert: fs.readFileSync(process.argv[2])},
  (req, res) => { res.setHeader("Connection", "close"); res.end("tls-ok " + req.url); });
s.listen(0, "127.0.0.1", () => console.log("port " + s.address().port));
"#;
    let mut child = Command::new("node")
        .arg("-e")
        .arg(server)
        .arg(dir.join("key.pem"))
        .arg(dir.join("cert.pem"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("port ")
        .unwrap_or_else(|| panic!("tls upstream said {line:?}"))
        .parse()
        .unwrap();
    TlsUpstream { child, port }
}

const C_CLIENT: &str = r#"
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct addrinfo hints = {0}, *ai;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(argv[1], argv[2], &hints, &ai);
    if (e) { printf("getaddrinfo: %s\n", gai_strerror(e)); return 2; }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen)) { perror("connect"); return 3; }
    char req[256];
    snprintf(req, sizeof req, "GET /c HTTP/1.0\r\nHost: %s\r\n\r\n", argv[1]);
    write(fd, req, strlen(req));
    char buf[4096]; ssize_t n, all = 0;
    while ((n = read(fd, buf + all, sizeof buf - 1 - all)) > 0) all += n;
    buf[all] = 0;
    char *body = strstr(buf, "\r\n\r\n");
    printf("%s\n", body ? body + 4 : "(no body)");
    return 0;
}
"#;

const JAVA_CLIENT: &str = r#"
import java.net.URI;
import java.net.http.*;
public class Fetch {
    public static void main(String[] a) throws Exception {
        var c = HttpClient.newHttpClient();
        var r = c.send(HttpRequest.newBuilder(URI.create(a[0])).build(), HttpResponse.BodyHandlers.ofString());
        System.out.println(r.statusCode() + " " + r.body());
    }
}
"#;

#[test]
fn transparent_egress_as_root() {
    transparent_egress(As::Root);
}

#[test]
fn transparent_egress_unprivileged() {
    transparent_egress(As::Nobody);
}

fn transparent_egress(who: As) {
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    for tool in [
        "node", "java", "gcc", "openssl", "curl", "getent", "python3",
    ] {
        require!(have(tool), format!("{tool} is needed (see .ci/run)"));
    }
    let dir = TempDir::new("transparent", who);
    let up = upstream(0);
    let tls = tls_upstream(dir.path());
    let client = dir.path().join("client");
    std::fs::write(dir.path().join("client.c"), C_CLIENT).unwrap();
    let cc = Command::new("gcc")
        .arg("-o")
        .arg(&client)
        .arg(dir.path().join("client.c"))
        .status()
        .unwrap();
    assert!(cc.success());
    std::fs::write(dir.path().join("Fetch.java"), JAVA_CLIENT).unwrap();
    for f in ["client", "client.c", "Fetch.java"] {
        common::own_as(&dir.path().join(f), who);
    }
    let audit = dir.path().join("audit.jsonl");
    let d = dir.path().display();
    let (p, t) = (up.port, tls.port);
    let script = format!(
        r#"
set -u
cd {d}
export NODE_EXTRA_CA_CERTS={d}/cert.pem
echo "resolv:$(grep -c '^nameserver 127.0.0.1$' /etc/resolv.conf)"
echo "getent-good:$(getent hosts good.test | cut -d' ' -f1)"
getent hosts denied.test >/dev/null; echo "getent-denied:$?"
echo "curl:$(curl -sS --max-time 10 --noproxy '*' http://good.test:{p}/curl)"
echo "node-fetch:$(node -e 'fetch("https://tls.test:{t}/fetch").then(r => r.text()).then(console.log, e => console.log("error", e.cause && e.cause.code))')"
echo "node-https:$(node -e 'require("https").get("https://tls.test:{t}/https", r => {{ let b = ""; r.on("data", d => b += d); r.on("end", () => console.log(b)); }}).on("error", e => console.log("error", e.code))')"
echo "node-denied:$(node -e 'fetch("https://denied.test:{t}/").then(r => console.log(r.status), e => console.log("error", e.cause && e.cause.code))')"
echo "c:$(./client good.test {p})"
echo "java:$(java -Xshare:off -XX:TieredStopAtLevel=1 Fetch.java http://good.test:{p}/java 2>&1 | tail -1)"
curl -sS --max-time 5 --noproxy '*' http://good.test:{t}/other-port >/dev/null 2>&1; echo "wrong-port:$?"
curl -sSk --max-time 5 --noproxy '*' --connect-to other.test:{t}:tls.test:{t} https://other.test:{t}/sni >/dev/null 2>&1; echo "sni-mismatch:$?"
curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{p}/literal >/dev/null 2>&1; echo "literal-loopback:$?"
curl -sS --max-time 5 --noproxy '*' http://10.0.0.1:{p}/literal >/dev/null 2>&1; echo "literal-private:$?"
python3 - <<'EOF'
import socket
for addr in (("8.8.8.8", 53), ("10.0.0.1", 53)):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(b"x", addr); print("udp:sent", addr)
    except OSError as e:
        print("udp:refused", e.errno)
EOF
"#
    );
    let allow_good = format!("good.test:{p}");
    let allow_tls = format!("tls.test:{t}");
    let audit_s = audit.display().to_string();
    let out = hutch_as(
        who,
        dir.path(),
        &[
            "run",
            "--quiet",
            "--egress-mode",
            "transparent",
            "--allow-host",
            &allow_good,
            "--allow-host",
            &allow_tls,
            "--resolve",
            "good.test=127.0.0.1",
            "--resolve",
            "tls.test=127.0.0.1",
            "--allow-address",
            "127.0.0.1",
            "--audit",
            &audit_s,
            "--timeout",
            "120s",
            "--",
            "sh",
            "-c",
            &script,
        ],
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
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(line("resolv:"), "1", "{ctx}");
    assert!(line("getent-good:").starts_with("198.18."), "{ctx}");
    assert_ne!(line("getent-denied:"), "0", "{ctx}");
    assert_eq!(line("curl:"), "upstream-ok /curl", "{ctx}");
    assert_eq!(line("node-fetch:"), "tls-ok /fetch", "{ctx}");
    assert_eq!(line("node-https:"), "tls-ok /https", "{ctx}");
    assert_eq!(line("node-denied:"), "error ENOTFOUND", "{ctx}");
    assert_eq!(line("c:"), "upstream-ok /c", "{ctx}");
    assert_eq!(line("java:"), "200 upstream-ok /java", "{ctx}");
    assert_ne!(line("wrong-port:"), "0", "{ctx}");
    assert_ne!(line("sni-mismatch:"), "0", "{ctx}");
    assert_ne!(line("literal-loopback:"), "0", "{ctx}");
    assert_ne!(line("literal-private:"), "0", "{ctx}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("udp:refused"))
            .count(),
        2,
        "{ctx}"
    );
    // Only the named, allowed connections reached the plain upstream
    // (curl, the C client, java).
    assert_eq!(
        up.hits.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "{ctx}"
    );

    let lines = audit_lines(&audit, 1);
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(lines.iter().all(|l| l["door"] == "transparent"), "{text}");
    let tcp = |host: &str, verdict: &str| {
        lines
            .iter()
            .filter(|l| l["method"] == "TCP" && l["host"] == host && l["verdict"] == verdict)
            .count()
    };
    assert_eq!(tcp("good.test", "allow"), 3, "{text}");
    assert_eq!(tcp("tls.test", "allow"), 2, "{text}");
    // tls.test's address asked, in its ClientHello, for another name.
    assert_eq!(tcp("tls.test", "deny"), 1, "{text}");
    assert!(
        lines.iter().any(|l| l["verdict"] == "deny"
            && l["error"]
                .as_str()
                .is_some_and(|e| e.contains("TLS server name \"other.test\""))),
        "{text}"
    );
    // good.test on tls.test's port: captured, decided, refused.
    assert_eq!(tcp("good.test", "deny"), 1, "{text}");
    for l in lines
        .iter()
        .filter(|l| l["method"] == "TCP" && l["host"].is_string())
    {
        let dest = l["destination"].as_str().unwrap();
        assert!(dest.starts_with("198.18."), "{l}");
        if l["verdict"] == "allow" {
            assert_eq!(l["address"], "127.0.0.1", "{l}");
        }
    }
    // The literal loopback address: captured and refused, no name.
    let literal = lines
        .iter()
        .filter(|l| l["method"] == "TCP" && l["destination"] == format!("127.0.0.1:{p}"))
        .collect::<Vec<&Value>>();
    assert_eq!(literal.len(), 1, "{text}");
    assert_eq!(literal[0]["verdict"], "deny");
    let dns = |host: &str, verdict: &str| {
        lines
            .iter()
            .filter(|l| l["method"] == "DNS" && l["host"] == host && l["verdict"] == verdict)
            .count()
    };
    // One line when a name gets its address, one per refused query.
    assert_eq!(dns("good.test", "allow"), 1, "{text}");
    assert_eq!(dns("tls.test", "allow"), 1, "{text}");
    assert!(dns("denied.test", "deny") >= 2, "{text}");
}

/// Where the kernel lacks what transparent egress needs, the run fails
/// before the workload with one line naming the call and the way out;
/// here a capture port that the sandbox's own TCP door holds is refused
/// up front instead, so check the CLI's refusal of a bad mode and the
/// `hutch check` line.
#[test]
fn transparent_mode_is_checked_and_reported() {
    let dir = TempDir::new("transparent-check", common::caller());
    let out = hutch_as(
        common::caller(),
        dir.path(),
        &["run", "--egress-mode", "sideways", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(125), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(
        err.contains("--egress-mode: expected proxy or transparent"),
        "{err}"
    );
    let check = hutch_as(common::caller(), dir.path(), &["check"]);
    let text = common::stdout(&check) + &common::stderr(&check);
    assert!(text.contains("transparent egress"), "{text}");
}

/// A throwaway sshd on host loopback (its own config and host key, not
/// the system service) that lets the test's key in as root, and a bare
/// repository with one commit for `git clone` over ssh.
struct Sshd {
    child: Child,
    port: u16,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sshd(dir: &Path, who: As) -> Sshd {
    for (key, owner) in [("hostkey", As::Root), ("id", who)] {
        run_ok(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key)),
        );
        common::own_as(&dir.join(key), owner);
    }
    std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys")).unwrap();
    // sshd's privilege separation directory (the Debian service makes it).
    std::fs::create_dir_all("/run/sshd").unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let d = dir.display();
    std::fs::write(
        dir.join("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/hostkey\nAuthorizedKeysFile {d}/authorized_keys\n\
             StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             PidFile none\nAllowUsers root\nPermitRootLogin prohibit-password\n"
        ),
    )
    .unwrap();
    let mut child = Command::new("/usr/sbin/sshd")
        .args(["-D", "-e", "-f"])
        .arg(dir.join("sshd_config"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "sshd exited early");
        if line.contains("Server listening on") {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut sink);
    });
    let repo = dir.join("repo.git");
    run_ok(
        Command::new("git")
            .args(["init", "-q", "-b", "main", "--bare"])
            .arg(&repo),
    );
    let work = dir.join("seed");
    run_ok(
        Command::new("git")
            .args(["init", "-q", "-b", "main"])
            .arg(&work),
    );
    std::fs::write(work.join("README"), "over ssh\n").unwrap();
    let git = |args: &[&str]| {
        run_ok(
            Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .arg("-C")
                .arg(&work)
                .args(args),
        )
    };
    git(&["add", "README"]);
    git(&["commit", "-qm", "seed"]);
    git(&[
        "push",
        "-q",
        &repo.display().to_string(),
        "HEAD:refs/heads/main",
    ]);
    Sshd { child, port }
}

#[test]
fn git_over_ssh_as_root() {
    git_over_ssh(As::Root);
}

#[test]
fn git_over_ssh_unprivileged() {
    git_over_ssh(As::Nobody);
}

fn git_over_ssh(who: As) {
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    require!(common::is_root(), "the test's sshd logs its key in as root");
    require!(
        Path::new("/usr/sbin/sshd").exists(),
        "sshd (Debian openssh-server, see .ci/run) is needed"
    );
    let dir = TempDir::new("transparent-ssh", who);
    let sshd = sshd(dir.path(), who);
    let other = upstream(0);
    let audit = dir.path().join("audit.jsonl");
    let d = dir.path().display();
    let (p, q) = (sshd.port, other.port);
    let ssh = format!(
        "ssh -i {d}/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ConnectTimeout=5"
    );
    let script = format!(
        r#"
export GIT_SSH_COMMAND="{ssh}"
git clone -q ssh://root@git.test:{p}{d}/repo.git /tmp/clone 2>&1; echo "clone:$?"
echo "readme:$(cat /tmp/clone/README)"
git clone -q ssh://root@git.test:{q}{d}/repo.git /tmp/denied 2>/dev/null; echo "denied:$?"
"#
    );
    let allow_git = format!("git.test:{p}");
    let allow_other = format!("other.test:{q}");
    let audit_s = audit.display().to_string();
    let out = hutch_as(
        who,
        dir.path(),
        &[
            "run",
            "--quiet",
            "--egress-mode",
            "transparent",
            "--allow-host",
            &allow_git,
            "--allow-host",
            &allow_other,
            "--resolve",
            "git.test=127.0.0.1",
            "--allow-address",
            "127.0.0.1",
            "--audit",
            &audit_s,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = format!(
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("clone:0\n"), "{ctx}");
    assert!(stdout.contains("readme:over ssh\n"), "{ctx}");
    assert!(
        !stdout.contains("denied:0\n") && stdout.contains("denied:"),
        "{ctx}"
    );
    let lines = audit_lines(&audit, 1);
    let text = std::fs::read_to_string(&audit).unwrap();
    let tcp = |verdict: &str, port: u16| {
        lines
            .iter()
            .filter(|l| {
                l["door"] == "transparent"
                    && l["method"] == "TCP"
                    && l["host"] == "git.test"
                    && l["port"] == port
                    && l["verdict"] == verdict
            })
            .count()
    };
    assert_eq!(tcp("allow", p), 1, "{text}");
    assert_eq!(tcp("deny", q), 1, "{text}");
    assert_eq!(other.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// The workload of the stalled-handshake tests: N connections to
/// good.test, each sending only a TLS record header that announces a
/// 512-byte ClientHello which never comes; it reports how many it made and
/// holds them open.
const STALLER: &str = r#"
import signal, socket, sys
n, port = int(sys.argv[1]), int(sys.argv[2])
addr = socket.gethostbyname("good.test")
held = []
for _ in range(n):
    s = socket.create_connection((addr, port))
    try:
        s.sendall(b"\x16\x03\x01\x02\x00")
    except OSError:
        pass  # reset by the proxy already: over its cap
    held.append(s)
print("stalled", len(held), flush=True)
signal.pause()
"#;

/// A `hutch run` with transparent egress to `up` (limits from a policy
/// file) running [`STALLER`] with `n` connections, once it said they are
/// all made.
struct Stalling {
    hutch: Child,
}

impl Stalling {
    fn start(who: As, dir: &Path, up: &Upstream, limits: &str, n: usize) -> Stalling {
        let policy = dir.join("policy.toml");
        common::write_as(
            &policy,
            &format!(
                "[profiles.t]\nallow = [\"good.test:{p}\"]\nallow_address = [\"127.0.0.1\"]\n\
                 resolve = {{ \"good.test\" = \"127.0.0.1\" }}\n[profiles.t.limits]\n{limits}\n",
                p = up.port
            ),
            who,
        );
        common::write_as(&dir.join("staller.py"), STALLER, who);
        let mut hutch = common::hutch_command(who)
            .args([
                "run",
                "--quiet",
                "--egress-mode",
                "transparent",
                "--egress-policy",
            ])
            .arg(&policy)
            .arg("--audit")
            .arg(dir.join("audit.jsonl"))
            .args(["--", "python3", "staller.py", &n.to_string()])
            .arg(up.port.to_string())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Read on a thread, so that a workload that never reports fails
        // the test at a deadline instead of hanging it.
        let stdout = hutch.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut s = Stalling { hutch };
        let line = rx.recv_timeout(Duration::from_secs(60));
        if line.as_deref().map(str::trim) != Ok(format!("stalled {n}").as_str()) {
            s.stop();
            panic!("the workload said {line:?}, not \"stalled {n}\" (within 60 s)");
        }
        s
    }

    /// CPU time (user + system, all threads) of the hutch process, which
    /// runs the transparent proxy on a thread of its own.
    fn cpu(&self) -> std::time::Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.hutch.id())).unwrap();
        // Fields after the command name (which ends with the last ')').
        let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks: u64 = rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap();
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .unwrap()
            .unwrap() as u64;
        std::time::Duration::from_millis(ticks * 1000 / hz)
    }

    fn stop(&mut self) {
        let _ = self.hutch.kill();
        let _ = self.hutch.wait();
    }
}

impl Drop for Stalling {
    fn drop(&mut self) {
        self.stop();
    }
}

/// 200 captured connections whose ClientHello stalls after the record
/// header cost the supervisor nothing while they wait: the read waits on
/// the socket's readiness (before, each was peeked every 2 ms until the
/// handshake timeout: about 6 % of a core here).
#[test]
fn stalled_client_hellos_cost_the_supervisor_no_cpu() {
    const N: usize = 200;
    const WINDOW: std::time::Duration = std::time::Duration::from_secs(3);
    let who = As::Nobody;
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    require!(have("python3"), "python3 is needed (see .ci/run)");
    let dir = TempDir::new("transparent-stall", who);
    let up = upstream(0);
    let stalling = Stalling::start(
        who,
        dir.path(),
        &up,
        "max_pending_handshakes = 256\nhandshake_timeout = \"60s\"",
        N,
    );
    // Every connection was dialled upstream: each is now waiting for the
    // rest of its ClientHello.
    wait_until(Duration::from_secs(30), "every connection dialled", || {
        up.hits.load(std::sync::atomic::Ordering::SeqCst) == N
    });
    let before = stalling.cpu();
    // A measured interval, not a wait for something to happen.
    std::thread::sleep(WINDOW);
    let used = stalling.cpu() - before;
    let share = used.as_secs_f64() / WINDOW.as_secs_f64();
    eprintln!(
        "{N} stalled ClientHellos: the supervisor used {used:?} of CPU in {WINDOW:?} ({:.2} % of a core)",
        share * 100.0
    );
    assert!(
        share < 0.02,
        "{N} stalled ClientHellos cost the supervisor {used:?} of CPU in {WINDOW:?} ({:.1} % of a core)",
        share * 100.0
    );
}

/// Over `max_pending_handshakes` captured connections whose first bytes
/// are still awaited, the next one is reset at once (never dialled) and
/// audited as a `limit`, as root and as uid 65534.
#[test]
fn pending_handshakes_over_the_cap_are_refused_and_audited() {
    const CAP: usize = 8;
    const N: usize = 12;
    require!(have("python3"), "python3 is needed (see .ci/run)");
    for who in identities() {
        let dir = TempDir::new("transparent-pending", who);
        let up = upstream(0);
        let audit = dir.path().join("audit.jsonl");
        let _stalling = Stalling::start(
            who,
            dir.path(),
            &up,
            &format!("max_pending_handshakes = {CAP}\nhandshake_timeout = \"60s\""),
            N,
        );
        let refused = || {
            std::fs::read_to_string(&audit)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|l| {
                    l["door"] == "transparent"
                        && l["method"] == "TCP"
                        && l["host"] == "good.test"
                        && l["verdict"] == "limit"
                        && l["error"]
                            .as_str()
                            .is_some_and(|e| e.contains("(limit 8, max_pending_handshakes)"))
                })
                .count()
        };
        wait_until(
            Duration::from_secs(30),
            &format!("{} limit lines in {}", N - CAP, audit.display()),
            || refused() >= N - CAP,
        );
        wait_until(Duration::from_secs(30), "the admitted ones dialled", || {
            up.hits.load(std::sync::atomic::Ordering::SeqCst) >= CAP
        });
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        assert_eq!(refused(), N - CAP, "{who:?}: {text}");
        // Only the admitted ones reached the upstream.
        assert_eq!(
            up.hits.load(std::sync::atomic::Ordering::SeqCst),
            CAP,
            "{who:?}: {text}"
        );
    }
}

/// A connection to an allowed name on a port no rule allows (nothing
/// captures it: the sandbox's kernel refuses it) is audited like every
/// other refusal: one `deny` line per attempt, with the name, the port
/// and why, as root and as uid 65534. Failed on the code before this
/// change: no line at all (Landlock refused the connect with EACCES
/// before a packet existed, and nothing watched the port).
#[test]
fn refused_attempts_on_an_uncaptured_port_are_audited() {
    require!(have("python3"), "python3 is needed (see .ci/run)");
    const TRIES: usize = 6;
    for who in identities() {
        let can = can_launch_as(who);
        require!(can.is_ok(), can.unwrap_err());
        let dir = TempDir::new("transparent-refused", who);
        let up = upstream(0);
        let audit = dir.path().join("audit.jsonl");
        let allow = format!("api.test:{}", up.port);
        let script = format!(
            "import errno, socket\n\
             for _ in range({TRIES}):\n    \
                 try:\n        \
                     socket.create_connection(('api.test', 443), timeout=5); print('connected')\n    \
                 except OSError as e:\n        \
                     print(errno.errorcode[e.errno])\n"
        );
        let out = hutch_as(
            who,
            dir.path(),
            &[
                "run",
                "--quiet",
                "--egress-mode",
                "transparent",
                "--allow-host",
                &allow,
                "--resolve",
                "api.test=127.0.0.1",
                "--allow-address",
                "127.0.0.1",
                "--audit",
                audit.to_str().unwrap(),
                "--",
                "python3",
                "-c",
                &script,
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{who:?}: {out:?}");
        assert_eq!(stdout, "ECONNREFUSED\n".repeat(TRIES), "{who:?}");
        // The run has ended: every line is written.
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        let refused: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["method"] == "TCP")
            .collect();
        assert_eq!(refused.len(), TRIES, "{who:?}: {text}");
        for l in &refused {
            assert_eq!(l["door"], "transparent", "{l}");
            assert_eq!(l["verdict"], "deny", "{l}");
            assert_eq!(l["host"], "api.test", "{l}");
            assert_eq!(l["port"], 443, "{l}");
            assert!(
                l["destination"].as_str().unwrap().starts_with("198.18."),
                "{l}"
            );
            let error = l["error"].as_str().unwrap();
            assert!(error.starts_with("api.test:443 is not allowed"), "{l}");
        }
        assert_eq!(up.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
