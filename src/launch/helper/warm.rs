//! The supervisor of a warm sandbox: the same prepare, clone, id maps, poll
//! loop and report as a cold launch ([`crate::launch::supervisor`]), with a pause.
//!
//! [`warm_up`] prepares the sandbox from the Spec's shape
//! ([`crate::launch::prepare::claim::shape`]), forks it and lets hutch init build
//! everything that does not depend on the command, up to `Ready`; the
//! egress proxy's doors are made then, and served from the claim on.
//! [`Warm::wait_claim`] waits for the command; [`Warm::claim`] checks
//! that it is of the sandbox's shape, prepares the command part exactly as
//! a cold launch does (the workload's stdio become this process's own
//! 0/1/2 first, so the relay and the notices go to the claimer), sends it
//! to hutch init and supervises to the report, which says `warm: true`.
//! One warm sandbox serves one command: the helper exits after it. The
//! build runs in the background where its priority can be given back at
//! the claim ([`background`](super::background)).

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::background::Background;
use crate::launch::error::{LaunchError, PrepareError};
use crate::launch::prepare::claim::{self, ClaimCommand};
use crate::launch::prepare::{LaunchPlan, prepare_command, prepare_sandbox};
use crate::launch::supervisor::describe::failure_line;
use crate::launch::supervisor::summary::namespace_inodes;
use crate::launch::supervisor::{
    self, ClaimRequest, Control, ControlRequest, Finished, Sandbox, Supervising, fork_sandbox, go,
    open_status_file,
};
use crate::launch::wire::command::WireCommand;
use crate::launch::wire::message::{self, Incoming, Message};
use crate::spec::Spec;
use crate::sys::{self, Errno, SysError};

/// hutch init of a sandbox whose report went out when its workload
/// exited (every other process of its pid namespace killed and reaped),
/// before init itself ended: reap it once the report is sent.
/// Dropping it closes the supervisor's last copy of init's socket, which
/// lets init end; [`Lingering::reap`] then waits for it.
#[must_use = "a lingering hutch init must be reaped"]
pub(crate) struct Lingering {
    pid: libc::pid_t,
    sock: OwnedFd,
    /// The locks on the host uppers (the claimer's, and this helper's on
    /// each upper directory): let go only once init, and with it every
    /// overlay of its mount namespace, is gone.
    upper_locks: Vec<OwnedFd>,
    /// The sandbox's cgroup leaf, its counters already in the report:
    /// removed once init, its last process, is reaped.
    cgroup: Option<crate::cgroup::Leaf>,
}

/// The claimer's stdio (this process's 0/1/2 since the claim) replaced by
/// `/dev/null`: a claimer reading its pipes to their end is not kept
/// waiting for what this process does next.
pub(crate) fn let_go_of_the_claimers_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for target in 0..3 {
            let _ = sys::dup2(null.as_fd(), target);
        }
    }
}

impl Lingering {
    /// Let hutch init end and wait for it (its namespaces torn down).
    /// The claimer's stdio are let go first.
    pub(crate) fn reap(self) {
        let_go_of_the_claimers_stdio();
        drop(self.sock);
        let _ = sys::raw::waitpid(self.pid, 0);
        // Init's exit tore its mount namespace down (the overlays' sync
        // included) before it could be reaped: the uppers are free.
        drop(self.upper_locks);
        // Empty now: remove the leaf (what the report named). A removal
        // that fails has nobody to tell any more (the claimer has its
        // report); a v1 leaf left so is unlocked and swept by the next
        // launch, as one of a killed supervisor is.
        if let Some(leaf) = self.cgroup {
            let _ = leaf.remove();
        }
    }
}

/// Why a warm sandbox ends without serving a command.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WarmError {
    /// Its owner went away, or asked it to end.
    #[error("the owner of the warm sandbox went away")]
    Gone,
    #[error(transparent)]
    Launch(#[from] LaunchError),
}

