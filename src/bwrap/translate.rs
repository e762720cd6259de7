//! A parsed bubblewrap command line → a [`Spec`] with bubblewrap's
//! semantics (not hutch's defaults): no namespace unless asked (a mount
//! namespace always; a user namespace when an unprivileged caller needs
//! one to mount, as bubblewrap without setuid does), an empty writable
//! root built from the operations in order, the caller's environment,
//! capabilities as bubblewrap grants them, no seccomp or Landlock unless
//! asked. Everything hutch cannot honour is refused with a bubblewrap-
//! shaped line, never ignored.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::args::{BindKind, CapOp, EnvOp, FdReader, Op, Parsed};
use super::error::BwrapError;
use crate::spec::{
    ByteSize, CapabilitySets, DevLayout, Encoding, FsOp, NamespaceRef, Network, Spec,
};

/// What the caller's process is (read once; tests set it).
#[derive(Debug, Clone)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: Option<PathBuf>,
    /// Effective, inheritable and bounding capability masks (root's
    /// defaults).
    pub effective: u64,
    pub bounding: u64,
    pub inheritable: u64,
    /// The kernel has user / cgroup namespaces (`--unshare-*-try`).
    pub userns_available: bool,
    pub cgroupns_available: bool,
    /// The terminal on stdout (bubblewrap's `ttyname(1)`): `--dev` binds
    /// it as `console`.
    pub stdout_tty: Option<PathBuf>,
}

impl Caller {
    /// This process.
    pub fn current() -> Caller {
        let mask = |set| {
            caps::read(None, set)
                .map(|s| s.iter().fold(0u64, |m, c| m | c.bitmask()))
                .unwrap_or(0)
        };
        let userns_available = Path::new("/proc/self/ns/user").exists()
            && std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
                .map(|s| s.trim() != "0")
                .unwrap_or(true);
        Caller {
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            env: std::env::vars_os().collect(),
            cwd: std::env::current_dir().ok(),
            effective: mask(caps::CapSet::Effective),
            inheritable: mask(caps::CapSet::Inheritable),
            bounding: mask(caps::CapSet::Bounding),
            userns_available,
            cgroupns_available: Path::new("/proc/self/ns/cgroup").exists(),
            stdout_tty: std::io::IsTerminal::is_terminal(&std::io::stdout())
                .then(|| std::fs::read_link("/proc/self/fd/1").ok())
                .flatten(),
        }
    }
}

/// The launch-time parts that are not the Spec: fds of bubblewrap's
/// status protocol, held locks.
#[derive(Debug, Default)]
pub struct Extras {
    pub info_fd: Option<i32>,
    pub json_status_fd: Option<i32>,
    /// `--block-fd` / `--userns-block-fd`: read before the workload starts.
    pub block_fds: Vec<i32>,
    /// `--lock-file` files, open and read-locked until hutch-bwrap exits.
    pub locks: Vec<std::fs::File>,
    pub die_with_parent: bool,
}

fn die(msg: impl Into<String>) -> BwrapError {
    BwrapError::die(msg)
}

fn show(s: &OsStr) -> String {
    s.to_string_lossy().into_owned()
}

fn utf8(s: &OsStr, what: &str) -> Result<String, BwrapError> {
    s.to_str().map(str::to_string).ok_or_else(|| {
        die(format!(
            "{what} {} is not UTF-8; hutch-bwrap takes UTF-8 paths, names and values only",
            show(s)
        ))
    })
}

/// A destination inside the sandbox: bubblewrap takes relative ones
/// relative to the new root.
fn dest(s: &OsStr) -> Result<PathBuf, BwrapError> {
    let t = utf8(s, "path")?;
    let p = Path::new(&t);
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        Path::new("/").join(p)
    };
    Ok(normalize(&abs))
}

/// `a/./b//c/` → `a/b/c` (`..` is left for the Spec check to refuse).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => out.push(".."),
            _ => {}
        }
    }
    out
}

/// A host source, resolved as bubblewrap does (`realpath`): ENOENT is
/// `Can't find source path X: ...`.
fn source(s: &OsStr) -> Result<Option<PathBuf>, BwrapError> {
    let t = utf8(s, "source path")?;
    match std::fs::canonicalize(&t) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(BwrapError::io(format!("Can't find source path {t}"), &e)),
    }
}

fn missing(s: &OsStr) -> BwrapError {
    BwrapError::errno(format!("Can't find source path {}", show(s)), libc::ENOENT)
}

