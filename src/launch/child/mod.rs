//! The post-clone path: the sandbox's pid 1 ("hutch init") and the
//! workload until its execve, as one list of steps each tagged with its
//! [`Stage`]. Everything they read is the [`ChildPlan`] (prepared by the
//! supervisor before clone) and the socket; every failure is one
//! fixed-size [`Failure`] record sent to the supervisor, which turns it
//! into words.
//!
//! Fixed order in hutch init (after `sandbox_main` overwrote the command
//! line and environment strings inherited from the supervisor):
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

pub(crate) mod claim;
pub(crate) mod percmd;
pub(crate) mod real_sys;
pub(crate) mod steps;
mod stop;
pub(crate) mod syscalls;
pub(crate) mod workload;

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::sys::signal::{SigSet, Signal};

use crate::fs::{self};
use crate::launch::plan::{ChildPlan, PROXY_DOOR_IN_ROOT};
use crate::launch::wire::message::{self, Message};
use crate::launch::wire::rusage::TreeRusage;
use crate::launch::wire::stage::{At, Failure, Stage};
use crate::sys::{self, Errno};
use real_sys::RealSys;
pub(crate) use stop::Stop;
use stop::{built, described};
use syscalls::ChildSys;
pub(crate) use workload::workload;
use workload::{add_landlock_path_rule, drop_bounding_set};

/// hutch init once the workload runs.
pub(crate) struct Running {
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
pub(crate) fn sandbox_main(plan: &mut ChildPlan, sock: OwnedFd) -> ! {
    // Before anything of the workload's exists to read it.
    sys::blank_command_line(&plan.args_area, b"hutch\0init\0");
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
pub(crate) fn init<S: ChildSys>(
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
            .chain(&plan.mount_namespace)
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
    if let Some(ns) = plan.mount_namespace.take() {
        sys.enter_mount_namespace(ns.as_fd())
            .at(Stage::JoinMountNamespace)?;
    }
    sys.mount(None, c"/", None, libc::MS_SLAVE | libc::MS_REC, None)
        .map_err(described(Stage::MountPropagation))?;
    let sources = fs::open_sources(sys, &plan.fs).map_err(built(Stage::OpenHostSources))?;
    if plan.ids.clear_groups {
        sys.clear_groups().at(Stage::SetGroups)?;
    }
    if let Some((uid, gid)) = plan.ids.init_ids {
        match sys.set_gid(gid) {
            // A joined user namespace without that id mapped (bubblewrap's
            // `--userns` of a sandbox that kept its caller's uid): init
            // keeps the launcher's ids, as bubblewrap does, and holds every
            // capability there all the same (setns gave them).
            Err(Errno::EINVAL) if !plan.own_userns => {}
            other => {
                other.at(Stage::SetGid)?;
                if plan.ids.keep_caps_on_setuid() {
                    sys.keep_caps_on_setuid().at(Stage::SetUid)?;
                }
                sys.set_uid(uid).at(Stage::SetUid)?;
            }
        }
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
    steps::write_sysctls(sys, plan)?;
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
            doors.push("refusals".into());
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
    if let Some(ll) = plan.confinement.landlock_plan().filter(|_| !plan.resident) {
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
    if plan.warm && plan.resident {
        // One per-command init per claim from here on (`percmd`); the
        // workspace overlays are mounted by each, from the kept layers.
        sys.send(sock, &Message::Ready, &[]).at(Stage::Claim)?;
        let served = percmd::serve(sys, plan, sock, &built.resident);
        if served.is_ok() {
            // A per-command init, whose steps closed every fd it does not
            // keep (the kept layers' included): their owners must not
            // close them a second time (the process execs or exits).
            std::mem::forget(built);
        }
        return served;
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
    command_steps(sys, plan, sock, built, linger)
}

/// Steps 8 to 10 (and, with `Spec::init = none`, the workload's own): the
/// part of hutch init's setup that is the command's, in a sandbox used
/// once or in a resident sandbox's per-command init.
fn command_steps<S: ChildSys>(
    sys: &mut S,
    plan: &mut ChildPlan,
    sock: BorrowedFd<'_>,
    built: fs::Built,
    linger: bool,
) -> Result<Running, Stop> {
    for (i, (resource, value)) in plan.rlimits.iter().enumerate() {
        sys.set_rlimit(*resource, *value)
            .map_err(|e| Failure::new(Stage::Rlimits, e).at(i))?;
    }
    for (i, (resource, soft)) in plan.rlimits_soft.iter().enumerate() {
        sys.set_rlimit_soft(*resource, *soft)
            .map_err(|e| Failure::new(Stage::Rlimits, e).at(plan.rlimits.len() + i))?;
    }
    steps::hand_terminal(sys, plan)?;
    steps::enter_user_namespace_after_setup(sys, plan, sock)?;
    let dumpable = steps::init_stays_dumpable(sys, plan);
    sys.set_dumpable(dumpable).at(Stage::NonDumpable)?;
    if plan.exec_in_place {
        return Err(exec_in_place(sys, plan, sock, built));
    }
    let blocked = steps::signal_list(plan.forwarded_signals | 1 << (libc::SIGCHLD - 1));
    sys.block_signals(&blocked).at(Stage::BlockSignals)?;
    if !plan.pid_namespace_init {
        // Not pid 1: orphans of the workload come back to hutch init.
        sys.set_subreaper().at(Stage::BlockSignals)?;
    }
    // A created container waits here (its command found) for `start`; the
    // workload then reports an exec failure to whoever started it.
    let start = steps::hold(sys, plan, sock)?;
    let report_to = start.as_ref().map_or(sock, |c| c.as_fd());
    let workload = sys
        .start_workload(plan, report_to)
        .at(Stage::StartWorkload)?;
    if plan.report_started {
        let namespaces = match plan.resident {
            true => sys.own_namespaces(),
            false => Vec::new(),
        };
        let _ = sys.send(
            sock,
            &Message::Started {
                workload_pid: workload,
                namespaces,
            },
            &[],
        );
    }
    if let Some(conn) = &start {
        let _ = sys.send(
            conn.as_fd(),
            &Message::Started {
                workload_pid: workload,
                namespaces: Vec::new(),
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

/// Step 11: reap and forward signals until the workload ends, kill what is
/// left, count the changes, report `Exited`. Never returns.
fn init_loop(running: Running, sock: &OwnedFd) -> ! {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    for s in steps::signal_list(running.forwarded) {
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
            rusage: TreeRusage::of_children(),
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
    sys::exit_now(steps::exit_code(status.unwrap_or(0)))
}
