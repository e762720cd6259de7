//! Executing a [`Plan`] in the child, through the mockable [`FsSys`] layer.
//!
//! Order (fixed; the caller made `/` a slave mount first): open sources →
//! (the caller switches identity) → staging tmpfs → root tmpfs → attach
//! the supervisor's detached mounts (idmapped lowers) → (an image run) the
//! overlay of the image's layers becomes the root → steps in order →
//! (proxy mode) the Unix door → root read-only → pivot_root → detach the
//! old root.
//!
//! Destinations are always resolved inside the new root (`RESOLVE_IN_ROOT`)
//! and mounted through `/proc/self/fd/N`, so a symlink made by an earlier
//! step can never send a mount outside the new root. Overlay layers are
//! passed the same way, so no raw path ever reaches an option string.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

mod mounts;

use super::builder::{Builder, Dir, STAGING, STAGING_ROOT, dir_fd, staging_under};
use super::plan::{DEV_BIND, PROC_ATTRS, Plan, RO_BIND, RW_BIND, Step, Upper, tmpfs_data};
pub(super) use super::syscalls::{BASE, Hint, O_PATH_DIR, OpResult, fd_path, plain};
use super::syscalls::op_name;
pub use super::syscalls::{BuildError, FsSys};
use crate::sys::{
    Errno, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, RESOLVE_IN_ROOT,
    RESOLVE_NO_SYMLINKS, SysError,
};

/// What survives the build: fds of the private overlay uppers, opened for
/// counting changes after the workload ends, and the Unix door when one
/// was asked for.
#[derive(Debug, Default)]
pub struct Built {
    pub tmp_upper_fds: Vec<OwnedFd>,
    pub unix_door: Option<OwnedFd>,
    /// Overlays staged for a claim ([`Plan::claim_overlays`]), in plan
    /// order: mounted by [`super::claim::attach`].
    pub staged: Vec<super::claim::Staged>,
    /// A resident sandbox's overlays ([`Plan::resident`]): their layers,
    /// mounted by each command ([`super::resident::mount_overlays`]).
    pub resident: Vec<super::resident::Layers>,
}

/// Files of /proc that leak host state: covered with /dev/null.
const PROC_MASKED_FILES: &[&CStr] = &[
    c"kcore",
    c"keys",
    c"key-users",
    c"timer_list",
    c"sched_debug",
    c"latency_stats",
    c"kallsyms",
    c"kpagecount",
    c"kpageflags",
    c"kpagecgroup",
    c"config.gz",
    c"sysrq-trigger",
];
#[cfg(test)]
pub(crate) const PROC_MASKED_FILE_COUNT: usize = PROC_MASKED_FILES.len();
/// Directories of /proc that leak host state: covered with an empty tmpfs.
const PROC_MASKED_DIRS: &[&CStr] = &[c"acpi", c"asound", c"scsi", c"firmware", c"driver"];
/// Directories of /proc kept but read-only.
const PROC_READONLY: &[&CStr] = &[c"sys", c"irq", c"bus", c"fs"];
/// Device nodes bound from the host into a new /dev.
const DEV_NODES: &[&CStr] = &[c"null", c"zero", c"full", c"random", c"urandom", c"tty"];
/// Symlinks of a new /dev.
const DEV_LINKS: &[(&CStr, &CStr)] = &[
    (c"/proc/self/fd", c"fd"),
    (c"/proc/self/fd/0", c"stdin"),
    (c"/proc/self/fd/1", c"stdout"),
    (c"/proc/self/fd/2", c"stderr"),
    (c"pts/ptmx", c"ptmx"),
];

/// Host sources opened by [`open_sources`] (None: optional and missing, or
/// handed over by the supervisor as detached mounts, attached by
/// [`build`]).
#[derive(Debug, Default)]
pub struct Sources(pub Vec<Option<OwnedFd>>, pub Vec<(usize, OwnedFd)>);

/// First part of the fixed order (once `/` is a slave mount): open every
/// host source. This runs with the caller's filesystem identity (before the
/// sandbox switches to its own ids), so root-owned paths the launching user
/// may name stay reachable.
pub fn open_sources<S: FsSys>(sys: &mut S, plan: &Plan) -> Result<Sources, BuildError> {
    let mut source_fds = Vec::with_capacity(plan.sources.len());
    for src in &plan.sources {
        if src.idmapped || src.handed_over {
            source_fds.push(None);
            continue;
        }
        let mut flags = libc::O_PATH;
        if src.directory {
            flags |= libc::O_DIRECTORY;
        }
        if src.no_follow {
            flags |= libc::O_NOFOLLOW;
        }
        let resolve = if src.no_follow {
            RESOLVE_NO_SYMLINKS
        } else {
            0
        };
        match sys.open(None, &src.path, flags, 0, resolve) {
            Ok(fd) => source_fds.push(Some(fd)),
            Err(e) if e.errno == Errno::ENOENT && src.optional => source_fds.push(None),
            Err(e) => {
                let hint = match e.errno {
                    Errno::ENOENT => {
                        Some("the host path does not exist; fix the path or use an optional bind")
                    }
                    Errno::ENOTDIR => Some("an overlay layer must be a directory"),
                    Errno::ELOOP => Some("this path must not be a symlink"),
                    Errno::EACCES => Some("the launching user cannot reach this host path"),
                    _ => None,
                };
                return Err(BuildError {
                    what: format!(
                        "opening host path {}",
                        String::from_utf8_lossy(src.path.as_bytes())
                    ),
                    err: e,
                    hint: hint.map(Hint::from),
                });
            }
        }
    }
    // Warm sandboxes: a host upper's directory as a detached mount, made
    // with this identity (it may be the launcher's own 0700 directory).
    let mut holders = Vec::new();
    for &i in &plan.claim_overlays {
        if let Some(Step::Overlay {
            upper: Upper::Host { upper, work },
            ..
        }) = plan.steps.get(i)
        {
            let held = super::claim::hold_upper(sys, plan, &mut source_fds, *upper, *work)
                .map_err(|(err, hint)| BuildError {
                    what: format!(
                        "staging the upper {} for a warm sandbox",
                        String::from_utf8_lossy(plan.sources[*upper].path.as_bytes())
                    ),
                    err,
                    hint,
                })?;
            holders.push((i, held));
        }
    }
    Ok(Sources(source_fds, holders))
}

