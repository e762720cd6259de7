//! The Spec's own shape: what serde's types cannot express (versions,
//! absolute paths, modes, namespaces, NUL bytes). Every error names the key
//! path. What only the enforcing module knows (seccomp profiles, Landlock
//! ABIs, capabilities, cgroup ranges, rlimits, egress rules) is checked by
//! that module, all of them together through `launch::validate`.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::key_path::key_segment;
use super::{FsOp, Network, SPEC_VERSION, Spec};

/// A profile or Spec that hutch refuses, with the offending key path: the
/// one error type of every validation (`spec`, `confine`, `cgroup`, `net`).
/// Messages use key paths, never a front end's vocabulary (CLI flags): a
/// front end maps [`SpecError::path`] to its own names when it prints.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct SpecError {
    /// Key path such as `fs[3].dest` (empty for whole-document errors).
    pub path: String,
    pub message: String,
    /// The profile file, when the Spec came from one.
    pub file: Option<PathBuf>,
}

impl SpecError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        SpecError {
            path: path.into(),
            message: message.into(),
            file: None,
        }
    }

    pub fn in_file(mut self, file: &Path) -> Self {
        self.file = Some(file.to_path_buf());
        self
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid sandbox spec")?;
        if let Some(file) = &self.file {
            write!(f, " in {}", file.display())?;
        }
        if !self.path.is_empty() && self.path != "." {
            write!(f, " at `{}`", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Check the Spec's shape (everything serde's types cannot express). This
/// is not the whole check: launch a Spec through `launch::validate`, which
/// adds confinement, limits and egress.
pub fn validate(spec: &Spec) -> Result<(), SpecError> {
    validate_where_nul_may_be(spec, spec)
}

/// [`validate`] for a Spec of which only `part` (a part of it, such as a
/// warm sandbox claim's command part) may hold a NUL byte: the rest was
/// checked before, unchanged (a warm sandbox's shape, same digest).
pub fn validate_where_nul_may_be(
    spec: &Spec,
    part: &impl serde::Serialize,
) -> Result<(), SpecError> {
    if spec.version != SPEC_VERSION {
        return Err(SpecError::new(
            "version",
            format!(
                "unsupported version {} (this hutch reads version {SPEC_VERSION})",
                spec.version
            ),
        ));
    }
    if may_hold_nul(part) {
        // Located in the whole Spec, for its key path.
        reject_nul(
            &serde_json::to_value(spec).expect("Spec serializes"),
            String::new(),
        )?;
    }
    for (i, op) in spec.fs.iter().enumerate() {
        validate_fs_op(op, &format!("fs[{i}]"))?;
    }
    if let Some((i, field, why)) = super::registry_credential::problem(spec) {
        return Err(SpecError::new(
            format!("registry_credentials[{i}].{field}"),
            why,
        ));
    }
    let ns = &spec.namespaces;
    if ns.mount == ns.join.mount.is_some() {
        return Err(SpecError::new(
            "namespaces.mount",
            if ns.mount {
                "joins an existing mount namespace, so namespaces.mount must be false"
            } else {
                "hutch always creates a mount namespace unless it joins one (namespaces.join.mount); `false` alone is not supported"
            },
        ));
    }
    super::process::validate_namespaces(spec)?;
    match (&spec.network, ns.net) {
        (Network::Host, true) | (Network::None | Network::Proxy(_), false) => {
            return Err(SpecError::new(
                "namespaces.net",
                "must be false exactly when network.mode is \"host\"",
            ));
        }
        _ => {}
    }
    if let Some(host) = &spec.identity.hostname {
        if host.is_empty() || host.len() > 64 {
            return Err(SpecError::new("identity.hostname", "must be 1 to 64 bytes"));
        }
        // A joined UTS namespace gets it too (runc sets it there).
        if !ns.uts && ns.join.uts.is_none() {
            return Err(SpecError::new(
                "identity.hostname",
                "needs namespaces.uts = true or namespaces.join.uts",
            ));
        }
    }
    for key in spec.env.keys() {
        if key.is_empty() || key.contains('=') {
            return Err(SpecError::new(
                format!("env.{}", key_segment(key)),
                "variable names must be non-empty and hold no '='",
            ));
        }
    }
    for key in &spec.unset_env {
        if key.is_empty() || key.contains('=') {
            return Err(SpecError::new(
                format!("unset_env.{}", key_segment(key)),
                "variable names must be non-empty and hold no '='",
            ));
        }
        if spec.env.contains_key(key) {
            return Err(SpecError::new(
                format!("unset_env.{}", key_segment(key)),
                "is also set in env; a variable is either set or unset",
            ));
        }
    }
    if let Some(cwd) = &spec.cwd {
        absolute("cwd", cwd)?;
    }
    if let Some(root) = &spec.root {
        absolute("root.path", &root.path)?;
        super::process::validate_root_options(&root.options)?;
    }
    super::process::validate_process(spec)?;
    validate_labels(spec)?;
    validate_limits(spec)?;
    Ok(())
}

/// Most labels a sandbox carries.
pub const MAX_LABELS: usize = 32;

/// Labels: a key of 1 to 64 bytes of `[A-Za-z0-9._/-]`, a value of at most
/// 4096 bytes (a path) without control characters (they are printed by
/// `hutch ps`).
fn validate_labels(spec: &Spec) -> Result<(), SpecError> {
    if spec.labels.len() > MAX_LABELS {
        return Err(SpecError::new(
            "labels",
            format!("at most {MAX_LABELS} labels"),
        ));
    }
    for (k, v) in &spec.labels {
        let at = format!("labels.{}", key_segment(k));
        if k.is_empty()
            || k.len() > 64
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'))
        {
            return Err(SpecError::new(
                at,
                "label keys are 1 to 64 characters of A-Z a-z 0-9 . _ / -",
            ));
        }
        if v.len() > 4096 || v.chars().any(char::is_control) {
            return Err(SpecError::new(
                at,
                "label values are at most 4096 bytes without control characters",
            ));
        }
    }
    Ok(())
}

fn validate_limits(spec: &Spec) -> Result<(), SpecError> {
    let l = &spec.limits;
    if let Some(m) = &l.memory {
        positive("limits.memory", m.value().0 as f64)?;
    }
    if let Some(p) = &l.pids {
        positive("limits.pids", p.value() as f64)?;
    }
    if let Some(c) = &l.cpus {
        let v = c.value();
        if !(v.is_finite() && v > 0.0 && v <= 4096.0) {
            return Err(SpecError::new(
                "limits.cpus",
                "must be a number of CPUs above 0",
            ));
        }
    }
    if let Some(d) = &l.wall_clock
        && d.0.is_zero()
    {
        return Err(SpecError::new(
            "limits.wall_clock",
            "must be above 0 (omit it for no limit)",
        ));
    }
    if let Some(s) = &l.upper_size {
        positive("limits.upper_size", s.0 as f64)?;
    }
    Ok(())
}

fn positive(path: &str, v: f64) -> Result<(), SpecError> {
    if v > 0.0 {
        Ok(())
    } else {
        Err(SpecError::new(path, "must be above 0"))
    }
}

fn validate_fs_op(op: &FsOp, at: &str) -> Result<(), SpecError> {
    absolute(&format!("{at}.dest"), op.dest())?;
    let mode_ok = |m: &Option<u32>, key: &str| match m {
        Some(m) if *m > 0o7777 => Err(SpecError::new(
            format!("{at}.{key}"),
            format!("mode {m:#o} is above 0o7777"),
        )),
        _ => Ok(()),
    };
    match op {
        FsOp::Bind { src, .. } | FsOp::RoBind { src, .. } | FsOp::DevBind { src, .. } => {
            absolute(&format!("{at}.src"), src)?;
        }
        FsOp::Overlay {
            lowers,
            upper,
            work,
            ..
        } => {
            lowers_ok(at, lowers)?;
            absolute(&format!("{at}.upper"), upper)?;
            absolute(&format!("{at}.work"), work)?;
            if upper == work || upper.starts_with(work) || work.starts_with(upper) {
                return Err(SpecError::new(
                    format!("{at}.work"),
                    "upper and work must be separate directories",
                ));
            }
        }
        FsOp::TmpOverlay { lowers, size, .. } => {
            lowers_ok(at, lowers)?;
            if size.is_some_and(|s| s.0 == 0) {
                return Err(SpecError::new(format!("{at}.size"), "must be above 0"));
            }
        }
        FsOp::RoOverlay { lowers, .. } => {
            lowers_ok(at, lowers)?;
            if lowers.len() < 2 {
                return Err(SpecError::new(
                    format!("{at}.lowers"),
                    "a read-only overlay needs at least two lowers",
                ));
            }
        }
        FsOp::Tmpfs {
            size,
            nr_inodes,
            mode,
            ..
        } => {
            if size.is_some_and(|s| s.0 == 0) {
                return Err(SpecError::new(format!("{at}.size"), "must be above 0"));
            }
            if nr_inodes.is_some_and(|n| n == 0) {
                return Err(SpecError::new(format!("{at}.nr_inodes"), "must be above 0"));
            }
            mode_ok(mode, "mode")?;
        }
        FsOp::Dir { mode, .. } => mode_ok(mode, "mode")?,
        FsOp::File {
            mode,
            content,
            encoding,
            ..
        }
        | FsOp::BindData {
            mode,
            content,
            encoding,
            ..
        } => {
            mode_ok(mode, "mode")?;
            if encoding.decode(content).is_none() {
                return Err(SpecError::new(
                    format!("{at}.content"),
                    "is not base64 (encoding = \"base64\": standard alphabet, padded)",
                ));
            }
        }
        FsOp::Chmod { mode, .. } => mode_ok(&Some(*mode), "mode")?,
        FsOp::Symlink { target, .. } => {
            if target.as_os_str().is_empty() {
                return Err(SpecError::new(format!("{at}.target"), "must not be empty"));
            }
        }
        FsOp::Proc { .. } | FsOp::Dev { .. } | FsOp::Mqueue { .. } | FsOp::RemountRo { .. } => {}
        FsOp::Mask { .. } | FsOp::ReadonlyPath { .. } => {}
        FsOp::Mount {
            fstype,
            src,
            options,
            optional,
            ..
        } => {
            super::mount::parse_options(fstype, options)
                .map_err(|m| SpecError::new(format!("{at}.options"), m))?;
            match (fstype.as_str(), src) {
                ("bind", Some(src)) => absolute(&format!("{at}.src"), src)?,
                ("bind", None) => {
                    return Err(SpecError::new(
                        format!("{at}.src"),
                        "a bind mount needs a source",
                    ));
                }
                (_, Some(name)) => mount_source_name(&format!("{at}.src"), name)?,
                (_, None) if *optional => {
                    return Err(SpecError::new(
                        format!("{at}.optional"),
                        "only a bind mount can be optional",
                    ));
                }
                _ => {}
            }
        }
        FsOp::Device { kind, mode, .. } => {
            if !super::mount::DEVICE_KINDS.contains(&kind.as_str()) {
                return Err(SpecError::new(
                    format!("{at}.kind"),
                    format!(
                        "unknown device kind, expected one of {}",
                        super::mount::DEVICE_KINDS.join(", ")
                    ),
                ));
            }
            if mode.is_some_and(|m| m > 0o777) {
                return Err(SpecError::new(
                    format!("{at}.mode"),
                    "a device's mode holds permission bits only (up to 0o777)",
                ));
            }
        }
    }
    Ok(())
}

fn lowers_ok(at: &str, lowers: &[PathBuf]) -> Result<(), SpecError> {
    if lowers.is_empty() {
        return Err(SpecError::new(
            format!("{at}.lowers"),
            "needs at least one lower directory",
        ));
    }
    for (i, l) in lowers.iter().enumerate() {
        absolute(&format!("{at}.lowers[{i}]"), l)?;
    }
    Ok(())
}

fn absolute(path: &str, p: &Path) -> Result<(), SpecError> {
    if !p.is_absolute() {
        return Err(SpecError::new(
            path,
            format!("{} is not an absolute path", p.display()),
        ));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(SpecError::new(
            path,
            format!("{} contains `..`", p.display()),
        ));
    }
    Ok(())
}

/// Whether any string or map key of `part` may hold a NUL byte: its JSON
/// text then holds `\u0000` (serde_json escapes every control character
/// so), and without one there is none. The text is a flat buffer, where
/// [`reject_nul`]'s walk builds a tree and a key path per node: this is
/// the common case's check, a hit is located by the walk (a string that
/// holds a backslash and `u0000` is a false hit the walk clears).
fn may_hold_nul(part: &impl serde::Serialize) -> bool {
    let json = serde_json::to_vec(part).expect("Spec serializes");
    json.windows(6).any(|w| w == b"\\u0000")
}

/// NUL bytes cannot reach a syscall; refuse them wherever they hide.
fn reject_nul(v: &serde_json::Value, at: String) -> Result<(), SpecError> {
    match v {
        serde_json::Value::String(s) if s.contains('\0') => {
            Err(SpecError::new(at, "contains a NUL byte"))
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                reject_nul(item, format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        serde_json::Value::Object(map) => {
            for (k, item) in map {
                let key_path = if at.is_empty() {
                    key_segment(k)
                } else {
                    format!("{at}.{}", key_segment(k))
                };
                if k.contains('\0') {
                    return Err(SpecError::new(key_path, "key contains a NUL byte"));
                }
                reject_nul(item, key_path)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The source name of a filesystem mount (what mountinfo shows): a
/// non-empty string of at most 255 bytes, without whitespace (mountinfo
/// would escape it) or NUL.
fn mount_source_name(at: &str, name: &Path) -> Result<(), SpecError> {
    let bytes = name.as_os_str().as_encoded_bytes();
    if bytes.is_empty() || bytes.len() > 255 {
        return Err(SpecError::new(
            at,
            "a filesystem's source name is 1 to 255 bytes",
        ));
    }
    if bytes.iter().any(|b| b.is_ascii_whitespace() || *b == 0) {
        return Err(SpecError::new(
            at,
            "a filesystem's source name has no whitespace or NUL",
        ));
    }
    Ok(())
}
