//! Writable overlays of a warm sandbox: prepared while the root is built,
//! mounted when a command claims the sandbox.
//!
//! A warm sandbox is built before anyone knows which command it will run,
//! so a writable overlay (a session's workspace, a `--changes` upper, a
//! discarded-upper workspace) must not be mounted yet: an upper directory
//! must never be used by two overlays at once (every ready sandbox of a
//! session names the same upper). So the overlay is *staged*: a 64 KiB
//! private tmpfs at its destination holds a bind of each lower (`l0`,
//! `l1`, ...) and either the directory holding the host upper and work
//! (`h`: overlayfs wants those two on one mount; made a detached mount
//! with the launcher's identity by [`hold_upper`], since that directory
//! may be the launcher's own 0700 one) or a private tmpfs `t` with
//! `upper`/`work` for a discarded upper. Then the overlay's filesystem
//! context is made (`fsopen`, `fsconfig`), each layer named
//! `/proc/self/fd/N` of an fd on those mounts: overlayfs (6.5+) resolves
//! them right there, and takes no upper until the filesystem is created.
//! Nobody but hutch init is in the sandbox until the claim.
//!
//! [`attach`], at the claim (after `pivot_root`), creates the filesystem
//! (`FSCONFIG_CMD_CREATE`: overlayfs takes its private copies of the
//! layers, which must be mounted, and the upper), makes it a detached
//! mount (`fsmount`, nosuid, nodev), detaches the stage with every bind on
//! it, and moves the overlay onto the destination: the mount table is
//! then the one a cold launch builds.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::builder::{Builder, Dir};
use super::plan::{Step, Upper, tmpfs_data};
use super::syscalls::{BASE, BuildError, FsSys, Hint, O_PATH_DIR, OpResult, fd_path, op_name, plain};
use crate::sys::{
    Errno, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, RESOLVE_BENEATH, RESOLVE_IN_ROOT,
    RESOLVE_NO_SYMLINKS, SysError,
};

/// Size of the stage tmpfs: it holds only a few empty directories.
const STAGE_SIZE: u64 = 64 << 10;

/// One overlay waiting for its claim.
#[derive(Debug)]
pub struct Staged {
    /// The overlay's index in the plan's steps (for error lines).
    pub step: usize,
    /// The overlay's filesystem context, layers configured.
    context: OwnedFd,
    /// The stage tmpfs at the destination (its root).
    stage: OwnedFd,
    /// Where the overlay goes: the destination's parent and last name.
    parent: OwnedFd,
    name: CString,
    /// The layers the context names (for a kernel that resolves them
    /// only at creation, through the sandbox's /proc).
    _layers: Vec<OwnedFd>,
}