/// Second part: build the new root and pivot into it. `handed` pairs a
/// source index with a detached mount received from the supervisor (an
/// idmapped workspace layer, or a path only host root may reach). `op_names`
/// describe each step for errors (e.g. `fs[3] (ro-bind /usr)`). `door`
/// (relative to the new root, e.g. `run/hutch/proxy.sock`) asks for a
/// listening Unix socket there, made after the steps: it exists only
/// inside the sandbox, so nothing of it is ever left on the host.
pub fn build<S: FsSys>(
    sys: &mut S,
    plan: &Plan,
    sources: Sources,
    handed: Vec<(usize, OwnedFd)>,
    op_names: &[String],
    door: Option<&CStr>,
) -> Result<Built, BuildError> {
    let staged = build_unpivoted(sys, plan, sources, handed, op_names, door)?;
    pivot(sys, plan, staged)
}

/// A new root built and not yet entered ([`build_unpivoted`]): the
/// process still sees the host's tree (with the staging tmpfs over `/tmp`
/// until [`expose_root`]).
#[derive(Debug)]
pub struct Unpivoted {
    pub built: Built,
    root: OwnedFd,
    /// The host directory the root is a bind of (`Plan::root`), opened
    /// before the staging tmpfs covered `/tmp`.
    root_source: Option<OwnedFd>,
}

