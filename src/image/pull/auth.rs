//! Registry credentials from a docker-style credential file
//! (`{"auths": {"HOST[:PORT]": {"auth": base64("user:pass")}}}`, also
//! `username`/`password` fields), the format of `docker login`,
//! `podman login` and `skopeo login`. The value never leaves this
//! module's types except into the registry client's request.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use super::PullError;

/// Where the credential file is looked for when none is named:
/// `$REGISTRY_AUTH_FILE`, `$XDG_RUNTIME_DIR/containers/auth.json`,
/// `~/.docker/config.json` (the first that exists).
pub(crate) fn default_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("REGISTRY_AUTH_FILE").filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|p| Path::new(p).is_absolute()) {
        out.push(PathBuf::from(x).join("containers/auth.json"));
    }
    if let Some(h) = std::env::var_os("HOME").filter(|p| Path::new(p).is_absolute()) {
        out.push(PathBuf::from(h).join(".docker/config.json"));
    }
    out
}

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl Credentials {
    /// Credentials from a user name and a password (e.g. a hutch secret's value).
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Credentials {
        Credentials {
            user: user.into(),
            password: password.into(),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

#[derive(Deserialize)]
struct AuthFile {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// Credential files are small: refuse anything larger than this.
const MAX_AUTH_FILE: u64 = 1 << 20;

/// The credentials `file` holds for `registry` (`HOST[:PORT]`), if any.
/// Keys may also carry a scheme (`https://HOST`) or a path (`HOST/v2/`).
pub(crate) fn lookup(file: &Path, registry: &str) -> Result<Option<Credentials>, PullError> {
    let bad = |why: String| PullError::AuthFile {
        path: file.display().to_string(),
        why,
    };
    let meta = std::fs::metadata(file).map_err(|e| bad(e.to_string()))?;
    if meta.len() > MAX_AUTH_FILE {
        return Err(bad(format!("over {MAX_AUTH_FILE} bytes")));
    }
    let text = std::fs::read(file).map_err(|e| bad(e.to_string()))?;
    // serde_json's messages name a line and column, never the content.
    let parsed: AuthFile = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    let host_of = |key: &str| -> String {
        let k = key
            .strip_prefix("https://")
            .or_else(|| key.strip_prefix("http://"))
            .unwrap_or(key);
        k.split('/').next().unwrap_or(k).to_string()
    };
    let Some((_, entry)) = parsed.auths.iter().find(|(k, _)| host_of(k) == registry) else {
        return Ok(None);
    };
    if let Some(a) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(a.trim())
            .map_err(|_| bad(format!("the \"auth\" of {registry} is not base64")))?;
        let s = String::from_utf8(raw)
            .map_err(|_| bad(format!("the \"auth\" of {registry} is not UTF-8")))?;
        let Some((u, p)) = s.split_once(':') else {
            return Err(bad(format!(
                "the \"auth\" of {registry} is not base64 of USER:PASSWORD"
            )));
        };
        return Ok(Some(Credentials::new(u, p)));
    }
    match (&entry.username, &entry.password) {
        (Some(u), Some(p)) => Ok(Some(Credentials::new(u.clone(), p.clone()))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_registry_in_a_docker_config() {
        let dir = std::env::temp_dir().join(format!("hutch-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("config.json");
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
        std::fs::write(
            &f,
            format!(
                r#"{{"auths": {{"https://127.0.0.1:5000/v2/": {{"auth": "{b64}"}}, "other:1": {{"username": "u", "password": "p"}}}}}}"#
            ),
        )
        .unwrap();
        let c = lookup(&f, "127.0.0.1:5000").unwrap().unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("alice", "s3cret"));
        assert_eq!(format!("{c:?}"), "Credentials(<redacted>)");
        assert!(lookup(&f, "other:1").unwrap().is_some());
        assert!(lookup(&f, "nowhere:1").unwrap().is_none());
        std::fs::write(&f, r#"{"auths": {"h:1": {"auth": "!!"}}}"#).unwrap();
        let e = lookup(&f, "h:1").unwrap_err().to_string();
        assert!(e.contains("not base64") && !e.contains("!!"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