/// Translate `p` for `caller`, reading fd contents through `fds`.
pub fn translate(
    p: &Parsed,
    caller: &Caller,
    fds: &mut dyn FdReader,
) -> Result<(Spec, Extras), BwrapError> {
    let root = caller.uid == 0;
    let mut unshare_user = p.unshare_user;
    // bubblewrap's checks, in its order (main(), after parse_args).
    if p.userns_block_fd.is_some() && !p.unshare_user {
        return Err(die("--userns-block-fd requires --unshare-user"));
    }
    if p.userns_block_fd.is_some() && p.info_fd.is_none() {
        return Err(die("--userns-block-fd requires --info-fd"));
    }
    if p.userns_fd.is_some() && p.unshare_user {
        return Err(die("--userns not compatible --unshare-user"));
    }
    if p.userns_fd.is_some() && p.unshare_user_try {
        return Err(die("--userns not compatible --unshare-user-try"));
    }
    if p.disable_userns && !p.unshare_user {
        return Err(die("--disable-userns requires --unshare-user"));
    }
    if p.disable_userns && p.userns_block_fd.is_some() {
        return Err(die(
            "--disable-userns is not compatible with  --userns-block-fd",
        ));
    }
    // Not setuid: an unprivileged caller needs a user namespace to mount.
    if !root && p.userns_fd.is_none() {
        unshare_user = true;
    }
    if p.unshare_user_try && caller.userns_available {
        unshare_user = true;
    }
    if p.command.is_empty() {
        return Err(BwrapError::Usage);
    }
    let uid = p.uid.unwrap_or(caller.uid);
    let gid = p.gid.unwrap_or(caller.gid);
    if !unshare_user && p.userns_fd.is_none() && uid != caller.uid {
        return Err(die("Specifying --uid requires --unshare-user or --userns"));
    }
    if !unshare_user && p.userns_fd.is_none() && gid != caller.gid {
        return Err(die("Specifying --gid requires --unshare-user or --userns"));
    }
    if !p.unshare_uts && p.hostname.is_some() {
        return Err(die("Specifying --hostname requires --unshare-uts"));
    }
    if p.as_pid_1 && !p.unshare_pid {
        return Err(die("Specifying --as-pid-1 requires --unshare-pid"));
    }
    if p.as_pid_1 && !p.lock_files.is_empty() {
        return Err(die(
            "Specifying --as-pid-1 and --lock-file is not permitted",
        ));
    }
    // What hutch cannot do, refused in bubblewrap's shape.
    let unsupported = |opt: &str, why: &str| {
        die(format!(
            "{opt} is not supported by hutch-bwrap: {why} (docs/bwrap.md)"
        ))
    };
    if p.as_pid_1 && p.ops.iter().any(|op| matches!(op, Op::TmpOverlay { .. })) {
        return Err(unsupported(
            "--as-pid-1 with --tmp-overlay",
            "the discarded upper's changes are counted by hutch init, which --as-pid-1 replaces by the command",
        ));
    }
    // bubblewrap's root tmpfs stays writable.
    let mut spec = Spec {
        root_readonly: false,
        ..Spec::default()
    };
    spec.security.seccomp = "unconfined".into();
    spec.security.landlock.enabled = false;
    spec.security.no_new_privs = true;
    // bubblewrap leaves the command in the caller's session (and so its
    // terminal) unless --new-session.
    spec.new_session = p.new_session;
    // The command is pid 1 of its pid namespace, as bubblewrap's.
    if p.as_pid_1 {
        spec.init = crate::spec::Init::None;
    }
    let cgroup = p.unshare_cgroup || (p.unshare_cgroup_try && caller.cgroupns_available);
    let ns = &mut spec.namespaces;
    ns.mount = true;
    ns.user = unshare_user;
    // With --pidns too: a pid namespace of its own inside the joined one.
    ns.pid = p.unshare_pid;
    ns.ipc = p.unshare_ipc;
    ns.uts = p.unshare_uts;
    ns.net = p.unshare_net;
    ns.cgroup = cgroup;
    if let Some(fd) = p.userns_fd {
        ns.join.user = Some(NamespaceRef::fd(fd));
    }
    if let Some(fd) = p.pidns_fd {
        ns.join.pid = Some(NamespaceRef::fd(fd));
    }
    // Entered by hutch init once the sandbox is built, as bubblewrap's
    // child does after its pivot_root.
    if let Some(fd) = p.userns2_fd {
        ns.join.user_after_setup = Some(NamespaceRef::fd(fd));
    }
    spec.network = if p.unshare_net {
        Network::None
    } else {
        Network::Host
    };
    if unshare_user {
        spec.identity.uid = Some(uid);
        spec.identity.gid = Some(gid);
        if root {
            // bubblewrap maps the sandbox's ids to the caller's own.
            spec.identity.host_uid = Some(caller.uid);
            spec.identity.host_gid = Some(caller.gid);
        }
    }
    if let Some(h) = &p.hostname {
        spec.identity.hostname = Some(utf8(h, "hostname")?);
    }
    spec.security = capabilities(p, caller, unshare_user, spec.security.clone())?;
    // bubblewrap's raw BPF programs, read as it reads them.
    for fd in p.seccomp_fd.iter().chain(&p.add_seccomp_fds) {
        let data = fds
            .read_fd(*fd)
            .map_err(|e| BwrapError::io("Can't read seccomp data", &e))?;
        if data.len() % 8 != 0 {
            return Err(die("Invalid seccomp data, must be multiple of 8"));
        }
        spec.security.seccomp_bpf.push(data);
    }
    if p.assert_userns_disabled && !unshare_user {
        // hutch locks nested user namespaces only in its own one.
        return Err(die(
            "creation of new user namespaces was not disabled as requested",
        ));
    }

    let mut extras = Extras {
        info_fd: p.info_fd,
        json_status_fd: p.json_status_fd,
        die_with_parent: p.die_with_parent,
        ..Extras::default()
    };
    extras.block_fds.extend(p.userns_block_fd);
    extras.block_fds.extend(p.block_fd);
    let host_proc = !spec.namespaces.pid && spec.namespaces.join.pid.is_none();
    let cover_proc = root && !unshare_user;
    for op in &p.ops {
        if let (Op::Proc(d), true) = (op, host_proc) {
            spec.fs.extend(host_proc_ops(&dest(d)?, cover_proc));
            continue;
        }
        let Some(fs) = fs_op(op, fds)? else { continue };
        if fs.dest() == Path::new("/") {
            let root = root_bind(&fs)?;
            if spec.fs.is_empty() && spec.root.is_none() {
                spec.root = Some(root);
                continue;
            }
        }
        let console = match (&fs, &caller.stdout_tty) {
            // bubblewrap's /dev/console: the caller's terminal, bound as
            // a device (no more access than stdout already gives).
            (FsOp::Dev { dest, .. }, Some(tty)) => Some(FsOp::DevBind {
                src: tty.clone(),
                dest: dest.join("console"),
                optional: false,
            }),
            _ => None,
        };
        spec.fs.push(fs);
        spec.fs.extend(console);
    }
    for lock in &p.lock_files {
        let root = spec.root.as_ref().map(|r| r.path.as_path());
        extras.locks.push(lock_file(lock, &spec.fs, root)?);
    }

    // The environment: the caller's, changed in order.
    let mut env: Vec<(OsString, OsString)> = caller.env.clone();
    for e in &p.env {
        match e {
            EnvOp::Clear => env.clear(),
            EnvOp::Set(k, v) => {
                env.retain(|(n, _)| n != k);
                env.push((k.clone(), v.clone()));
            }
            EnvOp::Unset(k) => env.retain(|(n, _)| n != k),
        }
    }
    let root = spec.root.as_ref().map(|r| r.path.as_path());
    let cwd = working_dir(p, caller, &spec.fs, root, &env)?;
    env.retain(|(n, _)| n != "PWD");
    env.push(("PWD".into(), cwd.clone().into_os_string()));
    let mut map = BTreeMap::new();
    for (k, v) in env {
        let key = utf8(&k, "environment variable")?;
        if key.is_empty() || key.contains('=') {
            continue;
        }
        map.insert(key, utf8(&v, "environment value")?);
    }
    spec.env = map;
    spec.cwd = Some(cwd);
    spec.command = p
        .command
        .iter()
        .map(|a| utf8(a, "argument"))
        .collect::<Result<_, _>>()?;
    if let Some(a0) = &p.argv0 {
        spec.argv0 = Some(utf8(a0, "--argv0")?);
    }
    Ok((spec, extras))
}

