//! Whether this process was started with rights its caller does not have:
//! a setuid or setgid binary, a setuid parent that did not drop, file
//! capabilities or a security module's transition (the kernel says so
//! with AT_SECURE). Allocation-free: the binaries ask before anything
//! else, before argv, the environment or any file.

use std::fmt;

/// A real id and the effective and saved ids it differs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMismatch {
    pub real: u32,
    pub effective: u32,
    pub saved: u32,
}

/// Why this process holds rights its caller may not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElevatedStart {
    /// The real uid differs from the effective or saved uid.
    Uid(IdMismatch),
    /// The real gid differs from the effective or saved gid.
    Gid(IdMismatch),
    /// The ids agree but the kernel set AT_SECURE: the exec gained
    /// capabilities (file capabilities) or an LSM asked for a secure exec.
    SecureExec,
}

impl fmt::Display for ElevatedStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, ids) = match self {
            ElevatedStart::Uid(ids) => ("uid", ids),
            ElevatedStart::Gid(ids) => ("gid", ids),
            ElevatedStart::SecureExec => {
                return f.write_str(
                    "AT_SECURE is set: file capabilities or a security module's transition",
                );
            }
        };
        write!(
            f,
            "real {kind} {}, effective {kind} {}, saved {kind} {}",
            ids.real, ids.effective, ids.saved
        )
    }
}

/// The first reason this process runs with rights its caller may not
/// have, or None for an ordinary start (the same ids throughout, no
/// AT_SECURE).
pub fn elevated_start() -> Option<ElevatedStart> {
    let (mut real, mut effective, mut saved) = (0, 0, 0);
    // SAFETY: three valid out-pointers to uid_t; getresuid cannot fail then.
    unsafe { libc::getresuid(&mut real, &mut effective, &mut saved) };
    if real != effective || real != saved {
        return Some(ElevatedStart::Uid(IdMismatch {
            real,
            effective,
            saved,
        }));
    }
    let (mut real, mut effective, mut saved) = (0, 0, 0);
    // SAFETY: three valid out-pointers to gid_t; getresgid cannot fail then.
    unsafe { libc::getresgid(&mut real, &mut effective, &mut saved) };
    if real != effective || real != saved {
        return Some(ElevatedStart::Gid(IdMismatch {
            real,
            effective,
            saved,
        }));
    }
    // SAFETY: getauxval reads the auxiliary vector the kernel gave this
    // process; an entry it lacks reads as 0.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return Some(ElevatedStart::SecureExec);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinary_start_is_not_elevated() {
        // The test binary is run by cargo as its caller: same ids, no
        // file capabilities.
        assert_eq!(elevated_start(), None);
    }

    #[test]
    fn mismatches_name_every_id() {
        let ids = IdMismatch {
            real: 65534,
            effective: 0,
            saved: 0,
        };
        assert_eq!(
            ElevatedStart::Uid(ids).to_string(),
            "real uid 65534, effective uid 0, saved uid 0"
        );
        assert_eq!(
            ElevatedStart::Gid(ids).to_string(),
            "real gid 65534, effective gid 0, saved gid 0"
        );
    }
}