/// [`build`] up to, not including, the read-only remount of the root and
/// `pivot_root`: for a caller that runs something in this mount namespace
/// first (an OCI runtime's createContainer hooks, which the runtime spec
/// runs "before pivot_root", with the host's `/`).
pub fn build_unpivoted<S: FsSys>(
    sys: &mut S,
    plan: &Plan,
    sources: Sources,
    handed: Vec<(usize, OwnedFd)>,
    op_names: &[String],
    door: Option<&CStr>,
) -> Result<Unpivoted, BuildError> {
    let err = |what: &str| {
        let what = what.to_string();
        move |err: SysError| BuildError {
            what,
            err,
            hint: None,
        }
    };
    let Sources(source_fds, holders) = sources;
    let staging_size = 1 << 20;
    let data_size: usize = plan
        .steps
        .iter()
        .map(|s| match s {
            Step::File { content, .. } => content.len() + 4096,
            _ => 0,
        })
        .sum();
    let staging_data = tmpfs_data(0o700, (staging_size + data_size) as u64, 4096);
    sys.mount(
        Some(c"tmpfs"),
        STAGING,
        Some(c"tmpfs"),
        BASE,
        Some(&staging_data),
    )
    .map_err(err("mounting the staging tmpfs"))?;
    let staging = sys
        .open(None, STAGING, O_PATH_DIR, 0, 0)
        .map_err(err("opening the staging tmpfs"))?;
    sys.mkdirat(staging.as_fd(), c"root", 0o755)
        .map_err(err("creating the new root"))?;
    let root = match &plan.root {
        Some(r) => {
            let root = mounts::bind_root(sys, source_fds[r.source].as_ref(), STAGING_ROOT, r.attrs)
                .map_err(err("binding the root directory"))?;
            // A root that holds /tmp (the host's /) copied the staging
            // tmpfs: the sandbox sees the host's /tmp there instead.
            if let Some(rel) = staging_under(plan.sources[r.source].path.as_bytes()) {
                let at = sys
                    .open(Some(root.as_fd()), &rel, libc::O_PATH, 0, RESOLVE_IN_ROOT)
                    .map_err(err("finding the staging copy in the root directory"))?;
                sys.umount2(&fd_path(at.as_fd()), libc::MNT_DETACH)
                    .map_err(err("detaching the staging copy in the root directory"))?;
            }
            root
        }
        None => {
            let root_data = tmpfs_data(0o755, (staging_size + data_size) as u64, 16384);
            sys.mount(
                Some(c"tmpfs"),
                STAGING_ROOT,
                Some(c"tmpfs"),
                BASE,
                Some(&root_data),
            )
            .map_err(err("mounting the root tmpfs"))?;
            sys.open(None, STAGING_ROOT, O_PATH_DIR, 0, 0)
                .map_err(err("opening the new root"))?
        }
    };

    let mut b = Builder {
        sys,
        root,
        source_fds,
        holders,
        host_dev: None,
        scratch: 0,
        nodes_mounted: false,
        staging_in_source: plan
            .sources
            .iter()
            .map(|src| staging_under(src.path.as_bytes()))
            .collect(),
        parent_mode: 0o755,
    };
    for (index, fd) in handed {
        let dir = b
            .sys
            .is_dir(fd.as_fd())
            .map_err(err("inspecting a mount handed over by the supervisor"))?;
        let at = if dir {
            b.scratch_dir(staging.as_fd())
        } else {
            b.scratch_file(staging.as_fd())
        }
        .map_err(err(
            "creating a mount point for a mount handed over by the supervisor",
        ))?;
        b.sys
            .move_mount(fd.as_fd(), &at)
            .map_err(err("attaching a mount handed over by the supervisor"))?;
        drop(fd);
        let flags = if dir { O_PATH_DIR } else { libc::O_PATH };
        let opened = b
            .sys
            .open(None, &at, flags, 0, 0)
            .map_err(err("opening a mount handed over by the supervisor"))?;
        b.source_fds[index] = Some(opened);
    }
    if !plan.image_lowers.is_empty() {
        let lowers: Vec<BorrowedFd<'_>> = plan
            .image_lowers
            .iter()
            .filter_map(|i| b.source_fds[*i].as_ref().map(|fd| fd.as_fd()))
            .collect();
        let root = super::image_root::mount(b.sys, staging.as_fd(), b.root.as_fd(), &lowers)
            .map_err(err("mounting the image's layers as the new root"))?;
        drop(lowers);
        b.root = root;
    }

    let mut built = Built::default();
    for (i, step) in plan.steps.iter().enumerate() {
        let what = op_name(op_names, i);
        let tmp_upper = if plan.resident && plan.claim_overlays.contains(&i) {
            let layers = b.keep_layers(step, i).map_err(|(err, hint)| BuildError {
                what: what.clone(),
                err,
                hint,
            })?;
            built.resident.push(layers);
            None
        } else if plan.claim_overlays.contains(&i) {
            // A warm sandbox: the overlay is mounted when a command claims
            // it (only its filesystem context is made now: fs::claim).
            b.stage_overlay(step, i)
                .map(|(staged, counted)| {
                    built.staged.push(staged);
                    counted
                })
                .map_err(|(err, hint)| BuildError {
                    what: what.clone(),
                    err,
                    hint,
                })?
        } else {
            b.step(step, staging.as_fd())
                .map_err(|(err, hint)| BuildError { what, err, hint })?
        };
        if let Some(fd) = tmp_upper {
            built.tmp_upper_fds.push(fd);
        }
    }
    if let Some(door) = door {
        let (parent, name) = b.parent_of(door).map_err(|(err, hint)| BuildError {
            what: "creating the egress proxy's Unix door".into(),
            err,
            hint,
        })?;
        let listener = b.sys.unix_listener(dir_fd(&b.root, &parent), &name);
        built.unix_door = Some(listener.map_err(err("creating the egress proxy's Unix door"))?);
    }

    // The host directory of a bound root that does not hold the staging
    // tmpfs: where expose_root can show the built root.
    let root_source = plan
        .root
        .as_ref()
        .filter(|r| b.staging_in_source[r.source].is_none())
        .and_then(|r| b.source_fds[r.source].take());
    drop(staging);
    Ok(Unpivoted {
        built,
        root: b.root,
        root_source,
    })
}

/// Show the built root at its host directory (`Plan::root`'s source) in
/// this mount namespace, and take the staging tmpfs off `/tmp`: what a
/// process joining this mount namespace now sees is the host's tree, with
/// the container's root (and every mount made in it) at the path the
/// config names, as runc's bind of the rootfs onto itself shows it. A
/// mount made there lands in the root that `pivot` enters; a file written
/// there is in the root's filesystem. Nothing of this propagates to the
/// host: `/` is a slave mount here. A root that is not a bound host
/// directory (a tmpfs) stays where it was staged.
pub fn expose_root<S: FsSys>(sys: &mut S, staged: &mut Unpivoted) -> Result<(), BuildError> {
    let Some(at) = staged.root_source.take() else {
        return Ok(());
    };
    let err = |what: &'static str| {
        move |err: SysError| BuildError {
            what: what.into(),
            err,
            hint: None,
        }
    };
    sys.move_mount_at(staged.root.as_fd(), at.as_fd(), c"")
        .map_err(err("moving the new root onto its host directory"))?;
    drop(at);
    sys.umount2(STAGING, libc::MNT_DETACH)
        .map_err(err("detaching the staging tmpfs"))
}

