//! The upstream side of a brokered request: the policy's verdict on the
//! upstream, the dial (the same resolution, address vetting and deadline
//! as every other egress), TLS with certificates verified against the
//! host's trust store (rustls-native-certs: `SSL_CERT_FILE`,
//! `SSL_CERT_DIR`, else the system bundle), then HTTP. The TLS code is
//! only reached when a sandbox has a gateway or an intercepted host; the
//! trust store is read on first use.
//!
//! The upstream protocol follows the sandbox's: a request that came in
//! over HTTP/1.x (every gateway request) goes out over HTTP/1.1 (ALPN
//! `http/1.1` only); one that came in over HTTP/2 (an intercepted h2
//! client, which may rely on trailers, as gRPC does) offers `h2` first.
//! HTTP/1.1 is chosen where the client spoke it because a streamed answer
//! through hyper's h2 client is measured at about half the throughput of
//! HTTP/1.1 in the same run (`examples/gateway_bench.rs`), and the doors
//! serve one request per connection, so h2's multiplexing buys nothing.
//!
//! Connections are kept for the next request to the same upstream asking
//! the same protocol ([`Pool`]): an HTTP/2 one is shared by concurrent
//! requests, an HTTP/1.1 one goes back to the pool once its response has
//! been read.
//! A connection's driver holds no request's state, so each request's
//! audit line is written when that request ends.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use super::body::UpBody;
use crate::net::answer::{Body, answer};
use crate::net::dial::dial;
use crate::net::host::CanonicalHost;
use crate::net::policy::Verdict;
use crate::net::record::{Decision, Outcome};

/// The client configurations (HTTP/1.1 only; h2 first), built once per
/// process on first use.
static TLS: OnceLock<Result<[Arc<rustls::ClientConfig>; 2], String>> = OnceLock::new();

/// The client configuration offering `h2` (first) when `h2`, else
/// `http/1.1` alone.
fn client_config(h2: bool) -> Result<Arc<rustls::ClientConfig>, String> {
    let both = TLS.get_or_init(|| {
        let base = build_client_config()?;
        let mut h1 = base.clone();
        h1.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut h2 = base;
        h2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok([Arc::new(h1), Arc::new(h2)])
    });
    both.as_ref()
        .map(|[h1, h2_first]| if h2 { h2_first.clone() } else { h1.clone() })
        .map_err(Clone::clone)
}

fn build_client_config() -> Result<rustls::ClientConfig, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_string(), |e| e.to_string());
        return Err(format!(
            "no trusted CA certificate on the host ({why}); install ca-certificates \
             or point SSL_CERT_FILE at a bundle"
        ));
    }
    // ring, not aws-lc-rs: docs/decisions/0006-tls-provider.md. Its
    // deprecation only says it lacks post-quantum key exchange.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A connection to an upstream, ready for one request.
pub(crate) enum Sender {
    H1(http1::SendRequest<UpBody>),
    H2(http2::SendRequest<UpBody>),
}

/// A failed send; `Some` request when it never left (a kept connection
/// the server had closed), so it can go on a new connection.
pub(crate) type SendError = (hyper::Error, Option<Request<UpBody>>);

impl Sender {
    pub(crate) fn is_h2(&self) -> bool {
        matches!(self, Sender::H2(_))
    }

    fn usable(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_ready(),
            Sender::H2(s) => s.is_ready(),
        }
    }

    pub(crate) async fn send(
        &mut self,
        req: Request<UpBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let r = match self {
            Sender::H1(s) => s.try_send_request(req).await,
            Sender::H2(s) => s.try_send_request(req).await,
        };
        r.map_err(|mut e| {
            let req = e.take_message();
            (e.into_error(), req)
        })
    }
}

/// The largest HTTP/2 frame the upstream may send us.
const H2_MAX_FRAME: u32 = 128 * 1024;

/// Most kept connections per proxy, and how long one is kept unused.
const POOL_MAX: usize = 16;
const POOL_IDLE: Duration = Duration::from_secs(60);

struct Kept {
    host: CanonicalHost,
    port: u16,
    /// The connection was opened offering h2 (see the module's doc).
    offered_h2: bool,
    address: Option<String>,
    sender: Sender,
    since: tokio::time::Instant,
}

