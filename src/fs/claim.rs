//! Writable overlays of a warm sandbox: staged while the root is built,
//! mounted when a command claims the sandbox.
//!
//! A warm sandbox is built before anyone knows which command it will run,
//! so a writable overlay (a session's workspace, a `--changes` upper, a
//! discarded-upper workspace) must not be mounted yet: an upper directory
//! must never be used by two overlays at once (every ready sandbox of a
//! session would mount the same upper), and the command should see its
//! workspace as it is when it starts, not as it was when the sandbox was
//! made. So [`Builder::stage_overlay`] mounts a small private tmpfs at the
//! overlay's destination and binds the layers onto it (`l0`, `l1`, ...;
//! for a host upper `h`, the directory that holds both `upper` and `work`,
//! since overlayfs wants those two on one mount; for a discarded one a
//! tmpfs `t` holding `upper`/`work`): nothing of an overlay exists yet,
//! only references to its directories, which nobody can reach (no process
//! but hutch init is in the sandbox until the claim). A host upper and
//! work are checked (same inode as the directories opened before the
//! root was built, reached without a symlink) when staged and again just
//! before the overlay is made. [`attach`] then, after `pivot_root`
//! and without needing `/proc` in the new root, creates the overlay as a
//! detached mount (fsopen/fsconfig/fsmount, layers named relative to the
//! stage), detaches the stage with every bind on it, and moves the overlay
//! to the destination: the mount table is then the one a cold launch
//! builds.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};

use super::BuildError;
use super::build::{BASE, Builder, Dir, FsSys, O_PATH_DIR, OpResult, fd_path, plain};
use super::plan::{Step, Upper, tmpfs_data};
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
    /// The stage tmpfs at the destination (its root).
    stage: OwnedFd,
    /// Where the overlay goes: the destination's parent and last name.
    parent: OwnedFd,
    name: CString,
    lowers: usize,
    upper: StagedUpper,
}

#[derive(Debug)]
enum StagedUpper {
    /// `h/UPPER` and `h/WORK`: `h` is a bind of the host directory holding
    /// both; the fds are the directories opened before the build.
    Host {
        upper: CString,
        work: CString,
        upper_fd: OwnedFd,
        work_fd: OwnedFd,
    },
    /// `t`: a private tmpfs holding `upper` and `work`.
    Tmp,
}

/// The last component of a host path.
pub(super) fn last_name(path: &std::ffi::CStr) -> CString {
    let bytes = path.to_bytes();
    let name = bytes.rsplit(|b| *b == b'/').next().unwrap_or(bytes);
    CString::new(name).expect("from a C string")
}

fn name(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

impl<S: FsSys> Builder<'_, S> {
    /// Stage the overlay `step` (plan index `index`): returns it and, for a
    /// discarded upper, the fd the sandbox counts changes through.
    /// `names`: for a host upper, the last components of the upper's and
    /// the work directory's paths.
    pub(super) fn stage_overlay(
        &mut self,
        step: &Step,
        index: usize,
        names: Option<(CString, CString)>,
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
        for (k, l) in lowers.iter().enumerate() {
            self.bind_into(stage.as_fd(), &name(&format!("l{k}")), *l)?;
        }
        let (kind, counted) = match upper {
            Upper::Host { upper, work } => {
                let Some((upper_name, work_name)) = names else {
                    return Err(invalid());
                };
                let (Some(upper_fd), Some(work_fd)) = (
                    self.source_fds.get_mut(*upper).and_then(Option::take),
                    self.source_fds.get_mut(*work).and_then(Option::take),
                ) else {
                    return Err((
                        SysError::new("staging an overlay upper", Errno::ENOENT),
                        None,
                    ));
                };
                let holder = plain(self.sys.open(
                    Some(upper_fd.as_fd()),
                    c"..",
                    O_PATH_DIR,
                    0,
                    RESOLVE_NO_SYMLINKS,
                ))?;
                for (name, fd) in [(&upper_name, &upper_fd), (&work_name, &work_fd)] {
                    same_dir(self.sys, holder.as_fd(), name, fd.as_fd())?;
                }
                self.bind_path_into(stage.as_fd(), c"h", &fd_path(holder.as_fd()))?;
                (
                    StagedUpper::Host {
                        upper: upper_name,
                        work: work_name,
                        upper_fd,
                        work_fd,
                    },
                    None,
                )
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
                let counted = plain(self.sys.open(
                    Some(t.as_fd()),
                    c"upper",
                    libc::O_RDONLY | libc::O_DIRECTORY,
                    0,
                    RESOLVE_NO_SYMLINKS,
                ))?;
                (StagedUpper::Tmp, Some(counted))
            }
            Upper::None => return Err(invalid()),
        };
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
                stage,
                parent,
                name: last,
                lowers: lowers.len(),
                upper: kind,
            },
            counted,
        ))
    }

    /// Bind source `source` (non-recursively: an overlay layer is one
    /// mount) onto a new directory `at` of the stage.
    fn bind_into(
        &mut self,
        stage: std::os::fd::BorrowedFd<'_>,
        at: &std::ffi::CStr,
        source: usize,
    ) -> OpResult<()> {
        let Some(src) = self.source_fds.get(source).and_then(Option::as_ref) else {
            return Err((
                SysError::new("staging an overlay layer", Errno::ENOENT),
                None,
            ));
        };
        let src_path = fd_path(src.as_fd());
        self.bind_path_into(stage, at, &src_path)
    }

    /// Bind `src_path` (non-recursively) onto a new directory `at` of the
    /// stage.
    fn bind_path_into(
        &mut self,
        stage: std::os::fd::BorrowedFd<'_>,
        at: &std::ffi::CStr,
        src_path: &std::ffi::CStr,
    ) -> OpResult<()> {
        plain(self.sys.mkdirat(stage, at, 0o700))?;
        let target = plain(
            self.sys
                .open(Some(stage), at, O_PATH_DIR, 0, RESOLVE_NO_SYMLINKS),
        )?;
        plain(self.sys.mount(
            Some(src_path),
            &fd_path(target.as_fd()),
            None,
            libc::MS_BIND,
            None,
        ))
    }
}

