//! Everything done before clone, in the supervisor: it may allocate and
//! fail freely, so the post-clone code only has to perform syscalls.
//!
//! The result is a [`LaunchPlan`]: the supervisor's own part (the cgroup
//! leaf, relay pipes, the proxy's policy, what the report needs) and the
//! [`ChildPlan`], the only data the post-clone code may touch. The child
//! plan is itself split into what does not depend on the command (ids,
//! root, confinement, limits) and the [`CommandPlan`] (argv, env, cwd,
//! stdio).

pub mod claim;
mod identity;
pub(crate) mod image;
pub(crate) mod join;
pub(crate) mod range;
pub(crate) mod subid;
pub(crate) mod validate;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::fs::{self};
use crate::launch::error::{LaunchError, PrepareError};
use crate::launch::options::WorkloadStdio;
use crate::launch::plan::{
    CapPlan, ChildPlan, CommandPlan, DEFAULT_ROOT_HOST_ID, Exec, FORWARDED, IdMaps, Ids, StdioPlan,
    signal_mask,
};
use crate::spec::{DEFAULT_PATH, FsOp, Network, Spec};
use crate::sys::{
    self, CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER,
    CLONE_NEWUTS,
};

/// The prepared launch: the child's plan and what the supervisor keeps.
pub(crate) struct LaunchPlan {
    pub child: ChildPlan,
    pub sandbox_id: String,
    pub clone_flags: u64,
    /// The cgroup leaf (when one could be created) and the limits report;
    /// taken by the supervisor at the end to remove the leaf.
    pub cgroup: Option<crate::cgroup::Leaf>,
    /// Read ends the supervisor relays to its own stdout / stderr.
    pub relay: [Option<OwnedFd>; 2],
    /// Overlay mount points whose upper is discarded, in plan order.
    pub tmp_overlay_dests: Vec<PathBuf>,
    /// Overlays with a host upper: (mount point, upper dir).
    pub kept_uppers: Vec<(PathBuf, PathBuf)>,
    /// Sources to hand over as idmapped mounts: (source index, host path).
    pub idmap_sources: Vec<(usize, PathBuf)>,
    /// Network mode `proxy`: the compiled policy.
    pub proxy: Option<ProxyPrep>,
    /// An image run: the store lock held until the end, and the report.
    pub image: Option<image::Held>,
    /// A private id range, held until the sandbox is gone
    /// (`docs/images.md`, "Id ranges").
    pub id_range: Option<range::Allocation>,
    /// The runtime registry's directory, opened before a joined user
    /// namespace is entered (the registration then goes there, not to the
    /// directory the joined uid would name).
    pub registry_dir: Option<crate::registry::RuntimeDir>,
    /// Its path, kept for the kill mark read after the end.
    pub registry_path: Option<PathBuf>,
}

/// The egress proxy of a `proxy`-mode sandbox, prepared before clone; the
/// supervisor serves it once the sandbox sends its doors.
pub(crate) struct ProxyPrep {
    pub policy: crate::net::Policy,
    pub audit: Option<crate::audit::AuditSink>,
    /// `transparent` egress: the ports captured (those the policy can
    /// allow, but the TCP door's).
    pub transparent_ports: Option<Vec<u16>>,
    /// The Spec's secrets, read from their sources, with their
    /// placeholders: the proxy's alone (never in the child's plan).
    pub secrets: Vec<crate::secret::ArmedSecret>,
    /// What the workload's environment gets besides the Spec's own: the
    /// proxy's variables, each secret's placeholder, each gateway's URL.
    pub env: Vec<(String, String)>,
    /// Intercepted hosts: the sandbox's CA, made here because its
    /// certificate is bound into the root the child builds; its key stays
    /// in this process and goes to the proxy.
    pub interception: Option<std::sync::Arc<crate::net::Interception>>,
}

