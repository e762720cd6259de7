//! The standalone `hutch proxy` against upstream servers on host loopback,
//! reached through `--resolve` and `--allow-address`, driven by curl and by
//! raw sockets (for what curl refuses to send).

mod proxy_support;

use std::io::{Read, Write};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proxy_support::*;

#[test]
fn allowed_host_through_connect_absolute_form_and_unix_door() {
    let up = upstream(0);
    let p = proxy(&strs(&base_args(&up)));
    let proxy_url = format!("http://127.0.0.1:{}", p.port);
    let url = format!("http://good.test:{}/hello", up.port);

    // CONNECT tunnel (curl -p).
    let (code, text) = curl(&["-p", "-x", &proxy_url, &url]);
    assert_eq!(code, 200, "{text}");
    assert!(text.ends_with("upstream-ok /hello"), "{text}");

    // Absolute-form plain HTTP, with proxy and hop-by-hop headers that must
    // not reach the upstream.
    let (code, text) = curl(&[
        "-x",
        &proxy_url,
        "-H",
        "Proxy-Authorization: Basic c2VjcmV0",
        "-H",
        "Connection: close, X-Drop-Me",
        "-H",
        "X-Drop-Me: 1",
        "-H",
        "X-Keep-Me: 1",
        &url,
    ]);
    assert_eq!(code, 200, "{text}");
    assert!(text.ends_with("upstream-ok /hello"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("keep-alive: timeout"),
        "{text}"
    );
    let heads = up.heads.lock().unwrap().clone();
    let head = heads.last().unwrap().to_ascii_lowercase();
    assert!(head.starts_with("get /hello http/1.1\r\n"), "{head}");
    assert!(
        head.contains(&format!("host: good.test:{}\r\n", up.port)),
        "{head}"
    );
    assert!(head.contains("x-keep-me: 1"), "{head}");
    assert!(!head.contains("proxy-authorization"), "{head}");
    assert!(!head.contains("x-drop-me"), "{head}");

    // Origin-form request on the Unix door, routed by Host.
    let (code, text) = curl(&["--unix-socket", p.sock.to_str().unwrap(), &url]);
    assert_eq!(code, 200, "{text}");
    assert!(text.ends_with("upstream-ok /hello"), "{text}");

    // Origin-form on the TCP door is refused (it is a proxy there).
    let resp = raw(p.port, b"GET / HTTP/1.1\r\nHost: good.test\r\n\r\n");
    assert_eq!(status_of(&resp), 400, "{resp}");
}

#[test]
fn unlisted_host_gets_403_with_header_and_body() {
    let up = upstream(0);
    let p = proxy(&strs(&base_args(&up)));
    let proxy_url = format!("http://127.0.0.1:{}", p.port);
    let (code, text) = curl(&["-x", &proxy_url, "http://other.test/x"]);
    assert_eq!(code, 403, "{text}");
    let lower = text.to_ascii_lowercase();
    assert!(
        lower
            .contains("x-hutch-error: denied: other.test:80 is not allowed: no allow rule matches"),
        "{text}"
    );
    assert!(
        text.contains("hutch egress proxy: other.test:80 is not allowed: no allow rule matches"),
        "{text}"
    );
    let resp = raw(
        p.port,
        b"CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n",
    );
    assert_eq!(status_of(&resp), 403, "{resp}");
    assert!(
        resp.to_ascii_lowercase().contains("x-hutch-error: denied"),
        "{resp}"
    );
    assert!(resp.contains("other.test:443"), "{resp}");
    assert_eq!(up.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn allowed_host_on_other_port_is_denied() {
    let up = upstream(0);
    let other = upstream(0);
    let p = proxy(&strs(&base_args(&up)));
    let req = format!(
        "CONNECT good.test:{0} HTTP/1.1\r\nHost: good.test:{0}\r\n\r\n",
        other.port
    );
    let resp = raw(p.port, req.as_bytes());
    assert_eq!(status_of(&resp), 403, "{resp}");
    assert!(
        resp.contains(&format!("port {} is not allowed", other.port)),
        "{resp}"
    );
    assert!(resp.contains(&format!("good.test:{}", up.port)), "{resp}");
    // Bare entries mean 443 only; 80 needs --plain-http.
    let p2 = proxy(&[
        "--allow-host",
        "bare.test",
        "--resolve",
        "bare.test=127.0.0.1",
    ]);
    let resp = raw(
        p2.port,
        b"GET http://bare.test/ HTTP/1.1\r\nHost: bare.test\r\n\r\n",
    );
    assert_eq!(status_of(&resp), 403, "{resp}");
    assert_eq!(other.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn deny_beats_allow_and_star_does_not_match_apex() {
    let up = upstream(0);
    let port = up.port.to_string();
    let allow = format!("**.corp.test:{port}");
    let allow_sub = format!("*.sub.test:{port}");
    let p = proxy(&[
        "--allow-host",
        &allow,
        "--allow-host",
        &allow_sub,
        "--deny-host",
        "secret.corp.test",
        "--resolve",
        "corp.test=127.0.0.1",
        "--resolve",
        "api.corp.test=127.0.0.1",
        "--resolve",
        "secret.corp.test=127.0.0.1",
        "--resolve",
        "sub.test=127.0.0.1",
        "--resolve",
        "a.sub.test=127.0.0.1",
        "--allow-address",
        "127.0.0.1",
    ]);
    let proxy_url = format!("http://127.0.0.1:{}", p.port);
    let get = |host: &str| curl(&["-p", "-x", &proxy_url, &format!("http://{host}:{port}/")]);
    assert_eq!(get("corp.test").0, 200);
    assert_eq!(get("api.corp.test").0, 200);
    let (code, text) = get("secret.corp.test");
    assert_eq!(code, 403, "{text}");
    assert_eq!(get("a.sub.test").0, 200);
    let (code, text) = get("sub.test");
    assert_eq!(code, 403, "{text}");
    let resp = raw(
        p.port,
        format!("CONNECT secret.corp.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    );
    assert!(resp.contains("deny rule \"secret.corp.test\""), "{resp}");
}

#[test]
fn names_resolving_to_special_addresses_are_denied() {
    let up = upstream(0);
    let targets = [
        "127.0.0.1",
        "169.254.169.254",
        "10.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "fd00::1",
    ];
    let mut args = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        args.push("--allow-host".to_string());
        args.push(format!("n{i}.test:{}", up.port));
        args.push("--resolve".to_string());
        args.push(format!("n{i}.test={t}"));
    }
    let p = proxy(&strs(&args));
    for (i, t) in targets.iter().enumerate() {
        let req = format!(
            "CONNECT n{i}.test:{0} HTTP/1.1\r\nHost: n{i}.test:{0}\r\n\r\n",
            up.port
        );
        let resp = raw(p.port, req.as_bytes());
        assert_eq!(status_of(&resp), 403, "{t}: {resp}");
        let want: std::net::IpAddr = t.parse().unwrap();
        assert!(resp.contains(&format!("resolves to {want}")), "{t}: {resp}");
    }
    assert_eq!(up.hits.load(Ordering::SeqCst), 0, "an upstream was dialled");
}

/// Names without a `--resolve` override go through the host's resolver
/// (getaddrinfo, `/etc/hosts` here; hutch is a static binary, whose glibc
/// resolves through its built-in `files` and `dns` sources): `localhost`
/// resolves, is refused as loopback, and works once both of its loopback
/// addresses are allowed.
#[test]
fn names_go_through_the_host_resolver() {
    let up = upstream(0);
    let host = format!("localhost:{}", up.port);
    let req = format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let p = proxy(&["--allow-host", &host]);
    let resp = raw(p.port, req.as_bytes());
    assert_eq!(status_of(&resp), 403, "{resp}");
    assert!(
        resp.contains("resolves to 127.0.0.1") || resp.contains("resolves to ::1"),
        "{resp}"
    );
    let p = proxy(&[
        "--allow-host",
        &host,
        "--allow-address",
        "127.0.0.1",
        "--allow-address",
        "::1",
    ]);
    let proxy_url = format!("http://127.0.0.1:{}", p.port);
    let (code, text) = curl(&["-p", "-x", &proxy_url, &format!("http://{host}/r")]);
    assert_eq!(code, 200, "{text}");
    assert!(text.ends_with("upstream-ok /r"), "{text}");
}

#[test]
fn ip_literals_are_canonicalised_before_matching() {
    let up = upstream(0);
    let rule = format!("127.0.0.1:{}", up.port);
    let p = proxy(&["--allow-host", &rule, "--allow-address", "127.0.0.1"]);
    for lit in [
        "127.0.0.1",
        "2130706433",
        "0x7f.1",
        "127.1",
        "0177.0.0.1",
        "0x7f000001",
    ] {
        let req = format!(
            "CONNECT {lit}:{0} HTTP/1.1\r\nHost: {lit}:{0}\r\n\r\n",
            up.port
        );
        let resp = raw(p.port, req.as_bytes());
        assert_eq!(status_of(&resp), 200, "{lit}: {resp}");
    }
    // A wildcard-looking allow never admits an address, and a deny written
    // as a dotted quad catches every spelling.
    let rule_deny = format!("127.0.0.1:{}", up.port);
    let p2 = proxy(&[
        "--allow-host",
        &rule,
        "--deny-host",
        &rule_deny,
        "--allow-address",
        "127.0.0.1",
    ]);
    for lit in ["2130706433", "0x7f.1", "127.1", "0177.0.0.1"] {
        let req = format!("CONNECT {lit}:{0} HTTP/1.1\r\n\r\n", up.port);
        let resp = raw(p2.port, req.as_bytes());
        assert_eq!(status_of(&resp), 403, "{lit}: {resp}");
    }
}

#[test]
fn nul_crlf_and_zone_id_hosts_are_rejected() {
    let up = upstream(0);
    let p = proxy(&strs(&base_args(&up)));
    let cases: [&[u8]; 6] = [
        b"CONNECT good.test\0.evil:443 HTTP/1.1\r\n\r\n",
        b"CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n",
        b"GET http://[fe80::1%25lo]:80/ HTTP/1.1\r\n\r\n",
        b"CONNECT good.test\r\n.evil:443 HTTP/1.1\r\n\r\n",
        b"GET http://good.test%00.evil/ HTTP/1.1\r\n\r\n",
        b"GET http://good.test%0d%0a/ HTTP/1.1\r\n\r\n",
    ];
    for c in cases {
        let resp = raw(p.port, c);
        let code = status_of(&resp);
        assert!(code == 400, "{:?}: {resp}", String::from_utf8_lossy(c));
    }
    // Origin-form on the Unix door with a zone id in Host.
    let mut s = std::os::unix::net::UnixStream::connect(&p.sock).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert_eq!(status_of(&out), 400, "{out}");
    assert_eq!(up.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn audit_log_has_one_line_per_decision() {
    let up = upstream(0);
    let dir = tmpdir();
    let audit = dir.join("audit.jsonl");
    let mut args = base_args(&up);
    args.extend(["--audit".into(), audit.display().to_string()]);
    args.extend(["--sandbox-id".into(), "sbx-42".into()]);
    let p = proxy(&strs(&args));
    let proxy_url = format!("http://127.0.0.1:{}", p.port);
    let url = format!("http://good.test:{}/a", up.port);
    assert_eq!(curl(&["-p", "-x", &proxy_url, &url]).0, 200);
    assert_eq!(curl(&["-x", &proxy_url, &url]).0, 200);
    assert_eq!(curl(&["-x", &proxy_url, "http://nope.test/"]).0, 403);
    // The tunnel's line is written when it closes; give it a moment.
    let lines = audit_lines(&audit, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let connect = lines.iter().find(|l| l["method"] == "CONNECT").unwrap();
    assert_eq!(connect["sandbox"], "sbx-42");
    assert_eq!(connect["door"], "tcp");
    assert_eq!(connect["host"], "good.test");
    assert_eq!(connect["port"], up.port);
    assert_eq!(connect["address"], "127.0.0.1");
    assert_eq!(connect["verdict"], "allow");
    assert!(connect["rule"].as_str().unwrap().contains("good.test"));
    assert!(connect["bytes_up"].as_u64().unwrap() > 0);
    assert!(connect["bytes_down"].as_u64().unwrap() > 0);
    assert!(connect["duration_ms"].is_u64());
    let get = lines
        .iter()
        .find(|l| l["method"] == "GET" && l["verdict"] == "allow")
        .unwrap();
    assert_eq!(get["status"], 200);
    assert!(get["bytes_down"].as_u64().unwrap() > 0);
    let denied = lines.iter().find(|l| l["verdict"] == "deny").unwrap();
    assert_eq!(denied["host"], "nope.test");
    assert_eq!(denied["port"], 80);
    assert_eq!(denied["rule"], "no allow rule matches");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn policy_file_profiles_plus_command_line() {
    let up = upstream(0);
    let dir = tmpdir();
    let file = dir.join("policy.toml");
    std::fs::write(
        &file,
        format!(
            "[profiles.ci]\nallow = [\"ci.test:{0}\"]\nallow_address = [\"127.0.0.1\"]\n\
             resolve = {{ \"ci.test\" = \"127.0.0.1\", \"extra.test\" = \"127.0.0.1\" }}\n\
             [profiles.other]\nallow = [\"other.test\"]\n",
            up.port
        ),
    )
    .unwrap();
    let extra = format!("extra.test:{}", up.port);
    let p = proxy(&[
        "--policy",
        file.to_str().unwrap(),
        "--profile",
        "ci",
        "--allow-host",
        &extra,
    ]);
    let proxy_url = format!("http://127.0.0.1:{}", p.port);
    for h in ["ci.test", "extra.test"] {
        let (code, text) = curl(&["-p", "-x", &proxy_url, &format!("http://{h}:{}/", up.port)]);
        assert_eq!(code, 200, "{h}: {text}");
    }
    // A bad profile name fails with one clear line and exit code 125.
    let out = Command::new(env!("CARGO_BIN_EXE_hutch"))
        .args([
            "proxy",
            "--policy",
            file.to_str().unwrap(),
            "--profile",
            "nope",
        ])
        .args(["--listen", "tcp:127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no profile \"nope\""), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A raw TCP echo server (echoes until EOF, then closes).
fn echo_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut s);
                let _ = s.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}

#[test]
fn tunnel_carries_bulk_data_intact_both_ways_with_half_close() {
    let port = echo_server();
    let rule = format!("echo.test:{port}");
    let p = proxy(&[
        "--allow-host",
        &rule,
        "--resolve",
        "echo.test=127.0.0.1",
        "--allow-address",
        "127.0.0.1",
    ]);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    write!(s, "CONNECT echo.test:{port} HTTP/1.1\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // 24 MiB of a non-repeating pattern; the reader starts late so the
    // tunnel's buffers fill up and it must hold back without losing data.
    let len = 24 << 20;
    let data: Vec<u8> = (0..len as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut w = s.try_clone().unwrap();
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        for chunk in sent.chunks(100_003) {
            w.write_all(chunk).unwrap();
        }
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut got = Vec::with_capacity(len);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "tunnel corrupted the byte stream");
}

#[test]
fn resolve_failure_and_refused_connect_are_502_connect_timeout_is_504() {
    // `.invalid` never resolves (RFC 6761).
    let p = proxy(&["--allow-host", "nothing.invalid", "--connect-timeout", "2s"]);
    let resp = raw(p.port, b"CONNECT nothing.invalid:443 HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&resp), 502, "{resp}");
    assert!(
        resp.contains("x-hutch-error: resolve: cannot resolve nothing.invalid"),
        "{resp}"
    );

    // A listener whose accept queue is full drops new SYNs: the proxy's
    // connect can only time out.
    let full = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // listen() again shrinks the backlog of the listening socket.
    rustix::net::listen(&full, 0).unwrap();
    let port = full.local_addr().unwrap().port();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = std::net::TcpStream::connect_timeout(
            &format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_millis(300),
        );
        if let Ok(s) = s {
            fillers.push(s);
        }
    }
    let rule = format!("full.test:{port}");
    let p = proxy(&[
        "--allow-host",
        &rule,
        "--resolve",
        "full.test=127.0.0.1",
        "--allow-address",
        "127.0.0.1",
        "--connect-timeout",
        "1s",
    ]);
    let t = Instant::now();
    let resp = raw(
        p.port,
        format!("CONNECT full.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    );
    assert_eq!(status_of(&resp), 504, "{resp}");
    assert!(resp.contains("x-hutch-error: timeout"), "{resp}");
    assert!(t.elapsed() < Duration::from_secs(4));
    drop(full);

    // A closed port answers the SYN with a reset: 502 naming the refusal.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let rule = format!("closed.test:{port}");
    let p = proxy(&[
        "--allow-host",
        &rule,
        "--resolve",
        "closed.test=127.0.0.1",
        "--allow-address",
        "127.0.0.1",
    ]);
    let resp = raw(
        p.port,
        format!("CONNECT closed.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
    );
    assert_eq!(status_of(&resp), 502, "{resp}");
    assert!(
        resp.contains(&format!(
            "x-hutch-error: connect: cannot connect to closed.test:{port}: Connection refused"
        )),
        "{resp}"
    );
}
