//! Sockets: SOCK_SEQPACKET socketpairs carrying datagrams and file
//! descriptors, and the calls that make, bind, connect and probe a socket.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::sys::socket::{
    self, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};

use super::{Errno, SysError};

/// Largest datagram either side sends.
pub const MAX_MESSAGE: usize = 16 * 1024;
/// Most fds one message carries: the kernel's SCM_MAX_FD. A root
/// session's command hands one idmapped mount per overlay lower (up to 62
/// frozen layers and the baseline) plus its other layer mounts in one
/// message; 16 failed every command of a stack deeper than ~14 layers.
pub const MAX_FDS: usize = 253;

/// A connected SOCK_SEQPACKET pair, both ends close-on-exec.
pub fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd), SysError> {
    socket::socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| SysError::new("socketpair(AF_UNIX, SOCK_SEQPACKET)", e))
}

/// A Unix socket address (`sockaddr_un`), held without allocating.
pub struct UnixAddr(rustix::net::SocketAddrUnix);

impl UnixAddr {
    /// `path` as a socket address: ENAMETOOLONG past `sun_path`'s 108
    /// bytes, EINVAL for a NUL inside.
    pub fn new(path: &Path) -> Result<UnixAddr, Errno> {
        rustix::net::SocketAddrUnix::new(path)
            .map(UnixAddr)
            .map_err(errno)
    }
}

fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

/// The allocation-free socket calls.
pub mod raw {
    use std::net::SocketAddr;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

    use super::super::{Errno, ret};
    use super::{UnixAddr, errno};

