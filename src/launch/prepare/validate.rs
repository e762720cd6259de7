//! The one check every front end runs before a Spec is launched.
//!
//! `spec` validates only its own shape (paths, modes, namespaces, NUL
//! bytes); each concern that enforces a part of the Spec checks that part
//! itself: confinement (`security`), cgroup and rlimits (`limits`), the
//! egress policy (`network`), the image reference (`image`). This module
//! calls them in order, so `spec` depends on none of them. Every error is a [`SpecError`] naming the key
//! path; front ends translate key paths to their own vocabulary (the CLI
//! names the flag).

use crate::spec::{Spec, SpecError};

/// Check `spec` as a whole: its shape, then every concern's part of it.
/// Cheap: built-in seccomp profiles are only named here (a profile *file*
/// is read and compiled, so that its errors name the failing rule).
pub fn validate(spec: &Spec) -> Result<(), SpecError> {
    crate::spec::validate(spec)?;
    validate_concerns(spec)
}

/// [`validate`] for a warm sandbox's claim: `spec` is the sandbox's shape
/// (checked when it was made) with `command` applied, so only the command
/// part is looked through for NUL bytes.
pub(crate) fn validate_claimed(
    spec: &Spec,
    command: &super::claim::ClaimCommand,
) -> Result<(), SpecError> {
    crate::spec::validate_where_nul_may_be(spec, command)?;
    validate_concerns(spec)
}

/// Every concern's own check (confinement, limits, egress, secrets, image).
fn validate_concerns(spec: &Spec) -> Result<(), SpecError> {
    crate::confine::validate(&spec.security)?;
    crate::confine::userns_lock::validate(spec)?;
    crate::cgroup::validate_limits(&spec.limits)?;
    crate::net::validate_spec(spec)?;
    crate::secret::validate(spec)?;
    if let Some(image) = &spec.image {
        crate::image::spec::validate(image)?;
    }
    if matches!(spec.identity.id_range, Some(crate::spec::IdRange::Session { .. }))
        && spec.image.is_none()
    {
        return Err(SpecError::new(
            "identity.id_range",
            "a session's id range is for its image's commands; without an image use \"private\"",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Limit, Network, ProxyPolicy};

    /// Each concern's refusal reaches the caller with its full key path.
    #[test]
    fn every_concern_names_its_key_path() {
        let path = |edit: &dyn Fn(&mut Spec)| {
            let mut s = Spec::default();
            edit(&mut s);
            validate(&s).map_err(|e| e.path)
        };
        assert_eq!(path(&|_| {}), Ok(()));
        assert_eq!(
            path(&|s| s.security.seccomp = "nope".into()),
            Err("security.seccomp".into())
        );
        assert_eq!(
            path(&|s| s.security.landlock.min_abi = Some(0)),
            Err("security.landlock.min_abi".into())
        );
        assert_eq!(
            path(&|s| s.security.cap_add = vec!["CAP_NOPE".into()]),
            Err("security.cap_add".into())
        );
        assert_eq!(
            path(&|s| s.limits.pids = Some(Limit::Required(u64::MAX))),
            Err("limits.pids".into())
        );
        assert_eq!(
            path(&|s| {
                s.limits.rlimits.insert("nofiles".into(), 1);
            }),
            Err("limits.rlimits.nofiles".into())
        );
        assert_eq!(
            path(&|s| {
                s.network = Network::Proxy(ProxyPolicy {
                    allow: vec!["ok.example".into(), "*.10.0.0.1".into()],
                    ..ProxyPolicy::default()
                });
            }),
            Err("network.allow[1]".into())
        );
        // Shape errors come first, from `spec` itself.
        assert_eq!(
            path(&|s| s.cwd = Some("relative".into())),
            Err("cwd".into())
        );
    }

    /// A claim is looked through for NUL bytes in its command part only,
    /// and one there is refused at its key path in the whole Spec.
    #[test]
    fn a_claim_with_a_nul_is_refused_at_its_key_path() {
        let shape = crate::launch::claim::shape(&crate::spec::default_profile());
        let mut command = crate::launch::claim::ClaimCommand {
            command: vec!["true".into()],
            ..Default::default()
        };
        assert_eq!(validate_claimed(&command.apply(&shape), &command), Ok(()));
        command.env.insert("X".into(), "a\0b".into());
        let e = validate_claimed(&command.apply(&shape), &command).unwrap_err();
        assert_eq!(e.path, "env.X");
        command.env.clear();
        command.command.push("b\0".into());
        let e = validate_claimed(&command.apply(&shape), &command).unwrap_err();
        assert_eq!(e.path, "command[1]");
    }
}
