//! Mount and path syscalls: mount, umount2, pivot_root, mount_setattr,
//! open_tree, move_mount, the fs context calls, openat2, mkdirat, ...
//!
//! [`raw`] holds the allocation-free versions; the functions of this
//! module describe a failure as the call that failed.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::{Errno, SysError, q};

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
pub const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x0020_0000;
/// mount(2)'s MS_NOSYMFOLLOW (Linux 5.10; not in every libc).
pub const MS_NOSYMFOLLOW: libc::c_ulong = 256;

pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

pub const OPEN_TREE_CLONE: libc::c_uint = 1;

/// The allocation-free mount and path syscalls.
pub mod raw {
    use std::ffi::CStr;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

    use super::super::{Errno, ret};
    use super::OPEN_TREE_CLONE;

    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    const FSCONFIG_SET_FLAG: libc::c_uint = 0;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    const FSCONFIG_SET_STRING: libc::c_uint = 1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;

    fn ptr(c: Option<&CStr>) -> *const libc::c_char {
        c.map_or(std::ptr::null(), CStr::as_ptr)
    }

    fn dirfd(d: Option<BorrowedFd<'_>>) -> RawFd {
        d.map_or(libc::AT_FDCWD, |d| d.as_raw_fd())
    }

    /// The fd a syscall returned, now owned.
    fn owned(r: libc::c_long) -> OwnedFd {
        // SAFETY: only called on the non-negative result of a call that
        // returns a new fd.
        unsafe { OwnedFd::from_raw_fd(r as RawFd) }
    }

    /// mount(2). `data` is passed as-is; callers never build it from raw
    /// paths.
    pub fn mount(
        source: Option<&CStr>,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: libc::c_ulong,
        data: Option<&CStr>,
    ) -> Result<(), Errno> {
        // SAFETY: every pointer is a NUL-terminated string or null, valid
        // for the call.
        ret(unsafe {
            libc::mount(
                ptr(source),
                target.as_ptr(),
                ptr(fstype),
                flags,
                ptr(data).cast(),
            )
        } as libc::c_long)
        .map(drop)
    }

    /// umount2(2).
    pub fn umount2(target: &CStr, flags: libc::c_int) -> Result<(), Errno> {
        // SAFETY: target is a valid C string.
        ret(unsafe { libc::umount2(target.as_ptr(), flags) } as libc::c_long).map(drop)
    }

