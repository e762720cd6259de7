//! A resident sandbox's per-command mounts: what a command must get fresh
//! inside a sandbox that outlives it (docs/decisions/0007, s11).
//!
//! hutch init of a resident sandbox keeps its root (binds, `/dev`'s nodes,
//! the staged overlays of `fs::claim`) and clones a *per-command init* per
//! command, in a copy of its mount namespace. That process, after
//! `pivot_root` and with nothing of any command in it yet:
//!
//! - [`refresh`]: mounts every filesystem a command could write to or see
//!   another command through again, over the kept one, in plan order:
//!   `/proc` (its own pid namespace's, with the masks), `/dev` (nodes
//!   taken from the kept one), each tmpfs, each mqueue (its own ipc
//!   namespace's);
//! - [`mount_overlays`], at the claim: each workspace overlay from a new
//!   filesystem context over its kept layers ([`Layers`], detached mounts
//!   made when the sandbox was built), so the upper is mounted only while
//!   the command runs, exactly as in a sandbox used once.
//!
//! Only a plan whose every other writable place is the host's own (a
//! read-write bind) may be resident: [`blocker`] says why another may not.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, OwnedFd};

use super::builder::Builder;
use super::claim::overlay_context;
use super::plan::{Plan, Step, Upper};
use super::syscalls::{BuildError, FsSys, O_PATH_DIR, OpResult, op_name, plain};
use crate::sys::{Errno, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, RESOLVE_IN_ROOT, SysError};

/// Why a sandbox of this plan cannot serve more than one command (its
/// writable state could not be made fresh per command), or None.
pub fn blocker(plan: &Plan) -> Option<&'static str> {
    if plan.root.is_some() {
        return Some("its root is a host directory");
    }
    if !plan.root_readonly {
        return Some("its root is writable");
    }
    if !plan.image_lowers.is_empty() {
        return Some("its root is an image's overlay");
    }
    if !plan.tmp_uppers.is_empty() {
        return Some("it has an overlay with a discarded upper");
    }
    // Everything mounted again per command, by destination.
    let mut remade: Vec<&CStr> = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let dest = match step {
            Step::Overlay { upper, dest, .. } => {
                match upper {
                    Upper::Host { .. } if plan.claim_overlays.contains(&i) => {}
                    Upper::None => {}
                    _ => return Some("it has an overlay that is not a session's workspace"),
                }
                dest.as_c_str()
            }
            Step::Bind { dest, .. }
            | Step::Dir { dest, .. }
            | Step::Symlink { dest, .. }
            | Step::Chmod { dest, .. }
            | Step::RemountRo { dest, .. }
            | Step::Mask { dest }
            | Step::ReadonlyPath { dest } => dest.as_c_str(),
            Step::File {
                dest,
                bind,
                readonly,
                ..
            } => {
                if *bind && !*readonly {
                    return Some("it binds a writable file of its own");
                }
                dest.as_c_str()
            }
            Step::Tmpfs { dest, .. }
            | Step::Proc { dest }
            | Step::Dev { dest, .. }
            | Step::Mqueue { dest } => dest.as_c_str(),
            Step::BindMount { .. } | Step::FsMount { .. } | Step::Device { .. } => {
                return Some("it has a mount, device or bind operation with options");
            }
        };
        // A later step inside (or on) something mounted again would be
        // covered by the new mount.
        if remade.iter().any(|r| within(dest, r)) {
            return Some("an operation changes a tmpfs, /proc or /dev made by an earlier one");
        }
        if matches!(
            step,
            Step::Tmpfs { .. } | Step::Proc { .. } | Step::Dev { .. } | Step::Mqueue { .. }
        ) {
            remade.push(dest);
        }
    }
    None
}

/// Whether `path` is `dir` or below it (both relative to the root, by
/// whole components; leading `/` and `.` ignored).
fn within(path: &CStr, dir: &CStr) -> bool {
    let parts = |c: &CStr| -> Vec<Vec<u8>> {
        c.to_bytes()
            .split(|b| *b == b'/')
            .filter(|p| !p.is_empty() && *p != b".")
            .map(<[u8]>::to_vec)
            .collect()
    };
    let (p, d) = (parts(path), parts(dir));
    p.len() >= d.len() && p[..d.len()] == d[..]
}

