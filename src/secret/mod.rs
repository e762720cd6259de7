//! Secret values on the host side (issue 31, `docs/secrets.md`): read from
//! their [`crate::spec::SecretSource`] when a sandbox is launched, held by
//! the supervisor's proxy only, never printed. The sandbox sees a
//! [`Placeholder`] instead.
//!
//! One file per step: [`validate`] (the Spec's secrets, gateways and
//! intercepted hosts, before anything starts), [`read`] (a value from its
//! source, at launch), [`placeholder`] (what the sandbox holds instead),
//! and here [`arm`] and [`sandbox_env`], which the launcher calls.

mod error;
mod placeholder;
mod read;
mod validate;

use std::fmt;

use zeroize::Zeroizing;

use crate::spec::{Network, Secret, Spec};

pub use error::SecretError;
pub(crate) use validate::validate;

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

/// Read every secret of `spec` from its source and give each a placeholder
/// of its own. Called by the supervisor before the sandbox is made (its
/// errors are setup failures: exit 125, nothing started).
pub(crate) fn arm(spec: &Spec) -> Result<Vec<ArmedSecret>, SecretError> {
    spec.secrets
        .iter()
        .map(|rule| {
            let value = read::read_value(rule, read::FdOwner::Hutch)?;
            let placeholder =
                placeholder::new_placeholder(&rule.name).map_err(|err| SecretError::Random {
                    name: rule.name.clone(),
                    err,
                })?;
            Ok(ArmedSecret {
                rule: rule.clone(),
                placeholder,
                value,
            })
        })
        .collect()
}

/// Read a value from `from` for hutch's own use on the host (the registry
/// credential of an image pull), with a secret's caps and checks; `name`
/// is what an error shows. An fd source is hutch's: read, then closed.
pub(crate) fn read_for_host(
    name: &str,
    from: &crate::spec::SecretSource,
) -> Result<SecretValue, SecretError> {
    let rule = Secret {
        name: name.to_string(),
        env: None,
        from: from.clone(),
        hosts: Vec::new(),
        methods: Vec::new(),
        paths: Vec::new(),
        inject: Default::default(),
    };
    read::read_value(&rule, read::FdOwner::Hutch)
}

/// The Spec a helper (`hutch __supervise`) is given, and the fds it gets:
/// each secret is read here, in the caller (its environment and fds are
/// not the helper's), into a memfd passed at `first_fd + i`, and its
/// source becomes that fd. The value crosses as an fd, never in the Spec.
pub(crate) fn handover(
    spec: &Spec,
    first_fd: i32,
) -> Result<(Spec, Vec<(std::os::fd::OwnedFd, i32)>), SecretError> {
    let mut out = spec.clone();
    let mut fds = Vec::with_capacity(spec.secrets.len());
    for (i, rule) in out.secrets.iter_mut().enumerate() {
        let value = read::read_value(rule, read::FdOwner::Caller)?;
        let fd = first_fd + i as i32;
        let memfd = memfd_holding(&value).map_err(|err| SecretError::Read {
            name: rule.name.clone(),
            what: "a memfd for the supervisor".into(),
            err,
        })?;
        rule.from = crate::spec::SecretSource::Fd(fd);
        fds.push((memfd, fd));
    }
    Ok((out, fds))
}

/// A memfd holding `value`, at offset 0.
fn memfd_holding(value: &SecretValue) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::{Seek, Write};
    let fd =
        nix::sys::memfd::memfd_create(c"hutch-secret", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut f = std::fs::File::from(fd);
    f.write_all(value.expose())?;
    f.rewind()?;
    Ok(f.into())
}

/// The URL of the gateway `name` inside the sandbox (the proxy's TCP door).
pub(crate) fn gateway_url(name: &str) -> String {
    format!("http://127.0.0.1:{}/{name}", crate::net::PROXY_TCP_PORT)
}

/// The variables hutch places in the sandbox for its secrets (each
/// secret's `env` = its placeholder) and gateways (each of a gateway's
/// `env` = its URL). Validation made sure none collides with the Spec's
/// own environment or another of these.
pub(crate) fn sandbox_env(spec: &Spec, armed: &[ArmedSecret]) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if let Network::Proxy(p) = &spec.network {
        for g in &p.gateways {
            for var in &g.env {
                env.push((var.clone(), gateway_url(&g.name)));
            }
        }
    }
    for a in armed {
        if let Some(var) = &a.rule.env {
            env.push((var.clone(), a.placeholder.0.clone()));
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arming reads the value, and the sandbox's variables hold the
    /// placeholder and the gateway's URL, never the value.
    #[test]
    fn arming_places_placeholders_and_gateway_urls_not_values() {
        let dir = std::env::temp_dir().join(format!("hutch-arm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key");
        std::fs::write(&key, "sk-real-value-42\n").unwrap();
        let spec = crate::spec::parse_toml(&format!(
            r#"
command = ["true"]
[network]
mode = "proxy"
allow = ["api.anthropic.com"]
[[network.gateways]]
name = "anthropic"
upstream = "https://api.anthropic.com"
env = ["ANTHROPIC_BASE_URL"]
[[secrets]]
name = "anthropic"
env = "ANTHROPIC_API_KEY"
from = {{ file = "{}" }}
hosts = ["api.anthropic.com"]
"#,
            key.display()
        ))
        .unwrap();
        validate(&spec).unwrap();
        let armed = arm(&spec).unwrap();
        assert_eq!(armed[0].value.expose(), b"sk-real-value-42");
        assert_eq!(format!("{:?}", armed[0].value), "<redacted>");
        assert!(!format!("{armed:?}").contains("sk-real"));
        let env = sandbox_env(&spec, &armed);
        assert!(env.contains(&(
            "ANTHROPIC_BASE_URL".into(),
            "http://127.0.0.1:3128/anthropic".into()
        )));
        let ph = &env
            .iter()
            .find(|(k, _)| k == "ANTHROPIC_API_KEY")
            .unwrap()
            .1;
        assert_eq!(ph, &armed[0].placeholder.0);
        assert!(!env.iter().any(|(_, v)| v.contains("sk-real")));
        // A second launch gets another placeholder.
        assert_ne!(arm(&spec).unwrap()[0].placeholder, armed[0].placeholder);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
