//! The checks an image must pass to be imported or run (fail closed, each
//! refusal naming the flag that overrides it), and their verdicts for
//! `hutch image inspect`.

use serde::{Deserialize, Serialize};

use super::oci::{Config, Platform};

/// The named overrides of the checks (import and run alike).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overrides {
    /// `--allow-platform-mismatch`: an OS/architecture other than requested.
    pub allow_platform_mismatch: bool,
    /// `--allow-volumes`: a config that declares `Volumes`.
    pub allow_volumes: bool,
    /// `--allow-secret-env`: secret-like `Env` keys.
    pub allow_secret_env: bool,
    /// `--allow-devices`: layers with device nodes (root imports only).
    pub allow_devices: bool,
    /// `--allow-unpinned`: resolve a bare name (the digest used is reported).
    pub allow_unpinned: bool,
    /// `--approved FILE` / `image.approved`: only these images may run
    /// (`super::approved`); `None`: no list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<Vec<String>>,
}

/// Why an image was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the image is for {have}, not the requested {want} (--allow-platform-mismatch to use it anyway)"
    )]
    Platform { have: String, want: String },
    #[error(
        "the image config declares {count} volume(s), which hutch does not provide \
         (--allow-volumes to use it anyway)"
    )]
    Volumes { count: usize },
    #[error(
        "the image config's Env has {count} secret-like variable(s) ({names}): images must not \
         carry secrets (--allow-secret-env to use it anyway)"
    )]
    SecretEnv { count: usize, names: String },
    #[error(
        "layer {layer} holds {count} device node(s) other than whiteouts (--allow-devices to \
         use it anyway; the layers are mounted nodev)"
    )]
    Devices { layer: String, count: u64 },
    #[error(
        "layer {layer}: entry {entry} is placed below a symlink or non-directory of a lower \
         layer; unpacking it would mean following that link"
    )]
    LowerPath { layer: String, entry: String },
    #[error(
        "{reference} is not pinned: name the image by digest (sha256:<64 hex> or \
         NAME@sha256:<64 hex>), or pass --allow-unpinned"
    )]
    Unpinned { reference: String },
    #[error(
        "image {digest} is not on the approved list (--approved FILE, image.approved): add \
         its digest to the list to run it"
    )]
    NotApproved { digest: String },
}

/// One check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    /// Would be refused, but its override was given.
    Overridden,
    Refused,
    /// Passes, with something to know (e.g. setuid files kept).
    Note,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Overridden => "overridden",
            Outcome::Refused => "refused",
            Outcome::Note => "note",
        }
    }
}

/// The verdict of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// `platform`, `volumes`, `secret_env`, `devices`, `setuid`.
    pub check: String,
    pub outcome: Outcome,
    pub detail: String,
    /// The flag that overrides a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_flag: Option<String>,
}

fn verdict(check: &str, failed: bool, allowed: bool, detail: String, flag: &str) -> Verdict {
    Verdict {
        check: check.into(),
        outcome: match (failed, allowed) {
            (false, _) => Outcome::Pass,
            (true, true) => Outcome::Overridden,
            (true, false) => Outcome::Refused,
        },
        detail,
        override_flag: failed.then(|| flag.to_string()),
    }
}

/// Whether an Env key looks like a secret: `*TOKEN*`, `*SECRET*`,
/// `*PASSWORD*`, `*CREDENTIAL*`, `*_KEY`, case-insensitive.
pub fn secret_like(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    ["TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"]
        .iter()
        .any(|w| k.contains(w))
        || k.ends_with("_KEY")
}

