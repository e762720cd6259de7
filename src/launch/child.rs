//! The post-clone path: the sandbox's pid 1 ("hutch init") and the
//! workload until its execve, as one list of steps each tagged with its
//! [`Stage`]. Everything they read is the [`ChildPlan`] (prepared by the
//! supervisor before clone) and the socket; every failure is one
//! fixed-size [`Failure`] record sent to the supervisor, which turns it
//! into words.
//!
//! Fixed order in hutch init:
//!  1. PDEATHSIG(SIGKILL); close every fd but stdio, the workload's stdio,
//!     the socket and the fds the workload inherits (`Spec::inherit_fds`;
//!     close_range: nothing else the caller leaked survives to any path
//!     lookup); new session (unless `Spec::new_session` is false).
//!  2. Wait for `Go` (id maps written; detached mounts of what the
//!     supervisor prepared itself attached as fds: idmapped layers).
//!  3. `/` made a slave mount; every host source opened (with the
//!     launching user's filesystem identity).
//!  4. Switch to the sandbox's uid/gid (root launches: clear groups too);
//!     PDEATHSIG again (a credential change clears it).
//!  5. Lock nested user namespaces: `user.max_user_namespaces = 0` in the
//!     sandbox's own user namespace.
//!  6. Build the new root on a tmpfs (fs ops in order; in proxy mode the
//!     Unix door), `pivot_root`, detach the old root. A created container
//!     with OCI createContainer hooks (`ChildPlan::pause_before_pivot`)
//!     pauses before `pivot_root`: the root is shown at its host
//!     directory, `RootBuilt` reported, `Pivot` awaited (the hooks run in
//!     between, with the host's `/`); then the root is made read-only and
//!     entered.
//!  7. Hostname; `lo` up; (proxy mode) the TCP door, both doors handed
//!     over (`ListenerReady`); the capability bounding set dropped (the
//!     workload inherits it; not here when a user namespace is entered in
//!     step 8, which resets it: then the workload drops it); Landlock's
//!     ruleset made and its rules added (paths resolved inside the new
//!     root; the workload enforces it).
//!     A warm sandbox stops here: it reports `Ready`, waits for the
//!     `Claim` that brings the command and its stdio, mounts the
//!     writable overlays staged in step 6 (`fs::claim`) and adds the
//!     Landlock rules of paths inside them (their inodes exist only now).
//!  8. rlimits (RLIMIT_CORE = 0); the terminal for a console socket;
//!     `namespaces.join.user_after_setup` entered (bubblewrap's
//!     `--userns2`: nothing after this needs a capability over the
//!     sandbox's mounts), PDEATHSIG again.
//!  9. Non-dumpable; signals blocked; start the workload (vfork-style: it
//!     shares init's memory until its execve, so init waits until then);
//!     report `Started` (when a status file wants the start event).
//! 10. Close every fd but the socket and the uppers to count; the init
//!     seccomp filter (`seccomp/init.json`).
//! 11. Reap and forward signals until the workload ends; kill what is
//!     left; count changes; report `Exited`. A warm sandbox whose claim
//!     says `linger` (its report goes out on `Exited`) then waits until
//!     the supervisor closes the socket, and only then ends (its
//!     namespaces torn down off the report's path).
//!
//! With `Spec::init = none` (`ChildPlan::exec_in_place`) steps 9 to 11
//! are replaced right after non-dumpable: hutch init goes through the
//! workload's steps below itself (without a second setsid) and execs the
//! command in its place; the supervisor reads the command's status from
//! waiting on pid 1.
//!
//! The workload, in order: default signal dispositions and an empty mask,
//! `setsid` (unless `Spec::new_session` is false), stdio, close every
//! other fd (the socket stays, close-on-exec; inherited fds stay, made
//! to survive execve), the working directory (resolved inside the new root,
//! no magic links, checked reachable from the root), no-new-privs, drop
//! capabilities (the bounding set unless init did, then E/P/I, then
//! ambient), Landlock (the ruleset init built), seccomp last, `execve`
//! (each candidate resolved inside the root first).

