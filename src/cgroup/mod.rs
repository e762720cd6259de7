//! cgroup v2 leaf per sandbox (limits, events, kill, removal).

pub mod probe;

use crate::spec::Limits;

/// Check the cgroup-backed limits of a Spec. Errors are (key under
/// `limits.`, message).
pub fn validate_limits(l: &Limits) -> Result<(), (String, String)> {
    let unsupported = |k: &str| {
        Err((
            k.to_string(),
            format!("{k} limits are not supported yet; remove it"),
        ))
    };
    if l.memory.is_some() {
        return unsupported("memory");
    }
    if l.pids.is_some() {
        return unsupported("pids");
    }
    if l.cpus.is_some() {
        return unsupported("cpus");
    }
    if !l.rlimits.is_empty() {
        return unsupported("rlimits");
    }
    Ok(())
}