/// Network mode `proxy`: compile the policy, read the secrets, open the
/// audit log, and add the proxy environment to the Spec. The doors are
/// made by the sandbox itself (nothing of them exists on the host). With
/// intercepted hosts, the sandbox's CA is made and its trust bundle bound
/// read-only at [`crate::net::CA_BUNDLE_PATH`].
fn prepare_proxy(spec: &mut Spec, sandbox_id: &str) -> Result<Option<ProxyPrep>, LaunchError> {
    let Network::Proxy(pp) = &spec.network else {
        return Ok(None);
    };
    let policy = crate::net::Policy::from_spec(pp).map_err(PrepareError::EgressPolicy)?;
    // Before the audit log is opened: a source that cannot be read leaves
    // nothing behind.
    let secrets = crate::secret::arm(spec).map_err(PrepareError::Secret)?;
    let mut env = caller_proxy_env(spec);
    env.extend(crate::secret::sandbox_env(spec, &secrets));
    let Network::Proxy(pp) = &spec.network else {
        return Ok(None);
    };
    let audit = match &pp.audit {
        Some(path) => Some(
            crate::audit::AuditSink::open_capped(path, Some(policy.limits().max_audit_bytes))
                .map_err(PrepareError::Audit)?,
        ),
        None => None,
    };
    spec.env.extend(env.iter().cloned());
    let interception = crate::net::Interception::new(sandbox_id, &pp.intercept)
        .map_err(PrepareError::Intercept)?;
    if let Some(i) = &interception {
        spec.fs.push(crate::spec::FsOp::BindData {
            dest: crate::net::CA_BUNDLE_PATH.into(),
            content: i.trust_bundle(),
            encoding: crate::spec::Encoding::Text,
            mode: Some(0o444),
            writable: false,
        });
    }
    let transparent_ports = (pp.egress_mode == crate::spec::EgressMode::Transparent).then(|| {
        // The sandbox's resolver, bound over whatever the root has.
        spec.fs.push(crate::spec::FsOp::BindData {
            dest: "/etc/resolv.conf".into(),
            content: crate::net::RESOLV_CONF.into(),
            encoding: crate::spec::Encoding::Text,
            mode: Some(0o444),
            writable: false,
        });
        crate::net::transparent_ports(&policy)
    });
    Ok(Some(ProxyPrep {
        policy,
        audit,
        transparent_ports,
        secrets,
        env,
        interception,
    }))
}

/// hutch's proxy variables less those the Spec sets or unsets itself (the
/// caller's explicit choice wins).
fn caller_proxy_env(spec: &Spec) -> Vec<(String, String)> {
    crate::net::proxy_env(|name| spec.env.contains_key(name) || spec.unset_env.contains(name))
}

/// Validate and prepare. `relay` forces stdout/stderr through pipes.
pub(crate) fn prepare(
    spec: &Spec,
    relay: bool,
    workload_stdio: WorkloadStdio,
) -> Result<LaunchPlan, LaunchError> {
    prepare_with(spec, relay, workload_stdio, true)
}

/// [`prepare`]; `own_leaf: false` when the caller places the sandbox in a
/// cgroup of its own (no leaf of hutch's; only rlimits).
pub(crate) fn prepare_with(
    spec: &Spec,
    relay: bool,
    workload_stdio: WorkloadStdio,
    own_leaf: bool,
) -> Result<LaunchPlan, LaunchError> {
    validate::validate(spec)?;
    let image = image::prepare(spec)?;
    // The image's config fills the command part (an image run only).
    let with_image = image.as_ref().map(|i| i.held.spec.clone());
    let spec = with_image.as_ref().unwrap_or(spec);
    if spec.command.is_empty() {
        return Err(LaunchError::Spec(crate::spec::SpecError::new(
            "command",
            "no command to run",
        )));
    }
    let mut p = prepare_sandbox(spec, image, false, own_leaf, false)?;
    let proxy_env = p.proxy.as_ref().map(|x| x.env.as_slice());
    let (command, relay) = prepare_command(spec, proxy_env, relay, workload_stdio)?;
    p.child.command = command;
    p.relay = relay;
    Ok(p)
}