use std::convert::Infallible;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use nix::sys::signal::{SigSet, Signal};

use super::child_sys::ChildSys;
use super::message::{self, Message};
use super::prepare::{CapPlan, ChildPlan, Exec, PROXY_DOOR_IN_ROOT};
use super::real_sys::RealSys;
use super::stage::{At, Failure, Stage};
use crate::confine::landlock::{FILE_RIGHTS, LandlockPlan};
use crate::fs::{self, BuildError};
use crate::sys::{self, Errno, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS};

/// Signals pid 1 forwards to the workload.
pub const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Resolution of every path the Spec names, after `pivot_root`: inside
/// the new root, never through a `/proc/.../fd` magic link.
const IN_ROOT: u64 = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;

/// Why hutch init stopped before the workload ran.
#[derive(Debug)]
pub(super) enum Stop {
    /// A step failed; the text (init may allocate) says more than the
    /// record when there is more to say.
    Failed(Failure, Option<String>),
    /// The supervisor went away or spoke nonsense: nothing to report to.
    SupervisorGone,
}

impl From<Failure> for Stop {
    fn from(f: Failure) -> Stop {
        Stop::Failed(f, None)
    }
}

fn described(stage: Stage) -> impl FnOnce(sys::SysError) -> Stop {
    move |e| Stop::Failed(Failure::new(stage, e.errno), Some(e.to_string()))
}

fn built(stage: Stage) -> impl FnOnce(BuildError) -> Stop {
    move |e| Stop::Failed(Failure::new(stage, e.err.errno), Some(e.to_string()))
}

/// hutch init once the workload runs.
pub(super) struct Running {
    pub workload: libc::pid_t,
    /// The private overlay uppers, to count what the workload changed.
    pub uppers: Vec<OwnedFd>,
    /// Signals forwarded to the workload (bit N-1 for signal N).
    pub forwarded: u64,
    /// pid 1 of the sandbox's own pid namespace.
    pub pid_namespace_init: bool,
    /// After `Exited`, wait until the supervisor closes the socket (a
    /// warm sandbox whose report goes out first, `Message::Claim`).
    pub linger: bool,
}

/// The sandbox's pid 1. Never returns.
pub fn sandbox_main(plan: &mut ChildPlan, sock: OwnedFd) -> ! {
    match init(&mut RealSys, plan, sock.as_fd()) {
        Ok(running) => init_loop(running, &sock),
        Err(Stop::Failed(f, text)) => {
            message::send_failure(sock.as_fd(), &f, text.as_deref());
            sys::exit_now(f.exit_status())
        }
        Err(Stop::SupervisorGone) => sys::exit_now(125),
    }
}

