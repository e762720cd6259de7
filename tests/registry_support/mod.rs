//! A real registry for the pull tests: Debian's `docker-registry` (the
//! distribution registry server) on a loopback port, its config written
//! here, optionally behind htpasswd basic auth; images pushed into it by
//! `skopeo copy` from OCI layouts the tests build; and a proxy that cuts a
//! chosen blob's response short.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const USER: &str = "puller";
pub const PASSWORD: &str = "pull-pass-7f3a";

/// A running registry, killed on drop.
pub struct Registry {
    pub host: String,
    pub dir: PathBuf,
    child: Child,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Wait until `host` accepts a connection and answers `/v2/`.
fn wait_ready(host: &str, child: &mut Child, log: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(mut s) = TcpStream::connect(host) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = write!(
                s,
                "GET /v2/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            );
            let mut buf = [0u8; 12];
            // A TLS listener answers plain HTTP with "HTTP/1.0 400".
            if s.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "registry on {host} not ready: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

impl Registry {
    /// Start a registry storing under `dir`; with `basic_auth`, only
    /// [`USER`]/[`PASSWORD`] may use it.
    pub fn start(dir: &Path, basic_auth: bool) -> Registry {
        Registry::start_with(dir, basic_auth, false)
    }

    /// A registry serving https with a certificate for 127.0.0.1 issued by
    /// a test CA (made by openssl); returns it and the CA's PEM file.
    pub fn start_tls(dir: &Path) -> (Registry, PathBuf) {
        std::fs::create_dir_all(dir).unwrap();
        let sh = format!(
            "set -e; cd {}; \
             openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -subj /CN=hutch-test-ca -days 2; \
             openssl req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj /CN=127.0.0.1; \
             printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > leaf.ext; \
             openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 2 -extfile leaf.ext",
            dir.display()
        );
        let o = Command::new("sh").args(["-c", &sh]).output().unwrap();
        assert!(
            o.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        (Registry::start_with(dir, false, true), dir.join("ca.pem"))
    }

    /// A registry whose auth is a token service (Docker's token auth): a
    /// token server on loopback that gives a signed JWT (RS256 by the
    /// openssl CLI, its certificate in the header's x5c, the registry
    /// trusting that certificate) to [`USER`]/[`PASSWORD`] only.
    pub fn start_token(dir: &Path) -> Registry {
        std::fs::create_dir_all(dir).unwrap();
        let sh = format!(
            "set -e; cd {}; openssl req -x509 -newkey rsa:2048 -nodes -keyout token.key \
             -out token.pem -subj /CN=hutch-token-issuer -days 2",
            dir.display()
        );
        let o = Command::new("sh").args(["-c", &sh]).output().unwrap();
        assert!(
            o.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let realm = token_server(dir.to_path_buf());
        let mut r = Registry::start_with(dir, false, false);
        // Restart with the token config now that the realm is known.
        let _ = r.child.kill();
        let _ = r.child.wait();
        std::fs::write(
            dir.join("token.auth"),
            format!(
                "auth:\n  token:\n    realm: http://{realm}/token\n    service: hutch-registry\n    \
                 issuer: hutch-token-issuer\n    rootcertbundle: {}\n",
                dir.join("token.pem").display()
            ),
        )
        .unwrap();
        r = Registry::start_with(dir, false, false);
        r
    }

    fn start_with(dir: &Path, basic_auth: bool, tls: bool) -> Registry {
        std::fs::create_dir_all(dir).unwrap();
        let mut auth = std::fs::read_to_string(dir.join("token.auth")).unwrap_or_default();
        if tls {
            auth = format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.join("leaf.pem").display(),
                dir.join("leaf.key").display()
            );
        }
        if basic_auth {
            let o = Command::new("htpasswd")
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd (apache2-utils)");
            assert!(o.status.success());
            std::fs::write(dir.join("htpasswd"), &o.stdout).unwrap();
            auth = format!(
                "auth:\n  htpasswd:\n    realm: hutch-test\n    path: {}\n",
                dir.join("htpasswd").display()
            );
        }
        // The port is free when chosen; a registry that loses the race exits
        // and another port is tried.
        for _ in 0..5 {
            let host = format!("127.0.0.1:{}", free_port());
            let config = dir.join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                     http:\n  addr: {host}\n{auth}",
                    dir.join("data").display()
                ),
            )
            .unwrap();
            let log = dir.join("registry.log");
            let mut child = Command::new("docker-registry")
                .args(["serve", config.to_str().unwrap()])
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&log).unwrap())
                .stderr(std::fs::File::create(dir.join("registry.err")).unwrap())
                .spawn()
                .expect("docker-registry (Debian package docker-registry)");
            if wait_ready(&host, &mut child, &log) {
                return Registry {
                    host,
                    dir: dir.to_path_buf(),
                    child,
                };
            }
        }
        panic!(
            "docker-registry did not start: {}",
            std::fs::read_to_string(dir.join("registry.err")).unwrap_or_default()
        );
    }

