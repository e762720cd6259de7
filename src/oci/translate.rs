//! `config.json` → [`Spec`]: every property hutch reads is translated,
//! every property it cannot enforce is refused by its key path
//! (`linux.resources.pids.limit: ...`), nothing is ignored silently. The
//! differences from runc are listed in docs/oci.md.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use super::OciError;
use super::config::{Config, Linux, Mount, Process};
use crate::spec::{
    CapabilitySets, FsOp, IdMapping, NamespaceRef, Network, ProxyPolicy, RootDir, Spec,
};

/// A bundle's config as hutch runs it.
#[derive(Debug, Clone)]
pub struct Translated {
    pub spec: Spec,
    /// `process.terminal`: the console socket gets the terminal.
    pub terminal: bool,
    /// `run.hutch.status-file`: the start event and exit report go there.
    pub status_file: Option<PathBuf>,
    /// `linux.seccomp` as a hutch profile (JSON): the runtime writes it to
    /// the container's state directory and points `security.seccomp` at it.
    pub seccomp_profile: Option<String>,
    /// A CRI pod's container other than its sandbox: its egress is the
    /// sandbox's, checked and joined at `create` ([`super::pod`]).
    pub pod_member: Option<super::pod::Member>,
}

/// The annotations hutch reads (every other `run.hutch.*` is refused, so
/// that a typo never runs a container with less confinement than asked).
pub const ANNOTATIONS: &[&str] = &[
    "run.hutch.egress.allow",
    "run.hutch.egress.allow-address",
    "run.hutch.landlock",
    "run.hutch.seccomp",
    "run.hutch.status-file",
];

/// The device nodes every container gets (runtime-spec `config-linux.md`,
/// "Default Devices"): (path, major, minor).
const DEFAULT_DEVICES: &[(&str, u32, u32)] = &[
    ("/dev/null", 1, 3),
    ("/dev/zero", 1, 5),
    ("/dev/full", 1, 7),
    ("/dev/random", 1, 8),
    ("/dev/urandom", 1, 9),
    ("/dev/tty", 5, 0),
];

/// The symlinks every container's /dev gets: (path, target).
const DEFAULT_LINKS: &[(&str, &str)] = &[
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
    ("/dev/ptmx", "pts/ptmx"),
];

fn err(key: impl Into<String>, message: impl Into<String>) -> OciError {
    OciError::Config {
        key: key.into(),
        message: message.into(),
    }
}

fn unsupported(key: &str) -> OciError {
    err(key, "not supported by hutch-oci (see docs/oci.md)")
}

/// An absolute path inside the container: absolute, no `..`.
fn container_path(key: &str, p: &str) -> Result<PathBuf, OciError> {
    let path = Path::new(p);
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(err(key, "must be an absolute path without `..`"));
    }
    if p.len() > 4096 || p.contains('\0') {
        return Err(err(key, "not a usable path"));
    }
    Ok(path.to_path_buf())
}

/// A host path of the config: absolute as given, or relative to the bundle.
fn host_path(key: &str, bundle: &Path, p: &str) -> Result<PathBuf, OciError> {
    if p.is_empty() || p.len() > 4096 || p.contains('\0') {
        return Err(err(key, "not a usable path"));
    }
    let path = Path::new(p);
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(err(
            key,
            "a path relative to the bundle must stay inside it (no `..`)",
        ));
    }
    Ok(bundle.join(path))
}

/// Where `run.hutch.status-file = value` writes: a file directly in the
/// bundle directory, named bare (`status.jsonl`) or by its absolute path.
/// An annotation can come from whoever an engine lets set them (a pod's
/// author, with containerd's `pod_annotations`), while the keeper writes as
/// the runtime (root): so it never chooses where on the host that is.
fn status_file_in(key: &str, bundle: &Path, value: &str) -> Result<PathBuf, OciError> {
    use std::path::Component;
    let p = Path::new(value);
    let name = match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) if parent == Path::new("") || parent == bundle => name,
        _ => {
            return Err(err(
                key,
                "must name a file directly in the bundle directory (NAME or BUNDLE/NAME): an annotation does not choose where on the host the runtime writes",
            ));
        }
    };
    // (`Path` compares by components, so BUNDLE/./NAME is BUNDLE/NAME.)
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(err(key, "must not hold `..` components"));
    }
    Ok(bundle.join(name))
}

