//! The proxy server: accept on the doors, parse one request per
//! connection with hyper, decide, resolve, vet, dial, then tunnel or
//! forward. Every decision leaves one audit record.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::host::{Host, canonicalize, split_host_port};
use super::policy::{Policy, Verdict};
use super::tunnel::{Meter, SpliceIo, pump, write_all};
use super::{Door, NetError};
use crate::audit::AuditSink;

/// Concurrent name resolutions (each holds a blocking thread).
pub(crate) const MAX_RESOLVERS: usize = 16;

type Body = UnsyncBoxBody<Bytes, hyper::Error>;

/// Everything shared by the connections of one sandbox.
pub(crate) struct State {
    policy: Policy,
    sandbox_id: String,
    audit: Option<AuditSink>,
    connections: Arc<Semaphore>,
    tunnels: Arc<Semaphore>,
    resolvers: Semaphore,
    bytes_total: AtomicU64,
}

impl State {
    pub(crate) fn new(policy: Policy, sandbox_id: String, audit: Option<AuditSink>) -> Arc<State> {
        let l = policy.limits().clone();
        Arc::new(State {
            connections: Arc::new(Semaphore::new(
                l.max_connections.min(Semaphore::MAX_PERMITS),
            )),
            tunnels: Arc::new(Semaphore::new(l.max_tunnels.min(Semaphore::MAX_PERMITS))),
            resolvers: Semaphore::new(MAX_RESOLVERS),
            bytes_total: AtomicU64::new(0),
            policy,
            sandbox_id,
            audit,
        })
    }

    fn budget_left(&self) -> bool {
        match self.policy.limits().max_bytes {
            Some(max) => self.bytes_total.load(Ordering::Relaxed) < max,
            None => true,
        }
    }
}

/// A listening door, registered with the runtime.
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Must run inside the runtime's context.
    pub(crate) fn from_fd(door: Door, fd: OwnedFd) -> Result<Listener, NetError> {
        match door {
            Door::Tcp => {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true)
                    .map_err(|e| NetError::io("tcp door: set non-blocking", e))?;
                TcpListener::from_std(l)
                    .map(Listener::Tcp)
                    .map_err(|e| NetError::io("tcp door: register", e))
            }
            Door::Unix => {
                let l = std::os::unix::net::UnixListener::from(fd);
                l.set_nonblocking(true)
                    .map_err(|e| NetError::io("unix door: set non-blocking", e))?;
                UnixListener::from_std(l)
                    .map(Listener::Unix)
                    .map_err(|e| NetError::io("unix door: register", e))
            }
        }
    }
}

/// Serve every door until `stop` fires (or its sender is dropped).
pub(crate) async fn serve(
    state: Arc<State>,
    listeners: Vec<Listener>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for l in listeners {
        let st = state.clone();
        match l {
            Listener::Tcp(l) => tasks.spawn(async move {
                loop {
                    match l.accept().await {
                        Ok((s, _)) => {
                            let _ = s.set_nodelay(true);
                            admit(&st, s, Door::Tcp);
                        }
                        Err(e) => accept_failed(e).await,
                    }
                }
            }),
            Listener::Unix(l) => tasks.spawn(async move {
                loop {
                    match l.accept().await {
                        Ok((s, _)) => admit(&st, s, Door::Unix),
                        Err(e) => accept_failed(e).await,
                    }
                }
            }),
        };
    }
    let _ = stop.await;
    tasks.abort_all();
}

