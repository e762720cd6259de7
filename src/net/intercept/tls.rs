//! TLS termination of one intercepted connection: read the ClientHello,
//! check its server name against the host the connection was allowed
//! for, present that host's leaf, and report the protocol negotiated.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use super::leaf::LeafUse;
use super::{InterceptError, Interception};
use crate::net::host::{CanonicalHost, canonicalize};
use crate::net::record::Decision;

/// A terminated connection: the decrypted stream, whether the client
/// chose HTTP/2, and whether its leaf was minted for it.
pub(crate) struct Terminated<IO> {
    pub(crate) stream: TlsStream<IO>,
    pub(crate) h2: bool,
    pub(crate) leaf: LeafUse,
}

/// Complete the server side of the handshake on `io` as `host`, within
/// `limit`. A ClientHello naming another server is refused: the leaf is
/// only ever minted for the host the policy allowed.
pub(crate) async fn terminate<IO>(
    io: IO,
    interception: &Interception,
    host: &CanonicalHost,
    limit: Duration,
) -> Result<Terminated<IO>, InterceptError>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let work = async {
        let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io)
            .await
            .map_err(InterceptError::Handshake)?;
        if let Some(asked) = start.client_hello().server_name()
            && canonicalize(asked).ok().as_ref() != Some(host)
        {
            return Err(InterceptError::ServerName {
                asked: asked.chars().take(253).collect(),
                host: host.to_string(),
            });
        }
        let (config, leaf) = interception.server_config(host)?;
        let stream = start
            .into_stream(config)
            .await
            .map_err(InterceptError::Handshake)?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok(Terminated { stream, h2, leaf })
    };
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| InterceptError::HandshakeTimeout(limit))?
}

/// The sandbox's side of an intercepted connection, counted (the bytes
/// the sandbox sent and received, TLS included) in its decision, which
/// refreshes the idle clock. The sandbox's byte budget is charged by the
/// request pipeline, per request.
pub(crate) struct Metered<IO> {
    pub(crate) inner: IO,
    pub(crate) dec: Arc<Decision>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Metered<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.dec.count(n, true);
        }
        r
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Metered<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r
            && n > 0
        {
            self.dec.count(n, false);
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
