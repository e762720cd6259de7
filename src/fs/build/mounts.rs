//! The builder's `mount`, `device`, `mask` and `readonly-path` steps, and
//! a host directory as the new root: the vocabulary container runtimes
//! speak, executed with the same rules as the rest of the builder (every
//! destination resolved inside the new root, every mount made on
//! `/proc/self/fd/N`, every flag set before a mount is reachable where
//! that matters).

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::{BASE, Builder, FsSys, Hint, O_PATH_DIR, OpResult, fd_path, plain};
use crate::fs::plan::{RO_BIND, tmpfs_data};
use crate::sys::{
    Errno, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
    RESOLVE_IN_ROOT, RESOLVE_NO_SYMLINKS, SysError,
};

/// Name of the tmpfs (on the staging tmpfs, outside the new root) that
/// holds the device nodes the builder makes: mounted without `nodev`, so
/// that each node, bound into the root, works even where the directory
/// around it is `nodev`.
const NODES: &CStr = c"nodes";

impl<S: FsSys> Builder<'_, S> {
    /// A `mount` bind: attributes on the bind (and its submounts when
    /// recursive), then the propagation asked for.
    pub(super) fn bind_mount(
        &mut self,
        source: usize,
        dest: &CStr,
        recursive: bool,
        attrs: u64,
        propagation: libc::c_ulong,
    ) -> OpResult<()> {
        let Some(src) = &self.source_fds[source] else {
            return Ok(());
        };
        let src_path = fd_path(src.as_fd());
        let is_dir = plain(self.sys.is_dir(src.as_fd()))?;
        let target = self.ensure(dest, is_dir)?;
        let flags = libc::MS_BIND | if recursive { libc::MS_REC } else { 0 };
        plain(
            self.sys
                .mount(Some(&src_path), &fd_path(target.as_fd()), None, flags, None),
        )?;
        drop(target);
        if recursive {
            self.drop_staging_copy(source, dest)?;
        }
        let fd = self.in_root(dest)?;
        if attrs != 0 {
            plain(self.sys.mount_setattr(fd.as_fd(), recursive, attrs))?;
        }
        self.propagate(fd.as_fd(), propagation)
    }

    /// A new filesystem mount of a `mount` operation: `fstype` named
    /// `source` (what mountinfo shows).
    pub(super) fn fs_mount(
        &mut self,
        (fstype, source): (&CStr, &CStr),
        dest: &CStr,
        flags: libc::c_ulong,
        data: Option<&CStr>,
        propagation: libc::c_ulong,
        copy_up: bool,
    ) -> OpResult<()> {
        let target = self.ensure(dest, true)?;
        // Copying up an empty directory is mounting over it; hutch does
        // not copy files of the workload's tree.
        if copy_up && !plain(self.sys.dir_is_empty(target.as_fd()))? {
            return Err((
                SysError::new("tmpcopyup", Errno::ENOTEMPTY),
                Some("tmpcopyup works only over an empty or missing directory".into()),
            ));
        }
        plain(self.sys.mount(
            Some(source),
            &fd_path(target.as_fd()),
            Some(fstype),
            flags,
            data,
        ))
        .map_err(|(e, _)| {
            let hint = match (e.errno, fstype.to_bytes()) {
                (Errno::EPERM, b"sysfs") => Some(
                    "sysfs needs the network namespace to belong to the sandbox's user namespace",
                ),
                (Errno::ENODEV, _) => Some("this kernel lacks the filesystem"),
                _ => None,
            };
            (e, hint.map(Hint::from))
        })?;
        drop(target);
        if propagation != 0 {
            let fd = self.in_root(dest)?;
            self.propagate(fd.as_fd(), propagation)?;
        }
        Ok(())
    }

    fn propagate(&mut self, fd: BorrowedFd<'_>, propagation: libc::c_ulong) -> OpResult<()> {
        if propagation == 0 {
            return Ok(());
        }
        plain(self.sys.mount(None, &fd_path(fd), None, propagation, None))
    }

    /// A device node: made with mknod on the builder's device tmpfs (then
    /// owned as asked), or, where mknod is refused (a user namespace),
    /// the host's node at the same path when it is that very device; bound
    /// onto an empty file at `dest`.
    pub(super) fn device(
        &mut self,
        staging: BorrowedFd<'_>,
        dest: &CStr,
        mode: u32,
        rdev: u64,
        host_path: &CStr,
        owner: Option<(u32, u32)>,
    ) -> OpResult<()> {
        let nodes = self.nodes_dir(staging)?;
        let name = self.scratch_name();
        let node: OwnedFd = match self.sys.mknodat(nodes.as_fd(), &name, mode, rdev) {
            Ok(()) => {
                if let Some((uid, gid)) = owner {
                    plain(self.sys.lchown_at(nodes.as_fd(), &name, uid, gid))?;
                }
                let fd = plain(self.sys.open(
                    Some(nodes.as_fd()),
                    &name,
                    libc::O_PATH | libc::O_NOFOLLOW,
                    0,
                    RESOLVE_NO_SYMLINKS,
                ))?;
                // mknod's mode went through hutch init's umask.
                plain(self.sys.chmod(&fd_path(fd.as_fd()), mode & 0o7777))?;
                fd
            }
            Err(e) if e.errno == Errno::EPERM && mode & libc::S_IFMT != libc::S_IFIFO => {
                let host = self.sys.open(
                    None,
                    host_path,
                    libc::O_PATH | libc::O_NOFOLLOW,
                    0,
                    RESOLVE_NO_SYMLINKS,
                );
                let host = host.map_err(|e| {
                    (
                        e,
                        Some("mknod is not allowed here and the host has no such node to bind".into()),
                    )
                })?;
                let meta = plain(self.sys.stat(host.as_fd()))?;
                if meta.mode & libc::S_IFMT != mode & libc::S_IFMT || meta.rdev != rdev {
                    return Err((
                        SysError::new(format!("stat({})", crate::sys::q(host_path)), Errno::ENODEV),
                        Some(
                            "mknod is not allowed here and the host's node at this path is another device"
                                .into(),
                        ),
                    ));
                }
                let tree = plain(self.sys.clone_tree(host.as_fd(), c"", false))?;
                plain(self.sys.mount_setattr(
                    tree.as_fd(),
                    false,
                    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
                ))?;
                let target = self.ensure(dest, false)?;
                plain(self.sys.move_mount_at(tree.as_fd(), target.as_fd(), c""))?;
                return Ok(());
            }
            Err(e) => return Err((e, None)),
        };
        let target = self.ensure(dest, false)?;
        plain(self.sys.mount(
            Some(&fd_path(node.as_fd())),
            &fd_path(target.as_fd()),
            None,
            libc::MS_BIND,
            None,
        ))
    }

    /// The device tmpfs (made on first use).
    fn nodes_dir(&mut self, staging: BorrowedFd<'_>) -> OpResult<OwnedFd> {
        if !self.nodes_mounted {
            plain(self.sys.mkdirat(staging, NODES, 0o755))?;
            let at = super::staging_path(NODES);
            let opts = tmpfs_data(0o755, 64 << 10, 1024);
            plain(self.sys.mount(
                Some(c"tmpfs"),
                &at,
                Some(c"tmpfs"),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                Some(&opts),
            ))?;
            self.nodes_mounted = true;
        }
        plain(
            self.sys
                .open(Some(staging), NODES, O_PATH_DIR, 0, RESOLVE_NO_SYMLINKS),
        )
    }

    /// Cover `dest`: a file with a read-only /dev/null, a directory with
    /// an empty read-only tmpfs. Nothing there: nothing to do.
    pub(super) fn mask(&mut self, dest: &CStr) -> OpResult<()> {
        let Some(fd) = self.in_root_optional(dest)? else {
            return Ok(());
        };
        if plain(self.sys.is_dir(fd.as_fd()))? {
            let empty = tmpfs_data(0o555, 4096, 1);
            return plain(self.sys.mount(
                Some(c"tmpfs"),
                &fd_path(fd.as_fd()),
                Some(c"tmpfs"),
                BASE | libc::MS_NOEXEC | libc::MS_RDONLY,
                Some(&empty),
            ));
        }
        let null = self.host_dev_node(c"null")?;
        plain(
            self.sys
                .mount_setattr(null.as_fd(), false, RO_BIND | MOUNT_ATTR_NOEXEC),
        )?;
        // Onto the fd itself: a magic link into a procfs file is not
        // followed as a mount target.
        plain(self.sys.move_mount_at(null.as_fd(), fd.as_fd(), c""))
    }

    /// A read-only copy of the subtree at `dest` (flagged while detached)
    /// attached over it. Nothing there: nothing to do.
    pub(super) fn readonly_path(&mut self, dest: &CStr) -> OpResult<()> {
        let Some(fd) = self.in_root_optional(dest)? else {
            return Ok(());
        };
        let tree = plain(self.sys.clone_tree(fd.as_fd(), c"", true))?;
        plain(self.sys.mount_setattr(
            tree.as_fd(),
            true,
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
        ))?;
        plain(self.sys.move_mount_at(tree.as_fd(), fd.as_fd(), c""))
    }

    /// A recursive bind of `source` just made at `dest` copied the staging
    /// tmpfs when `source` holds `/tmp` (see [`super::staging_under`]):
    /// detach the copy, so that the sandbox sees the host's directory
    /// there and nothing of hutch's staging.
    pub(super) fn drop_staging_copy(&mut self, source: usize, dest: &CStr) -> OpResult<()> {
        let Some(Some(rel)) = self.staging_in_source.get(source).cloned() else {
            return Ok(());
        };
        let mut at = dest.to_bytes().to_vec();
        if !rel.as_bytes().is_empty() {
            if !at.is_empty() {
                at.push(b'/');
            }
            at.extend_from_slice(rel.as_bytes());
        }
        let at = CString::new(at).expect("no NUL");
        let fd = self.in_root(&at)?;
        plain(self.sys.umount2(&fd_path(fd.as_fd()), libc::MNT_DETACH))
    }

    fn in_root(&mut self, dest: &CStr) -> OpResult<OwnedFd> {
        plain(self.sys.open(
            Some(self.root.as_fd()),
            dest,
            libc::O_PATH,
            0,
            RESOLVE_IN_ROOT,
        ))
    }

    fn in_root_optional(&mut self, dest: &CStr) -> OpResult<Option<OwnedFd>> {
        match self.sys.open(
            Some(self.root.as_fd()),
            dest,
            libc::O_PATH,
            0,
            RESOLVE_IN_ROOT,
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if matches!(e.errno, Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
            Err(e) => Err((e, None)),
        }
    }
}

/// The new root as a recursive bind of a host directory, flagged as asked.
pub(super) fn bind_root<S: FsSys>(
    sys: &mut S,
    source: Option<&OwnedFd>,
    at: &CStr,
    attrs: u64,
) -> Result<OwnedFd, SysError> {
    let Some(src) = source else {
        return Err(SysError::new("binding the root directory", Errno::ENOENT));
    };
    sys.mount(
        Some(&fd_path(src.as_fd())),
        at,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;
    let root = sys.open(None, at, O_PATH_DIR, 0, 0)?;
    if attrs != 0 {
        sys.mount_setattr(root.as_fd(), true, attrs)?;
    }
    Ok(root)
}

/// `/proc/self/fd/N` as an owned string, for messages.
#[allow(dead_code)]
fn describe(path: &CString) -> String {
    String::from_utf8_lossy(path.as_bytes()).into_owned()
}
