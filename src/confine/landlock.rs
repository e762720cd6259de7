//! Landlock: rights derived from the mount plan, network and scoping rules.
//!
//! The plan is computed in the supervisor ([`LandlockPlan::new`]); the paths
//! are resolved inside the new root and the ruleset enforced by the
//! workload after `pivot_root` (`launch::child`, through the mockable,
//! allocation-free syscall layer), because Landlock rules attach to the
//! inodes of the final mounts and do not cross overlay layers.
//! [`LandlockPlan::enforce`] does the same for the calling process, by
//! absolute paths (tests, and embedders confining a process of their own).
//! Why the ABI is hand-written rather than taken from the `landlock`
//! crate: docs/decisions/0003-landlock-abi.md.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::Serialize;

use crate::spec::{FsOp, Network, Spec};
// The test-only enforcement path (`LandlockPlan::enforce`).
#[cfg(feature = "internals")]
use crate::sys::{self, Errno, SysError};
#[cfg(feature = "internals")]
use std::os::fd::AsFd;

/// Newest Landlock ABI whose rights hutch knows and enforces.
pub const HUTCH_MAX_ABI: u32 = 7;
/// The proxy's port inside the sandbox's network namespace.
pub const PROXY_PORT: u16 = 3128;

// Filesystem rights (linux/landlock.h).
pub const EXECUTE: u64 = 1 << 0;
pub const WRITE_FILE: u64 = 1 << 1;
pub const READ_FILE: u64 = 1 << 2;
pub const READ_DIR: u64 = 1 << 3;
pub const REFER: u64 = 1 << 13;
pub const TRUNCATE: u64 = 1 << 14;
pub const IOCTL_DEV: u64 = 1 << 15;
/// The 13 rights of ABI 1 (execute .. make_sym).
const ABI1_FS: u64 = (1 << 13) - 1;
/// Rights that apply to a non-directory.
pub const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
/// Read and execute: what a read-only mount needs.
pub const READ_EXEC_RIGHTS: u64 = EXECUTE | READ_FILE | READ_DIR;
const READ_EXEC: u64 = READ_EXEC_RIGHTS;

// Network rights (ABI 4).
pub const BIND_TCP: u64 = 1 << 0;
pub const CONNECT_TCP: u64 = 1 << 1;
// Scopes (ABI 6).
pub const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
pub const SCOPE_SIGNAL: u64 = 1 << 1;

/// Every filesystem right an ABI can enforce.
pub fn fs_rights(abi: u32) -> u64 {
    let mut r = 0;
    if abi >= 1 {
        r |= ABI1_FS;
    }
    if abi >= 2 {
        r |= REFER;
    }
    if abi >= 3 {
        r |= TRUNCATE;
    }
    if abi >= 5 {
        r |= IOCTL_DEV;
    }
    r
}

/// One path rule, the path as seen inside the new root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRule {
    pub path: CString,
    pub access: u64,
}

/// The ruleset to enforce, computed before clone.
#[derive(Debug, Clone)]
pub struct LandlockPlan {
    /// ABI whose rights are enforced: min(kernel, [`HUTCH_MAX_ABI`]).
    pub abi: u32,
    pub handled_fs: u64,
    pub handled_net: u64,
    pub scoped: u64,
    pub paths: Vec<PathRule>,
    /// (port, rights) TCP rules.
    pub ports: Vec<(u16, u64)>,
}

/// What the exit report says about Landlock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LandlockReport {
    /// `security.landlock.enabled`.
    pub requested: bool,
    /// `security.landlock.min_abi` (the floor; 1 when unset and requested).
    pub min_abi: Option<u32>,
    /// The kernel's ABI (0: no Landlock).
    pub available: u32,
    /// The ABI whose rights are enforced, None when Landlock is off.
    pub enforced_abi: Option<u32>,
    /// Filesystem rights are restricted to the mount plan.
    pub filesystem: bool,
    /// `denied`, `proxy-only`, or `unrestricted` (host network or ABI < 4).
    #[serde(deserialize_with = "crate::util::static_words::word")]
    pub tcp: crate::util::static_words::Word,
    /// Scopes in force: `abstract-unix-socket`, `signal` (ABI >= 6).
    #[serde(deserialize_with = "crate::util::static_words::words")]
    pub scoped: Vec<crate::util::static_words::Word>,
}

