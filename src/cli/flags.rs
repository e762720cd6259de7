//! Which `hutch run` flag sets which Spec key: lower layers name key
//! paths in their errors, never flags; the CLI adds the flag when it
//! prints. Used by `run`, `session`, `check` and the machine envelope.

/// The `hutch run` flags that set a Spec key. Lower layers name keys in
/// their errors (`limits.pids: must be 1 to 4194304`), never flags; the
/// CLI adds the flag when it prints ([`with_flags`]).
const FLAGS: &[(&str, &str)] = &[
    ("cwd", "--chdir"),
    ("identity.uid", "--uid"),
    ("identity.gid", "--gid"),
    ("identity.hostname", "--hostname"),
    ("identity.id_range", "--private-ids"),
    ("limits.memory", "--memory"),
    ("limits.pids", "--pids"),
    ("limits.cpus", "--cpus"),
    ("limits.io", "--io-max"),
    ("limits.wall_clock", "--timeout"),
    ("limits.output_bytes", "--output-limit"),
    ("limits.upper_size", "--changes-size"),
    ("limits.rlimits", "--rlimit"),
    ("limits.cgroup_parent", "--cgroup-parent"),
    ("security.seccomp", "--seccomp"),
    ("security.landlock.min_abi", "--landlock-min-abi"),
    ("security.cap_add", "--cap-add"),
    ("network.allow", "--allow-host"),
    ("network.allow_address", "--allow-address"),
    ("network.resolve", "--resolve"),
    ("network.audit", "--audit"),
    ("network.gateways", "--gateway"),
    ("network.intercept", "--intercept"),
    ("secrets", "--secret"),
    ("image.digest", "--image"),
    ("image.name", "--image"),
    ("image.platform", "--platform"),
    ("image.store", "--image-store"),
    ("image.allow_unpinned", "--allow-unpinned"),
    ("image.approved", "--approved"),
];

/// The `hutch run` flag that sets the key path `key` (`limits.io[0].wbps`
/// is set by `--io-max`), if one does.
pub fn flag_for(key: &str) -> Option<&'static str> {
    FLAGS
        .iter()
        .find(|(k, _)| {
            key.strip_prefix(k)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        })
        .map(|(_, flag)| *flag)
}

/// `text` followed by the flags that set the key paths it names, so a
/// user of `hutch run` learns which option to change:
/// `limits.pids: must be 1 to 4194304 (flags: --pids)`.
pub fn with_flags(text: &str) -> String {
    let in_key = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']');
    let mut flags: Vec<&str> = Vec::new();
    let mut prev: Option<char> = None;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let len = if in_key(c) {
            rest.find(|c| !in_key(c)).unwrap_or(rest.len())
        } else {
            c.len_utf8()
        };
        // A key is a whole word that starts with a lowercase letter; a
        // sentence's full stop is not part of it.
        if c.is_ascii_lowercase() && !prev.is_some_and(|p| in_key(p) || p.is_alphanumeric()) {
            let key = rest[..len].trim_end_matches('.');
            if let Some(flag) = flag_for(key)
                && !flags.contains(&flag)
            {
                flags.push(flag);
            }
        }
        prev = rest[..len].chars().next_back();
        rest = &rest[len..];
    }
    if flags.is_empty() {
        text.to_string()
    } else {
        format!("{text} (flags: {})", flags.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_get_their_flag() {
        assert_eq!(flag_for("limits.io[0].wbps"), Some("--io-max"));
        assert_eq!(flag_for("limits.rlimits.as"), Some("--rlimit"));
        assert_eq!(
            flag_for("network.allow_address[1]"),
            Some("--allow-address")
        );
        assert_eq!(flag_for("network.allow[1]"), Some("--allow-host"));
        assert_eq!(flag_for("limits.pidsx"), None);
        assert_eq!(flag_for("fs[2].dest"), None);
        assert_eq!(
            with_flags("limits.pids: must be 1 to 4194304"),
            "limits.pids: must be 1 to 4194304 (flags: --pids)"
        );
        assert_eq!(
            with_flags("invalid sandbox spec at `cwd`: x is not an absolute path"),
            "invalid sandbox spec at `cwd`: x is not an absolute path (flags: --chdir)"
        );
        assert_eq!(
            with_flags(
                "limits.memory: not available; fix, or set limits.cgroup_parent. See limits.memory."
            ),
            "limits.memory: not available; fix, or set limits.cgroup_parent. See limits.memory. (flags: --memory, --cgroup-parent)"
        );
        // Words that merely contain a key, and unknown keys, stay as they are.
        assert_eq!(with_flags("xlimits.pids nolimits"), "xlimits.pids nolimits");
        assert_eq!(with_flags("ABI 9: Ölimits.pids"), "ABI 9: Ölimits.pids");
        assert_eq!(with_flags("fs[3].dest: bad"), "fs[3].dest: bad");
    }
}