/// Capabilities as bubblewrap grants them: root keeps its own (effective
/// and permitted; no ambient), unless `--cap-add`/`--cap-drop` were used;
/// then, and for everyone else, exactly the requested ones in all five
/// sets (none by default).
///
/// In a user namespace of the sandbox's own, hutch locks nested user
/// namespaces there (`user.max_user_namespaces = 0`), and CAP_SYS_RESOURCE
/// over that namespace would let the sandbox raise the limit again
/// (bubblewrap keeps its lock in a parent namespace instead). So there it
/// is never granted: left out of root's own set and of `--cap-add ALL`,
/// and a `--cap-add CAP_SYS_RESOURCE` that would grant it is refused.
fn capabilities(
    p: &Parsed,
    caller: &Caller,
    userns: bool,
    mut sec: crate::spec::Security,
) -> Result<crate::spec::Security, BwrapError> {
    let root = caller.uid == 0;
    let all = (0..=crate::sys::cap_last_cap()).fold(0u64, |m, c| m | 1 << c);
    let sys_resource = caps::Capability::CAP_SYS_RESOURCE.bitmask();
    let withheld = if userns { sys_resource } else { 0 };
    let mut requested = if root { caller.effective & !withheld } else { 0 };
    // Whether the last word on CAP_SYS_RESOURCE was asking for it by name.
    let mut named_sys_resource = false;
    for c in &p.caps {
        match c {
            CapOp::Add(None) => requested = all & !withheld,
            CapOp::Add(Some(n)) => {
                requested |= 1 << n;
                named_sys_resource |= 1u64 << n == sys_resource;
            }
            CapOp::Drop(None) => {
                requested = 0;
                named_sys_resource = false;
            }
            CapOp::Drop(Some(n)) => {
                requested &= !(1 << n);
                named_sys_resource &= 1u64 << n != sys_resource;
            }
        }
    }
    if named_sys_resource && userns {
        return Err(die(
            "--cap-add CAP_SYS_RESOURCE in a user namespace of the sandbox's own is not supported by hutch-bwrap: \
             it would let the sandbox raise user.max_user_namespaces and undo the lock on nested user namespaces \
             (leave it out; docs/bwrap.md)",
        ));
    }
    requested &= all;
    let names = |mask: u64| -> Vec<String> {
        caps::all()
            .into_iter()
            .filter(|c| mask & c.bitmask() != 0)
            .map(|c| c.to_string())
            .collect()
    };
    // bubblewrap drops the bounding set to the requested caps only in a
    // user namespace of its own; otherwise it leaves it alone.
    let bounding = names(if userns { requested } else { caller.bounding });
    sec.cap_add = Vec::new();
    sec.capabilities = Some(if root && p.caps.is_empty() {
        CapabilitySets {
            bounding,
            effective: names(requested),
            permitted: names(requested),
            inheritable: names(caller.inheritable & requested),
            ambient: Vec::new(),
        }
    } else {
        let n = names(requested);
        CapabilitySets {
            bounding,
            effective: n.clone(),
            permitted: n.clone(),
            inheritable: n.clone(),
            ambient: n,
        }
    });
    Ok(sec)
}