/// Out of fds or memory: back off instead of spinning.
async fn accept_failed(_e: io::Error) {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Take a connection slot or turn the client away with a canned 429.
fn admit<S: SpliceIo + AsyncRead + AsyncWrite + Unpin>(state: &Arc<State>, s: S, door: Door) {
    let Ok(permit) = state.connections.clone().try_acquire_owned() else {
        let body = "hutch egress proxy: too many connections from this sandbox\n";
        let head = format!(
            "HTTP/1.1 429 Too Many Requests\r\nX-Hutch-Error: limit: too many connections\r\n\
             Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = s.try_write_now(head.as_bytes());
        let rec = Decision::new(state.clone(), door, "-".into());
        rec.finish_with(Outcome::Limit, 429, "max_connections reached".into());
        return;
    };
    let st = state.clone();
    tokio::spawn(async move {
        let _permit = permit;
        serve_connection(st, s, door).await;
    });
}

async fn serve_connection<S>(state: Arc<State>, s: S, door: Door)
where
    S: SpliceIo + AsyncRead + AsyncWrite + Unpin,
{
    let limits = state.policy.limits().clone();
    let st = state.clone();
    let reached = Arc::new(AtomicBool::new(false));
    let seen = reached.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        seen.store(true, Ordering::Relaxed);
        let st = st.clone();
        async move { Ok::<_, Infallible>(handle::<S>(st, door, req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.handshake_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes.max(8192) + 8192)
        .max_headers(100)
        .half_close(true)
        .keep_alive(false);
    let conn = builder
        .serve_connection(TokioIo::new(s), service)
        .with_upgrades();
    let ended = tokio::time::timeout(limits.total_timeout, conn).await;
    // A request head hyper refused never reached `handle`: it is a decision
    // too, so a client probing with malformed, oversized or endless heads
    // leaves its audit lines like any other.
    if !reached.load(Ordering::Relaxed)
        && let Ok(Err(e)) = &ended
        && let Some((outcome, status, why)) = refused_head(e, &limits)
    {
        Decision::new(state, door, "-".into()).finish_with(outcome, status, why);
    }
}

/// What a connection-level error before any request means for the audit
/// log; `None` for what is not a decision (an I/O error, or a client that
/// connected and left without sending anything). Status 0: the connection
/// was closed without an answer.
fn refused_head(
    e: &hyper::Error,
    limits: &crate::net::policy::Limits,
) -> Option<(Outcome, u16, String)> {
    if e.is_parse_too_large() {
        Some((
            Outcome::Limit,
            431,
            format!("request head over {} bytes", limits.max_header_bytes),
        ))
    } else if e.is_parse() || e.is_parse_status() {
        Some((
            Outcome::Invalid,
            400,
            format!("malformed request head: {e}"),
        ))
    } else if e.is_timeout() {
        Some((
            Outcome::Limit,
            0,
            format!(
                "request head not complete within the handshake timeout ({} s); closed",
                limits.handshake_timeout.as_secs_f64()
            ),
        ))
    } else if e.is_incomplete_message() {
        Some((
            Outcome::Invalid,
            0,
            "connection closed in the middle of a request head".into(),
        ))
    } else {
        None
    }
}

/// How a decision ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Outcome {
    Allow,
    Deny,
    Invalid,
    Limit,
    Error,
}

#[derive(Debug, Default, Serialize)]
struct Fields {
    method: String,
    host: Option<String>,
    port: Option<u16>,
    address: Option<String>,
    rule: Option<String>,
    verdict: Option<Outcome>,
    status: u16,
    error: Option<String>,
    connect_ms: Option<u64>,
}

#[derive(Serialize)]
struct Event<'a> {
    sandbox: &'a str,
    door: &'static str,
    #[serde(flatten)]
    fields: &'a Fields,
    bytes_up: u64,
    bytes_down: u64,
    duration_ms: u64,
}

/// One decision and its traffic; the audit line is written when the last
/// reference drops (at the end of the tunnel or forwarded request, also
/// when it is cancelled).
struct Decision {
    state: Arc<State>,
    door: Door,
    start: Instant,
    fields: Mutex<Fields>,
    up: AtomicU64,
    down: AtomicU64,
    /// Milliseconds since `start` of the last byte moved.
    last_activity: AtomicU64,
}

impl Decision {
    fn new(state: Arc<State>, door: Door, method: String) -> Arc<Decision> {
        Arc::new(Decision {
            state,
            door,
            start: Instant::now(),
            fields: Mutex::new(Fields {
                method,
                ..Default::default()
            }),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            last_activity: AtomicU64::new(0),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Fields) -> R) -> R {
        let mut g = self.fields.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    fn finish_with(&self, verdict: Outcome, status: u16, error: String) {
        self.with(|f| {
            f.verdict = Some(verdict);
            f.status = status;
            f.error = Some(error);
        });
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_activity.store(ms, Ordering::Relaxed);
    }

    /// Resolves when the decision's traffic has been idle for `idle`, or
    /// its total time is up; returns which.
    async fn watchdog(&self, idle: Duration, total: Duration) -> &'static str {
        let deadline = self.start + total;
        loop {
            let last =
                self.start + Duration::from_millis(self.last_activity.load(Ordering::Relaxed));
            let idle_deadline = last + idle;
            let now = Instant::now();
            if now >= deadline {
                return "total timeout";
            }
            if now >= idle_deadline {
                return "idle timeout";
            }
            tokio::time::sleep_until(idle_deadline.min(deadline)).await;
        }
    }
}

impl Drop for Decision {
    fn drop(&mut self) {
        let Some(audit) = &self.state.audit else {
            return;
        };
        let fields = self.fields.lock().unwrap_or_else(|p| p.into_inner());
        let ev = Event {
            sandbox: &self.state.sandbox_id,
            door: self.door.name(),
            fields: &fields,
            bytes_up: self.up.load(Ordering::Relaxed),
            bytes_down: self.down.load(Ordering::Relaxed),
            duration_ms: self.start.elapsed().as_millis() as u64,
        };
        if let Err(e) = audit.record("egress", &ev) {
            eprintln!("hutch proxy: {e}");
        }
    }
}

/// Counts one direction of a decision's traffic against the sandbox's
/// byte budget.
struct DirMeter<'a> {
    dec: &'a Decision,
    up: bool,
}

impl Meter for DirMeter<'_> {
    fn account(&self, n: usize) -> io::Result<()> {
        let n = n as u64;
        if self.up {
            self.dec.up.fetch_add(n, Ordering::Relaxed);
        } else {
            self.dec.down.fetch_add(n, Ordering::Relaxed);
        }
        self.dec.touch();
        let st = &self.dec.state;
        let total = st.bytes_total.fetch_add(n, Ordering::Relaxed) + n;
        match st.policy.limits().max_bytes {
            Some(max) if total > max => Err(io::Error::other("sandbox byte limit reached")),
            _ => Ok(()),
        }
    }
}

/// A denial or failure answer that tells the client (often an agent) why.
fn answer(status: StatusCode, code: &str, text: &str) -> Response<Body> {
    let clean: String = text
        .chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect();
    let body = format!("hutch egress proxy: {clean}\n");
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|n| match n {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if let Ok(v) = HeaderValue::from_str(&format!("{code}: {clean}")) {
        h.insert(HeaderName::from_static("x-hutch-error"), v);
    }
    r
}

/// The request's target as the client wrote it.
enum Target {
    Tunnel,
    Forward,
}

async fn handle<S>(state: Arc<State>, door: Door, mut req: Request<Incoming>) -> Response<Body>
where
    S: SpliceIo + AsyncRead + AsyncWrite + Unpin,
{
    let dec = Decision::new(state.clone(), door, req.method().as_str().to_string());
    let (target, host_raw, port) = match parse_target(door, &req) {
        Ok(t) => t,
        Err(msg) => {
            dec.finish_with(Outcome::Invalid, 400, msg.clone());
            return answer(StatusCode::BAD_REQUEST, "invalid", &msg);
        }
    };
    dec.with(|f| f.port = Some(port));
    let host = match canonicalize(&host_raw) {
        Ok(h) => h,
        Err(e) => {
            let msg = format!("invalid host {host_raw:?}: {e}");
            dec.with(|f| f.host = Some(host_raw.escape_default().to_string()));
            dec.finish_with(Outcome::Invalid, 400, msg.clone());
            return answer(StatusCode::BAD_REQUEST, "invalid", &msg);
        }
    };
    dec.with(|f| f.host = Some(host.to_string()));
    let rule = match state.policy.check(&host, port) {
        Verdict::Allow(rule) => rule,
        Verdict::Deny(rule) => {
            let msg = format!("{host}:{port} is not allowed: {rule}");
            dec.with(|f| f.rule = Some(rule));
            dec.finish_with(Outcome::Deny, 403, msg.clone());
            return answer(StatusCode::FORBIDDEN, "denied", &msg);
        }
    };
    dec.with(|f| f.rule = Some(rule.clone()));
    if !state.budget_left() {
        let msg = "the sandbox's egress byte limit is used up".to_string();
        dec.finish_with(Outcome::Limit, 429, msg.clone());
        return answer(StatusCode::TOO_MANY_REQUESTS, "limit", &msg);
    }
    let Ok(permit) = state.tunnels.clone().try_acquire_owned() else {
        let msg = format!(
            "too many concurrent tunnels (limit {})",
            state.policy.limits().max_tunnels
        );
        dec.finish_with(Outcome::Limit, 429, msg.clone());
        return answer(StatusCode::TOO_MANY_REQUESTS, "limit", &msg);
    };
    let upstream = match dial(&state, &dec, &host, port, &rule).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    match target {
        Target::Tunnel => {
            let on_upgrade = hyper::upgrade::on(&mut req);
            dec.with(|f| {
                f.verdict = Some(Outcome::Allow);
                f.status = 200;
            });
            let d = dec.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match on_upgrade.await {
                    Ok(up) => tunnel::<S>(d, up, upstream).await,
                    Err(e) => d.with(|f| f.error = Some(format!("upgrade failed: {e}"))),
                }
            });
            Response::new(
                Full::new(Bytes::new())
                    .map_err(|n| match n {})
                    .boxed_unsync(),
            )
        }
        Target::Forward => forward(dec, req, host, port, upstream, permit).await,
    }
}

