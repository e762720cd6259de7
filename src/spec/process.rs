//! Shape checks of the namespace, identity and process parts of a Spec
//! (joined namespaces, id maps, groups, umask, sysctls, soft rlimits).

use super::{FsOp, Init, Spec, SpecError};

/// Sysctl prefixes that belong to a namespace (and so never change the
/// host): (prefix, namespace whose own copy the sandbox must have).
const NAMESPACED_SYSCTLS: &[(&str, &str)] = &[
    ("kernel.msgmax", "ipc"),
    ("kernel.msgmnb", "ipc"),
    ("kernel.msgmni", "ipc"),
    ("kernel.sem", "ipc"),
    ("kernel.shmall", "ipc"),
    ("kernel.shmmax", "ipc"),
    ("kernel.shmmni", "ipc"),
    ("kernel.shm_rmid_forced", "ipc"),
    ("fs.mqueue.", "ipc"),
    ("kernel.hostname", "uts"),
    ("kernel.domainname", "uts"),
    ("net.", "net"),
];

/// Most fds a workload inherits (`inherit_fds`, and those
/// `inherit_open_fds` finds).
pub const MAX_INHERIT_FDS: usize = 256;

/// Longest sysctl value hutch writes.
pub const MAX_SYSCTL_VALUE: usize = 4096;

pub(super) fn validate_namespaces(spec: &Spec) -> Result<(), SpecError> {
    let ns = &spec.namespaces;
    let flag = |kind: &str| match kind {
        "user" => ns.user,
        "pid" => ns.pid,
        "ipc" => ns.ipc,
        "uts" => ns.uts,
        "net" => ns.net,
        _ => ns.cgroup,
    };
    for (kind, r) in ns.join.iter() {
        let at = format!("namespaces.join.{kind}");
        // A pid namespace of the sandbox's own inside a joined one
        // (bubblewrap's `--pidns FD --unshare-pid`).
        if flag(kind) && kind != "pid" {
            return Err(SpecError::new(
                at,
                format!("joins an existing {kind} namespace, so namespaces.{kind} must be false"),
            ));
        }
        validate_ref(&at, r)?;
    }
    if let Some(r) = &ns.join.user_after_setup {
        validate_ref("namespaces.join.user_after_setup", r)?;
    }
    if let Some(r) = &ns.join.mount {
        validate_ref("namespaces.join.mount", r)?;
        // A new user namespace owns none of the mounts of a joined mount
        // namespace: setns (and every mount after it) would be EPERM.
        if ns.user {
            return Err(SpecError::new(
                "namespaces.join.mount",
                "a joined mount namespace cannot be used from a user namespace of the sandbox's own (namespaces.user = true): join the user namespace that owns it, or leave the mount namespace out",
            ));
        }
    }
    Ok(())
}

/// A namespace reference: exactly one of an absolute path and an fd.
fn validate_ref(at: &str, r: &crate::spec::NamespaceRef) -> Result<(), SpecError> {
    match (&r.path, r.fd) {
        (Some(p), None) => {
            if !p.is_absolute() {
                return Err(SpecError::new(
                    format!("{at}.path"),
                    format!("{} is not an absolute path", p.display()),
                ));
            }
        }
        (None, Some(fd)) if fd >= 0 => {}
        (None, Some(_)) => {
            return Err(SpecError::new(
                format!("{at}.fd"),
                "must be an open file descriptor (0 or above)",
            ));
        }
        _ => {
            return Err(SpecError::new(at, "give exactly one of `path` and `fd`"));
        }
    }
    Ok(())
}

/// `init = "none"`: the command is pid 1 of a pid namespace of the
/// sandbox's own, and nothing needs hutch init after the exec.
fn validate_init(spec: &Spec) -> Result<(), SpecError> {
    if spec.init != Init::None {
        return Ok(());
    }
    if !spec.namespaces.pid {
        return Err(SpecError::new(
            "init",
            "init = \"none\" makes the command pid 1 of the sandbox's own pid namespace: it needs namespaces.pid = true",
        ));
    }
    if let Some(i) = spec
        .fs
        .iter()
        .position(|op| matches!(op, FsOp::TmpOverlay { .. }))
    {
        return Err(SpecError::new(
            format!("fs[{i}]"),
            "a tmp-overlay's discarded upper is counted by hutch init after the command ends; with init = \"none\" nobody is left to count it (use init = \"hutch\", or an overlay with a host upper)",
        ));
    }
    Ok(())
}

pub(super) fn validate_root_options(options: &[String]) -> Result<(), SpecError> {
    for (i, o) in options.iter().enumerate() {
        if !matches!(
            o.as_str(),
            "nosuid" | "nodev" | "noexec" | "ro" | "rshared" | "runbindable"
        ) {
            return Err(SpecError::new(
                format!("root.options[{i}]"),
                "expected nosuid, nodev, noexec, ro, rshared or runbindable",
            ));
        }
    }
    Ok(())
}

