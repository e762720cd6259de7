//! Network interface syscalls.

use std::ffi::CStr;

use super::SysError;

/// The allocation-free interface calls.
pub mod raw {
    use std::ffi::CStr;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use super::super::{Errno, ret};

    /// Set IFF_UP (and IFF_RUNNING) on the named interface (SIOCGIFFLAGS
    /// then SIOCSIFFLAGS).
    pub fn set_interface_up(name: &CStr) -> Result<(), Errno> {
        // SAFETY: plain socket(2) call.
        let fd =
            ret(
                unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }
                    as libc::c_long,
            )?;
        // SAFETY: fd was just returned by socket(2) and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: ifreq is plain old data; zeroed is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        let bytes = name.to_bytes();
        if bytes.len() >= req.ifr_name.len() {
            return Err(Errno::ENAMETOOLONG);
        }
        for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
            *dst = *src as libc::c_char;
        }
        // SAFETY: req is a valid ifreq with a NUL-terminated name.
        ret(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } as libc::c_long)?;
        // SAFETY: the union field ifru_flags was filled by SIOCGIFFLAGS.
        unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
        // SAFETY: as above, with the flags updated.
        ret(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } as libc::c_long)
            .map(drop)
    }
}

/// `ip route add local NET/PREFIX dev IFNAME table local`: every address
/// of the prefix becomes one of this host's, reached over `ifname`. One
/// hand-built rtnetlink request (RTM_NEWROUTE), acknowledged.
pub fn add_local_route_v4(
    net: std::net::Ipv4Addr,
    prefix: u8,
    ifname: &CStr,
) -> Result<(), SysError> {
    let call = || format!("rtnetlink RTM_NEWROUTE(local {net}/{prefix} dev {ifname:?})");
    route::add_local_v4(net.octets(), prefix, ifname).map_err(|e| SysError::new(call(), e))
}

mod route {
    use std::ffi::CStr;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use super::super::{Errno, ret};

    const NLMSG_HDRLEN: usize = 16;
    const RTMSG_LEN: usize = 12;
    const RTA_DST: u16 = 1;
    const RTA_OIF: u16 = 4;
    const RTA_TABLE: u16 = 15;

    fn attr(buf: &mut Vec<u8>, kind: u16, data: &[u8]) {
        let len = 4 + data.len();
        buf.extend_from_slice(&(len as u16).to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(data);
        buf.resize(buf.len().next_multiple_of(4), 0);
    }

    /// The request: nlmsghdr, rtmsg, RTA_DST, RTA_OIF, RTA_TABLE.
    pub(super) fn request(net: [u8; 4], prefix: u8, ifindex: u32) -> Vec<u8> {
        let mut b = vec![0u8; NLMSG_HDRLEN];
        // struct rtmsg
        b.push(libc::AF_INET as u8); // rtm_family
        b.push(prefix); // rtm_dst_len
        b.push(0); // rtm_src_len
        b.push(0); // rtm_tos
        b.push(libc::RT_TABLE_LOCAL); // rtm_table
        b.push(libc::RTPROT_STATIC); // rtm_protocol
        b.push(libc::RT_SCOPE_HOST); // rtm_scope
        b.push(libc::RTN_LOCAL); // rtm_type
        b.extend_from_slice(&0u32.to_ne_bytes()); // rtm_flags
        debug_assert_eq!(b.len(), NLMSG_HDRLEN + RTMSG_LEN);
        attr(&mut b, RTA_DST, &net);
        attr(&mut b, RTA_OIF, &ifindex.to_ne_bytes());
        attr(
            &mut b,
            RTA_TABLE,
            &u32::from(libc::RT_TABLE_LOCAL).to_ne_bytes(),
        );
        let len = b.len() as u32;
        let flags =
            (libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
        b[0..4].copy_from_slice(&len.to_ne_bytes());
        b[4..6].copy_from_slice(&libc::RTM_NEWROUTE.to_ne_bytes());
        b[6..8].copy_from_slice(&flags.to_ne_bytes());
        b[8..12].copy_from_slice(&1u32.to_ne_bytes()); // seq
        b
    }

    /// The kernel's answer: an NLMSG_ERROR whose error is 0 (the ack) or
    /// minus the errno.
    pub(super) fn ack(reply: &[u8]) -> Result<(), Errno> {
        let kind = reply.get(4..6).map(|s| u16::from_ne_bytes([s[0], s[1]]));
        let err = reply
            .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
            .map(|s| i32::from_ne_bytes([s[0], s[1], s[2], s[3]]));
        match (kind, err) {
            (Some(k), Some(0)) if k == libc::NLMSG_ERROR as u16 => Ok(()),
            (Some(k), Some(e)) if k == libc::NLMSG_ERROR as u16 => Err(Errno::from_raw(-e)),
            _ => Err(Errno::EPROTO),
        }
    }

    pub(super) fn add_local_v4(net: [u8; 4], prefix: u8, ifname: &CStr) -> Result<(), Errno> {
        // SAFETY: ifname is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(ifname.as_ptr()) };
        if ifindex == 0 {
            return Err(Errno::last());
        }
        // SAFETY: plain socket(2) call.
        let fd = ret(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        } as libc::c_long)?;
        // SAFETY: fd was just returned by socket(2) and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let req = request(net, prefix, ifindex);
        // SAFETY: sockaddr_nl is plain old data; zeroed is valid (pid 0:
        // the kernel).
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: req and kernel are valid for the lengths given.
        ret(unsafe {
            libc::sendto(
                fd.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&kernel as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        } as libc::c_long)?;
        let mut reply = [0u8; 1024];
        // SAFETY: reply is a writable buffer of the given length.
        let n = ret(
            unsafe { libc::recv(fd.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) }
                as libc::c_long,
        )? as usize;
        ack(&reply[..n.min(reply.len())])
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_request_is_what_ip_route_sends() {
            let r = request([198, 18, 0, 0], 15, 1);
            assert_eq!(r.len(), 16 + 12 + 8 + 8 + 8);
            assert_eq!(
                u32::from_ne_bytes(r[0..4].try_into().unwrap()) as usize,
                r.len()
            );
            assert_eq!(&r[16..28], &[2, 15, 0, 0, 255, 4, 254, 2, 0, 0, 0, 0]);
            assert_eq!(&r[28..36], &[8, 0, 1, 0, 198, 18, 0, 0]);
            assert!(ack(&[]).is_err());
            let mut nack = vec![0u8; 20];
            nack[4..6].copy_from_slice(&2u16.to_ne_bytes());
            nack[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
            assert_eq!(ack(&nack), Err(Errno::EPERM));
        }
    }
}