/// The rest of [`build`]: the root made read-only (when the plan says
/// so), `pivot_root` into it, the old root detached.
pub fn pivot<S: FsSys>(sys: &mut S, plan: &Plan, staged: Unpivoted) -> Result<Built, BuildError> {
    let err = |what: &str| {
        let what = what.to_string();
        move |err: SysError| BuildError {
            what,
            err,
            hint: None,
        }
    };
    let Unpivoted {
        built,
        root,
        root_source,
    } = staged;
    drop(root_source);
    if plan.root_readonly {
        // A bound root keeps its own flags; the root tmpfs is nosuid,nodev.
        let attrs = if plan.root.is_some() {
            MOUNT_ATTR_RDONLY
        } else {
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | crate::sys::MOUNT_ATTR_NODEV
        };
        sys.mount_setattr(root.as_fd(), false, attrs)
            .map_err(err("making the new root read-only"))?;
    }
    // pivot_root(".", ".") stacks the old root on top of the new one; the
    // detach then removes it, staging and host sources included.
    sys.fchdir(root.as_fd())
        .map_err(err("entering the new root"))?;
    sys.pivot_root(c".", c".")
        .map_err(err("pivot_root into the new root"))?;
    sys.umount2(c".", libc::MNT_DETACH)
        .map_err(err("detaching the old root"))?;
    sys.chdir(c"/").map_err(err("entering the new root"))?;
    if let Some(r) = plan.root.as_ref().filter(|r| r.propagation != 0) {
        // After pivot_root, which refuses a shared root; every mount here
        // is already a slave of the host's: shared peer groups are new.
        sys.mount(None, c"/", None, r.propagation, None)
            .map_err(err("setting the new root's propagation"))?;
    }
    Ok(built)
}