/// What does not depend on the command: ids, the mount plan (with the
/// image's layers, if any), namespaces, confinement, the proxy's policy,
/// and (last: from here on the leaf exists, dropping the plan removes it)
/// the cgroup leaf. The command part is a placeholder. `warm`: the sandbox
/// waits for a claim, and its writable overlays are mounted then (see
/// [`claim`]).
pub(crate) fn prepare_sandbox(
    spec: &Spec,
    image: Option<image::Prepared>,
    warm: bool,
    own_leaf: bool,
    gives_back: bool,
) -> Result<LaunchPlan, LaunchError> {
    let mut image = image;
    let (ids, id_range) = match &mut image {
        Some(i) => (i.ids.clone().for_image(), i.id_range.take()),
        None => ids(spec)?,
    };
    let sandbox_id = sandbox_id();
    let mut with_proxy = spec.clone();
    let proxy = prepare_proxy(&mut with_proxy, &sandbox_id)?;
    let spec = if proxy.is_some() { &with_proxy } else { spec };

    // What does not depend on the command.
    // Idmapped workspace layers belong to hutch's single-id namespace.
    let idmap_layers = ids.root_launch && spec.namespaces.user && spec.identity.uid_map.is_empty();
    let mut plan = fs::plan(spec, idmap_layers);
    if let Some(i) = &image {
        image::add_lowers(&mut plan, i);
    }
    if warm {
        plan.claim_overlays = claim::claim_overlays(spec);
    }
    let idmap_sources = plan
        .sources
        .iter()
        .enumerate()
        .filter(|(_, s)| s.idmapped)
        .map(|(i, s)| {
            (
                i,
                PathBuf::from(std::ffi::OsStr::from_bytes(s.path.as_bytes())),
            )
        })
        .collect();
    let mut tmp_overlay_dests = Vec::new();
    let mut kept_uppers = Vec::new();
    for op in &spec.fs {
        match op {
            FsOp::TmpOverlay { dest, .. } => tmp_overlay_dests.push(dest.clone()),
            FsOp::Overlay {
                upper, work, dest, ..
            } => {
                prepare_upper(upper, work, &ids)?;
                kept_uppers.push((dest.clone(), upper.clone()));
            }
            _ => {}
        }
    }
    let ns = &spec.namespaces;
    // A joined mount namespace is entered by hutch init after clone.
    let mut clone_flags = if ns.join.mount.is_some() { 0 } else { CLONE_NEWNS };
    for (on, flag) in [
        (ns.user, CLONE_NEWUSER),
        (ns.pid, CLONE_NEWPID),
        (ns.ipc, CLONE_NEWIPC),
        (ns.uts, CLONE_NEWUTS),
        (ns.net, CLONE_NEWNET),
        (ns.cgroup, CLONE_NEWCGROUP),
    ] {
        if on {
            clone_flags |= flag;
        }
    }
    let confinement = crate::confine::prepare(spec).map_err(PrepareError::Confinement)?;
    let [bounding, effective, permitted, inheritable, ambient] = confinement.cap_sets();
    let caps = CapPlan {
        bounding,
        effective,
        permitted,
        inheritable,
        ambient,
        last: sys::cap_last_cap(),
    };

    // Last: from here on the leaf exists (dropping it removes it again).
    let cgroup = if own_leaf {
        crate::cgroup::prepare(&spec.limits, &sandbox_id)?
    } else {
        crate::cgroup::rlimits_only(&spec.limits)?
    };
    // A warm sandbox whose claimers give it back (a session's warm
    // server's) serves one command after another when everything a
    // command could leave behind is made fresh per command
    // (`launch::child::percmd`, docs/warm.md "Resident sandboxes"): its
    // mounts may be made again (`fs::resident::blocker`), it has pid, ipc,
    // uts and user namespaces of its own, and its workload holds no
    // capability, keeps no-new-privs and is filtered by hutch's own
    // seccomp profile (no keyring, which a user namespace would keep).
    // Not yet with the egress proxy (its TCP door lives in the network
    // namespace) or a joined namespace. A cgroup leaf counts per command
    // from each claim on (`cgroup::Leaf::start_command`).
    let no_caps = caps.effective | caps.permitted | caps.inheritable | caps.ambient == 0;
    let resident = warm
        && gives_back
        && fs::resident::blocker(&plan).is_none()
        && proxy.is_none()
        && ns.pid
        && ns.ipc
        && ns.uts
        && ns.user
        && ns.join == Default::default()
        && spec.init != crate::spec::Init::None
        && no_caps
        && confinement.no_new_privs()
        && matches!(spec.security.seccomp.as_str(), "default" | "strict");
    plan.resident = resident;
    let per_command_flags = CLONE_NEWNS
        | CLONE_NEWPID
        | CLONE_NEWIPC
        | CLONE_NEWUTS
        | if ns.net { CLONE_NEWNET } else { 0 };
    let child = ChildPlan {
        // Fail closed: without it pid 1 would show the caller's argv.
        args_area: crate::sys::ArgsArea::of_self()?,
        ids,
        op_names: fs::op_names(spec),
        fs: plan,
        hostname: if ns.uts || ns.join.uts.is_some() {
            spec.identity.hostname.clone()
        } else {
            None
        },
        net_namespace: ns.net,
        proxy_doors: proxy.is_some(),
        transparent_ports: proxy.as_ref().and_then(|p| p.transparent_ports.clone()),
        rlimits: cgroup.rlimits().to_vec(),
        caps,
        confinement,
        report_started: true,
        warm,
        resident,
        per_command_flags,
        command: CommandPlan::placeholder(),
        detached: false,
        own_userns: ns.user,
        pid_namespace_init: ns.pid,
        sysctls: sysctls(spec),
        rlimits_soft: rlimits_soft(spec),
        forwarded_signals: signal_mask(&FORWARDED),
        console: None,
        console_size: None,
        userns_after_setup: match &spec.namespaces.join.user_after_setup {
            Some(r) => Some(join::open("user_after_setup", r)?),
            None => None,
        },
        mount_namespace: match &spec.namespaces.join.mount {
            Some(r) => Some(join::open_mount(r)?),
            None => None,
        },
        hold: None,
        inherited_fds: inherited_fds(spec)?,
        new_session: spec.new_session,
        exec_in_place: spec.init == crate::spec::Init::None,
        pause_before_pivot: false,
        bounding_set_dropped: false,
        init_joinable: false,
        landlock_ruleset: None,
    };
    Ok(LaunchPlan {
        child,
        sandbox_id,
        clone_flags,
        cgroup: Some(cgroup),
        relay: [None, None],
        tmp_overlay_dests,
        kept_uppers,
        idmap_sources,
        proxy,
        image: image.map(|i| i.held),
        id_range,
        registry_dir: None,
        registry_path: None,
    })
}

