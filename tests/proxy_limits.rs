//! Limits of the standalone `hutch proxy`: a slow or hostile client cannot
//! exhaust it, and per-sandbox caps answer 429.

mod proxy_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use proxy_support::*;

fn connect_tunnel(proxy_port: u16, target: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    (s, String::from_utf8_lossy(&head).to_string())
}

/// Wait until the peer closes `s` (EOF or reset); returns how long it took.
fn time_to_close(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while t.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return Some(t.elapsed()),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            Err(_) => return Some(t.elapsed()),
        }
    }
    None
}

#[test]
fn oversized_request_head_is_refused() {
    let up = upstream(0);
    let mut args = base_args(&up);
    args.extend(["--max-header-bytes".into(), "4KiB".into()]);
    let p = proxy(&strs(&args));
    let target = format!("good.test:{}", up.port);
    let big = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(8 * 1024)
    );
    let resp = raw(p.port, big.as_bytes());
    assert_eq!(status_of(&resp), 431, "{resp}");
    // A normal request still works afterwards.
    let (_s, head) = connect_tunnel(p.port, &target);
    assert_eq!(status_of(&head), 200, "{head}");
}

#[test]
fn many_idle_connections_are_capped_and_timed_out() {
    let up = upstream(0);
    let mut args = base_args(&up);
    args.extend([
        "--max-connections".into(),
        "8".into(),
        "--handshake-timeout".into(),
        "1s".into(),
    ]);
    let p = proxy(&strs(&args));
    let listening = proxy_sockets(&p);
    // 8 connections that never send anything take every slot (once the
    // proxy has accepted them: it holds their sockets)...
    let mut idle: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(("127.0.0.1", p.port)).unwrap())
        .collect();
    wait_until(Duration::from_secs(5), "the proxy to accept 8", || {
        proxy_sockets(&p) >= listening + 8
    });
    // ...so the next ones are turned away at once with 429.
    let mut turned_away = 0;
    for _ in 0..40 {
        let resp = raw(p.port, b"");
        if status_of(&resp) == 429 {
            assert!(resp.contains("X-Hutch-Error: limit"), "{resp}");
            turned_away += 1;
        }
    }
    assert_eq!(turned_away, 40);
    // The silent ones are dropped after the handshake timeout...
    for s in &mut idle {
        let t = time_to_close(s, Duration::from_secs(5));
        assert!(
            t.is_some(),
            "idle connection kept open past the handshake timeout"
        );
    }
    // ...and the proxy serves again.
    let (_s, head) = connect_tunnel(p.port, &format!("good.test:{}", up.port));
    assert_eq!(status_of(&head), 200, "{head}");
}

