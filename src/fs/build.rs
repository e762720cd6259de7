//! Executing a [`Plan`] in the child, through the mockable [`FsSys`] layer.
//!
//! Order (fixed): propagation → open sources → (the caller switches
//! identity) → staging tmpfs → root tmpfs →
//! attach the supervisor's detached mounts (idmapped lowers, root-only
//! sources) → steps in order → root read-only → pivot_root →
//! detach the old root.
//!
//! Destinations are always resolved inside the new root (`RESOLVE_IN_ROOT`)
//! and mounted through `/proc/self/fd/N`, so a symlink made by an earlier
//! step can never send a mount outside the new root. Overlay layers are
//! passed the same way, so no raw path ever reaches an option string.

use std::ffi::{CStr, CString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use super::plan::{DEV_BIND, PROC_ATTRS, Plan, RO_BIND, Step, Upper, tmpfs_data};
use crate::sys::{
    Errno, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, RESOLVE_IN_ROOT,
    RESOLVE_NO_SYMLINKS, SysError, fd_path,
};

/// The syscalls the builder uses. [`super::RealFs`] performs them; tests
/// record them.
pub trait FsSys {
    fn mount(
        &mut self,
        src: Option<&CStr>,
        target: &CStr,
        fstype: Option<&CStr>,
        flags: libc::c_ulong,
        data: Option<&CStr>,
    ) -> Result<(), SysError>;
    /// openat2; the returned fd is owned by the builder.
    fn open(
        &mut self,
        dir: Option<RawFd>,
        path: &CStr,
        flags: libc::c_int,
        mode: u32,
        resolve: u64,
    ) -> Result<RawFd, SysError>;
    fn close(&mut self, fd: RawFd);
    fn mkdirat(&mut self, dir: RawFd, name: &CStr, mode: u32) -> Result<(), SysError>;
    fn symlinkat(&mut self, target: &CStr, dir: RawFd, name: &CStr) -> Result<(), SysError>;
    fn mount_setattr(&mut self, fd: RawFd, recursive: bool, set: u64) -> Result<(), SysError>;
    fn move_mount(&mut self, from: RawFd, to: &CStr) -> Result<(), SysError>;
    /// A detached copy (`open_tree(OPEN_TREE_CLONE)`) of the mount at
    /// `name` under `dir` (a symlink as `name` is not followed; an empty
    /// `name` means `dir` itself).
    fn clone_tree(&mut self, dir: RawFd, name: &CStr, recursive: bool) -> Result<RawFd, SysError>;
    /// Attach the detached mount `from` at `name` under `dir` (not
    /// following a symlink there).
    fn move_mount_at(&mut self, from: RawFd, dir: RawFd, name: &CStr) -> Result<(), SysError>;
    fn write_all(&mut self, fd: RawFd, data: &[u8]) -> Result<(), SysError>;
    fn chmod(&mut self, path: &CStr, mode: u32) -> Result<(), SysError>;
    fn is_dir(&mut self, fd: RawFd) -> Result<bool, SysError>;
    fn fchdir(&mut self, fd: RawFd) -> Result<(), SysError>;
    fn pivot_root(&mut self, new_root: &CStr, put_old: &CStr) -> Result<(), SysError>;
    fn umount2(&mut self, target: &CStr, flags: libc::c_int) -> Result<(), SysError>;
    fn chdir(&mut self, path: &CStr) -> Result<(), SysError>;
}

/// A failed build step: which operation, the failed call, and a hint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{what}: {err}{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
pub struct BuildError {
    pub what: String,
    pub err: SysError,
    pub hint: Option<&'static str>,
}

/// What survives the build: fds of the private overlay uppers, opened for
/// counting changes after the workload ends.
#[derive(Debug, Default)]
pub struct Built {
    pub tmp_upper_fds: Vec<RawFd>,
}

/// Where the child stages the new root in its private copy of the host
/// tree. Host sources are opened before this is covered.
const STAGING: &CStr = c"/tmp";
const STAGING_ROOT: &CStr = c"/tmp/root";

const O_PATH_DIR: libc::c_int = libc::O_PATH | libc::O_DIRECTORY;
const BASE: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV;

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

struct Builder<'a, S: FsSys> {
    sys: &'a mut S,
    root: RawFd,
    source_fds: Vec<Option<RawFd>>,
    host_dev: Option<RawFd>,
    scratch: usize,
}

