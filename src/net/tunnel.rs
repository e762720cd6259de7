//! Byte pumping for CONNECT tunnels with `splice(2)`: data moves socket →
//! pipe → socket inside the kernel, so a tunnel costs no user-space buffer,
//! and an idle tunnel holds no pipe either (pipes are made on first data).

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// Most bytes moved per splice call.
const CHUNK: usize = 1 << 20;
/// Pipe capacity asked for (the default 64 KiB halves loopback throughput).
const PIPE_SIZE: usize = 1 << 20;

/// A tokio socket that can be driven by readiness plus raw syscalls.
pub(crate) trait SpliceIo: AsFd + Send + Sync + 'static {
    fn ready_for(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    fn try_io_with<R>(
        &self,
        interest: Interest,
        f: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R>;
    fn try_write_now(&self, bytes: &[u8]) -> io::Result<usize>;
}

macro_rules! splice_io {
    ($t:ty) => {
        impl SpliceIo for $t {
            fn ready_for(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send {
                async move { self.ready(interest).await.map(drop) }
            }
            fn try_io_with<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, f)
            }
            fn try_write_now(&self, bytes: &[u8]) -> io::Result<usize> {
                self.try_write(bytes)
            }
        }
    };
}
splice_io!(TcpStream);
splice_io!(UnixStream);

/// Called with each chunk's size before it is forwarded; an error stops
/// the pump (byte budget exhausted).
pub(crate) trait Meter: Sync {
    fn account(&self, n: usize) -> io::Result<()>;
}

/// Move bytes from `src` to `dst` until `src` reaches EOF, then shut down
/// `dst`'s write side (half-close travels through the tunnel).
pub(crate) async fn pump<A: SpliceIo, B: SpliceIo>(
    src: &A,
    dst: &B,
    meter: &impl Meter,
) -> io::Result<()> {
    let mut pipe: Option<(OwnedFd, OwnedFd)> = None;
    loop {
        src.ready_for(Interest::READABLE).await?;
        let (pr, pw) = match &pipe {
            Some(p) => p,
            None => pipe.insert(new_pipe()?),
        };
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        // The pipe is empty here, so EAGAIN can only mean "socket empty".
        let n = match src.try_io_with(Interest::READABLE, || {
            splice(src.as_fd(), None, pw.as_fd(), None, CHUNK, flags).map_err(io::Error::from)
        }) {
            Ok(0) => {
                let _ = rustix::net::shutdown(dst.as_fd(), rustix::net::Shutdown::Write);
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        meter.account(n)?;
        let mut left = n;
        while left > 0 {
            dst.ready_for(Interest::WRITABLE).await?;
            match dst.try_io_with(Interest::WRITABLE, || {
                splice(pr.as_fd(), None, dst.as_fd(), None, left, flags).map_err(io::Error::from)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

fn new_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    // Best effort: a smaller pipe (pipe-max-size, user quota) still works.
    let _ = rustix::pipe::fcntl_setpipe_size(&w, PIPE_SIZE);
    Ok((r, w))
}

/// Write all of `bytes` to `dst` (the part of the stream read before the
/// tunnel started).
pub(crate) async fn write_all<B: SpliceIo>(dst: &B, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        dst.ready_for(Interest::WRITABLE).await?;
        match dst.try_write_now(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
