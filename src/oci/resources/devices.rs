//! `linux.resources.devices` → a cgroup v1 devices group at
//! `linux.cgroupsPath`, as runc and crun write it on a v1 or hybrid host:
//! `a` to `devices.deny` first, then each rule in the config's order
//! (`devices.allow` or `devices.deny`), then the devices every container
//! gets (runtime-spec "Default Devices", `/dev/pts`), which open whatever
//! the rules say, as runc and crun append them last. A node of
//! `linux.devices` opens only when a rule allows it (the engine sends one
//! per device, as podman does for `--device`).
//!
//! This is a second fence: the container's `/dev` holds only what hutch
//! made there, and every other mount is `nodev` (docs/oci.md). Where no
//! devices group can be written (a unified host: hutch has no eBPF device
//! program; a v1 hierarchy not writable by this uid) the rules are left
//! to that first fence, as before.

use std::path::Path;

use super::{CgroupPlan, Write, err};
use crate::cgroup::host::HostCgroups;
use crate::cgroup::tree::Cgroup;
use crate::oci::OciError;
use crate::oci::config::{DeviceRule, Linux};

const KEY: &str = "linux.resources.devices";

/// The rules every container's group ends with: mknod of any node (the
/// mounts are `nodev`), the default devices, `/dev/pts/*` and
/// `/dev/pts/ptmx` (`c 5:2`).
const DEFAULT_RULES: &[&str] = &[
    "c *:* m",
    "b *:* m",
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 1:8 rwm",
    "c 1:9 rwm",
    "c 5:0 rwm",
    "c 5:2 rwm",
    "c 136:* rwm",
];

/// One rule as the kernel reads it: `TYPE MAJOR:MINOR ACCESS`.
fn rule_line(at: &str, r: &DeviceRule) -> Result<String, OciError> {
    let kind = match r.kind.as_deref() {
        None | Some("a") => "a",
        Some("c") => "c",
        Some("b") => "b",
        Some(other) => {
            return Err(err(
                format!("{at}.type"),
                format!("{other:?} is not a, c or b"),
            ));
        }
    };
    let number = |field: &str, v: Option<i64>, max: i64| -> Result<String, OciError> {
        match v {
            None | Some(-1) => Ok("*".into()),
            Some(n) if (0..=max).contains(&n) => Ok(n.to_string()),
            Some(n) => Err(err(
                format!("{at}.{field}"),
                format!("{n} is not a device number (0 to {max}, or -1 for any)"),
            )),
        }
    };
    let major = number("major", r.major, 0xfff)?;
    let minor = number("minor", r.minor, 0xfffff)?;
    let access = r.access.as_deref().unwrap_or("rwm");
    let access_ok = !access.is_empty()
        && access.len() <= 3
        && access.bytes().all(|b| b"rwm".contains(&b))
        && !(1..access.len()).any(|i| access.as_bytes()[i..].contains(&access.as_bytes()[i - 1]));
    if !access_ok {
        return Err(err(
            format!("{at}.access"),
            format!("{access:?} is not a set of r, w and m"),
        ));
    }
    // `a` covers every device, whatever the numbers say.
    Ok(if kind == "a" {
        format!("a *:* {access}")
    } else {
        format!("{kind} {major}:{minor} {access}")
    })
}

/// The writes of `linux.resources.devices` (empty when it has no rule).
pub fn writes(rules: &[DeviceRule]) -> Result<Vec<Write>, OciError> {
    if rules.is_empty() {
        return Ok(Vec::new());
    }
    let put = |key: String, allow: bool, value: String| Write {
        key,
        file: if allow {
            "devices.allow"
        } else {
            "devices.deny"
        }
        .into(),
        value,
    };
    let mut out = vec![put(KEY.into(), false, "a".into())];
    for (i, r) in rules.iter().enumerate() {
        let at = format!("{KEY}[{i}]");
        let line = rule_line(&at, r)?;
        out.push(put(at, r.allow, line));
    }
    for line in DEFAULT_RULES {
        out.push(put(KEY.into(), true, (*line).into()));
    }
    Ok(out)
}

