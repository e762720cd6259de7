//! Turning `Spec.fs` into a mount plan, before clone (pure, allocates).
//!
//! The plan names every host path the child must open (`sources`) and the
//! steps it performs afterwards, with destinations as paths relative to the
//! new root. The child only executes it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::spec::{ByteSize, FsOp, Spec};
use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// Default size of an ephemeral overlay upper when neither the operation nor
/// `limits.upper_size` says.
pub const DEFAULT_UPPER_SIZE: ByteSize = ByteSize(4 << 30);

/// A host path the child opens (`O_PATH`) before building the new root.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub path: CString,
    /// Skip the operation when the path does not exist.
    pub optional: bool,
    /// Must be a directory (overlay layers).
    pub directory: bool,
    /// Must not be a symlink itself (host directories an earlier sandbox
    /// may have written to, like a `--changes` upper).
    pub no_follow: bool,
    /// The supervisor hands the child an idmapped mount of this path
    /// (root launches: the workload's host id owns the workspace).
    pub idmapped: bool,
    /// The supervisor opens this path and hands the child the fd (root
    /// launches: a path only host root may reach, like the proxy's door).
    pub handed_over: bool,
}

/// Where an overlay's upper and work directories live.
#[derive(Debug, Clone, PartialEq)]
pub enum Upper {
    /// Host directories (source indices).
    Host { upper: usize, work: usize },
    /// A private tmpfs of this size, discarded with the sandbox.
    Tmp { size: u64 },
    /// Read-only overlay.
    None,
}

/// One step of building the new root.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Bind {
        source: usize,
        dest: CString,
        /// MOUNT_ATTR_* set on the bind and all its submounts.
        attrs: u64,
    },
    Overlay {
        lowers: Vec<usize>,
        upper: Upper,
        dest: CString,
    },
    Tmpfs {
        dest: CString,
        /// tmpfs options, built from numbers only.
        data: CString,
    },
    Proc {
        dest: CString,
    },
    Dev {
        dest: CString,
    },
    Mqueue {
        dest: CString,
    },
    Dir {
        dest: CString,
        mode: u32,
    },
    File {
        dest: CString,
        content: Vec<u8>,
        mode: u32,
        readonly: bool,
    },
    Symlink {
        target: CString,
        dest: CString,
    },
    Chmod {
        dest: CString,
        mode: u32,
    },
    RemountRo {
        dest: CString,
    },
}

/// Everything the child needs to build the new root.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub sources: Vec<Source>,
    pub steps: Vec<Step>,
    /// Remount the root tmpfs read-only at the end.
    pub root_readonly: bool,
    /// Index (into `steps`) of the overlays whose upper is a private tmpfs,
    /// so the sandbox can count what the workload changed.
    pub tmp_uppers: Vec<usize>,
    /// Warm sandboxes: index (into `steps`) of the writable overlays that
    /// are staged when the root is built and mounted only when a command
    /// claims the sandbox (see `fs::claim`).
    pub claim_overlays: Vec<usize>,
    /// A container image's layers (source indices, top first): the new root
    /// is an overlay of them over a private upper, under every step.
    pub image_lowers: Vec<usize>,
}

/// Attributes of a read-only bind.
pub const RO_BIND: u64 = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
/// Attributes of a read-write bind.
pub const RW_BIND: u64 = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
/// Attributes of a dev-bind: devices usable, setuid never.
pub const DEV_BIND: u64 = MOUNT_ATTR_NOSUID;
/// Attributes that /proc keeps.
pub const PROC_ATTRS: u64 = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;

/// Build the plan. `idmap_overlay_lowers` is true on the root path, where
/// overlay lowers are handed over as idmapped mounts.
pub fn plan(spec: &Spec, idmap_overlay_lowers: bool) -> Plan {
    let mut p = Plan {
        root_readonly: spec.root_readonly,
        ..Plan::default()
    };
    let upper_default = spec.limits.upper_size.unwrap_or(DEFAULT_UPPER_SIZE).0;
    for op in &spec.fs {
        let dest = rel(op.dest());
        let step = match op {
            FsOp::Bind { src, optional, .. } => Step::Bind {
                source: p.source(src, *optional, false, false),
                dest,
                attrs: RW_BIND,
            },
            FsOp::RoBind { src, optional, .. } => Step::Bind {
                source: p.source(src, *optional, false, false),
                dest,
                attrs: RO_BIND,
            },
            FsOp::DevBind { src, optional, .. } => Step::Bind {
                source: p.source(src, *optional, false, false),
                dest,
                attrs: DEV_BIND,
            },
            FsOp::Overlay {
                lowers,
                upper,
                work,
                ..
            } => {
                let lowers = p.lowers(lowers, idmap_overlay_lowers);
                let upper = Upper::Host {
                    upper: p.source_dir(upper),
                    work: p.source_dir(work),
                };
                Step::Overlay {
                    lowers,
                    upper,
                    dest,
                }
            }
            FsOp::TmpOverlay { lowers, size, .. } => {
                p.tmp_uppers.push(p.steps.len());
                Step::Overlay {
                    lowers: p.lowers(lowers, idmap_overlay_lowers),
                    upper: Upper::Tmp {
                        size: size.map_or(upper_default, |s| s.0),
                    },
                    dest,
                }
            }
            FsOp::RoOverlay { lowers, .. } => Step::Overlay {
                lowers: p.lowers(lowers, false),
                upper: Upper::None,
                dest,
            },
            FsOp::Tmpfs {
                size,
                nr_inodes,
                mode,
                ..
            } => Step::Tmpfs {
                dest,
                data: tmpfs_data(
                    mode.unwrap_or(0o755),
                    size.map_or(crate::spec::TMP_SIZE.0, |s| s.0),
                    nr_inodes.unwrap_or(crate::spec::TMP_INODES),
                ),
            },
            FsOp::Proc { .. } => Step::Proc { dest },
            FsOp::Dev { .. } => Step::Dev { dest },
            FsOp::Mqueue { .. } => Step::Mqueue { dest },
            FsOp::Dir { mode, .. } => Step::Dir {
                dest,
                mode: mode.unwrap_or(0o755),
            },
            FsOp::File { content, mode, .. } => Step::File {
                dest,
                content: content.as_bytes().to_vec(),
                mode: mode.unwrap_or(0o644),
                readonly: false,
            },
            FsOp::BindData { content, mode, .. } => Step::File {
                dest,
                content: content.as_bytes().to_vec(),
                mode: mode.unwrap_or(0o444),
                readonly: true,
            },
            FsOp::Symlink { target, .. } => Step::Symlink {
                target: cstring(target),
                dest,
            },
            FsOp::Chmod { mode, .. } => Step::Chmod { dest, mode: *mode },
            FsOp::RemountRo { .. } => Step::RemountRo { dest },
        };
        p.steps.push(step);
    }
    p
}

