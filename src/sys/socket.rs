//! SOCK_SEQPACKET socketpairs carrying datagrams and file descriptors.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    self, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};

use super::SysError;

/// Largest datagram either side sends.
pub const MAX_MESSAGE: usize = 16 * 1024;
/// Most fds one message carries.
pub const MAX_FDS: usize = 16;

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

/// The allocation-free socket calls.
pub mod raw {
    use std::os::fd::{AsRawFd, BorrowedFd};

    use super::super::{Errno, ret};

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