/// Whether this uid may make `path` in the v1 devices hierarchy (the
/// deepest existing directory of it is writable: root, or a delegated
/// subtree).
fn v1_writable(host: &HostCgroups, path: &Path) -> bool {
    let Some(h) = host.v1_hierarchy("devices") else {
        return false;
    };
    let mut deepest = Cgroup::new(&h.mount);
    for part in path.iter() {
        let next = deepest.child(&part.to_string_lossy());
        if !next.dir.is_dir() {
            break;
        }
        deepest = next;
    }
    deepest.dir_writable()
}

/// Add the devices group's writes to `plan` (making one for a config
/// whose only resources are device rules) when this host takes the
/// container's groups in v1 hierarchies and its devices hierarchy is
/// writable here; otherwise `plan` as it is.
pub fn add_v1(
    plan: Option<CgroupPlan>,
    linux: &Linux,
    id: &str,
    systemd: bool,
    host: &HostCgroups,
) -> Result<Option<CgroupPlan>, OciError> {
    let rules = linux
        .resources
        .as_ref()
        .map(|r| r.devices.as_slice())
        .unwrap_or_default();
    // Checked on every host: a bad rule is an error wherever it runs.
    let device_writes = writes(rules)?;
    if device_writes.is_empty() || !super::v1::used(host) {
        return Ok(plan);
    }
    let path = super::cgroup_path(linux.cgroups_path.as_deref(), id, systemd)?;
    if !v1_writable(host, &path) {
        return Ok(plan);
    }
    Ok(Some(match plan {
        Some(mut p) => {
            p.writes.extend(device_writes);
            p
        }
        None => CgroupPlan {
            path,
            writes: device_writes,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(allow: bool, kind: &str, major: i64, minor: i64, access: &str) -> DeviceRule {
        DeviceRule {
            allow,
            kind: Some(kind.into()),
            major: Some(major),
            minor: Some(minor),
            access: Some(access.into()),
        }
    }

    #[test]
    fn deny_all_first_then_the_rules_in_order_then_the_defaults() {
        let rules = [
            DeviceRule {
                allow: false,
                access: Some("rwm".into()),
                ..Default::default()
            },
            rule(true, "c", 10, 229, "rwm"),
            rule(true, "b", 8, 20, "rw"),
            rule(false, "c", 10, -1, "w"),
        ];
        let w = writes(&rules).unwrap();
        let lines: Vec<(&str, &str)> = w
            .iter()
            .map(|w| (w.file.as_str(), w.value.as_str()))
            .collect();
        assert_eq!(
            &lines[..5],
            [
                ("devices.deny", "a"),
                ("devices.deny", "a *:* rwm"),
                ("devices.allow", "c 10:229 rwm"),
                ("devices.allow", "b 8:20 rw"),
                ("devices.deny", "c 10:* w"),
            ]
        );
        assert!(lines.contains(&("devices.allow", "c 1:3 rwm")));
        assert_eq!(lines.last(), Some(&("devices.allow", "c 136:* rwm")));
        assert_eq!(w[2].key, "linux.resources.devices[1]");
        assert!(w.iter().all(|w| w.controller() == "devices"));
    }

    #[test]
    fn no_rule_no_write_and_bad_rules_name_their_key() {
        assert!(writes(&[]).unwrap().is_empty());
        for (r, key) in [
            (rule(true, "x", 1, 1, "r"), "devices[0].type"),
            (rule(true, "c", 5000, 1, "r"), "devices[0].major"),
            (rule(true, "c", 1, -2, "r"), "devices[0].minor"),
            (rule(true, "c", 1, 1, "rx"), "devices[0].access"),
            (rule(true, "c", 1, 1, "rr"), "devices[0].access"),
            (rule(true, "c", 1, 1, ""), "devices[0].access"),
        ] {
            let e = writes(&[r]).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
