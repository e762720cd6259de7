//! Reaching an allowed destination: resolve (or take the override or the
//! literal), vet every address against the special ranges, connect with a
//! deadline. Each failure is the answer to send and is recorded in the
//! request's decision.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use hyper::{Response, StatusCode};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::answer::{Body, answer};
use super::host::CanonicalHost;
use super::record::{Decision, Outcome};
use super::state::State;
use crate::sys::raw;

/// Resolve (or take the override / literal), vet every address, dial the
/// first vetted one that answers. Errors are the answer to send.
pub(super) async fn dial(
    state: &State,
    dec: &Decision,
    host: &CanonicalHost,
    port: u16,
    rule: &str,
) -> Result<TcpStream, Response<Body>> {
    let limits = state.policy.limits();
    let t0 = Instant::now();
    let addrs: Vec<IpAddr> = match host {
        CanonicalHost::Ip(ip) => vec![*ip],
        CanonicalHost::Name(name) => match state.policy.resolve_override(host) {
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
    let family = if sa.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let fd = raw::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK)?;
    match raw::connect(fd.as_fd(), &sa) {
        Ok(()) => return Ok((fd, true)),
        Err(crate::sys::Errno::EINPROGRESS) => {}
        Err(e) => return Err(e.into()),
    }
    if raw::poll_one(fd.as_fd(), libc::POLLOUT, 0)? == 0 {
        return Ok((fd, false));
    }
    if let Some(e) = raw::socket_error(fd.as_fd())? {
        return Err(e.into());
    }
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