/// hutch init's setup, steps 1 to 10, in order.
pub(super) fn init<S: ChildSys>(
    sys: &mut S,
    plan: &mut ChildPlan,
    sock: BorrowedFd<'_>,
) -> Result<Running, Stop> {
    let stdio = &plan.command.stdio.fds;
    let mut keep = vec![sock];
    keep.extend(stdio.iter().flatten().map(|fd| fd.as_fd()));
    keep.extend(
        plan.console
            .iter()
            .chain(&plan.hold)
            .chain(&plan.userns_after_setup)
            .map(|fd| fd.as_fd()),
    );
    if !plan.detached {
        sys.set_parent_death_signal().at(Stage::ParentDeathSignal)?;
    }
    sys.close_fds_except(&keep, &plan.inherited_fds)
        .at(Stage::CloseInheritedFds)?;
    // Without a session of its own the workload stays in the caller's
    // (setsid cannot be undone, so init must not call it either).
    if plan.new_session {
        sys.new_session().at(Stage::InitSession)?;
    }
    let handed = sys.recv_go(sock).ok_or(Stop::SupervisorGone)?;
    sys.mount(None, c"/", None, libc::MS_SLAVE | libc::MS_REC, None)
        .map_err(described(Stage::MountPropagation))?;
    let sources = fs::open_sources(sys, &plan.fs).map_err(built(Stage::OpenHostSources))?;
    if plan.ids.clear_groups {
        sys.clear_groups().at(Stage::SetGroups)?;
    }
    if let Some((uid, gid)) = plan.ids.init_ids {
        sys.set_gid(gid).at(Stage::SetGid)?;
        if plan.ids.keep_caps_on_setuid() {
            sys.keep_caps_on_setuid().at(Stage::SetUid)?;
        }
        sys.set_uid(uid).at(Stage::SetUid)?;
    }
    // Changing credentials cleared the parent-death signal: set it again,
    // then make sure the supervisor did not die in between.
    if !plan.detached {
        sys.set_parent_death_signal()
            .at(Stage::ParentDeathSignalAgain)?;
    }
    if !sys.supervisor_alive(sock) {
        return Err(Stop::SupervisorGone);
    }
    // Only the sandbox's own user namespace is locked (a shared or joined
    // one is not hutch's to change).
    if plan.own_userns {
        sys.lock_user_namespaces().at(Stage::LockUserNamespaces)?;
    }
    super::steps::write_sysctls(sys, plan)?;
    let door = plan.proxy_doors.then_some(PROXY_DOOR_IN_ROOT);
    let mut built = if plan.pause_before_pivot {
        before_pivot(sys, plan, sock, sources, handed, door)?
    } else {
        fs::build(sys, &plan.fs, sources, handed, &plan.op_names, door)
            .map_err(built(Stage::BuildRoot))?
    };
    if let Some(name) = &plan.hostname {
        sys.set_hostname(name.as_bytes()).at(Stage::Hostname)?;
    }
    if plan.net_namespace {
        sys.loopback_up().at(Stage::Loopback)?;
    }
    if let Some(unix) = built.unix_door.take() {
        // The proxy's doors live in this namespace and root and are served
        // by the supervisor; they listen before the workload exists.
        let tcp = sys.tcp_door().at(Stage::ProxyDoors)?;
        let mut doors = vec!["tcp".to_string(), "unix".to_string()];
        let mut fds = vec![tcp, unix];
        if let Some(ports) = &plan.transparent_ports {
            let more = sys.transparent_sockets(ports).map_err(|e| {
                let text = crate::net::transparent_failure_hint(&e);
                Stop::Failed(Failure::new(Stage::TransparentEgress, e.errno), Some(text))
            })?;
            doors.push("resolver".into());
            doors.extend(ports.iter().map(|_| "transparent".to_string()));
            fds.extend(more);
        }
        let ready = Message::ListenerReady { doors };
        let fds: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        sys.send(sock, &ready, &fds).at(Stage::ProxyDoors)?;
    }
    // The bounding set does not depend on the command: dropped here, a
    // warm sandbox has it done before its claim. (Init's own effective
    // capabilities stay; a user namespace entered after setup resets the
    // set, so then the workload drops it, after that.)
    if plan.userns_after_setup.is_none() {
        drop_bounding_set(sys, plan)?;
        plan.bounding_set_dropped = true;
    }
    // Landlock's ruleset does not depend on the command either: its rules
    // are added here, but for paths inside an overlay mounted at a claim
    // (their inodes exist only then: added after it).
    let mut deferred_rules = Vec::new();
    if let Some(ll) = plan.confinement.landlock_plan() {
        let later = claim_dests(plan);
        let root = sys
            .openat2(None, c"/", libc::O_PATH | libc::O_DIRECTORY, 0)
            .at(Stage::LandlockRuleset)?;
        let ruleset = sys
            .landlock_ruleset(ll.handled_fs, ll.handled_net, ll.scoped)
            .at(Stage::LandlockRuleset)?;
        for (i, rule) in ll.paths.iter().enumerate() {
            if later.iter().any(|dest| inside(&rule.path, dest)) {
                deferred_rules.push(i);
            } else {
                add_landlock_path_rule(sys, ll, i, ruleset.as_fd(), root.as_fd())?;
            }
        }
        for (i, &(port, access)) in ll.ports.iter().enumerate() {
            sys.landlock_port_rule(ruleset.as_fd(), port, access)
                .map_err(|e| Failure::new(Stage::LandlockPortRule, e).at(i))?;
        }
        plan.landlock_ruleset = Some(ruleset);
    }
    let mut linger = false;
    if plan.warm {
        // Everything that does not depend on the command is done: wait for
        // the command that claims this sandbox, then mount what it brings.
        sys.send(sock, &Message::Ready, &[]).at(Stage::Claim)?;
        let claimed = sys
            .recv_claim(sock, plan.command.non_default_signals)
            .at(Stage::Claim)?
            .ok_or(Stop::SupervisorGone)?;
        plan.command = claimed.command;
        plan.report_started = claimed.report_started;
        // Only the pid namespace's own init has killed and reaped every
        // other process of the sandbox when it reports `Exited`.
        linger = claimed.linger && plan.pid_namespace_init;
        fs::claim::attach(sys, std::mem::take(&mut built.staged), &plan.op_names).map_err(|e| {
            Stop::Failed(
                Failure::new(Stage::ClaimMounts, e.err.errno),
                Some(e.to_string()),
            )
        })?;
        if let (Some(ll), Some(ruleset)) = (
            plan.confinement.landlock_plan(),
            plan.landlock_ruleset.as_ref(),
        ) && !deferred_rules.is_empty()
        {
            let root = sys
                .openat2(None, c"/", libc::O_PATH | libc::O_DIRECTORY, 0)
                .at(Stage::LandlockRuleset)?;
            for &i in &deferred_rules {
                add_landlock_path_rule(sys, ll, i, ruleset.as_fd(), root.as_fd())?;
            }
        }
    }
    for (i, (resource, value)) in plan.rlimits.iter().enumerate() {
        sys.set_rlimit(*resource, *value)
            .map_err(|e| Failure::new(Stage::Rlimits, e).at(i))?;
    }
    for (i, (resource, soft)) in plan.rlimits_soft.iter().enumerate() {
        sys.set_rlimit_soft(*resource, *soft)
            .map_err(|e| Failure::new(Stage::Rlimits, e).at(plan.rlimits.len() + i))?;
    }
    super::steps::hand_terminal(sys, plan)?;
    super::steps::enter_user_namespace_after_setup(sys, plan, sock)?;
    sys.set_dumpable(false).at(Stage::NonDumpable)?;
    if plan.exec_in_place {
        return Err(exec_in_place(sys, plan, sock, built));
    }
    let blocked = super::steps::signal_list(plan.forwarded_signals | 1 << (libc::SIGCHLD - 1));
    sys.block_signals(&blocked).at(Stage::BlockSignals)?;
    if !plan.pid_namespace_init {
        // Not pid 1: orphans of the workload come back to hutch init.
        sys.set_subreaper().at(Stage::BlockSignals)?;
    }
    // A created container waits here (its command found) for `start`; the
    // workload then reports an exec failure to whoever started it.
    let start = super::steps::hold(sys, plan, sock)?;
    let report_to = start.as_ref().map_or(sock, |c| c.as_fd());
    let workload = sys
        .start_workload(plan, report_to)
        .at(Stage::StartWorkload)?;
    if plan.report_started {
        let _ = sys.send(
            sock,
            &Message::Started {
                workload_pid: workload,
            },
            &[],
        );
    }
    if let Some(conn) = &start {
        let _ = sys.send(
            conn.as_fd(),
            &Message::Started {
                workload_pid: workload,
            },
            &[],
        );
    }
    drop(start);
    // Keep only the socket and the uppers to count; stdio relays and the
    // doors are the workload's and the supervisor's business, not init's.
    let mut keep = vec![sock];
    keep.extend(built.tmp_upper_fds.iter().map(|fd| fd.as_fd()));
    sys.close_fds_except(&keep, &[]).at(Stage::CloseInitFds)?;
    // From here on init only reaps, forwards signals, reports and counts
    // changes: a minimal filter (seccomp/init.json) the workload never had.
    sys.confine_init(&plan.confinement).at(Stage::InitSeccomp)?;
    Ok(Running {
        workload,
        uppers: built.tmp_upper_fds,
        forwarded: plan.forwarded_signals,
        pid_namespace_init: plan.pid_namespace_init,
        linger,
    })
}