/// Translate `cfg` (from the bundle at `bundle`, an absolute path).
pub fn translate(cfg: &Config, bundle: &Path) -> Result<Translated, OciError> {
    if !cfg.oci_version.starts_with("1.") {
        return Err(err(
            "ociVersion",
            format!(
                "hutch-oci reads runtime-spec {}..{}",
                super::config::OCI_VERSION_MIN,
                super::config::OCI_VERSION_MAX
            ),
        ));
    }
    for (key, v) in [
        ("solaris", &cfg.solaris),
        ("windows", &cfg.windows),
        ("vm", &cfg.vm),
        ("zos", &cfg.zos),
    ] {
        if v.is_some() {
            return Err(unsupported(key));
        }
    }
    // Hooks are run by the lifecycle (super::hooks), resources by
    // super::resources: neither is part of the Spec.
    let mut spec = Spec::default();
    let process = cfg.process.as_ref().ok_or_else(|| {
        err(
            "process",
            "required: hutch-oci runs one process per container",
        )
    })?;
    let terminal = process.terminal;
    translate_process(process, &mut spec)?;

    let root = cfg.root.as_ref().ok_or_else(|| err("root", "required"))?;
    if root.path.is_empty() {
        return Err(err("root.path", "required"));
    }
    // No device cgroup: a device node is usable only where hutch made it
    // (the default set and linux.devices, each a mount of its own). The
    // root, binds and tmpfs mounts are nodev, so a node an image ships or
    // a workload with CAP_MKNOD makes opens nothing.
    let mut root_dir = RootDir::new(host_path("root.path", bundle, &root.path)?);
    root_dir.options.push("nodev".into());
    // rootfsPropagation shared: among the container's own mounts, never
    // with the host's (spec::RootDir's `rshared`).
    match cfg
        .linux
        .as_ref()
        .and_then(|l| l.rootfs_propagation.as_deref())
    {
        Some("shared" | "rshared") => root_dir.options.push("rshared".into()),
        Some("unbindable" | "runbindable") => root_dir.options.push("runbindable".into()),
        _ => {}
    }
    spec.root = Some(root_dir);
    spec.root_readonly = root.readonly;

    let linux = cfg.linux.clone().unwrap_or_default();
    translate_namespaces(&linux, &mut spec)?;
    if let Some(h) = &cfg.hostname
        && !h.is_empty()
    {
        if !(spec.namespaces.uts || spec.namespaces.join.uts.is_some()) {
            return Err(err(
                "hostname",
                "needs a uts namespace of the container's own",
            ));
        }
        spec.identity.hostname = Some(h.clone());
    }
    if let Some(d) = &cfg.domainname
        && !d.is_empty()
    {
        spec.sysctl.insert("kernel.domainname".into(), d.clone());
    }
    for (i, m) in cfg.mounts.iter().enumerate() {
        spec.fs
            .push(translate_mount(&format!("mounts[{i}]"), m, bundle)?);
    }
    translate_devices(&linux, &mut spec)?;
    for (i, p) in linux.masked_paths.iter().enumerate() {
        let dest = container_path(&format!("linux.maskedPaths[{i}]"), p)?;
        spec.fs.push(FsOp::Mask { dest });
    }
    for (i, p) in linux.readonly_paths.iter().enumerate() {
        let dest = container_path(&format!("linux.readonlyPaths[{i}]"), p)?;
        spec.fs.push(FsOp::ReadonlyPath { dest });
    }
    translate_linux_rest(&linux, &mut spec)?;
    for (k, v) in &linux.sysctl {
        spec.sysctl.insert(k.clone(), v.clone());
    }

    let mut status_file = None;
    spec.security.seccomp = "default".into();
    let mut seccomp_chosen = false;
    for (key, value) in &cfg.annotations {
        if !key.starts_with("run.hutch.") {
            continue;
        }
        let at = format!("annotations.{key}");
        match key.as_str() {
            // Applied after the loop: the pod's role decides how.
            "run.hutch.egress.allow" => {}
            "run.hutch.egress.allow-address" => {
                for a in super::pod::list(value) {
                    crate::net::addr::parse_allowed(&a).map_err(|e| err(&at, e))?;
                }
            }
            "run.hutch.landlock" => {
                let ll = &mut spec.security.landlock;
                match value.as_str() {
                    "off" => ll.enabled = false,
                    "best-effort" => {
                        ll.enabled = true;
                        ll.min_abi = None;
                    }
                    v => match v
                        .strip_prefix("min-abi=")
                        .and_then(|n| n.parse::<u32>().ok())
                    {
                        Some(n) if (1..=64).contains(&n) => {
                            ll.enabled = true;
                            ll.min_abi = Some(n);
                        }
                        _ => return Err(err(at, "expected off, best-effort or min-abi=N")),
                    },
                }
            }
            "run.hutch.seccomp" => {
                if value.is_empty() || value.len() > 4096 {
                    return Err(err(at, "expected a hutch seccomp profile name or path"));
                }
                spec.security.seccomp = value.clone();
                seccomp_chosen = true;
            }
            "run.hutch.status-file" => status_file = Some(status_file_in(&at, bundle, value)?),
            _ => {
                return Err(err(
                    at,
                    format!(
                        "unknown hutch annotation; known: {}",
                        ANNOTATIONS.join(", ")
                    ),
                ));
            }
        }
    }
    let pod_member = egress(&cfg.annotations, &mut spec)?;
    // The config's profile, unless an annotation chose hutch's own; without
    // one, hutch's `default` profile.
    let mut seccomp_profile = None;
    if let Some(s) = &linux.seccomp
        && !seccomp_chosen
    {
        match super::seccomp::profile(s)? {
            Some(json) => seccomp_profile = Some(json),
            None => spec.security.seccomp = "unconfined".into(),
        }
    }
    Ok(Translated {
        spec,
        terminal,
        status_file,
        seccomp_profile,
        pod_member,
    })
}

