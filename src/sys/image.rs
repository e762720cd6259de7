//! fd-relative calls the image store's layer unpacker needs beyond
//! `walk.rs`: every one names a single entry below an open directory fd
//! and never follows a symlink at that entry.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{
    AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags, Timespec, Timestamps,
};

use super::{Errno, SysError, q};

fn err(call: String, e: rustix::io::Errno) -> SysError {
    SysError::new(call, Errno::from_raw(e.raw_os_error()))
}

fn fdn(fd: BorrowedFd<'_>) -> String {
    format!("fd {}", fd.as_raw_fd())
}

/// openat(dir, name, O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW, mode): a new
/// regular file; never opens an existing inode (EEXIST), never follows a link.
pub fn create_file_at(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<OwnedFd, SysError> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| {
        err(
            format!("openat({}, {}, O_CREAT|O_EXCL)", fdn(dir), q(name)),
            e,
        )
    })
}

/// linkat(old_dir, old, new_dir, new, 0): a hard link to `old` itself (a
/// symlink is linked, not followed).
pub fn link_at(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
) -> Result<(), SysError> {
    rustix::fs::linkat(old_dir, old, new_dir, new, AtFlags::empty()).map_err(|e| {
        err(
            format!(
                "linkat({}, {}, {}, {})",
                fdn(old_dir),
                q(old),
                fdn(new_dir),
                q(new)
            ),
            e,
        )
    })
}

/// fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW).
pub fn lchown_at(dir: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> Result<(), SysError> {
    let (u, g) = (
        rustix::fs::Uid::from_raw(uid),
        rustix::fs::Gid::from_raw(gid),
    );
    rustix::fs::chownat(dir, name, Some(u), Some(g), AtFlags::SYMLINK_NOFOLLOW).map_err(|e| {
        err(
            format!(
                "fchownat({}, {}, {uid}, {gid}, AT_SYMLINK_NOFOLLOW)",
                fdn(dir),
                q(name)
            ),
            e,
        )
    })
}

fn times(mtime: i64) -> Timestamps {
    let t = Timespec {
        tv_sec: mtime,
        tv_nsec: 0,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// utimensat(dir, name, {mtime, mtime}, AT_SYMLINK_NOFOLLOW).
pub fn set_mtime_at(dir: BorrowedFd<'_>, name: &CStr, mtime: i64) -> Result<(), SysError> {
    rustix::fs::utimensat(dir, name, &times(mtime), AtFlags::SYMLINK_NOFOLLOW).map_err(|e| {
        err(
            format!("utimensat({}, {}, AT_SYMLINK_NOFOLLOW)", fdn(dir), q(name)),
            e,
        )
    })
}

/// futimens(fd, {mtime, mtime}).
pub fn set_mtime(fd: BorrowedFd<'_>, mtime: i64) -> Result<(), SysError> {
    rustix::fs::futimens(fd, &times(mtime)).map_err(|e| err(format!("futimens({})", fdn(fd)), e))
}

/// fchmodat(dir, name, mode, 0) for an entry that is not a symlink (the
/// caller just created it in a directory only it writes).
pub fn chmod_at(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<(), SysError> {
    rustix::fs::chmodat(dir, name, Mode::from_raw_mode(mode), AtFlags::empty())
        .map_err(|e| err(format!("fchmodat({}, {}, {mode:#o})", fdn(dir), q(name)), e))
}

/// The kind of node [`mknod_at`] creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Fifo,
    Char,
    Block,
}

/// mknodat(dir, name, kind|mode, makedev(major, minor)).
pub fn mknod_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    kind: NodeKind,
    mode: u32,
    major: u32,
    minor: u32,
) -> Result<(), SysError> {
    let ft = match kind {
        NodeKind::Fifo => FileType::Fifo,
        NodeKind::Char => FileType::CharacterDevice,
        NodeKind::Block => FileType::BlockDevice,
    };
    let dev = rustix::fs::makedev(major, minor);
    rustix::fs::mknodat(dir, name, ft, Mode::from_raw_mode(mode), dev).map_err(|e| {
        err(
            format!(
                "mknodat({}, {}, {kind:?}, {major}:{minor})",
                fdn(dir),
                q(name)
            ),
            e,
        )
    })
}

/// renameat2(old_dir, old, new_dir, new, RENAME_NOREPLACE). Returns
/// `false` (and leaves `old` in place) when `new` already exists.
pub fn rename_noreplace(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
) -> Result<bool, SysError> {
    match rustix::fs::renameat_with(old_dir, old, new_dir, new, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::EXIST || e == rustix::io::Errno::NOTEMPTY => Ok(false),
        Err(e) => Err(err(
            format!(
                "renameat2({}, {}, {}, {}, RENAME_NOREPLACE)",
                fdn(old_dir),
                q(old),
                fdn(new_dir),
                q(new)
            ),
            e,
        )),
    }
}

/// flock(fd, LOCK_SH): wait for a shared lock.
pub fn flock_shared(fd: BorrowedFd<'_>) -> Result<(), SysError> {
    rustix::fs::flock(fd, FlockOperation::LockShared)
        .map_err(|e| err(format!("flock({}, LOCK_SH)", fdn(fd)), e))
}