/// Step 6 with a pause before `pivot_root` (`ChildPlan::pause_before_pivot`,
/// an OCI createContainer hook): the root is built, shown at its host
/// directory (`fs::expose_root`), `RootBuilt` reported; the supervisor
/// runs the hooks in this mount namespace, where `/` is still the host's
/// (so no file of the container's root is ever executed by them), and
/// answers `Pivot`. Only then is the root made read-only and entered.
fn before_pivot<S: ChildSys>(
    sys: &mut S,
    plan: &ChildPlan,
    sock: BorrowedFd<'_>,
    sources: fs::Sources,
    handed: Vec<(usize, OwnedFd)>,
    door: Option<&CStr>,
) -> Result<fs::Built, Stop> {
    let mut staged = fs::build_unpivoted(sys, &plan.fs, sources, handed, &plan.op_names, door)
        .map_err(built(Stage::BuildRoot))?;
    fs::expose_root(sys, &mut staged).map_err(built(Stage::BeforePivot))?;
    sys.send(sock, &Message::RootBuilt, &[])
        .at(Stage::BeforePivot)?;
    if !sys.recv_pivot(sock) {
        return Err(Stop::SupervisorGone);
    }
    fs::pivot(sys, &plan.fs, staged).map_err(built(Stage::BuildRoot))
}

