//! Where a registry's pull credentials are read from (issue 34): a
//! profile names the source for a registry host, never the value, for
//! `hutch image pull --profile FILE` and `hutch run --profile FILE
//! --pull missing` (`docs/images.md`). `--registry-credential` and
//! `--registry-auth` win over it.

use serde::{Deserialize, Serialize};

use super::Spec;
use super::secret::SecretSource;
use super::validate::SpecError;

/// `[[registry_credentials]]`: the credentials for one registry.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryCredential {
    /// The registry, `HOST[:PORT]` exactly as image references name it.
    pub registry: String,
    /// The user name; then the value is the password (or token) alone.
    /// Without it the value is `USER:PASSWORD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Where the value is on the host (`{ env = "VAR" }`, `{ file =
    /// "/abs" }`, `{ fd = N }`), read with a secret's caps when a pull
    /// needs it.
    pub from: SecretSource,
}

impl RegistryCredential {
    pub fn new(registry: impl Into<String>, from: SecretSource) -> RegistryCredential {
        RegistryCredential {
            registry: registry.into(),
            user: None,
            from,
        }
    }

    /// The user name (the value is then the password alone).
    pub fn user(mut self, user: impl Into<String>) -> RegistryCredential {
        self.user = Some(user.into());
        self
    }
}

/// The entries' shape: a `HOST[:PORT]` named once, a user without `:`,
/// a source as a secret's (a variable's name, an absolute file, an fd of
/// 3 or more not handed to the sandbox).
pub(super) fn validate(spec: &Spec) -> Result<(), SpecError> {
    for (i, c) in spec.registry_credentials.iter().enumerate() {
        let key = format!("registry_credentials[{i}]");
        let host_ok = !c.registry.is_empty()
            && c.registry.len() <= 255
            && c.registry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !host_ok {
            return Err(SpecError::new(
                format!("{key}.registry"),
                "a registry is HOST[:PORT] (letters, digits, '.', '-', ':', brackets)",
            ));
        }
        if spec.registry_credentials[..i]
            .iter()
            .any(|o| o.registry == c.registry)
        {
            return Err(SpecError::new(
                format!("{key}.registry"),
                format!("{} is named twice", c.registry),
            ));
        }
        if let Some(user) = &c.user
            && (user.is_empty() || user.contains(':') || user.chars().any(char::is_control))
        {
            return Err(SpecError::new(
                format!("{key}.user"),
                "a user name is not empty and has no ':' or control characters",
            ));
        }
        match &c.from {
            SecretSource::Env(var) => {
                if var.is_empty() || var.contains('=') || var.contains('\0') {
                    return Err(SpecError::new(
                        format!("{key}.from.env"),
                        "a variable's name: not empty, no '='",
                    ));
                }
            }
            SecretSource::File(path) => {
                if !path.is_absolute() {
                    return Err(SpecError::new(
                        format!("{key}.from.file"),
                        "must be an absolute path",
                    ));
                }
            }
            SecretSource::Fd(fd) => {
                if *fd < 3 || spec.inherit_fds.contains(fd) {
                    return Err(SpecError::new(
                        format!("{key}.from.fd"),
                        "must be 3 or more and not in inherit_fds",
                    ));
                }
            }
        }
    }
    Ok(())
}
