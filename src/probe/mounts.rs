//! Mount namespace + tmpfs, overlayfs, pivot_root and the new mount API,
//! each tried inside a fresh user namespace. Every mount lives in the
//! child's own mount namespace, made private before the first mount, so
//! nothing reaches the host and everything vanishes when the child exits.

use std::ffi::CStr;
use std::os::fd::AsFd;

use super::fork::{ProbeResult, Step};
use crate::sys::Errno;
use crate::sys::raw;

use super::userns::{self, Maps, NEXT};
use super::{Feature, HostSettings, Status, in_child};

const TMPFS_DATA: &CStr = c"size=1m,nr_inodes=64,mode=0755";

/// In a probe child: userns, new mount namespace, private propagation, a
/// small tmpfs on /tmp (in this namespace only). Steps NEXT..NEXT+3.
fn private_tmpfs(maps: &Maps) -> ProbeResult {
    userns::enter(maps)?;
    raw::unshare(libc::CLONE_NEWNS).step(NEXT)?;
    raw::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None).step(NEXT + 1)?;
    raw::mount(
        Some(c"tmpfs"),
        c"/tmp",
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(TMPFS_DATA),
    )
    .step(NEXT + 2)?;
    Ok(0)
}

fn steps(extra: &[&'static str]) -> Vec<&'static str> {
    let mut s = userns::STEPS.to_vec();
    s.extend([
        "unshare(CLONE_NEWNS)",
        "mount(NULL, \"/\", MS_REC|MS_PRIVATE)",
        "mount(\"tmpfs\", \"/tmp\", \"tmpfs\", \"size=1m,nr_inodes=64\")",
    ]);
    s.extend(extra);
    s
}

/// mount_namespace, overlay_userns, pivot_root, new_mount_api.
pub(super) fn probe(host: &HostSettings) -> Vec<Feature> {
    let maps = Maps::new(host);
    let base = NEXT + 3;
    // Shared by all four: the tmpfs needs an existing /tmp to mount on
    // (inside the probe's own mount namespace; the launcher does not).
    let no_tmp = |n: u32, errno: Errno| {
        (n == NEXT + 2 && errno == Errno::ENOENT).then(|| {
            (
                Status::Restricted,
                "the probe mounts its tmpfs on /tmp (in its own namespace), and there is no /tmp"
                    .to_string(),
                "create /tmp (mode 1777)".to_string(),
            )
        })
    };
    let none: userns::Explain<'_> = &no_tmp;

    let mount_ns = userns::verdict(
        "mount_namespace",
        true,
        &steps(&[]),
        in_child(|| private_tmpfs(&maps)),
        host,
        "new mount namespace in a user namespace, private propagation, tmpfs mounted",
        none,
    );

    const OVERLAY_DATA: &CStr = c"lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w,userxattr";
    let overlay = userns::verdict(
        "overlay_userns",
        true,
        &steps(&[
            "mkdir(\"/tmp/l\")",
            "mkdir(\"/tmp/u\")",
            "mkdir(\"/tmp/w\")",
            "mkdir(\"/tmp/m\")",
            "mount(\"overlay\", \"/tmp/m\", \"overlay\", \"lowerdir=..,upperdir=..,workdir=..,userxattr\")",
            "mkdir(\"/tmp/m/new\") (write through the overlay)",
        ]),
        in_child(|| {
            private_tmpfs(&maps)?;
            raw::mkdirat(None, c"/tmp/l", 0o755).step(base)?;
            raw::mkdirat(None, c"/tmp/u", 0o755).step(base + 1)?;
            raw::mkdirat(None, c"/tmp/w", 0o755).step(base + 2)?;
            raw::mkdirat(None, c"/tmp/m", 0o755).step(base + 3)?;
            raw::mount(
                Some(c"overlay"),
                c"/tmp/m",
                Some(c"overlay"),
                0,
                Some(OVERLAY_DATA),
            )
            .step(base + 4)?;
            raw::mkdirat(None, c"/tmp/m/new", 0o755).step(base + 5)?;
            Ok(0)
        }),
        host,
        "overlayfs with userxattr on a tmpfs upper, inside a user namespace, writable",
        &|n, errno| {
            no_tmp(n, errno).or_else(|| {
                (n == base + 4).then(|| {
                    match errno {
                Errno::ENODEV => (
                    Status::Missing,
                    "overlayfs is not available".into(),
                    "modprobe overlay (and add it to /etc/modules)".into(),
                ),
                Errno::EINVAL => (
                    Status::Missing,
                    "the kernel rejects the userxattr option (overlayfs in user namespaces \
                     needs Linux 5.11+)"
                        .into(),
                    "use Linux 5.11 or newer".into(),
                ),
                Errno::EPERM => (
                    Status::Restricted,
                    "the kernel does not allow overlayfs mounts in a user namespace".into(),
                    "use Linux 5.11 or newer (or a distribution kernel that allows unprivileged \
                     overlayfs)"
                        .into(),
                ),
                other => userns::generic(other, host),
            }
                })
            })
        },
    );

    let pivot = userns::verdict(
        "pivot_root",
        true,
        &steps(&[
            "mkdir(\"/tmp/old\")",
            "pivot_root(\"/tmp\", \"/tmp/old\")",
            "chdir(\"/\")",
            "umount2(\"/old\", MNT_DETACH)",
        ]),
        in_child(|| {
            private_tmpfs(&maps)?;
            raw::mkdirat(None, c"/tmp/old", 0o755).step(base)?;
            raw::pivot_root(c"/tmp", c"/tmp/old").step(base + 1)?;
            raw::chdir(c"/").step(base + 2)?;
            raw::umount2(c"/old", libc::MNT_DETACH).step(base + 3)?;
            Ok(0)
        }),
        host,
        "pivot_root onto a tmpfs and detach of the old root, inside a user namespace",
        &|n, errno| {
            no_tmp(n, errno).or_else(|| {
                (n == base + 1 && errno == Errno::EINVAL).then(|| {
                    (
                        Status::Restricted,
                        "the current root cannot be pivoted away from (it is the initramfs \
                     `rootfs`, as in some minimal containers and VMs)"
                            .into(),
                        "switch_root to a real root filesystem before running hutch (or run it \
                     in a container whose root is a proper mount)"
                            .into(),
                    )
                })
            })
        },
    );

    let new_api = userns::verdict(
        "new_mount_api",
        true,
        &steps(&[
            "fsopen(\"tmpfs\")",
            "fsconfig(FSCONFIG_SET_STRING, \"size\", \"1m\")",
            "fsconfig(FSCONFIG_CMD_CREATE)",
            "fsmount()",
            "move_mount(fd, \"/tmp\")",
            "open_tree(\"/tmp\", OPEN_TREE_CLONE)",
            "mount_setattr(RDONLY|NOSUID|NODEV)",
        ]),
        in_child(|| {
            private_tmpfs(&maps)?;
            let fs = raw::fsopen(c"tmpfs").step(base)?;
            raw::fsconfig_string(fs.as_fd(), c"size", c"1m").step(base + 1)?;
            raw::fsconfig_create(fs.as_fd()).step(base + 2)?;
            let mnt = raw::fsmount(fs.as_fd()).step(base + 3)?;
            raw::move_mount(mnt.as_fd(), None, c"/tmp").step(base + 4)?;
            let tree = raw::open_tree_clone(None, c"/tmp", 0).step(base + 5)?;
            raw::mount_setattr(
                tree.as_fd(),
                false,
                crate::sys::MOUNT_ATTR_RDONLY
                    | crate::sys::MOUNT_ATTR_NOSUID
                    | crate::sys::MOUNT_ATTR_NODEV,
                0,
                None,
            )
            .step(base + 6)?;
            Ok(0)
        }),
        host,
        "fsopen/fsconfig/fsmount/move_mount/open_tree/mount_setattr inside a user namespace",
        none,
    );

    vec![mount_ns, overlay, pivot, new_api]
}
