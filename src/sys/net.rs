//! Network interface syscalls.

use std::ffi::CStr;

use super::{SysError, check};

/// Set IFF_UP on the named interface (SIOCGIFFLAGS then SIOCSIFFLAGS).
pub fn set_interface_up(name: &CStr) -> Result<(), SysError> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(fd as libc::c_long, || "socket(AF_INET, SOCK_DGRAM)".into())?;
    // SAFETY: fd was just returned by socket(2) and is owned here.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.to_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return Err(SysError::new(
            format!("ioctl({:?}, SIOCGIFFLAGS)", name),
            nix::errno::Errno::ENAMETOOLONG,
        ));
    }
    for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // SAFETY: req is a valid ifreq with a NUL-terminated name.
    let r = unsafe { libc::ioctl(raw, libc::SIOCGIFFLAGS, &mut req) };
    check(r as libc::c_long, || {
        format!("ioctl({:?}, SIOCGIFFLAGS)", name)
    })?;
    // SAFETY: the union field ifru_flags was filled by SIOCGIFFLAGS.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: as above, with the flags updated.
    let r = unsafe { libc::ioctl(raw, libc::SIOCSIFFLAGS, &req) };
    check(r as libc::c_long, || {
        format!("ioctl({:?}, SIOCSIFFLAGS, IFF_UP)", name)
    })
    .map(drop)
}
