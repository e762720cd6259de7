//! Policy files: named egress profiles in TOML.
//!
//! ```toml
//! default = "claude_code"          # optional
//! [profiles.claude_code]
//! allow = ["api.anthropic.com", "**.pypi.org", "files.pythonhosted.org"]
//! deny = []
//! [profiles.claude_code.limits]
//! max_tunnels = 64
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::error::NetError;
use super::policy::Policy;
use crate::spec::ProxyPolicy;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, ProxyPolicy>,
}

/// Load one profile of a policy file. Without `profile`, the file's
/// `default` is used, or its only profile. The profile is checked (every
/// rule compiles) before it is returned.
pub fn load_policy_file(path: &Path, profile: Option<&str>) -> Result<ProxyPolicy, NetError> {
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
    Policy::from_spec(&chosen).map_err(|e| err(format!("profiles.{name}.{e}")))?;
    Ok(chosen)
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
