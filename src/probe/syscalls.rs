//! Newer process and file syscalls the launcher relies on: clone3,
//! pidfds, close_range, openat2.

use std::os::fd::AsFd;

use super::fork::{Step, clone3_pidfd_exit};
use crate::sys::raw;
use crate::sys::{RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS};

use super::userns;
use super::{Feature, HostSettings, Status, in_child};

/// clone3, pidfd, close_range, openat2.
pub(super) fn probe(host: &HostSettings) -> Vec<Feature> {
    let none: userns::Explain<'_> = &|_, _| None;
    let mut out = Vec::new();

    out.push(userns::verdict(
        "clone3",
        true,
        &["clone3(CLONE_PIDFD)", "clone3 returned a pidfd"],
        in_child(|| clone3_pidfd_exit(0)),
        host,
        "clone3 with CLONE_PIDFD",
        none,
    ));

    out.push(userns::verdict(
        "pidfd",
        true,
        &["pidfd_open(getpid())"],
        in_child(|| {
            raw::pidfd_open(raw::getpid()).step(0)?;
            Ok(0)
        }),
        host,
        "pidfd_open (and CLONE_PIDFD, see clone3)",
        none,
    ));

    out.push(userns::verdict(
        "close_range",
        true,
        &[
            "close_range(3, ~0, CLOSE_RANGE_CLOEXEC)",
            "close_range(2^30, ~0, 0)",
        ],
        in_child(|| {
            raw::close_range(3, u32::MAX, crate::sys::CLOSE_RANGE_CLOEXEC).step(0)?;
            raw::close_range(1 << 30, u32::MAX, 0).step(1)?;
            Ok(0)
        }),
        host,
        "close_range, including CLOSE_RANGE_CLOEXEC",
        none,
    ));

    out.push(openat2(host));
    out
}

/// openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS,
/// and that it refuses to climb out with "..". Side-effect free, so it
/// runs in this process.
fn openat2(host: &HostSettings) -> Feature {
    const NAME: &str = "openat2";
    let resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    let fail = |e: crate::sys::SysError| {
        let (status, why, fix) = userns::generic(e.errno, host);
        let detail = if why.is_empty() {
            e.to_string()
        } else {
            format!("{e}; {why}")
        };
        Feature::bad(NAME, true, status, detail, fix)
    };
    let root = match crate::sys::openat2(None, c"/", libc::O_PATH | libc::O_DIRECTORY, 0, 0) {
        Ok(fd) => fd,
        Err(e) => return fail(e),
    };
    if let Err(e) = crate::sys::openat2(Some(root.as_fd()), c"proc", libc::O_PATH, 0, resolve) {
        return fail(e);
    }
    match crate::sys::openat2(Some(root.as_fd()), c"proc/..", libc::O_PATH, 0, resolve) {
        // ".." back to the starting directory itself is allowed; escaping is not.
        Ok(_) => {}
        Err(e) => return fail(e),
    }
    match crate::sys::openat2(Some(root.as_fd()), c"..", libc::O_PATH, 0, resolve) {
        Err(e) if e.errno == crate::sys::Errno::EXDEV => Feature::ok(
            NAME,
            true,
            "openat2 with RESOLVE_BENEATH|NO_SYMLINKS|NO_MAGICLINKS; \"..\" escapes are refused",
        ),
        Err(e) => fail(e),
        Ok(_) => Feature::bad(
            NAME,
            true,
            Status::Missing,
            "openat2(\"/\", \"..\", RESOLVE_BENEATH) escaped its starting directory",
            "use Linux 5.6 or newer",
        ),
    }
}