fn path_cstring(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

impl LandlockPlan {
    /// Compute the ruleset for `spec` under kernel ABI `abi` (>= 1).
    pub fn new(spec: &Spec, kernel_abi: u32) -> LandlockPlan {
        let abi = kernel_abi.min(HUTCH_MAX_ABI);
        let all = fs_rights(abi);
        let mut paths = Vec::new();
        let mut add = |p: &Path, access: u64| {
            if let Some(path) = path_cstring(p) {
                paths.push(PathRule {
                    path,
                    access: access & all,
                });
            }
        };
        add(
            Path::new("/"),
            if spec.root_readonly { READ_EXEC } else { all },
        );
        for op in &spec.fs {
            let dest = op.dest();
            match op {
                FsOp::RoBind { .. }
                | FsOp::RoOverlay { .. }
                | FsOp::BindData {
                    writable: false, ..
                } => add(dest, READ_EXEC),
                FsOp::Bind { .. }
                | FsOp::DevBind { .. }
                | FsOp::Overlay { .. }
                | FsOp::TmpOverlay { .. }
                | FsOp::Tmpfs { .. }
                | FsOp::Dir { .. }
                | FsOp::File { .. }
                | FsOp::BindData { writable: true, .. }
                | FsOp::Mqueue { .. } => add(dest, all),
                FsOp::Proc { .. } => add(dest, READ_EXEC | WRITE_FILE | TRUNCATE),
                FsOp::Dev { .. } => {
                    add(dest, READ_EXEC | WRITE_FILE | TRUNCATE | IOCTL_DEV);
                    add(&dest.join("shm"), all);
                }
                FsOp::Mount {
                    fstype, options, ..
                } => {
                    let ro = crate::spec::mount::parse_options(fstype, options)
                        .is_ok_and(|o| o.readonly);
                    let access = match (fstype.as_str(), ro) {
                        (_, true) => READ_EXEC,
                        ("proc" | "sysfs" | "cgroup2", false) => READ_EXEC | WRITE_FILE | TRUNCATE,
                        ("devpts", false) => READ_EXEC | WRITE_FILE | TRUNCATE | IOCTL_DEV,
                        _ => all,
                    };
                    add(dest, access);
                }
                FsOp::Device { .. } => add(dest, READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV),
                // No new mount, or only makes things read-only or hidden.
                FsOp::Symlink { .. }
                | FsOp::Chmod { .. }
                | FsOp::RemountRo { .. }
                | FsOp::Mask { .. }
                | FsOp::ReadonlyPath { .. } => {}
            }
        }
        let policy = &spec.security.landlock;
        let (handled_net, ports) = if abi >= 4 && policy.network {
            match spec.network {
                Network::Host => (0, Vec::new()),
                Network::None => (BIND_TCP | CONNECT_TCP, Vec::new()),
                Network::Proxy(ref p) => {
                    let mut ports = vec![(PROXY_PORT, CONNECT_TCP)];
                    // Transparent egress: the captured ports too. Only the
                    // sandbox's own addresses are routable (lo and the
                    // synthetic range), and every listener on them on these
                    // ports is the supervisor's capture, so a connect on
                    // them reaches the policy engine or nothing.
                    if p.egress_mode == crate::spec::EgressMode::Transparent
                        && let Ok(policy) = crate::net::Policy::from_spec(p)
                    {
                        let captured = crate::net::transparent_ports(&policy);
                        ports.extend(captured.into_iter().map(|port| (port, CONNECT_TCP)));
                    }
                    (BIND_TCP | CONNECT_TCP, ports)
                }
            }
        } else {
            (0, Vec::new())
        };
        let scoped = if abi >= 6 && policy.scope {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        };
        LandlockPlan {
            abi,
            handled_fs: all,
            handled_net,
            scoped,
            paths,
            ports,
        }
    }

    /// The report entry for this plan.
    pub fn report(&self, min_abi: Option<u32>, available: u32) -> LandlockReport {
        let tcp = match (self.handled_net, self.ports.is_empty()) {
            (0, _) => "unrestricted",
            (_, true) => "denied",
            (_, false) => "proxy-only",
        };
        let mut scoped = Vec::new();
        if self.scoped & SCOPE_ABSTRACT_UNIX_SOCKET != 0 {
            scoped.push("abstract-unix-socket");
        }
        if self.scoped & SCOPE_SIGNAL != 0 {
            scoped.push("signal");
        }
        LandlockReport {
            requested: true,
            min_abi: Some(min_abi.unwrap_or(1)),
            available,
            enforced_abi: Some(self.abi),
            filesystem: true,
            tcp,
            scoped,
        }
    }

    #[cfg(feature = "internals")]
    /// Open the planned paths (inside the new root) and enforce the ruleset
    /// on the calling thread. Paths that do not exist (optional binds that
    /// were skipped) get no rule, which only denies more. Needs no-new-privs.
    pub fn enforce(&self) -> Result<(), SysError> {
        let ruleset = sys::landlock_create_ruleset(self.handled_fs, self.handled_net, self.scoped)?;
        for rule in &self.paths {
            let fd = match open_path(&rule.path) {
                Ok(fd) => fd,
                Err(e) if e.errno == Errno::ENOENT => continue,
                Err(e) => return Err(e),
            };
            let access = if is_dir(&fd) {
                rule.access
            } else {
                rule.access & FILE_RIGHTS
            };
            if access == 0 {
                continue;
            }
            sys::landlock_add_path_rule(
                ruleset.as_fd(),
                fd.as_fd(),
                access,
                &rule.path.to_string_lossy(),
            )?;
        }
        for &(port, access) in &self.ports {
            sys::landlock_add_net_rule(ruleset.as_fd(), port, access)?;
        }
        sys::landlock_restrict_self(ruleset.as_fd())
    }
}

#[cfg(feature = "internals")]
fn open_path(path: &CString) -> Result<std::os::fd::OwnedFd, SysError> {
    nix::fcntl::open(
        path.as_c_str(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| SysError::new(format!("open({:?}, O_PATH)", path.to_string_lossy()), e))
}

#[cfg(feature = "internals")]
fn is_dir(fd: &std::os::fd::OwnedFd) -> bool {
    nix::sys::stat::fstat(fd)
        .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
        .unwrap_or(false)
}
