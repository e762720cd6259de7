//! Capability syscalls (capset, bounding set, ambient set).

use super::{SysError, check};

/// Highest capability number the kernel knows.
pub fn cap_last_cap() -> u32 {
    super::read_proc("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Drop one capability from the bounding set. EINVAL (unknown cap) is fine.
pub fn prctl_capbset_drop(cap: u32) -> Result<(), SysError> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    if r < 0 && nix::errno::Errno::last() != nix::errno::Errno::EINVAL {
        return Err(SysError::last(format!("prctl(PR_CAPBSET_DROP, {cap})")));
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Set the effective, permitted and inheritable sets as 64-bit masks.
pub fn capset(effective: u64, permitted: u64, inheritable: u64) -> Result<(), SysError> {
    const V3: u32 = 0x2008_0522;
    let mut hdr = CapHeader {
        version: V3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: effective as u32,
            permitted: permitted as u32,
            inheritable: inheritable as u32,
        },
        CapData {
            effective: (effective >> 32) as u32,
            permitted: (permitted >> 32) as u32,
            inheritable: (inheritable >> 32) as u32,
        },
    ];
    // SAFETY: header and two data structs as the v3 ABI requires; both live
    // for the duration of the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) };
    check(r, || {
        format!("capset(eff={effective:#x}, prm={permitted:#x}, inh={inheritable:#x})")
    })
    .map(drop)
}

/// Clear the ambient set.
pub fn ambient_clear() -> Result<(), SysError> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    check(r as libc::c_long, || {
        "prctl(PR_CAP_AMBIENT_CLEAR_ALL)".into()
    })
    .map(drop)
}

/// Raise one capability in the ambient set.
pub fn ambient_raise(cap: u32) -> Result<(), SysError> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            cap as libc::c_ulong,
            0,
            0,
        )
    };
    check(r as libc::c_long, || {
        format!("prctl(PR_CAP_AMBIENT_RAISE, {cap})")
    })
    .map(drop)
}