/// The egress annotations: a container of its own (or a CRI pod's
/// sandbox) gets an empty network namespace of its own plus the proxy
/// doors, not the engine's network; another container of a CRI pod stays
/// in the namespace the engine gave it (its sandbox's) and gets the proxy
/// variables, the rest at `create` ([`super::pod::join`]).
fn egress(
    annotations: &BTreeMap<String, String>,
    spec: &mut Spec,
) -> Result<Option<super::pod::Member>, OciError> {
    use super::pod::{ALLOW, ALLOW_ADDRESS, Egress, Role};
    let egress = Egress::of(annotations);
    if egress.is_none() && annotations.contains_key(ALLOW_ADDRESS) {
        return Err(err(
            format!("annotations.{ALLOW_ADDRESS}"),
            format!("widens an egress allow-list, and there is none: set {ALLOW} too"),
        ));
    }
    if let Role::Member { sandbox_id } = super::pod::role(annotations) {
        if egress.is_some() {
            let chosen = |k: &str| spec.env.contains_key(k);
            let vars = crate::net::proxy_env(chosen);
            spec.env.extend(vars);
        }
        return Ok(Some(super::pod::Member { sandbox_id, egress }));
    }
    if let Some(e) = egress {
        spec.network = Network::Proxy(ProxyPolicy {
            allow: e.allow,
            allow_address: e.allow_address,
            ..ProxyPolicy::default()
        });
        spec.namespaces.net = true;
        spec.namespaces.join.net = None;
        // Its own namespace now: Landlock's TCP rule follows it.
        spec.security.landlock.network = true;
    }
    Ok(None)
}

fn translate_process(p: &Process, spec: &mut Spec) -> Result<(), OciError> {
    if p.args.is_empty() {
        return Err(err("process.args", "required: at least the program"));
    }
    if p.command_line.is_some() {
        return Err(unsupported("process.commandLine"));
    }
    spec.command = p.args.clone();
    let mut env = BTreeMap::new();
    for (i, kv) in p.env.iter().enumerate() {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(err(format!("process.env[{i}]"), "expected NAME=VALUE"));
        };
        env.insert(k.to_string(), v.to_string());
    }
    spec.env = env;
    spec.cwd = Some(container_path("process.cwd", &p.cwd)?);
    let u = &p.user;
    if u.username.is_some() {
        return Err(unsupported("process.user.username"));
    }
    spec.identity.uid = Some(u.uid);
    spec.identity.gid = Some(u.gid);
    spec.identity.groups = Some(u.additional_gids.clone());
    spec.umask = u.umask;
    let caps = p.capabilities.clone().unwrap_or_default();
    // The kernel raises an ambient capability only when it is permitted
    // and inheritable too; runc warns and goes on without the others
    // (`runc spec`'s own config lists ambient ones that are not
    // inheritable). Leaving them out only ever means fewer capabilities.
    let ambient = caps
        .ambient
        .iter()
        .filter(|c| caps.inheritable.contains(c) && caps.permitted.contains(c))
        .cloned()
        .collect();
    spec.security.capabilities = Some(CapabilitySets {
        bounding: caps.bounding,
        effective: caps.effective,
        permitted: caps.permitted,
        inheritable: caps.inheritable,
        ambient,
    });
    for (i, r) in p.rlimits.iter().enumerate() {
        let at = format!("process.rlimits[{i}]");
        let name = r
            .kind
            .strip_prefix("RLIMIT_")
            .map(str::to_ascii_lowercase)
            .filter(|n| crate::cgroup::rlimits::resource(n).is_some())
            .ok_or_else(|| err(format!("{at}.type"), "not an rlimit hutch knows"))?;
        if r.soft > r.hard {
            return Err(err(at, "soft is above hard"));
        }
        spec.limits.rlimits.insert(name.clone(), r.hard);
        if r.soft != r.hard {
            spec.limits.rlimits_soft.insert(name, r.soft);
        }
    }
    spec.security.no_new_privs = p.no_new_privileges;
    spec.limits.oom_score_adj = p.oom_score_adj;
    for (key, set) in [
        (
            "process.apparmorProfile",
            p.apparmor_profile.as_ref().is_some_and(|s| !s.is_empty()),
        ),
        (
            "process.selinuxLabel",
            p.selinux_label.as_ref().is_some_and(|s| !s.is_empty()),
        ),
        ("process.ioPriority", p.io_priority.is_some()),
        ("process.scheduler", p.scheduler.is_some()),
        ("process.execCPUAffinity", p.exec_cpu_affinity.is_some()),
    ] {
        if set {
            return Err(unsupported(key));
        }
    }
    Ok(())
}