/// Work out the destination: CONNECT authority, absolute URI, or (on the
/// Unix door only) the Host header of an origin-form request.
fn parse_target(door: Door, req: &Request<Incoming>) -> Result<(Target, String, u16), String> {
    let uri: &Uri = req.uri();
    if req.method() == Method::CONNECT {
        let auth = uri.authority().ok_or("CONNECT needs a host:port target")?;
        let port = auth.port_u16().ok_or("CONNECT target has no port")?;
        if port == 0 {
            return Err("port 0".into());
        }
        return Ok((Target::Tunnel, auth.host().to_string(), port));
    }
    if let Some(scheme) = uri.scheme_str() {
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(format!(
                "absolute-form {scheme}:// is not proxied; use CONNECT for TLS"
            ));
        }
        let auth = uri.authority().ok_or("absolute URI without host")?;
        if auth.as_str().contains('@') {
            return Err("credentials in the URI are refused".into());
        }
        let port = auth.port_u16().unwrap_or(80);
        if port == 0 {
            return Err("port 0".into());
        }
        return Ok((Target::Forward, auth.host().to_string(), port));
    }
    if door != Door::Unix {
        return Err(
            "this is a proxy: send an absolute-form request (http://host/...) or CONNECT".into(),
        );
    }
    let hosts: Vec<&HeaderValue> = req.headers().get_all(header::HOST).iter().collect();
    if hosts.len() != 1 {
        return Err("an origin-form request needs exactly one Host header".into());
    }
    let value = hosts[0]
        .to_str()
        .map_err(|_| "Host header is not visible ASCII".to_string())?;
    let (h, port) = split_host_port(value)?;
    Ok((Target::Forward, h.to_string(), port.unwrap_or(80)))
}