/// What depends on the command: argv/envp and the execve candidates, the
/// working directory, the workload's stdio (and the read ends the
/// supervisor relays). `proxy_env`: the sandbox's network is the egress
/// proxy, whose environment (with the secrets' placeholders and the
/// gateways' URLs) the workload gets.
pub(crate) fn prepare_command(
    spec: &Spec,
    proxy_env: Option<&[(String, String)]>,
    relay: bool,
    workload_stdio: WorkloadStdio,
) -> Result<(CommandPlan, [Option<OwnedFd>; 2]), LaunchError> {
    let (stdio, relay) = stdio(
        relay || spec.limits.output_bytes.is_some(),
        workload_stdio,
        !spec.new_session,
    )?;
    let exec = if let Some(extra) = proxy_env {
        let mut env = spec.env.clone();
        // The proxy variables as this command's Spec leaves them (a warm
        // claim's command may set or unset some), then the secrets'
        // placeholders and the gateways' URLs prepared with the sandbox.
        env.extend(caller_proxy_env(spec));
        env.extend(
            extra
                .iter()
                .filter(|(name, _)| !crate::net::is_proxy_variable(name))
                .cloned(),
        );
        add_ca_env(spec, &mut env);
        exec_with_argv0(&spec.command, spec.argv0.as_deref(), &env)
    } else {
        exec_with_argv0(&spec.command, spec.argv0.as_deref(), &spec.env)
    };
    let command = CommandPlan {
        exec,
        cwd: CString::new(
            spec.cwd
                .as_deref()
                .unwrap_or(Path::new("/"))
                .as_os_str()
                .as_bytes(),
        )
        .expect("validated: no NUL"),
        stdio,
        non_default_signals: u64::MAX,
        umask: spec.umask,
        controlling_tty: false,
    };
    Ok((command, relay))
}

/// With intercepted hosts, point the common TLS stacks at the sandbox's
/// trust bundle; a variable the caller set keeps its value.
fn add_ca_env(spec: &Spec, env: &mut BTreeMap<String, String>) {
    let Network::Proxy(pp) = &spec.network else {
        return;
    };
    if pp.intercept.is_empty() {
        return;
    }
    for key in crate::net::CA_ENV {
        // The caller's explicit choice (set or unset) wins.
        if !spec.env.contains_key(key) && !spec.unset_env.iter().any(|u| u == key) {
            env.insert(key.to_string(), crate::net::CA_BUNDLE_PATH.to_string());
        }
    }
}