impl Plan {
    fn source(&mut self, path: &Path, optional: bool, directory: bool, idmapped: bool) -> usize {
        self.sources.push(Source {
            path: cstring(path),
            optional,
            directory,
            no_follow: false,
            idmapped,
            handed_over: false,
        });
        self.sources.len() - 1
    }

    fn source_dir(&mut self, path: &Path) -> usize {
        self.sources.push(Source {
            path: cstring(path),
            optional: false,
            directory: true,
            no_follow: true,
            idmapped: false,
            handed_over: false,
        });
        self.sources.len() - 1
    }

    fn lowers(&mut self, lowers: &[std::path::PathBuf], idmapped: bool) -> Vec<usize> {
        lowers
            .iter()
            .map(|l| self.source(l, false, true, idmapped))
            .collect()
    }
}

/// Make an image's layer trees (`top_first`) the lowers of the new root.
/// `handed_over`: root launches, where the supervisor hands each layer
/// over as an idmapped, read-only, nosuid, nodev mount.
pub fn add_image_lowers(plan: &mut Plan, top_first: &[std::path::PathBuf], handed_over: bool) {
    for dir in top_first {
        plan.sources.push(Source {
            path: cstring(dir),
            optional: false,
            directory: true,
            no_follow: false,
            idmapped: false,
            handed_over,
        });
        plan.image_lowers.push(plan.sources.len() - 1);
    }
}

/// tmpfs mount data from numbers only (never from paths).
pub fn tmpfs_data(mode: u32, size: u64, nr_inodes: u64) -> CString {
    CString::new(format!("mode={mode:o},size={size},nr_inodes={nr_inodes}")).expect("digits only")
}

/// `/a/b` → `a/b` (validated Specs hold absolute paths without NUL).
fn rel(dest: &Path) -> CString {
    let bytes = dest.as_os_str().as_bytes();
    let trimmed: &[u8] = {
        let mut b = bytes;
        while let [b'/', rest @ ..] = b {
            b = rest;
        }
        b
    };
    CString::new(if trimmed.is_empty() {
        b".".to_vec()
    } else {
        trimmed.to_vec()
    })
    .expect("validated: no NUL")
}

fn cstring(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("validated: no NUL")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_profile_plan_orders_ops_and_flags() {
        let mut spec = crate::spec::default_profile();
        spec.fs
            .push(crate::spec::workspace_overlay(Path::new("/work/x"), None));
        let p = plan(&spec, false);
        assert_eq!(p.steps.len(), spec.fs.len());
        let usr = p
            .steps
            .iter()
            .find_map(|s| match s {
                Step::Bind {
                    source,
                    dest,
                    attrs,
                } if dest.as_bytes() == b"usr" => Some((*source, *attrs)),
                _ => None,
            })
            .expect("usr bound");
        assert_eq!(usr.1, RO_BIND);
        assert_eq!(p.sources[usr.0].path.as_bytes(), b"/usr");
        match p.steps.last().unwrap() {
            Step::Overlay {
                upper: Upper::Tmp { size },
                dest,
                lowers,
            } => {
                assert_eq!(*size, DEFAULT_UPPER_SIZE.0);
                assert_eq!(dest.as_bytes(), b"work/x");
                assert!(p.sources[lowers[0]].directory);
            }
            other => panic!("workspace is not a tmp overlay: {other:?}"),
        }
        assert_eq!(p.tmp_uppers, vec![p.steps.len() - 1]);
    }

    #[test]
    fn changes_dir_upper_is_not_followed() {
        let mut spec = Spec::default();
        spec.fs.push(crate::spec::workspace_overlay(
            Path::new("/w"),
            Some(Path::new("/keep")),
        ));
        let p = plan(&spec, true);
        let Step::Overlay {
            upper: Upper::Host { upper, work },
            lowers,
            ..
        } = &p.steps[0]
        else {
            panic!("expected a host overlay")
        };
        assert_eq!(p.sources[*upper].path.as_bytes(), b"/keep/upper");
        assert_eq!(p.sources[*work].path.as_bytes(), b"/keep/work");
        assert!(p.sources[*upper].no_follow && p.sources[*work].no_follow);
        assert!(p.sources[lowers[0]].idmapped);
        assert!(p.tmp_uppers.is_empty());
    }

    #[test]
    fn tmpfs_options_hold_numbers_only() {
        assert_eq!(
            tmpfs_data(0o1777, 1024, 10).as_bytes(),
            b"mode=1777,size=1024,nr_inodes=10"
        );
    }
}