/// Whether the host enforces or audits SELinux labels (selinuxfs mounted,
/// as libselinux's `is_selinux_enabled` checks).
fn selinux_enabled() -> bool {
    Path::new("/sys/fs/selinux/enforce").exists()
}

fn translate_namespaces(linux: &Linux, spec: &mut Spec) -> Result<(), OciError> {
    let ns = &mut spec.namespaces;
    // Only what the config lists; a mount namespace always.
    ns.user = false;
    ns.pid = false;
    ns.ipc = false;
    ns.uts = false;
    ns.net = false;
    ns.cgroup = false;
    ns.mount = true;
    let mut seen: Vec<&str> = Vec::new();
    let mut mount_path_at = None;
    for (i, n) in linux.namespaces.iter().enumerate() {
        let at = format!("linux.namespaces[{i}]");
        if seen.contains(&n.kind.as_str()) {
            return Err(err(format!("{at}.type"), "listed twice"));
        }
        seen.push(n.kind.as_str());
        let join = match &n.path {
            Some(p) if !p.is_empty() => Some(NamespaceRef::path(container_path(
                &format!("{at}.path"),
                p,
            )?)),
            _ => None,
        };
        let (flag, slot) = match n.kind.as_str() {
            "pid" => (&mut ns.pid, &mut ns.join.pid),
            "network" => (&mut ns.net, &mut ns.join.net),
            "ipc" => (&mut ns.ipc, &mut ns.join.ipc),
            "uts" => (&mut ns.uts, &mut ns.join.uts),
            "user" => (&mut ns.user, &mut ns.join.user),
            "cgroup" => (&mut ns.cgroup, &mut ns.join.cgroup),
            "mount" => {
                // Joined by hutch init; the launch refuses the runtime's
                // own and pid 1's (docs/oci.md, "Joining a mount namespace").
                if join.is_some() {
                    ns.mount = false;
                    ns.join.mount = join;
                    mount_path_at = Some(format!("{at}.path"));
                }
                continue;
            }
            "time" => return Err(unsupported(&format!("{at} (time)"))),
            _ => return Err(err(format!("{at}.type"), "unknown namespace type")),
        };
        match join {
            Some(r) => *slot = Some(r),
            None => *flag = true,
        }
    }
    if let Some(at) = mount_path_at {
        // Other processes live in a joined mount namespace: `kill --all`
        // and `delete` tell the container's from them by a pid namespace
        // of its own, never by the mount namespace (super::procs).
        if !ns.pid {
            return Err(err(
                at,
                "joining a mount namespace by path needs a pid namespace of the container's own (a `pid` entry without `path`): kill --all and delete tell the container's processes from the namespace's other ones by it",
            ));
        }
        // A user namespace made for the container owns none of the joined
        // namespace's mounts: setns, and every mount, would be EPERM.
        if ns.user {
            return Err(err(
                at,
                "joining a mount namespace by path cannot go with a user namespace of the container's own (join the user namespace that owns the mount namespace by path instead)",
            ));
        }
    }
    spec.network = if ns.net { Network::None } else { Network::Host };
    if !ns.net && ns.join.net.is_none() {
        // The engine chose the host's network for the container (no
        // network namespace in the config): its TCP is the engine's
        // business, as in a joined namespace; `hutch run --share-net`'s
        // no-bind rule is for a caller that did not choose it this way.
        spec.security.landlock.network = false;
    }
    if ns.user {
        if linux.uid_mappings.is_empty() || linux.gid_mappings.is_empty() {
            return Err(err(
                "linux.uidMappings",
                "a user namespace of the container's own needs uidMappings and gidMappings",
            ));
        }
        let map = |m: &[super::config::IdMapping]| {
            m.iter()
                .map(|m| IdMapping::new(m.container_id, m.host_id, m.size))
                .collect()
        };
        spec.identity.uid_map = map(&linux.uid_mappings);
        spec.identity.gid_map = map(&linux.gid_mappings);
    } else if !linux.uid_mappings.is_empty() || !linux.gid_mappings.is_empty() {
        return Err(err(
            "linux.uidMappings",
            "id mappings need a user namespace of the container's own",
        ));
    }
    Ok(())
}