fn fs_op(op: &Op, fds: &mut dyn FdReader) -> Result<Option<FsOp>, BwrapError> {
    let content = |fds: &mut dyn FdReader, fd: i32, dest: &OsStr| {
        let data = fds
            .read_fd(fd)
            .map_err(|e| BwrapError::io(format!("Can't read data for {}", show(dest)), &e))?;
        // Any bytes: text as it is, the rest as base64 in the Spec.
        Ok::<_, BwrapError>(Encoding::encode(data))
    };
    Ok(Some(match op {
        Op::Bind {
            kind,
            src,
            dest: d,
            allow_missing,
        } => {
            let Some(src_path) = source(src)? else {
                if *allow_missing {
                    return Ok(None);
                }
                return Err(missing(src));
            };
            let (src, dest) = (src_path, dest(d)?);
            match kind {
                BindKind::ReadWrite => FsOp::Bind {
                    src,
                    dest,
                    optional: false,
                },
                BindKind::ReadOnly => FsOp::RoBind {
                    src,
                    dest,
                    optional: false,
                },
                BindKind::Dev => FsOp::DevBind {
                    src,
                    dest,
                    optional: false,
                },
            }
        }
        Op::BindFd {
            fd,
            dest: d,
            read_only,
        } => {
            crate::sys::check_open(*fd).map_err(|e| {
                BwrapError::io(format!("Can't find source path /proc/self/fd/{fd}"), &e)
            })?;
            let src = std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|e| {
                BwrapError::io(format!("Can't find source path /proc/self/fd/{fd}"), &e)
            })?;
            let dest = dest(d)?;
            if *read_only {
                FsOp::RoBind {
                    src,
                    dest,
                    optional: false,
                }
            } else {
                FsOp::Bind {
                    src,
                    dest,
                    optional: false,
                }
            }
        }
        // That mount only, as bubblewrap's MS_REMOUNT without MS_REC.
        Op::RemountRo(d) => FsOp::RemountRo {
            dest: dest(d)?,
            recursive: false,
        },
        Op::Proc(d) => FsOp::Proc { dest: dest(d)? },
        Op::Dev(d) => FsOp::Dev {
            dest: dest(d)?,
            layout: DevLayout::Bubblewrap,
        },
        Op::Mqueue(d) => FsOp::Mqueue { dest: dest(d)? },
        Op::Tmpfs {
            dest: d,
            perms,
            size,
        } => FsOp::Tmpfs {
            dest: dest(d)?,
            size: size.map(ByteSize),
            nr_inodes: None,
            mode: Some(*perms),
        },
        Op::Dir { dest: d, perms } => FsOp::Dir {
            dest: dest(d)?,
            mode: Some(*perms),
        },
        Op::File { fd, dest: d, perms } => {
            let (content, encoding) = content(fds, *fd, d)?;
            FsOp::File {
                content,
                encoding,
                dest: dest(d)?,
                mode: Some(*perms),
            }
        }
        // A file outside the root bound at DEST, read-write or read-only.
        Op::BindData {
            fd,
            dest: d,
            perms,
            read_only,
        } => {
            let (content, encoding) = content(fds, *fd, d)?;
            FsOp::BindData {
                content,
                encoding,
                dest: dest(d)?,
                mode: Some(*perms),
                writable: !*read_only,
            }
        }
        Op::Symlink { target, dest: d } => FsOp::Symlink {
            target: PathBuf::from(utf8(target, "symlink target")?),
            dest: dest(d)?,
        },
        Op::Chmod { perms, dest: d } => FsOp::Chmod {
            dest: dest(d)?,
            mode: *perms,
        },
        Op::Overlay {
            lowers,
            upper,
            work,
            dest: d,
        } => FsOp::Overlay {
            lowers: overlay_lowers(lowers)?,
            upper: source(upper)?.ok_or_else(|| missing(upper))?,
            work: source(work)?.ok_or_else(|| missing(work))?,
            dest: dest(d)?,
        },
        Op::TmpOverlay { lowers, dest: d } => FsOp::TmpOverlay {
            lowers: overlay_lowers(lowers)?,
            dest: dest(d)?,
            size: None,
        },
        Op::RoOverlay { lowers, dest: d } => FsOp::RoOverlay {
            lowers: overlay_lowers(lowers)?,
            dest: dest(d)?,
        },
    }))
}

