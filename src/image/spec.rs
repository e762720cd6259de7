//! The Spec's `image` table as the image module reads it: its checks (one
//! part of `launch::validate`) and its translation into a reference, a
//! platform and the checks' overrides.

use std::path::Path;

use crate::spec::{ImageRef, SpecError};

use super::checks::Overrides;
use super::digest::Digest;
use super::error::{ImageError, Result};
use super::import::valid_name;
use super::oci::Platform;
use super::store::Store;

/// Check `image` (at key path `image`): a full sha256 `digest` or a valid
/// `name` (alone only with `allow_unpinned`), a platform, an absolute store.
pub fn validate(image: &ImageRef) -> Result<(), SpecError> {
    if let Some(d) = &image.digest {
        Digest::parse(d).map_err(|why| {
            SpecError::new(
                "image.digest",
                format!("{why} (a pin needs all 64 hex digits)"),
            )
        })?;
    }
    if let Some(n) = &image.name
        && !valid_name(n)
    {
        return Err(SpecError::new(
            "image.name",
            "not a valid image name (letters, digits and ._/:- , at most 255 bytes, no '@')",
        ));
    }
    match (&image.digest, &image.name) {
        (None, None) => {
            return Err(SpecError::new(
                "image",
                "needs a digest (sha256:<64 hex>) or a name",
            ));
        }
        (None, Some(_)) if !image.allow_unpinned => {
            return Err(SpecError::new(
                "image.name",
                "a name alone is not a pin: give image.digest (sha256:<64 hex>), or set \
                 image.allow_unpinned",
            ));
        }
        _ => {}
    }
    if let Some(list) = &image.approved {
        super::approved::Approved::parse(list)
            .map_err(|(i, why)| SpecError::new(format!("image.approved[{i}]"), why))?;
    }
    if let Some(p) = &image.platform {
        Platform::parse(p).map_err(|why| SpecError::new("image.platform", why))?;
    }
    if let Some(s) = &image.store
        && !s.is_absolute()
    {
        return Err(SpecError::new(
            "image.store",
            format!("{} is not an absolute path", s.display()),
        ));
    }
    Ok(())
}

/// The reference [`super::Store::resolve`] takes: the digest when there is
/// one (the name is then only informational), else the name.
pub fn reference(image: &ImageRef) -> String {
    match (&image.digest, &image.name) {
        (Some(d), _) => d.clone(),
        (None, Some(n)) => n.clone(),
        (None, None) => String::new(),
    }
}

/// The platform asked for (the host's by default).
pub fn platform(image: &ImageRef) -> Result<Platform, String> {
    image
        .platform
        .as_deref()
        .map_or_else(|| Ok(Platform::host()), Platform::parse)
}

/// The checks' overrides the Spec gives.
pub fn overrides(image: &ImageRef) -> Overrides {
    let o = &image.overrides;
    Overrides {
        allow_platform_mismatch: o.allow_platform_mismatch,
        allow_volumes: o.allow_volumes,
        allow_secret_env: o.allow_secret_env,
        allow_devices: o.allow_devices,
        allow_unpinned: image.allow_unpinned,
        approved: image.approved.clone(),
    }
}

/// Resolve `image` now (every check with its overrides) and return it
/// pinned: the manifest digest, the image's platform, the store's path,
/// no `allow_unpinned`. What a session records so that each of its
/// commands runs exactly that manifest, even if a name moves later.
pub fn pin(image: &ImageRef) -> Result<ImageRef> {
    validate(image).map_err(|e| ImageError::Invalid(e.to_string()))?;
    let store = Store::open_existing(image.store.as_deref())?;
    let want = platform(image).map_err(ImageError::Invalid)?;
    let resolved = store.resolve(&reference(image), &want, &overrides(image))?;
    let mut pinned = image.clone();
    pinned.digest = Some(resolved.manifest_digest.to_string());
    pinned.platform = Some(resolved.platform.to_string());
    pinned.store = Some(store.root().to_path_buf());
    pinned.allow_unpinned = false;
    Ok(pinned)
}

/// Record that the directory `holder` (a session's) uses the pinned
/// `image`: `image rm` refuses it and `gc` keeps it while `holder` exists.
pub fn hold_for(image: &ImageRef, holder: &Path) -> Result<()> {
    let digest = image
        .digest
        .as_deref()
        .ok_or_else(|| ImageError::Invalid("only a pinned image can be held".into()))?;
    let digest = Digest::parse(digest).map_err(ImageError::Invalid)?;
    Store::open(image.store.as_deref())?.add_ref(&digest, holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_pins_or_explicitly_unpinned() {
        let d = Digest::of(b"x").to_string();
        assert!(validate(&ImageRef::new(&d)).is_ok());
        assert!(validate(&ImageRef::new(&format!("debian@{d}"))).is_ok());
        let e = validate(&ImageRef::new("debian")).unwrap_err();
        assert_eq!(e.path, "image.name");
        let mut r = ImageRef::new("debian");
        r.allow_unpinned = true;
        assert!(validate(&r).is_ok());
        assert_eq!(reference(&r), "debian");
        let e = validate(&ImageRef::new(&d[..30])).unwrap_err();
        assert_eq!(e.path, "image.digest");
        r.platform = Some("linux".into());
        assert_eq!(validate(&r).unwrap_err().path, "image.platform");
        r.platform = None;
        r.store = Some("rel".into());
        assert_eq!(validate(&r).unwrap_err().path, "image.store");
        assert_eq!(validate(&ImageRef::default()).unwrap_err().path, "image");
    }
}
