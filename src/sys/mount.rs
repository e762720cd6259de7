//! Mount syscalls: mount, umount2, pivot_root, mount_setattr, open_tree,
//! move_mount, openat2.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{SysError, check, q};

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

pub const RESOLVE_NO_XDEV: u64 = 0x01;
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// mount(2). `data` is passed as-is; callers never build it from raw paths.
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), SysError> {
    let ptr = |c: Option<&CStr>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is a NUL-terminated string or null, valid for the call.
    let r = unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data).cast(),
        )
    };
    check(r as libc::c_long, || {
        format!(
            "mount({}, {}, {}, {flags:#x}, {})",
            source.map_or("NULL".into(), q),
            q(target),
            fstype.map_or("NULL".into(), q),
            data.map_or("NULL".into(), q)
        )
    })
    .map(drop)
}

/// umount2(2).
pub fn umount2(target: &CStr, flags: libc::c_int) -> Result<(), SysError> {
    // SAFETY: target is a valid C string.
    let r = unsafe { libc::umount2(target.as_ptr(), flags) };
    check(r as libc::c_long, || {
        format!("umount2({}, {flags:#x})", q(target))
    })
    .map(drop)
}

/// pivot_root(2).
pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> Result<(), SysError> {
    // SAFETY: both arguments are valid C strings.
    let r = unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) };
    check(r, || format!("pivot_root({}, {})", q(new_root), q(put_old))).map(drop)
}

/// The kernel's `struct mount_attr` (mount_setattr).
#[repr(C)]
pub(crate) struct MountAttr {
    pub(crate) attr_set: u64,
    pub(crate) attr_clr: u64,
    pub(crate) propagation: u64,
    pub(crate) userns_fd: u64,
}

/// mount_setattr(2) on the mount at `fd` (AT_EMPTY_PATH), optionally
/// recursive.
pub fn mount_setattr(
    fd: BorrowedFd<'_>,
    recursive: bool,
    set: u64,
    clear: u64,
    userns: Option<RawFd>,
) -> Result<(), SysError> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: userns.map_or(0, |f| f as u64),
    };
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: attr is a valid mount_attr of the size passed; "" is a valid path.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(r, || {
        format!(
            "mount_setattr(fd {}, recursive={recursive}, set={set:#x}, clear={clear:#x})",
            fd.as_raw_fd()
        )
    })
    .map(drop)
}

/// open_tree(fd, "", OPEN_TREE_CLONE|AT_EMPTY_PATH[|AT_RECURSIVE]): a
/// detached copy of the mount at `fd`.
pub fn open_tree_clone(fd: BorrowedFd<'_>, recursive: bool) -> Result<OwnedFd, SysError> {
    let mut flags =
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: "" is a valid path; flags are plain integers.
    let r = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags) };
    let r = check(r, || {
        format!("open_tree(fd {}, OPEN_TREE_CLONE)", fd.as_raw_fd())
    })?;
    // SAFETY: open_tree returned a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// move_mount(from_fd, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH).
pub fn move_mount(from: BorrowedFd<'_>, to: &CStr) -> Result<(), SysError> {
    // SAFETY: both paths are valid C strings.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(r, || {
        format!("move_mount(fd {}, {})", from.as_raw_fd(), q(to))
    })
    .map(drop)
}

/// open_tree(dir, name, OPEN_TREE_CLONE|AT_SYMLINK_NOFOLLOW[|AT_RECURSIVE]):
/// a detached copy of the mount at `name` under `dir` (a symlink there is
/// not followed); an empty `name` means `dir` itself (AT_EMPTY_PATH).
pub fn open_tree_clone_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    recursive: bool,
) -> Result<OwnedFd, SysError> {
    let mut flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as libc::c_uint
        | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH as libc::c_uint;
    }
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: name is a valid C string; flags are plain integers.
    let r = unsafe { libc::syscall(libc::SYS_open_tree, dir.as_raw_fd(), name.as_ptr(), flags) };
    let r = check(r, || {
        format!(
            "open_tree(fd {}, {}, OPEN_TREE_CLONE)",
            dir.as_raw_fd(),
            q(name)
        )
    })?;
    // SAFETY: open_tree returned a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// move_mount(from_fd, "", to_dir, to_name, MOVE_MOUNT_F_EMPTY_PATH): a