fn translate_mount(at: &str, m: &Mount, bundle: &Path) -> Result<FsOp, OciError> {
    let dest = container_path(&format!("{at}.destination"), &m.destination)?;
    if m.uid_mappings.is_some() || m.gid_mappings.is_some() {
        return Err(unsupported(&format!("{at}.uidMappings")));
    }
    let is_bind =
        m.kind.as_deref() == Some("bind") || m.options.iter().any(|o| o == "bind" || o == "rbind");
    let fstype = if is_bind {
        "bind".to_string()
    } else {
        match m.kind.as_deref() {
            Some("cgroup") | Some("cgroup2") => "cgroup2".into(),
            Some(t) if crate::spec::mount::FSTYPES.contains(&t) => t.to_string(),
            Some(_) => {
                return Err(err(
                    format!("{at}.type"),
                    "a filesystem type hutch-oci does not mount",
                ));
            }
            None => {
                return Err(err(
                    format!("{at}.type"),
                    "required unless the options say bind",
                ));
            }
        }
    };
    let mut options = m.options.clone();
    if is_bind {
        // A bind takes no filesystem data: runc passes it to mount(2),
        // which ignores it with MS_BIND (podman sends `mode=`/`size=`).
        options.retain(|o| !o.contains('='));
    }
    // Last, so that it wins over a `dev` (see the root above).
    if fstype == "bind" || fstype == "tmpfs" {
        options.push("nodev".into());
    }
    if fstype != "bind" {
        // devpts always gets a new instance; `newinstance` is implied.
        options.retain(|o| o != "newinstance" || fstype == "devpts");
    }
    crate::spec::mount::parse_options(&fstype, &options)
        .map_err(|e| err(format!("{at}.options"), e))?;
    let src = if fstype == "bind" {
        let s = m
            .source
            .as_deref()
            .ok_or_else(|| err(format!("{at}.source"), "a bind mount needs a source"))?;
        Some(host_path(&format!("{at}.source"), bundle, s)?)
    } else {
        // Shown as the mount's source in mountinfo (runc passes it to
        // mount(2)): `shm` for /dev/shm.
        // A name mountinfo could not show as it is (whitespace, over 255
        // bytes) is left out: the type is shown instead.
        m.source
            .as_deref()
            .filter(|s| (1..=255).contains(&s.len()) && !s.bytes().any(|b| b.is_ascii_whitespace()))
            .map(PathBuf::from)
    };
    Ok(FsOp::Mount {
        fstype,
        src,
        dest,
        options,
        optional: false,
    })
}

fn translate_devices(linux: &Linux, spec: &mut Spec) -> Result<(), OciError> {
    let listed: Vec<&str> = linux.devices.iter().map(|d| d.path.as_str()).collect();
    for (path, major, minor) in DEFAULT_DEVICES {
        if listed.contains(path) {
            continue;
        }
        spec.fs.push(FsOp::Device {
            dest: PathBuf::from(path),
            kind: "char".into(),
            major: *major,
            minor: *minor,
            mode: Some(0o666),
            uid: None,
            gid: None,
        });
    }
    for (i, d) in linux.devices.iter().enumerate() {
        let at = format!("linux.devices[{i}]");
        let kind = match d.kind.as_str() {
            "c" | "u" => "char",
            "b" => "block",
            "p" => "fifo",
            _ => return Err(err(format!("{at}.type"), "expected c, u, b or p")),
        };
        let num = |key: &str, v: i64| {
            u32::try_from(v).map_err(|_| err(format!("{at}.{key}"), "out of range"))
        };
        spec.fs.push(FsOp::Device {
            dest: container_path(&format!("{at}.path"), &d.path)?,
            kind: kind.into(),
            major: num("major", d.major)?,
            minor: num("minor", d.minor)?,
            mode: Some(d.file_mode.unwrap_or(0o666) & 0o777),
            uid: d.uid,
            gid: d.gid,
        });
    }
    for (path, target) in DEFAULT_LINKS {
        spec.fs.push(FsOp::Symlink {
            target: PathBuf::from(target),
            dest: PathBuf::from(path),
        });
    }
    Ok(())
}