/// `Spec::init = none` (step 9 instead of 9 to 11): hutch init becomes
/// the workload, going through the workload's own steps in this process,
/// so the command is pid 1 of the sandbox's pid namespace. Returns the
/// failure when a step or execve failed.
fn exec_in_place<S: ChildSys>(
    sys: &mut S,
    plan: &mut ChildPlan,
    sock: BorrowedFd<'_>,
    built: fs::Built,
) -> Stop {
    // The workload's close_range closes init's own fds (the uppers, the
    // sources) in this very fd table: their owners must not close them a
    // second time (the process execs or exits right after).
    std::mem::forget(built);
    // Init's session is the workload's (setsid again would fail: init
    // leads it).
    plan.new_session = false;
    Stop::Failed(workload(sys, plan, sock), None)
}

/// The workload, between clone and execve, on its own stack over init's
/// memory: it allocates nothing. Returns only when a step failed (a
/// successful execve does not return).
pub(super) fn workload<S: ChildSys>(
    sys: &mut S,
    plan: &ChildPlan,
    sock: BorrowedFd<'_>,
) -> Failure {
    match workload_steps(sys, plan, sock) {
        Ok(never) => match never {},
        Err(f) => f,
    }
}

fn workload_steps<S: ChildSys>(
    sys: &mut S,
    plan: &ChildPlan,
    sock: BorrowedFd<'_>,
) -> Result<Infallible, Failure> {
    let cmd = &plan.command;
    sys.reset_signals(cmd.non_default_signals);
    if plan.new_session {
        sys.new_session().at(Stage::WorkloadSession)?;
    }
    for (target, fd) in cmd.stdio.fds.iter().enumerate() {
        if let Some(fd) = fd {
            sys.dup2(fd.as_fd(), target as RawFd).at(Stage::Stdio)?;
        }
    }
    if cmd.controlling_tty {
        sys.set_controlling_tty().at(Stage::ControllingTerminal)?;
    }
    // The socket stays open (close-on-exec) to report an execve failure;
    // the inherited fds stay at their numbers, open across execve.
    // Landlock's ruleset (close-on-exec) stays until it is enforced.
    let keep: &[BorrowedFd<'_>] = match &plan.landlock_ruleset {
        Some(r) => &[sock, r.as_fd()],
        None => &[sock],
    };
    sys.close_fds_except(keep, &plan.inherited_fds)
        .at(Stage::CloseFds)?;
    for &fd in &plan.inherited_fds {
        sys.keep_across_exec(fd).at(Stage::CloseFds)?;
    }
    if let Some(mask) = cmd.umask {
        sys.set_umask(mask);
    }
    let root = sys
        .openat2(None, c"/", libc::O_PATH | libc::O_DIRECTORY, 0)
        .at(Stage::WorkingDirectory)?;
    enter_working_directory(sys, &cmd.cwd, root.as_fd())?;
    let nnp = plan.confinement.no_new_privs();
    if nnp {
        sys.set_no_new_privs().at(Stage::NoNewPrivs)?;
        drop_capabilities(sys, plan)?;
    }
    // Landlock, then seccomp: the very last steps before execve. Without
    // no-new-privs they need CAP_SYS_ADMIN, so they come before the
    // capabilities are dropped (the filter must then allow the drop).
    match (&plan.landlock_ruleset, plan.confinement.landlock_plan()) {
        (Some(ruleset), _) => sys
            .landlock_restrict(ruleset.as_fd())
            .at(Stage::LandlockRestrict)?,
        (None, Some(ll)) => enforce_landlock(sys, ll, root.as_fd())?,
        (None, None) => {}
    }
    if let Some(filter) = plan.confinement.workload_filter() {
        sys.seccomp(&filter.program).at(Stage::Seccomp)?;
    }
    for program in plan.confinement.raw_filters() {
        sys.seccomp(program).at(Stage::Seccomp)?;
    }
    if !nnp {
        drop_capabilities(sys, plan)?;
    }
    Err(exec(sys, &cmd.exec, root.as_fd()))
}

