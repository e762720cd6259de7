//! Policy files: named egress profiles in TOML.
//!
//! ```toml
//! default = "claude_code"          # optional
//! [profiles.claude_code]
//! allow = ["api.anthropic.com", "**.pypi.org", "files.pythonhosted.org"]
//! deny = []
//! [profiles.claude_code.limits]
//! max_tunnels = 64
//! [[profiles.claude_code.gateways]]   # a backend's gateway and its key
//! name = "anthropic"
//! upstream = "https://api.anthropic.com"
//! env = ["ANTHROPIC_BASE_URL"]
//! [[profiles.claude_code.secrets]]    # a source, never a value (docs/secrets.md)
//! name = "anthropic"
//! env = "ANTHROPIC_API_KEY"
//! from = { env = "ANTHROPIC_KEY" }
//! hosts = ["api.anthropic.com"]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Deserializer};

use super::error::NetError;
use super::policy::Policy;
use crate::spec::{ProxyPolicy, Secret};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

/// One profile: the proxy's policy and the secrets that go with it (a
/// per-backend profile holds the backend's key's source with its gateway).
#[derive(Debug, Clone)]
struct Profile {
    policy: ProxyPolicy,
    secrets: Vec<Secret>,
}

impl<'de> Deserialize<'de> for Profile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Profile, D::Error> {
        use serde::de::Error;
        let mut table = toml::Table::deserialize(d)?;
        let inner = |key: &str, e: serde_path_to_error::Error<toml::de::Error>| {
            let path = e.path().to_string();
            let sep = if path == "." {
                String::new()
            } else {
                format!("{path}: ")
            };
            D::Error::custom(format!("{key}{sep}{}", one_line(&e.inner().to_string())))
        };
        let secrets = match table.remove("secrets") {
            Some(v) => serde_path_to_error::deserialize(v).map_err(|e| inner("secrets", e))?,
            None => Vec::new(),
        };
        let policy = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| inner("", e))?;
        Ok(Profile { policy, secrets })
    }
}

/// Load one profile of a policy file. Without `profile`, the file's
/// `default` is used, or its only profile. The profile is checked (every
/// rule compiles) before it is returned. A profile with secrets is refused
/// here (the standalone proxy holds none); `hutch run` reads them with
/// [`load_policy_profile`].
pub fn load_policy_file(path: &Path, profile: Option<&str>) -> Result<ProxyPolicy, NetError> {
    let (policy, secrets) = load_policy_profile(path, profile)?;
    if let Some(s) = secrets.first() {
        return Err(NetError::PolicyFile {
            path: path.to_path_buf(),
            message: format!(
                "the profile declares the secret {:?}: a standalone proxy holds no secrets (run the command with hutch run, which reads them)",
                s.name
            ),
        });
    }
    Ok(policy)
}

/// [`load_policy_file`], with the profile's secrets (their sources; the
/// launch validates them with the rest of the Spec).
pub fn load_policy_profile(
    path: &Path,
    profile: Option<&str>,
) -> Result<(ProxyPolicy, Vec<Secret>), NetError> {
    let err = |message: String| NetError::PolicyFile {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let de = toml::Deserializer::parse(&text).map_err(|e| err(one_line(&e.to_string())))?;
    let file: PolicyFile = serde_path_to_error::deserialize(de).map_err(|e| {
        err(format!(
            "{}: {}",
            e.path(),
            one_line(&e.inner().to_string())
        ))
    })?;
    let names = || file.profiles.keys().cloned().collect::<Vec<_>>().join(", ");
    let name = match (profile, &file.default) {
        (Some(p), _) => p.to_string(),
        (None, Some(d)) => d.clone(),
        (None, None) if file.profiles.len() == 1 => {
            file.profiles.keys().next().cloned().unwrap_or_default()
        }
        (None, None) => {
            return Err(NetError::NoProfileChosen {
                path: path.to_path_buf(),
                profiles: names(),
            });
        }
    };
    let chosen = file
        .profiles
        .get(&name)
        .cloned()
        .ok_or_else(|| err(format!("no profile {name:?} (profiles: {})", names())))?;
    Policy::from_spec(&chosen.policy).map_err(|e| err(format!("profiles.{name}.{e}")))?;
    Ok((chosen.policy, chosen.secrets))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("hutch-pf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn profiles_are_selected_and_checked() {
        let p = write(
            "two.toml",
            r#"
default = "a"
[profiles.a]
allow = ["a.example"]
[profiles.b]
allow = ["**.b.example:8443"]
deny = ["x.b.example"]
plain_http = true
egress_mode = "transparent"
resolve = { "b.example" = "192.0.2.1" }
[profiles.b.limits]
max_tunnels = 3
idle_timeout = "30s"
"#,
        );
        assert_eq!(load_policy_file(&p, None).unwrap().allow, ["a.example"]);
        let b = load_policy_file(&p, Some("b")).unwrap();
        assert_eq!(b.deny, ["x.b.example"]);
        assert_eq!(b.limits.max_tunnels, Some(3));
        assert!(b.plain_http);
        assert_eq!(b.egress_mode, crate::spec::EgressMode::Transparent);
        let e = load_policy_file(&p, Some("c")).unwrap_err().to_string();
        assert!(e.contains("no profile \"c\"") && e.contains("a, b"), "{e}");

        let bad = write("bad.toml", "[profiles.a]\nallow = [\"*.127.0.0.1\"]\n");
        let e = load_policy_file(&bad, None).unwrap_err().to_string();
        assert!(e.contains("profiles.a.allow[0]"), "{e}");

        let unknown = write("unk.toml", "[profiles.a]\nalow = [\"x\"]\n");
        let e = load_policy_file(&unknown, None).unwrap_err().to_string();
        assert!(e.contains("alow"), "{e}");

        // A profile's secrets: hutch run reads them, the standalone proxy
        // refuses them.
        let with = write(
            "secrets.toml",
            "[profiles.a]\nallow = [\"a.example\"]\n[[profiles.a.secrets]]\nname = \"k\"\nenv = \"K\"\nfrom = { env = \"REAL\" }\nhosts = [\"a.example\"]\n",
        );
        let (policy, secrets) = load_policy_profile(&with, None).unwrap();
        assert_eq!(policy.allow, ["a.example"]);
        assert_eq!(
            secrets[0].from,
            crate::spec::SecretSource::Env("REAL".into())
        );
        let e = load_policy_file(&with, None).unwrap_err().to_string();
        assert!(e.contains("holds no secrets"), "{e}");
        let bad = write(
            "badsecret.toml",
            "[profiles.a]\n[[profiles.a.secrets]]\nname = \"k\"\nvalue = \"sk-1\"\n",
        );
        let e = load_policy_profile(&bad, None).unwrap_err().to_string();
        assert!(e.contains("secrets") && e.contains("value"), "{e}");

        let two = write("nodefault.toml", "[profiles.a]\n[profiles.b]\n");
        let e = load_policy_file(&two, None).unwrap_err();
        assert!(matches!(e, NetError::NoProfileChosen { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("choose one (profiles: a, b)") && !e.contains("--"),
            "{e}"
        );
    }
}