/// Resolve (or take the override / literal), vet every address, dial the
/// first vetted one that answers. Errors are the answer to send.
async fn dial(
    state: &State,
    dec: &Decision,
    host: &Host,
    port: u16,
    rule: &str,
) -> Result<TcpStream, Response<Body>> {
    let limits = state.policy.limits();
    let t0 = Instant::now();
    let addrs: Vec<IpAddr> = match host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => match state.policy.resolve_override(host) {
            Some(ip) => vec![ip],
            None => match resolve(state, name, port, limits.connect_timeout).await {
                Ok(a) if !a.is_empty() => a,
                Ok(_) | Err(_) => {
                    let msg = format!("cannot resolve {host} (port {port})");
                    dec.finish_with(Outcome::Error, 502, msg.clone());
                    return Err(answer(StatusCode::BAD_GATEWAY, "resolve", &msg));
                }
            },
        },
    };
    for ip in &addrs {
        if let Err(range) = state.policy.check_address(*ip) {
            let why = format!(
                "{host} resolves to {ip}, which is in {range} (allowed by {rule}, \
                 but special addresses need an explicit allow_address)"
            );
            dec.with(|f| {
                f.address = Some(ip.to_string());
                f.rule = Some(format!("address {ip} is {range}"));
            });
            dec.finish_with(Outcome::Deny, 403, why.clone());
            return Err(answer(
                StatusCode::FORBIDDEN,
                "denied",
                &format!("{host}:{port} is not allowed: {why}"),
            ));
        }
    }
    let deadline = t0 + limits.connect_timeout;
    let mut last_err = None;
    for ip in addrs {
        let sa = SocketAddr::new(ip, port);
        dec.with(|f| f.address = Some(ip.to_string()));
        match connect_by(sa, deadline).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                dec.with(|f| f.connect_ms = Some(t0.elapsed().as_millis() as u64));
                return Ok(s);
            }
            Ok(Err(e)) => last_err = Some(e),
            Err(_) => {
                let msg = format!("connecting to {host}:{port} ({sa}) timed out");
                dec.finish_with(Outcome::Error, 504, msg.clone());
                return Err(answer(StatusCode::GATEWAY_TIMEOUT, "timeout", &msg));
            }
        }
    }
    let msg = format!(
        "cannot connect to {host}:{port}: {}",
        last_err.map_or_else(|| "no address".to_string(), |e| e.to_string())
    );
    dec.finish_with(Outcome::Error, 502, msg.clone());
    Err(answer(StatusCode::BAD_GATEWAY, "connect", &msg))
}

