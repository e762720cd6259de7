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
    crate::confine::validate(&spec.security)?;
    crate::cgroup::validate_limits(&spec.limits)?;
    crate::net::validate_spec(spec)?;
    if let Some(image) = &spec.image {
        crate::image::spec::validate(image)?;
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
}