/// In a per-command init (after `pivot_root`, in its own copy of the
/// mount namespace and its own pid and ipc namespaces): mount `/proc`,
/// `/dev`, every tmpfs and mqueue of the plan again, over the kept ones,
/// in plan order. `/dev`'s nodes are copies of the kept `/dev`'s.
pub fn refresh<S: FsSys>(sys: &mut S, plan: &Plan, op_names: &[String]) -> Result<(), BuildError> {
    let at_root = |err: SysError| BuildError {
        what: "opening the sandbox's root".into(),
        err,
        hint: None,
    };
    let root = sys.open(None, c"/", O_PATH_DIR, 0, 0).map_err(at_root)?;
    // The kept /dev: where the new /dev's (and /proc's masks') nodes come
    // from. Opened before anything covers it.
    let kept_dev = plan
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Dev { dest, .. } => Some(dest.as_c_str()),
            _ => None,
        })
        .unwrap_or(c"dev");
    let dev = match sys.open(Some(root.as_fd()), kept_dev, O_PATH_DIR, 0, RESOLVE_IN_ROOT) {
        Ok(fd) => Some(fd),
        Err(e) if e.errno == Errno::ENOENT => None,
        Err(err) => {
            return Err(BuildError {
                what: "opening the sandbox's /dev".into(),
                err,
                hint: None,
            });
        }
    };
    let staging = sys.open(None, c"/", O_PATH_DIR, 0, 0).map_err(at_root)?;
    let mut b = Builder {
        sys,
        root,
        source_fds: Vec::new(),
        holders: Vec::new(),
        host_dev: dev,
        scratch: 0,
        nodes_mounted: false,
        staging_in_source: Vec::new(),
        parent_mode: 0o755,
    };
    for (i, step) in plan.steps.iter().enumerate() {
        if !matches!(
            step,
            Step::Tmpfs { .. } | Step::Proc { .. } | Step::Dev { .. } | Step::Mqueue { .. }
        ) {
            continue;
        }
        b.refresh_step(step, staging.as_fd())
            .map_err(|(err, hint)| BuildError {
                what: op_name(op_names, i),
                err,
                hint,
            })?;
    }
    Ok(())
}

/// A resident sandbox's workspace overlay, kept between commands: its
/// layers as detached mounts (each the root of a mount namespace of its
/// own, which overlayfs takes its private copies from in any mount
/// namespace), the upper and work directories found in one detached copy
/// of the directory that holds them (opened with the launcher's identity:
/// that directory may be its own 0700 one).
#[derive(Debug)]
pub struct Layers {
    /// The overlay's index in the plan's steps (for error lines).
    pub step: usize,
    dest: CString,
    lowers: Vec<OwnedFd>,
    upper: OwnedFd,
    work: OwnedFd,
    /// The detached copy `upper` and `work` are on.
    _holder: OwnedFd,
}

impl<S: FsSys> Builder<'_, S> {
    /// A resident sandbox's overlay `step` (plan index `index`): its
    /// destination made, its layers kept as detached mounts ([`Layers`]).
    pub(super) fn keep_layers(&mut self, step: &Step, index: usize) -> OpResult<Layers> {
        let invalid = || (SysError::new("keeping an overlay's layers", Errno::EINVAL), None);
        let Step::Overlay {
            lowers,
            upper: Upper::Host { upper, work },
            dest,
        } = step
        else {
            return Err(invalid());
        };
        drop(self.ensure(dest, true)?);
        let mut kept = Vec::with_capacity(lowers.len());
        for l in lowers {
            let Some(src) = self.source_fds.get(*l).and_then(Option::as_ref) else {
                return Err((SysError::new("keeping an overlay layer", Errno::ENOENT), None));
            };
            let src = src.as_fd();
            kept.push(plain(self.sys.clone_tree(src, c"", false))?);
        }
        let missing = || (SysError::new("keeping an overlay upper", Errno::ENOENT), None);
        let held = self
            .holders
            .iter()
            .position(|(step, _)| *step == index)
            .map(|i| self.holders.swap_remove(i).1)
            .ok_or_else(missing)?;
        let u = self.source_fds.get_mut(*upper).and_then(Option::take).ok_or_else(missing)?;
        let w = self.source_fds.get_mut(*work).and_then(Option::take).ok_or_else(missing)?;
        Ok(Layers {
            step: index,
            dest: dest.clone(),
            lowers: kept,
            upper: u,
            work: w,
            _holder: held,
        })
    }
}