/// Dial `sa`, giving up at `deadline`. A nearby peer often completes the
/// handshake inside connect(2) itself; a zero-timeout poll notices, and the
/// stream is used at once, without a trip through the event loop and
/// without arming a timer.
async fn connect_by(
    sa: SocketAddr,
    deadline: Instant,
) -> Result<io::Result<TcpStream>, tokio::time::error::Elapsed> {
    let (fd, done) = match start_connect(sa) {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    let s = match TcpStream::from_std(std::net::TcpStream::from(fd)) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    if !done {
        if let Err(e) = tokio::time::timeout_at(deadline, s.writable()).await? {
            return Ok(Err(e));
        }
        match s.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(s))
}

/// Make a non-blocking socket and start connecting it to `sa`; true when
/// the connection is already established.
fn start_connect(sa: SocketAddr) -> io::Result<(OwnedFd, bool)> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let family = if sa.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    let fd = rustix::net::socket_with(family, SocketType::STREAM, flags, None)?;
    match rustix::net::connect(&fd, &sa) {
        Ok(()) => return Ok((fd, true)),
        Err(rustix::io::Errno::INPROGRESS) => {}
        Err(e) => return Err(e.into()),
    }
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut pfd = [PollFd::new(&fd, PollFlags::OUT)];
    if rustix::event::poll(&mut pfd, Some(&now))? == 0 {
        return Ok((fd, false));
    }
    rustix::net::sockopt::socket_error(&fd)??;
    Ok((fd, true))
}

