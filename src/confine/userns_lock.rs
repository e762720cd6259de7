//! The capability that would undo hutch's lock on nested user namespaces.
//!
//! In a user namespace of the sandbox's own, hutch init writes
//! `user.max_user_namespaces = 0` there (`launch::child`, step 5). The
//! kernel lets a process write that sysctl through any procfs when it has
//! CAP_SYS_RESOURCE over the namespace the sysctl belongs to: a workload
//! holding it there could raise the limit again and create nested user
//! namespaces (read-only `/proc/sys` mounts do not stop a workload that
//! also holds CAP_SYS_ADMIN, or a bind of the host's `/proc`). So it is
//! never granted there, in any set: the bounding set counts too (a setuid
//! program would regain it).

use crate::spec::{Spec, SpecError};

use super::caps;

/// Refuse a Spec whose workload would hold CAP_SYS_RESOURCE in the
/// sandbox's own user namespace (where the lock is written).
pub(crate) fn validate(spec: &Spec) -> Result<(), SpecError> {
    if !spec.namespaces.user {
        return Ok(());
    }
    let sys_resource = ::caps::Capability::CAP_SYS_RESOURCE;
    let why = "CAP_SYS_RESOURCE in the sandbox's own user namespace would let the workload raise \
               user.max_user_namespaces and undo hutch's lock on nested user namespaces; leave it out \
               (inside a user namespace it gives no power over the host's resources)";
    let sec = &spec.security;
    // Unparsable lists are refused by `confine::validate` with their key.
    if caps::parse_cap_list(&sec.cap_add).is_ok_and(|s| s.contains(&sys_resource)) {
        return Err(SpecError::new("security.cap_add", why));
    }
    if let Some(sets) = &sec.capabilities {
        for (name, list) in caps::sets(sets) {
            if caps::parse_cap_list(list).is_ok_and(|s| s.contains(&sys_resource)) {
                return Err(SpecError::new(format!("security.capabilities.{name}"), why));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sys_resource_is_refused_only_in_an_own_user_namespace() {
        let mut s = Spec::default();
        s.security.cap_add = vec!["ALL".into()];
        s.namespaces.user = false;
        assert!(validate(&s).is_ok(), "no lock without a user namespace");
        s.namespaces.user = true;
        assert_eq!(validate(&s).unwrap_err().path, "security.cap_add");
        s.security.cap_add = vec!["CAP_NET_RAW".into()];
        assert!(validate(&s).is_ok());
        s.security.cap_add = Vec::new();
        s.security.capabilities = Some(crate::spec::CapabilitySets {
            bounding: vec!["CAP_SYS_RESOURCE".into()],
            ..Default::default()
        });
        assert_eq!(
            validate(&s).unwrap_err().path,
            "security.capabilities.bounding"
        );
    }
}
