//! Landlock syscalls: probe the ABI, build a ruleset, restrict self.
//!
//! Raw wrappers rather than the `landlock` crate so that hutch decides (and
//! reports) exactly which access rights each ABI enforces. [`raw`] holds
//! the allocation-free versions.

// The described wrappers are the test-only enforcement path
// (`LandlockPlan::enforce`); the launcher uses [`raw`].
#[cfg(feature = "internals")]
use std::os::fd::{BorrowedFd, OwnedFd};

#[cfg(feature = "internals")]
use super::SysError;

/// The allocation-free Landlock calls.
pub mod raw {
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

    use super::super::{Errno, ret};

    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    const LANDLOCK_RULE_NET_PORT: libc::c_int = 2;

    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
        handled_access_net: u64,
        scoped: u64,
    }

    #[repr(C, packed)]
    struct PathBeneathAttr {
        allowed_access: u64,
        parent_fd: i32,
    }

    #[repr(C)]
    struct NetPortAttr {
        allowed_access: u64,
        port: u64,
    }

    /// landlock_create_ruleset(NULL, 0, VERSION): the ABI version (ENOSYS:
    /// not built in; EOPNOTSUPP: disabled at boot). No side effects.
    pub fn landlock_abi() -> Result<u32, Errno> {
        // SAFETY: a NULL attribute with size 0 and the VERSION flag only
        // returns a number.
        ret(unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        })
        .map(|v| v as u32)
    }

    /// landlock_create_ruleset with the given handled rights. The attribute
    /// size grows only as far as the fields in use, so older kernels accept
    /// it.
    pub fn landlock_create_ruleset(fs: u64, net: u64, scoped: u64) -> Result<OwnedFd, Errno> {
        let attr = RulesetAttr {
            handled_access_fs: fs,
            handled_access_net: net,
            scoped,
        };
        let size: usize = if scoped != 0 {
            24
        } else if net != 0 {
            16
        } else {
            8
        };
        // SAFETY: `attr` is a valid, initialised struct of at least `size`
        // bytes.
        let fd = ret(unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0 as libc::c_uint,
            )
        })?;
        // SAFETY: the kernel returned a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// Allow `access` beneath the file or directory `parent`.
    pub fn landlock_add_path_rule(
        ruleset: BorrowedFd<'_>,
        parent: BorrowedFd<'_>,
        access: u64,
    ) -> Result<(), Errno> {
        let attr = PathBeneathAttr {
            allowed_access: access,
            parent_fd: parent.as_raw_fd(),
        };
        // SAFETY: `attr` is a valid packed struct; both fds are open.
        ret(unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                LANDLOCK_RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0 as libc::c_uint,
            )
        })
        .map(drop)
    }

    /// Allow `access` (bind/connect) on TCP `port`.
    pub fn landlock_add_net_rule(
        ruleset: BorrowedFd<'_>,
        port: u16,
        access: u64,
    ) -> Result<(), Errno> {
        let attr = NetPortAttr {
            allowed_access: access,
            port: u64::from(port),
        };
        // SAFETY: `attr` is a valid struct; the ruleset fd is open.
        ret(unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                LANDLOCK_RULE_NET_PORT,
                &attr as *const NetPortAttr,
                0 as libc::c_uint,
            )
        })
        .map(drop)
    }

    /// Enforce the ruleset on the calling thread (needs no-new-privs).
    pub fn landlock_restrict_self(ruleset: BorrowedFd<'_>) -> Result<(), Errno> {
        // SAFETY: integer arguments; the fd is open.
        ret(unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                ruleset.as_raw_fd(),
                0 as libc::c_uint,
            )
        })
        .map(drop)
    }
}

/// The kernel's Landlock ABI version, 0 when Landlock is unsupported or
/// disabled (ENOSYS / EOPNOTSUPP).
pub fn landlock_abi_version() -> u32 {
    raw::landlock_abi().unwrap_or(0)
}

#[cfg(feature = "internals")]
/// landlock_create_ruleset with the given handled rights.
pub fn landlock_create_ruleset(fs: u64, net: u64, scoped: u64) -> Result<OwnedFd, SysError> {
    raw::landlock_create_ruleset(fs, net, scoped).map_err(|e| {
        SysError::new(
            format!("landlock_create_ruleset(fs={fs:#x}, net={net:#x}, scoped={scoped:#x})"),
            e,
        )
    })
}

#[cfg(feature = "internals")]
/// Allow `access` beneath the file or directory `parent`.
pub fn landlock_add_path_rule(
    ruleset: BorrowedFd<'_>,
    parent: BorrowedFd<'_>,
    access: u64,
    what: &str,
) -> Result<(), SysError> {
    raw::landlock_add_path_rule(ruleset, parent, access).map_err(|e| {
        SysError::new(
            format!("landlock_add_rule(PATH_BENEATH, {what:?}, access={access:#x})"),
            e,
        )
    })
}

#[cfg(feature = "internals")]
/// Allow `access` (bind/connect) on TCP `port`.
pub fn landlock_add_net_rule(
    ruleset: BorrowedFd<'_>,
    port: u16,
    access: u64,
) -> Result<(), SysError> {
    raw::landlock_add_net_rule(ruleset, port, access).map_err(|e| {
        SysError::new(
            format!("landlock_add_rule(NET_PORT, {port}, access={access:#x})"),
            e,
        )
    })
}

#[cfg(feature = "internals")]
/// Enforce the ruleset on the calling thread (needs no-new-privs).
pub fn landlock_restrict_self(ruleset: BorrowedFd<'_>) -> Result<(), SysError> {
    raw::landlock_restrict_self(ruleset).map_err(|e| SysError::new("landlock_restrict_self(0)", e))
}
