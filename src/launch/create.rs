//! A launch mode for container engines: [`create`] builds the whole
//! sandbox and leaves hutch init waiting before the workload's execve (the
//! OCI runtime's `create`); the launching process then goes away and the
//! sandbox keeps running, reparented to the engine's subreaper (its shim
//! or conmon), which waits for hutch init's exit status: the workload's
//! code, or 128+N for signal N. A connection to the hold socket (the OCI
//! `start`) releases it.
//!
//! Nothing of hutch stays the sandbox's parent. When the sandbox needs a
//! host-side process (the egress proxy, a status file's events), a keeper
//! is forked that holds the supervisor's end of the socket: a sibling of
//! the sandbox, gone when the sandbox ends (or killed by its `delete`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::Instant;

use nix::sys::signal::SigSet;
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::launch::child;
use crate::launch::error::{LaunchError, PrepareError};
use crate::launch::options::RunOptions;
use crate::launch::options::WorkloadStdio;
use crate::launch::prepare::prepare_with;
use crate::launch::supervisor::describe::failure_line;
use crate::launch::supervisor::maps::{idmapped_layers, write_id_maps, write_oom_score_adj};
use crate::launch::supervisor::{Sandbox, keep};
use crate::launch::wire::message::{self, Incoming, Message};
use crate::spec::Spec;
use crate::sys::{self, Forked, SysError};

/// How to create.
pub struct CreateOptions {
    /// Clone the sandbox into this cgroup (the engine's `cgroupsPath`,
    /// made and limited by the caller); without it the sandbox stays in
    /// the launcher's.
    pub cgroup: Option<EngineCgroup>,
    /// A listening SOCK_SEQPACKET socket; the first connection to it starts
    /// the workload.
    pub hold: OwnedFd,
    /// A connected Unix socket to hand the terminal's master to (the
    /// workload then gets a terminal as stdio).
    pub console: Option<OwnedFd>,
    /// The start event and the exit report go here (the keeper writes them).
    pub status_file: Option<PathBuf>,
}