/// Upstream connections kept for the next request (one proxy's).
#[derive(Default)]
pub(crate) struct Pool {
    kept: Mutex<Vec<Kept>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

impl Pool {
    /// A kept connection to `host:port`, opened offering h2 or not as
    /// `offer_h2` says, and the address it went to.
    pub(crate) fn take(
        &self,
        host: &CanonicalHost,
        port: u16,
        offer_h2: bool,
    ) -> Option<(Sender, Option<String>)> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|k| k.sender.usable() && k.since.elapsed() < POOL_IDLE);
        let i = kept
            .iter()
            .position(|k| &k.host == host && k.port == port && k.offered_h2 == offer_h2)?;
        match &kept[i].sender {
            // Shared: it stays for the other requests.
            Sender::H2(s) => Some((Sender::H2(s.clone()), kept[i].address.clone())),
            Sender::H1(_) => {
                let k = kept.swap_remove(i);
                Some((k.sender, k.address))
            }
        }
    }

    /// Keep `sender` (HTTP/2: at once; HTTP/1.1: once its response has
    /// been read whole, which `ready` waits for).
    pub(crate) fn put(
        self: &Arc<Self>,
        host: CanonicalHost,
        port: u16,
        offered_h2: bool,
        address: Option<String>,
        sender: Sender,
    ) {
        let key = (host, port, offered_h2);
        match sender {
            Sender::H2(_) => self.keep(key, address, sender),
            Sender::H1(mut s) => {
                let pool = self.clone();
                tokio::spawn(async move {
                    if s.ready().await.is_ok() {
                        pool.keep(key, address, Sender::H1(s));
                    }
                });
            }
        }
    }

    fn keep(
        &self,
        (host, port, offered_h2): (CanonicalHost, u16, bool),
        address: Option<String>,
        sender: Sender,
    ) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|k| k.sender.usable() && k.since.elapsed() < POOL_IDLE);
        let dup = sender.is_h2()
            && kept.iter().any(|k| {
                k.host == host && k.port == port && k.offered_h2 == offered_h2 && k.sender.is_h2()
            });
        if !dup && kept.len() < POOL_MAX {
            kept.push(Kept {
                host,
                port,
                offered_h2,
                address,
                sender,
                since: tokio::time::Instant::now(),
            });
        }
    }
}

/// The allow-list's verdict on the upstream (every request, kept
/// connection or not): the allowing rule, or the answer to send.
#[allow(clippy::result_large_err)] // the answer itself, as `dial` returns it
pub(crate) fn check(
    dec: &Decision,
    host: &CanonicalHost,
    port: u16,
) -> Result<String, Response<Body>> {
    match dec.state.policy.check(host, port) {
        Verdict::Allow(rule) => {
            dec.with(|f| f.rule = Some(rule.clone()));
            Ok(rule)
        }
        Verdict::Deny(rule) => {
            let msg = format!("upstream {host}:{port} is not allowed: {rule}");
            dec.with(|f| f.rule = Some(rule));
            dec.finish_with(Outcome::Deny, 403, msg.clone());
            Err(answer(StatusCode::FORBIDDEN, "denied", &msg))
        }
    }
}

/// Dial the upstream allowed by `rule`, verify its certificate and speak
/// HTTP (offering h2 only when `offer_h2`: see the module's doc); each
/// failure is recorded in `dec` and is the answer to send.
pub(crate) async fn connect(
    dec: &Arc<Decision>,
    host: &CanonicalHost,
    port: u16,
    rule: &str,
    offer_h2: bool,
) -> Result<Sender, Response<Body>> {
    let state = dec.state.clone();
    let config = client_config(offer_h2).map_err(|why| {
        let msg = format!("upstream {host}:{port}: {why}");
        dec.finish_with(Outcome::Error, 502, msg.clone());
        answer(StatusCode::BAD_GATEWAY, "tls", &msg)
    })?;
    let tcp = dial(&state, dec, host, port, rule).await?;
    let name = match host {
        CanonicalHost::Name(n) => ServerName::try_from(n.clone()),
        CanonicalHost::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
    };
    let name = name.map_err(|e| {
        let msg = format!("upstream {host}: not a TLS server name: {e}");
        dec.finish_with(Outcome::Invalid, 502, msg.clone());
        answer(StatusCode::BAD_GATEWAY, "tls", &msg)
    })?;
    let limits = state.policy.limits();
    let handshake = TlsConnector::from(config).connect(name, tcp);
    let tls = match tokio::time::timeout(limits.handshake_timeout, handshake).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let msg = format!("TLS with upstream {host}:{port} failed: {e}");
            dec.finish_with(Outcome::Error, 502, msg.clone());
            return Err(answer(StatusCode::BAD_GATEWAY, "tls", &msg));
        }
        Err(_) => {
            let msg = format!("TLS with upstream {host}:{port} timed out");
            dec.finish_with(Outcome::Error, 504, msg.clone());
            return Err(answer(StatusCode::GATEWAY_TIMEOUT, "timeout", &msg));
        }
    };
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let fail = |e: hyper::Error| {
        let msg = format!("upstream {host}:{port}: {e}");
        dec.finish_with(Outcome::Error, 502, msg.clone());
        answer(StatusCode::BAD_GATEWAY, "upstream", &msg)
    };
    // The drivers hold no request's state: a request's own timeouts are
    // its bodies' ([`super::body`]); a connection ends when its senders
    // are dropped (the pool lets go of it) or the upstream closes it.
    if h2 {
        // Frames of up to 128 KiB (the default 16 KiB makes a streamed
        // answer eight times as many frames, chunks and wakeups).
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .max_frame_size(H2_MAX_FRAME)
            .handshake(io)
            .await
            .map_err(fail)?;
        tokio::spawn(conn);
        Ok(Sender::H2(sender))
    } else {
        let (sender, conn) = http1::handshake(io).await.map_err(fail)?;
        tokio::spawn(conn);
        Ok(Sender::H1(sender))
    }
}