/// The fds bubblewrap passes to the command: every fd its caller left
/// open (`open`: not close-on-exec, 3 and above, read when hutch-bwrap
/// starts the sandbox), but those it consumes itself. `--args`,
/// `--file`, `--bind-data`, `--ro-bind-data` and `--seccomp` fds are
/// read and closed when parsed (they are no longer open); `--bind-fd`
/// fds are closed after the root is built, `--info-fd` and
/// `--json-status-fd` in the child, `--block-fd` after it is read, and
/// `--sync-fd` is held by pid 1 only (bubblewrap.c). `--userns`,
/// `--pidns` and `--userns-block-fd` fds stay open in bubblewrap's
/// child, and so reach the command.
pub fn passed_fds(p: &Parsed, open: &[i32]) -> Vec<i32> {
    let mut consumed: Vec<i32> = [p.info_fd, p.json_status_fd, p.block_fd, p.sync_fd]
        .into_iter()
        .flatten()
        .chain(p.seccomp_fd)
        .chain(p.add_seccomp_fds.iter().copied())
        .collect();
    for op in &p.ops {
        match op {
            Op::BindFd { fd, .. } | Op::File { fd, .. } | Op::BindData { fd, .. } => {
                consumed.push(*fd)
            }
            _ => {}
        }
    }
    open.iter()
        .copied()
        .filter(|fd| *fd >= 3 && !consumed.contains(fd))
        .collect()
}

/// `--proc` without a pid namespace of the sandbox's own: bubblewrap
/// binds the host's /proc (a procfs of a pid namespace the sandbox does
/// not own cannot be mounted from a user namespace) and covers `sys`,
/// `sysrq-trigger`, `irq` and `bus` read-only where the sandbox could
/// write them (root without a user namespace).
fn host_proc_ops(dest: &Path, cover: bool) -> Vec<FsOp> {
    let bind = |src: PathBuf, dest: PathBuf, ro: bool| FsOp::Mount {
        fstype: "bind".into(),
        src: Some(src),
        dest,
        options: [&["nosuid", "nodev"][..], if ro { &["ro"] } else { &[] }]
            .concat()
            .iter()
            .map(|o| o.to_string())
            .collect(),
        optional: false,
    };
    let mut ops = vec![bind("/proc".into(), dest.to_path_buf(), false)];
    if cover {
        for sub in ["sys", "sysrq-trigger", "irq", "bus"] {
            let host = Path::new("/proc").join(sub);
            if host.exists() {
                ops.push(bind(host, dest.join(sub), true));
            }
        }
    }
    ops
}

