//! Everything done before clone, in the supervisor: it may allocate and
//! fail freely, so the child only has to perform syscalls.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use caps::CapsHashSet;

use super::LaunchError;
use crate::fs::{self, Plan};
use crate::spec::{DEFAULT_PATH, FsOp, Network, Spec};
use crate::sys::{
    self, CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER,
    CLONE_NEWUTS,
};

/// Host id the workload runs as when root launches.
pub const DEFAULT_ROOT_HOST_ID: u32 = 65534;

/// Who the sandbox is, inside and on the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ids {
    pub inside_uid: u32,
    pub inside_gid: u32,
    pub host_uid: u32,
    pub host_gid: u32,
    /// Root launched: the map points at an unprivileged host id.
    pub root_launch: bool,
    /// Drop root's supplementary groups inside (allowed only for root).
    pub clear_groups: bool,
}

/// argv/envp and the paths execve tries, as C strings and pointer arrays
/// (valid in the child, which has a copy of this memory).
pub struct Exec {
    pub candidates: Vec<CString>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub argv_ptrs: Vec<*const libc::c_char>,
    pub envp_ptrs: Vec<*const libc::c_char>,
}

/// How the workload's stdio is wired.
#[derive(Default)]
pub struct Stdio {
    /// (fd in the child, target 0/1/2) pairs applied with dup2.
    pub dup: Vec<(RawFd, RawFd)>,
    /// Read ends the supervisor relays to its own stdout / stderr.
    pub relay_out: Option<OwnedFd>,
    pub relay_err: Option<OwnedFd>,
    /// Write ends / /dev/null, kept open until clone, closed after.
    pub child_ends: Vec<OwnedFd>,
}

/// The prepared launch.
pub struct Prepared {
    pub sandbox_id: String,
    pub plan: Plan,
    pub op_names: Vec<String>,
    pub clone_flags: u64,
    pub net_namespace: bool,
    pub ids: Ids,
    pub exec: Exec,
    pub cwd: CString,
    pub hostname: Option<String>,
    pub keep_caps: CapsHashSet,
    /// The kernel's highest capability number, read before clone.
    pub cap_last_cap: u32,
    /// seccomp BPF compiled, Landlock ABI probed and rules computed.
    pub confinement: crate::confine::Confinement,
    pub rlimits: Vec<(libc::c_int, u64)>,
    /// The cgroup leaf (when one could be created) and the limits report;
    /// taken by the supervisor at the end to remove the leaf.
    pub cgroup: Option<crate::cgroup::Leaf>,
    pub stdio: Stdio,
    /// Overlay mount points whose upper is discarded, in plan order.
    pub tmp_overlay_dests: Vec<PathBuf>,
    /// Overlays with a host upper: (mount point, upper dir).
    pub kept_uppers: Vec<(PathBuf, PathBuf)>,
    /// Sources to hand over as idmapped mounts: (source index, host path).
    pub idmap_sources: Vec<(usize, PathBuf)>,
    /// Sources the supervisor opens and hands over: (source index, host
    /// path). Root launches: the proxy's Unix door, in a directory only
    /// host root may enter.
    pub handed_sources: Vec<(usize, PathBuf)>,
    /// Network mode `proxy`: the compiled policy and the Unix door.
    pub proxy: Option<ProxyPrep>,
    /// Signals whose disposition in the supervisor is not SIG_DFL (bit N-1
    /// for signal N): those the workload resets. Every signal unless the
    /// caller knows better.
    pub non_default_signals: u64,
    /// Whether pid 1 reports `Started` (only a status file's start event
    /// needs it; otherwise it would be one more wake-up per spawn).
    pub report_started: bool,
}

/// The egress proxy of a `proxy`-mode sandbox, prepared before clone; the
/// supervisor serves it once the sandbox sends its TCP door.
pub struct ProxyPrep {
    pub policy: crate::net::Policy,
    pub unix_door: OwnedFd,
    pub audit: Option<crate::audit::AuditSink>,
    /// The private directory holding the Unix door; removed on drop.
    pub dir: PrivateDir,
    /// The Unix door's path on the host (inside `dir`).
    pub socket: PathBuf,
}