    /// pivot_root(2).
    pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> Result<(), Errno> {
        // SAFETY: both arguments are valid C strings.
        ret(unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) })
            .map(drop)
    }

    /// The kernel's `struct mount_attr` (mount_setattr).
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }

    /// mount_setattr(2) on the mount at `fd` (AT_EMPTY_PATH), optionally
    /// recursive; `userns` for MOUNT_ATTR_IDMAP.
    pub fn mount_setattr(
        fd: BorrowedFd<'_>,
        recursive: bool,
        set: u64,
        clear: u64,
        userns: Option<BorrowedFd<'_>>,
    ) -> Result<(), Errno> {
        let attr = MountAttr {
            attr_set: set,
            attr_clr: clear,
            propagation: 0,
            userns_fd: userns.map_or(0, |f| f.as_raw_fd() as u64),
        };
        let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
        if recursive {
            flags |= libc::AT_RECURSIVE as libc::c_uint;
        }
        // SAFETY: attr is a valid mount_attr of the size passed; "" is a
        // valid path.
        ret(unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                fd.as_raw_fd(),
                c"".as_ptr(),
                flags,
                &attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        })
        .map(drop)
    }

    /// open_tree(dir, path, OPEN_TREE_CLONE|O_CLOEXEC|`flags`): a detached
    /// copy of a mount.
    pub fn open_tree_clone(
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        flags: libc::c_uint,
    ) -> Result<OwnedFd, Errno> {
        let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | flags;
        // SAFETY: path is a valid C string; flags are plain integers.
        ret(unsafe { libc::syscall(libc::SYS_open_tree, dirfd(dir), path.as_ptr(), flags) })
            .map(owned)
    }

    /// move_mount(from_fd, "", to_dir, to, MOVE_MOUNT_F_EMPTY_PATH): a
    /// symlink as the target's last component is not followed when
    /// `to_dir` is given.
    pub fn move_mount(
        from: BorrowedFd<'_>,
        to_dir: Option<BorrowedFd<'_>>,
        to: &CStr,
    ) -> Result<(), Errno> {
        // An empty `to` under `to_dir` is `to_dir` itself.
        let flags = if to.is_empty() && to_dir.is_some() {
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
        } else {
            MOVE_MOUNT_F_EMPTY_PATH
        };
        // SAFETY: both paths are valid C strings.
        ret(unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                from.as_raw_fd(),
                c"".as_ptr(),
                dirfd(to_dir),
                to.as_ptr(),
                flags,
            )
        })
        .map(drop)
    }

    /// fsopen(2).
    pub fn fsopen(fstype: &CStr) -> Result<OwnedFd, Errno> {
        // SAFETY: fstype is a valid C string.
        ret(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), libc::FSOPEN_CLOEXEC) })
            .map(owned)
    }

    /// fsconfig(fd, FSCONFIG_SET_STRING, key, value).
    pub fn fsconfig_string(fd: BorrowedFd<'_>, key: &CStr, value: &CStr) -> Result<(), Errno> {
        // SAFETY: key and value are valid C strings.
        ret(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fd.as_raw_fd(),
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        })
        .map(drop)
    }

    /// fsconfig(fd, FSCONFIG_SET_FLAG, key).
    pub fn fsconfig_flag(fd: BorrowedFd<'_>, key: &CStr) -> Result<(), Errno> {
        // SAFETY: key is a valid C string; the value is null, as the flag
        // form requires.
        ret(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fd.as_raw_fd(),
                FSCONFIG_SET_FLAG,
                key.as_ptr(),
                std::ptr::null::<libc::c_void>(),
                0,
            )
        })
        .map(drop)
    }

    /// fsconfig(fd, FSCONFIG_CMD_CREATE).
    pub fn fsconfig_create(fd: BorrowedFd<'_>) -> Result<(), Errno> {
        // SAFETY: integer arguments and null pointers.
        ret(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fd.as_raw_fd(),
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_void>(),
                0,
            )
        })
        .map(drop)
    }

    /// fsmount(2).
    pub fn fsmount(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
        fsmount_with(fd, 0)
    }

    /// fsmount(2) with MOUNT_ATTR_* flags on the new mount.
    pub fn fsmount_with(fd: BorrowedFd<'_>, attrs: u64) -> Result<OwnedFd, Errno> {
        // SAFETY: integer arguments only.
        ret(unsafe {
            libc::syscall(
                libc::SYS_fsmount,
                fd.as_raw_fd(),
                libc::FSMOUNT_CLOEXEC,
                attrs as libc::c_uint,
            )
        })
        .map(owned)
    }

    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }

    /// openat2(2) (always O_CLOEXEC).
    pub fn openat2(
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        flags: libc::c_int,
        mode: libc::mode_t,
        resolve: u64,
    ) -> Result<OwnedFd, Errno> {
        let how = OpenHow {
            flags: (flags | libc::O_CLOEXEC) as u64,
            mode: mode as u64,
            resolve,
        };
        // SAFETY: how is a valid open_how of the size passed; path is a C
        // string.
        ret(unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd(dir),
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        })
        .map(owned)
    }

    /// open(2) of a path (always O_CLOEXEC).
    pub fn open(path: &CStr, flags: libc::c_int) -> Result<OwnedFd, Errno> {
        // SAFETY: path is a valid C string.
        ret(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) } as libc::c_long)
            .map(owned)
    }

    /// mkdirat(2) (AT_FDCWD without `dir`).
    pub fn mkdirat(
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        mode: libc::mode_t,
    ) -> Result<(), Errno> {
        // SAFETY: path is a valid C string.
        ret(unsafe { libc::mkdirat(dirfd(dir), path.as_ptr(), mode) } as libc::c_long).map(drop)
    }

    /// symlinkat(2).
    pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, path: &CStr) -> Result<(), Errno> {
        // SAFETY: both paths are valid C strings.
        ret(
            unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), path.as_ptr()) }
                as libc::c_long,
        )
        .map(drop)
    }

    /// chmod(2).
    pub fn chmod(path: &CStr, mode: u32) -> Result<(), Errno> {
        // SAFETY: path is a valid C string.
        ret(unsafe { libc::chmod(path.as_ptr(), mode) } as libc::c_long).map(drop)
    }

    /// The file type bits (`st_mode & S_IFMT`) of an fd (O_PATH allowed).
    pub fn file_type(fd: BorrowedFd<'_>) -> Result<libc::mode_t, Errno> {
        // SAFETY: stat is plain data; zeroed is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: st is a valid out-pointer; "" with AT_EMPTY_PATH stats the
        // fd itself.
        ret(
            unsafe { libc::fstatat(fd.as_raw_fd(), c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH) }
                as libc::c_long,
        )?;
        Ok(st.st_mode & libc::S_IFMT)
    }

    /// Whether an fd (O_PATH allowed) refers to a directory.
    pub fn is_dir(fd: BorrowedFd<'_>) -> Result<bool, Errno> {
        Ok(file_type(fd)? == libc::S_IFDIR)
    }

    /// Write `data` to the existing file at `path` (e.g. a procfs file).
    pub fn write_file(path: &CStr, data: &[u8]) -> Result<(), Errno> {
        let fd = open(path, libc::O_WRONLY)?;
        let n = super::super::raw::write(std::os::fd::AsFd::as_fd(&fd), data)?;
        if n != data.len() {
            return Err(Errno::EIO);
        }
        Ok(())
    }
}