    /// socket(2) of `family` (`AF_UNIX`, `AF_INET`...) and `kind`
    /// (`SOCK_STREAM`..., optionally `| SOCK_NONBLOCK`), close-on-exec.
    pub fn socket(family: libc::c_int, kind: libc::c_int) -> Result<OwnedFd, Errno> {
        // SAFETY: plain socket(2) call, no pointers.
        let fd =
            ret(unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, 0) } as libc::c_long)?;
        // SAFETY: fd was just returned by socket(2) and is owned here.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    }

    /// bind(2) to an IP address and port.
    pub fn bind(sock: BorrowedFd<'_>, addr: &SocketAddr) -> Result<(), Errno> {
        rustix::net::bind(sock, addr).map_err(errno)
    }

    /// bind(2) to a Unix socket path.
    pub fn bind_unix(sock: BorrowedFd<'_>, addr: &UnixAddr) -> Result<(), Errno> {
        rustix::net::bind(sock, &addr.0).map_err(errno)
    }

    /// connect(2) to an IP address and port (EINPROGRESS on a
    /// non-blocking socket that is still connecting).
    pub fn connect(sock: BorrowedFd<'_>, addr: &SocketAddr) -> Result<(), Errno> {
        rustix::net::connect(sock, addr).map_err(errno)
    }

    /// connect(2) to a Unix socket path.
    pub fn connect_unix(sock: BorrowedFd<'_>, addr: &UnixAddr) -> Result<(), Errno> {
        rustix::net::connect(sock, &addr.0).map_err(errno)
    }

    /// listen(2).
    pub fn listen(sock: BorrowedFd<'_>, backlog: i32) -> Result<(), Errno> {
        rustix::net::listen(sock, backlog).map_err(errno)
    }

    /// setsockopt(SO_REUSEADDR, 1).
    pub fn set_reuseaddr(sock: BorrowedFd<'_>) -> Result<(), Errno> {
        rustix::net::sockopt::set_socket_reuseaddr(sock, true).map_err(errno)
    }

    /// getsockopt(SO_ERROR): the pending error of the socket, if any (the
    /// outcome of a non-blocking connect).
    pub fn socket_error(sock: BorrowedFd<'_>) -> Result<Option<Errno>, Errno> {
        match rustix::net::sockopt::socket_error(sock) {
            Ok(Ok(())) => Ok(None),
            Ok(Err(e)) => Ok(Some(errno(e))),
            Err(e) => Err(errno(e)),
        }
    }

    /// recv(2) with MSG_PEEK | MSG_DONTWAIT: what is waiting, left in the
    /// socket; 0 at the end of the stream, EAGAIN when nothing is there.
    pub fn peek_now(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
        // SAFETY: buf is valid for its length.
        ret(unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        } as libc::c_long)
        .map(|n| n as usize)
    }

    /// recv(2) with MSG_DONTWAIT: one datagram (cut to `buf`), EAGAIN when
    /// nothing is there.
    pub fn recv_now(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
        // SAFETY: buf is valid for its length.
        ret(unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        } as libc::c_long)
        .map(|n| n as usize)
    }

    /// shutdown(2) of the writing half.
    pub fn shutdown_write(sock: BorrowedFd<'_>) -> Result<(), Errno> {
        // SAFETY: plain shutdown(2) call, no pointers.
        ret(unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_WR) } as libc::c_long).map(drop)
    }

    /// send(2) of what the socket takes now (MSG_DONTWAIT | MSG_NOSIGNAL):
    /// the bytes sent, EAGAIN when it takes none.
    pub fn send_now(sock: BorrowedFd<'_>, bytes: &[u8]) -> Result<usize, Errno> {
        // SAFETY: bytes is valid for its length.
        ret(unsafe {
            libc::send(
                sock.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        } as libc::c_long)
        .map(|n| n as usize)
    }

    /// Send one datagram without fds (MSG_NOSIGNAL), retrying on EINTR.
    pub fn send(sock: BorrowedFd<'_>, bytes: &[u8]) -> Result<(), Errno> {
        loop {
            // SAFETY: bytes is valid for its length.
            match ret(unsafe {
                libc::send(
                    sock.as_raw_fd(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    libc::MSG_NOSIGNAL,
                )
            } as libc::c_long)
            {
                Err(Errno::EINTR) => continue,
                r => return r.map(drop),
            }
        }
    }
}

/// Send one datagram with optional fds (SCM_RIGHTS, at most [`MAX_FDS`]).
pub fn send(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), SysError> {
    if fds.len() > MAX_FDS {
        return Err(SysError::new(
            format!("sendmsg(fd {}, {} fds)", sock.as_raw_fd(), fds.len()),
            nix::errno::Errno::EMSGSIZE,
        ));
    }
    let mut raw = [-1 as RawFd; MAX_FDS];
    for (r, fd) in raw.iter_mut().zip(fds) {
        *r = fd.as_raw_fd();
    }
    let fds = &raw[..fds.len()];
    let iov = [IoSlice::new(bytes)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    loop {
        match socket::sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                return Err(SysError::new(
                    format!(
                        "sendmsg(fd {}, {} bytes, {} fds)",
                        sock.as_raw_fd(),
                        bytes.len(),
                        fds.len()
                    ),
                    e,
                ));
            }
        }
    }
}

/// One received datagram and the fds it carried.
pub type Datagram = (Vec<u8>, Vec<OwnedFd>);

/// Receive one datagram and the fds it carried. `Ok(None)` means the peer
/// closed its end.
pub fn recv(sock: BorrowedFd<'_>) -> Result<Option<Datagram>, SysError> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let (n, flags, fds) = recvmsg_with_fds(sock, &mut buf)?;
    if flags.contains(MsgFlags::MSG_TRUNC) || flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(SysError::new(
            format!("recvmsg(fd {}): message truncated", sock.as_raw_fd()),
            nix::errno::Errno::EMSGSIZE,
        ));
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    buf.truncate(n);
    Ok(Some((buf, fds)))
}

/// One `recvmsg` into `buf` (retried on EINTR), with the fds that came
/// along (close-on-exec, owned) and the message flags.
fn recvmsg_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
) -> Result<(usize, MsgFlags, Vec<OwnedFd>), SysError> {
    let mut cmsg_space = nix::cmsg_space!([RawFd; MAX_FDS]);
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match socket::recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                return Err(SysError::new(
                    format!("recvmsg(fd {})", sock.as_raw_fd()),
                    e,
                ));
            }
        };
        let mut fds = Vec::new();
        for c in msg
            .cmsgs()
            .map_err(|e| SysError::new("recvmsg: control data", e))?
        {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: SCM_RIGHTS installed these fds in our table; we own them.
                fds.extend(raw.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
            }
        }
        return Ok((msg.bytes, msg.flags, fds));
    }
}

