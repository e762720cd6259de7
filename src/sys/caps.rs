//! Capability syscalls (capset, bounding set, ambient set).
//!
//! [`raw`] holds the allocation-free versions; the functions of this
//! module describe a failure as the call that failed.


/// The allocation-free capability syscalls.
pub mod raw {
    use super::super::{Errno, ret};

    /// Drop one capability from the bounding set. EINVAL (a capability the
    /// kernel does not know) is fine.
    pub fn capbset_drop(cap: u32) -> Result<(), Errno> {
        // SAFETY: prctl with integer arguments only.
        match ret(
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) }
                as libc::c_long,
        ) {
            Ok(_) | Err(Errno::EINVAL) => Ok(()),
            Err(e) => Err(e),
        }
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
    pub fn capset(effective: u64, permitted: u64, inheritable: u64) -> Result<(), Errno> {
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
        // SAFETY: header and two data structs as the v3 ABI requires; both
        // live for the duration of the call.
        ret(unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) })
            .map(drop)
    }

    /// This thread's effective set as a 64-bit mask.
    pub fn effective() -> Result<u64, Errno> {
        let data = capget()?;
        Ok(u64::from(data[0].effective) | u64::from(data[1].effective) << 32)
    }

    /// This thread's permitted set as a 64-bit mask.
    pub fn permitted() -> Result<u64, Errno> {
        let data = capget()?;
        Ok(u64::from(data[0].permitted) | u64::from(data[1].permitted) << 32)
    }

    /// This thread's capability sets (the v3 ABI's two words).
    fn capget() -> Result<[CapData; 2], Errno> {
        const V3: u32 = 0x2008_0522;
        let mut hdr = CapHeader {
            version: V3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        // SAFETY: header and room for the two data structs the v3 ABI
        // writes; both live for the duration of the call.
        ret(unsafe {
            libc::syscall(
                libc::SYS_capget,
                &mut hdr as *mut CapHeader,
                data.as_mut_ptr(),
            )
        })?;
        Ok(data)
    }

    /// Clear the ambient set.
    pub fn ambient_clear() -> Result<(), Errno> {
        // SAFETY: prctl with integer arguments only.
        ret(unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            )
        } as libc::c_long)
        .map(drop)
    }

    /// Raise one capability in the ambient set.
    pub fn ambient_raise(cap: u32) -> Result<(), Errno> {
        // SAFETY: prctl with integer arguments only.
        ret(unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                cap as libc::c_ulong,
                0,
                0,
            )
        } as libc::c_long)
        .map(drop)
    }
}

/// Highest capability number the kernel knows.
pub fn cap_last_cap() -> u32 {
    super::read_proc("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}