fn fd_name(fd: RawFd) -> String {
    if fd == libc::AT_FDCWD {
        "AT_FDCWD".into()
    } else {
        format!("fd {fd}")
    }
}

fn dir_name(dir: Option<BorrowedFd<'_>>) -> String {
    fd_name(dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd()))
}

fn described<T>(r: Result<T, Errno>, call: impl FnOnce() -> String) -> Result<T, SysError> {
    r.map_err(|e| SysError::new(call(), e))
}

/// mount(2). `data` is passed as-is; callers never build it from raw paths.
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), SysError> {
    described(raw::mount(source, target, fstype, flags, data), || {
        format!(
            "mount({}, {}, {}, {flags:#x}, {})",
            source.map_or("NULL".into(), q),
            q(target),
            fstype.map_or("NULL".into(), q),
            data.map_or("NULL".into(), q)
        )
    })
}

/// umount2(2).
pub fn umount2(target: &CStr, flags: libc::c_int) -> Result<(), SysError> {
    described(raw::umount2(target, flags), || {
        format!("umount2({}, {flags:#x})", q(target))
    })
}

/// pivot_root(2).
pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> Result<(), SysError> {
    described(raw::pivot_root(new_root, put_old), || {
        format!("pivot_root({}, {})", q(new_root), q(put_old))
    })
}

/// mount_setattr(2) on the mount at `fd` (AT_EMPTY_PATH), optionally
/// recursive.
pub fn mount_setattr(
    fd: BorrowedFd<'_>,
    recursive: bool,
    set: u64,
    clear: u64,
    userns: Option<BorrowedFd<'_>>,
) -> Result<(), SysError> {
    described(
        raw::mount_setattr(fd, recursive, set, clear, userns),
        || {
            format!(
                "mount_setattr(fd {}, recursive={recursive}, set={set:#x}, clear={clear:#x})",
                fd.as_raw_fd()
            )
        },
    )
}

/// open_tree(fd, "", OPEN_TREE_CLONE|AT_EMPTY_PATH[|AT_RECURSIVE]): a
/// detached copy of the mount at `fd`.
pub fn open_tree_clone(fd: BorrowedFd<'_>, recursive: bool) -> Result<OwnedFd, SysError> {
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    described(raw::open_tree_clone(Some(fd), c"", flags), || {
        format!("open_tree(fd {}, OPEN_TREE_CLONE)", fd.as_raw_fd())
    })
}

/// move_mount(from_fd, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH).
pub fn move_mount(from: BorrowedFd<'_>, to: &CStr) -> Result<(), SysError> {
    described(raw::move_mount(from, None, to), || {
        format!("move_mount(fd {}, {})", from.as_raw_fd(), q(to))
    })
}

/// open_tree(dir, name, OPEN_TREE_CLONE|AT_SYMLINK_NOFOLLOW[|AT_RECURSIVE]):
/// a detached copy of the mount at `name` under `dir` (a symlink there is
/// not followed); an empty `name` means `dir` itself (AT_EMPTY_PATH).
pub fn open_tree_clone_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    recursive: bool,
) -> Result<OwnedFd, SysError> {
    let mut flags = libc::AT_SYMLINK_NOFOLLOW as libc::c_uint;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH as libc::c_uint;
    }
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    described(raw::open_tree_clone(Some(dir), name, flags), || {
        format!(
            "open_tree(fd {}, {}, OPEN_TREE_CLONE)",
            dir.as_raw_fd(),
            q(name)
        )
    })
}