fn translate_linux_rest(linux: &Linux, _spec: &mut Spec) -> Result<(), OciError> {
    for (key, set) in [
        ("linux.timeOffsets", linux.time_offsets.is_some()),
        ("linux.intelRdt", linux.intel_rdt.is_some()),
        ("linux.personality", linux.personality.is_some()),
        ("linux.memoryPolicy", linux.memory_policy.is_some()),
        ("linux.netDevices", linux.net_devices.is_some()),
        // A label means nothing where SELinux is off (crun ignores it
        // there too); where it is on, hutch-oci cannot apply it.
        (
            "linux.mountLabel",
            linux.mount_label.as_ref().is_some_and(|s| !s.is_empty()) && selinux_enabled(),
        ),
    ] {
        if set {
            return Err(unsupported(key));
        }
    }
    match linux.rootfs_propagation.as_deref() {
        None | Some("") | Some("private" | "rprivate" | "slave" | "rslave") => {}
        Some("shared" | "rshared" | "unbindable" | "runbindable") => {}
        Some(_) => {
            return Err(err(
                "linux.rootfsPropagation",
                "expected private, slave, shared or unbindable",
            ));
        }
    }
    // linux.resources is the container's cgroup (super::resources). Device
    // access is what the container's /dev holds (the default set and
    // linux.devices); a device cgroup rule is not needed for that.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of the runtime spec's own example (config.md), trimmed
    /// to what a Linux container without hooks or cgroup limits holds.
    const EXAMPLE: &str = r#"{
        "ociVersion": "1.0.1",
        "process": {
            "terminal": true,
            "user": {"uid": 1, "gid": 1, "additionalGids": [5, 6], "umask": 18},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {
                "bounding": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "permitted": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "inheritable": ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"],
                "effective": ["CAP_AUDIT_WRITE", "CAP_KILL"],
                "ambient": ["CAP_NET_BIND_SERVICE"]
            },
            "rlimits": [{"type": "RLIMIT_CORE", "hard": 1024, "soft": 1024},
                        {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 512}],
            "noNewPrivileges": true,
            "oomScoreAdj": 100
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "slartibartfast",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/data", "type": "bind", "source": "volumes/data", "options": ["rbind", "ro"]}
        ],
        "linux": {
            "devices": [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438, "uid": 0, "gid": 0}],
            "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 32000}],
            "gidMappings": [{"containerID": 0, "hostID": 1000, "size": 32000}],
            "sysctl": {"net.ipv4.ip_forward": "1", "net.core.somaxconn": "256"},
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"},
                           {"type": "mount"}, {"type": "user"}, {"type": "cgroup"}],
            "maskedPaths": ["/proc/kcore"],
            "readonlyPaths": ["/proc/sys"],
            "rootfsPropagation": "slave"
        },
        "annotations": {"com.example.key1": "value1"}
    }"#;

    fn config(text: &str) -> Config {
        serde_json::from_str(text).unwrap()
    }

    fn t(c: &Config) -> Result<Translated, OciError> {
        translate(c, Path::new("/bundle"))
    }

    #[test]
    fn the_runtime_spec_example_becomes_a_valid_spec() {
        let tr = t(&config(EXAMPLE)).unwrap();
        let s = &tr.spec;
        assert!(tr.terminal);
        assert_eq!(s.root.as_ref().unwrap().path, Path::new("/bundle/rootfs"));
        assert!(s.root_readonly);
        assert_eq!(s.command, ["sh"]);
        assert_eq!(s.env["TERM"], "xterm");
        assert_eq!((s.identity.uid, s.identity.gid), (Some(1), Some(1)));
        assert_eq!(s.identity.groups, Some(vec![5, 6]));
        assert_eq!(s.umask, Some(0o22));
        assert_eq!(s.identity.uid_map, [IdMapping::new(0, 1000, 32000)]);
        assert_eq!(s.limits.rlimits["nofile"], 1024);
        assert_eq!(s.limits.rlimits_soft["nofile"], 512);
        assert!(!s.limits.rlimits_soft.contains_key("core"));
        assert_eq!(s.limits.oom_score_adj, Some(100));
        let caps = s.security.capabilities.as_ref().unwrap();
        assert_eq!(caps.ambient, ["CAP_NET_BIND_SERVICE"]);
        assert!(s.namespaces.user && s.namespaces.net && s.namespaces.cgroup);
        assert_eq!(s.network, Network::None);
        assert_eq!(s.sysctl["net.core.somaxconn"], "256");
        let data =
            s.fs.iter()
                .find(|op| op.dest() == Path::new("/data"))
                .unwrap();
        assert!(matches!(data, FsOp::Mount { fstype, src: Some(src), .. }
            if fstype == "bind" && src == Path::new("/bundle/volumes/data")));
        assert!(s.fs.iter().any(|op| matches!(
            op,
            FsOp::Device {
                major: 10,
                minor: 229,
                ..
            }
        )));
        assert!(s.fs.iter().any(|op| matches!(
            op,
            FsOp::Device {
                major: 1,
                minor: 3,
                ..
            }
        )));
        assert!(matches!(s.fs.last(), Some(FsOp::ReadonlyPath { .. })));
        crate::spec::validate(s).unwrap();
        // An ambient capability that is not inheritable is left out.
        let mut c = config(EXAMPLE);
        let caps = c.process.as_mut().unwrap().capabilities.as_mut().unwrap();
        caps.inheritable.clear();
        let tr = t(&c).unwrap();
        assert!(tr.spec.security.capabilities.unwrap().ambient.is_empty());
    }

    #[test]
    fn hostile_and_unenforceable_configs_are_refused_by_key() {
        let base: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        let cases: &[(&str, serde_json::Value, &str)] = &[
            ("/mounts/3/source", "../../etc".into(), "mounts[3].source"),
            (
                "/mounts/0/destination",
                "proc".into(),
                "mounts[0].destination",
            ),
            (
                "/mounts/0/destination",
                "/a/../../b".into(),
                "mounts[0].destination",
            ),
            (
                "/mounts/1/options/0",
                "context=x".into(),
                "mounts[1].options",
            ),
            ("/root/path", "../outside".into(), "root.path"),
            (
                "/linux/namespaces/0/type",
                "time".into(),
                "linux.namespaces[0]",
            ),
            (
                "/linux/namespaces/1/type",
                "pid".into(),
                "linux.namespaces[1].type",
            ),
            (
                "/linux/devices/0/major",
                (-1).into(),
                "linux.devices[0].major",
            ),
            ("/linux/devices/0/type", "x".into(), "linux.devices[0].type"),
            (
                "/process/rlimits/0/type",
                "RLIMIT_BOGUS".into(),
                "process.rlimits[0].type",
            ),
            ("/process/env/0", "NOEQUALS".into(), "process.env[0]"),
            ("/process/args", serde_json::json!([]), "process.args"),
            ("/ociVersion", "2.0.0".into(), "ociVersion"),
            (
                "/linux/rootfsPropagation",
                "public".into(),
                "linux.rootfsPropagation",
            ),
        ];
        for (pointer, value, key) in cases {
            let mut v = base.clone();
            *v.pointer_mut(pointer).unwrap() = value.clone();
            let c: Config = serde_json::from_value(v).unwrap();
            let e = t(&c).expect_err(key).to_string();
            assert!(e.contains(key), "{pointer}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let mut c = config(EXAMPLE);
        c.linux.as_mut().unwrap().uid_mappings.clear();
        assert!(t(&c).unwrap_err().to_string().contains("linux.uidMappings"));
        c = config(EXAMPLE);
        c.annotations
            .insert("run.hutch.landlock".into(), "sometimes".into());
        assert!(
            t(&c)
                .unwrap_err()
                .to_string()
                .contains("run.hutch.landlock")
        );
        c = config(EXAMPLE);
        c.annotations
            .insert("run.hutch.egress.allow".into(), "pypi.org".into());
        let tr = t(&c).unwrap();
        assert!(matches!(&tr.spec.network, Network::Proxy(p) if p.allow == ["pypi.org"]));
    }

    /// The engine's host network (no network namespace in the config):
    /// Landlock leaves its TCP alone (a host-network server listens), as
    /// in a joined namespace; an egress annotation gives the container a
    /// namespace of its own, and the TCP rule follows it again.
    #[test]
    fn a_host_network_container_keeps_its_tcp() {
        let mut c = config(&EXAMPLE.replace(r#"{"type": "network"}, "#, ""));
        let s = t(&c).unwrap().spec;
        assert_eq!(s.network, Network::Host);
        assert!(!s.security.landlock.network);
        assert!(t(&config(EXAMPLE)).unwrap().spec.security.landlock.network);
        c.annotations
            .insert("run.hutch.egress.allow".into(), "pypi.org".into());
        assert!(t(&c).unwrap().spec.security.landlock.network);
    }

    /// `run.hutch.egress.allow-address` widens the proxy's policy; a CRI
    /// pod's container other than its sandbox stays in the namespace the
    /// engine gave it (its sandbox's) with the proxy variables, while the
    /// sandbox gets the proxy.
    #[test]
    fn egress_annotations_of_a_pod_and_of_a_single_container() {
        let mut c = config(EXAMPLE);
        c.annotations
            .insert("run.hutch.egress.allow".into(), "localhost:8080".into());
        c.annotations.insert(
            "run.hutch.egress.allow-address".into(),
            "127.0.0.1, ::1/128".into(),
        );
        let tr = t(&c).unwrap();
        assert!(matches!(&tr.spec.network, Network::Proxy(p)
            if p.allow == ["localhost:8080"] && p.allow_address == ["127.0.0.1", "::1/128"]));
        assert!(tr.pod_member.is_none());

        let mut sandbox = c.clone();
        sandbox
            .annotations
            .insert("io.kubernetes.cri.container-type".into(), "sandbox".into());
        assert_eq!(t(&sandbox).unwrap().spec.network, tr.spec.network);

        let mut member = c.clone();
        member.annotations.extend([
            ("io.kubernetes.cri.container-type".into(), "container".into()),
            ("io.kubernetes.cri.sandbox-id".into(), "pause1".into()),
        ]);
        let ns = member.linux.as_mut().unwrap();
        let net = ns.namespaces.iter_mut().find(|n| n.kind == "network").unwrap();
        net.path = Some("/proc/42/ns/net".into());
        let m = t(&member).unwrap();
        assert_eq!(
            m.spec.namespaces.join.net,
            Some(NamespaceRef::path("/proc/42/ns/net"))
        );
        assert!(!matches!(m.spec.network, Network::Proxy(_)));
        assert_eq!(m.spec.env["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(m.spec.env["no_proxy"], "localhost,127.0.0.1,::1");
        let pm = m.pod_member.unwrap();
        assert_eq!(pm.sandbox_id, "pause1");
        assert_eq!(
            pm.egress.unwrap().allow_address,
            ["127.0.0.1", "::1/128"]
        );

        // A bad address, or addresses without an allow-list.
        let mut bad = c.clone();
        bad.annotations.insert(
            "run.hutch.egress.allow-address".into(),
            "127.0.0.1,localhost".into(),
        );
        let e = t(&bad).unwrap_err().to_string();
        assert!(e.contains("annotations.run.hutch.egress.allow-address") && e.contains("localhost"), "{e}");
        let mut alone = config(EXAMPLE);
        alone
            .annotations
            .insert("run.hutch.egress.allow-address".into(), "10.0.0.0/8".into());
        let e = t(&alone).unwrap_err().to_string();
        assert!(e.contains("set run.hutch.egress.allow too"), "{e}");
    }

    #[test]
    fn an_annotation_writes_its_status_file_only_in_the_bundle() {
        let status = |v: &str| {
            let mut c = config(EXAMPLE);
            c.annotations
                .insert("run.hutch.status-file".into(), v.into());
            t(&c).map(|tr| tr.status_file.unwrap())
        };
        assert_eq!(
            status("status.jsonl").unwrap(),
            Path::new("/bundle/status.jsonl")
        );
        for same in ["/bundle/status.jsonl", "/bundle/./status.jsonl"] {
            assert_eq!(status(same).unwrap(), Path::new("/bundle/status.jsonl"));
        }
        for bad in [
            "/etc/shadow",
            "/bundle/../etc/shadow",
            "/bundle/sub/status",
            "sub/status",
            "..",
            "/bundle/",
            "/",
            "",
        ] {
            let e = status(bad).unwrap_err().to_string();
            assert!(
                e.contains("annotations.run.hutch.status-file"),
                "{bad:?}: {e}"
            );
        }
    }
}
