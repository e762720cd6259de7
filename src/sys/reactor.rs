//! Registering an owned fd with the tokio reactor (the `tokio` API).

use std::os::fd::OwnedFd;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// `fd`, registered with the current runtime's reactor for `interest`.
/// Must be called within a tokio runtime.
pub fn async_fd(fd: OwnedFd, interest: Interest) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd is a valid open fd that it alone closes, and its
    // as_raw_fd always returns that same fd, for as long as the AsyncFd
    // owns it.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(std::io::Error::from)
}
