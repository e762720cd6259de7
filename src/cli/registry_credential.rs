//! `--registry-credential [user=USER,]from-env=VAR|from-file=PATH|from-fd=N`:
//! registry credentials from one of hutch's secret sources (the caller's
//! environment, a file, an inherited fd; `docs/secrets.md`), never from
//! argv. With `user=`, the value is the password (or token); without, it
//! is `USER:PASSWORD`. Errors name the flag and the source, never the
//! value, and the flag's text is never echoed (a password typed there by
//! mistake stays out of the error line).

use std::path::Path;

use anyhow::{Result, anyhow, bail};

use crate::image::pull::Credentials;
use crate::spec::SecretSource;

const FLAG: &str = "--registry-credential";

/// Where registry credentials are read from (not the value).
#[derive(Debug, Clone)]
pub(super) struct RegistryCredential {
    user: Option<String>,
    from: SecretSource,
    /// What errors name: the flag, or the profile's entry.
    label: String,
}

impl RegistryCredential {
    /// Parse the flag's value; a relative `from-file` is `cwd`'s.
    pub(super) fn parse(text: &str, cwd: &Path) -> Result<RegistryCredential> {
        let mut user = None;
        let mut from = None;
        for item in text.split(',') {
            let Some((k, v)) = item.split_once('=') else {
                bail!(
                    "{FLAG}: expected KEY=VALUE items (user=USER, from-env=VAR, from-file=PATH \
                     or from-fd=N); a value never goes on the command line"
                );
            };
            match k {
                "user" if !v.is_empty() && !v.contains(':') => user = Some(v.to_string()),
                "user" => bail!("{FLAG}: user= must be a non-empty name without ':'"),
                "from-env" | "from-file" | "from-fd" => {
                    if from.is_some() {
                        bail!("{FLAG}: one source (from-env, from-file or from-fd), not two");
                    }
                    from = Some(match k {
                        "from-env" => SecretSource::Env(v.to_string()),
                        "from-file" => SecretSource::File(cwd.join(v)),
                        _ => SecretSource::Fd(
                            v.parse()
                                .ok()
                                .filter(|fd: &i32| *fd >= 0)
                                .ok_or_else(|| anyhow!("{FLAG}: from-fd= needs an fd number"))?,
                        ),
                    });
                }
                _ => bail!(
                    "{FLAG}: unknown key {} (user, from-env, from-file, from-fd)",
                    crate::util::quote::display_name(k.as_bytes())
                ),
            }
        }
        let from = from.ok_or_else(|| {
            anyhow!("{FLAG}: a source is missing (from-env=VAR, from-file=PATH or from-fd=N)")
        })?;
        Ok(RegistryCredential {
            user,
            from,
            label: FLAG.to_string(),
        })
    }

    /// A profile's `registry_credentials` entry for `registry` (HOST[:PORT]),
    /// if it has one.
    pub(super) fn from_profile(
        entries: &[crate::spec::RegistryCredential],
        registry: &str,
    ) -> Option<RegistryCredential> {
        let (i, c) = entries
            .iter()
            .enumerate()
            .find(|(_, c)| c.registry == registry)?;
        Some(RegistryCredential {
            user: c.user.clone(),
            from: c.from.clone(),
            label: format!("the profile's registry_credentials[{i}] ({registry})"),
        })
    }

    /// Read the value from its source (an fd is read and closed).
    pub(super) fn read(&self) -> Result<Credentials> {
        let value = crate::secret::read_for_host("registry-credential", &self.from)?;
        let text = std::str::from_utf8(value.expose())
            .map_err(|_| anyhow!("{}: {}: the value is not UTF-8", self.label, self.source()))?;
        Ok(match &self.user {
            Some(user) => Credentials::new(user.clone(), text),
            None => match text.split_once(':') {
                Some((user, password)) if !user.is_empty() => Credentials::new(user, password),
                _ => bail!(
                    "{}: {}: the value is not USER:PASSWORD (or give user=USER and the \
                     password alone)",
                    self.label,
                    self.source()
                ),
            },
        })
    }

    fn source(&self) -> String {
        match &self.from {
            SecretSource::Env(v) => format!("environment variable {v}"),
            SecretSource::File(p) => format!("file {}", p.display()),
            SecretSource::Fd(fd) => format!("fd {fd}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_names_a_source_never_a_value() {
        let cwd = Path::new("/w");
        let c = RegistryCredential::parse("user=bot,from-file=pw", cwd).unwrap();
        assert_eq!(c.user.as_deref(), Some("bot"));
        assert_eq!(c.from, SecretSource::File("/w/pw".into()));
        let c = RegistryCredential::parse("from-fd=3", cwd).unwrap();
        assert_eq!(c.from, SecretSource::Fd(3));
        for bad in [
            "hunter2",
            "user=bot",
            "from-env=A,from-fd=3",
            "from-fd=x",
            "password=hunter2,from-env=A",
            "user=a:b,from-env=A",
        ] {
            let e = RegistryCredential::parse(bad, cwd).unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_value_is_user_colon_password_unless_user_is_given() {
        let dir = std::env::temp_dir().join(format!("hutch-regcred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("v");
        std::fs::write(&f, "alice:s3cret\n").unwrap();
        let c = RegistryCredential::parse(&format!("from-file={}", f.display()), &dir)
            .unwrap()
            .read()
            .unwrap();
        assert_eq!(c, Credentials::new("alice", "s3cret"));
        let c = RegistryCredential::parse(&format!("user=bob,from-file={}", f.display()), &dir)
            .unwrap()
            .read()
            .unwrap();
        assert_eq!(c, Credentials::new("bob", "alice:s3cret"));
        std::fs::write(&f, "no-colon-s3cret").unwrap();
        let e = RegistryCredential::parse(&format!("from-file={}", f.display()), &dir)
            .unwrap()
            .read()
            .unwrap_err()
            .to_string();
        assert!(e.contains("not USER:PASSWORD") && !e.contains("s3cret"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