fn ids(spec: &Spec) -> Result<(Ids, Option<range::Allocation>), LaunchError> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let id = &spec.identity;
    if id.id_range == Some(crate::spec::IdRange::Private) {
        return private_range_ids(spec, (uid, gid));
    }
    if !spec.namespaces.user || !id.uid_map.is_empty() {
        return identity::ids(spec, uid, gid).map(|i| (i, None));
    }
    if id.groups.as_ref().is_some_and(|g| !g.is_empty()) {
        return Err(LaunchError::Spec(crate::spec::SpecError::new(
            "identity.groups",
            "supplementary groups need a gid map holding them (identity.gid_map)",
        )));
    }
    let single = |inside_uid, inside_gid, host_uid, host_gid, root_launch: bool| Ids {
        inside_uid,
        inside_gid,
        host_uid,
        host_gid,
        root_launch,
        clear_groups: root_launch,
        init_ids: Some((inside_uid, inside_gid)),
        workload_ids: None,
        subordinate: None,
        maps: Some(IdMaps {
            uid_map: format!("{inside_uid} {host_uid} 1"),
            gid_map: format!("{inside_gid} {host_gid} 1"),
            setgroups: (!root_launch).then_some("deny"),
        }),
    };
    if uid == 0 {
        return Ok((
            single(
                id.uid.unwrap_or(0),
                id.gid.unwrap_or(0),
                id.host_uid.unwrap_or(DEFAULT_ROOT_HOST_ID),
                id.host_gid.unwrap_or(DEFAULT_ROOT_HOST_ID),
                true,
            ),
            None,
        ));
    }
    if id.host_uid.is_some_and(|h| h != uid) || id.host_gid.is_some_and(|h| h != gid) {
        return Err(LaunchError::Spec(crate::spec::SpecError::new(
            "identity.host_uid",
            "only root can choose the host id the sandbox runs as",
        )));
    }
    Ok((
        single(
            id.uid.unwrap_or(uid),
            id.gid.unwrap_or(gid),
            uid,
            gid,
            false,
        ),
        None,
    ))
}

/// `identity.id_range = "private"` without an image: the workload may
/// change ids (su, a package manager dropping to its own user), so ids
/// 0..65535 inside map a range, as an image of several owners does. The
/// workload's ids must be in it; a user namespace of the sandbox's own and
/// no explicit map are needed.
fn private_range_ids(
    spec: &Spec,
    caller: (u32, u32),
) -> Result<(Ids, Option<range::Allocation>), LaunchError> {
    let id = &spec.identity;
    let refuse = |path: &str, why: &str| {
        LaunchError::Spec(crate::spec::SpecError::new(path, why))
    };
    if !spec.namespaces.user {
        return Err(refuse(
            "identity.id_range",
            "a private id range is the map of the sandbox's own user namespace (namespaces.user = true)",
        ));
    }
    if !id.uid_map.is_empty() || !id.gid_map.is_empty() {
        return Err(refuse(
            "identity.id_range",
            "a private id range and identity.uid_map/gid_map both choose the map; give one",
        ));
    }
    if id.host_uid.is_some() || id.host_gid.is_some() {
        return Err(refuse(
            "identity.host_uid",
            "host_uid/host_gid name one host id; a private id range maps 65536",
        ));
    }
    // Root inside by default, as an image run is: the workload may then
    // become any id of the range.
    let (uid, gid) = (id.uid.unwrap_or(0), id.gid.unwrap_or(0));
    let need_u = [0, uid].into_iter().collect();
    let need_g = [0, gid].into_iter().collect();
    let (ids, allocation) = image::ranged(uid, gid, &need_u, &need_g, caller, None, None)
        .map_err(|why| LaunchError::Spec(crate::spec::SpecError::new("identity.id_range", why)))?;
    if id.groups.as_ref().is_some_and(|g| !g.is_empty()) {
        return Err(refuse(
            "identity.groups",
            "supplementary groups with a private id range are not supported yet",
        ));
    }
    Ok((ids.for_image(), allocation))
}