/// A bind on `/` as the first operation (`--ro-bind / /`, the usual
/// start) is the Spec's bound root: bubblewrap mounts it over its empty
/// root, so what follows is mounted inside it. Read-only from the start
/// for `--ro-bind`, so that no later operation creates anything on the
/// host. A bind on `/` after other operations stays an operation: it is
/// mounted over the root built so far, hiding it, as in bubblewrap.
fn root_bind(op: &FsOp) -> Result<crate::spec::RootDir, BwrapError> {
    let unsupported = |what: &str| {
        die(format!(
            "{what} on / is not supported by hutch-bwrap (docs/bwrap.md)"
        ))
    };
    let (src, opts): (&PathBuf, &[&str]) = match op {
        FsOp::Bind { src, .. } => (src, &["nosuid", "nodev"]),
        FsOp::RoBind { src, .. } => (src, &["nosuid", "nodev", "ro"]),
        FsOp::DevBind { src, .. } => (src, &["nosuid"]),
        other => return Err(unsupported(&format!("--{}", other.name()))),
    };
    let mut root = crate::spec::RootDir::new(src.clone());
    root.options = opts.iter().map(|o| o.to_string()).collect();
    Ok(root)
}

/// Command-line order is bottom to top; the Spec's is top first.
fn overlay_lowers(srcs: &[OsString]) -> Result<Vec<PathBuf>, BwrapError> {
    srcs.iter()
        .rev()
        .map(|s| source(s)?.ok_or_else(|| missing(s)))
        .collect()
}

/// Where a sandbox path comes from, as far as the operations tell: the
/// last operation whose mount (or made path) covers it decides.
enum Shown {
    /// A host path (through a bind, or the bound root).
    Host(PathBuf),
    /// Made by hutch (a tmpfs, a dir, /proc...) exactly there.
    Made,
    /// Not there.
    Missing,
}

fn shown(inside: &Path, ops: &[FsOp], root: Option<&Path>) -> Shown {
    for op in ops.iter().rev() {
        let Ok(rest) = inside.strip_prefix(op.dest()) else {
            continue;
        };
        let here = rest.as_os_str().is_empty();
        let join = |src: &Path| {
            if here {
                src.to_path_buf()
            } else {
                src.join(rest)
            }
        };
        return match op {
            FsOp::Bind { src, .. } | FsOp::RoBind { src, .. } | FsOp::DevBind { src, .. } => {
                Shown::Host(join(src))
            }
            FsOp::Mount { src: Some(src), .. } => Shown::Host(join(src)),
            FsOp::Overlay { lowers, .. }
            | FsOp::TmpOverlay { lowers, .. }
            | FsOp::RoOverlay { lowers, .. } => lowers
                .iter()
                .map(|l| join(l))
                .find(|p| p.exists())
                .map_or(Shown::Missing, Shown::Host),
            // A path made exactly there; a file or link under it is not a
            // directory.
            FsOp::Dir { .. }
            | FsOp::Tmpfs { .. }
            | FsOp::Proc { .. }
            | FsOp::Dev { .. }
            | FsOp::Mqueue { .. }
                if here =>
            {
                Shown::Made
            }
            _ if !here => match op {
                FsOp::Dir { .. }
                | FsOp::File { .. }
                | FsOp::BindData { .. }
                | FsOp::Symlink { .. }
                | FsOp::Chmod { .. }
                | FsOp::RemountRo { .. } => continue,
                _ => Shown::Missing,
            },
            _ => continue,
        };
    }
    match root {
        Some(r) => Shown::Host(r.join(inside.strip_prefix("/").unwrap_or(inside))),
        None => Shown::Missing,
    }
}

/// The host path a sandbox path shows (through a bind or the bound root).
fn host_path(inside: &Path, ops: &[FsOp], root: Option<&Path>) -> Option<PathBuf> {
    match shown(inside, ops, root) {
        Shown::Host(p) => Some(p),
        _ => None,
    }
}

/// `--lock-file`: the file the sandbox sees, opened on the host through
/// the bind that shows it and read-locked (the lock is the inode's, so
/// it is the same lock bubblewrap's pid 1 takes).
fn lock_file(path: &OsStr, ops: &[FsOp], root: Option<&Path>) -> Result<std::fs::File, BwrapError> {
    let inside = dest(path)?;
    let open_err =
        |e: &std::io::Error| BwrapError::io(format!("Unable to open lock file {}", show(path)), e);
    let host = host_path(&inside, ops, root).ok_or_else(|| {
        die(format!(
            "Unable to open lock file {}: hutch-bwrap locks only files under a bind (docs/bwrap.md)",
            show(path)
        ))
    })?;
    let f = std::fs::File::open(&host).map_err(|e| open_err(&e))?;
    crate::sys::read_lock(&f)
        .map_err(|e| BwrapError::io(format!("Unable to lock file {}", show(path)), &e))?;
    Ok(f)
}