/// `chdir` resolved inside the new root (no `..` above it, no magic link
/// through `/proc/.../fd` to a directory outside), then checked: the
/// kernel must reach the result from the root.
fn enter_working_directory<S: ChildSys>(
    sys: &mut S,
    cwd: &CStr,
    root: BorrowedFd<'_>,
) -> Result<(), Failure> {
    let dir = sys
        .openat2(Some(root), cwd, libc::O_PATH | libc::O_DIRECTORY, IN_ROOT)
        .at(Stage::WorkingDirectory)?;
    sys.enter_dir(dir.as_fd()).at(Stage::WorkingDirectory)?;
    if !sys.cwd_inside_root().at(Stage::WorkingDirectory)? {
        return Err(Failure::new(Stage::WorkingDirectory, Errno::EXDEV));
    }
    Ok(())
}

/// Every capability not in the bounding set leaves it (up to the kernel's
/// `cap_last_cap`), then the workload becomes its own ids when it has
/// them (keeping its permitted set across), then the effective, permitted
/// and inheritable sets hold only theirs, then the ambient set (raised,
/// so they survive execve).
fn drop_capabilities<S: ChildSys>(sys: &mut S, plan: &ChildPlan) -> Result<(), Failure> {
    let caps: CapPlan = plan.caps;
    let has = |set: u64, cap: u32| cap < 64 && set & (1u64 << cap) != 0;
    if !plan.bounding_set_dropped {
        drop_bounding_set(sys, plan)?;
    }
    if let Some(w) = &plan.ids.workload_ids {
        super::steps::switch_ids(sys, w)?;
    }
    sys.set_caps(caps.effective, caps.permitted, caps.inheritable)
        .at(Stage::Capabilities)?;
    sys.clear_ambient_caps().at(Stage::AmbientCapabilities)?;
    for cap in (0..=caps.last).filter(|c| has(caps.ambient, *c)) {
        sys.raise_ambient_cap(cap)
            .map_err(|e| Failure::new(Stage::AmbientCapabilities, e).at(cap as usize))?;
    }
    Ok(())
}

