//! Terminals, credentials and namespaces for container-style sandboxes:
//! a pty pair opened by the sandbox itself, the controlling terminal,
//! umask, supplementary groups, keep-caps, soft rlimits, setns.

use std::os::fd::{AsRawFd, BorrowedFd};

use super::{Errno, SysError};

/// The allocation-free calls.
pub mod raw {
    use std::ffi::CStr;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

    use super::super::{Errno, ret};

    /// TIOCGPTPEER (linux/tty.h: _IO('T', 0x41)).
    const TIOCGPTPEER: libc::c_ulong = 0x5441;

    /// A new pty pair from `ptmx` (a path, resolved as given: the caller is
    /// inside the root whose devpts it wants): (master, the other end),
    /// both close-on-exec, neither the controlling terminal.
    pub fn open_pty(ptmx: &CStr) -> Result<(OwnedFd, OwnedFd), Errno> {
        // SAFETY: ptmx is a valid C string.
        let m = ret(unsafe {
            libc::open(
                ptmx.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        } as libc::c_long)?;
        // SAFETY: open returned a new fd that we now own.
        let master = unsafe { OwnedFd::from_raw_fd(m as RawFd) };
        let unlock: libc::c_int = 0;
        // SAFETY: TIOCSPTLCK reads an int.
        ret(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } as libc::c_long)?;
        // SAFETY: TIOCGPTPEER takes open flags and returns a new fd.
        let p = ret(unsafe {
            libc::ioctl(
                master.as_raw_fd(),
                TIOCGPTPEER as _,
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        } as libc::c_long)?;
        // SAFETY: the ioctl returned a new fd that we now own.
        Ok((master, unsafe { OwnedFd::from_raw_fd(p as RawFd) }))
    }

    /// TIOCSCTTY on `fd` (the caller leads a session without a terminal).
    pub fn set_controlling_tty(fd: RawFd) -> Result<(), Errno> {
        // SAFETY: TIOCSCTTY with an integer argument.
        ret(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) } as libc::c_long).map(drop)
    }

    /// The window size of the terminal `fd` (TIOCGWINSZ): (columns, rows).
    pub fn window_size(fd: BorrowedFd<'_>) -> Result<(u16, u16), Errno> {
        // SAFETY: a zeroed winsize is valid; TIOCGWINSZ fills it.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: ws is a valid out-pointer for TIOCGWINSZ.
        ret(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } as libc::c_long)?;
        Ok((ws.ws_col, ws.ws_row))
    }

    /// Set the window size of the terminal `fd` (TIOCSWINSZ; on a pty
    /// master the kernel sends SIGWINCH to the foreground job of its
    /// other end when the size changes).
    pub fn set_window_size(fd: BorrowedFd<'_>, cols: u16, rows: u16) -> Result<(), Errno> {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads a valid winsize.
        ret(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } as libc::c_long)
            .map(drop)
    }

    pub fn umask(mask: u32) {
        // SAFETY: integer argument only.
        unsafe { libc::umask(mask as libc::mode_t) };
    }

    pub fn setgroups(groups: &[libc::gid_t]) -> Result<(), Errno> {
        // SAFETY: pointer and length of a valid slice.
        ret(unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } as libc::c_long).map(drop)
    }

    /// PR_SET_KEEPCAPS: the permitted set survives a switch away from uid 0.
    pub fn set_keepcaps() -> Result<(), Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) } as libc::c_long).map(drop)
    }

    /// Lower `resource`'s soft value to `soft`, keeping the hard one.
    pub fn setrlimit_soft(resource: libc::c_int, soft: u64) -> Result<(), Errno> {
        // SAFETY: a zeroed rlimit is valid; getrlimit fills it.
        let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: lim is a valid out-pointer.
        ret(
            unsafe { libc::getrlimit(resource as libc::__rlimit_resource_t, &mut lim) }
                as libc::c_long,
        )?;
        lim.rlim_cur = soft.min(lim.rlim_max);
        // SAFETY: lim is a valid rlimit.
        ret(unsafe { libc::setrlimit(resource as libc::__rlimit_resource_t, &lim) } as libc::c_long)
            .map(drop)
    }

    /// setns(2).
    pub fn setns(fd: BorrowedFd<'_>, nstype: libc::c_int) -> Result<(), Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::setns(fd.as_raw_fd(), nstype) } as libc::c_long).map(drop)
    }

    /// accept4(listener, SOCK_CLOEXEC), blocking, retrying on EINTR.
    pub fn accept(listener: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
        loop {
            // SAFETY: no address is asked for.
            match ret(unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            } as libc::c_long)
            {
                // SAFETY: accept4 returned a new fd that we now own.
                Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Send `fd` with `name` as the data over a connected Unix socket.
    pub fn send_fd(sock: BorrowedFd<'_>, name: &[u8], fd: BorrowedFd<'_>) -> Result<(), Errno> {
        const SPACE: usize = 64;
        // SAFETY: plain data, zeroed; the control buffer is large enough
        // for one SCM_RIGHTS header and one int (checked below).
        unsafe {
            let mut control = [0u8; SPACE];
            let space = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
            if space > SPACE {
                return Err(Errno::EMSGSIZE);
            }
            let mut iov = libc::iovec {
                iov_base: name.as_ptr() as *mut libc::c_void,
                iov_len: name.len(),
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd.as_raw_fd());
            loop {
                match ret(libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) as libc::c_long)
                {
                    Err(Errno::EINTR) => continue,
                    r => return r.map(drop),
                }
            }
        }
    }
}

/// setns(fd, nstype), described.
pub fn setns(fd: BorrowedFd<'_>, nstype: libc::c_int, what: &str) -> Result<(), SysError> {
    raw::setns(fd, nstype)
        .map_err(|e: Errno| SysError::new(format!("setns(fd {} ({what}))", fd.as_raw_fd()), e))
}