/// Check that `name` in `dir` (no symlink followed) is the directory `fd`:
/// overlayfs is given the path, and it must lead to what was opened.
fn same_dir<S: FsSys>(
    sys: &mut S,
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    fd: std::os::fd::BorrowedFd<'_>,
) -> OpResult<()> {
    let found = plain(sys.open(
        Some(dir),
        name,
        O_PATH_DIR,
        0,
        RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH,
    ))?;
    if plain(sys.same_file(found.as_fd(), fd))? {
        return Ok(());
    }
    Err((
        SysError::new(
            "checking the overlay's upper and work directories",
            Errno::EXDEV,
        ),
        Some(
            "a warm sandbox needs an overlay's upper and work directories side by side in one directory, unchanged until the claim (launch cold otherwise)",
        ),
    ))
}

/// Mount the staged overlays (after `pivot_root`, in hutch init, when a
/// command claimed the sandbox). `op_names` describe the steps for errors.
pub fn attach<S: FsSys>(
    sys: &mut S,
    staged: Vec<Staged>,
    op_names: &[String],
) -> Result<(), BuildError> {
    for s in staged {
        let what = op_names
            .get(s.step)
            .cloned()
            .unwrap_or_else(|| format!("fs[{}]", s.step));
        let fail = |hint: Option<&'static str>| {
            let what = what.clone();
            move |err: SysError| BuildError { what, err, hint }
        };
        // Layers are named relative to the stage: no path of the host and
        // no /proc magic link reaches the option strings.
        sys.fchdir(s.stage.as_fd()).map_err(fail(None))?;
        let lowerdir = name(
            &(0..s.lowers)
                .map(|k| format!("l{k}"))
                .collect::<Vec<_>>()
                .join(":"),
        );
        let host_paths;
        let (upperdir, workdir) = match &s.upper {
            StagedUpper::Host {
                upper,
                work,
                upper_fd,
                work_fd,
            } => {
                let holder = sys
                    .open(
                        Some(s.stage.as_fd()),
                        c"h",
                        O_PATH_DIR,
                        0,
                        RESOLVE_NO_SYMLINKS,
                    )
                    .map_err(fail(None))?;
                for (name, fd) in [(upper, upper_fd), (work, work_fd)] {
                    same_dir(sys, holder.as_fd(), name, fd.as_fd()).map_err(|(err, hint)| {
                        BuildError {
                            what: what.clone(),
                            err,
                            hint,
                        }
                    })?;
                }
                let join = |n: &CString| {
                    let mut p = b"h/".to_vec();
                    p.extend_from_slice(n.as_bytes());
                    CString::new(p).expect("from a C string")
                };
                host_paths = (join(upper), join(work));
                (host_paths.0.as_c_str(), host_paths.1.as_c_str())
            }
            StagedUpper::Tmp => (c"t/upper", c"t/work"),
        };
        let options = [
            (c"lowerdir", Some(lowerdir.as_c_str())),
            (c"upperdir", Some(upperdir)),
            (c"workdir", Some(workdir)),
            // As for a cold launch: metadata in user.* xattrs, no
            // metacopy (redirect_dir then stays nofollow).
            (c"userxattr", None),
            (c"metacopy", Some(c"off")),
        ];
        let overlay = sys
            .detached_fs(c"overlay", &options, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
            .map_err(|e| {
                let hint = match e.errno {
                    Errno::EINVAL => Some(
                        "overlay refused its layers: upper and work must be on one filesystem that supports user xattrs",
                    ),
                    Errno::ENODEV => Some("overlayfs is not available: load the overlay module"),
                    _ => None,
                };
                BuildError {
                    what: what.clone(),
                    err: e,
                    hint,
                }
            })?;
        // The stage and every bind on it go; the overlay keeps its own
        // private copies of the layers.
        sys.umount2(c".", libc::MNT_DETACH).map_err(fail(None))?;
        sys.move_mount_at(overlay.as_fd(), s.parent.as_fd(), &s.name)
            .map_err(fail(None))?;
    }
    sys.chdir(c"/").map_err(|err| BuildError {
        what: "entering the new root".into(),
        err,
        hint: None,
    })
}
