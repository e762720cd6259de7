//! The syscalls the new-root builder makes ([`FsSys`], mockable: the
//! launcher performs them, tests record them), and the error and result
//! types of a build step. A leaf of `fs/`.

use std::ffi::{CStr, CString};
use std::os::fd::{BorrowedFd, OwnedFd};

use crate::sys::SysError;

/// `/proc/self/fd/N` of an fd the builder holds.
pub(super) fn fd_path(fd: BorrowedFd<'_>) -> CString {
    crate::sys::fd_path(std::os::fd::AsRawFd::as_raw_fd(&fd))
}

/// The syscalls the builder uses. `RealSys` (`src/launch/real_sys.rs`)
/// performs them; tests record them. fds the builder opens are owned (a
/// drop closes them); fds it only uses are borrowed.
pub trait FsSys {
    fn mount(
        &mut self,
        src: Option<&CStr>,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: libc::c_ulong,
        data: Option<&CStr>,
    ) -> Result<(), SysError>;
    /// openat2 (AT_FDCWD without `dir`).
    fn open(
        &mut self,
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        flags: libc::c_int,
        mode: u32,
        resolve: u64,
    ) -> Result<OwnedFd, SysError>;
    fn mkdirat(&mut self, dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<(), SysError>;
    fn symlinkat(
        &mut self,
        target: &CStr,
        dir: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<(), SysError>;
    /// readlinkat(2): the target of the symlink `name` in `dir`.
    fn readlinkat(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Result<Vec<u8>, SysError>;
    fn mount_setattr(
        &mut self,
        fd: BorrowedFd<'_>,
        recursive: bool,
        set: u64,
    ) -> Result<(), SysError>;
    fn move_mount(&mut self, from: BorrowedFd<'_>, to: &CStr) -> Result<(), SysError>;
    /// A detached copy (`open_tree(OPEN_TREE_CLONE)`) of the mount at
    /// `name` under `dir` (a symlink as `name` is not followed; an empty
    /// `name` means `dir` itself).
    fn clone_tree(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        recursive: bool,
    ) -> Result<OwnedFd, SysError>;
    /// Attach the detached mount `from` at `name` under `dir` (not
    /// following a symlink there).
    fn move_mount_at(
        &mut self,
        from: BorrowedFd<'_>,
        dir: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<(), SysError>;
    fn write_all(&mut self, fd: BorrowedFd<'_>, data: &[u8]) -> Result<(), SysError>;
    fn chmod(&mut self, path: &CStr, mode: u32) -> Result<(), SysError>;
    fn is_dir(&mut self, fd: BorrowedFd<'_>) -> Result<bool, SysError>;
    /// Whether two fds name the same file (device and inode).
    fn same_file(&mut self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<bool, SysError>;
    fn fchdir(&mut self, fd: BorrowedFd<'_>) -> Result<(), SysError>;
    fn pivot_root(&mut self, new_root: &CStr, put_old: &CStr) -> Result<(), SysError>;
    fn umount2(&mut self, target: &CStr, flags: libc::c_int) -> Result<(), SysError>;
    fn chdir(&mut self, path: &CStr) -> Result<(), SysError>;
    /// A listening Unix stream socket bound at `name` under `dir`.
    fn unix_listener(&mut self, dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, SysError>;
    /// A context of a new `fstype` with these options (a value, or a flag
    /// when None): fsopen, fsconfig.
    fn fs_context(
        &mut self,
        fstype: &CStr,
        options: &[(&CStr, Option<&CStr>)],
    ) -> Result<OwnedFd, SysError>;
    /// The filesystem of a context, as a detached mount with MOUNT_ATTR_*
    /// `attrs`: FSCONFIG_CMD_CREATE, fsmount.
    fn fs_mount(&mut self, fs: BorrowedFd<'_>, attrs: u64) -> Result<OwnedFd, SysError>;
    /// mknodat(dir, name, mode (S_IF* | permissions), rdev).
    fn mknodat(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        mode: u32,
        rdev: u64,
    ) -> Result<(), SysError>;
    /// fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW).
    fn lchown_at(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        uid: u32,
        gid: u32,
    ) -> Result<(), SysError>;
    fn stat(&mut self, fd: BorrowedFd<'_>) -> Result<crate::sys::Meta, SysError>;
    /// Whether the directory `fd` (O_PATH) has no entry but `.` and `..`.
    fn dir_is_empty(&mut self, fd: BorrowedFd<'_>) -> Result<bool, SysError>;
}

/// A failed build step: which operation, the failed call, and a hint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{what}: {err}{}", hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
pub struct BuildError {
    pub what: String,
    pub err: SysError,
    pub hint: Option<Hint>,
}

/// Why a build step failed and what to do: mostly fixed text; a few say
/// what they found (a symlink's existing target, escaped).
pub type Hint = std::borrow::Cow<'static, str>;

/// An fs operation's result: the failed call and a hint.
pub(super) type OpResult<T> = Result<T, (SysError, Option<Hint>)>;

/// How error lines name the plan's step `i`: its operation as the Spec
/// gave it (`op_names`), else its index.
pub(super) fn op_name(op_names: &[String], i: usize) -> String {
    op_names.get(i).cloned().unwrap_or_else(|| format!("fs[{i}]"))
}

pub(super) fn plain<T>(r: Result<T, SysError>) -> OpResult<T> {
    r.map_err(|e| (e, None))
}

pub(super) const O_PATH_DIR: libc::c_int = libc::O_PATH | libc::O_DIRECTORY;
pub(super) const BASE: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV;
