//! cgroupfs helpers that std does not offer: extended attributes (systemd's
//! delegation markers) and the filesystem magic of a directory.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{Errno, SysError};

fn cpath(path: &Path) -> Result<CString, SysError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SysError::new(format!("path {path:?}"), Errno::EINVAL))
}

/// Whether the extended attribute `name` exists on `path` (value ignored).
/// Absent attributes and filesystems without xattrs give `Ok(false)`.
pub fn has_xattr(path: &Path, name: &str) -> Result<bool, SysError> {
    let p = cpath(path)?;
    let n = CString::new(name).map_err(|_| SysError::new("xattr name", Errno::EINVAL))?;
    // SAFETY: both strings are NUL-terminated; a null buffer of size 0 only
    // asks for the value's length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
    if r >= 0 {
        return Ok(true);
    }
    match Errno::last() {
        Errno::ENODATA | Errno::ENOTSUP => Ok(false),
        e => Err(SysError::new(format!("getxattr({path:?}, {name:?})"), e)),
    }
}
