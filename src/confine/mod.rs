//! Confinement of the workload: capabilities, seccomp, Landlock, rlimits.

pub mod caps;

use crate::spec::Security;

/// Check the security section of a Spec. Errors are (key under `security.`,
/// message).
pub fn validate(sec: &Security) -> Result<(), (String, String)> {
    if sec.seccomp != "unconfined" {
        return Err((
            "seccomp".into(),
            format!(
                "seccomp profile {:?} is not supported yet; use \"unconfined\"",
                sec.seccomp
            ),
        ));
    }
    if sec.landlock.enabled || sec.landlock.min_abi.is_some() {
        return Err((
            "landlock".into(),
            "Landlock is not supported yet; set enabled = false".into(),
        ));
    }
    if !sec.no_new_privs {
        return Err((
            "no_new_privs".into(),
            "no_new_privs = false is not supported".into(),
        ));
    }
    caps::parse_cap_list(&sec.cap_add).map_err(|m| ("cap_add".to_string(), m))?;
    Ok(())
}
