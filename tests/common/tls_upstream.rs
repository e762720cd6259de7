//! A local HTTPS upstream for the gateway and interception tests: a test
//! CA made by rcgen (its PEM written where the proxy's `SSL_CERT_FILE` can
//! point), a leaf for the names asked, HTTP/1.1 and HTTP/2 by ALPN. It
//! records every request (method, path, headers, body) and answers
//! scripted responses:
//!
//! - `/sse/N`: N server-sent events, each sent only when the test calls
//!   [`TlsUpstream::release`] (so a test sees each one arrive before the
//!   next exists);
//! - `/echo`: 401 with the request's `x-api-key` and `authorization`
//!   quoted in the body and in an `x-echo` header (an API error quoting
//!   the key);
//! - `/stream/N`: N server-sent events at once (a small streamed answer);
//! - `/bytes/N`: N bytes, streamed in 64 KiB chunks;
//! - anything else: 200 `{"ok":true,"path":"..."}`.
//!
//! Include it with `#[path = "common/tls_upstream.rs"] mod tls_upstream;`.

#![allow(dead_code)]

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::sync::Semaphore;

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub version: String,
    /// `:authority` (HTTP/2) or `Host` (HTTP/1.1).
    pub authority: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct TlsUpstream {
    pub port: u16,
    /// The test CA's certificate (PEM), world-readable.
    pub ca_file: PathBuf,
    /// The same certificate, DER.
    pub ca_der: Vec<u8>,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Semaphore>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl TlsUpstream {
    /// Serve on 127.0.0.1 (an ephemeral port) with a leaf for `names`
    /// (and 127.0.0.1); `alpn`: what the server offers (`["h2",
    /// "http/1.1"]`, or one of them). The CA's PEM goes to `dir/ca.pem`.
    pub fn start(dir: &Path, names: &[&str], alpn: &[&str]) -> TlsUpstream {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "hutch test CA");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let mut sans: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        sans.push("127.0.0.1".into());
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(sans)
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ca_file, std::fs::Permissions::from_mode(0o644)).unwrap();

        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let release = Arc::new(Semaphore::new(0));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (seen2, release2, conns2) = (seen.clone(), release.clone(), connections.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                let accept = async {
                    loop {
                        let Ok((tcp, _)) = l.accept().await else {
                            continue;
                        };
                        conns2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let _ = tcp.set_nodelay(true);
                        let (acc, seen, release) =
                            (acceptor.clone(), seen2.clone(), release2.clone());
                        tokio::spawn(async move {
                            let Ok(tls) = acc.accept(tcp).await else {
                                return;
                            };
                            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                            let svc =
                                service_fn(move |req| answer(req, seen.clone(), release.clone()));
                            let io = TokioIo::new(tls);
                            if h2 {
                                let _ =
                                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                        .serve_connection(io, svc)
                                        .await;
                            } else {
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(io, svc)
                                    .await;
                            }
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stop_rx => {}
                }
            });
        });
        TlsUpstream {
            port,
            ca_file,
            ca_der: ca_cert.der().to_vec(),
            seen,
            release,
            connections,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Let `n` more server-sent events out.
    pub fn release(&self, n: usize) {
        self.release.add_permits(n);
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: u16, headers: &[(&str, String)], body: String) -> Response<Body> {
    let mut r = Response::builder().status(status);
    for (k, v) in headers {
        r = r.header(*k, v.as_str());
    }
    r.body(Full::new(Bytes::from(body)).boxed()).unwrap()
}

async fn answer(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Semaphore>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let header = |n: &str| {
        parts
            .headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (key, auth) = (header("x-api-key"), header("authorization"));
    seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map_or("/".into(), |p| p.as_str().to_string()),
        version: format!("{:?}", parts.version),
        authority: parts
            .uri
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_else(|| header("host")),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
            .collect(),
        body,
    });
    if let Some(n) = path.strip_prefix("/sse/") {
        let n: usize = n.parse().unwrap_or(1);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
        tokio::spawn(async move {
            for i in 1..=n {
                let Ok(p) = release.acquire().await else {
                    return;
                };
                p.forget();
                let ev = format!("event: delta\ndata: {{\"n\":{i}}}\n\n");
                if tx.send(Ok(Frame::data(Bytes::from(ev)))).await.is_err() {
                    return;
                }
            }
        });
        return Ok(Response::builder()
            .header("content-type", "text/event-stream")
            .body(ChannelBody { rx }.boxed())
            .unwrap());
    }
    if let Some(n) = path.strip_prefix("/stream/") {
        let n: usize = n.parse().unwrap_or(1);
        let mut text = String::new();
        for i in 1..=n {
            text.push_str(&format!("event: delta\ndata: {{\"n\":{i}}}\n\n"));
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(n.max(1));
        for ev in text.split_inclusive("\n\n") {
            let _ = tx.try_send(Ok(Frame::data(Bytes::from(ev.to_string()))));
        }
        drop(tx);
        return Ok(Response::builder()
            .header("content-type", "text/event-stream")
            .body(ChannelBody { rx }.boxed())
            .unwrap());
    }
    if path == "/echo" {
        let text = format!("invalid key {key:?} (authorization {auth:?})");
        return Ok(full(
            401,
            &[("content-type", "application/json".into()), ("x-echo", key)],
            format!("{{\"error\":{text:?}}}"),
        ));
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        let mut left: usize = n.parse().unwrap_or(0);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tokio::spawn(async move {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            while left > 0 {
                let k = left.min(chunk.len());
                if tx.send(Ok(Frame::data(chunk.slice(..k)))).await.is_err() {
                    return;
                }
                left -= k;
            }
        });
        return Ok(Response::builder()
            .header("content-type", "application/octet-stream")
            .header("content-length", n)
            .body(ChannelBody { rx }.boxed())
            .unwrap());
    }
    Ok(full(
        200,
        &[("content-type", "application/json".into())],
        format!("{{\"ok\":true,\"path\":{path:?}}}"),
    ))
}

/// A body fed by a channel, frame by frame.
struct ChannelBody {
    rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx)
    }
}
