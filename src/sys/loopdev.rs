//! Loop devices (a file as a block device) and pidfds of processes that
//! are not our children: what session disk quotas and the runtime
//! registry need.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{Errno, SysError, check};

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
/// Detach the device when its last user (the mounted filesystem) is gone.
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// `struct loop_info64` of `<linux/loop.h>`.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` of `<linux/loop.h>` (Linux 5.8+).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// A configured loop device: its fd and path (`/dev/loopN`).
#[derive(Debug)]
pub struct LoopDevice {
    /// Held: the device is released (autoclear) when the last fd closes.
    #[allow(dead_code)] // held open, never read
    pub fd: OwnedFd,
    pub path: CString,
}

fn open_rw(path: &CString) -> Result<OwnedFd, SysError> {
    // SAFETY: path is a valid C string; the returned fd is owned below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    check(fd as libc::c_long, || {
        format!("open({}, O_RDWR)", super::q(path))
    })?;
    // SAFETY: open returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attach the open file `backing` to a free loop device with
/// `LOOP_CONFIGURE` (autoclear: the device detaches itself once the
/// filesystem on it is unmounted and its fd closed). The device keeps a
/// reference to `backing`'s open file description (and so to any `flock`
/// held on it) while attached.
pub fn loop_attach(backing: BorrowedFd<'_>) -> Result<LoopDevice, SysError> {
    let control = open_rw(&CString::new("/dev/loop-control").expect("no NUL"))?;
    // Another process may take the free device between the two calls:
    // then LOOP_CONFIGURE fails with EBUSY and the next one is tried.
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument.
        let nr = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        check(nr as libc::c_long, || {
            "ioctl(/dev/loop-control, LOOP_CTL_GET_FREE)".to_string()
        })?;
        let path = CString::new(format!("/dev/loop{nr}")).expect("no NUL");
        let fd = open_rw(&path)?;
        // SAFETY: an all-zero loop_config is valid; the fields set below are
        // plain integers.
        let mut config: LoopConfig = unsafe { std::mem::zeroed() };
        config.fd = backing.as_raw_fd() as u32;
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: config is a properly laid out loop_config that outlives
        // the call.
        let r =
            unsafe { libc::ioctl(fd.as_raw_fd(), LOOP_CONFIGURE, &config as *const LoopConfig) };
        if r == 0 {
            return Ok(LoopDevice { fd, path });
        }
        let e = Errno::last();
        if e != Errno::EBUSY {
            return Err(SysError::new(
                format!("ioctl({}, LOOP_CONFIGURE)", super::q(&path)),
                e,
            ));
        }
    }
    Err(SysError::new(
        "ioctl(/dev/loopN, LOOP_CONFIGURE): every free loop device was taken meanwhile",
        Errno::EBUSY,
    ))
}

/// pidfd_open(2) of any process (not only children).
pub fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd, SysError> {
    // SAFETY: integer arguments only.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    check(fd, || format!("pidfd_open({pid}, 0)"))?;
    // SAFETY: pidfd_open returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// What `fstatfs` says of a filesystem (bytes and inodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    /// Bytes usable for data (`f_blocks * f_bsize`).
    pub capacity: u64,
    /// Bytes in use (`(f_blocks - f_bfree) * f_bsize`).
    pub used: u64,
    /// Bytes an unprivileged writer may still use (`f_bavail`).
    pub available: u64,
    pub inodes_free: u64,
    /// `f_type`, the filesystem's magic number.
    pub fs_type: i64,
}

/// fstatfs(2).
pub fn fs_usage(fd: BorrowedFd<'_>) -> Result<FsUsage, SysError> {
    // SAFETY: an all-zero statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is a valid statfs for the call to fill.
    let r = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) };
    check(r as libc::c_long, || {
        format!("fstatfs(fd {})", fd.as_raw_fd())
    })?;
    let bs = st.f_bsize as u64;
    Ok(FsUsage {
        capacity: st.f_blocks * bs,
        used: st.f_blocks.saturating_sub(st.f_bfree) * bs,
        available: st.f_bavail * bs,
        inodes_free: st.f_ffree,
        fs_type: st.f_type,
    })
}