/// A key name made safe to print: identifier characters only, capped.
fn safe_key(k: &str) -> String {
    k.chars()
        .take(40)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// What the layers hold, as recorded when they were unpacked.
#[derive(Debug, Clone)]
pub struct LayerFacts {
    pub digest: String,
    pub device_count: u64,
    pub setuid_count: u64,
}

/// Every check's verdict, and the first refusal (config checks first).
pub fn evaluate(
    config: &Config,
    layers: &[LayerFacts],
    want: &Platform,
    o: &Overrides,
) -> (Vec<Verdict>, Option<Refusal>) {
    let mut out = Vec::new();
    let mut refusal = None;
    let have = Platform::of_config(config);
    let mismatch = !want.accepts(&have);
    out.push(verdict(
        "platform",
        mismatch,
        o.allow_platform_mismatch,
        if mismatch {
            format!("the image is {have}, {want} was requested")
        } else {
            format!("{have} matches the requested {want}")
        },
        "--allow-platform-mismatch",
    ));
    if mismatch && !o.allow_platform_mismatch {
        refusal.get_or_insert(Refusal::Platform {
            have: have.to_string(),
            want: want.to_string(),
        });
    }

    let volumes = config.config.volumes.len();
    out.push(verdict(
        "volumes",
        volumes > 0,
        o.allow_volumes,
        if volumes > 0 {
            let shown: Vec<String> = config
                .config
                .volumes
                .keys()
                .take(4)
                .map(|k| crate::util::quote::display_name(k.as_bytes()))
                .collect();
            format!("{volumes} declared: {}", shown.join(" "))
        } else {
            "none declared".into()
        },
        "--allow-volumes",
    ));
    if volumes > 0 && !o.allow_volumes {
        refusal.get_or_insert(Refusal::Volumes { count: volumes });
    }

    let secrets: Vec<String> = config
        .config
        .env
        .iter()
        .map(|kv| kv.split_once('=').map_or(kv.as_str(), |(k, _)| k))
        .filter(|k| secret_like(k))
        .map(safe_key)
        .collect();
    let names = secrets
        .iter()
        .take(4)
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    out.push(verdict(
        "secret_env",
        !secrets.is_empty(),
        o.allow_secret_env,
        if secrets.is_empty() {
            format!(
                "{} Env variable(s), none secret-like",
                config.config.env.len()
            )
        } else {
            format!("secret-like keys: {names}")
        },
        "--allow-secret-env",
    ));
    if !secrets.is_empty() && !o.allow_secret_env {
        refusal.get_or_insert(Refusal::SecretEnv {
            count: secrets.len(),
            names,
        });
    }

    let devices: u64 = layers.iter().map(|l| l.device_count).sum();
    out.push(verdict(
        "devices",
        devices > 0,
        o.allow_devices,
        if devices > 0 {
            format!("{devices} device node(s) other than whiteouts (mounted nodev)")
        } else {
            "no device nodes other than whiteouts".into()
        },
        "--allow-devices",
    ));
    if !o.allow_devices
        && let Some(l) = layers.iter().find(|l| l.device_count > 0)
    {
        refusal.get_or_insert(Refusal::Devices {
            layer: l.digest.clone(),
            count: l.device_count,
        });
    }

    let setuid: u64 = layers.iter().map(|l| l.setuid_count).sum();
    out.push(Verdict {
        check: "setuid".into(),
        outcome: if setuid > 0 { Outcome::Note } else { Outcome::Pass },
        detail: if setuid > 0 {
            format!("{setuid} setuid/setgid file(s) kept; layers are mounted nosuid, so the bits have no effect")
        } else {
            "no setuid/setgid files".into()
        },
        override_flag: None,
    });
    (out, refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_match_the_patterns() {
        for k in [
            "GITHUB_TOKEN",
            "db_password",
            "AWS_SECRET_ACCESS_KEY",
            "API_KEY",
            "MyCredentials",
        ] {
            assert!(secret_like(k), "{k}");
        }
        for k in ["PATH", "HOME", "KEYBOARD", "LANG"] {
            assert!(!secret_like(k), "{k}");
        }
    }

    #[test]
    fn refusals_name_their_override() {
        let mut c: Config = serde_json::from_str(
            r#"{"architecture":"arm64","os":"linux","config":{"Env":["A_TOKEN=x"],"Volumes":{"/data":{}}},
                "rootfs":{"type":"layers","diff_ids":[]}}"#,
        )
        .unwrap();
        let want = Platform::parse("linux/amd64").unwrap();
        let (v, r) = evaluate(&c, &[], &want, &Overrides::default());
        assert!(matches!(r, Some(Refusal::Platform { .. })));
        assert!(r.unwrap().to_string().contains("--allow-platform-mismatch"));
        assert_eq!(
            v.iter().filter(|v| v.outcome == Outcome::Refused).count(),
            3
        );
        c.architecture = "amd64".into();
        let o = Overrides {
            allow_volumes: true,
            ..Default::default()
        };
        let (_, r) = evaluate(&c, &[], &want, &o);
        let r = r.unwrap();
        assert!(matches!(r, Refusal::SecretEnv { count: 1, .. }));
        assert!(!r.to_string().contains("=x"));
    }
}
