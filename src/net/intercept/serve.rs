//! An intercepted connection from its first byte to its last: a CONNECT
//! the proxy answered 200 to, or a captured `transparent` connection,
//! terminated as the host it was allowed for and handed to the request
//! pipeline ([`crate::net::broker::serve::serve_connection`]: every
//! request gets its rules, secrets and audit line there). The connection's decision (its audit line) records the TLS
//! side: the leaf minted or cached, and the bytes the sandbox moved.

use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::OwnedSemaphorePermit;

use super::tls::{Metered, terminate};
use super::{InterceptError, LeafUse};
use crate::net::broker::serve::{InterceptTarget, serve_connection};
use crate::net::doors::Door;
use crate::net::host::CanonicalHost;
use crate::net::record::{Decision, Outcome};

/// A CONNECT to an intercepted host, after its 200: `up` is the client's
/// side of the tunnel.
pub(crate) async fn connect(
    dec: Arc<Decision>,
    door: Door,
    up: hyper::upgrade::Upgraded,
    host: CanonicalHost,
    port: u16,
    _tunnel: OwnedSemaphorePermit,
) {
    serve(dec, door, TokioIo::new(up), host, port, None).await;
}

/// A captured `transparent` connection to an intercepted host. `pending`
/// (a `max_pending_handshakes` slot) is held until the handshake is done.
pub(crate) async fn captured(
    dec: Arc<Decision>,
    client: tokio::net::TcpStream,
    host: CanonicalHost,
    port: u16,
    pending: OwnedSemaphorePermit,
) {
    serve(dec, Door::Transparent, client, host, port, Some(pending)).await;
}

async fn serve<IO>(
    dec: Arc<Decision>,
    door: Door,
    io: IO,
    host: CanonicalHost,
    port: u16,
    pending: Option<OwnedSemaphorePermit>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = dec.state.clone();
    let Some(interception) = state.broker.interception.clone() else {
        dec.with(|f| f.error = Some("internal: no interception for an intercepted host".into()));
        return;
    };
    let limits = state.policy.limits().clone();
    dec.touch();
    let io = Metered {
        inner: io,
        dec: dec.clone(),
    };
    let terminated = match terminate(io, &interception, &host, limits.handshake_timeout).await {
        Ok(t) => t,
        Err(e) => {
            if matches!(e, InterceptError::ServerName { .. }) {
                dec.with(|f| f.verdict = Some(Outcome::Deny));
            }
            dec.with(|f| f.error = Some(e.to_string()));
            return;
        }
    };
    drop(pending);
    dec.with(|f| {
        f.intercept = Some(match terminated.leaf {
            LeafUse::Minted => "leaf-minted",
            LeafUse::Cached => "leaf-cached",
        });
        f.alpn = Some(if terminated.h2 { "h2" } else { "http/1.1" });
    });
    let target = InterceptTarget { host, port, door };
    tokio::select! {
        () = serve_connection(terminated.stream, target, terminated.h2, state.clone()) => {},
        why = dec.watchdog(limits.idle_timeout, limits.total_timeout) => {
            dec.with(|f| f.error = Some(why.into()));
        }
    }
}
