//! Where a registry's pull credentials are read from (issue 34): a
//! profile names the source for a registry host, never the value, for
//! `hutch image pull --profile FILE` and `hutch run --profile FILE
//! --pull missing` (`docs/images.md`). `--registry-credential` and
//! `--registry-auth` win over it.

use serde::{Deserialize, Serialize};

use super::Spec;
use super::secret::SecretSource;

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

/// What is wrong with the entries, if anything: the entry's index, the
/// field (`registry`, `user`, `from.env`, ...) and why. Their shape: a
/// `HOST[:PORT]` named once, a user without `:`, a source as a secret's
/// (a variable's name, an absolute file, an fd of 3 or more not handed
/// to the sandbox).
pub(super) fn problem(spec: &Spec) -> Option<(usize, &'static str, String)> {
    for (i, c) in spec.registry_credentials.iter().enumerate() {
        let host_ok = !c.registry.is_empty()
            && c.registry.len() <= 255
            && c.registry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !host_ok {
            return Some((
                i,
                "registry",
                "a registry is HOST[:PORT] (letters, digits, '.', '-', ':', brackets)".into(),
            ));
        }
        if spec.registry_credentials[..i]
            .iter()
            .any(|o| o.registry == c.registry)
        {
            return Some((i, "registry", format!("{} is named twice", c.registry)));
        }
        if let Some(user) = &c.user
            && (user.is_empty() || user.contains(':') || user.chars().any(char::is_control))
        {
            return Some((
                i,
                "user",
                "a user name is not empty and has no ':' or control characters".into(),
            ));
        }
        match &c.from {
            SecretSource::Env(var) => {
                if var.is_empty() || var.contains('=') || var.contains('\0') {
                    return Some((i, "from.env", "a variable's name: not empty, no '='".into()));
                }
            }
            SecretSource::File(path) => {
                if !path.is_absolute() {
                    return Some((i, "from.file", "must be an absolute path".into()));
                }
            }
            SecretSource::Fd(fd) => {
                if *fd < 3 || spec.inherit_fds.contains(fd) {
                    return Some((
                        i,
                        "from.fd",
                        "must be 3 or more and not in inherit_fds".into(),
                    ));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::spec::{SecretSource, parse_json, parse_toml};

    #[test]
    fn a_profile_names_a_source_per_registry_never_a_value() {
        let s = parse_toml(
            "[[registry_credentials]]\nregistry = \"reg.example:5000\"\nuser = \"bot\"\n\
             from = { env = \"REG_TOKEN\" }\n",
        )
        .unwrap();
        assert_eq!(
            s.registry_credentials,
            vec![
                super::RegistryCredential::new(
                    "reg.example:5000",
                    SecretSource::Env("REG_TOKEN".into())
                )
                .user("bot")
            ]
        );
        let bad = [
            (
                r#"{"registry_credentials": [{"registry": "r", "password": "hunter2", "from": {"env": "A"}}]}"#,
                "registry_credentials[0]",
            ),
            (
                r#"{"registry_credentials": [{"registry": "r/x", "from": {"env": "A"}}]}"#,
                "registry_credentials[0].registry",
            ),
            (
                r#"{"registry_credentials": [{"registry": "r", "from": {"env": "A"}}, {"registry": "r", "from": {"env": "B"}}]}"#,
                "registry_credentials[1].registry",
            ),
            (
                r#"{"registry_credentials": [{"registry": "r", "user": "a:b", "from": {"env": "A"}}]}"#,
                "registry_credentials[0].user",
            ),
            (
                r#"{"registry_credentials": [{"registry": "r", "from": {"file": "rel"}}]}"#,
                "registry_credentials[0].from.file",
            ),
            (
                r#"{"registry_credentials": [{"registry": "r", "from": {"fd": 1}}]}"#,
                "registry_credentials[0].from.fd",
            ),
        ];
        for (text, key) in bad {
            let e = parse_json(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
            assert!(!e.contains("hunter2"), "{text}: {e}");
        }
    }
}