/// The Spec's sysctls as `/proc/sys` paths.
fn sysctls(spec: &Spec) -> Vec<(CString, Vec<u8>)> {
    spec.sysctl
        .iter()
        .map(|(k, v)| {
            let path = format!("/proc/sys/{}", k.replace('.', "/"));
            (
                CString::new(path).expect("validated: no NUL"),
                v.as_bytes().to_vec(),
            )
        })
        .collect()
}

fn rlimits_soft(spec: &Spec) -> Vec<(libc::c_int, u64)> {
    spec.limits
        .rlimits_soft
        .iter()
        .filter_map(|(name, v)| crate::cgroup::rlimits::resource(name).map(|r| (r, *v)))
        .collect()
}

/// A kept upper and its work dir must exist, be directories we can use,
/// and (root launches) belong to the workload's host id.
fn prepare_upper(upper: &Path, work: &Path, ids: &Ids) -> Result<(), LaunchError> {
    for dir in [upper, work] {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(PrepareError::UpperNotDirectory { path: dir.into() }.into());
            }
            Err(_) => std::fs::create_dir_all(dir).map_err(|err| PrepareError::CreateUpper {
                path: dir.into(),
                err,
            })?,
        }
        if ids.root_launch {
            std::os::unix::fs::lchown(dir, Some(ids.host_uid), Some(ids.host_gid)).map_err(
                |err| PrepareError::ChownUpper {
                    path: dir.into(),
                    uid: ids.host_uid,
                    err,
                },
            )?;
        }
    }
    Ok(())
}

/// argv/envp and the execve candidates (the PATH search is done here, in
/// the supervisor).
#[cfg(test)]
pub(crate) fn exec_of(command: &[String], env: &BTreeMap<String, String>) -> Exec {
    exec_with_argv0(command, None, env)
}

/// [`exec_of`], the workload seeing `argv0` as its `argv[0]` when given
/// (`Spec::argv0`); `command[0]` is still what is searched and executed.
pub(crate) fn exec_with_argv0(
    command: &[String],
    argv0: Option<&str>,
    env: &BTreeMap<String, String>,
) -> Exec {
    let mut argv: Vec<String> = command.to_vec();
    if let Some(a) = argv0 {
        argv[0] = a.to_string();
    }
    let envp: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let program = &command[0];
    let candidates = if program.contains('/') {
        vec![program.clone()]
    } else {
        let path = env.get("PATH").map_or(DEFAULT_PATH, String::as_str);
        path.split(':')
            .map(|dir| if dir.is_empty() { "." } else { dir })
            .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
            .collect()
    };
    Exec::from_strings(candidates, argv, envp)
}

/// Relay stdout/stderr through pipes when asked (output cap, capture) or
/// when they are terminals (the workload never gets the user's tty,
/// unless `share_terminal`: it stays in the caller's session,
/// `Spec::new_session = false`); a terminal stdin becomes /dev/null.
/// Returns the workload's stdio and the read ends the supervisor relays.
pub(crate) fn stdio(
    relay: bool,
    workload_stdio: WorkloadStdio,
    share_terminal: bool,
) -> Result<(StdioPlan, [Option<OwnedFd>; 2]), LaunchError> {
    let mut plan = StdioPlan::default();
    let mut relays = [None, None];
    let null = || {
        std::fs::File::open("/dev/null")
            .map(OwnedFd::from)
            .map_err(|e| LaunchError::from(PrepareError::DevNull(e)))
    };
    if workload_stdio == WorkloadStdio::Null {
        plan.fds = [Some(null()?), Some(null()?), Some(null()?)];
        return Ok((plan, relays));
    }
    let tty = |fd| !share_terminal && sys::isatty(fd);
    if tty(0) {
        plan.fds[0] = Some(null()?);
    }
    for target in [1, 2] {
        if relay || tty(target) {
            let (r, w) = sys::raw::pipe(0)
                .map_err(|e| LaunchError::Sys(sys::SysError::new("pipe2(O_CLOEXEC)", e)))?;
            plan.fds[target as usize] = Some(w);
            relays[target as usize - 1] = Some(r);
        }
    }
    Ok((plan, relays))
}

