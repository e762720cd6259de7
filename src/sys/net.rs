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

/// Set IFF_UP on the named interface (SIOCGIFFLAGS then SIOCSIFFLAGS).
pub fn set_interface_up(name: &CStr) -> Result<(), SysError> {
    raw::set_interface_up(name)
        .map_err(|e| SysError::new(format!("ioctl({name:?}, SIOCSIFFLAGS, IFF_UP)"), e))
}