#[test]
fn slowloris_head_is_cut_by_the_handshake_timeout() {
    let up = upstream(0);
    let mut args = base_args(&up);
    args.extend(["--handshake-timeout".into(), "1s".into()]);
    let p = proxy(&strs(&args));
    let mut s = TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    let start = Instant::now();
    let head = format!("CONNECT good.test:{} HTTP/1.1\r\nX-Slow: ", up.port);
    let mut closed_after = None;
    for b in head.bytes().chain(std::iter::repeat(b'a')) {
        if s.write_all(&[b]).is_err() {
            closed_after = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if start.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    let closed_after = closed_after
        .or_else(|| time_to_close(&mut s, Duration::from_secs(1)).map(|_| start.elapsed()));
    let t = closed_after.expect("slow client never cut off");
    assert!(t < Duration::from_secs(4), "cut only after {t:?}");
}

#[test]
fn concurrent_tunnels_are_capped_with_429() {
    let up = upstream(0);
    let mut args = base_args(&up);
    args.extend(["--max-tunnels".into(), "2".into()]);
    let p = proxy(&strs(&args));
    let target = format!("good.test:{}", up.port);
    let (a, ha) = connect_tunnel(p.port, &target);
    let (_b, hb) = connect_tunnel(p.port, &target);
    assert_eq!(status_of(&ha), 200, "{ha}");
    assert_eq!(status_of(&hb), 200, "{hb}");
    let (_c, hc) = connect_tunnel(p.port, &target);
    assert_eq!(status_of(&hc), 429, "{hc}");
    assert!(hc.contains("x-hutch-error: limit"), "{hc}");
    drop(a);
    // The slot frees once the proxy notices the close.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_d, hd) = connect_tunnel(p.port, &target);
        if status_of(&hd) == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed: {hd}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn byte_budget_cuts_transfers_and_refuses_new_ones() {
    let up = upstream(4 << 20);
    let mut args = base_args(&up);
    args.extend(["--max-bytes".into(), "256KiB".into()]);
    let p = proxy(&strs(&args));
    let proxy_url = format!("http://127.0.0.1:{}", p.port);
    let url = format!("http://good.test:{}/big", up.port);
    let out = std::process::Command::new("curl")
        .args(["-sS", "-p", "-x", &proxy_url, &url, "--max-time", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "transfer was not cut");
    assert!(
        out.stdout.len() < 1 << 20,
        "{} bytes got through a 256 KiB budget",
        out.stdout.len()
    );
    let (_s, head) = connect_tunnel(p.port, &format!("good.test:{}", up.port));
    assert_eq!(status_of(&head), 429, "{head}");
    assert!(head.contains("byte limit"), "{head}");
}

#[test]
fn idle_tunnel_is_closed() {
    let up = upstream(0);
    let mut args = base_args(&up);
    args.extend(["--idle-timeout".into(), "1s".into()]);
    let p = proxy(&strs(&args));
    let (mut s, head) = connect_tunnel(p.port, &format!("good.test:{}", up.port));
    assert_eq!(status_of(&head), 200, "{head}");
    let t = time_to_close(&mut s, Duration::from_secs(5)).expect("idle tunnel kept open");
    assert!(t >= Duration::from_millis(800), "closed too early: {t:?}");
}

/// Heads hyper refuses before any request is handled (malformed, oversized,
/// endless, cut short) are decisions too: each leaves one audit line, so a
/// probing client leaves a trace. A connection that sends nothing does not.
#[test]
fn refused_request_heads_are_audited() {
    let up = upstream(0);
    let dir = tmpdir();
    let audit = dir.join("audit.jsonl");
    let mut args = base_args(&up);
    args.extend([
        "--max-header-bytes".into(),
        "4KiB".into(),
        "--handshake-timeout".into(),
        "1s".into(),
        "--audit".into(),
        audit.display().to_string(),
    ]);
    let mut p = proxy(&strs(&args));
    let listening = proxy_sockets(&p);
    // Connect and leave: not a decision.
    drop(TcpStream::connect(("127.0.0.1", p.port)).unwrap());
    // A TLS ClientHello sent to the proxy instead of CONNECT.
    let resp = raw(
        p.port,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",
    );
    assert_eq!(status_of(&resp), 400, "{resp}");
    // An oversized head.
    let big = format!(
        "GET http://good.test/ HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(8192)
    );
    assert_eq!(status_of(&raw(p.port, big.as_bytes())), 431);
    // A head that never ends (cut by the handshake timeout).
    let mut slow = TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    slow.write_all(b"CONNECT good.test:443 HTTP/1.1\r\nX-Slow: a")
        .unwrap();
    assert!(time_to_close(&mut slow, Duration::from_secs(5)).is_some());
    // A head cut short by the client.
    let mut cut = TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    cut.write_all(b"CONNECT good.test:443 HTTP/1.1\r\nHost: go")
        .unwrap();
    drop(cut);

    // The four lines, so the proxy has accepted every connection (it
    // accepts in order: the silent one came first); then every connection
    // handled (the proxy closed its side of all five) and the proxy
    // stopped: whatever else it decided is in the log too.
    let lines = audit_lines(&audit, 4);
    wait_until(Duration::from_secs(10), "the proxy to close them", || {
        proxy_sockets(&p) == listening
    });
    stop(&mut p);
    let settled = std::fs::read_to_string(&audit).unwrap().lines().count();
    assert_eq!(
        settled, 4,
        "one line per refused head, none for the silent one: {lines:?}"
    );
    let with = |verdict: &str, status: u64| {
        lines
            .iter()
            .filter(|l| l["verdict"] == verdict && l["status"] == status)
            .count()
    };
    assert_eq!(with("invalid", 400), 1, "the ClientHello: {lines:?}");
    assert_eq!(with("limit", 431), 1, "the oversized head: {lines:?}");
    assert_eq!(with("limit", 0), 1, "the endless head: {lines:?}");
    assert_eq!(with("invalid", 0), 1, "the head cut short: {lines:?}");
    for l in &lines {
        assert_eq!(l["door"], "tcp");
        assert!(!l["error"].as_str().unwrap_or("").is_empty(), "{l}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sandbox cannot fill the host's disk through the audit log: past
/// `--max-audit-bytes` one `audit-limit` line is written, later decisions
/// are counted, and the count is written when the proxy stops.
#[test]
fn audit_log_is_capped_and_counts_what_it_dropped() {
    let up = upstream(0);
    let dir = tmpdir();
    let audit = dir.join("audit.jsonl");
    let mut args = base_args(&up);
    args.extend([
        "--max-audit-bytes".into(),
        "4KiB".into(),
        "--audit".into(),
        audit.display().to_string(),
    ]);
    let mut p = proxy(&strs(&args));
    let decisions = 60;
    for i in 0..decisions {
        let req = format!("GET http://denied-{i}.test/ HTTP/1.1\r\nHost: denied-{i}.test\r\n\r\n");
        assert_eq!(status_of(&raw(p.port, req.as_bytes())), 403);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(p.child.wait().unwrap().success());
    let text = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let egress = lines.iter().filter(|l| l["kind"] == "egress").count();
    let (limit, last) = (&lines[lines.len() - 2], &lines[lines.len() - 1]);
    assert_eq!(limit["kind"], "audit-limit", "{text}");
    assert_eq!(last["kind"], "audit-dropped", "{text}");
    assert_eq!(last["limit_bytes"], 4096);
    assert!(egress > 0 && egress < decisions, "{egress} lines written");
    // Every decision is either a line or counted (the limit line stands in
    // for the first one it replaced).
    assert_eq!(
        egress as u64 + last["dropped"].as_u64().unwrap(),
        decisions as u64
    );
    let before_last = text.len() - text.lines().last().unwrap().len() - 1;
    assert!(
        before_last <= 4096 + 512,
        "{before_last} bytes before the count"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