/// A directory removed (with its contents) when dropped.
pub struct PrivateDir(pub PathBuf);

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Network mode `proxy`: compile the policy, open the audit log, create the
/// Unix door in a private directory, and add its bind mount and the proxy
/// environment to the Spec.
fn prepare_proxy(spec: &mut Spec, sandbox_id: &str) -> Result<Option<ProxyPrep>, LaunchError> {
    let Network::Proxy(pp) = &spec.network else {
        return Ok(None);
    };
    let policy = crate::net::Policy::from_spec(pp)
        .map_err(|e| LaunchError::Prepare(format!("egress policy: {e}")))?;
    let audit = match &pp.audit {
        Some(path) => Some(
            crate::audit::AuditSink::open_capped(path, Some(policy.limits().max_audit_bytes))
                .map_err(|e| LaunchError::Prepare(e.to_string()))?,
        ),
        None => None,
    };
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("hutch-proxy-{sandbox_id}"));
    let (sock, unix_door) = crate::net::unix_door(&dir)
        .map_err(|e| LaunchError::Prepare(format!("egress proxy door: {e}")))?;
    let dir = PrivateDir(dir);
    spec.fs.push(FsOp::Bind {
        src: sock.clone(),
        dest: PathBuf::from(crate::net::PROXY_SOCKET_PATH),
        optional: false,
    });
    spec.env.extend(crate::net::proxy_env());
    Ok(Some(ProxyPrep {
        policy,
        unix_door,
        audit,
        dir,
        socket: sock,
    }))
}

/// Validate and prepare. `relay` forces stdout/stderr through pipes.
pub fn prepare(spec: &Spec, relay: bool) -> Result<Prepared, LaunchError> {
    super::validate(spec)?;
    if spec.command.is_empty() {
        return Err(LaunchError::Spec(crate::spec::SpecError::new(
            "command",
            "no command to run",
        )));
    }
    let ids = ids(spec)?;
    let sandbox_id = sandbox_id();
    let mut with_proxy = spec.clone();
    let proxy = prepare_proxy(&mut with_proxy, &sandbox_id)?;
    let spec = if proxy.is_some() { &with_proxy } else { spec };
    let mut plan = fs::plan(spec, ids.root_launch);
    let mut handed_sources = Vec::new();
    if ids.root_launch
        && let Some(door) = &proxy
    {
        // The door's directory stays root's (0700): no other host process
        // may reach the socket, not even one running as the sandbox's
        // unprivileged host id. The supervisor opens it for the sandbox.
        for (i, s) in plan.sources.iter_mut().enumerate() {
            if s.path.as_bytes() == door.socket.as_os_str().as_bytes() {
                s.handed_over = true;
                handed_sources.push((i, door.socket.clone()));
            }
        }
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
    let mut clone_flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID;
    for (on, flag) in [
        (ns.ipc, CLONE_NEWIPC),
        (ns.uts, CLONE_NEWUTS),
        (ns.net, CLONE_NEWNET),
        (ns.cgroup, CLONE_NEWCGROUP),
    ] {
        if on {
            clone_flags |= flag;
        }
    }
    let confinement =
        crate::confine::prepare(spec).map_err(|e| LaunchError::Prepare(e.to_string()))?;
    let keep_caps = confinement.keep_caps().clone();

    let stdio = stdio(relay || spec.limits.output_bytes.is_some())?;
    // Last: from here on the leaf exists (dropping it removes it again).
    let cgroup = crate::cgroup::prepare(&spec.limits, &sandbox_id)?;
    Ok(Prepared {
        sandbox_id,
        op_names: fs::op_names(spec),
        plan,
        clone_flags,
        net_namespace: ns.net,
        ids,
        exec: exec(spec),
        cwd: CString::new(
            spec.cwd
                .as_deref()
                .unwrap_or(Path::new("/"))
                .as_os_str()
                .as_bytes(),
        )
        .expect("validated: no NUL"),
        hostname: if ns.uts {
            spec.identity.hostname.clone()
        } else {
            None
        },
        keep_caps,
        cap_last_cap: sys::cap_last_cap(),
        confinement,
        rlimits: cgroup.rlimits().to_vec(),
        cgroup: Some(cgroup),
        stdio,
        tmp_overlay_dests,
        kept_uppers,
        idmap_sources,
        handed_sources,
        proxy,
        non_default_signals: u64::MAX,
        report_started: true,
    })
}

fn ids(spec: &Spec) -> Result<Ids, LaunchError> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let id = &spec.identity;
    if uid == 0 {
        return Ok(Ids {
            inside_uid: id.uid.unwrap_or(0),
            inside_gid: id.gid.unwrap_or(0),
            host_uid: id.host_uid.unwrap_or(DEFAULT_ROOT_HOST_ID),
            host_gid: id.host_gid.unwrap_or(DEFAULT_ROOT_HOST_ID),
            root_launch: true,
            clear_groups: true,
        });
    }
    if id.host_uid.is_some_and(|h| h != uid) || id.host_gid.is_some_and(|h| h != gid) {
        return Err(LaunchError::Spec(crate::spec::SpecError::new(
            "identity.host_uid",
            "only root can choose the host id the sandbox runs as",
        )));
    }
    Ok(Ids {
        inside_uid: id.uid.unwrap_or(uid),
        inside_gid: id.gid.unwrap_or(gid),
        host_uid: uid,
        host_gid: gid,
        root_launch: false,
        clear_groups: false,
    })
}