pub(super) fn validate_process(spec: &Spec) -> Result<(), SpecError> {
    validate_init(spec)?;
    let id = &spec.identity;
    match (id.uid_map.is_empty(), id.gid_map.is_empty()) {
        (true, true) => {}
        (false, false) => {
            if !spec.namespaces.user {
                return Err(SpecError::new(
                    "identity.uid_map",
                    "id maps need a user namespace of the sandbox's own (namespaces.user = true)",
                ));
            }
            for (key, map) in [("uid_map", &id.uid_map), ("gid_map", &id.gid_map)] {
                check_map(key, map)?;
            }
        }
        _ => {
            return Err(SpecError::new(
                "identity.uid_map",
                "give both uid_map and gid_map, or neither",
            ));
        }
    }
    if let Some(groups) = &id.groups
        && groups.len() > 64
    {
        return Err(SpecError::new(
            "identity.groups",
            "at most 64 supplementary groups",
        ));
    }
    if spec.inherit_fds.len() > MAX_INHERIT_FDS {
        return Err(SpecError::new(
            "inherit_fds",
            format!("at most {MAX_INHERIT_FDS} fds"),
        ));
    }
    for (i, &fd) in spec.inherit_fds.iter().enumerate() {
        if fd < 3 {
            return Err(SpecError::new(
                format!("inherit_fds[{i}]"),
                "must be 3 or above (stdin, stdout and stderr are always the workload's)",
            ));
        }
        if spec.inherit_fds[..i].contains(&fd) {
            return Err(SpecError::new(
                format!("inherit_fds[{i}]"),
                format!("fd {fd} is listed twice"),
            ));
        }
    }
    if spec.umask.is_some_and(|m| m > 0o777) {
        return Err(SpecError::new("umask", "must be at most 0o777"));
    }
    if spec
        .limits
        .oom_score_adj
        .is_some_and(|v| !(-1000..=1000).contains(&v))
    {
        return Err(SpecError::new(
            "limits.oom_score_adj",
            "must be -1000 to 1000",
        ));
    }
    for (name, soft) in &spec.limits.rlimits_soft {
        let at = format!("limits.rlimits_soft.{}", super::key_path::key_segment(name));
        match spec.limits.rlimits.get(name) {
            None => {
                return Err(SpecError::new(
                    at,
                    "a soft value needs the hard value in limits.rlimits",
                ));
            }
            Some(hard) if soft > hard => {
                return Err(SpecError::new(
                    at,
                    format!("soft value {soft} is above the hard value {hard}"),
                ));
            }
            _ => {}
        }
    }
    if spec.security.capabilities.is_some() && !spec.security.cap_add.is_empty() {
        return Err(SpecError::new(
            "security.capabilities",
            "give either security.capabilities or security.cap_add",
        ));
    }
    for (key, value) in &spec.sysctl {
        check_sysctl(spec, key, value)?;
    }
    Ok(())
}

fn check_map(key: &str, map: &[super::IdMapping]) -> Result<(), SpecError> {
    if map.len() > 340 {
        return Err(SpecError::new(
            format!("identity.{key}"),
            "at most 340 lines (the kernel's limit)",
        ));
    }
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for (i, m) in map.iter().enumerate() {
        let at = format!("identity.{key}[{i}]");
        let (inside, host, count) = (u64::from(m.inside), u64::from(m.host), u64::from(m.count));
        if count == 0 || inside + count > 1 << 32 || host + count > 1 << 32 {
            return Err(SpecError::new(
                at,
                "count must be above 0 and the range must fit in 32-bit ids",
            ));
        }
        if ranges
            .iter()
            .any(|(s, n)| inside < s + n && *s < inside + count)
        {
            return Err(SpecError::new(at, "overlaps an earlier line inside"));
        }
        ranges.push((inside, count));
    }
    Ok(())
}

fn check_sysctl(spec: &Spec, key: &str, value: &str) -> Result<(), SpecError> {
    let at = format!("sysctl.{}", super::key_path::key_segment(key));
    let well_formed = !key.is_empty()
        && key.len() <= 256
        && key.split('.').all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
        });
    if !well_formed {
        return Err(SpecError::new(
            at,
            "a sysctl name is dot-separated words of letters, digits, '_' and '-'",
        ));
    }
    let Some((_, ns)) = NAMESPACED_SYSCTLS.iter().find(|(p, _)| {
        if p.ends_with('.') {
            key.starts_with(p)
        } else {
            key == *p
        }
    }) else {
        return Err(SpecError::new(
            at,
            "not a namespaced sysctl: writing it would change the host",
        ));
    };
    let ours = match *ns {
        "ipc" => spec.namespaces.ipc || spec.namespaces.join.ipc.is_some(),
        "uts" => spec.namespaces.uts || spec.namespaces.join.uts.is_some(),
        _ => spec.namespaces.net || spec.namespaces.join.net.is_some(),
    };
    if !ours {
        return Err(SpecError::new(
            at,
            format!(
                "needs a {ns} namespace other than the launcher's (namespaces.{ns} = true or namespaces.join.{ns})"
            ),
        ));
    }
    if value.len() > MAX_SYSCTL_VALUE || value.contains('\n') {
        return Err(SpecError::new(
            at,
            format!("the value must be one line of at most {MAX_SYSCTL_VALUE} bytes"),
        ));
    }
    Ok(())
}
