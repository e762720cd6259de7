//! Steps of the post-clone path that only some sandboxes take: namespaced
//! sysctls, a terminal handed to a console socket, the create/start hold
//! (hutch init), and the workload switching to its own ids. Each is one
//! hook in [`crate::launch::child`], tagged with its [`Stage`].

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::stop::Stop;
use super::syscalls::ChildSys;
use crate::launch::plan::{ChildPlan, WorkloadIds};
use crate::launch::wire::message::Message;
use crate::launch::wire::stage::{At, Failure, Stage};
use crate::sys::{RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS};

/// Resolution of every path the Spec names, after `pivot_root`: inside
/// the new root, never through a `/proc/.../fd` magic link.
pub(super) const IN_ROOT: u64 = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;

/// The sysctls of the plan, through the procfs hutch init still sees (the
/// host's mount, showing the sandbox's own namespaces' values).
pub(crate) fn write_sysctls<S: ChildSys>(sys: &mut S, plan: &ChildPlan) -> Result<(), Stop> {
    for (i, (path, value)) in plan.sysctls.iter().enumerate() {
        sys.write_sysctl(path, value)
            .map_err(|e| Failure::new(Stage::Sysctl, e).at(i))?;
    }
    Ok(())
}

/// A terminal of the new root's devpts: the master goes to the console
/// socket, the other end becomes hutch init's stdio (which the workload
/// inherits, and makes its controlling terminal).
pub(crate) fn hand_terminal<S: ChildSys>(sys: &mut S, plan: &ChildPlan) -> Result<(), Stop> {
    let Some(console) = &plan.console else {
        return Ok(());
    };
    let (master, peer) = sys.open_terminal(plan.console_size).at(Stage::Terminal)?;
    sys.send_fd(console.as_fd(), master.as_fd())
        .at(Stage::Terminal)?;
    for target in 0..3 {
        sys.dup2(peer.as_fd(), target).at(Stage::Terminal)?;
    }
    Ok(())
}

/// `namespaces.join.user_after_setup`: hutch init enters that user
/// namespace once the sandbox is built, so the workload (and, with
/// `init = "none"`, the command) starts in it; the fd is closed after.
/// Entering a namespace is a credential change: the parent-death signal
/// is set again and the supervisor checked alive.
pub(crate) fn enter_user_namespace_after_setup<S: ChildSys>(
    sys: &mut S,
    plan: &mut ChildPlan,
    sock: BorrowedFd<'_>,
) -> Result<(), Stop> {
    let Some(fd) = plan.userns_after_setup.take() else {
        return Ok(());
    };
    sys.enter_user_namespace(fd.as_fd())
        .at(Stage::UserNamespaceAfterSetup)?;
    drop(fd);
    if !plan.detached {
        sys.set_parent_death_signal()
            .at(Stage::UserNamespaceAfterSetup)?;
    }
    if !sys.supervisor_alive(sock) {
        return Err(Stop::SupervisorGone);
    }
    Ok(())
}

/// A created container: make sure its command exists in the new root,
/// report `Held`, wait for the start request. The connection it came on
/// is returned: the workload reports an exec failure there and hutch
/// init confirms the start on it.
pub(crate) fn hold<S: ChildSys>(
    sys: &mut S,
    plan: &ChildPlan,
    sock: BorrowedFd<'_>,
) -> Result<Option<OwnedFd>, Stop> {
    let Some(listener) = &plan.hold else {
        return Ok(None);
    };
    let candidates = &plan.command.exec.candidates;
    if !candidates.iter().any(|c| exists_in_root(sys, c)) {
        return Err(Failure::new(Stage::Exec, crate::sys::Errno::ENOENT).into());
    }
    sys.send(sock, &Message::Held, &[]).at(Stage::Hold)?;
    let conn = sys.accept_start(listener.as_fd()).at(Stage::Hold)?;
    Ok(Some(conn))
}

/// Whether hutch init stays dumpable from step 9 on (else it is made not
/// dumpable). Only when the caller is told its pid to join its namespaces
/// (bubblewrap's `child-pid`, `/proc/PID/ns/*` being readable only for a
/// dumpable process or with CAP_SYS_PTRACE over the host's user
/// namespace), and only where the kernel keeps every process of the
/// sandbox away from it all the same: init is in a user namespace of the
/// sandbox's own (not joined, nothing entered after setup) and holds a
/// capability the workload never will (no-new-privs: no file
/// capabilities), and the workload has no CAP_SYS_PTRACE. The kernel's
/// check for ptrace and every `/proc/1/*` file (`cap_ptrace_access_check`)
/// then refuses the workload, dumpable or not: in the same user namespace
/// the caller's capabilities must include init's permitted set. Who may
/// then read init (its memory, fds, environ) is who may read the
/// supervisor it is a copy of: the caller's uid on the host, which owns
/// the sandbox's user namespace (docs/bwrap.md).
pub(crate) fn init_stays_dumpable<S: ChildSys>(sys: &mut S, plan: &ChildPlan) -> bool {
    // CAP_SYS_PTRACE (linux/capability.h).
    const PTRACE: u64 = 1 << 19;
    let workload = plan.caps.permitted | plan.caps.effective | plan.caps.ambient;
    if !plan.init_joinable
        || !plan.own_userns
        || plan.userns_after_setup.is_some()
        || plan.exec_in_place
        || !plan.confinement.no_new_privs()
        || workload & PTRACE != 0
    {
        return false;
    }
    sys.permitted_caps()
        .is_ok_and(|init| init & !workload != 0)
}

/// The workload becomes its own uid, gid and groups, keeping its
/// permitted capabilities across (the capability sets come next).
pub(crate) fn switch_ids<S: ChildSys>(sys: &mut S, w: &WorkloadIds) -> Result<(), Failure> {
    sys.keep_caps().at(Stage::WorkloadIds)?;
    if let Some(groups) = &w.groups {
        sys.set_groups(groups).at(Stage::WorkloadIds)?;
    }
    sys.set_gid(w.gid).at(Stage::WorkloadIds)?;
    sys.set_uid(w.uid).at(Stage::WorkloadIds)
}

/// The signal numbers of a mask (bit N-1 for signal N).
pub(crate) fn signal_list(mask: u64) -> Vec<libc::c_int> {
    (1..=64).filter(|s| mask & (1u64 << (s - 1)) != 0).collect()
}

/// Every signal an engine may send a container's init that hutch init
/// forwards to the workload: all but the uncatchable ones, SIGCHLD, and
/// the synchronous faults.
pub(crate) fn forward_all_signals() -> u64 {
    let skip = [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGCHLD,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    (1..=31)
        .filter(|s| !skip.contains(s))
        .fold(0, |m, s| m | 1u64 << (s - 1))
}

/// A wait status as an exit code: the code, or 128+N for signal N.
pub(crate) fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    }
}

/// Whether an execve candidate exists in the new root (hutch init, after
/// `pivot_root`; a relative candidate from its working directory, `/`).
fn exists_in_root<S: ChildSys>(sys: &mut S, candidate: &CStr) -> bool {
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