/// move_mount(from_fd, "", to_dir, to_name, MOVE_MOUNT_F_EMPTY_PATH): a
/// symlink as the target's last component is not followed.
pub fn move_mount_at(
    from: BorrowedFd<'_>,
    to_dir: BorrowedFd<'_>,
    to_name: &CStr,
) -> Result<(), SysError> {
    described(raw::move_mount(from, Some(to_dir), to_name), || {
        format!(
            "move_mount(fd {}, fd {}, {})",
            from.as_raw_fd(),
            to_dir.as_raw_fd(),
            q(to_name)
        )
    })
}

/// A filesystem context (fsopen, then one fsconfig per option: a value,
/// or a flag when None), to be made a mount later by [`fs_mount`].
/// overlayfs (Linux 6.5+) resolves its layer paths here, at fsconfig.
pub fn fs_context(fstype: &CStr, options: &[(&CStr, Option<&CStr>)]) -> Result<OwnedFd, SysError> {
    let fs = described(raw::fsopen(fstype), || format!("fsopen({})", q(fstype)))?;
    for (key, value) in options {
        let set = match value {
            Some(v) => raw::fsconfig_string(std::os::fd::AsFd::as_fd(&fs), key, v),
            None => raw::fsconfig_flag(std::os::fd::AsFd::as_fd(&fs), key),
        };
        described(set, || match value {
            Some(v) => format!("fsconfig({}, {}={})", q(fstype), q(key), q(v)),
            None => format!("fsconfig({}, {})", q(fstype), q(key)),
        })?;
    }
    Ok(fs)
}

/// Create the filesystem of a context and a detached mount of it with
/// MOUNT_ATTR_* `attrs` (FSCONFIG_CMD_CREATE, fsmount).
pub fn fs_mount(fs: BorrowedFd<'_>, attrs: u64) -> Result<OwnedFd, SysError> {
    described(raw::fsconfig_create(fs), || {
        "fsconfig(FSCONFIG_CMD_CREATE)".to_string()
    })?;
    described(raw::fsmount_with(fs, attrs), || {
        format!("fsmount({attrs:#x})")
    })
}

/// openat2(2).
pub fn openat2(
    dirfd: Option<BorrowedFd<'_>>,
    path: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
    resolve: u64,
) -> Result<OwnedFd, SysError> {
    described(raw::openat2(dirfd, path, flags, mode, resolve), || {
        format!(
            "openat2({}, {}, {flags:#o}, resolve={resolve:#x})",
            dir_name(dirfd),
            q(path)
        )
    })
}

/// mkdirat(2).
pub fn mkdirat(dirfd: BorrowedFd<'_>, path: &CStr, mode: libc::mode_t) -> Result<(), SysError> {
    described(raw::mkdirat(Some(dirfd), path, mode), || {
        format!(
            "mkdirat({}, {}, {mode:#o})",
            fd_name(dirfd.as_raw_fd()),
            q(path)
        )
    })
}

/// symlinkat(2).
pub fn symlinkat(target: &CStr, dirfd: BorrowedFd<'_>, path: &CStr) -> Result<(), SysError> {
    described(raw::symlinkat(target, dirfd, path), || {
        format!(
            "symlinkat({}, {}, {})",
            q(target),
            fd_name(dirfd.as_raw_fd()),
            q(path)
        )
    })
}

/// The magic-link path of an fd, usable as a mount source or target while
/// the host's /proc is still mounted.
pub fn fd_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a number")
}

/// chmod(2) (through a `/proc/self/fd/N` path for O_PATH fds).
pub fn chmod(path: &CStr, mode: u32) -> Result<(), SysError> {
    described(raw::chmod(path, mode), || {
        format!("chmod({}, {mode:#o})", q(path))
    })
}

/// Whether an fd (O_PATH allowed) refers to a directory.
pub fn is_dir(fd: BorrowedFd<'_>) -> Result<bool, SysError> {
    described(raw::is_dir(fd), || {
        format!("fstatat(fd {}, \"\", AT_EMPTY_PATH)", fd.as_raw_fd())
    })
}