/// Host sources opened by [`open_sources`] (None: optional and missing, or
/// handed over by the supervisor as detached mounts, attached by
/// [`build`]).
#[derive(Debug, Default)]
pub struct Sources(pub Vec<Option<RawFd>>);

/// First part of the fixed order: make `/` a slave mount and open every
/// host source. This runs with the caller's filesystem identity (before the
/// sandbox switches to its own ids), so root-owned paths the launching user
/// may name stay reachable.
pub fn open_sources<S: FsSys>(sys: &mut S, plan: &Plan) -> Result<Sources, BuildError> {
    sys.mount(None, c"/", None, libc::MS_SLAVE | libc::MS_REC, None)
        .map_err(|err| BuildError {
            what: "making / a slave mount".into(),
            err,
            hint: None,
        })?;
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
                    hint,
                });
            }
        }
    }
    Ok(Sources(source_fds))
}

/// Second part: build the new root and pivot into it. `handed` pairs a
/// source index with a detached mount received from the supervisor (an
/// idmapped workspace layer, or a path only host root may reach). `op_names`
/// describe each step for errors (e.g. `fs[3] (ro-bind /usr)`).
pub fn build<S: FsSys>(
    sys: &mut S,
    plan: &Plan,
    sources: Sources,
    handed: &[(usize, RawFd)],
    op_names: &[String],
) -> Result<Built, BuildError> {
    let err = |what: &str| {
        let what = what.to_string();
        move |err: SysError| BuildError {
            what,
            err,
            hint: None,
        }
    };
    let source_fds = sources.0;
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
    sys.mkdirat(staging, c"root", 0o755)
        .map_err(err("creating the new root"))?;
    let root_data = tmpfs_data(0o755, (staging_size + data_size) as u64, 16384);
    sys.mount(
        Some(c"tmpfs"),
        STAGING_ROOT,
        Some(c"tmpfs"),
        BASE,
        Some(&root_data),
    )
    .map_err(err("mounting the root tmpfs"))?;
    let root = sys
        .open(None, STAGING_ROOT, O_PATH_DIR, 0, 0)
        .map_err(err("opening the new root"))?;

    let mut b = Builder {
        sys,
        root,
        source_fds,
        host_dev: None,
        scratch: 0,
    };
    for (index, fd) in handed {
        let dir = b
            .sys
            .is_dir(*fd)
            .map_err(err("inspecting a mount handed over by the supervisor"))?;
        let at = if dir {
            b.scratch_dir(staging)
        } else {
            b.scratch_file(staging)
        }
        .map_err(err(
            "creating a mount point for a mount handed over by the supervisor",
        ))?;
        b.sys.move_mount(*fd, &at).map_err(|e| BuildError {
            what: "attaching a mount handed over by the supervisor".into(),
            err: e,
            hint: None,
        })?;
        let flags = if dir { O_PATH_DIR } else { libc::O_PATH };
        let opened = b
            .sys
            .open(None, &at, flags, 0, 0)
            .map_err(err("opening a mount handed over by the supervisor"))?;
        b.source_fds[*index] = Some(opened);
    }

    let mut built = Built::default();
    for (i, step) in plan.steps.iter().enumerate() {
        let what = op_names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("fs[{i}]"));
        let tmp_upper = b.step(step, staging).map_err(|(err, hint)| BuildError {
            what: what.clone(),
            err,
            hint,
        })?;
        if let Some(fd) = tmp_upper {
            built.tmp_upper_fds.push(fd);
        }
    }

    if plan.root_readonly {
        b.sys
            .mount_setattr(
                b.root,
                false,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | crate::sys::MOUNT_ATTR_NODEV,
            )
            .map_err(err("making the new root read-only"))?;
    }
    for fd in b.source_fds.iter().flatten() {
        b.sys.close(*fd);
    }
    if let Some(dev) = b.host_dev {
        b.sys.close(dev);
    }
    b.sys.close(staging);
    // pivot_root(".", ".") stacks the old root on top of the new one; the
    // detach then removes it, staging and host sources included.
    b.sys.fchdir(b.root).map_err(err("entering the new root"))?;
    b.sys
        .pivot_root(c".", c".")
        .map_err(err("pivot_root into the new root"))?;
    b.sys
        .umount2(c".", libc::MNT_DETACH)
        .map_err(err("detaching the old root"))?;
    b.sys.chdir(c"/").map_err(err("entering the new root"))?;
    b.sys.close(b.root);
    Ok(built)
}