/// bubblewrap's working directory: `--chdir`, else the caller's if the
/// sandbox shows it, else `$HOME` if it does, else `/`. Whether the
/// sandbox shows a path is read from the binds (hutch resolves the
/// working directory inside the built root, where a missing one fails).
fn working_dir(
    p: &Parsed,
    caller: &Caller,
    ops: &[FsOp],
    root: Option<&Path>,
    env: &[(OsString, OsString)],
) -> Result<PathBuf, BwrapError> {
    if let Some(d) = &p.chdir {
        return dest(d);
    }
    let shown = |inside: &Path| match shown(inside, ops, root) {
        Shown::Host(h) => h.is_dir(),
        Shown::Made => true,
        Shown::Missing => false,
    };
    if let Some(cwd) = &caller.cwd
        && shown(cwd)
    {
        return Ok(cwd.clone());
    }
    if let Some((_, home)) = env.iter().rev().find(|(k, _)| k == "HOME") {
        let home = Path::new(home);
        if home.is_absolute() && shown(home) {
            return Ok(PathBuf::from(OsStr::from_bytes(
                home.as_os_str().as_bytes(),
            )));
        }
    }
    Ok(PathBuf::from("/"))
}

#[cfg(test)]
mod tests {
    use super::super::args::{self, ProcessFds};
    use super::*;

    fn caller(uid: u32) -> Caller {
        Caller {
            uid,
            gid: uid,
            env: vec![("HOME".into(), "/root".into()), ("A".into(), "1".into())],
            cwd: Some("/usr".into()),
            effective: if uid == 0 { (1 << 41) - 1 } else { 0 },
            inheritable: 0,
            bounding: (1 << 41) - 1,
            userns_available: true,
            cgroupns_available: true,
            stdout_tty: None,
        }
    }

    fn t(uid: u32, argv: &[&str]) -> Result<Spec, BwrapError> {
        let a = argv.iter().map(OsString::from).collect();
        let p = args::parse(a, &mut ProcessFds)?;
        translate(&p, &caller(uid), &mut ProcessFds).map(|(s, _)| s)
    }

    #[test]
    fn dev_is_bubblewraps_with_the_terminal_as_console() {
        let s = t(0, &["--dev", "/dev", "true"]).unwrap();
        assert_eq!(
            s.fs,
            [FsOp::Dev {
                dest: "/dev".into(),
                layout: DevLayout::Bubblewrap
            }]
        );
        let mut c = caller(0);
        c.stdout_tty = Some("/dev/pts/7".into());
        let a = ["--dev", "/d", "true"].iter().map(OsString::from).collect();
        let p = args::parse(a, &mut ProcessFds).unwrap();
        let (s, _) = translate(&p, &c, &mut ProcessFds).unwrap();
        assert_eq!(
            s.fs[1],
            FsOp::DevBind {
                src: "/dev/pts/7".into(),
                dest: "/d/console".into(),
                optional: false
            }
        );
    }

    #[test]
    fn no_namespace_unless_asked_and_the_env_is_kept() {
        let s = t(0, &["--ro-bind", "/usr", "/usr", "true"]).unwrap();
        let ns = &s.namespaces;
        assert!(ns.mount && !ns.user && !ns.pid && !ns.net && !ns.ipc && !ns.uts && !ns.cgroup);
        assert_eq!(s.network, Network::Host);
        assert_eq!(s.env["A"], "1");
        assert_eq!(
            s.cwd.as_deref(),
            Some(Path::new("/usr")),
            "the caller's cwd is shown"
        );
        assert_eq!(s.env["PWD"], "/usr");
        assert!(!s.root_readonly);
        // Unprivileged: a user namespace, mapped to the caller's own ids.
        let s = t(1000, &["--unshare-net", "true"]).unwrap();
        assert!(s.namespaces.user && s.namespaces.net);
        assert_eq!(s.identity.uid, Some(1000));
        assert_eq!(s.cwd.as_deref(), Some(Path::new("/")));
        crate::spec::validate(&s).unwrap();
    }

    #[test]
    fn env_ops_apply_in_order() {
        let s = t(
            0,
            &[
                "--setenv",
                "B",
                "2",
                "--clearenv",
                "--setenv",
                "C",
                "3",
                "--unsetenv",
                "X",
                "true",
            ],
        )
        .unwrap();
        assert!(!s.env.contains_key("A") && !s.env.contains_key("B"));
        assert_eq!(s.env["C"], "3");
    }