/// Every capability not in the plan's bounding set leaves it (up to the
/// kernel's `cap_last_cap`).
fn drop_bounding_set<S: ChildSys>(sys: &mut S, plan: &ChildPlan) -> Result<(), Failure> {
    let caps: CapPlan = plan.caps;
    for cap in 0..=caps.last {
        if cap >= 64 || caps.bounding & (1u64 << cap) == 0 {
            sys.drop_bounding_cap(cap)
                .map_err(|e| Failure::new(Stage::BoundingSet, e).at(cap as usize))?;
        }
    }
    Ok(())
}

/// The Landlock ruleset of the plan, its paths resolved inside the new
/// root. A path that does not exist (an optional bind that was skipped)
/// gets no rule, which only denies more.
fn enforce_landlock<S: ChildSys>(
    sys: &mut S,
    plan: &LandlockPlan,
    root: BorrowedFd<'_>,
) -> Result<(), Failure> {
    let ruleset = sys
        .landlock_ruleset(plan.handled_fs, plan.handled_net, plan.scoped)
        .at(Stage::LandlockRuleset)?;
    for i in 0..plan.paths.len() {
        add_landlock_path_rule(sys, plan, i, ruleset.as_fd(), root)?;
    }
    for (i, &(port, access)) in plan.ports.iter().enumerate() {
        sys.landlock_port_rule(ruleset.as_fd(), port, access)
            .map_err(|e| Failure::new(Stage::LandlockPortRule, e).at(i))?;
    }
    sys.landlock_restrict(ruleset.as_fd())
        .at(Stage::LandlockRestrict)
}

/// Rule `i` of the plan added to `ruleset`, its path resolved inside the
/// root. A path that does not exist (an optional bind that was skipped)
/// gets no rule, which only denies more.
fn add_landlock_path_rule<S: ChildSys>(
    sys: &mut S,
    plan: &LandlockPlan,
    i: usize,
    ruleset: BorrowedFd<'_>,
    root: BorrowedFd<'_>,
) -> Result<(), Failure> {
    let rule = &plan.paths[i];
    let fd = match sys.openat2(Some(root), &rule.path, libc::O_PATH, IN_ROOT) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(Failure::new(Stage::LandlockPathRule, e).at(i)),
    };
    let access = match sys.file_type(fd.as_fd()) {
        Ok(libc::S_IFDIR) => rule.access,
        _ => rule.access & FILE_RIGHTS,
    };
    if access == 0 {
        return Ok(());
    }
    sys.landlock_path_rule(ruleset, fd.as_fd(), access)
        .map_err(|e| Failure::new(Stage::LandlockPathRule, e).at(i))
}

/// Where the overlays a warm sandbox mounts at its claim go.
fn claim_dests(plan: &ChildPlan) -> Vec<&CStr> {
    plan.fs
        .claim_overlays
        .iter()
        .filter_map(|&i| match plan.fs.steps.get(i) {
            Some(fs::plan::Step::Overlay { dest, .. }) => Some(dest.as_c_str()),
            _ => None,
        })
        .collect()
}

/// Whether `path` (absolute, a Landlock rule's) is `dest` (relative to
/// the root, a step's) or below it, by whole components.
fn inside(path: &CStr, dest: &CStr) -> bool {
    // Leading slashes (and a trailing one) are not components.
    let trim = |b: &'_ [u8]| -> usize { b.iter().position(|c| *c != b'/').unwrap_or(b.len()) };
    let p = path.to_bytes();
    let p = &p[trim(p)..];
    let d = dest.to_bytes();
    let d = &d[trim(d)..];
    let d = d.strip_suffix(b"/").unwrap_or(d);
    p.strip_prefix(d)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
}

/// Whether an execve candidate exists in the new root (hutch init, after
/// `pivot_root`; a relative candidate from its working directory, `/`).
pub(super) fn exists_in_root<S: ChildSys>(sys: &mut S, candidate: &CStr) -> bool {
    let Ok(root) = sys.openat2(None, c"/", libc::O_PATH | libc::O_DIRECTORY, 0) else {
        return false;
    };
    let absolute = candidate.to_bytes().starts_with(b"/");
    let (dir, resolve) = if absolute {
        (Some(root.as_fd()), IN_ROOT)
    } else {
        (None, RESOLVE_NO_MAGICLINKS)
    };
    sys.openat2(dir, candidate, libc::O_PATH, resolve).is_ok()
}