/// A cgroup the caller made for the sandbox: its directory, an fd of it
/// for `CLONE_INTO_CGROUP` (cgroup v2), or its group in each cgroup v1
/// hierarchy, and the limits written there (for the report, whose
/// counters and `oom-killed` come from it). The caller removes it.
pub struct EngineCgroup {
    pub dir: PathBuf,
    pub fd: Option<OwnedFd>,
    /// cgroup v1: (controller, directory) per hierarchy; hutch init is
    /// started in each.
    pub v1: Vec<(&'static str, PathBuf)>,
    pub enforced: Vec<crate::cgroup::Enforced>,
}

/// A created sandbox.
#[derive(Debug)]
pub struct Created {
    /// hutch init's pid (in the launcher's pid namespace).
    pub pid: libc::pid_t,
    /// The keeper's pid, when one was needed.
    pub keeper: Option<libc::pid_t>,
}

/// A callback of [`create`], given hutch init's pid; an error ends the
/// sandbox and is the error of `create`.
pub type AtPoint<'a> = &'a mut dyn FnMut(libc::pid_t) -> Result<(), String>;

/// Create the sandbox of `spec` and return once it waits for its start.
/// `before_go` runs once the sandbox's namespaces exist and before it
/// builds its root (with hutch init's pid): an error there ends the
/// sandbox. `before_pivot`, when given, runs once the root is built and
/// shown at its host directory in the sandbox's mount namespace, before
/// hutch init enters it (`pivot_root`): a process joining that mount
/// namespace then sees the host's `/` (the OCI createContainer hooks).
/// Without it hutch init takes no extra step. The process must be
/// single-threaded; it may exit right after.
pub fn create(
    spec: &Spec,
    opts: CreateOptions,
    before_go: AtPoint<'_>,
    mut before_pivot: Option<AtPoint<'_>>,
) -> Result<Created, LaunchError> {
    let started = Instant::now();
    if spec.init == crate::spec::Init::None {
        // hutch init holds the created sandbox and confirms its start.
        return Err(crate::spec::SpecError::new(
            "init",
            "a created container's hutch init waits for `start` and confirms it; init = \"none\" is for launches only",
        )
        .into());
    }
    if spec.namespaces.pid && spec.namespaces.join.pid.is_some() {
        return Err(crate::spec::SpecError::new(
            "namespaces.join.pid",
            "a pid namespace nested in a joined one is for launches only (a created container's hutch init is cloned by this process itself); set namespaces.pid = false to join it",
        )
        .into());
    }
    let status = sys::self_status();
    if status.threads != 1 {
        return Err(LaunchError::MultiThreaded(status.threads));
    }
    let mut p = prepare_with(spec, false, WorkloadStdio::Inherit, false)?;
    p.child.command.non_default_signals = status.non_default_signals;
    p.child.report_started = opts.status_file.is_some();
    p.child.detached = true;
    p.child.forwarded_signals = crate::launch::child::steps::forward_all_signals();
    p.child.command.controlling_tty = opts.console.is_some();
    p.child.console = opts.console;
    p.child.hold = Some(opts.hold);
    p.child.pause_before_pivot = before_pivot.is_some();
    if let (Some(c), Some(leaf)) = (opts.cgroup, p.cgroup.as_mut()) {
        match c.fd {
            Some(fd) => leaf.adopt(c.dir, fd, c.enforced),
            None => leaf.adopt_v1(c.v1, c.enforced),
        }
    }
    let status_file = opts
        .status_file
        .as_deref()
        .map(crate::launch::supervisor::open_status_path)
        .transpose()?;
    let (sup_sock, child_sock) = sys::socket::seqpacket_pair()?;
    let joins = crate::launch::prepare::join::open_joins(spec)?;
    let threads = sys::thread_count();
    if threads != 1 {
        return Err(LaunchError::MultiThreaded(threads));
    }
    joins.enter()?;
    let cgroup_fd: Option<BorrowedFd<'_>> = p.cgroup.as_ref().and_then(|c| c.cgroup_fd());
    if let Some(c) = &p.cgroup {
        c.enter_for_clone()?;
    }
    // SAFETY: the process is single-threaded (checked just above).
    let forked = unsafe { sys::clone3(p.clone_flags, cgroup_fd) };
    let left = match (&forked, &p.cgroup) {
        (Ok(Forked::Child), _) | (_, None) => Ok(()),
        (_, Some(c)) => c.leave_after_clone(),
    };
    let (pid, pidfd) = match forked {
        Ok(Forked::Child) => child::sandbox_main(&mut p.child, child_sock),
        Ok(Forked::Parent { pid, pidfd }) => (pid, pidfd),
        Err(e) => return Err(LaunchError::clone_failed(e)),
    };
    if let Err(e) = left {
        let _ = sys::raw::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
        let _ = sys::raw::waitpid(pid, 0);
        return Err(e.into());
    }
    drop(child_sock);
    // The hold socket, the console and the stdio ends are the sandbox's.
    p.child.hold = None;
    p.child.console = None;
    let kill_and_reap = |e: LaunchError| {
        let _ = sys::raw::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
        let _ = sys::raw::waitpid(pid, 0);
        e
    };
    crate::launch::supervisor::maps::hold_id_range(pid, &p).map_err(kill_and_reap)?;
    write_id_maps(pid, &p).map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    write_oom_score_adj(pid, spec.limits.oom_score_adj)
        .map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    let (handed, _) = idmapped_layers(pid, &p).map_err(kill_and_reap)?;
    before_go(pid).map_err(|e| kill_and_reap(PrepareError::Hook(e).into()))?;
    let fds: Vec<BorrowedFd<'_>> = handed.iter().map(|(_, fd)| fd.as_fd()).collect();
    message::send(
        &sup_sock,
        &Message::Go {
            handed_sources: handed.iter().map(|(i, _)| *i).collect(),
        },
        &fds,
    )
    .map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    drop(fds);
    drop(handed);

    // Until the sandbox is built: its failure, its proxy doors, `Held`.
    let mut doors = None;
    loop {
        match message::recv(&sup_sock) {
            Ok(Some(Incoming::Message(Message::Held, _))) => break,
            Ok(Some(Incoming::Message(Message::RootBuilt, _))) => {
                // Only a sandbox told to pause sends it; a stray one ends
                // the sandbox rather than being answered.
                let Some(at) = before_pivot.as_mut() else {
                    return Err(kill_and_reap(PrepareError::UnaskedPause.into()));
                };
                at(pid).map_err(|e| kill_and_reap(PrepareError::Hook(e).into()))?;
                message::send(&sup_sock, &Message::Pivot, &[])
                    .map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
            }
            Ok(Some(Incoming::Message(Message::ListenerReady { doors: names }, fds))) => {
                doors = Some((names, fds));
            }
            Ok(Some(Incoming::Message(_, _))) => {}
            Ok(Some(Incoming::Failure(f, text))) => {
                let line = failure_line(&f, text.as_deref(), &p, spec);
                return Err(kill_and_reap(LaunchError::Setup {
                    stage: f.stage,
                    errno: f.errno,
                    exit_status: f.exit_status(),
                    line,
                }));
            }
            Ok(None) => {
                return Err(kill_and_reap(PrepareError::EndedWhileCreated.into()));
            }
            Err(e) => return Err(kill_and_reap(PrepareError::Message(e).into())),
        }
    }
    // No hutch process stays: the sandbox's pid 1 alone holds a private
    // id range from now on (reclaimed once it is gone).
    if let Some(a) = p.id_range.as_mut() {
        a.leave_to_sandbox();
    }
    if p.proxy.is_none() && status_file.is_none() {
        return Ok(Created { pid, keeper: None });
    }
    // The keeper: forked now, so that it is the sandbox's sibling (both
    // are reparented to the engine's subreaper when this process exits).
    // SAFETY: the process is still single-threaded (nothing since the
    // check above starts a thread; the proxy's thread starts in the keeper).
    match unsafe { sys::clone3(0, None) } {
        Ok(Forked::Child) => {
            let opts = RunOptions {
                status_file: opts.status_file.clone(),
                quiet: true,
                ..RunOptions::default()
            };
            let signals = SignalFd::with_flags(&SigSet::empty(), SfdFlags::SFD_CLOEXEC)
                .map_err(|e| SysError::new("signalfd()", e));
            let code = match signals {
                Ok(signals) => {
                    let sb = Sandbox {
                        pid,
                        pidfd,
                        sock: sup_sock,
                        signals,
                        started,
                        old_mask: SigSet::empty(),
                        command_ended: std::cell::Cell::new(false),
                    };
                    match keep(&mut p, spec, &opts, sb, status_file, doors) {
                        Ok(_) => 0,
                        Err(_) => 125,
                    }
                }
                Err(_) => 125,
            };
            sys::exit_now(code)
        }
        Ok(Forked::Parent { pid: keeper, .. }) => Ok(Created {
            pid,
            keeper: Some(keeper),
        }),
        Err(e) => Err(kill_and_reap(LaunchError::Sys(e))),
    }
}
