//! TLS interception through `hutch run` (issue 31): curl (HTTP/1.1 and
//! HTTP/2) and Python's urllib inside the sandbox reach an intercepted
//! local HTTPS server through the sandbox's own CA, which the sandbox
//! trusts through its bundle only; a host that is allowed but not
//! intercepted stays an opaque tunnel (the client sees the upstream's own
//! certificate); the CA's key is nowhere in the sandbox; a host's leaf is
//! minted once and then cached.
//!
//! The upstream is an HTTPS server on the host's loopback with a test CA
//! (rcgen) that hutch's proxy trusts through `SSL_CERT_FILE`; the names
//! reach it by `resolve` overrides and `allow_address 127.0.0.1/32`.

#[macro_use]
mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{As, TempDir, can_launch_as, hutch_command, stderr, stdout, write_as};

const INTERCEPTED: &str = "api.anthropic.com";
const OPAQUE: &str = "opaque.example";
const UPSTREAM_CA_NAME: &str = "hutch test upstream CA";

/// An HTTPS server on 127.0.0.1 speaking HTTP/1.1 and h2, answering
/// `VERSION HOST PATH`, with a certificate for both test names signed by
/// a test CA (written to `ca_file`).
struct Upstream {
    port: u16,
    ca_file: std::path::PathBuf,
    seen: Arc<Mutex<Vec<String>>>,
}

fn upstream(dir: &Path, who: As) -> Upstream {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, UPSTREAM_CA_NAME);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![INTERCEPTED.to_string(), OPAQUE.to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let ca_file = dir.join("upstream-ca.pem");
    write_as(&ca_file, &ca_cert.pem(), who);

    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let seen = seen2.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let host = req
                                .uri()
                                .authority()
                                .map(|a| a.to_string())
                                .or_else(|| {
                                    req.headers()
                                        .get("host")
                                        .and_then(|h| h.to_str().ok())
                                        .map(String::from)
                                })
                                .unwrap_or_default();
                            let line = format!("{:?} {host} {}", req.version(), req.uri().path());
                            seen.lock().unwrap().push(line.clone());
                            async move {
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    http_body_util::Full::new(hyper::body::Bytes::from(line)),
                                ))
                            }
                        },
                    );
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                });
            }
        });
    });
    Upstream {
        port,
        ca_file,
        seen,
    }
}

/// `hutch run` as `who` with an egress policy that allows both names on
/// the upstream's port (resolved to 127.0.0.1) and intercepts one; the
/// proxy trusts the upstream's test CA. Returns the output and the audit
/// lines.
fn run(
    who: As,
    dir: &TempDir,
    up: &Upstream,
    mode: &str,
    script: &str,
) -> (std::process::Output, Vec<serde_json::Value>) {
    let policy = dir.path().join("policy.toml");
    write_as(
        &policy,
        &format!(
            r#"[profiles.t]
allow = ["{INTERCEPTED}:{p}", "{OPAQUE}:{p}"]
allow_address = ["127.0.0.1/32"]
egress_mode = "{mode}"
resolve = {{ "{INTERCEPTED}" = "127.0.0.1", "{OPAQUE}" = "127.0.0.1" }}
[[profiles.t.intercept]]
host = "{INTERCEPTED}:{p}"
"#,
            p = up.port
        ),
        who,
    );
    let audit = dir.path().join("audit.jsonl");
    let out = hutch_command(who)
        .args(["run", "--quiet", "--egress-policy"])
        .arg(&policy)
        .arg("--audit")
        .arg(&audit)
        .args(["--", "sh", "-c", script])
        .env("SSL_CERT_FILE", &up.ca_file)
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let lines = std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out, lines)
}

/// The audit lines of connections to `host` (CONNECT or captured).
fn connections<'a>(audit: &'a [serde_json::Value], host: &str) -> Vec<&'a serde_json::Value> {
    audit
        .iter()
        .filter(|l| l["host"] == host && (l["method"] == "CONNECT" || l["method"] == "TCP"))
        .collect()
}

fn line<'a>(out: &'a str, tag: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(tag))
        .unwrap_or_else(|| panic!("no {tag} line in:\n{out}"))
}

#[test]
fn curl_and_urllib_through_interception_root() {
    through_interception(As::Root);
}

#[test]
fn curl_and_urllib_through_interception_unprivileged() {
    through_interception(As::Nobody);
}

