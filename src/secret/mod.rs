//! Secret values on the host side (issue 31, `docs/secrets.md`): read from
//! their [`crate::spec::SecretSource`] when a sandbox is launched, held by
//! the supervisor's proxy only, never printed. The sandbox sees a
//! [`Placeholder`] instead.
//!
//! Ground floor: imports nothing of the runtime but the Spec's schema.

use std::fmt;

use zeroize::Zeroizing;

use crate::spec::Secret;

/// A secret's value. Debug and Display print `<redacted>`; the bytes are
/// wiped when it is dropped.
#[derive(Clone)]
pub(crate) struct SecretValue(Zeroizing<Vec<u8>>);

impl SecretValue {
    pub(crate) fn new(bytes: Vec<u8>) -> SecretValue {
        SecretValue(Zeroizing::new(bytes))
    }

    /// The value, for the one place that puts it into a request.
    pub(crate) fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What the sandbox holds in a secret's place: random per sandbox,
/// worthless outside the proxy's rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placeholder(pub(crate) String);

/// A secret ready for the proxy: its rule (from the Spec), its placeholder
/// and its value.
#[derive(Debug, Clone)]
pub(crate) struct ArmedSecret {
    pub(crate) rule: Secret,
    pub(crate) placeholder: Placeholder,
    pub(crate) value: SecretValue,
}