    #[test]
    fn caps_follow_bubblewrap() {
        let s = t(0, &["true"]).unwrap();
        let c = s.security.capabilities.clone().unwrap();
        assert!(c.effective.contains(&"CAP_SYS_ADMIN".to_string()) && c.ambient.is_empty());
        let s = t(
            0,
            &["--cap-drop", "ALL", "--cap-add", "CAP_NET_RAW", "true"],
        )
        .unwrap();
        let c = s.security.capabilities.unwrap();
        assert_eq!(c.ambient, ["CAP_NET_RAW"]);
        assert_eq!(
            c.bounding.len(),
            41,
            "no user namespace: the bounding set is left alone"
        );
        let s = t(1000, &["--unshare-user", "--uid", "0", "true"]).unwrap();
        assert!(s.security.capabilities.unwrap().effective.is_empty());
    }

    #[test]
    fn bubblewraps_checks_and_refusals() {
        for (uid, argv, msg) in [
            (1000, &["true"][..], None),
            (
                0,
                &["--uid", "5", "true"],
                Some("Specifying --uid requires --unshare-user or --userns"),
            ),
            (
                0,
                &["--hostname", "h", "true"],
                Some("Specifying --hostname requires --unshare-uts"),
            ),
            (
                0,
                &["--as-pid-1", "true"],
                Some("Specifying --as-pid-1 requires --unshare-pid"),
            ),
            (
                0,
                &["--disable-userns", "true"],
                Some("--disable-userns requires --unshare-user"),
            ),
            (
                0,
                &["--ro-bind", "/nonexistent-hutch", "/x", "true"],
                Some("Can't find source path /nonexistent-hutch: No such file or directory"),
            ),
            (0, &["--dir", "/x"], Some("No command specified")),
        ] {
            let r = t(uid, argv);
            match msg {
                None => assert!(r.is_ok(), "{argv:?}: {r:?}"),
                Some(m) => assert_eq!(r.unwrap_err().to_string(), m, "{argv:?}"),
            }
        }
        let s = t(0, &["--unshare-pid", "--as-pid-1", "true"]).unwrap();
        assert_eq!(s.init, crate::spec::Init::None);
        assert!(s.namespaces.pid);
        assert_eq!(
            t(0, &["--unshare-pid", "true"]).unwrap().init,
            crate::spec::Init::Hutch
        );
        let e = t(
            0,
            &[
                "--unshare-pid",
                "--as-pid-1",
                "--overlay-src",
                "/usr",
                "--tmp-overlay",
                "/usr",
                "true",
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("--as-pid-1 with --tmp-overlay is not supported by hutch-bwrap"),
            "{e}"
        );
        // --userns2: entered after setup.
        let s = t(0, &["--userns", "0", "--userns2", "1", "true"]).unwrap();
        assert_eq!(s.namespaces.join.user.as_ref().and_then(|r| r.fd), Some(0));
        let after = s.namespaces.join.user_after_setup.as_ref();
        assert_eq!(after.and_then(|r| r.fd), Some(1));
        // --pidns with --unshare-pid: a pid namespace nested in the joined one.
        let s = t(0, &["--pidns", "0", "--unshare-pid", "true"]).unwrap();
        assert!(s.namespaces.pid && s.namespaces.join.pid.is_some());
        // A missing source of a -try bind is skipped.
        let s = t(0, &["--ro-bind-try", "/nonexistent-hutch", "/x", "true"]).unwrap();
        assert!(s.fs.is_empty());
    }

    #[test]
    fn the_command_gets_the_open_fds_bubblewrap_does_not_consume() {
        let a = [
            "--info-fd",
            "7",
            "--json-status-fd",
            "8",
            "--block-fd",
            "9",
            "--sync-fd",
            "10",
            "--bind-fd",
            "11",
            "/b",
            "--userns-block-fd",
            "12",
            "--unshare-user",
            "true",
        ];
        let p = args::parse(a.iter().map(OsString::from).collect(), &mut ProcessFds).unwrap();
        let open = [3, 5, 7, 8, 9, 10, 11, 12, 13];
        assert_eq!(passed_fds(&p, &open), [3, 5, 12, 13]);
        // hutch's default Spec passes none and makes a session.
        let d = Spec::default();
        assert!(d.inherit_fds.is_empty() && !d.inherit_open_fds && d.new_session);
        // bubblewrap's: the caller's session unless --new-session.
        assert!(!t(0, &["true"]).unwrap().new_session);
        assert!(t(0, &["--new-session", "true"]).unwrap().new_session);
    }

    #[test]
    fn overlay_sources_become_top_first() {
        let s = t(
            0,
            &[
                "--overlay-src",
                "/usr",
                "--overlay-src",
                "/etc",
                "--ro-overlay",
                "/o",
                "true",
            ],
        )
        .unwrap();
        assert!(
            matches!(&s.fs[0], FsOp::RoOverlay { lowers, .. } if lowers[0] == Path::new("/etc"))
        );
    }
}
