//! The child plan: the only data the post-clone code (hutch init and the
//! workload until its execve) reads.

use std::ffi::CString;
use std::os::fd::{OwnedFd, RawFd};

use super::command::CommandPlan;
use super::ids::Ids;

/// Where the egress proxy's Unix door is made, inside the new root.
pub(crate) const PROXY_DOOR_IN_ROOT: &std::ffi::CStr = c"run/hutch/proxy.sock";

/// The workload's capability sets, as numbers the child can use (bit N
/// for capability N).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CapPlan {
    pub bounding: u64,
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub ambient: u64,
    /// The kernel's highest capability number, read before clone.
    pub last: u32,
}

impl CapPlan {
    /// The same capabilities in every set (`security.cap_add`).
    #[cfg(test)]
    pub(crate) fn keeping(keep: u64, last: u32) -> CapPlan {
        CapPlan {
            bounding: keep,
            effective: keep,
            permitted: keep,
            inheritable: keep,
            ambient: keep,
            last,
        }
    }
}

/// Everything the post-clone code (hutch init and the workload until its
/// execve) reads. Nothing else is reachable from there: the child gets a
/// shared reference to this and its socket, and the workload, which shares
/// init's memory, allocates nothing.
pub(crate) struct ChildPlan {
    /// The launching process's argv and environ strings, which the
    /// sandbox's pid 1 (a fork of it) blanks first thing: the workload
    /// reads `/proc/1/cmdline`, and must not find hutch's command line
    /// (host paths, `--setenv` values) there.
    pub args_area: crate::sys::ArgsArea,
    pub ids: Ids,
    pub fs: crate::fs::Plan,
    /// `fs[3] (ro-bind /usr)`, for build errors (init may allocate).
    pub op_names: Vec<String>,
    pub hostname: Option<String>,
    pub net_namespace: bool,
    /// Network mode `proxy`: make the egress proxy's doors (the TCP one in
    /// the network namespace, the Unix one in the root) and hand them over.
    pub proxy_doors: bool,
    /// `transparent` egress: also the route, the resolver and one capture
    /// listener per port (these), made in the network namespace.
    pub transparent_ports: Option<Vec<u16>>,
    pub rlimits: Vec<(libc::c_int, u64)>,
    pub caps: CapPlan,
    /// seccomp BPF compiled, Landlock ABI probed and rules computed.
    pub confinement: crate::confine::Confinement,
    /// Whether pid 1 reports `Started` (only a status file's start event
    /// needs it; otherwise it would be one more wake-up per spawn).
    pub report_started: bool,
    /// A warm sandbox: after the root, hostname, loopback and doors, hutch
    /// init reports `Ready` and waits for the `Claim` that brings the
    /// command (`launch::prepare::claim`).
    pub warm: bool,
    /// A warm sandbox that serves one command after another, each in a
    /// per-command init of its own (`launch::child::percmd`).
    pub resident: bool,
    /// The namespaces each per-command init gets fresh (CLONE_NEW*).
    pub per_command_flags: u64,
    pub command: CommandPlan,
    /// The sandbox outlives the process that launched it (a created
    /// container): no parent-death signal.
    pub detached: bool,
    /// The sandbox has a user namespace of its own.
    pub own_userns: bool,
    /// hutch init is pid 1 of a pid namespace of its own (else it only
    /// reaps what it started and leaves the rest alone).
    pub pid_namespace_init: bool,
    /// `/proc/sys/...` paths and values, written in the sandbox's
    /// namespaces before the root is built.
    pub sysctls: Vec<(CString, Vec<u8>)>,
    /// (resource, soft value) lowered after `rlimits` are set.
    pub rlimits_soft: Vec<(libc::c_int, u64)>,
    /// Signals pid 1 blocks and forwards to the workload (bit N-1 for
    /// signal N).
    pub forwarded_signals: u64,
    /// A connected Unix socket: open a terminal in the new root, send its
    /// master here (SCM_RIGHTS), and give its other end to the workload
    /// as stdio and controlling terminal.
    pub console: Option<OwnedFd>,
    /// The terminal's size (columns, rows), set before the workload
    /// starts (`hutch run --pty`); else the kernel's 0x0.
    pub console_size: Option<(u16, u16)>,
    /// `namespaces.join.user_after_setup`, opened: hutch init enters it
    /// right before the workload starts.
    pub userns_after_setup: Option<OwnedFd>,
    /// `namespaces.join.mount`, opened (and checked not to be the
    /// launcher's nor pid 1's): hutch init enters it before anything
    /// mounts, instead of the mount namespace clone would have made.
    pub mount_namespace: Option<OwnedFd>,
    /// A listening SOCK_SEQPACKET socket: once the sandbox is built, report
    /// `Held` and wait for a connection (the start request) before
    /// starting the workload.
    pub hold: Option<OwnedFd>,
    /// Fds of the supervisor the workload keeps at their numbers across
    /// execve (`Spec::inherit_fds`, `inherit_open_fds`, resolved before
    /// clone); sorted, each 3 or above.
    pub inherited_fds: Vec<RawFd>,
    /// `Spec::new_session`: hutch init and the workload call setsid.
    pub new_session: bool,
    /// `Spec::init = none`: once the sandbox is built, hutch init runs the
    /// workload's steps itself and execs the command in its place (pid 1
    /// of the sandbox's pid namespace); nothing of init runs after that.
    pub exec_in_place: bool,
    /// A created container with createContainer hooks (set by
    /// `launch::create` only): once the root is built and before
    /// `pivot_root`, hutch init shows the root at its host directory,
    /// reports `RootBuilt` and waits for `Pivot` while the supervisor runs
    /// the hooks in this mount namespace, where `/` is still the host's.
    pub pause_before_pivot: bool,
    /// Set by hutch init once it has dropped the capability bounding set
    /// (step 7): the workload, which inherits it, does not again.
    pub bounding_set_dropped: bool,
    /// The caller is told hutch init's pid to join its namespaces
    /// ([`crate::launch::StatusProtocol::tells_init_pid`]): init stays
    /// dumpable when the workload cannot reach it anyway
    /// (`child::steps::init_stays_dumpable`).
    pub init_joinable: bool,
    /// Landlock's ruleset, its rules added by hutch init (step 7, and
    /// after a claim those under the overlays it mounts): the workload
    /// only enforces it.
    pub landlock_ruleset: Option<OwnedFd>,
}

/// Signals pid 1 forwards to the workload.
pub(crate) const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The default set of forwarded signals as a mask.
pub(crate) fn signal_mask(signals: &[libc::c_int]) -> u64 {
    signals.iter().fold(0, |m, s| m | 1u64 << (s - 1))
}

impl ChildPlan {
    /// The sandbox's own RLIMIT_NPROC (the pids fallback or an explicit
    /// `nproc`), for what a process-limit failure says.
    pub(crate) fn nproc_cap(&self) -> Option<u64> {
        let nproc = libc::RLIMIT_NPROC as libc::c_int;
        self.rlimits
            .iter()
            .chain(&self.rlimits_soft)
            .filter(|(r, _)| *r == nproc)
            .map(|(_, v)| *v)
            .min()
    }
}
