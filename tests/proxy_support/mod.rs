//! Shared helpers for the proxy integration tests: an upstream HTTP server
//! on host loopback, the standalone `hutch proxy`, curl and raw sockets.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A tiny HTTP/1.1 upstream: answers every request with
/// `upstream-ok PATH` (or `size` bytes of `x` for `/big`) and remembers
/// request heads.
pub struct Upstream {
    pub port: u16,
    pub hits: Arc<AtomicUsize>,
    pub heads: Arc<Mutex<Vec<String>>>,
}

pub fn upstream(big: usize) -> Upstream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (h2, hd2) = (hits.clone(), heads.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            h2.fetch_add(1, Ordering::SeqCst);
            let hd = hd2.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                let path = head.split(' ').nth(1).unwrap_or("").to_string();
                hd.lock().unwrap().push(head);
                let body = if path == "/big" {
                    "x".repeat(big)
                } else {
                    format!("upstream-ok {path}")
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\nKeep-Alive: timeout=5\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Upstream { port, hits, heads }
}

pub struct Proxy {
    pub child: Child,
    pub port: u16,
    pub sock: PathBuf,
    pub dir: PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static N: AtomicUsize = AtomicUsize::new(0);

pub fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "hutch-proxy-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn proxy(args: &[&str]) -> Proxy {
    let dir = tmpdir();
    let sock = dir.join("proxy.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hutch"))
        .arg("proxy")
        .args(args)
        .arg("--listen")
        .arg("tcp:127.0.0.1:0")
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "proxy exited early");
        if line.contains("listening on") {
            break;
        }
    }
    let port = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("tcp:127.0.0.1:"))
        .unwrap()
        .parse()
        .unwrap();
    // Keep draining stderr so the proxy never blocks on it.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = err.read_to_string(&mut sink);
    });
    Proxy {
        child,
        port,
        sock,
        dir,
    }
}

/// Run curl; returns (http status, headers+body text). The status is the
/// proxy's CONNECT answer when the tunnel was refused.
pub fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "-i",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code} %{http_connect}",
        ])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, codes) = text.rsplit_once('\n').unwrap();
    let mut codes = codes
        .split(' ')
        .map(|c| c.trim().parse::<u16>().unwrap_or(0));
    let (http, connect) = (codes.next().unwrap_or(0), codes.next().unwrap_or(0));
    (if http != 0 { http } else { connect }, body.to_string())
}

/// Send raw bytes to the proxy and read the answer (until close or 5 s).
pub fn raw(port: u16, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.windows(4).any(|w| w == b"\r\n\r\n") && out.starts_with(b"HTTP/1.1 200") {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&out).to_string()
}

/// How many sockets the proxy process holds open (its listeners plus the
/// connections it has accepted and not yet closed), from /proc/PID/fd.
pub fn proxy_sockets(p: &Proxy) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", p.child.id()))
        .map(|dir| {
            dir.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Poll `ready` (every 20 ms) until it holds; fail naming `what` after
/// `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stop the proxy with SIGTERM and wait for it: every decision it made is
/// then in its audit log.
pub fn stop(p: &mut Proxy) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        p.child.wait().unwrap().success(),
        "the proxy failed to stop"
    );
}

pub fn status_of(resp: &str) -> u16 {
    resp.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

pub fn base_args(up: &Upstream) -> Vec<String> {
    vec![
        "--allow-host".into(),
        format!("good.test:{}", up.port),
        "--resolve".into(),
        "good.test=127.0.0.1".into(),
        "--allow-address".into(),
        "127.0.0.1".into(),
    ]
}

pub fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The audit log's lines, once there are at least `want` of them (lines are
/// written when a decision ends) or after 5 s.
pub fn audit_lines(path: &Path, want: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines.len() >= want || std::time::Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