fn through_interception(who: As) {
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    require!(
        common::have("curl"),
        "curl is needed (tests/setup installs it)"
    );
    require!(
        common::have("python3"),
        "python3 is needed (tests/setup installs it)"
    );
    let dir = TempDir::new("intercept", who);
    let up = upstream(dir.path(), who);
    let script = format!(
        r#"
i=https://{INTERCEPTED}:{p}
o=https://{OPAQUE}:{p}
echo "H2:$(curl -sS --max-time 10 --http2 -w ' client=%{{http_version}}' $i/curl-h2)"
echo "H1:$(curl -sS --max-time 10 --http1.1 -w ' client=%{{http_version}}' $i/curl-h1)"
echo "ISSUER:$(curl -sS --max-time 10 -v -o /dev/null $i/issuer 2>&1 | grep -m1 'issuer:')"
# The sandbox's CA alone (the bundle's last certificate) vouches for the
# intercepted host, and not for the opaque one.
awk '/BEGIN CERT/{{b=""}} {{b=b $0 "\n"}} END{{printf "%s", b}}' /run/hutch/ca-bundle.pem > /tmp/only-ca.pem
echo "ONLYCA:$(curl -sS --max-time 10 --cacert /tmp/only-ca.pem --capath /nonexistent $i/only-ca)"
curl -sS --max-time 10 --cacert /tmp/only-ca.pem --capath /nonexistent $o/only-ca >/dev/null 2>&1; echo "ONLYCA_OPAQUE:$?"
echo "OPAQUE:$(curl -sS --max-time 10 $o/opaque)"
echo "OPAQUE_ISSUER:$(curl -sS --max-time 10 -v -o /dev/null $o/opaque-issuer 2>&1 | grep -m1 'issuer:')"
python3 - <<'EOF'
import http.client, ssl, urllib.request
print("URLLIB:" + urllib.request.urlopen("https://{INTERCEPTED}:{p}/urllib", timeout=10).read().decode())
c = http.client.HTTPSConnection("127.0.0.1", 3128, context=ssl.create_default_context(), timeout=10)
c.set_tunnel("{INTERCEPTED}", {p})
c.request("GET", "/http-client")
body = c.getresponse().read().decode()
issuer = dict(x[0] for x in c.sock.getpeercert()["issuer"])
print("PYISSUER:" + issuer["commonName"] + " / " + body)
EOF
echo "ENV:$SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $GIT_SSL_CAINFO $PIP_CERT"
echo "RUN:$(ls /run/hutch | tr '\n' ' ')"
echo "KEYS:$(cat /run/hutch/ca-bundle.pem /proc/*/environ 2>/dev/null | grep -c 'PRIVATE KEY')"
echo x >> /run/hutch/ca-bundle.pem 2>/dev/null; echo "WRITE:$?"
"#,
        p = up.port
    );
    let (out, audit) = run(who, &dir, &up, "proxy", &script);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    let host = format!("{INTERCEPTED}:{}", up.port);
    // What the upstream saw, without the protocol it was reached with
    // (the request pipeline picks its own towards the upstream).
    let seen = |tag: &str| {
        let l = line(&text, tag);
        l.split_once(' ').map_or(l, |(_, rest)| rest).to_string()
    };
    assert_eq!(seen("H2:"), format!("{host} /curl-h2 client=2"));
    assert_eq!(seen("H1:"), format!("{host} /curl-h1 client=1.1"));
    // The upstream was reached with the client's own protocol (an h2
    // client may need trailers; an HTTP/1.1 one streams faster over 1.1).
    assert!(line(&text, "H2:").starts_with("HTTP/2.0 "), "{text}");
    assert!(line(&text, "H1:").starts_with("HTTP/1.1 "), "{text}");
    assert!(line(&text, "ISSUER:").contains("ephemeral CA"), "{text}");
    assert_eq!(seen("ONLYCA:"), format!("{host} /only-ca"));
    assert_ne!(line(&text, "ONLYCA_OPAQUE:"), "0", "{text}");
    assert_eq!(seen("OPAQUE:"), format!("{OPAQUE}:{} /opaque", up.port));
    assert!(
        line(&text, "OPAQUE_ISSUER:").contains(UPSTREAM_CA_NAME),
        "{text}"
    );
    assert_eq!(seen("URLLIB:"), format!("{host} /urllib"));
    let py = line(&text, "PYISSUER:");
    assert!(
        py.contains("ephemeral CA") && py.ends_with("/http-client"),
        "{py}"
    );
    let b = "/run/hutch/ca-bundle.pem";
    assert_eq!(line(&text, "ENV:"), [b; 6].join(" "));
    assert_eq!(line(&text, "RUN:"), "ca-bundle.pem proxy.sock ");
    assert_eq!(line(&text, "KEYS:"), "0");
    assert_ne!(line(&text, "WRITE:"), "0");

    // Every request reached the upstream; the intercepted host's leaf was
    // minted by its first connection only.
    let seen = up.seen.lock().unwrap().clone();
    // (the opaque host refused by a client trusting the CA alone never
    // got a request)
    assert_eq!(seen.len(), 8, "{seen:?}");
    let intercepted = connections(&audit, INTERCEPTED);
    assert_eq!(intercepted.len(), 6, "{intercepted:#?}");
    let minted = intercepted
        .iter()
        .filter(|l| l["intercept"] == "leaf-minted")
        .count();
    assert_eq!(minted, 1, "{intercepted:#?}");
    assert!(
        intercepted
            .iter()
            .all(|l| l["intercept"] == "leaf-minted" || l["intercept"] == "leaf-cached"),
        "{intercepted:#?}"
    );
    // Each decrypted request went through the request pipeline: one
    // line each, with its path.
    let requests: Vec<_> = audit.iter().filter(|l| l["via"] == "intercept").collect();
    assert_eq!(requests.len(), 6, "{requests:#?}");
    assert!(
        requests.iter().any(|l| l["path"] == "/urllib"),
        "{requests:#?}"
    );
    let opaque = connections(&audit, OPAQUE);
    assert_eq!(opaque.len(), 3, "{opaque:#?}");
    assert!(
        opaque.iter().all(|l| l.get("intercept").is_none()),
        "{opaque:#?}"
    );
}

