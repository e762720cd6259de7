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
        /// bubblewrap's layout (`DevLayout::Bubblewrap`).
        bubblewrap: bool,
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
        /// Kept on the staging tmpfs (outside the new root) and bound at
        /// `dest` as a mount of its own (`bind-data`), read-only with
        /// `readonly`; else made in the root (`file`).
        bind: bool,
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
        /// Its submounts too.
        recursive: bool,
    },
    /// A bind with the attributes its options ask for (`mount` op).
    BindMount {
        source: usize,
        dest: CString,
        recursive: bool,
        /// MOUNT_ATTR_* set on the bind (and its submounts when recursive).
        attrs: u64,
        /// MS_PRIVATE / MS_SLAVE / MS_UNBINDABLE (| MS_REC), or 0.
        propagation: libc::c_ulong,
    },
    /// A new filesystem mount (`mount` op): tmpfs, proc, sysfs, devpts,
    /// mqueue, cgroup2.
    FsMount {
        fstype: CString,
        /// The source name mountinfo shows (`FsOp::Mount::src`, default
        /// the type).
        source: CString,
        dest: CString,
        flags: libc::c_ulong,
        /// Options built from numbers only.
        data: Option<CString>,
        propagation: libc::c_ulong,
        /// `tmpcopyup`: the mount point must be an empty directory.
        copy_up: bool,
    },
    /// A device node (`device` op): S_IF* | permission bits, and rdev.
    Device {
        dest: CString,
        mode: u32,
        rdev: u64,
        /// The host's node at this path, bound when mknod is not allowed.
        host_path: CString,
        owner: Option<(u32, u32)>,
    },
    Mask {
        dest: CString,
    },
    ReadonlyPath {
        dest: CString,
    },
}

/// The new root when it is a host directory (`Spec::root`).
#[derive(Debug, Clone, PartialEq)]
pub struct RootPlan {
    /// Index of the directory in `sources`.
    pub source: usize,
    /// MOUNT_ATTR_* set on it (recursively) once it is bound.
    pub attrs: u64,
    /// MS_SHARED or MS_UNBINDABLE (| MS_REC) set once entered (`rshared`,
    /// `runbindable`; pivot_root refuses a shared new root), or 0.
    pub propagation: libc::c_ulong,
}

/// Everything the child needs to build the new root.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub sources: Vec<Source>,
    pub steps: Vec<Step>,
    /// A host directory as the new root instead of an empty tmpfs.
    pub root: Option<RootPlan>,
    /// Remount the root tmpfs read-only at the end.
    pub root_readonly: bool,
    /// Index (into `steps`) of the overlays whose upper is a private tmpfs,
    /// so the sandbox can count what the workload changed.
    pub tmp_uppers: Vec<usize>,
    /// Warm sandboxes: index (into `steps`) of the writable overlays that
    /// are staged when the root is built and mounted only when a command
    /// claims the sandbox (see `fs::claim`).
    pub claim_overlays: Vec<usize>,
    /// A resident sandbox (`fs::resident`): the claim overlays' layers are
    /// kept as detached mounts, and each command mounts a new overlay of
    /// them in its own mount namespace.
    pub resident: bool,
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
    if let Some(root) = &spec.root {
        let source = p.source(&root.path, false, true, false);
        let attrs = root.options.iter().fold(0, |a, o| {
            a | match o.as_str() {
                "nosuid" => MOUNT_ATTR_NOSUID,
                "nodev" => MOUNT_ATTR_NODEV,
                "noexec" => MOUNT_ATTR_NOEXEC,
                "ro" => MOUNT_ATTR_RDONLY,
                _ => 0, // validated
            }
        });
        let propagation = root.options.iter().fold(0, |p, o| match o.as_str() {
            "rshared" => libc::MS_SHARED | libc::MS_REC,
            "runbindable" => libc::MS_UNBINDABLE | libc::MS_REC,
            _ => p,
        });
        p.root = Some(RootPlan {
            source,
            attrs,
            propagation,
        });
    }
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
            FsOp::Dev { layout, .. } => Step::Dev {
                dest,
                bubblewrap: *layout == crate::spec::DevLayout::Bubblewrap,
            },
            FsOp::Mqueue { .. } => Step::Mqueue { dest },
            FsOp::Dir { mode, .. } => Step::Dir {
                dest,
                mode: mode.unwrap_or(0o755),
            },
            FsOp::File {
                content,
                encoding,
                mode,
                ..
            } => Step::File {
                dest,
                content: encoding.decode(content).expect("validated content"),
                mode: mode.unwrap_or(0o644),
                bind: false,
                readonly: false,
            },
            FsOp::BindData {
                content,
                encoding,
                mode,
                writable,
                ..
            } => Step::File {
                dest,
                content: encoding.decode(content).expect("validated content"),
                mode: mode.unwrap_or(if *writable { 0o644 } else { 0o444 }),
                bind: true,
                readonly: !*writable,
            },
            FsOp::Symlink { target, .. } => Step::Symlink {
                target: cstring(target),
                dest,
            },
            FsOp::Chmod { mode, .. } => Step::Chmod { dest, mode: *mode },
            FsOp::RemountRo { recursive, .. } => Step::RemountRo {
                dest,
                recursive: *recursive,
            },
            FsOp::Mount {
                fstype,
                src,
                options,
                optional,
                ..
            } => {
                let o = crate::spec::mount::parse_options(fstype, options)
                    .expect("validated mount options");
                match (fstype.as_str(), src) {
                    ("bind", Some(src)) => Step::BindMount {
                        source: p.source(src, *optional, false, false),
                        dest,
                        recursive: o.recursive,
                        attrs: bind_attrs(&o),
                        propagation: propagation(&o),
                    },
                    _ => Step::FsMount {
                        fstype: CString::new(fstype.as_str()).expect("validated fstype"),
                        source: CString::new(match src {
                            Some(name) => name.as_os_str().as_encoded_bytes().to_vec(),
                            None => fstype.as_bytes().to_vec(),
                        })
                        .expect("validated: no NUL"),
                        dest,
                        flags: mount_flags(&o),
                        data: fs_data(fstype, &o),
                        propagation: propagation(&o),
                        copy_up: o.copy_up,
                    },
                }
            }
            FsOp::Device {
                dest: abs,
                kind,
                major,
                minor,
                mode,
                uid,
                gid,
            } => {
                let kind = match kind.as_str() {
                    "char" => libc::S_IFCHR,
                    "block" => libc::S_IFBLK,
                    _ => libc::S_IFIFO,
                };
                Step::Device {
                    dest,
                    mode: kind | mode.unwrap_or(0o666),
                    rdev: libc::makedev(*major, *minor),
                    host_path: cstring(abs),
                    owner: match (uid, gid) {
                        (None, None) => None,
                        (u, g) => Some((u.unwrap_or(0), g.unwrap_or(0))),
                    },
                }
            }
            FsOp::Mask { .. } => Step::Mask { dest },
            FsOp::ReadonlyPath { .. } => Step::ReadonlyPath { dest },
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

