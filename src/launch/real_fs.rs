//! [`FsSys`] over the real syscalls of [`crate::sys`].

use std::ffi::CStr;
use std::os::fd::{BorrowedFd, IntoRawFd, RawFd};

use crate::fs::FsSys;
use crate::sys::{self, SysError};

/// The real syscall layer (used in the child).
pub struct RealFs;

fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: the builder only passes fds it opened and has not closed yet.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

impl FsSys for RealFs {
    fn mount(
        &mut self,
        src: Option<&CStr>,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: libc::c_ulong,
        data: Option<&CStr>,
    ) -> Result<(), SysError> {
        sys::mount(src, target, fstype, flags, data)
    }

    fn open(
        &mut self,
        dir: Option<RawFd>,
        path: &CStr,
        flags: libc::c_int,
        mode: u32,
        resolve: u64,
    ) -> Result<RawFd, SysError> {
        sys::openat2(dir.map(borrow), path, flags, mode, resolve).map(IntoRawFd::into_raw_fd)
    }

    fn close(&mut self, fd: RawFd) {
        sys::close(fd);
    }

    fn mkdirat(&mut self, dir: RawFd, name: &CStr, mode: u32) -> Result<(), SysError> {
        sys::mkdirat(borrow(dir), name, mode)
    }

    fn symlinkat(&mut self, target: &CStr, dir: RawFd, name: &CStr) -> Result<(), SysError> {
        sys::symlinkat(target, borrow(dir), name)
    }

    fn mount_setattr(&mut self, fd: RawFd, recursive: bool, set: u64) -> Result<(), SysError> {
        sys::mount_setattr(borrow(fd), recursive, set, 0, None)
    }

    fn move_mount(&mut self, from: RawFd, to: &CStr) -> Result<(), SysError> {
        sys::move_mount(borrow(from), to)
    }

    fn clone_tree(&mut self, dir: RawFd, name: &CStr, recursive: bool) -> Result<RawFd, SysError> {
        sys::open_tree_clone_at(borrow(dir), name, recursive).map(IntoRawFd::into_raw_fd)
    }

    fn move_mount_at(&mut self, from: RawFd, dir: RawFd, name: &CStr) -> Result<(), SysError> {
        sys::move_mount_at(borrow(from), borrow(dir), name)
    }

    fn write_all(&mut self, fd: RawFd, data: &[u8]) -> Result<(), SysError> {
        sys::write_all(fd, data)
    }

    fn chmod(&mut self, path: &CStr, mode: u32) -> Result<(), SysError> {
        sys::chmod(path, mode)
    }

    fn is_dir(&mut self, fd: RawFd) -> Result<bool, SysError> {
        sys::is_dir(borrow(fd))
    }

    fn fchdir(&mut self, fd: RawFd) -> Result<(), SysError> {
        sys::fchdir(borrow(fd))
    }

    fn pivot_root(&mut self, new_root: &CStr, put_old: &CStr) -> Result<(), SysError> {
        sys::pivot_root(new_root, put_old)
    }

    fn umount2(&mut self, target: &CStr, flags: libc::c_int) -> Result<(), SysError> {
        sys::umount2(target, flags)
    }

    fn chdir(&mut self, path: &CStr) -> Result<(), SysError> {
        sys::chdir(path)
    }
}
