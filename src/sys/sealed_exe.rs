//! Running this program from a copy of its executable that nothing can
//! write (CVE-2019-5736): a process of ours that enters a container shows
//! the container `/proc/PID/exe`; if that were the host's binary, a
//! container process able to open it (an O_PATH fd kept until the binary
//! no longer runs, then reopened for writing) would replace the runtime
//! every later container starts with.
//!
//! The copy is, by preference, a detached bind mount of the executable
//! made read-only (`open_tree(OPEN_TREE_CLONE)` + `mount_setattr(RDONLY)`,
//! nothing mounted anywhere, no memory): a write open of `/proc/PID/exe`
//! fails with EROFS, and only CAP_SYS_ADMIN over the host's user namespace
//! could make it writable. Without CAP_SYS_ADMIN (a rootless runtime) it
//! is a memfd copy sealed against writes (`F_SEAL_WRITE`), as runc does.

use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use super::{Errno, SysError, ret};

/// Set in the environment of the re-executed program: it must find its
/// executable sealed, or it fails (never a loop of re-execs).
pub const SEALED_ENV: &str = "_HUTCH_SEALED_EXE";

/// Whether `exe` (an fd of this process's executable) is on a read-only
/// mount or a memfd sealed against writes.
fn is_sealed(exe: BorrowedFd<'_>) -> bool {
    // SAFETY: F_GET_SEALS takes no argument.
    let seals = unsafe { libc::fcntl(exe.as_raw_fd(), libc::F_GET_SEALS) };
    if seals >= 0 && seals & libc::F_SEAL_WRITE != 0 {
        return true;
    }
    rustix::fs::fstatvfs(exe)
        .is_ok_and(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

/// Whether this process runs from a sealed copy of its executable.
pub fn running_sealed() -> bool {
    std::fs::File::open("/proc/self/exe").is_ok_and(|f| is_sealed(f.as_fd()))
}

/// A read-only detached bind mount of `/proc/self/exe` (CAP_SYS_ADMIN).
fn read_only_clone() -> Result<OwnedFd, Errno> {
    let tree = super::raw::open_tree_clone(None, c"/proc/self/exe", 0)?;
    super::raw::mount_setattr(tree.as_fd(), false, super::MOUNT_ATTR_RDONLY, 0, None)?;
    Ok(tree)
}

/// A memfd holding a copy of `/proc/self/exe`, sealed against any change.
fn sealed_memfd() -> Result<OwnedFd, SysError> {
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: a valid C string and plain flags.
    let fd =
        ret(unsafe { libc::memfd_create(c"hutch-sealed-exe".as_ptr(), flags) } as libc::c_long)
            .map_err(|e| SysError::new("memfd_create(MFD_ALLOW_SEALING)", e))?;
    // SAFETY: memfd_create returned a new fd that we now own.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    let mut src = std::fs::File::open("/proc/self/exe")
        .map_err(|e| super::io_err("open(\"/proc/self/exe\")".into(), e))?;
    let mut dst = std::fs::File::from(memfd);
    std::io::copy(&mut src, &mut dst)
        .map_err(|e| super::io_err("copying /proc/self/exe into a memfd".into(), e))?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: F_ADD_SEALS takes an int.
    ret(unsafe { libc::fcntl(dst.as_raw_fd(), libc::F_ADD_SEALS, seals) } as libc::c_long)
        .map_err(|e| SysError::new("fcntl(F_ADD_SEALS)", e))?;
    Ok(dst.into())
}

/// Make sure this program runs from a sealed copy of its executable:
/// returns at once when it does, otherwise re-executes it from one with
/// `args` (argv without argv[0]) and the same environment, and returns
/// only on failure. The caller must be single-threaded (it changes the
/// environment).
pub fn ensure_sealed(args: &[OsString]) -> Result<(), SysError> {
    if running_sealed() {
        if std::env::var_os(SEALED_ENV).is_some() {
            // SAFETY: the caller is single-threaded: no other thread reads
            // the environment meanwhile.
            unsafe { std::env::remove_var(SEALED_ENV) };
        }
        return Ok(());
    }
    if std::env::var_os(SEALED_ENV).is_some() {
        return Err(SysError::new(
            "re-executed from a sealed copy, /proc/self/exe is still writable",
            Errno::EPERM,
        ));
    }
    let exe = match read_only_clone() {
        Ok(fd) => fd,
        Err(_) => sealed_memfd()?,
    };
    let cstring = |b: &[u8]| {
        CString::new(b).map_err(|_| SysError::new("argv with a NUL byte", Errno::EINVAL))
    };
    let argv0 = std::env::args_os().next().unwrap_or_else(|| "hutch".into());
    let mut argv = vec![cstring(argv0.as_bytes())?];
    for a in args {
        argv.push(cstring(a.as_bytes())?);
    }
    let mut envp: Vec<CString> = Vec::new();
    for (k, v) in std::env::vars_os() {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(cstring(&kv)?);
    }
    envp.push(cstring(format!("{SEALED_ENV}=1").as_bytes())?);
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: argv and envp are NULL-terminated arrays of C strings that
    // outlive the call; "" with AT_EMPTY_PATH executes the fd itself.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            exe.as_raw_fd(),
            c"".as_ptr(),
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    Err(SysError::new(
        "execveat(sealed copy of /proc/self/exe, AT_EMPTY_PATH)",
        Errno::last(),
    ))
}