impl<S: FsSys> Builder<'_, S> {
    /// A per-command init's remount of a `Proc`, `Dev`, `Tmpfs` or
    /// `Mqueue` step ([`super::resident::refresh`]): the step again, over
    /// the kept mount.
    pub(super) fn refresh_step(&mut self, step: &Step, staging: BorrowedFd<'_>) -> OpResult<()> {
        self.step(step, staging).map(drop)
    }

    fn step(&mut self, step: &Step, staging: BorrowedFd<'_>) -> OpResult<Option<OwnedFd>> {
        self.parent_mode = match step {
            Step::Dir { mode, .. } | Step::File { mode, .. } => parent_mode(*mode),
            _ => 0o755,
        };
        match step {
            Step::Bind {
                source,
                dest,
                attrs,
            } => {
                let Some(src) = &self.source_fds[*source] else {
                    return Ok(None);
                };
                let src_path = fd_path(src.as_fd());
                let is_dir = plain(self.sys.is_dir(src.as_fd()))?;
                let target = self.ensure(dest, is_dir)?;
                plain(self.sys.mount(
                    Some(&src_path),
                    &fd_path(target.as_fd()),
                    None,
                    libc::MS_BIND | libc::MS_REC,
                    None,
                ))?;
                drop(target);
                if dest.to_bytes() == b"." {
                    // Over the new root itself (bubblewrap's bind on `/`
                    // after other operations): what follows goes on the
                    // bind, which a lookup of the root's path now finds.
                    self.root = plain(self.sys.open(None, STAGING_ROOT, O_PATH_DIR, 0, 0))?;
                }
                self.drop_staging_copy(*source, dest)?;
                self.set_attrs(dest, *attrs)?;
            }
            Step::Overlay {
                lowers,
                upper,
                dest,
            } => return self.overlay(lowers, upper, dest, staging),
            Step::Tmpfs { dest, data } => {
                let target = self.ensure(dest, true)?;
                plain(self.sys.mount(
                    Some(c"tmpfs"),
                    &fd_path(target.as_fd()),
                    Some(c"tmpfs"),
                    BASE,
                    Some(data),
                ))?;
            }
            Step::Proc { dest } => self.proc(dest)?,
            Step::Dev { dest, bubblewrap } => self.dev(dest, *bubblewrap)?,
            Step::Mqueue { dest } => {
                let target = self.ensure(dest, true)?;
                plain(self.sys.mount(
                    Some(c"mqueue"),
                    &fd_path(target.as_fd()),
                    Some(c"mqueue"),
                    BASE | libc::MS_NOEXEC,
                    None,
                ))?;
            }
            // As bubblewrap's ensure_dir: a directory already there (a
            // host one under a bind, perhaps) is left as it is.
            Step::Dir { dest, mode } => match self.sys.open(
                Some(self.root.as_fd()),
                dest,
                O_PATH_DIR,
                0,
                RESOLVE_IN_ROOT,
            ) {
                Ok(_) => {}
                Err(e) if e.errno == Errno::ENOENT => {
                    let (parent, name) = self.parent_of(dest)?;
                    match self.sys.mkdirat(dir_fd(&self.root, &parent), &name, *mode) {
                        Ok(()) => {
                            let fd = plain(self.sys.open(
                                Some(dir_fd(&self.root, &parent)),
                                &name,
                                O_PATH_DIR,
                                0,
                                RESOLVE_NO_SYMLINKS,
                            ))?;
                            // Exactly the mode asked for, whatever the umask.
                            plain(self.sys.chmod(&fd_path(fd.as_fd()), *mode))?;
                        }
                        Err(e) if e.errno == Errno::EEXIST => {}
                        Err(e) => {
                            let hint = hint_for_create(e.errno);
                            return Err((e, hint));
                        }
                    }
                }
                Err(e) => return Err((e, None)),
            },
            Step::File {
                dest,
                content,
                mode,
                bind,
                readonly,
            } => {
                if *bind {
                    // Content lives on the staging tmpfs (outside the new
                    // root) and is bound read-only onto the destination.
                    let name = self.scratch_name();
                    let fd = plain(self.sys.open(
                        Some(staging),
                        &name,
                        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                        *mode,
                        0,
                    ))?;
                    plain(self.sys.write_all(fd.as_fd(), content))?;
                    plain(self.sys.chmod(&fd_path(fd.as_fd()), *mode))?;
                    let target = self.ensure(dest, false)?;
                    plain(self.sys.mount(
                        Some(&fd_path(fd.as_fd())),
                        &fd_path(target.as_fd()),
                        None,
                        libc::MS_BIND,
                        None,
                    ))?;
                    drop((fd, target));
                    self.set_attrs(dest, if *readonly { RO_BIND } else { RW_BIND })?;
                } else {
                    let (parent, name) = self.parent_of(dest)?;
                    let fd = plain(self.sys.open(
                        Some(dir_fd(&self.root, &parent)),
                        &name,
                        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW,
                        *mode,
                        RESOLVE_NO_SYMLINKS,
                    ))?;
                    plain(self.sys.write_all(fd.as_fd(), content))?;
                    plain(self.sys.chmod(&fd_path(fd.as_fd()), *mode))?;
                }
            }
            Step::Symlink { target, dest } => {
                let (parent, name) = self.parent_of(dest)?;
                let at = dir_fd(&self.root, &parent);
                match self.sys.symlinkat(target, at, &name) {
                    Ok(()) => {}
                    // As bubblewrap: the same link already there is fine.
                    Err(e) if e.errno == Errno::EEXIST => match self.sys.readlinkat(at, &name) {
                        Ok(t) if t == target.to_bytes() => {}
                        Ok(existing) => {
                            return Err((e, Some(symlink_conflict_hint(&existing))));
                        }
                        Err(_) => {
                            return Err((e, Some("the destination exists and is not a symlink".into())));
                        }
                    },
                    Err(e) => return Err((e, None)),
                }
            }
            Step::Chmod { dest, mode } => {
                let fd = plain(self.sys.open(
                    Some(self.root.as_fd()),
                    dest,
                    libc::O_PATH,
                    0,
                    RESOLVE_IN_ROOT,
                ))?;
                plain(self.sys.chmod(&fd_path(fd.as_fd()), *mode))?;
            }
            Step::RemountRo { dest, recursive } => {
                let fd = plain(self.sys.open(
                    Some(self.root.as_fd()),
                    dest,
                    libc::O_PATH,
                    0,
                    RESOLVE_IN_ROOT,
                ))?;
                plain(
                    self.sys
                        .mount_setattr(fd.as_fd(), *recursive, MOUNT_ATTR_RDONLY),
                )?;
            }
            Step::BindMount {
                source,
                dest,
                recursive,
                attrs,
                propagation,
            } => self.bind_mount(*source, dest, *recursive, *attrs, *propagation)?,
            Step::FsMount {
                fstype,
                source,
                dest,
                flags,
                data,
                propagation,
                copy_up,
            } => self.fs_mount(
                (fstype, source),
                dest,
                *flags,
                data.as_deref(),
                *propagation,
                *copy_up,
            )?,
            Step::Device {
                dest,
                mode,
                rdev,
                host_path,
                owner,
            } => self.device(staging, dest, *mode, *rdev, host_path, *owner)?,
            Step::Mask { dest } => self.mask(dest)?,
            Step::ReadonlyPath { dest } => self.readonly_path(dest)?,
        }
        Ok(None)
    }

    fn overlay(
        &mut self,
        lowers: &[usize],
        upper: &Upper,
        dest: &CStr,
        staging: BorrowedFd<'_>,
    ) -> OpResult<Option<OwnedFd>> {
        let mut data = b"lowerdir=".to_vec();
        for (n, l) in lowers.iter().enumerate() {
            let fd = self.source_fds[*l]
                .as_ref()
                .expect("overlay layers are never optional");
            if n > 0 {
                data.push(b':');
            }
            data.extend_from_slice(fd_path(fd.as_fd()).as_bytes());
        }
        let mut counted = None;
        // Private upper and work dirs stay open until the mount is made.
        let mut private: Option<(OwnedFd, OwnedFd)> = None;
        let dirs: Option<(CString, CString)> = match upper {
            Upper::Host { upper, work } => {
                match (&self.source_fds[*upper], &self.source_fds[*work]) {
                    (Some(u), Some(w)) => Some((fd_path(u.as_fd()), fd_path(w.as_fd()))),
                    _ => None,
                }
            }
            Upper::Tmp { size } => {
                let at = plain(self.scratch_dir(staging))?;
                let opts = tmpfs_data(0o755, *size, 1 << 20);
                plain(
                    self.sys
                        .mount(Some(c"tmpfs"), &at, Some(c"tmpfs"), BASE, Some(&opts)),
                )?;
                let dir = plain(self.sys.open(None, &at, O_PATH_DIR, 0, 0))?;
                plain(self.sys.mkdirat(dir.as_fd(), c"upper", 0o755))?;
                plain(self.sys.mkdirat(dir.as_fd(), c"work", 0o700))?;
                let u = plain(self.sys.open(Some(dir.as_fd()), c"upper", O_PATH_DIR, 0, 0))?;
                let w = plain(self.sys.open(Some(dir.as_fd()), c"work", O_PATH_DIR, 0, 0))?;
                counted = Some(plain(self.sys.open(
                    Some(dir.as_fd()),
                    c"upper",
                    libc::O_RDONLY | libc::O_DIRECTORY,
                    0,
                    0,
                ))?);
                let paths = (fd_path(u.as_fd()), fd_path(w.as_fd()));
                private = Some((u, w));
                Some(paths)
            }
            Upper::None => None,
        };
        if let Some((u, w)) = dirs {
            data.extend_from_slice(b",upperdir=");
            data.extend_from_slice(u.as_bytes());
            data.extend_from_slice(b",workdir=");
            data.extend_from_slice(w.as_bytes());
        }
        // Inside a user namespace overlay keeps its metadata in user.*
        // xattrs; redirect_dir and metacopy stay off.
        data.extend_from_slice(b",userxattr,metacopy=off");
        let data = CString::new(data).expect("fd paths hold no NUL");
        let target = self.ensure(dest, true)?;
        let flags = BASE
            | if matches!(upper, Upper::None) {
                libc::MS_RDONLY
            } else {
                0
            };
        self.sys
            .mount(Some(c"overlay"), &fd_path(target.as_fd()), Some(c"overlay"), flags, Some(&data))
            .map_err(|e| {
                let hint = match e.errno {
                    Errno::EINVAL => Some("overlay refused its layers: upper and work must be on one filesystem that supports user xattrs"),
                    Errno::ENODEV => Some("overlayfs is not available: load the overlay module"),
                    _ => None,
                };
                (e, hint.map(Hint::from))
            })?;
        drop(private);
        Ok(counted)
    }

    fn proc(&mut self, dest: &CStr) -> OpResult<()> {
        let target = self.ensure(dest, true)?;
        plain(self.sys.mount(
            Some(c"proc"),
            &fd_path(target.as_fd()),
            Some(c"proc"),
            BASE | libc::MS_NOEXEC,
            None,
        ))?;
        drop(target);
        let proc = plain(self.sys.open(
            Some(self.root.as_fd()),
            dest,
            O_PATH_DIR,
            0,
            RESOLVE_IN_ROOT,
        ))?;
        // One detached copy of the host's /dev/null, made read-only,
        // nosuid, nodev and noexec before it is attached over the first
        // masked file; every later mask is a bind of that mount, and a bind
        // copies the mount flags of its source.
        let null = self.host_dev_node(c"null")?;
        plain(
            self.sys
                .mount_setattr(null.as_fd(), false, RO_BIND | MOUNT_ATTR_NOEXEC),
        )?;
        let mut null_attached = false;
        for name in PROC_MASKED_FILES {
            if !null_attached {
                match self.sys.move_mount_at(null.as_fd(), proc.as_fd(), name) {
                    Ok(()) => null_attached = true,
                    Err(e) if e.errno == Errno::ENOENT => {}
                    Err(e) => return Err((e, None)),
                }
                continue;
            }
            let Some(fd) =
                self.open_optional(proc.as_fd(), name, libc::O_PATH | libc::O_NOFOLLOW)?
            else {
                continue;
            };
            plain(self.sys.mount(
                Some(&fd_path(null.as_fd())),
                &fd_path(fd.as_fd()),
                None,
                libc::MS_BIND,
                None,
            ))?;
        }
        drop(null);
        for name in PROC_MASKED_DIRS {
            let Some(fd) = self.open_optional(proc.as_fd(), name, O_PATH_DIR | libc::O_NOFOLLOW)?
            else {
                continue;
            };
            let empty = tmpfs_data(0o555, 4096, 1);
            plain(self.sys.mount(
                Some(c"tmpfs"),
                &fd_path(fd.as_fd()),
                Some(c"tmpfs"),
                BASE | libc::MS_NOEXEC | libc::MS_RDONLY,
                Some(&empty),
            ))?;
        }
        // Read-only copies of these directories (and anything below them),
        // flagged while still detached, then attached over the originals.
        for name in PROC_READONLY {
            let tree = match self.sys.clone_tree(proc.as_fd(), name, true) {
                Ok(fd) => fd,
                Err(e) if e.errno == Errno::ENOENT => continue,
                Err(e) => return Err((e, None)),
            };
            plain(
                self.sys
                    .mount_setattr(tree.as_fd(), true, MOUNT_ATTR_RDONLY | PROC_ATTRS),
            )?;
            plain(self.sys.move_mount_at(tree.as_fd(), proc.as_fd(), name))?;
        }
        Ok(())
    }

    /// A new /dev; `bubblewrap`: bubblewrap's layout (`DevLayout`).
    fn dev(&mut self, dest: &CStr, bubblewrap: bool) -> OpResult<()> {
        let target = self.ensure(dest, true)?;
        // bubblewrap's /dev holds shm itself: it gets shm's size.
        let (opts, flags, node_attrs) = if bubblewrap {
            let opts = tmpfs_data(
                0o755,
                crate::spec::TMP_SIZE.0 / 4,
                crate::spec::TMP_INODES / 4,
            );
            (opts, BASE, DEV_BIND)
        } else {
            let opts = tmpfs_data(0o755, 64 << 10, 64);
            (
                opts,
                libc::MS_NOSUID | libc::MS_NOEXEC,
                DEV_BIND | MOUNT_ATTR_NOEXEC,
            )
        };
        plain(self.sys.mount(
            Some(c"tmpfs"),
            &fd_path(target.as_fd()),
            Some(c"tmpfs"),
            flags,
            Some(&opts),
        ))?;
        drop(target);
        let dev = plain(self.sys.open(
            Some(self.root.as_fd()),
            dest,
            O_PATH_DIR,
            0,
            RESOLVE_IN_ROOT,
        ))?;
        for name in DEV_NODES {
            // A detached copy of the host node, flagged before it is
            // attached over an empty file of the new /dev.
            let node = self.host_dev_node(name)?;
            plain(self.sys.mount_setattr(node.as_fd(), false, node_attrs))?;
            let fd = plain(self.sys.open(
                Some(dev.as_fd()),
                name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o666,
                RESOLVE_NO_SYMLINKS,
            ))?;
            drop(fd);
            plain(self.sys.move_mount_at(node.as_fd(), dev.as_fd(), name))?;
        }
        for (target, name) in DEV_LINKS {
            plain(self.sys.symlinkat(target, dev.as_fd(), name))?;
        }
        if bubblewrap {
            plain(self.sys.symlinkat(c"/proc/kcore", dev.as_fd(), c"core"))?;
        }
        plain(self.sys.mkdirat(dev.as_fd(), c"pts", 0o755))?;
        let shm_mode = if bubblewrap { 0o755 } else { 0o1777 };
        plain(self.sys.mkdirat(dev.as_fd(), c"shm", shm_mode))?;
        let pts = plain(self.sys.open(
            Some(dev.as_fd()),
            c"pts",
            O_PATH_DIR,
            0,
            RESOLVE_NO_SYMLINKS,
        ))?;
        plain(self.sys.mount(
            Some(c"devpts"),
            &fd_path(pts.as_fd()),
            Some(c"devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(c"newinstance,ptmxmode=0666,mode=620"),
        ))?;
        drop(pts);
        if bubblewrap {
            return Ok(());
        }
        let shm = plain(self.sys.open(
            Some(dev.as_fd()),
            c"shm",
            O_PATH_DIR,
            0,
            RESOLVE_NO_SYMLINKS,
        ))?;
        let shm_opts = tmpfs_data(
            0o1777,
            crate::spec::TMP_SIZE.0 / 4,
            crate::spec::TMP_INODES / 4,
        );
        plain(self.sys.mount(
            Some(c"tmpfs"),
            &fd_path(shm.as_fd()),
            Some(c"tmpfs"),
            BASE | libc::MS_NOEXEC,
            Some(&shm_opts),
        ))?;
        Ok(())
    }

    /// A detached copy of a host device node's mount (the old root is
    /// still reachable); the node itself must not be a symlink.
    fn host_dev_node(&mut self, name: &CStr) -> OpResult<OwnedFd> {
        if self.host_dev.is_none() {
            self.host_dev = Some(plain(self.sys.open(None, c"/dev", O_PATH_DIR, 0, 0))?);
        }
        let dev = self.host_dev.as_ref().expect("just opened").as_fd();
        let node = plain(
            self.sys
                .open(Some(dev), name, libc::O_PATH, 0, RESOLVE_NO_SYMLINKS),
        )?;
        plain(self.sys.clone_tree(node.as_fd(), c"", false))
    }

    fn open_optional(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        flags: libc::c_int,
    ) -> OpResult<Option<OwnedFd>> {
        match self
            .sys
            .open(Some(dir), name, flags, 0, RESOLVE_NO_SYMLINKS)
        {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if e.errno == Errno::ENOENT => Ok(None),
            Err(e) => Err((e, None)),
        }
    }

    /// Apply mount attributes to the mount at `dest` and every submount.
    fn set_attrs(&mut self, dest: &CStr, attrs: u64) -> OpResult<()> {
        let fd = plain(self.sys.open(
            Some(self.root.as_fd()),
            dest,
            libc::O_PATH,
            0,
            RESOLVE_IN_ROOT,
        ))?;
        plain(self.sys.mount_setattr(fd.as_fd(), true, attrs))
    }

    /// Make sure `dest` exists in the new root (creating parents), as a
    /// directory or a regular file, and return an O_PATH fd to it.
    pub(super) fn ensure(&mut self, dest: &CStr, dir: bool) -> OpResult<OwnedFd> {
        if dest.to_bytes() == b"." {
            return plain(
                self.sys
                    .open(Some(self.root.as_fd()), c".", O_PATH_DIR, 0, 0),
            );
        }
        match self.sys.open(
            Some(self.root.as_fd()),
            dest,
            libc::O_PATH,
            0,
            RESOLVE_IN_ROOT,
        ) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.errno == Errno::ENOENT => {}
            Err(e) => return Err((e, None)),
        }
        let (parent, name) = self.parent_of(dest)?;
        let parent_fd = dir_fd(&self.root, &parent);
        let made = if dir {
            match self.sys.mkdirat(parent_fd, &name, 0o755) {
                Ok(()) => Ok(()),
                Err(e) if e.errno == Errno::EEXIST => Ok(()),
                Err(e) => {
                    let hint = hint_for_create(e.errno);
                    Err((e, hint))
                }
            }
        } else {
            self.sys
                .open(
                    Some(parent_fd),
                    &name,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW,
                    // A mount point only (bubblewrap's ensure_file mode).
                    0o444,
                    RESOLVE_NO_SYMLINKS,
                )
                .map(drop)
                .map_err(|e| (e.clone(), hint_for_create(e.errno)))
        };
        drop(parent);
        made?;
        plain(self.sys.open(
            Some(self.root.as_fd()),
            dest,
            libc::O_PATH,
            0,
            RESOLVE_IN_ROOT,
        ))
    }

    /// The parent directory of `dest` (created as needed) and the last name.
    /// Each prefix is resolved once, inside the new root; a missing one is
    /// created in the directory resolved just before it. The parent of a
    /// top-level name is the new root itself.
    pub(super) fn parent_of(&mut self, dest: &CStr) -> OpResult<(Dir, CString)> {
        let bytes = dest.to_bytes();
        let (parent, name) = match bytes.iter().rposition(|b| *b == b'/') {
            Some(i) => (&bytes[..i], &bytes[i + 1..]),
            None => (&b""[..], bytes),
        };
        let mut cur = Dir::Root;
        let mut prefix = Vec::new();
        for comp in parent
            .split(|b| *b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
        {
            if !prefix.is_empty() {
                prefix.push(b'/');
            }
            prefix.extend_from_slice(comp);
            let here = CString::new(prefix.clone()).expect("no NUL");
            let root = self.root.as_fd();
            let next = match self
                .sys
                .open(Some(root), &here, O_PATH_DIR, 0, RESOLVE_IN_ROOT)
            {
                Ok(fd) => Ok(fd),
                Err(e) if e.errno == Errno::ENOENT => {
                    let comp = CString::new(comp).expect("no NUL");
                    match self
                        .sys
                        .mkdirat(dir_fd(&self.root, &cur), &comp, self.parent_mode)
                    {
                        Ok(()) => {
                            plain(
                                self.sys
                                    .open(Some(root), &here, O_PATH_DIR, 0, RESOLVE_IN_ROOT),
                            )
                        }
                        Err(e) if e.errno == Errno::EEXIST => {
                            plain(
                                self.sys
                                    .open(Some(root), &here, O_PATH_DIR, 0, RESOLVE_IN_ROOT),
                            )
                        }
                        Err(e) => Err((e.clone(), hint_for_create(e.errno))),
                    }
                }
                Err(e) => Err((e, None)),
            };
            cur = Dir::Opened(next?);
        }
        Ok((cur, CString::new(name).expect("no NUL")))
    }

    fn scratch_name(&mut self) -> CString {
        self.scratch += 1;
        CString::new(format!("s{}", self.scratch)).expect("no NUL")
    }

    /// An empty file under the staging directory (outside the new root),
    /// to attach a file mount on.
    fn scratch_file(&mut self, staging: BorrowedFd<'_>) -> Result<CString, SysError> {
        let name = self.scratch_name();
        self.sys.open(
            Some(staging),
            &name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600,
            0,
        )?;
        Ok(staging_path(&name))
    }

    /// A fresh directory on the staging tmpfs (outside the new root).
    fn scratch_dir(&mut self, staging: BorrowedFd<'_>) -> Result<CString, SysError> {
        let name = self.scratch_name();
        self.sys.mkdirat(staging, &name, 0o700)?;
        Ok(staging_path(&name))
    }
}

