//! Where cgroup v2 (and, on legacy and hybrid hosts, each cgroup v1
//! hierarchy) is mounted and which cgroup this process is in.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The cgroup layout of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Only cgroup2 is mounted (systemd's unified hierarchy, containers).
    Unified,
    /// cgroup v1 controllers plus a cgroup2 mount that holds few or none.
    Hybrid,
    /// cgroup v1 only.
    Legacy,
    /// No cgroup filesystem at all.
    None,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Unified => "unified",
            Layout::Hybrid => "hybrid v1",
            Layout::Legacy => "legacy v1",
            Layout::None => "no cgroup",
        }
    }
}

/// What hutch knows about the host's cgroups before touching anything.
#[derive(Debug, Clone)]
pub struct HostCgroups {
    pub layout: Layout,
    /// Mount point of cgroup2, if any.
    pub v2_mount: Option<PathBuf>,
    /// This process's cgroup as a directory under `v2_mount`.
    pub own: Option<PathBuf>,
    /// Effective uid (root decides delegation differently).
    pub uid: u32,
    /// The mounted cgroup v1 hierarchies (empty on a unified host).
    pub v1: Vec<V1Hierarchy>,
}

/// One mounted cgroup v1 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Hierarchy {
    /// The controllers bound to it (`cpu` and `cpuacct` when comounted).
    pub controllers: Vec<String>,
    /// Its mount point.
    pub mount: PathBuf,
    /// This process's cgroup in it, as a directory under `mount`.
    pub own: Option<PathBuf>,
}

/// The v1 controllers hutch may use; other mount options (`rw`,
/// `name=systemd`, `xattr`, ...) and other controllers are left out.
const V1_CONTROLLERS: &[&str] = &[
    "memory", "pids", "cpu", "cpuacct", "cpuset", "blkio", "hugetlb",
    // hutch-oci's devices groups (`linux.resources.devices`).
    "devices",
];

impl HostCgroups {
    /// Read `/proc/self/mountinfo` and `/proc/self/cgroup`.
    pub fn detect() -> HostCgroups {
        let mountinfo = crate::sys::read_proc("/proc/self/mountinfo").unwrap_or_default();
        let proc_cgroup = crate::sys::read_proc("/proc/self/cgroup").unwrap_or_default();
        HostCgroups::from_proc(
            &mountinfo,
            &proc_cgroup,
            rustix::process::geteuid().as_raw(),
        )
    }

    /// Build from the text of mountinfo and /proc/self/cgroup.
    pub fn from_proc(mountinfo: &str, proc_cgroup: &str, uid: u32) -> HostCgroups {
        let mut v2: Option<(PathBuf, String)> = None;
        let mut has_v1 = false;
        let mut v1: Vec<V1Hierarchy> = Vec::new();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let fields: Vec<&str> = left.split_whitespace().collect();
            let fstype = right.split_whitespace().next().unwrap_or("");
            let (Some(root), Some(mount_point)) = (fields.get(3), fields.get(4)) else {
                continue;
            };
            match fstype {
                "cgroup2" if v2.is_none() => {
                    v2 = Some((PathBuf::from(unescape(mount_point)), unescape(root)));
                }
                "cgroup" => {
                    has_v1 = true;
                    let options = right.split_whitespace().nth(2).unwrap_or("");
                    let controllers: Vec<String> = options
                        .split(',')
                        .filter(|o| V1_CONTROLLERS.contains(o))
                        .map(str::to_string)
                        .collect();
                    let mount = PathBuf::from(unescape(mount_point));
                    // A hierarchy mounted twice is used at its first mount.
                    if !controllers.is_empty() && !v1.iter().any(|h| h.controllers == controllers) {
                        let own = v1_own(proc_cgroup, &controllers, &unescape(root))
                            .map(|rel| mount.join(rel));
                        v1.push(V1Hierarchy {
                            controllers,
                            mount,
                            own,
                        });
                    }
                }
                _ => {}
            }
        }
        let layout = match (&v2, has_v1) {
            (Some(_), false) => Layout::Unified,
            (Some(_), true) => Layout::Hybrid,
            (None, true) => Layout::Legacy,
            (None, false) => Layout::None,
        };
        let own_rel = proc_cgroup
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(|s| s.trim_end_matches(" (deleted)").to_string());
        let own = match (&v2, own_rel) {
            (Some((mount, root)), Some(rel)) => {
                // A mount of a subtree (root != "/") shows cgroups relative
                // to the filesystem root; strip the mounted root.
                let rel = Path::new(&rel);
                let inside = rel.strip_prefix(root.as_str()).unwrap_or(rel);
                let inside = inside.strip_prefix("/").unwrap_or(inside);
                Some(mount.join(inside))
            }
            _ => None,
        };
        HostCgroups {
            layout,
            v2_mount: v2.map(|(m, _)| m),
            own,
            uid,
            v1,
        }
    }

    /// The v1 hierarchy holding `controller`, if one is mounted.
    pub fn v1_hierarchy(&self, controller: &str) -> Option<&V1Hierarchy> {
        self.v1
            .iter()
            .find(|h| h.controllers.iter().any(|c| c == controller))
    }

    /// Whether `dir` is the root of the cgroup2 mount.
    pub fn is_root(&self, dir: &Path) -> bool {
        self.v2_mount.as_deref() == Some(dir)
    }
}