async fn resolve(state: &State, name: &str, port: u16, limit: Duration) -> io::Result<Vec<IpAddr>> {
    let work = async {
        let _slot = state
            .resolvers
            .acquire()
            .await
            .map_err(|_| io::Error::other("resolver closed"))?;
        let found = tokio::net::lookup_host((name, port)).await?;
        Ok::<_, io::Error>(found.map(|sa| sa.ip()).collect::<Vec<_>>())
    };
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "resolution timed out"))?
}

/// Run an established CONNECT tunnel until both sides close, a side
/// fails, or a timeout fires.
async fn tunnel<S>(dec: Arc<Decision>, up: hyper::upgrade::Upgraded, upstream: TcpStream)
where
    S: SpliceIo + AsyncRead + AsyncWrite + Unpin,
{
    let parts = match up.downcast::<TokioIo<S>>() {
        Ok(p) => p,
        Err(_) => {
            dec.with(|f| f.error = Some("internal: unexpected upgraded stream type".into()));
            return;
        }
    };
    let client = parts.io.into_inner();
    let limits = dec.state.policy.limits().clone();
    let up_meter = DirMeter {
        dec: &dec,
        up: true,
    };
    let down_meter = DirMeter {
        dec: &dec,
        up: false,
    };
    dec.touch();
    let run = async {
        if !parts.read_buf.is_empty() {
            up_meter.account(parts.read_buf.len())?;
            write_all(&upstream, &parts.read_buf).await?;
        }
        tokio::try_join!(
            pump(&client, &upstream, &up_meter),
            pump(&upstream, &client, &down_meter)
        )
        .map(drop)
    };
    tokio::select! {
        r = run => if let Err(e) = r {
            dec.with(|f| f.error = Some(e.to_string()));
        },
        why = dec.watchdog(limits.idle_timeout, limits.total_timeout) => {
            dec.with(|f| f.error = Some(why.into()));
        }
    }
}

/// Hop-by-hop and proxy headers, never forwarded in either direction.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

fn strip_hop_by_hop(headers: &HeaderMap) -> HeaderMap {
    let mut named: Vec<String> = Vec::new();
    for v in headers.get_all(header::CONNECTION) {
        if let Ok(s) = v.to_str() {
            named.extend(s.split(',').map(|t| t.trim().to_ascii_lowercase()));
        }
    }
    let mut out = HeaderMap::new();
    for (k, v) in headers {
        let n = k.as_str();
        if HOP_BY_HOP.contains(&n) || n.starts_with("proxy-") || named.iter().any(|x| x == n) {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

/// Forward one plain-HTTP request, rebuilt from its parsed parts.
async fn forward(
    dec: Arc<Decision>,
    req: Request<Incoming>,
    host: Host,
    port: u16,
    upstream: TcpStream,
    permit: OwnedSemaphorePermit,
) -> Response<Body> {
    let limits = dec.state.policy.limits().clone();
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let mut out = Request::new(body);
    *out.method_mut() = parts.method.clone();
    *out.uri_mut() = match path.parse() {
        Ok(u) => u,
        Err(_) => return answer(StatusCode::BAD_REQUEST, "invalid", "invalid request path"),
    };
    *out.headers_mut() = strip_hop_by_hop(&parts.headers);
    let host_header = if port == 80 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    if let Ok(v) = HeaderValue::from_str(&host_header) {
        out.headers_mut().insert(header::HOST, v);
    }
    let io = CountingIo {
        inner: upstream,
        dec: dec.clone(),
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
        Ok(x) => x,
        Err(e) => {
            let msg = format!("upstream {host}:{port}: {e}");
            dec.finish_with(Outcome::Error, 502, msg.clone());
            return answer(StatusCode::BAD_GATEWAY, "upstream", &msg);
        }
    };
    let d = dec.clone();
    tokio::spawn(async move {
        let _permit = permit;
        tokio::select! {
            r = conn => if let Err(e) = r {
                d.with(|f| f.error = Some(e.to_string()));
            },
            why = d.watchdog(limits.idle_timeout, limits.total_timeout) => {
                d.with(|f| f.error = Some(why.into()));
            }
        }
    });
    match sender.send_request(out).await {
        Ok(resp) => {
            dec.with(|f| {
                f.verdict = Some(Outcome::Allow);
                f.status = resp.status().as_u16();
            });
            let (mut rparts, rbody) = resp.into_parts();
            rparts.headers = strip_hop_by_hop(&rparts.headers);
            Response::from_parts(rparts, rbody.boxed_unsync())
        }
        Err(e) => {
            let msg = format!("upstream {host}:{port}: {e}");
            dec.finish_with(Outcome::Error, 502, msg.clone());
            answer(StatusCode::BAD_GATEWAY, "upstream", &msg)
        }
    }
}

/// The upstream side of a forwarded request: counts bytes, refreshes the
/// idle clock and enforces the byte budget.
struct CountingIo {
    inner: TcpStream,
    dec: Arc<Decision>,
}

impl AsyncRead for CountingIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            DirMeter {
                dec: &self.dec,
                up: false,
            }
            .account(n)?;
        }
        r
    }
}

