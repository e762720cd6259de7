//! Network: loopback inside the sandbox, the egress proxy doors and policy.

pub mod loopback;

use crate::spec::{Spec, SpecError};

/// Check a proxy-mode Spec.
pub fn validate_spec(_spec: &Spec) -> Result<(), SpecError> {
    Err(SpecError::new(
        "network",
        "network mode \"proxy\" is not supported yet",
    ))
}
