//! Whole-fd reads and writes on fds a caller hands over by number (the
//! bubblewrap front end's `--args FD`, `--file FD`, `--info-fd FD`...).

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, RawFd};

/// Read `fd` to its end and close it (bubblewrap's `load_file_data`
/// followed by `close`). EBADF when `fd` is not open.
pub fn read_fd_to_end(fd: RawFd) -> std::io::Result<Vec<u8>> {
    check_open(fd)?;
    // SAFETY: the fd is open (checked above) and the caller gives it to us
    // to consume by the command line; no other owner exists in this
    // process, and the File closes it when dropped.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

/// Write all of `data` to `fd` without taking ownership of it.
pub fn write_fd_all(fd: RawFd, data: &[u8]) -> std::io::Result<()> {
    check_open(fd)?;
    // SAFETY: the fd is open; ManuallyDrop keeps it open after the write
    // (its owner is the command line that named it).
    let mut f = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    f.write_all(data)
}

/// Read one byte from `fd` (EOF counts), then close it: bubblewrap's
/// `--block-fd`.
pub fn read_one_byte_and_close(fd: RawFd) -> std::io::Result<()> {
    check_open(fd)?;
    // SAFETY: open fd handed over by the command line; closed on drop.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut b = [0u8; 1];
    loop {
        match f.read(&mut b) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
            Ok(_) => return Ok(()),
        }
    }
}

/// Take ownership of the inherited `fd` (it is closed when the result is
/// dropped): a secret's `fd` source is read once and then gone. EBADF
/// when it is not open.
pub fn take_inherited_fd(fd: RawFd) -> std::io::Result<std::os::fd::OwnedFd> {
    check_open(fd)?;
    // SAFETY: the fd is open (checked above) and the Spec hands it to us to
    // consume; no other owner exists in this process.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// A close-on-exec duplicate of the caller's `fd`, which stays the
/// caller's (the library reads a secret's `fd` source through it).
pub fn dup_caller_fd(fd: RawFd) -> std::io::Result<std::os::fd::OwnedFd> {
    check_open(fd)?;
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an open fd makes a new fd, which
    // we own from here on.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` was just returned by fcntl and has no other owner.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(new) })
}

/// Close `fd` if it is open (errors are of no use to the caller).
pub fn close_fd(fd: RawFd) {
    if check_open(fd).is_ok() {
        // SAFETY: the fd is open and owned by the command line that named it.
        drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    }
}

/// EBADF unless `fd` is an open fd of this process.
pub fn check_open(fd: RawFd) -> std::io::Result<()> {
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: F_GETFD only reads the fd's flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// PR_SET_PDEATHSIG(SIGKILL) on the calling thread (`--die-with-parent`).
pub fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// An exclusive-free shared read lock on the open file `f`, held for as
/// long as `f` is (bubblewrap's `--lock-file`: `F_SETLK` with `F_RDLCK`).
pub fn read_lock(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is valid; fcntl reads it.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_RDLCK as _;
    l.l_whence = libc::SEEK_SET as _;
    // SAFETY: the fd is open for the File's life; l is a valid flock.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &l) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The fds of this process, 3 and above, that an execve would pass on
/// (open and not close-on-exec), in order: what a caller left open for
/// the program it runs (`inherit_open_fds`, bubblewrap's pass-through).
pub fn inheritable_fds() -> std::io::Result<Vec<RawFd>> {
    let mut fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= 3 && fd_inheritable(fd))
        .collect();
    fds.sort_unstable();
    Ok(fds)
}

/// Whether `fd` is open and not close-on-exec.
pub fn fd_inheritable(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the fd's flags (the read_dir fd of
    // `inheritable_fds` is close-on-exec, so it is never reported).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    flags >= 0 && flags & libc::FD_CLOEXEC == 0
}