/// Try each execve candidate like execvp, each resolved inside the root
/// first (a relative one from the working directory); returns the failure
/// worth reporting.
fn exec<S: ChildSys>(sys: &mut S, exec: &Exec, root: BorrowedFd<'_>) -> Failure {
    let mut reported: Option<Failure> = None;
    for (i, candidate) in exec.candidates.iter().enumerate() {
        let dir = candidate.to_bytes().starts_with(b"/").then_some(root);
        let resolve = if dir.is_some() {
            IN_ROOT
        } else {
            RESOLVE_NO_MAGICLINKS
        };
        let (errno, exists) = match sys.openat2(dir, candidate, libc::O_PATH, resolve) {
            Ok(_) => {
                let errno = sys.execve(candidate, &exec.argv_ptrs, &exec.envp_ptrs);
                (errno, errno != Errno::ENOENT || sys.exists(candidate))
            }
            Err(e) => (e, false),
        };
        // ENOENT for a file that exists: its ELF or #! interpreter is what
        // is missing, a "cannot execute" rather than a "not found".
        let missing_interpreter = errno == Errno::ENOENT && exists;
        // Like execvp: a missing candidate moves on; any other error is
        // the one worth reporting.
        let keep = match &reported {
            None => true,
            Some(r) => {
                r.errno == Errno::ENOENT
                    && !r.interpreter_missing
                    && (missing_interpreter || !matches!(errno, Errno::ENOENT | Errno::ENOTDIR))
            }
        };
        if keep {
            reported = Some(Failure {
                stage: Stage::Exec,
                errno,
                index: i as u32,
                interpreter_missing: missing_interpreter,
            });
        }
    }
    reported.unwrap_or(Failure::new(Stage::Exec, Errno::ENOENT))
}

/// Step 11: reap and forward signals until the workload ends, kill what is
/// left, count the changes, report `Exited`. Never returns.
fn init_loop(running: Running, sock: &OwnedFd) -> ! {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    for s in super::steps::signal_list(running.forwarded) {
        if let Ok(sig) = Signal::try_from(s) {
            set.add(sig);
        }
    }
    let workload = running.workload;
    let mut status = None;
    while status.is_none() {
        let Ok(sig) = set.wait() else { continue };
        if sig != Signal::SIGCHLD {
            let _ = sys::raw::kill(workload, sig as libc::c_int);
            continue;
        }
        loop {
            match sys::raw::waitpid(-1, libc::WNOHANG) {
                Ok(Some((pid, st))) if pid == workload => status = Some(st),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
    // The workload is gone: nothing else in the sandbox may outlive it.
    // (Sharing a pid namespace, kill(-1) would reach beyond the sandbox:
    // what is left there is the cgroup's to end.)
    if running.pid_namespace_init {
        let _ = sys::raw::kill(-1, libc::SIGKILL);
        while let Ok(Some(_)) = sys::raw::waitpid(-1, 0) {}
    }
    let changed_paths = running
        .uppers
        .iter()
        .map(|fd| fs::count::changed_paths(fd.as_fd()))
        .collect();
    let _ = message::send(
        sock,
        &Message::Exited {
            wait_status: status.unwrap_or(0),
            changed_paths,
        },
        &[],
    );
    // The supervisor reports first and then closes the socket (or dies):
    // only then is this sandbox torn down, off the report's path. Nothing
    // of the command is left to wait for (killed and reaped above).
    if running.linger {
        while let Err(message::MessageError::Sys(e)) = message::recv(sock) {
            if e.errno != Errno::EINTR {
                break;
            }
        }
    }
    // hutch init ends as its workload did (128+N for signal N), for a
    // parent that reads its status rather than the report (an engine
    // running a created container).
    sys::exit_now(super::steps::exit_code(status.unwrap_or(0)))
}
