//! Idmapped mounts, which the root path uses so the workload's unprivileged
//! host id can use a root-owned workspace: a detached copy of the current
//! directory's mount (`open_tree(OPEN_TREE_CLONE)`) idmapped to a user
//! namespace mapping 0 to 65534 (`mount_setattr(MOUNT_ATTR_IDMAP)`). The
//! copy is never attached, so closing its fd removes it.

use std::os::unix::ffi::OsStrExt;

use crate::sys::Errno;
use std::os::fd::AsFd;

use super::fork::{CBuf, Step, decimal, fork_userns_holder};
use crate::sys::raw;

use super::userns;
use super::{Feature, HostSettings, Status, in_child};

const NAME: &str = "idmapped_mount";

const STEPS: [&str; 6] = [
    "fork() a child with unshare(CLONE_NEWUSER)",
    "write /proc/PID/uid_map \"0 65534 1\"",
    "write /proc/PID/gid_map \"0 65534 1\"",
    "open /proc/PID/ns/user",
    "open_tree(cwd, OPEN_TREE_CLONE)",
    "mount_setattr(MOUNT_ATTR_IDMAP)",
];

/// `idmapped_mount`: probed only when running as root, and optional: without
/// it a root launch attaches the workspace as it is (seen with host owners
/// by the workload's unprivileged host id), which is less convenient, not
/// less safe.
pub(super) fn probe(host: &HostSettings) -> Feature {
    if host.uid != 0 {
        return Feature::bad(
            NAME,
            false,
            Status::Skipped,
            "only the root path uses idmapped mounts; not probed as a non-root user",
            "",
        );
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let cwd_bytes = cwd.as_os_str().as_bytes();
    // The child cannot allocate: the path goes into a fixed buffer, so a
    // too-long one falls back to "/".
    let (shown, path) = if cwd_bytes.len() < 255 && !cwd_bytes.contains(&0) {
        (cwd.display().to_string(), CBuf::new(&[cwd_bytes]))
    } else {
        ("/".to_string(), CBuf::new(&[b"/"]))
    };
    let res = in_child(|| {
        let holder = fork_userns_holder(0)?;
        let mut digits = [0u8; 10];
        let pid_s = decimal(holder.pid as u32, &mut digits);
        let uid_map = CBuf::new(&[b"/proc/", pid_s, b"/uid_map"]);
        let gid_map = CBuf::new(&[b"/proc/", pid_s, b"/gid_map"]);
        let ns = CBuf::new(&[b"/proc/", pid_s, b"/ns/user"]);
        raw::write_file(uid_map.as_cstr(), b"0 65534 1\n").step(1)?;
        raw::write_file(gid_map.as_cstr(), b"0 65534 1\n").step(2)?;
        let nsfd = raw::open(ns.as_cstr(), libc::O_RDONLY).step(3)?;
        let tree = raw::open_tree_clone(None, path.as_cstr(), 0).step(4)?;
        raw::mount_setattr(
            tree.as_fd(),
            false,
            crate::sys::MOUNT_ATTR_IDMAP,
            0,
            Some(nsfd.as_fd()),
        )
        .step(5)?;
        Ok(0)
    });
    userns::verdict(
        NAME,
        false,
        &STEPS,
        res,
        host,
        &format!("detached idmapped copy of {shown} (0 -> 65534)"),
        &|n, errno| {
            if n == 0 {
                // The holder child could not create a user namespace.
                return Some(userns::diagnose(0, errno, host));
            }
            (n == 5).then(|| match errno {
                Errno::EINVAL | Errno::EOPNOTSUPP => (
                    Status::Missing,
                    format!(
                        "the filesystem of {shown} does not support idmapped mounts: a root \
                         launch attaches it as it is, so files only root may read there stay \
                         unreadable to the sandbox"
                    ),
                    "keep the workspace on a filesystem with idmapped mount support \
                     (ext4, xfs, btrfs, tmpfs on 6.3+, ...), or run hutch as a non-root user"
                        .into(),
                ),
                Errno::ENOSYS => (
                    Status::Missing,
                    "mount_setattr is not available: a root launch attaches workspaces \
                     without idmapping"
                        .into(),
                    "use Linux 5.12 or newer".into(),
                ),
                other => userns::generic(other, host),
            })
        },
    )
}
