//! The proxy's front door: accept on the listening doors, admit a
//! connection against the sandbox's connection cap, and let hyper parse one
//! request head per connection (refused heads are audited too). What to do
//! with the request is [`super::decision`]'s business.

use std::convert::Infallible;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UdpSocket, UnixListener};

use super::decision::handle;
use super::doors::Door;
use super::error::NetError;
use super::policy::EgressLimits;
use super::record::{Decision, Outcome};
use super::state::State;
use super::transparent;
use super::tunnel::SpliceIo;

/// A listening door, registered with the runtime.
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
    /// `transparent` egress: a capture listener (one per allowed port).
    Captured(TcpListener),
    /// `transparent` egress: the sandbox's resolver.
    Resolver(UdpSocket),
}

impl Listener {
    /// Must run inside the runtime's context.
    pub(crate) fn from_fd(door: Door, fd: OwnedFd) -> Result<Listener, NetError> {
        match door {
            Door::Transparent => {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true)
                    .map_err(|e| NetError::io("capture listener: set non-blocking", e))?;
                TcpListener::from_std(l)
                    .map(Listener::Captured)
                    .map_err(|e| NetError::io("capture listener: register", e))
            }
            Door::Resolver => {
                let s = std::net::UdpSocket::from(fd);
                s.set_nonblocking(true)
                    .map_err(|e| NetError::io("resolver socket: set non-blocking", e))?;
                UdpSocket::from_std(s)
                    .map(Listener::Resolver)
                    .map_err(|e| NetError::io("resolver socket: register", e))
            }
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
            Listener::Captured(l) => tasks.spawn(async move {
                loop {
                    match l.accept().await {
                        Ok((s, _)) => {
                            let _ = s.set_nodelay(true);
                            transparent::admit(&st, s);
                        }
                        Err(e) => accept_failed(e).await,
                    }
                }
            }),
            Listener::Resolver(s) => tasks.spawn(transparent::serve_resolver(st, s)),
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
fn refused_head(e: &hyper::Error, limits: &EgressLimits) -> Option<(Outcome, u16, String)> {
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

/// Feed `bytes` to one proxy connection over a socketpair and return what
/// the proxy answered (for the fuzz target and tests; nothing is dialled
/// unless `policy` allows a reachable address).
#[cfg(any(test, feature = "internals"))]
pub(crate) fn answer_raw(policy: super::policy::Policy, door: Door, bytes: &[u8]) -> io::Result<Vec<u8>> {
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
