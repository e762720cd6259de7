//! An `argv` request with `"pty": true`: its hutch's stdin is a terminal
//! the server opens on the host (never seen by the sandbox: hutch reads
//! it and relays to the sandbox's own terminal, `hutch run --pty`), so
//! that a `resize` request can set its size and tell hutch (SIGWINCH), as
//! a user's terminal would.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::sys::termios::{self, SetArg};

use crate::sys::{SysError, raw};

/// The terminal's end-of-file character (^D): what `"eof": true` sends.
pub(super) const EOF_CHAR: u8 = 0x04;

/// The terminal's three ends: the master the server writes stdin to
/// (non-blocking), the other end for the request's fd 0, and a copy of
/// that end the server keeps to resize it (a master copy would keep the
/// terminal from ever hanging up when stdin is closed).
pub(super) struct Opened {
    pub master: OwnedFd,
    pub stdin: OwnedFd,
    pub resize: OwnedFd,
}

/// Open a host pty of `size` (columns, rows), raw (no echo, no line
/// editing: the sandbox's terminal does that).
pub(super) fn open(size: (u16, u16)) -> Result<Opened, SysError> {
    let pair = nix::pty::openpty(None, None).map_err(|e| SysError::new("openpty()", e))?;
    for fd in [&pair.master, &pair.slave] {
        set_cloexec(fd.as_fd())?;
    }
    let mut mode = termios::tcgetattr(&pair.slave).map_err(|e| SysError::new("tcgetattr", e))?;
    termios::cfmakeraw(&mut mode);
    termios::tcsetattr(&pair.slave, SetArg::TCSANOW, &mode)
        .map_err(|e| SysError::new("tcsetattr(raw)", e))?;
    raw::set_window_size(pair.slave.as_fd(), size.0, size.1)
        .map_err(|e| SysError::new("ioctl(TIOCSWINSZ)", e))?;
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    fcntl(&pair.master, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
        .map_err(|e| SysError::new("fcntl(F_SETFL, O_NONBLOCK)", e))?;
    let resize = pair
        .slave
        .try_clone()
        .map_err(|e| crate::sys::io_err("dup(pty)".into(), e))?;
    Ok(Opened {
        master: pair.master,
        stdin: pair.slave,
        resize,
    })
}

fn set_cloexec(fd: BorrowedFd<'_>) -> Result<(), SysError> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map(drop)
        .map_err(|e| SysError::new("fcntl(F_SETFD, FD_CLOEXEC)", e))
}

/// Set the size; the caller then sends hutch SIGWINCH.
pub(super) fn resize(fd: BorrowedFd<'_>, cols: u16, rows: u16) -> Result<(), SysError> {
    raw::set_window_size(fd, cols, rows).map_err(|e| SysError::new("ioctl(TIOCSWINSZ)", e))
}
