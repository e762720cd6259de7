//! The new root of an image run: an overlay whose lowers are the image's
//! layers (top first, already open: plain directories, or the idmapped
//! mounts a root launch was handed) and whose upper and work directories
//! live on the private root tmpfs, so the build can create mount points
//! and nothing reaches a layer. Mounted `nosuid,nodev` inside the
//! sandbox's user namespace, hence `userxattr` (the layers mark opaque
//! directories with `user.overlay.opaque`); the usual read-only remount of
//! the root applies to it at the end of the build.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::syscalls::FsSys;
use crate::sys::SysError;

/// Where the overlay is mounted, on the staging tmpfs (outside the root tmpfs).
const IMAGE_ROOT: &CStr = c"/tmp/image";

/// Mount the image overlay over `lowers` with its upper in `root_tmpfs`;
/// returns the O_PATH fd of the new root.
pub(super) fn mount<S: FsSys>(
    sys: &mut S,
    staging: BorrowedFd<'_>,
    root_tmpfs: BorrowedFd<'_>,
    lowers: &[BorrowedFd<'_>],
) -> Result<OwnedFd, SysError> {
    let dir = libc::O_PATH | libc::O_DIRECTORY;
    sys.mkdirat(root_tmpfs, c"upper", 0o755)?;
    sys.mkdirat(root_tmpfs, c"work", 0o700)?;
    let upper = sys.open(Some(root_tmpfs), c"upper", dir, 0, 0)?;
    let work = sys.open(Some(root_tmpfs), c"work", dir, 0, 0)?;
    sys.mkdirat(staging, c"image", 0o755)?;
    let mut data = b"lowerdir=".to_vec();
    for (n, fd) in lowers.iter().enumerate() {
        if n > 0 {
            data.push(b':');
        }
        data.extend_from_slice(fd_path(*fd).as_bytes());
    }
    data.extend_from_slice(b",upperdir=");
    data.extend_from_slice(fd_path(upper.as_fd()).as_bytes());
    data.extend_from_slice(b",workdir=");
    data.extend_from_slice(fd_path(work.as_fd()).as_bytes());
    data.extend_from_slice(b",userxattr,metacopy=off");
    let data = CString::new(data).expect("fd paths hold no NUL");
    sys.mount(
        Some(c"overlay"),
        IMAGE_ROOT,
        Some(c"overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&data),
    )?;
    drop((upper, work));
    sys.open(None, IMAGE_ROOT, dir, 0, 0)
}

fn fd_path(fd: BorrowedFd<'_>) -> CString {
    crate::sys::fd_path(std::os::fd::AsRawFd::as_raw_fd(&fd))
}