fn name(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// Before the build, with the launcher's identity: the directory holding
/// a host upper and its work directory as a detached mount, and the
/// upper's and work's source fds replaced by fds on that mount (found by
/// the last names of their paths, no symlink followed, and checked to be
/// the directories opened by path).
pub(super) fn hold_upper<S: FsSys>(
    sys: &mut S,
    plan: &super::plan::Plan,
    source_fds: &mut [Option<OwnedFd>],
    upper: usize,
    work: usize,
) -> OpResult<OwnedFd> {
    let missing = || {
        (
            SysError::new("staging an overlay upper", Errno::ENOENT),
            None,
        )
    };
    let upper_fd = source_fds
        .get(upper)
        .and_then(Option::as_ref)
        .ok_or_else(missing)?;
    let holder = plain(sys.open(
        Some(upper_fd.as_fd()),
        c"..",
        O_PATH_DIR,
        0,
        RESOLVE_NO_SYMLINKS,
    ))?;
    let tree = plain(sys.clone_tree(holder.as_fd(), c"", false))?;
    for index in [upper, work] {
        let path = &plan.sources.get(index).ok_or_else(missing)?.path;
        let bytes = path.to_bytes();
        let last = CString::new(bytes.rsplit(|b| *b == b'/').next().unwrap_or(bytes))
            .expect("from a C string");
        let found = plain(sys.open(
            Some(tree.as_fd()),
            &last,
            O_PATH_DIR,
            0,
            RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH,
        ))?;
        let opened = source_fds
            .get(index)
            .and_then(Option::as_ref)
            .ok_or_else(missing)?;
        if !plain(sys.same_file(found.as_fd(), opened.as_fd()))? {
            return Err((
                SysError::new(
                    "checking the overlay's upper and work directories",
                    Errno::EXDEV,
                ),
                Some(
                    "a warm sandbox needs an overlay's upper and work directories side by side in one directory (launch it cold)"
                        .into(),
                ),
            ));
        }
        source_fds[index] = Some(found);
    }
    Ok(tree)
}

/// A new overlay filesystem context over these layers (each passed as
/// its `/proc/self/fd/N`), with a cold launch's options: metadata in
/// user.* xattrs, no metacopy (redirect_dir then stays nofollow).
pub(super) fn overlay_context<S: FsSys>(
    sys: &mut S,
    lowers: &[BorrowedFd<'_>],
    upper: BorrowedFd<'_>,
    work: BorrowedFd<'_>,
) -> OpResult<OwnedFd> {
    let mut lowerdir = Vec::new();
    for (k, fd) in lowers.iter().enumerate() {
        if k > 0 {
            lowerdir.push(b':');
        }
        lowerdir.extend_from_slice(fd_path(*fd).as_bytes());
    }
    let lowerdir = CString::new(lowerdir).expect("fd paths hold no NUL");
    let (upperdir, workdir) = (fd_path(upper), fd_path(work));
    let options = [
        (c"lowerdir", Some(lowerdir.as_c_str())),
        (c"upperdir", Some(upperdir.as_c_str())),
        (c"workdir", Some(workdir.as_c_str())),
        (c"userxattr", None),
        (c"metacopy", Some(c"off")),
    ];
    sys.fs_context(c"overlay", &options).map_err(|e| {
        let hint = overlay_hint(e.errno);
        (e, hint)
    })
}

fn overlay_hint(errno: Errno) -> Option<Hint> {
    Some(Hint::Borrowed(match errno {
        Errno::EINVAL => {
            "overlay refused its layers: upper and work must be on one filesystem that supports user xattrs"
        }
        Errno::ENODEV => "overlayfs is not available: load the overlay module",
        _ => return None,
    }))
}

impl<S: FsSys> Builder<'_, S> {
    /// Stage the overlay `step` (plan index `index`): returns it and, for a
    /// discarded upper, the fd the sandbox counts changes through.
    pub(super) fn stage_overlay(
        &mut self,
        step: &Step,
        index: usize,
    ) -> OpResult<(Staged, Option<OwnedFd>)> {
        let invalid = || (SysError::new("staging an overlay", Errno::EINVAL), None);
        let Step::Overlay {
            lowers,
            upper,
            dest,
        } = step
        else {
            return Err(invalid());
        };
        if matches!(upper, Upper::None) || dest.as_bytes() == b"." {
            return Err(invalid());
        }
        let target = self.ensure(dest, true)?;
        let data = tmpfs_data(0o700, STAGE_SIZE, 64);
        plain(self.sys.mount(
            Some(c"tmpfs"),
            &fd_path(target.as_fd()),
            Some(c"tmpfs"),
            BASE | libc::MS_NOEXEC,
            Some(&data),
        ))?;
        drop(target);
        let stage = plain(self.sys.open(
            Some(self.root.as_fd()),
            dest,
            O_PATH_DIR,
            0,
            RESOLVE_IN_ROOT,
        ))?;
        let mut layers = Vec::new();
        for (k, l) in lowers.iter().enumerate() {
            let at = name(&format!("l{k}"));
            let Some(src) = self.source_fds.get(*l).and_then(Option::as_ref) else {
                return Err((
                    SysError::new("staging an overlay layer", Errno::ENOENT),
                    None,
                ));
            };
            let src = fd_path(src.as_fd());
            layers.push(self.bind_onto_stage(stage.as_fd(), &at, &src)?);
        }
        let mut counted = None;
        let (u, w) = match upper {
            Upper::Host { upper, work } => {
                let held = self
                    .holders
                    .iter()
                    .position(|(step, _)| *step == index)
                    .map(|i| self.holders.swap_remove(i).1);
                let (Some(tree), Some(u), Some(w)) = (
                    held,
                    self.source_fds.get_mut(*upper).and_then(Option::take),
                    self.source_fds.get_mut(*work).and_then(Option::take),
                ) else {
                    return Err((
                        SysError::new("staging an overlay upper", Errno::ENOENT),
                        None,
                    ));
                };
                plain(self.sys.mkdirat(stage.as_fd(), c"h", 0o700))?;
                plain(self.sys.move_mount_at(tree.as_fd(), stage.as_fd(), c"h"))?;
                (u, w)
            }
            Upper::Tmp { size } => {
                plain(self.sys.mkdirat(stage.as_fd(), c"t", 0o700))?;
                let t = plain(self.sys.open(
                    Some(stage.as_fd()),
                    c"t",
                    O_PATH_DIR,
                    0,
                    RESOLVE_NO_SYMLINKS,
                ))?;
                let opts = tmpfs_data(0o755, *size, 1 << 20);
                plain(self.sys.mount(
                    Some(c"tmpfs"),
                    &fd_path(t.as_fd()),
                    Some(c"tmpfs"),
                    BASE,
                    Some(&opts),
                ))?;
                drop(t);
                let t = plain(self.sys.open(
                    Some(stage.as_fd()),
                    c"t",
                    O_PATH_DIR,
                    0,
                    RESOLVE_NO_SYMLINKS,
                ))?;
                plain(self.sys.mkdirat(t.as_fd(), c"upper", 0o755))?;
                plain(self.sys.mkdirat(t.as_fd(), c"work", 0o700))?;
                let u = plain(self.sys.open(Some(t.as_fd()), c"upper", O_PATH_DIR, 0, 0))?;
                let w = plain(self.sys.open(Some(t.as_fd()), c"work", O_PATH_DIR, 0, 0))?;
                counted = Some(plain(self.sys.open(
                    Some(t.as_fd()),
                    c"upper",
                    libc::O_RDONLY | libc::O_DIRECTORY,
                    0,
                    RESOLVE_NO_SYMLINKS,
                ))?);
                (u, w)
            }
            Upper::None => return Err(invalid()),
        };
        let lowered: Vec<BorrowedFd<'_>> = layers.iter().map(AsFd::as_fd).collect();
        let context = overlay_context(self.sys, &lowered, u.as_fd(), w.as_fd())?;
        layers.push(u);
        layers.push(w);
        let (parent, last) = self.parent_of(dest)?;
        let parent = match parent {
            Dir::Opened(fd) => fd,
            Dir::Root => plain(
                self.sys
                    .open(Some(self.root.as_fd()), c".", O_PATH_DIR, 0, 0),
            )?,
        };
        Ok((
            Staged {
                step: index,
                context,
                stage,
                parent,
                name: last,
                _layers: layers,
            },
            counted,
        ))
    }

    /// Bind `src` (non-recursively: an overlay layer is one mount) onto a
    /// new directory `at` of the stage; an fd on the bind.
    fn bind_onto_stage(
        &mut self,
        stage: std::os::fd::BorrowedFd<'_>,
        at: &std::ffi::CStr,
        src: &std::ffi::CStr,
    ) -> OpResult<OwnedFd> {
        plain(self.sys.mkdirat(stage, at, 0o700))?;
        let target = plain(
            self.sys
                .open(Some(stage), at, O_PATH_DIR, 0, RESOLVE_NO_SYMLINKS),
        )?;
        plain(self.sys.mount(
            Some(src),
            &fd_path(target.as_fd()),
            None,
            libc::MS_BIND,
            None,
        ))?;
        drop(target);
        plain(
            self.sys
                .open(Some(stage), at, O_PATH_DIR, 0, RESOLVE_NO_SYMLINKS),
        )
    }
}

/// Mount the staged overlays (after `pivot_root`, in hutch init, when a
/// command claimed the sandbox). `op_names` describe the steps for errors.
pub fn attach<S: FsSys>(
    sys: &mut S,
    staged: Vec<Staged>,
    op_names: &[String],
) -> Result<(), BuildError> {
    for s in staged {
        let what = op_name(op_names, s.step);
        let overlay = sys
            .fs_mount(s.context.as_fd(), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
            .map_err(|err| BuildError {
                what: what.clone(),
                hint: overlay_hint(err.errno),
                err,
            })?;
        // The stage and every bind on it go; the overlay keeps its own
        // private copies of the layers.
        let fail = |err: SysError| BuildError {
            what: what.clone(),
            err,
            hint: None,
        };
        sys.fchdir(s.stage.as_fd()).map_err(fail)?;
        sys.umount2(c".", libc::MNT_DETACH).map_err(fail)?;
        sys.move_mount_at(overlay.as_fd(), s.parent.as_fd(), &s.name)
            .map_err(fail)?;
    }
    sys.chdir(c"/").map_err(|err| BuildError {
        what: "entering the new root".into(),
        err,
        hint: None,
    })
}