/// A kept upper and its work dir must exist, be directories we can use,
/// and (root launches) belong to the workload's host id.
fn prepare_upper(upper: &Path, work: &Path, ids: &Ids) -> Result<(), LaunchError> {
    for dir in [upper, work] {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(LaunchError::Prepare(format!(
                    "{} exists and is not a directory; point --changes at an empty or hutch-made directory",
                    dir.display()
                )));
            }
            Err(_) => std::fs::create_dir_all(dir).map_err(|e| {
                LaunchError::Prepare(format!("cannot create {}: {e}", dir.display()))
            })?,
        }
        if ids.root_launch {
            std::os::unix::fs::lchown(dir, Some(ids.host_uid), Some(ids.host_gid)).map_err(
                |e| {
                    LaunchError::Prepare(format!(
                        "cannot hand {} to host uid {}: {e}",
                        dir.display(),
                        ids.host_uid
                    ))
                },
            )?;
        }
    }
    Ok(())
}

fn exec(spec: &Spec) -> Exec {
    let to_c = |s: &str| CString::new(s).expect("validated: no NUL");
    let argv: Vec<CString> = spec.command.iter().map(|a| to_c(a)).collect();
    let envp: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| to_c(&format!("{k}={v}")))
        .collect();
    let program = &spec.command[0];
    let candidates = if program.contains('/') {
        vec![to_c(program)]
    } else {
        let path = spec.env.get("PATH").map_or(DEFAULT_PATH, String::as_str);
        path.split(':')
            .map(|dir| if dir.is_empty() { "." } else { dir })
            .map(|dir| to_c(&format!("{}/{program}", dir.trim_end_matches('/'))))
            .collect()
    };
    let ptrs = |v: &[CString]| {
        v.iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    Exec {
        argv_ptrs: ptrs(&argv),
        envp_ptrs: ptrs(&envp),
        candidates,
        argv,
        envp,
    }
}

/// Relay stdout/stderr through pipes when asked (output cap, capture) or
/// when they are terminals (the workload never gets the user's tty); a
/// terminal stdin becomes /dev/null.
fn stdio(relay: bool) -> Result<Stdio, LaunchError> {
    let mut s = Stdio::default();
    let err = |what: &str, e: nix::errno::Errno| LaunchError::Sys(sys::SysError::new(what, e));
    if sys::isatty(0) {
        let null = std::fs::File::open("/dev/null")
            .map_err(|e| LaunchError::Prepare(format!("cannot open /dev/null: {e}")))?;
        let fd = OwnedFd::from(null);
        s.dup.push((fd.as_raw_fd(), 0));
        s.child_ends.push(fd);
    }
    for target in [1, 2] {
        if relay || sys::isatty(target) {
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| err("pipe2(O_CLOEXEC)", e))?;
            s.dup.push((w.as_raw_fd(), target));
            s.child_ends.push(w);
            if target == 1 {
                s.relay_out = Some(r);
            } else {
                s.relay_err = Some(r);
            }
        }
    }
    Ok(s)
}

/// 16 hex digits from the kernel's random pool.
fn sandbox_id() -> String {
    let mut b = [0u8; 8];
    if sys::getrandom(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
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
    use std::os::unix::fs::MetadataExt;

    /// A root launch keeps the proxy door's directory host root's (0700):
    /// no other host process, not even one running as the sandbox's
    /// unprivileged host id, can reach the socket while it exists on the
    /// host. The supervisor hands the socket over instead.
    #[test]
    fn root_launch_keeps_the_door_directory_root_only() {
        crate::test_support::require!(
            nix::unistd::geteuid().is_root(),
            "needs root (a root launch)"
        );
        let mut spec = crate::spec::default_profile();
        spec.command = vec!["true".into()];
        spec.network = Network::Proxy(crate::spec::ProxyPolicy {
            allow: vec!["example.test".into()],
            ..Default::default()
        });
        let p = prepare(&spec, false).unwrap();
        let door = p.proxy.as_ref().unwrap();
        let meta = std::fs::metadata(&door.dir.0).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700));
        assert_eq!(p.handed_sources.len(), 1);
        let (index, path) = &p.handed_sources[0];
        assert_eq!(path, &door.socket);
        assert!(p.plan.sources[*index].handed_over);
    }
}
