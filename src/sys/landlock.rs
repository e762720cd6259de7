//! Landlock: the ABI version probe.
//!
//! Rulesets are built and enforced through the `landlock` crate
//! (`src/confine/landlock.rs`, docs/decisions/0003-landlock-crate.md); the
//! version is read here because hutch reports the kernel's own number,
//! which the crate caps at the newest ABI it knows.

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// The kernel's Landlock ABI version, 0 when Landlock is unsupported or
/// disabled (ENOSYS / EOPNOTSUPP).
pub fn landlock_abi_version() -> u32 {
    // SAFETY: a NULL attribute with size 0 and the VERSION flag only
    // returns a number.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(r).unwrap_or(0)
}
