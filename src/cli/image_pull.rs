//! `hutch image pull REF@sha256:...`: the command line of
//! [`crate::image::Store::pull`].

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};

use super::registry_credential::RegistryCredential;
use crate::image::{Outcome, Platform, PullOptions, Store};
use crate::spec::ByteSize;

pub(super) const HELP: &str = "usage: hutch image pull REF@sha256:<64 hex> [--platform OS/ARCH[/VARIANT]]
                       [--registry-auth FILE | --registry-credential SOURCE] [--profile FILE]
                       [--insecure-registry HOST[:PORT]]...
                       [--name NAME] [--max-image-size SIZE] [--max-expansion N]
                       [--approved FILE] [--allow-unpinned] [--allow-platform-mismatch] [--allow-volumes]
                       [--allow-secret-env] [--allow-devices] [--json]

Fetches an image from a registry (OCI distribution API) by digest and
imports it with import's checks and caps. A multi-platform index is resolved
to the platform (default: the host's). Every blob is checked against its
digest and size as it streams; a failed pull leaves no image. Prints the
manifest digest to pin runs to (a pulled index's digest pins it too).

  --registry-auth FILE     docker-style credential file (default: $REGISTRY_AUTH_FILE,
                           $XDG_RUNTIME_DIR/containers/auth.json, ~/.docker/config.json);
                           basic auth, and token auth through it
  --registry-credential [user=USER,]from-env=VAR|from-file=PATH|from-fd=N
                           the credentials from a secret source instead (never argv):
                           USER:PASSWORD, or the password alone with user=USER
  --insecure-registry H    reach registry H (HOST[:PORT]) over plain http
  --profile FILE           a TOML or JSON profile whose registry_credentials name the
                           registry's credential source (the flags above win)
  --allow-unpinned         accept a tag; the digest it resolved to is reported
  --approved FILE          refuse (before fetching a layer) an image not on this list
  --name NAME              name the image (default: HOST/REPOSITORY)
  (other options as for `hutch image import`)

https uses the host's trust store (SSL_CERT_FILE and SSL_CERT_DIR honoured).";

/// `hutch run`'s `--pull missing|never`, `--insecure-registry`, `--registry-auth`,
/// `--registry-credential`.
#[derive(Default)]
pub(super) struct PullFlags {
    missing: bool,
    pub(super) insecure: Vec<String>,
    pub(super) auth_file: Option<PathBuf>,
    pub(super) credential: Option<RegistryCredential>,
    /// The profile's `registry_credentials`: used for the image's registry
    /// when no credential flag is given.
    pub(super) profile: Vec<crate::spec::RegistryCredential>,
}

impl PullFlags {
    pub(super) fn set_policy(&mut self, v: &str) -> Result<()> {
        self.missing = match v {
            "missing" => true,
            "never" => false,
            other => bail!(
                "--pull {}: missing or never",
                crate::util::quote::display_name(other.as_bytes())
            ),
        };
        Ok(())
    }

    pub(super) fn is_set(&self) -> bool {
        self.missing
            || !self.insecure.is_empty()
            || self.auth_file.is_some()
            || self.credential.is_some()
    }

    /// With `--pull missing`: pull the image `r` pins (`HOST/REPOSITORY`
    /// name and digest) unless the store has it; checks and the approved
    /// list still apply when the sandbox is prepared.
    pub(super) fn pull_missing(self, r: &crate::spec::ImageRef) -> Result<()> {
        if !self.missing {
            if self.is_set() {
                bail!(
                    "--insecure-registry, --registry-auth and --registry-credential need --pull missing"
                );
            }
            return Ok(());
        }
        // Read (an fd source is closed) whether or not a pull follows:
        // nothing of the credential is left for the sandbox to inherit.
        let credentials = match &self.credential {
            Some(c) => Some(c.read()?),
            None => None,
        };
        let (Some(name), Some(digest)) = (&r.name, &r.digest) else {
            bail!(
                "--pull missing needs --image HOST[:PORT]/REPOSITORY@sha256:<64 hex> (a registry \
                 reference pinned by digest)"
            );
        };
        let store = Store::open(r.store.as_deref())?;
        let d = crate::image::digest::Digest::parse(digest)
            .map_err(|e| anyhow!("--image: {e}"))?;
        let have = store.images()?.iter().any(|i| {
            i.manifest == d || i.pulled.as_ref().and_then(|p| p.index.as_ref()) == Some(&d)
        });
        if have {
            return Ok(());
        }
        let reference = format!("{name}@{digest}");
        let credentials = match credentials {
            Some(c) => Some(c),
            None if self.auth_file.is_none() => profile_credentials(&self.profile, &reference)?,
            None => None,
        };
        let mut opts = PullOptions {
            insecure_registries: self.insecure,
            auth_file: self.auth_file,
            credentials,
            ..PullOptions::default()
        };
        if let Some(p) = &r.platform {
            opts.import.platform = Some(Platform::parse(p).map_err(|e| anyhow!("--platform: {e}"))?);
        }
        opts.import.overrides = crate::image::spec::overrides(r);
        store
            .pull(&reference, &opts)
            .with_context(|| format!("--pull missing: {}", crate::util::quote::display_name(reference.as_bytes())))?;
        Ok(())
    }
}

/// The credentials a profile names for `reference`'s registry, read from
/// their source; None when it names none.
fn profile_credentials(
    entries: &[crate::spec::RegistryCredential],
    reference: &str,
) -> Result<Option<crate::image::pull::Credentials>> {
    if entries.is_empty() {
        return Ok(None);
    }
    let (r, _) = crate::image::pull::parse_reference(reference)?;
    match RegistryCredential::from_profile(entries, r.registry()) {
        Some(c) => Ok(Some(c.read()?)),
        None => Ok(None),
    }
}

pub(super) fn pull(store: Store, rest: Vec<OsString>) -> Result<(serde_json::Value, String)> {
    let mut opts = PullOptions::default();
    let mut reference: Option<String> = None;
    let mut credential = None;
    let mut profile: Vec<crate::spec::RegistryCredential> = Vec::new();
    let mut it = rest.into_iter();
    let text = |a: &OsString, what: &str| -> Result<String> {
        a.to_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("{what}: not UTF-8"))
    };
    while let Some(a) = it.next() {
        let mut value = |flag: &str| -> Result<String> {
            let v = it.next().with_context(|| format!("{flag} needs a value"))?;
            text(&v, flag)
        };
        match a.to_str() {
            Some("--name") => opts.import.name = Some(value("--name")?),
            Some("--platform") => {
                let v = value("--platform")?;
                opts.import.platform =
                    Some(Platform::parse(&v).map_err(|e| anyhow!("--platform: {e}"))?)
            }
            Some("--registry-auth") => {
                opts.auth_file = Some(PathBuf::from(value("--registry-auth")?))
            }
            Some("--registry-credential") => {
                let cwd = std::env::current_dir().context("the working directory")?;
                credential = Some(RegistryCredential::parse(
                    &value("--registry-credential")?,
                    &cwd,
                )?)
            }
            Some("--insecure-registry") => {
                opts.insecure_registries.push(value("--insecure-registry")?)
            }
            Some("--profile") => {
                let file = PathBuf::from(value("--profile")?);
                profile = crate::spec::load_profile(&file)?.registry_credentials;
            }
            Some("--max-image-size") => {
                let v = value("--max-image-size")?;
                opts.import.max_image_size = ByteSize::parse(&v)
                    .map_err(|e| anyhow!("--max-image-size: {e}"))?
                    .0
            }
            Some("--max-expansion") => {
                let v = value("--max-expansion")?;
                opts.import.max_expansion = v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .with_context(|| "--max-expansion: a whole ratio of at least 1".to_string())?
            }
            Some("--allow-unpinned") => opts.import.overrides.allow_unpinned = true,
            Some("--approved") => {
                let file = PathBuf::from(value("--approved")?);
                opts.import.overrides.approved =
                    Some(crate::image::approved::read_file(&file).context("--approved")?)
            }
            Some("--allow-platform-mismatch") => {
                opts.import.overrides.allow_platform_mismatch = true
            }
            Some("--allow-volumes") => opts.import.overrides.allow_volumes = true,
            Some("--allow-secret-env") => opts.import.overrides.allow_secret_env = true,
            Some("--allow-devices") => opts.import.overrides.allow_devices = true,
            Some(s) if s.starts_with('-') => bail!(
                "unknown option {}; see `hutch image pull --help`",
                crate::util::quote::display_name(s.as_bytes())
            ),
            _ if reference.is_none() => reference = Some(text(&a, "REF")?),
            _ => bail!("only one REF may be given"),
        }
    }
    if let Some(c) = credential {
        if opts.auth_file.is_some() {
            bail!("--registry-auth and --registry-credential: give one");
        }
        opts.credentials = Some(c.read()?);
    }
    let reference = reference.context("REF is needed: HOST[:PORT]/REPOSITORY@sha256:<64 hex>")?;
    if opts.credentials.is_none() && opts.auth_file.is_none() {
        opts.credentials = profile_credentials(&profile, &reference)?;
    }
    let report = store
        .pull(&reference, &opts)
        .with_context(|| format!("pull {}", crate::util::quote::display_name(reference.as_bytes())))?;
    let i = &report.image;
    let mut human = format!(
        "{}\npulled {}{}: {}, {} layer(s) ({} new; {} blob(s) fetched, {} reused)\n",
        i.manifest,
        i.names.join(", "),
        if report.pinned {
            String::new()
        } else {
            format!(" (unpinned: the tag resolved to {})", report.digest)
        },
        i.platform,
        i.layers.len(),
        report.new_layers,
        report.downloaded,
        report.reused,
    );
    for v in &report.verdicts {
        if v.outcome != Outcome::Pass {
            human.push_str(&format!(
                "note: {}: {} ({})\n",
                v.check,
                v.detail,
                v.outcome.word()
            ));
        }
    }
    Ok((serde_json::to_value(&report)?, human))
}