/// The fds the workload inherits: `inherit_fds` (each must be open now)
/// and, with `inherit_open_fds`, every fd this process has open without
/// close-on-exec (hutch's own are all close-on-exec).
fn inherited_fds(spec: &Spec) -> Result<Vec<RawFd>, LaunchError> {
    let mut fds = Vec::new();
    for &fd in &spec.inherit_fds {
        if !sys::raw::fd_is_open(fd) {
            return Err(PrepareError::InheritedFdNotOpen(fd).into());
        }
        fds.push(fd);
    }
    if spec.inherit_open_fds {
        let open = sys::inheritable_fds().map_err(PrepareError::ReadOpenFds)?;
        fds.extend(open);
    }
    fds.sort_unstable();
    fds.dedup();
    if fds.len() > crate::spec::MAX_INHERIT_FDS {
        return Err(PrepareError::TooManyInheritedFds {
            count: fds.len(),
            max: crate::spec::MAX_INHERIT_FDS,
        }
        .into());
    }
    Ok(fds)
}

/// 16 hex digits from the kernel's random pool.
fn sandbox_id() -> String {
    let mut b = [0u8; 8];
    if sys::getrandom(&mut b).is_err() {
        let t = crate::util::clock::since_epoch();
        b = (t.as_nanos() as u64 ^ u64::from(std::process::id())).to_le_bytes();
    }
    hex::encode(b)
}

/// The network mode's name for reports.
pub fn network_name(n: &Network) -> &'static str {
    match n {
        Network::None => "none",
        Network::Host => "host",
        Network::Proxy(_) => "proxy",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With intercepted hosts, the six CA variables point at the bundle,
    /// except one the caller set; without, none is added.
    #[test]
    fn the_ca_variables_point_at_the_bundle_unless_the_caller_set_one() {
        let mut spec = crate::spec::default_profile();
        spec.command = vec!["true".into()];
        spec.env.insert("PIP_CERT".into(), "/mine.pem".into());
        let mut pp = crate::spec::ProxyPolicy {
            allow: vec!["api.example.com".into()],
            ..Default::default()
        };
        spec.network = Network::Proxy(pp.clone());
        let env_of = |spec: &Spec| {
            let (plan, _) = prepare_command(spec, Some(&[]), false, WorkloadStdio::Inherit).unwrap();
            plan.exec
                .envp
                .iter()
                .map(|c| c.to_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert!(
            !env_of(&spec)
                .iter()
                .any(|e| e.starts_with("SSL_CERT_FILE="))
        );
        pp.intercept = vec![serde_json::from_str(r#"{"host":"api.example.com"}"#).unwrap()];
        spec.network = Network::Proxy(pp);
        let env = env_of(&spec);
        for key in crate::net::CA_ENV {
            let want = if key == "PIP_CERT" {
                "PIP_CERT=/mine.pem".to_string()
            } else {
                format!("{key}={}", crate::net::CA_BUNDLE_PATH)
            };
            assert!(env.contains(&want), "{want} in {env:?}");
        }
    }

    /// Proxy mode prepares no directory or socket on the host: both doors
    /// are made by the sandbox (so a SIGKILL at any moment leaves nothing).
    #[test]
    fn proxy_mode_makes_nothing_on_the_host() {
        let tmp = std::env::temp_dir().join(format!("hutch-prep-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        // SAFETY: nextest runs one test per process; nothing else reads the
        // environment concurrently.
        unsafe {
            std::env::set_var("TMPDIR", &tmp);
            std::env::set_var("XDG_RUNTIME_DIR", &tmp);
        }
        let mut spec = crate::spec::default_profile();
        spec.command = vec!["true".into()];
        spec.network = Network::Proxy(crate::spec::ProxyPolicy {
            allow: vec!["example.test".into()],
            ..Default::default()
        });
        let p = prepare(&spec, false, WorkloadStdio::Inherit).unwrap();
        assert!(p.child.proxy_doors && p.proxy.is_some());
        assert!(
            !p.child
                .fs
                .sources
                .iter()
                .any(|s| s.path.as_bytes().ends_with(b"proxy.sock")),
            "no host socket is bound into the sandbox"
        );
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
        std::fs::remove_dir(&tmp).unwrap();
    }
}