/// `--egress-mode transparent`: a program that ignores the proxy
/// variables connects to the name; the captured connection is
/// terminated the same way.
#[test]
fn a_captured_connection_is_intercepted_in_transparent_egress_root() {
    captured_connection_intercepted(As::Root);
}

#[test]
fn a_captured_connection_is_intercepted_in_transparent_egress_unprivileged() {
    captured_connection_intercepted(As::Nobody);
}

fn captured_connection_intercepted(who: As) {
    let can = can_launch_as(who);
    require!(can.is_ok(), can.unwrap_err());
    require!(
        common::have("curl"),
        "curl is needed (tests/setup installs it)"
    );
    let dir = TempDir::new("intercept-t", who);
    let up = upstream(dir.path(), who);
    let script = format!(
        r#"
echo "T:$(curl -sS --max-time 10 --noproxy '*' https://{INTERCEPTED}:{p}/captured)"
echo "TO:$(curl -sS --max-time 10 --noproxy '*' https://{OPAQUE}:{p}/captured-opaque)"
"#,
        p = up.port
    );
    let (out, audit) = run(who, &dir, &up, "transparent", &script);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(
        line(&text, "T:").ends_with(&format!(" {INTERCEPTED}:{} /captured", up.port)),
        "{text}"
    );
    assert_eq!(
        line(&text, "TO:"),
        format!("HTTP/2.0 {OPAQUE}:{} /captured-opaque", up.port)
    );
    let tcp = connections(&audit, INTERCEPTED);
    assert_eq!(tcp.len(), 1, "{audit:#?}");
    assert_eq!(tcp[0]["door"], "transparent");
    assert_eq!(tcp[0]["intercept"], "leaf-minted");
    assert_eq!(connections(&audit, OPAQUE)[0].get("intercept"), None);
}

/// Bad `intercept` entries are refused before anything starts, in one
/// line naming the entry; the standalone proxy refuses interception (it
/// cannot place a CA in anyone's trust).
#[test]
fn bad_intercept_entries_and_the_standalone_proxy_are_refused() {
    let who = common::caller();
    let dir = TempDir::new("intercept-bad", who);
    let policy = dir.path().join("policy.toml");
    for (entry, why) in [
        ("*.example.com", "one name, not a pattern"),
        ("api.example.com:0", "api.example.com:0"),
    ] {
        write_as(
            &policy,
            &format!(
                "[profiles.t]\nallow = [\"api.example.com\"]\n[[profiles.t.intercept]]\nhost = \"{entry}\"\n"
            ),
            who,
        );
        let out = hutch_command(who)
            .args(["run", "--quiet", "--egress-policy"])
            .arg(&policy)
            .args(["--", "true"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("intercept[0].host") && err.contains(why),
            "{err}"
        );
    }
    write_as(
        &policy,
        "[profiles.t]\nallow = [\"api.example.com\"]\n[[profiles.t.intercept]]\nhost = \"api.example.com\"\n",
        who,
    );
    // A proxy that started would serve until signalled: wait for its end
    // with a deadline, and stop it if it is still running.
    let mut child = hutch_command(who)
        .args(["proxy", "--policy"])
        .arg(&policy)
        .args(["--listen", "tcp:127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hutch proxy with `intercept` started instead of refusing");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("lists hosts to intercept"), "{err}");
    assert!(!err.contains("listening on"), "{err}");
}