    /// `skopeo copy` the OCI layout image `src` (`DIR:TAG`) to `REPO:TAG`
    /// here; returns the digest the registry holds it under.
    pub fn push(&self, src: &str, repo_tag: &str, all: bool) -> String {
        let dest = format!("docker://{}/{repo_tag}", self.host);
        let mut c = Command::new("skopeo");
        c.args(["copy", "--quiet", "--dest-tls-verify=false"]);
        if self.dir.join("htpasswd").exists() {
            c.arg(format!("--dest-creds={USER}:{PASSWORD}"));
        }
        if all {
            c.arg("--all");
        }
        // skopeo keeps the manifest as given (no conversion) for OCI to OCI.
        c.args(["--preserve-digests", &format!("oci:{src}"), &dest]);
        let o = c.output().expect("skopeo");
        assert!(
            o.status.success(),
            "skopeo copy {src} {dest}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut c = Command::new("skopeo");
        c.args(["inspect", "--raw", "--tls-verify=false"]);
        if self.dir.join("htpasswd").exists() {
            c.arg(format!("--creds={USER}:{PASSWORD}"));
        }
        let o = c.arg(&dest).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        use sha2::Digest as _;
        format!("sha256:{}", hex(&sha2::Sha256::digest(&o.stdout)))
    }

    /// [`Registry::push`] with [`USER`]/[`PASSWORD`] (a token registry).
    pub fn push_with_creds(&self, src: &str, repo_tag: &str) -> String {
        std::fs::write(self.dir.join("htpasswd"), "").unwrap();
        let d = self.push(src, repo_tag, false);
        std::fs::remove_file(self.dir.join("htpasswd")).unwrap();
        d
    }

    /// The file holding blob `digest` in the registry's storage.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A docker-style credential file for `host`.
pub fn auth_file(path: &Path, host: &str) {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::write(
        path,
        format!(r#"{{"auths": {{"{host}": {{"auth": "{b64}"}}}}}}"#),
    )
    .unwrap();
}

/// A proxy in front of `upstream` that forwards every request, one per
/// connection, except that the response for a GET of blob `cut` is cut
/// after its headers and half its body, and the connection closed.
/// Returns its `127.0.0.1:PORT`; it serves until the test process ends.
pub fn cutting_proxy(upstream: &str, cut: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let upstream = upstream.to_string();
    let needle = format!("/blobs/{cut}");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(client) = conn else { continue };
            let upstream = upstream.clone();
            let needle = needle.clone();
            std::thread::spawn(move || {
                let _ = proxy_one(client, &upstream, &needle);
            });
        }
    });
    addr
}

fn proxy_one(mut client: TcpStream, upstream: &str, needle: &str) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut b)? == 0 {
            return Ok(());
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let first = text.lines().next().unwrap_or("").to_string();
    // One request per connection: ask the registry to close after it.
    let mut req: String = text
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:") && !l.is_empty())
        .map(|l| format!("{l}\r\n"))
        .collect();
    req.push_str("Connection: close\r\n\r\n");
    let mut up = TcpStream::connect(upstream)?;
    up.write_all(req.as_bytes())?;
    let mut resp = Vec::new();
    up.read_to_end(&mut resp)?;
    if first.starts_with("GET ") && first.contains(needle) {
        let body_at = resp
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(resp.len(), |p| p + 4);
        let keep = body_at + (resp.len() - body_at) / 2;
        client.write_all(&resp[..keep])?;
    } else {
        client.write_all(&resp)?;
    }
    client.shutdown(std::net::Shutdown::Both)
}

fn b64url(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

/// The token service: `GET /token?service=...&scope=repository:NAME:pull`
/// with basic auth [`USER`]/[`PASSWORD`] answers `{"token": JWT}`; anyone
/// else gets 401. Returns its `127.0.0.1:PORT`.
fn token_server(dir: PathBuf) -> String {
    use base64::Engine as _;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => break,
                }
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let authorized = text.lines().any(|l| {
                l.to_ascii_lowercase().starts_with("authorization:") && l[14..].trim() == want
            });
            let scope = text
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.split("scope=").nth(1))
                .map(|s| {
                    s.split('&')
                        .next()
                        .unwrap_or("")
                        .replace("%3A", ":")
                        .replace("%2F", "/")
                        .replace("%2C", ",")
                })
                .unwrap_or_default();
            let resp = if !authorized {
                "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_string()
            } else {
                let token = jwt(&dir, &scope);
                let body = format!(r#"{{"token": "{token}", "expires_in": 300}}"#);
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            };
            let _ = c.write_all(resp.as_bytes());
        }
    });
    addr
}

fn jwt(dir: &Path, scope: &str) -> String {
    let pem = std::fs::read_to_string(dir.join("token.pem")).unwrap();
    let der_b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let header = format!(r#"{{"typ":"JWT","alg":"RS256","x5c":["{der_b64}"]}}"#);
    let mut parts = scope.split(':');
    let (kind, name, actions) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let actions: Vec<String> = actions
        .split(',')
        .filter(|a| !a.is_empty())
        .map(|a| format!("\"{a}\""))
        .collect();
    let claims = format!(
        r#"{{"iss":"hutch-token-issuer","sub":"{USER}","aud":"hutch-registry","exp":{},"nbf":{},"iat":{now},"jti":"{now}","access":[{{"type":"{kind}","name":"{name}","actions":[{}]}}]}}"#,
        now + 300,
        now - 10,
        actions.join(",")
    );
    let signing_input = format!(
        "{}.{}",
        b64url(header.as_bytes()),
        b64url(claims.as_bytes())
    );
    let mut child = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(dir.join("token.key"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(signing_input.as_bytes())
        .unwrap();
    let sig = child.wait_with_output().unwrap().stdout;
    format!("{signing_input}.{}", b64url(&sig))
}
