//! Byte pumping for CONNECT tunnels with `splice(2)`: data moves socket →
//! pipe → socket inside the kernel, so a tunnel costs no user-space buffer,
//! and an idle tunnel holds no pipe either (pipes are made on first data).

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

use crate::sys::raw;

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
///
/// The pipe is a buffer between the two sockets: the loop keeps filling it
/// while there is room and draining it while the other side accepts, so
/// neither peer waits for a whole read-then-write cycle.
pub(crate) async fn pump<A: SpliceIo, B: SpliceIo>(
    src: &A,
    dst: &B,
    meter: &impl Meter,
) -> io::Result<()> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    let mut pipe: Option<(OwnedFd, OwnedFd)> = None;
    let mut pending = 0usize;
    let mut eof = false;
    loop {
        if pipe.is_none() {
            // An idle tunnel holds no pipe: wait for the first data, and
            // peek so that a close before any data costs no pipe either.
            src.ready_for(Interest::READABLE).await?;
            let mut probe = [0u8; 1];
            let peeked = src.try_io_with(Interest::READABLE, || {
                raw::peek_now(src.as_fd(), &mut probe).map_err(io::Error::from)
            });
            match peeked {
                Ok(0) => {
                    let _ = raw::shutdown_write(dst.as_fd());
                    return Ok(());
                }
                Ok(_) => pipe = Some(new_pipe()?),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        let Some((pr, pw)) = &pipe else {
            continue;
        };
        let mut progressed = false;
        // EAGAIN from a splice into a non-empty pipe may mean "pipe full"
        // rather than "socket empty"; then the socket's readiness must not
        // be cleared, or a wakeup is lost. Only an empty pipe makes EAGAIN
        // unambiguous.
        let mut read_blocked_on_pipe = false;
        if !eof {
            let had = pending;
            match src.try_io_with(Interest::READABLE, || {
                match splice(src.as_fd(), None, pw.as_fd(), None, CHUNK, flags) {
                    Ok(n) => Ok(Some(n)),
                    Err(rustix::io::Errno::AGAIN) if had > 0 => Ok(None),
                    Err(e) => Err(io::Error::from(e)),
                }
            }) {
                Ok(Some(0)) => {
                    eof = true;
                    progressed = true;
                }
                Ok(Some(n)) => {
                    meter.account(n)?;
                    pending += n;
                    progressed = true;
                }
                Ok(None) => read_blocked_on_pipe = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if pending > 0 {
            match dst.try_io_with(Interest::WRITABLE, || {
                splice(pr.as_fd(), None, dst.as_fd(), None, pending, flags).map_err(io::Error::from)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => {
                    pending -= m;
                    progressed = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if eof && pending == 0 {
            let _ = raw::shutdown_write(dst.as_fd());
            return Ok(());
        }
        if progressed {
            // try_io does not count against tokio's cooperative budget.
            tokio::task::coop::consume_budget().await;
            continue;
        }
        let want_read = !eof && !read_blocked_on_pipe;
        let want_write = pending > 0;
        tokio::select! {
            r = src.ready_for(Interest::READABLE), if want_read => r?,
            r = dst.ready_for(Interest::WRITABLE), if want_write => r?,
            else => {} // unreachable: one side always has work when nothing moved
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
