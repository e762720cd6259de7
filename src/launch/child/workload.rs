//! The workload between clone and execve: its own steps (session, stdio,
//! fds, working directory, no-new-privs, capabilities, Landlock, seccomp)
//! and the execve. It runs on its own stack over hutch init's memory, so
//! it allocates nothing.

use std::convert::Infallible;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, RawFd};

use super::steps::IN_ROOT;
use crate::sys::RESOLVE_NO_MAGICLINKS;
use super::syscalls::ChildSys;
use crate::confine::landlock::{FILE_RIGHTS, LandlockPlan};
use crate::launch::plan::{CapPlan, ChildPlan, Exec};
use crate::launch::wire::stage::{At, Failure, Stage};
use crate::sys::Errno;

/// The workload, between clone and execve, on its own stack over init's
/// memory: it allocates nothing. Returns only when a step failed (a
/// successful execve does not return).
pub(crate) fn workload<S: ChildSys>(
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
        die_with_init(sys, plan, sock)?;
    }
    // The command is looked up before the filters: a profile need not
    // allow openat2 (older engines' defaults lack it), and nothing of
    // hutch's but execve runs under the workload's filter (runc's order).
    // Without no-new-privs the lookup runs before the capability drop:
    // execve still checks the workload's own permissions.
    resolve_candidates(sys, &cmd.exec, root.as_fd());
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
    // prctl, as bubblewrap: a program may allow prctl and not seccomp(2).
    for program in plan.confinement.raw_filters() {
        sys.seccomp_prctl(program).at(Stage::Seccomp)?;
    }
    if !nnp {
        drop_capabilities(sys, plan)?;
        die_with_init(sys, plan, sock)?;
    }
    Err(exec(sys, &cmd.exec))
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
pub(super) fn drop_bounding_set<S: ChildSys>(sys: &mut S, plan: &ChildPlan) -> Result<(), Failure> {
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
pub(super) fn add_landlock_path_rule<S: ChildSys>(
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

/// The workload ends with hutch init (PDEATHSIG(SIGKILL), after its
/// credential change, which would clear it), as bubblewrap's
/// `--die-with-parent` child does: without a pid namespace of its own
/// nothing else would end it when the chain above (caller, supervisor,
/// hutch init, each with its own parent-death signal) is killed. Then the
/// supervisor must still be there (it may have died before the signal
/// was armed). Not for detached sandboxes, whose init outlives its
/// launcher on purpose, nor for a process `hutch-oci exec` adds to a
/// container (its parent is a short-lived intermediate).
fn die_with_init<S: ChildSys>(
    sys: &mut S,
    plan: &ChildPlan,
    sock: BorrowedFd<'_>,
) -> Result<(), Failure> {
    if plan.detached {
        return Ok(());
    }
    sys.set_parent_death_signal()
        .at(Stage::ParentDeathSignalAgain)?;
    if !sys.supervisor_alive(sock) {
        return Err(Failure::new(Stage::ParentDeathSignalAgain, Errno::ESRCH));
    }
    Ok(())
}

/// Each execve candidate resolved inside the root (a relative one from
/// the working directory), its outcome kept in its slot for [`exec`].
fn resolve_candidates<S: ChildSys>(sys: &mut S, exec: &Exec, root: BorrowedFd<'_>) {
    for (candidate, slot) in exec.candidates.iter().zip(&exec.resolved) {
        let dir = candidate.to_bytes().starts_with(b"/").then_some(root);
        // Inside the root, through no magic link: a directory fd the
        // caller leaked (its stdin, say) never names the program (the runc
        // CVE-2024-21626 class; tests/run_hostile_caller.rs). The one magic
        // link followed is this process's own program, which bubblewrap's
        // callers run as `/proc/self/exe` (it is hutch's read-only copy).
        let resolve = if candidate.to_bytes() == b"/proc/self/exe" {
            0
        } else if dir.is_some() {
            IN_ROOT
        } else {
            RESOLVE_NO_MAGICLINKS
        };
        slot.set(sys.openat2(dir, candidate, libc::O_PATH, resolve).err());
    }
}

/// Try each execve candidate like execvp, those that resolved inside the
/// root ([`resolve_candidates`]); returns the failure worth reporting.
/// Only execve runs here: the workload's seccomp filter is loaded.
fn exec<S: ChildSys>(sys: &mut S, exec: &Exec) -> Failure {
    let mut reported: Option<Failure> = None;
    for (i, (candidate, slot)) in exec.candidates.iter().zip(&exec.resolved).enumerate() {
        let (errno, exists) = match slot.get() {
            None => (
                sys.execve(candidate, &exec.argv_ptrs, &exec.envp_ptrs),
                true,
            ),
            Some(e) => (e, false),
        };
        // ENOENT for a file that resolved: its ELF or #! interpreter is
        // what is missing, a "cannot execute" rather than a "not found".
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