/// Whether the peer of a connected socket has closed its end.
pub fn peer_hung_up(sock: BorrowedFd<'_>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let rdhup = PollFlags::from_bits_retain(libc::POLLRDHUP);
    let mut fds = [PollFd::new(sock, rdhup)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(rdhup | PollFlags::POLLHUP))
}

/// One sendmsg on a stream socket, with fds attached to its first byte
/// (MSG_NOSIGNAL, retrying on EINTR); returns the bytes sent (a stream
/// may take fewer than given: send the rest without the fds).
pub fn send_stream(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<usize, SysError> {
    if fds.len() > MAX_FDS {
        return Err(SysError::new(
            format!("sendmsg(fd {}, {} fds)", sock.as_raw_fd(), fds.len()),
            nix::errno::Errno::EMSGSIZE,
        ));
    }
    let mut raw = [-1 as RawFd; MAX_FDS];
    for (r, fd) in raw.iter_mut().zip(fds) {
        *r = fd.as_raw_fd();
    }
    let fds = &raw[..fds.len()];
    let iov = [IoSlice::new(bytes)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    loop {
        match socket::sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) => return Ok(n),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                return Err(SysError::new(
                    format!(
                        "sendmsg(fd {}, {} bytes, {} fds)",
                        sock.as_raw_fd(),
                        bytes.len(),
                        fds.len()
                    ),
                    e,
                ));
            }
        }
    }
}

/// One recvmsg on a stream socket into `buf`, with the fds that came
/// along (close-on-exec); `Ok((0, []))` at the end of the stream.
pub fn recv_stream(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
) -> Result<(usize, Vec<OwnedFd>), SysError> {
    let (n, flags, fds) = recvmsg_with_fds(sock, buf)?;
    if flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(SysError::new(
            format!("recvmsg(fd {}): too many fds", sock.as_raw_fd()),
            nix::errno::Errno::EMSGSIZE,
        ));
    }
    Ok((n, fds))
}

/// The uid of the process at the other end of a Unix socket (SO_PEERCRED).
pub fn peer_uid(sock: BorrowedFd<'_>) -> Result<u32, SysError> {
    socket::getsockopt(&sock, socket::sockopt::PeerCredentials)
        .map(|c| c.uid())
        .map_err(|e| {
            SysError::new(
                format!("getsockopt(fd {}, SO_PEERCRED)", sock.as_raw_fd()),
                e,
            )
        })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{SocketAddr, TcpListener};
    use std::os::fd::AsFd;

    use super::raw;
    use super::{Errno, UnixAddr};

    #[test]
    fn a_socket_is_made_connected_peeked_and_shut() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let at: SocketAddr = listener.local_addr().unwrap();
        let fd = raw::socket(libc::AF_INET, libc::SOCK_STREAM).unwrap();
        raw::connect(fd.as_fd(), &at).unwrap();
        assert_eq!(raw::socket_error(fd.as_fd()), Ok(None));
        let (mut peer, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(raw::peek_now(fd.as_fd(), &mut buf), Err(Errno::EAGAIN));
        peer.write_all(b"hi").unwrap();
        assert_eq!(raw::send_now(fd.as_fd(), b"ok"), Ok(2));
        raw::shutdown_write(fd.as_fd()).unwrap();
        drop(peer);
        assert_ne!(
            crate::sys::raw::poll_one(fd.as_fd(), libc::POLLIN, 5000),
            Ok(0)
        );
        // Peeking leaves the bytes where they are.
        for _ in 0..2 {
            assert_eq!(raw::peek_now(fd.as_fd(), &mut buf), Ok(2));
        }
        assert_eq!(&buf[..2], b"hi");
    }

    #[test]
    fn unix_addresses_are_checked_for_length() {
        let long = "x".repeat(200);
        assert!(matches!(
            UnixAddr::new(std::path::Path::new(&long)),
            Err(Errno::ENAMETOOLONG | Errno::EINVAL)
        ));
        assert!(UnixAddr::new(std::path::Path::new("/run/x.sock")).is_ok());
    }
}