type StepResult<T> = Result<T, (SysError, Option<&'static str>)>;

fn plain<T>(r: Result<T, SysError>) -> StepResult<T> {
    r.map_err(|e| (e, None))
}

impl<S: FsSys> Builder<'_, S> {
    fn step(&mut self, step: &Step, staging: RawFd) -> StepResult<Option<RawFd>> {
        match step {
            Step::Bind {
                source,
                dest,
                attrs,
            } => {
                let Some(src) = self.source_fds[*source] else {
                    return Ok(None);
                };
                let is_dir = plain(self.sys.is_dir(src))?;
                let target = self.ensure(dest, is_dir)?;
                plain(self.sys.mount(
                    Some(&fd_path(src)),
                    &fd_path(target),
                    None,
                    libc::MS_BIND | libc::MS_REC,
                    None,
                ))?;
                self.sys.close(target);
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
                    &fd_path(target),
                    Some(c"tmpfs"),
                    BASE,
                    Some(data),
                ))?;
                self.sys.close(target);
            }
            Step::Proc { dest } => self.proc(dest)?,
            Step::Dev { dest } => self.dev(dest)?,
            Step::Mqueue { dest } => {
                let target = self.ensure(dest, true)?;
                plain(self.sys.mount(
                    Some(c"mqueue"),
                    &fd_path(target),
                    Some(c"mqueue"),
                    BASE | libc::MS_NOEXEC,
                    None,
                ))?;
                self.sys.close(target);
            }
            Step::Dir { dest, mode } => {
                let fd = self.ensure(dest, true)?;
                plain(self.sys.chmod(&fd_path(fd), *mode))?;
                self.sys.close(fd);
            }
            Step::File {
                dest,
                content,
                mode,
                readonly,
            } => {
                if *readonly {
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
                    plain(self.sys.write_all(fd, content))?;
                    plain(self.sys.chmod(&fd_path(fd), *mode))?;
                    let target = self.ensure(dest, false)?;
                    plain(self.sys.mount(
                        Some(&fd_path(fd)),
                        &fd_path(target),
                        None,
                        libc::MS_BIND,
                        None,
                    ))?;
                    self.sys.close(fd);
                    self.sys.close(target);
                    self.set_attrs(dest, RO_BIND)?;
                } else {
                    let (parent, name) = self.parent_of(dest)?;
                    let fd = plain(self.sys.open(
                        Some(parent),
                        &name,
                        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW,
                        *mode,
                        RESOLVE_NO_SYMLINKS,
                    ))?;
                    plain(self.sys.write_all(fd, content))?;
                    plain(self.sys.chmod(&fd_path(fd), *mode))?;
                    self.sys.close(fd);
                    self.release(parent);
                }
            }
            Step::Symlink { target, dest } => {
                let (parent, name) = self.parent_of(dest)?;
                let made = self.sys.symlinkat(target, parent, &name);
                self.release(parent);
                plain(made)?;
            }
            Step::Chmod { dest, mode } => {
                let fd =
                    plain(
                        self.sys
                            .open(Some(self.root), dest, libc::O_PATH, 0, RESOLVE_IN_ROOT),
                    )?;
                plain(self.sys.chmod(&fd_path(fd), *mode))?;
                self.sys.close(fd);
            }
            Step::RemountRo { dest } => self.set_attrs(dest, MOUNT_ATTR_RDONLY)?,
        }
        Ok(None)
    }

    fn overlay(
        &mut self,
        lowers: &[usize],
        upper: &Upper,
        dest: &CStr,
        staging: RawFd,
    ) -> StepResult<Option<RawFd>> {
        let mut data = b"lowerdir=".to_vec();
        for (n, l) in lowers.iter().enumerate() {
            let fd = self.source_fds[*l].expect("overlay layers are never optional");
            if n > 0 {
                data.push(b':');
            }
            data.extend_from_slice(fd_path(fd).as_bytes());
        }
        let mut counted = None;
        let (upper_fd, work_fd) = match upper {
            Upper::Host { upper, work } => (self.source_fds[*upper], self.source_fds[*work]),
            Upper::Tmp { size } => {
                let at = plain(self.scratch_dir(staging))?;
                let opts = tmpfs_data(0o755, *size, 1 << 20);
                plain(
                    self.sys
                        .mount(Some(c"tmpfs"), &at, Some(c"tmpfs"), BASE, Some(&opts)),
                )?;
                let dir = plain(self.sys.open(None, &at, O_PATH_DIR, 0, 0))?;
                plain(self.sys.mkdirat(dir, c"upper", 0o755))?;
                plain(self.sys.mkdirat(dir, c"work", 0o700))?;
                let u = plain(self.sys.open(Some(dir), c"upper", O_PATH_DIR, 0, 0))?;
                let w = plain(self.sys.open(Some(dir), c"work", O_PATH_DIR, 0, 0))?;
                counted = Some(plain(self.sys.open(
                    Some(dir),
                    c"upper",
                    libc::O_RDONLY | libc::O_DIRECTORY,
                    0,
                    0,
                ))?);
                self.sys.close(dir);
                (Some(u), Some(w))
            }
            Upper::None => (None, None),
        };
        if let (Some(u), Some(w)) = (upper_fd, work_fd) {
            data.extend_from_slice(b",upperdir=");
            data.extend_from_slice(fd_path(u).as_bytes());
            data.extend_from_slice(b",workdir=");
            data.extend_from_slice(fd_path(w).as_bytes());
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
            .mount(Some(c"overlay"), &fd_path(target), Some(c"overlay"), flags, Some(&data))
            .map_err(|e| {
                let hint = match e.errno {
                    Errno::EINVAL => Some("overlay refused its layers: upper and work must be on one filesystem that supports user xattrs"),
                    Errno::ENODEV => Some("overlayfs is not available: load the overlay module"),
                    _ => None,
                };
                (e, hint)
            })?;
        self.sys.close(target);
        if let Upper::Tmp { .. } = upper {
            for fd in [upper_fd, work_fd].into_iter().flatten() {
                self.sys.close(fd);
            }
        }
        Ok(counted)
    }

    fn proc(&mut self, dest: &CStr) -> StepResult<()> {
        let target = self.ensure(dest, true)?;
        plain(self.sys.mount(
            Some(c"proc"),
            &fd_path(target),
            Some(c"proc"),
            BASE | libc::MS_NOEXEC,
            None,
        ))?;
        self.sys.close(target);
        let proc = plain(
            self.sys
                .open(Some(self.root), dest, O_PATH_DIR, 0, RESOLVE_IN_ROOT),
        )?;
        // One detached copy of the host's /dev/null, made read-only,
        // nosuid, nodev and noexec before it is attached over the first
        // masked file; every later mask is a bind of that mount, and a bind
        // copies the mount flags of its source.
        let null = self.host_dev_node(c"null")?;
        plain(
            self.sys
                .mount_setattr(null, false, RO_BIND | MOUNT_ATTR_NOEXEC),
        )?;
        let mut null_attached = false;
        for name in PROC_MASKED_FILES {
            if !null_attached {
                match self.sys.move_mount_at(null, proc, name) {
                    Ok(()) => null_attached = true,
                    Err(e) if e.errno == Errno::ENOENT => {}
                    Err(e) => return Err((e, None)),
                }
                continue;
            }
            let Some(fd) = self.open_optional(proc, name, libc::O_PATH | libc::O_NOFOLLOW)? else {
                continue;
            };
            plain(self.sys.mount(
                Some(&fd_path(null)),
                &fd_path(fd),
                None,
                libc::MS_BIND,
                None,
            ))?;
            self.sys.close(fd);
        }
        self.sys.close(null);
        for name in PROC_MASKED_DIRS {
            let Some(fd) = self.open_optional(proc, name, O_PATH_DIR | libc::O_NOFOLLOW)? else {
                continue;
            };
            let empty = tmpfs_data(0o555, 4096, 1);
            plain(self.sys.mount(
                Some(c"tmpfs"),
                &fd_path(fd),
                Some(c"tmpfs"),
                BASE | libc::MS_NOEXEC | libc::MS_RDONLY,
                Some(&empty),
            ))?;
            self.sys.close(fd);
        }
        // Read-only copies of these directories (and anything below them),
        // flagged while still detached, then attached over the originals.
        for name in PROC_READONLY {
            let tree = match self.sys.clone_tree(proc, name, true) {
                Ok(fd) => fd,
                Err(e) if e.errno == Errno::ENOENT => continue,
                Err(e) => return Err((e, None)),
            };
            plain(
                self.sys
                    .mount_setattr(tree, true, MOUNT_ATTR_RDONLY | PROC_ATTRS),
            )?;
            plain(self.sys.move_mount_at(tree, proc, name))?;
            self.sys.close(tree);
        }
        self.sys.close(proc);
        Ok(())
    }

    fn dev(&mut self, dest: &CStr) -> StepResult<()> {
        let target = self.ensure(dest, true)?;
        let opts = tmpfs_data(0o755, 64 << 10, 64);
        plain(self.sys.mount(
            Some(c"tmpfs"),
            &fd_path(target),
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(&opts),
        ))?;
        self.sys.close(target);
        let dev = plain(
            self.sys
                .open(Some(self.root), dest, O_PATH_DIR, 0, RESOLVE_IN_ROOT),
        )?;
        for name in DEV_NODES {
            // A detached copy of the host node, flagged before it is
            // attached over an empty file of the new /dev.
            let node = self.host_dev_node(name)?;
            plain(
                self.sys
                    .mount_setattr(node, false, DEV_BIND | MOUNT_ATTR_NOEXEC),
            )?;
            let fd = plain(self.sys.open(
                Some(dev),
                name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o666,
                RESOLVE_NO_SYMLINKS,
            ))?;
            self.sys.close(fd);
            plain(self.sys.move_mount_at(node, dev, name))?;
            self.sys.close(node);
        }
        for (target, name) in DEV_LINKS {
            plain(self.sys.symlinkat(target, dev, name))?;
        }
        plain(self.sys.mkdirat(dev, c"pts", 0o755))?;
        plain(self.sys.mkdirat(dev, c"shm", 0o1777))?;
        let pts = plain(
            self.sys
                .open(Some(dev), c"pts", O_PATH_DIR, 0, RESOLVE_NO_SYMLINKS),
        )?;
        plain(self.sys.mount(
            Some(c"devpts"),
            &fd_path(pts),
            Some(c"devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(c"newinstance,ptmxmode=0666,mode=620"),
        ))?;
        self.sys.close(pts);
        let shm = plain(
            self.sys
                .open(Some(dev), c"shm", O_PATH_DIR, 0, RESOLVE_NO_SYMLINKS),
        )?;
        let shm_opts = tmpfs_data(
            0o1777,
            crate::spec::TMP_SIZE.0 / 4,
            crate::spec::TMP_INODES / 4,
        );
        plain(self.sys.mount(
            Some(c"tmpfs"),
            &fd_path(shm),
            Some(c"tmpfs"),
            BASE | libc::MS_NOEXEC,
            Some(&shm_opts),
        ))?;
        self.sys.close(shm);
        self.sys.close(dev);
        Ok(())
    }

    /// A detached copy of a host device node's mount (the old root is
    /// still reachable); the node itself must not be a symlink.
    fn host_dev_node(&mut self, name: &CStr) -> StepResult<RawFd> {
        let dev = match self.host_dev {
            Some(fd) => fd,
            None => {
                let fd = plain(self.sys.open(None, c"/dev", O_PATH_DIR, 0, 0))?;
                self.host_dev = Some(fd);
                fd
            }
        };
        let node = plain(
            self.sys
                .open(Some(dev), name, libc::O_PATH, 0, RESOLVE_NO_SYMLINKS),
        )?;
        let tree = self.sys.clone_tree(node, c"", false);
        self.sys.close(node);
        plain(tree)
    }

    fn open_optional(
        &mut self,
        dir: RawFd,
        name: &CStr,
        flags: libc::c_int,
    ) -> StepResult<Option<RawFd>> {
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
    fn set_attrs(&mut self, dest: &CStr, attrs: u64) -> StepResult<()> {
        let fd = plain(
            self.sys
                .open(Some(self.root), dest, libc::O_PATH, 0, RESOLVE_IN_ROOT),
        )?;
        plain(self.sys.mount_setattr(fd, true, attrs))?;
        self.sys.close(fd);
        Ok(())
    }

    /// Make sure `dest` exists in the new root (creating parents), as a
    /// directory or a regular file, and return an O_PATH fd to it.
    fn ensure(&mut self, dest: &CStr, dir: bool) -> StepResult<RawFd> {
        if dest.to_bytes() == b"." {
            return plain(self.sys.open(Some(self.root), c".", O_PATH_DIR, 0, 0));
        }
        match self
            .sys
            .open(Some(self.root), dest, libc::O_PATH, 0, RESOLVE_IN_ROOT)
        {
            Ok(fd) => return Ok(fd),
            Err(e) if e.errno == Errno::ENOENT => {}
            Err(e) => return Err((e, None)),
        }
        let (parent, name) = self.parent_of(dest)?;
        let made = if dir {
            match self.sys.mkdirat(parent, &name, 0o755) {
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
                    Some(parent),
                    &name,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW,
                    0o644,
                    RESOLVE_NO_SYMLINKS,
                )
                .map(|fd| self.sys.close(fd))
                .map_err(|e| (e.clone(), hint_for_create(e.errno)))
        };
        self.release(parent);
        made?;
        plain(
            self.sys
                .open(Some(self.root), dest, libc::O_PATH, 0, RESOLVE_IN_ROOT),
        )
    }

    /// Close a directory fd from [`Self::parent_of`] unless it is the new
    /// root itself.
    fn release(&mut self, fd: RawFd) {
        if fd != self.root {
            self.sys.close(fd);
        }
    }

    /// The parent directory of `dest` (created as needed) and the last name.
    /// Each prefix is resolved once, inside the new root; a missing one is
    /// created in the directory resolved just before it. The parent of a
    /// top-level name is the new root's own fd: give it back with
    /// [`Self::release`].
    fn parent_of(&mut self, dest: &CStr) -> StepResult<(RawFd, CString)> {
        let bytes = dest.to_bytes();
        let (parent, name) = match bytes.iter().rposition(|b| *b == b'/') {
            Some(i) => (&bytes[..i], &bytes[i + 1..]),
            None => (&b""[..], bytes),
        };
        let mut cur = self.root;
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
            let next = match self
                .sys
                .open(Some(self.root), &here, O_PATH_DIR, 0, RESOLVE_IN_ROOT)
            {
                Ok(fd) => Ok(fd),
                Err(e) if e.errno == Errno::ENOENT => {
                    let comp = CString::new(comp).expect("no NUL");
                    match self.sys.mkdirat(cur, &comp, 0o755) {
                        Ok(()) => plain(self.sys.open(
                            Some(self.root),
                            &here,
                            O_PATH_DIR,
                            0,
                            RESOLVE_IN_ROOT,
                        )),
                        Err(e) if e.errno == Errno::EEXIST => plain(self.sys.open(
                            Some(self.root),
                            &here,
                            O_PATH_DIR,
                            0,
                            RESOLVE_IN_ROOT,
                        )),
                        Err(e) => Err((e.clone(), hint_for_create(e.errno))),
                    }
                }
                Err(e) => Err((e, None)),
            };
            self.release(cur);
            cur = next?;
        }
        Ok((cur, CString::new(name).expect("no NUL")))
    }

    fn scratch_name(&mut self) -> CString {
        self.scratch += 1;
        CString::new(format!("s{}", self.scratch)).expect("no NUL")
    }

    /// A fresh directory on the staging tmpfs (outside the new root).
    /// An empty file under the staging directory, to attach a file mount on.
    fn scratch_file(&mut self, staging: RawFd) -> Result<CString, SysError> {
        let name = self.scratch_name();
        let fd = self.sys.open(
            Some(staging),
            &name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600,
            0,
        )?;
        self.sys.close(fd);
        let mut path = STAGING.to_bytes().to_vec();
        path.push(b'/');
        path.extend_from_slice(name.as_bytes());
        Ok(CString::new(path).expect("no NUL"))
    }

    fn scratch_dir(&mut self, staging: RawFd) -> Result<CString, SysError> {
        let name = self.scratch_name();
        self.sys.mkdirat(staging, &name, 0o700)?;
        let mut path = STAGING.to_bytes().to_vec();
        path.push(b'/');
        path.extend_from_slice(name.as_bytes());
        Ok(CString::new(path).expect("no NUL"))
    }
}

fn hint_for_create(errno: Errno) -> Option<&'static str> {
    match errno {
        Errno::EROFS => {
            Some("the destination's parent is read-only; mount a tmpfs or dir there first")
        }
        Errno::ENOTDIR => Some("a parent of the destination is not a directory"),
        _ => None,
    }
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