/// This process's cgroup in the v1 hierarchy of `controllers` (from its
/// `N:cpu,cpuacct:/path` line), relative to the mounted `root`.
fn v1_own(proc_cgroup: &str, controllers: &[String], root: &str) -> Option<PathBuf> {
    proc_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        let names: Vec<&str> = names.split(',').collect();
        if !controllers.iter().all(|c| names.contains(&c.as_str())) {
            return None;
        }
        let rel = Path::new(path.trim_end_matches(" (deleted)"));
        let inside = rel.strip_prefix(root).unwrap_or(rel);
        Some(inside.strip_prefix("/").unwrap_or(inside).to_path_buf())
    })
}

/// Undo mountinfo's octal escapes (`\040` for space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 30 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
27 25 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
";
    const UNIFIED: &str = "\
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn hybrid_layout_and_own_cgroup() {
        let h = HostCgroups::from_proc(HYBRID, "4:memory:/x\n0::/\n", 0);
        assert_eq!(h.layout, Layout::Hybrid);
        assert_eq!(
            h.v2_mount.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert_eq!(h.own.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert!(h.is_root(h.own.as_deref().unwrap()));
        let m = h.v1_hierarchy("memory").expect("memory hierarchy");
        assert_eq!(m.mount, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(m.own.as_deref(), Some(Path::new("/sys/fs/cgroup/memory/x")));
        assert!(h.v1_hierarchy("pids").is_none());
    }

    #[test]
    fn comounted_v1_controllers_and_named_hierarchies() {
        let mi = "\
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
";
        let h = HostCgroups::from_proc(mi, "9:name=systemd:/\n2:cpu,cpuacct:/a/b\n", 0);
        assert_eq!(h.layout, Layout::Legacy);
        assert_eq!(h.v1.len(), 1, "name=systemd holds no controller");
        let c = h.v1_hierarchy("cpuacct").unwrap();
        assert_eq!(c.controllers, ["cpu", "cpuacct"]);
        assert_eq!(
            c.own.as_deref(),
            Some(Path::new("/sys/fs/cgroup/cpu,cpuacct/a/b"))
        );
    }

    #[test]
    fn unified_layout_nested_cgroup() {
        let h = HostCgroups::from_proc(
            UNIFIED,
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n",
            1000,
        );
        assert_eq!(h.layout, Layout::Unified);
        assert_eq!(
            h.own.as_deref(),
            Some(Path::new(
                "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope"
            ))
        );
    }

    #[test]
    fn subtree_mount_strips_root() {
        let mi = "35 24 0:30 /ci/job /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let h = HostCgroups::from_proc(mi, "0::/ci/job/runner\n", 0);
        assert_eq!(h.own.as_deref(), Some(Path::new("/sys/fs/cgroup/runner")));
    }

    #[test]
    fn no_cgroups() {
        let h = HostCgroups::from_proc("", "", 0);
        assert_eq!(h.layout, Layout::None);
        assert!(h.own.is_none());
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
