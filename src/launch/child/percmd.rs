//! A resident sandbox: hutch init serves one command after another, each
//! in a *per-command init* of its own (docs/decisions/0007, s11).
//!
//! A resident sandbox is warm (`ChildPlan::warm`) and its plan may be
//! resident (`fs::resident::blocker`). After `Ready`, hutch init, in
//! order, per claim:
//!
//!  1. clones the per-command init with fresh pid, mount, ipc and uts
//!     namespaces, and a fresh network namespace when the sandbox has one
//!     of its own (`ChildPlan::per_command_flags`), before its claim;
//!  2. waits for it, forwarding the signals it is sent to it; then says
//!     `CommandEnded`: the command's namespaces, its overlay with them,
//!     are gone (the supervisor lets the upper's lock go then), and
//!     goes back to 1.
//!
//! The per-command init, in order: the parent-death signal (hutch init);
//! `/` a slave mount; `/proc`, `/dev`, each tmpfs and mqueue mounted again
//! over the kept ones (`fs::resident::refresh`); the hostname; `lo` up in
//! its network namespace; then it waits for the claim (the command and its stdio);
//! the staged overlays mounted from a new context
//! (`fs::resident::mount_overlays`); then steps 8 to 11 of a sandbox
//! used once (`super::command_steps`): it is pid 1 of its pid namespace,
//! so its `kill(-1)` after the workload ends every process of the command,
//! and it reports `Exited` before it ends. Landlock's ruleset is built by
//! the workload itself (the overlay's inodes are new per command).
//!
//! hutch init itself keeps no seccomp filter (it clones with namespace
//! flags): nothing of a command can reach it (another pid namespace; its
//! only input is the supervisor's socket).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::stop::{Stop, built, described};
use super::syscalls::ChildSys;
use super::{Running, steps};
use crate::fs;
use crate::launch::plan::ChildPlan;
use crate::launch::wire::message::Message;
use crate::launch::wire::stage::{At, Stage};

/// hutch init of a resident sandbox, from its `Ready` on: one per-command
/// init after another, each made before its claim comes. Returns `Ok`
/// only in a per-command init (which then runs step 11,
/// `super::init_loop`); in hutch init it returns only when the supervisor
/// went away, a per-command init ended before its claim, or a step
/// failed.
pub(crate) fn serve<S: ChildSys>(
    sys: &mut S,
    plan: &mut ChildPlan,
    sock: BorrowedFd<'_>,
    layers: &[fs::resident::Layers],
) -> Result<Running, Stop> {
    // Waited for (and forwarded) between claims, never acted on.
    let blocked = steps::signal_list(plan.forwarded_signals | 1 << (libc::SIGCHLD - 1));
    sys.block_signals(&blocked).at(Stage::BlockSignals)?;
    // A per-command init writes one byte here once it has its claim: one
    // that ends without (a failure while it was made, reported to the
    // supervisor) ends the resident sandbox instead of a loop of them.
    let (claimed_r, claimed_w) = sys.claim_pipe().at(Stage::PerCommandInit)?;
    loop {
        match sys
            .clone_per_command(plan.per_command_flags)
            .at(Stage::PerCommandInit)?
        {
            None => {
                drop(claimed_r);
                return per_command(sys, plan, sock, claimed_w, layers);
            }
            Some(pid) => {
                sys.wait_per_command(pid, plan.forwarded_signals);
                if !sys.was_claimed(claimed_r.as_fd()) || !sys.supervisor_alive(sock) {
                    return Err(Stop::SupervisorGone);
                }
                sys.send(sock, &Message::CommandEnded, &[])
                    .at(Stage::PerCommandInit)?;
            }
        }
    }
}

/// The per-command init, made before its claim, up to its workload
/// running (see the module).
fn per_command<S: ChildSys>(
    sys: &mut S,
    plan: &mut ChildPlan,
    sock: BorrowedFd<'_>,
    claimed: OwnedFd,
    layers: &[fs::resident::Layers],
) -> Result<Running, Stop> {
    if !plan.detached {
        sys.set_parent_death_signal()
            .at(Stage::ParentDeathSignal)?;
    }
    // Nothing mounted here reaches hutch init's mount namespace.
    sys.mount(None, c"/", None, libc::MS_SLAVE | libc::MS_REC, None)
        .map_err(described(Stage::MountPropagation))?;
    fs::resident::refresh(sys, &plan.fs, &plan.op_names).map_err(built(Stage::PerCommandMounts))?;
    if let Some(name) = &plan.hostname {
        sys.set_hostname(name.as_bytes()).at(Stage::Hostname)?;
    }
    if plan.per_command_flags & crate::sys::CLONE_NEWNET != 0 {
        sys.loopback_up().at(Stage::Loopback)?;
    }
    let claim = sys
        .recv_claim(sock, plan.command.non_default_signals)
        .at(Stage::Claim)?
        .ok_or(Stop::SupervisorGone)?;
    sys.mark_claimed(claimed.as_fd());
    // Closed here: the command's steps close every fd they do not keep.
    drop(claimed);
    plan.command = claim.command;
    plan.report_started = claim.report_started;
    fs::resident::mount_overlays(sys, layers, &plan.op_names)
        .map_err(built(Stage::ClaimMounts))?;
    // Built by the workload: its rules name this command's inodes.
    plan.landlock_ruleset = None;
    // Pid 1 of its own pid namespace: its `kill(-1)` ends the command.
    plan.pid_namespace_init = true;
    super::command_steps(sys, plan, sock, fs::Built::default(), false)
}