impl AsyncWrite for CountingIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r
            && n > 0
        {
            DirMeter {
                dec: &self.dec,
                up: true,
            }
            .account(n)?;
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Feed `bytes` to one proxy connection over a socketpair and return what
/// the proxy answered (for the fuzz target and tests; nothing is dialled
/// unless `policy` allows a reachable address).
pub(crate) fn answer_raw(policy: Policy, door: Door, bytes: &[u8]) -> io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (server_end, mut client) = tokio::net::UnixStream::pair()?;
        let state = State::new(policy, "fuzz".into(), None);
        let server = tokio::spawn(serve_connection(state, server_end, door));
        client.write_all(bytes).await?;
        client.shutdown().await?;
        let mut out = Vec::new();
        let read = client.read_to_end(&mut out);
        let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
        server.abort();
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::super::fuzzing::answer_status;

    #[test]
    fn hostile_heads_get_clear_answers_and_nothing_is_dialled() {
        let table: &[(&[u8], u16)] = &[
            (b"CONNECT fuzz.test:443 HTTP/1.1\r\n\r\n", 403), // resolves to TEST-NET
            (b"CONNECT other.test:443 HTTP/1.1\r\n\r\n", 403),
            (b"CONNECT deny.example:443 HTTP/1.1\r\n\r\n", 403),
            (b"CONNECT a.example:22 HTTP/1.1\r\n\r\n", 403),
            (b"CONNECT [fe80::1%25lo]:443 HTTP/1.1\r\n\r\n", 400),
            (b"CONNECT a.example HTTP/1.1\r\n\r\n", 400),
            (b"CONNECT a.example:0 HTTP/1.1\r\n\r\n", 400),
            (
                b"GET https://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                400,
            ),
            (b"GET http://u:p@a.example/ HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 403),
            (b"GET / HTTP/1.1\r\nHost: 2130706433:80\r\n\r\n", 403),
            (b"GET / HTTP/1.1\r\nHost: fuzz.test\r\n\r\n", 403),
            (b"GET / HTTP/1.1\r\nHost: \xff\xfe\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a.example:99999\r\n\r\n", 400),
        ];
        for (head, want) in table {
            assert_eq!(
                answer_status(head),
                Some(*want),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
        // Garbage gets a 400 from the parser or a closed connection.
        for junk in [
            &b"\0\0\0\0"[..],
            b"CONNECT\r\n\r\n",
            b"GET  HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(answer_status(junk), None | Some(400)));
        }
    }
}
