//! seccomp(2): install a classic-BPF filter on the calling thread.

use super::{SysError, check};

/// One classic BPF instruction (`struct sock_filter`).
pub use libc::sock_filter;

#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const sock_filter,
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)`. The caller must already have
/// set no-new-privs (or hold CAP_SYS_ADMIN). An empty program is refused
/// with EINVAL, as the kernel would.
pub fn seccomp_set_mode_filter(prog: &[sock_filter]) -> Result<(), SysError> {
    let len = libc::c_ushort::try_from(prog.len()).unwrap_or(libc::c_ushort::MAX);
    let fprog = SockFprog {
        len,
        filter: prog.as_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel
    // copies the instructions and keeps no reference.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_ulong,
            &fprog as *const SockFprog,
        )
    };
    check(r, || {
        format!(
            "seccomp(SECCOMP_SET_MODE_FILTER, 0, <{} instructions>)",
            prog.len()
        )
    })
    .map(drop)
}
