//! Landlock: rights derived from the mount plan, network and scoping rules.
//!
//! The plan is computed in the supervisor ([`LandlockPlan::new`]); the paths
//! are opened and the ruleset enforced in the workload after `pivot_root`
//! ([`LandlockPlan::enforce`]), because Landlock rules attach to the inodes
//! of the final mounts and do not cross overlay layers.
//!
//! The ABI (rights, structures, syscalls) comes from the `landlock` crate,
//! which is maintained with the kernel feature
//! (docs/decisions/0003-landlock-crate.md). hutch keeps its own decision of
//! *what* to handle: every right of min(kernel ABI, [`HUTCH_MAX_ABI`]),
//! computed before clone and reported as such; the crate runs in
//! `HardRequirement` mode, so it never drops a right silently.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope,
};
use serde::Serialize;

use crate::spec::{FsOp, Network, Spec};
use crate::sys::{Errno, SysError};

/// Newest Landlock ABI whose rights hutch knows and enforces.
pub const HUTCH_MAX_ABI: u32 = 7;
/// The proxy's port inside the sandbox's network namespace.
pub const PROXY_PORT: u16 = 3128;

// Filesystem rights (linux/landlock.h), as the crate defines them.
pub const EXECUTE: u64 = AccessFs::Execute as u64;
pub const WRITE_FILE: u64 = AccessFs::WriteFile as u64;
pub const READ_FILE: u64 = AccessFs::ReadFile as u64;
pub const READ_DIR: u64 = AccessFs::ReadDir as u64;
pub const REFER: u64 = AccessFs::Refer as u64;
pub const TRUNCATE: u64 = AccessFs::Truncate as u64;
pub const IOCTL_DEV: u64 = AccessFs::IoctlDev as u64;
/// Rights that apply to a non-directory.
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
/// Read and execute: what a read-only mount needs.
pub const READ_EXEC_RIGHTS: u64 = EXECUTE | READ_FILE | READ_DIR;
const READ_EXEC: u64 = READ_EXEC_RIGHTS;

// Network rights (ABI 4).
pub const BIND_TCP: u64 = AccessNet::BindTcp as u64;
pub const CONNECT_TCP: u64 = AccessNet::ConnectTcp as u64;
// Scopes (ABI 6).
pub const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = Scope::AbstractUnixSocket as u64;
pub const SCOPE_SIGNAL: u64 = Scope::Signal as u64;

/// The crate's name for ABI `abi` (at most [`HUTCH_MAX_ABI`]).
fn abi(abi: u32) -> ABI {
    match abi {
        0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

/// Every filesystem right an ABI can enforce.
pub fn fs_rights(abi_version: u32) -> u64 {
    AccessFs::from_all(abi(abi_version.min(HUTCH_MAX_ABI))).bits()
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    pub tcp: &'static str,
    /// Scopes in force: `abstract-unix-socket`, `signal` (ABI >= 6).
    pub scoped: Vec<&'static str>,
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
                FsOp::RoBind { .. } | FsOp::RoOverlay { .. } | FsOp::BindData { .. } => {
                    add(dest, READ_EXEC)
                }
                FsOp::Bind { .. }
                | FsOp::DevBind { .. }
                | FsOp::Overlay { .. }
                | FsOp::TmpOverlay { .. }
                | FsOp::Tmpfs { .. }
                | FsOp::Dir { .. }
                | FsOp::File { .. }
                | FsOp::Mqueue { .. } => add(dest, all),
                FsOp::Proc { .. } => add(dest, READ_EXEC | WRITE_FILE | TRUNCATE),
                FsOp::Dev { .. } => {
                    add(dest, READ_EXEC | WRITE_FILE | TRUNCATE | IOCTL_DEV);
                    add(&dest.join("shm"), all);
                }
                // No new mount, or only makes things read-only.
                FsOp::Symlink { .. } | FsOp::Chmod { .. } | FsOp::RemountRo { .. } => {}
            }
        }
        let (handled_net, ports) = if abi >= 4 {
            match spec.network {
                Network::Host => (0, Vec::new()),
                Network::None => (BIND_TCP | CONNECT_TCP, Vec::new()),
                Network::Proxy(_) => (BIND_TCP | CONNECT_TCP, vec![(PROXY_PORT, CONNECT_TCP)]),
            }
        } else {
            (0, Vec::new())
        };
        let scoped = if abi >= 6 {
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

    /// Open the planned paths (inside the new root) and enforce the ruleset
    /// on the calling thread. Paths that do not exist (optional binds that
    /// were skipped) get no rule, which only denies more. Needs
    /// no-new-privs (set by the caller; the crate does not set it again).
    /// Allocates nothing unless it fails: the paths are C strings of the
    /// plan and the fds are opened here.
    pub fn enforce(&self) -> Result<(), SysError> {
        let sets = || {
            format!(
                "landlock_create_ruleset(fs={:#x}, net={:#x}, scoped={:#x})",
                self.handled_fs, self.handled_net, self.scoped
            )
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(bits!(AccessFs, self.handled_fs, sets)?)
            .map_err(|e| failed(&sets(), e))?;
        if self.handled_net != 0 {
            ruleset = ruleset
                .handle_access(bits!(AccessNet, self.handled_net, sets)?)
                .map_err(|e| failed(&sets(), e))?;
        }
        if self.scoped != 0 {
            ruleset = ruleset
                .scope(bits!(Scope, self.scoped, sets)?)
                .map_err(|e| failed(&sets(), e))?;
        }
        let mut created = ruleset
            .create()
            .map_err(|e| failed(&sets(), e))?
            .no_new_privs(false);
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
            let call = || {
                format!(
                    "landlock_add_rule(PATH_BENEATH, {:?}, access={access:#x})",
                    rule.path.to_string_lossy()
                )
            };
            created = created
                .add_rule(PathBeneath::new(fd, bits!(AccessFs, access, call)?))
                .map_err(|e| failed(&call(), e))?;
        }
        for &(port, access) in &self.ports {
            let call = || format!("landlock_add_rule(NET_PORT, {port}, access={access:#x})");
            created = created
                .add_rule(NetPort::new(port, bits!(AccessNet, access, call)?))
                .map_err(|e| failed(&call(), e))?;
        }
        let status = created
            .restrict_self()
            .map_err(|e| failed("landlock_restrict_self(0)", e))?;
        // HardRequirement refuses what it cannot enforce; a status short of
        // full enforcement would still be a silent downgrade: fail closed.
        if status.ruleset != RulesetStatus::FullyEnforced {
            return Err(SysError::new(
                "landlock_restrict_self(0) => not fully enforced",
                Errno::EOPNOTSUPP,
            ));
        }
        Ok(())
    }
}

/// `mask` as the crate's flags of type `$t`; a bit it does not know is
/// hutch's bug, refused as EINVAL by the call `$call` names.
macro_rules! bits {
    ($t:ty, $mask:expr, $call:expr) => {
        BitFlags::<$t>::from_bits($mask).map_err(|_| SysError::new($call(), Errno::EINVAL))
    };
}
use bits;

/// A crate error as the syscall error it wraps.
fn failed(call: &str, e: RulesetError) -> SysError {
    SysError::new(call, Errno::from_raw(*landlock::Errno::from(e)))
}

fn open_path(path: &CString) -> Result<OwnedFd, SysError> {
    nix::fcntl::open(
        path.as_c_str(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| SysError::new(format!("open({:?}, O_PATH)", path.to_string_lossy()), e))
}

fn is_dir(fd: &OwnedFd) -> bool {
    nix::sys::stat::fstat(fd.as_fd())
        .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
        .unwrap_or(false)
}