fn staging_path(name: &CStr) -> CString {
    let mut path = STAGING.to_bytes().to_vec();
    path.push(b'/');
    path.extend_from_slice(name.to_bytes());
    CString::new(path).expect("no NUL")
}

/// bubblewrap's parent directory mode for a step whose own mode is
/// `mode`: 0755, without the group's bits when `mode` gives the group
/// nothing, and without the others' when it gives them nothing.
fn parent_mode(mode: u32) -> u32 {
    let mut parent = 0o755;
    if mode & 0o070 == 0 {
        parent &= !0o050;
    }
    if mode & 0o007 == 0 {
        parent &= !0o005;
    }
    parent
}

/// Start of the hint of a `symlink` step whose destination is already a
/// link to another target; the existing target follows, JSON-quoted (so a
/// hostile target stays escaped, one line). The bubblewrap front end
/// reads it back with [`symlink_conflict_target`] to print bubblewrap's
/// `Can't make symlink at DEST: existing destination is TARGET`.
const SYMLINK_CONFLICT: &str = "the destination is a symlink to another target: ";

pub(super) fn symlink_conflict_hint(existing: &[u8]) -> Hint {
    let quoted = serde_json::to_string(&String::from_utf8_lossy(existing)).unwrap_or_default();
    Hint::Owned(format!("{SYMLINK_CONFLICT}{quoted}"))
}

/// The existing target a `symlink` step's conflict names, from the
/// failure's line (`fs[N] (symlink DEST): ... (HINT)`); None for any
/// other failure.
pub(crate) fn symlink_conflict_target(line: &str) -> Option<String> {
    let quoted = line.split_once(SYMLINK_CONFLICT)?.1.strip_suffix(')')?;
    serde_json::from_str(quoted).ok()
}

fn hint_for_create(errno: Errno) -> Option<Hint> {
    Some(Hint::Borrowed(match errno {
        Errno::EROFS => "the destination's parent is read-only; mount a tmpfs or dir there first",
        Errno::ENOTDIR => "a parent of the destination is not a directory",
        _ => return None,
    }))
}

/// Describe each fs operation of a Spec for error lines.
pub fn op_names(spec: &crate::spec::Spec) -> Vec<String> {
    spec.fs
        .iter()
        .enumerate()
        .map(|(i, op)| {
            format!(
                "fs[{i}] ({} {})",
                op.name(),
                String::from_utf8_lossy(op.dest().as_os_str().as_bytes())
            )
        })
        .collect()
}
