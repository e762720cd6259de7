//! Moving an allowed request's bytes: a CONNECT tunnel (spliced both
//! ways) or one plain-HTTP request rebuilt from its parsed parts, both
//! metered against the sandbox's byte budget and cut by the idle and total
//! timeouts.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode, body::Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use super::answer::{Body, answer};
use super::host::CanonicalHost;
use super::record::{Decision, DirMeter, Outcome};
use super::tunnel::{Meter, SpliceIo, pump, write_all};

/// Run an established CONNECT tunnel until both sides close, a side
/// fails, or a timeout fires.
pub(super) async fn tunnel<S>(dec: Arc<Decision>, up: hyper::upgrade::Upgraded, upstream: TcpStream)
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

pub(super) fn strip_hop_by_hop(headers: &HeaderMap) -> HeaderMap {
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
pub(super) async fn forward(
    dec: Arc<Decision>,
    req: Request<Incoming>,
    host: CanonicalHost,
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
    // Containment: a placeholder never leaves in plain HTTP.
    let target = format!("{host}:{port}");
    if let Err(why) = dec.state.broker.secrets.refuse_in_plain_http(
        &target,
        &parts.uri.to_string(),
        &parts.headers,
    ) {
        dec.finish_with(Outcome::Deny, 403, why.clone());
        return answer(StatusCode::FORBIDDEN, "secret", &why);
    }
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
            Response::from_parts(rparts, rbody.map_err(Into::into).boxed_unsync())
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