/// At a per-command init's claim: each resident overlay mounted at its
/// destination from a new filesystem context over the kept layers, so
/// the upper is mounted only while the command runs.
pub fn mount_overlays<S: FsSys>(
    sys: &mut S,
    layers: &[Layers],
    op_names: &[String],
) -> Result<(), BuildError> {
    for l in layers {
        let what = op_name(op_names, l.step);
        let fail = |err: SysError| BuildError {
            what: what.clone(),
            err,
            hint: None,
        };
        let lowers: Vec<_> = l.lowers.iter().map(AsFd::as_fd).collect();
        let context = overlay_context(sys, &lowers, l.upper.as_fd(), l.work.as_fd()).map_err(
            |(err, hint)| BuildError {
                what: what.clone(),
                err,
                hint,
            },
        )?;
        let overlay = sys
            .fs_mount(context.as_fd(), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
            .map_err(fail)?;
        drop(context);
        let root = sys.open(None, c"/", O_PATH_DIR, 0, 0).map_err(fail)?;
        let bytes = l.dest.to_bytes();
        let (parent, name) = match bytes.iter().rposition(|b| *b == b'/') {
            Some(at) => (&bytes[..at], &bytes[at + 1..]),
            None => (&b""[..], bytes),
        };
        let parent = CString::new(if parent.is_empty() { b"." } else { parent })
            .expect("from a C string");
        let name = CString::new(name).expect("from a C string");
        let parent = sys
            .open(Some(root.as_fd()), &parent, O_PATH_DIR, 0, RESOLVE_IN_ROOT)
            .map_err(fail)?;
        sys.move_mount_at(overlay.as_fd(), parent.as_fd(), &name)
            .map_err(fail)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(spec: &crate::spec::Spec) -> Plan {
        let mut p = super::super::plan(spec, false);
        // As a warm sandbox's: its writable overlays staged for the claim.
        p.claim_overlays = p
            .steps
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                matches!(
                    s,
                    Step::Overlay {
                        upper: Upper::Host { .. },
                        ..
                    }
                )
            })
            .map(|(i, _)| i)
            .collect();
        p
    }

    #[test]
    fn the_default_profile_with_a_session_workspace_may_be_resident() {
        let mut spec = crate::spec::default_profile();
        spec.fs.push(crate::spec::FsOp::Overlay {
            lowers: vec!["/srv/base".into()],
            upper: "/srv/s/upper".into(),
            work: "/srv/s/work".into(),
            dest: "/workspace".into(),
        });
        assert_eq!(blocker(&plan_of(&spec)), None);
    }

    #[test]
    fn a_writable_root_or_a_file_in_a_tmpfs_may_not() {
        let mut spec = crate::spec::default_profile();
        spec.root_readonly = false;
        assert_eq!(blocker(&plan_of(&spec)), Some("its root is writable"));
        let mut spec = crate::spec::default_profile();
        spec.fs.push(crate::spec::FsOp::Dir {
            dest: "/tmp/kept".into(),
            mode: None,
        });
        assert!(blocker(&plan_of(&spec)).is_some_and(|w| w.contains("made by an earlier")));
    }

    #[test]
    fn within_compares_whole_components() {
        assert!(within(c"/tmp/x", c"tmp"));
        assert!(within(c"tmp", c"/tmp/"));
        assert!(!within(c"/tmpx", c"/tmp"));
        assert!(!within(c"/", c"/tmp"));
    }
}