/// What came to a waiting warm sandbox.
pub(crate) enum Next {
    Claim(Box<ClaimRequest>),
    /// A resident sandbox's claimer let it go (`ToHelper::Release`).
    Released,
}

/// A sandbox ready for its command.
pub(crate) struct Warm {
    p: LaunchPlan,
    shape: Spec,
    digest: String,
    sb: Sandbox,
    layers_without_idmap: Vec<PathBuf>,
    namespaces: serde_json::Map<String, serde_json::Value>,
    /// The egress proxy's doors, served from the claim on.
    doors: Option<(Vec<String>, Vec<OwnedFd>)>,
    /// The build's priority, given back at the claim.
    background: Background,
    /// A resident sandbox: the last claim's upper locks, until its
    /// command's own init is reaped.
    ending_locks: Vec<OwnedFd>,
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.sb.restore_mask();
    }
}

/// What a poll of a warm sandbox's fds saw first.
enum Event {
    Init,
    Socket,
    Control,
    Owner,
}

/// Wait for the first of hutch init's exit, its socket, the control
/// channel, the owner's lifeline or a signal to this process.
fn wait(sb: &Sandbox, control: &dyn Control) -> Result<Event, LaunchError> {
    if control.buffered() {
        return Ok(Event::Control);
    }
    loop {
        let mut fds = vec![
            PollFd::new(sb.pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(sb.sock.as_fd(), PollFlags::POLLIN),
            PollFd::new(control.fd(), PollFlags::POLLIN),
            PollFd::new(sb.signals.as_fd(), PollFlags::POLLIN),
        ];
        if let Some(l) = control.lifeline() {
            fds.push(PollFd::new(l, PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(LaunchError::Sys(SysError::new("poll()", e))),
        }
        let ready = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        // A signal to an unclaimed sandbox's supervisor, or its owner's
        // end: there is nobody to serve.
        if ready(3) || ready(4) {
            return Ok(Event::Owner);
        }
        if ready(2) {
            return Ok(Event::Control);
        }
        if ready(1) {
            return Ok(Event::Socket);
        }
        if ready(0) {
            return Ok(Event::Init);
        }
    }
}

/// Prepare and fork a sandbox of `spec`'s shape and wait until hutch init
/// reports `Ready`. A claim that arrives meanwhile is returned with it.
/// This process must be single-threaded (it forks the sandbox).
pub(crate) fn warm_up(
    spec: &Spec,
    gives_back: bool,
    control: &mut dyn Control,
) -> Result<(Warm, Option<Box<ClaimRequest>>), WarmError> {
    let status = sys::self_status();
    if status.threads != 1 {
        return Err(LaunchError::MultiThreaded(status.threads).into());
    }
    crate::launch::prepare::validate::validate(spec).map_err(LaunchError::Spec)?;
    claim::warmable(spec).map_err(LaunchError::Spec)?;
    let shape = claim::shape(spec);
    let digest = claim::shape_digest(spec);
    // From here on (hutch init included) the build yields the CPU to the
    // commands running now.
    let background = Background::enter();
    let mut p = prepare_sandbox(&shape, None, true, true, gives_back)?;
    p.child.command.non_default_signals = status.non_default_signals;
    let sb = fork_sandbox(&mut p, &shape, Instant::now())?;
    let namespaces = namespace_inodes(sb.pid);
    let layers_without_idmap = match go(&p, &shape, &sb) {
        Ok(l) => l,
        Err(e) => {
            sb.restore_mask();
            return Err(e.into());
        }
    };
    let mut warm = Warm {
        p,
        shape,
        digest,
        sb,
        layers_without_idmap,
        namespaces,
        doors: None,
        background,
        ending_locks: Vec::new(),
    };
    let mut pending = None;
    let mut failure: Option<String> = None;
    loop {
        match wait(&warm.sb, control)? {
            Event::Socket => match message::recv(&warm.sb.sock) {
                Ok(Some(Incoming::Message(Message::Ready, _))) if failure.is_none() => break,
                Ok(Some(Incoming::Message(Message::ListenerReady { doors }, fds)))
                    if warm.p.proxy.is_some() && warm.doors.is_none() =>
                {
                    warm.doors = Some((doors, fds));
                }
                Ok(Some(Incoming::Failure(f, text))) => {
                    failure.get_or_insert_with(|| {
                        failure_line(&f, text.as_deref(), &warm.p, &warm.shape)
                    });
                }
                Ok(Some(Incoming::Message(..))) => {
                    failure.get_or_insert("the sandbox sent an unexpected message".into());
                    warm.sb.kill(&warm.p);
                }
                Ok(None) => return Err(warm.ended_early(ended(failure))),
                Err(e) => {
                    failure.get_or_insert(e.to_string());
                    warm.sb.kill(&warm.p);
                }
            },
            Event::Init => return Err(warm.ended_early(ended(failure))),
            Event::Control => match control.read() {
                ControlRequest::Claim(c) if pending.is_none() => {
                    // A command waits for the rest of the build.
                    if let Err(e) = warm.background.leave(warm.sb.pid) {
                        warm.sb.kill(&warm.p);
                        let _ = sys::raw::waitpid(warm.sb.pid, 0);
                        return Err(LaunchError::Sys(e).into());
                    }
                    pending = Some(c);
                }
                ControlRequest::None | ControlRequest::Signal(_) | ControlRequest::Release => {}
                _ => return Err(warm.end()),
            },
            Event::Owner => return Err(warm.end()),
        }
    }
    Ok((warm, pending))
}

impl Warm {
    /// The sandbox's id (its cgroup leaf's name).
    pub(crate) fn sandbox_id(&self) -> &str {
        &self.p.sandbox_id
    }

    /// A resident sandbox after its report: wait for hutch init's
    /// `CommandEnded` (the command's own init reaped, its overlay gone),
    /// then let the upper locks go. False when hutch init ended instead,
    /// or said something else.
    pub(crate) fn end_command(&mut self) -> bool {
        while !self.sb.command_ended.get() {
            match sys::raw::poll_one(self.sb.sock.as_fd(), libc::POLLIN, -1) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(_) => return false,
            }
            match message::recv(&self.sb.sock) {
                Ok(Some(Incoming::Message(Message::CommandEnded, _))) => {
                    self.sb.command_ended.set(true)
                }
                _ => return false,
            }
        }
        self.ending_locks.clear();
        true
    }

    /// A resident sandbox ready for its next claim: its last command's
    /// own init is reaped and hutch init is alive.
    pub(crate) fn serves_again(&self) -> bool {
        self.p.child.resident
            && matches!(
                sys::raw::poll_one(self.sb.pidfd.as_fd(), libc::POLLIN, 0),
                Ok(0)
            )
    }

    /// Kill and reap the sandbox (its owner went away): nothing to report.
    fn end(self) -> WarmError {
        self.sb.kill(&self.p);
        let _ = sys::raw::waitpid(self.sb.pid, 0);
        WarmError::Gone
    }

    /// hutch init ended before it was ready.
    fn ended_early(self, why: PrepareError) -> WarmError {
        self.sb.kill(&self.p);
        let _ = sys::raw::waitpid(self.sb.pid, 0);
        WarmError::Launch(LaunchError::Prepare(why))
    }

    /// Wait for the command that claims this sandbox.
    pub(crate) fn wait_claim(
        self,
        control: &mut dyn Control,
    ) -> Result<(Warm, Box<ClaimRequest>), WarmError> {
        let mut warm = self;
        loop {
            match warm.wait_next(control)? {
                (w, Next::Claim(c)) => return Ok((w, c)),
                (w, Next::Released) => warm = w,
            }
        }
    }

    /// Wait for the next claim, or (a resident sandbox after a command)
    /// for its claimer to let it go.
    pub(crate) fn wait_next(self, control: &mut dyn Control) -> Result<(Warm, Next), WarmError> {
        loop {
            match wait(&self.sb, control)? {
                Event::Control => match control.read() {
                    ControlRequest::Claim(c) => return Ok((self, Next::Claim(c))),
                    ControlRequest::Release => return Ok((self, Next::Released)),
                    ControlRequest::None | ControlRequest::Signal(_) => {}
                    _ => return Err(self.end()),
                },
                // Nothing is expected from an idle sandbox: it ended.
                Event::Socket | Event::Init => {
                    return Err(self.ended_early(PrepareError::WarmEndedWaiting));
                }
                Event::Owner => return Err(self.end()),
            }
        }
    }

    /// Serve the claim: the command part prepared as for a cold launch,
    /// sent to hutch init, then the poll loop and the report.
    /// The report may go out before hutch init is reaped (see
    /// [`Supervising::report_on_exit`]): then the [`Lingering`] init is
    /// returned too, to reap once the report is sent.
    pub(crate) fn claim(
        &mut self,
        req: Box<ClaimRequest>,
        control: &mut dyn Control,
    ) -> (Result<Finished, LaunchError>, Option<Lingering>) {
        let refuse = |w: &Warm, e: LaunchError| {
            w.sb.kill(&w.p);
            let _ = sys::raw::waitpid(w.sb.pid, 0);
            (Err(e), None)
        };
        let ClaimRequest {
            shape,
            command,
            options,
            stdio,
            upper_lock,
        } = *req;
        if shape != self.digest {
            // Never run a command in a sandbox built for another shape.
            return refuse(self, PrepareError::OtherShape.into());
        }
        // The command's part, its workload and the proxy's threads at the
        // caller's priority, never the build's.
        if let Err(e) = self.background.leave(self.sb.pid) {
            return refuse(self, LaunchError::Sys(e));
        }
        let spec = command.apply(&self.shape);
        if let Err(e) = crate::launch::prepare::validate::validate_claimed(&spec, &command) {
            return refuse(self, e.into());
        }
        if spec.command.is_empty() {
            return refuse(
                self,
                LaunchError::Spec(crate::spec::SpecError::new("command", "no command to run")),
            );
        }
        // Every sandbox of this shape names the same host uppers: wait for
        // the one of them whose overlay is still mounted, if any
        // (`launch::uppers`). Kept until init is reaped.
        let mut upper_locks = match crate::launch::supervisor::uppers::lock_host_uppers(&spec) {
            Ok(l) => l,
            Err(e) => return refuse(self, e.into()),
        };
        upper_locks.extend(upper_lock);
        self.sb.started = Instant::now();
        // The claimer's stdio become this supervisor's own: the relay, the
        // notices and the workload's inherited stdio then go to the
        // claimer, exactly as a cold launch's go to its caller.
        for (target, fd) in stdio.iter().enumerate() {
            if let Err(e) = sys::dup2(fd.as_fd(), target as RawFd) {
                return refuse(self, e.into());
            }
        }
        drop(stdio);
        let prepared = prepare_command(
            &spec,
            self.p.proxy.as_ref().map(|x| x.env.as_slice()),
            options.capture_bytes.is_some(),
            options.stdio,
        )
        .and_then(|c| open_status_file(&options).map(|f| (c, f)));
        let ((mut cmd, relay), mut status_file) = match prepared {
            Ok(v) => v,
            Err(e) => return refuse(self, e),
        };
        cmd.non_default_signals = self.p.child.command.non_default_signals;
        // Every slot explicit: hutch init's own stdio are this process's
        // from before the claim.
        let mut fds = Vec::with_capacity(3);
        for (i, slot) in cmd.stdio.fds.iter_mut().enumerate() {
            match slot.take() {
                Some(fd) => fds.push(fd),
                None => match sys::dup_fd(i as RawFd) {
                    Ok(fd) => fds.push(fd),
                    Err(e) => return refuse(self, e.into()),
                },
            }
        }
        let proxy = match self.start_proxy(&command) {
            Ok(p) => p,
            Err(e) => return refuse(self, e),
        };
        let wire = WireCommand::of(&cmd);
        // The host uppers are locked (above): the report may go out before
        // their overlays are gone. A resident sandbox reports when its
        // command's own init is reaped (`CommandEnded`): its overlay with
        // it, and hutch init ready for the next claim.
        let resident = self.p.child.resident;
        self.sb.command_ended.set(false);
        if resident && let Some(leaf) = self.p.cgroup.as_mut() {
            // The report's counters are this command's.
            leaf.start_command();
        }
        let report_on_exit = supervisor::report_on_exit_allowed(&self.p);
        // Kept open until the report is out: hutch init waits for its close
        // before it ends (`linger`). Without a report on `Exited`, the lock
        // is let go when this returns, after init was reaped.
        let mut lingering = match (report_on_exit && !resident)
            .then(|| sys::dup_fd(self.sb.sock.as_raw_fd()))
        {
            None => None,
            Some(Ok(sock)) => Some(Lingering {
                pid: self.sb.pid,
                sock,
                upper_locks: std::mem::take(&mut upper_locks),
                cgroup: None,
            }),
            Some(Err(e)) => return refuse(self, e.into()),
        };
        if let Err(e) = crate::launch::wire::claim::send(
            &self.sb.sock,
            &wire,
            options.status_file.is_some(),
            report_on_exit && !resident,
            [&fds[0], &fds[1], &fds[2]],
        ) {
            return refuse(self, e.into());
        }
        drop(fds);
        // Kept for the failure lines (the execve candidates).
        self.p.child.command = cmd;
        self.p.relay = relay;
        let with = Supervising {
            layers_without_idmap: if resident {
                self.layers_without_idmap.clone()
            } else {
                std::mem::take(&mut self.layers_without_idmap)
            },
            namespaces: if resident {
                self.namespaces.clone()
            } else {
                std::mem::take(&mut self.namespaces)
            },
            proxy,
            report_on_exit,
            terminal: None,
        };
        let finished = supervisor::supervise(
            &mut self.p,
            &spec,
            &options,
            &self.sb,
            status_file.as_mut(),
            Some(control),
            with,
        );
        // hutch init waits for the report to go out before it ends (its
        // namespaces torn down); reaped after. Without that, it is reaped
        // already: the uppers are free. A resident sandbox's command's
        // own init may still be ending: its locks are let go at its
        // `CommandEnded` ([`Warm::end_command`]), after the report.
        if resident {
            self.ending_locks = upper_locks;
        } else {
            drop(upper_locks);
        }
        // Reported on `Exited`: the cgroup leaf (still holding init) is
        // removed after init is reaped, off the claimer's path. Otherwise
        // the report removed it already.
        if let Some(l) = lingering.as_mut() {
            l.cgroup = self.p.cgroup.take();
        }
        (finished, lingering)
    }

    /// Network mode `proxy`: serve the doors the sandbox made, with this
    /// command's audit log.
    fn start_proxy(
        &mut self,
        command: &ClaimCommand,
    ) -> Result<Option<crate::net::ProxyHandle>, LaunchError> {
        let Some(prep) = self.p.proxy.as_mut() else {
            return Ok(None);
        };
        if let Some(path) = &command.proxy_audit {
            let cap = Some(prep.policy.limits().max_audit_bytes);
            prep.audit =
                Some(crate::audit::AuditSink::open_capped(path, cap).map_err(PrepareError::Audit)?);
        }
        let Some((doors, fds)) = self.doors.take() else {
            return Err(PrepareError::NoProxyDoors.into());
        };
        let mut slot = None;
        supervisor::start_proxy(&mut self.p, &doors, fds, &mut slot)
            .map_err(PrepareError::ProxyDoors)?;
        Ok(slot)
    }
}

/// Why a warm sandbox ended before it was ready: the failure hutch init
/// reported (as described), or none.
fn ended(failure: Option<String>) -> PrepareError {
    failure.map_or(
        PrepareError::WarmEndedBeforeReady,
        PrepareError::SandboxFailed,
    )
}