/// MOUNT_ATTR_* of a bind's options.
fn bind_attrs(o: &crate::spec::mount::MountOptions) -> u64 {
    [
        (o.readonly, MOUNT_ATTR_RDONLY),
        (o.nosuid, MOUNT_ATTR_NOSUID),
        (o.nodev, MOUNT_ATTR_NODEV),
        (o.noexec, MOUNT_ATTR_NOEXEC),
        (o.nosymfollow, crate::sys::MOUNT_ATTR_NOSYMFOLLOW),
        (o.nodiratime, crate::sys::MOUNT_ATTR_NODIRATIME),
    ]
    .iter()
    .fold(0, |a, (on, f)| if *on { a | f } else { a })
}

/// MS_* flags of a new mount's options.
fn mount_flags(o: &crate::spec::mount::MountOptions) -> libc::c_ulong {
    use crate::spec::mount::Atime;
    let mut f = [
        (o.readonly, libc::MS_RDONLY),
        (o.nosuid, libc::MS_NOSUID),
        (o.nodev, libc::MS_NODEV),
        (o.noexec, libc::MS_NOEXEC),
        (o.nosymfollow, crate::sys::MS_NOSYMFOLLOW),
        (o.nodiratime, libc::MS_NODIRATIME),
    ]
    .iter()
    .fold(0, |a, (on, f)| if *on { a | f } else { a });
    f |= match o.atime {
        Some(Atime::Relatime) => libc::MS_RELATIME,
        Some(Atime::Noatime) => libc::MS_NOATIME,
        Some(Atime::Strictatime) => libc::MS_STRICTATIME,
        None => 0,
    };
    f
}

fn propagation(o: &crate::spec::mount::MountOptions) -> libc::c_ulong {
    use crate::spec::mount::Propagation;
    match o.propagation {
        None => 0,
        Some((kind, rec)) => {
            let f = match kind {
                Propagation::Private => libc::MS_PRIVATE,
                Propagation::Slave => libc::MS_SLAVE,
                Propagation::Unbindable => libc::MS_UNBINDABLE,
                Propagation::Shared => libc::MS_SHARED,
            };
            if rec { f | libc::MS_REC } else { f }
        }
    }
}

/// Filesystem options of a new mount, from numbers only.
fn fs_data(fstype: &str, o: &crate::spec::mount::MountOptions) -> Option<CString> {
    let mut parts: Vec<String> = Vec::new();
    if fstype == "devpts" {
        parts.push("newinstance".into());
        parts.push(format!("ptmxmode={:04o}", o.ptmxmode.unwrap_or(0o666)));
        if let Some(m) = o.max {
            parts.push(format!("max={m}"));
        }
    }
    if let Some(m) = o.mode {
        parts.push(format!("mode={m:o}"));
    }
    if let Some(s) = o.size {
        parts.push(format!("size={s}"));
    }
    if let Some(n) = o.nr_inodes {
        parts.push(format!("nr_inodes={n}"));
    }
    if let Some(u) = o.uid {
        parts.push(format!("uid={u}"));
    }
    if let Some(g) = o.gid {
        parts.push(format!("gid={g}"));
    }
    (!parts.is_empty()).then(|| CString::new(parts.join(",")).expect("digits only"))
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
