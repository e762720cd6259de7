//! seccomp(2): install a classic-BPF filter on the calling thread, and ask
//! which return actions the kernel has.

use super::SysError;

/// One classic BPF instruction (`struct sock_filter`).
pub use libc::sock_filter;

/// Return a listener fd for SECCOMP_RET_USER_NOTIF.
pub const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_uint = 1 << 3;

/// The allocation-free seccomp calls.
pub mod raw {
    use std::os::fd::{FromRawFd, OwnedFd};

    use super::super::{Errno, ret};
    use super::{SECCOMP_FILTER_FLAG_NEW_LISTENER, sock_filter};

    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;

    #[repr(C)]
    struct SockFprog {
        len: libc::c_ushort,
        filter: *const sock_filter,
    }

    /// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)`. The caller must
    /// already have set no-new-privs (or hold CAP_SYS_ADMIN). An empty
    /// program is refused with EINVAL, as the kernel would. With
    /// SECCOMP_FILTER_FLAG_NEW_LISTENER, returns the listener fd.
    pub fn seccomp_set_mode_filter(
        prog: &[sock_filter],
        flags: libc::c_uint,
    ) -> Result<Option<OwnedFd>, Errno> {
        let len = libc::c_ushort::try_from(prog.len()).unwrap_or(libc::c_ushort::MAX);
        let fprog = SockFprog {
            len,
            filter: prog.as_ptr(),
        };
        // SAFETY: `fprog` points at `prog`, which outlives the call; the
        // kernel copies the instructions and keeps no reference.
        let r = ret(unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags as libc::c_ulong,
                &fprog as *const SockFprog,
            )
        })?;
        // SAFETY: with NEW_LISTENER the kernel returned a new fd we own.
        Ok((flags & SECCOMP_FILTER_FLAG_NEW_LISTENER != 0)
            .then(|| unsafe { OwnedFd::from_raw_fd(r as i32) }))
    }

    /// `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog)`: the older
    /// entry, which bubblewrap uses for its `--seccomp` programs, so that
    /// a first program that allows prctl but not seccomp(2) still lets
    /// the next one be installed. Same preconditions as
    /// [`seccomp_set_mode_filter`].
    pub fn prctl_set_seccomp_filter(prog: &[sock_filter]) -> Result<(), Errno> {
        let len = libc::c_ushort::try_from(prog.len()).unwrap_or(libc::c_ushort::MAX);
        let fprog = SockFprog {
            len,
            filter: prog.as_ptr(),
        };
        // SAFETY: `fprog` points at `prog`, which outlives the call; the
        // kernel copies the instructions and keeps no reference.
        ret(unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &fprog as *const SockFprog,
            )
        } as libc::c_long)
        .map(drop)
    }

    /// seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action): Ok when supported.
    /// Has no side effects.
    pub fn seccomp_action_avail(action: u32) -> Result<(), Errno> {
        // SAFETY: action is a valid u32 for the call's duration.
        ret(unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_GET_ACTION_AVAIL,
                0,
                &action as *const u32,
            )
        })
        .map(drop)
    }
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)`. The caller must already have
/// set no-new-privs (or hold CAP_SYS_ADMIN). An empty program is refused
/// with EINVAL, as the kernel would.
pub fn seccomp_set_mode_filter(prog: &[sock_filter]) -> Result<(), SysError> {
    raw::seccomp_set_mode_filter(prog, 0)
        .map(drop)
        .map_err(|e| {
            SysError::new(
                format!(
                    "seccomp(SECCOMP_SET_MODE_FILTER, 0, <{} instructions>)",
                    prog.len()
                ),
                e,
            )
        })
}