/// symlink as the target's last component is not followed.
pub fn move_mount_at(
    from: BorrowedFd<'_>,
    to_dir: BorrowedFd<'_>,
    to_name: &CStr,
) -> Result<(), SysError> {
    // SAFETY: both paths are valid C strings.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to_dir.as_raw_fd(),
            to_name.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(r, || {
        format!(
            "move_mount(fd {}, fd {}, {})",
            from.as_raw_fd(),
            to_dir.as_raw_fd(),
            q(to_name)
        )
    })
    .map(drop)
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// openat2(2).
pub fn openat2(
    dirfd: Option<BorrowedFd<'_>>,
    path: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
    resolve: u64,
) -> Result<OwnedFd, SysError> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: mode as u64,
        resolve,
    };
    let dir = dirfd.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: how is a valid open_how of the size passed; path is a C string.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let r = check(r, || {
        format!(
            "openat2({}, {}, {flags:#o}, resolve={resolve:#x})",
            fd_name(dir),
            q(path)
        )
    })?;
    // SAFETY: openat2 returned a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// mkdirat(2).
pub fn mkdirat(dirfd: BorrowedFd<'_>, path: &CStr, mode: libc::mode_t) -> Result<(), SysError> {
    // SAFETY: path is a valid C string.
    let r = unsafe { libc::mkdirat(dirfd.as_raw_fd(), path.as_ptr(), mode) };
    check(r as libc::c_long, || {
        format!(
            "mkdirat({}, {}, {mode:#o})",
            fd_name(dirfd.as_raw_fd()),
            q(path)
        )
    })
    .map(drop)
}

/// symlinkat(2).
pub fn symlinkat(target: &CStr, dirfd: BorrowedFd<'_>, path: &CStr) -> Result<(), SysError> {
    // SAFETY: both paths are valid C strings.
    let r = unsafe { libc::symlinkat(target.as_ptr(), dirfd.as_raw_fd(), path.as_ptr()) };
    check(r as libc::c_long, || {
        format!(
            "symlinkat({}, {}, {})",
            q(target),
            fd_name(dirfd.as_raw_fd()),
            q(path)
        )
    })
    .map(drop)
}

/// The magic-link path of an fd, usable as a mount source or target while
/// the host's /proc is still mounted.
pub fn fd_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a number")
}

fn fd_name(fd: RawFd) -> String {
    if fd == libc::AT_FDCWD {
        "AT_FDCWD".into()
    } else {
        format!("fd {fd}")
    }
}

/// chmod(2) (through a `/proc/self/fd/N` path for O_PATH fds).
pub fn chmod(path: &CStr, mode: u32) -> Result<(), SysError> {
    // SAFETY: path is a valid C string.
    let r = unsafe { libc::chmod(path.as_ptr(), mode) };
    check(r as libc::c_long, || {
        format!("chmod({}, {mode:#o})", q(path))
    })
    .map(drop)
}

/// Whether an fd (O_PATH allowed) refers to a directory.
pub fn is_dir(fd: BorrowedFd<'_>) -> Result<bool, SysError> {
    // SAFETY: stat is plain data; zeroed is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid out-pointer; "" with AT_EMPTY_PATH stats the fd itself.
    let r = unsafe { libc::fstatat(fd.as_raw_fd(), c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH) };
    check(r as libc::c_long, || {
        format!("fstatat(fd {}, \"\", AT_EMPTY_PATH)", fd.as_raw_fd())
    })?;
    Ok(st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// close(2), ignoring errors (nothing useful can be done about them).
pub fn close(fd: RawFd) {
    // SAFETY: the caller owns fd and does not use it afterwards.
    unsafe { libc::close(fd) };
}
