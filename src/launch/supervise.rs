//! The supervisor: prepare, clone3, then id maps, idmapped layers and `Go`,
//! then one poll loop (messages, pidfd, forwarded signals, wall clock,
//! control requests, output relay) until the sandbox's pid 1 is gone and
//! its output is out; the ending ([`super::ending`]) and the report.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::child::{self, FORWARDED};
use super::ending::{Facts, ending_of};
use super::message::{self, Incoming, Message};
use super::prepare::{LaunchPlan, network_name, prepare};
use super::relay::{Captured, Relay};
use super::report::{ChangesReport, Enforcement, ExitReport, Outcome, SetupFailure};
use super::stage::{Failure, Stage};
use super::{LaunchError, RunOptions};
use crate::spec::Spec;
use crate::sys::{self, Errno, Forked, SysError};

/// How long buffered output may still wait for a slow reader once a
/// forwarded signal or a kill request ended the sandbox.
const FLUSH_GRACE: Duration = Duration::from_millis(200);

/// A finished sandbox: its report and, when asked, the captured head and
/// tail of stdout and stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub report: ExitReport,
    pub captured: [Option<Captured>; 2],
}

/// What the process that asked for the sandbox wants while it runs (the
/// helper's control channel, [`super::helper`]).
pub(super) trait Control {
    fn fd(&self) -> BorrowedFd<'_>;
    /// The fd is readable: read the request.
    fn read(&mut self) -> ControlRequest;
    /// The sandbox is being killed as asked (sent before the report).
    fn acknowledge_kill(&mut self);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ControlRequest {
    None,
    /// End the sandbox now (then clean up and report as usual).
    Kill,
    /// The other end went away: nobody will read the report.
    Gone,
}

/// Run a sandbox to completion from this (single-threaded) process.
pub(super) fn run(
    spec: &Spec,
    opts: &RunOptions,
    control: Option<&mut dyn Control>,
) -> Result<Finished, LaunchError> {
    let started = Instant::now();
    let status = sys::self_status();
    if status.threads != 1 {
        return Err(LaunchError::MultiThreaded(status.threads));
    }
    let mut p = prepare(spec, opts.capture_bytes.is_some(), opts.stdio)?;
    // Read before prepare, which installs no signal handler.
    p.child.command.non_default_signals = status.non_default_signals;
    p.child.report_started = opts.status_file.is_some();
    let mut status_file = match &opts.status_file {
        Some(path) => Some(std::fs::File::create(path).map_err(|e| {
            LaunchError::Prepare(format!("cannot write status file {}: {e}", path.display()))
        })?),
        None => None,
    };
    let (sup_sock, child_sock) = sys::socket::seqpacket_pair()?;

    // Forwarded signals queue on a signalfd; the sandbox inherits the mask
    // and its pid 1 keeps them blocked for sigwait.
    let mut forwarded = SigSet::empty();
    for s in FORWARDED {
        forwarded.add(Signal::try_from(s).expect("a valid signal"));
    }
    let old_mask = forwarded
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
        .map_err(|e| SysError::new("sigprocmask(SIG_BLOCK)", e))?;
    let signals = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| LaunchError::Sys(SysError::new("signalfd()", e)));
    let result = signals.and_then(|signals| {
        // Prepare ran code that could have started a thread: look again
        // right before the fork.
        let threads = sys::thread_count();
        if threads != 1 {
            return Err(LaunchError::MultiThreaded(threads));
        }
        let cgroup_fd = p.cgroup.as_ref().and_then(|c| c.cgroup_fd());
        // SAFETY: the process is single-threaded (checked just above).
        match unsafe { sys::clone3(p.clone_flags, cgroup_fd) } {
            Ok(Forked::Child) => child::sandbox_main(&p.child, child_sock),
            Ok(Forked::Parent { pid, pidfd }) => {
                drop(child_sock);
                // The workload's ends of its stdio pipes are the child's now.
                p.child.command.stdio = Default::default();
                let sandbox = Sandbox {
                    pid,
                    pidfd,
                    sock: sup_sock,
                    signals,
                    started,
                };
                supervise(&mut p, spec, opts, sandbox, status_file.as_mut(), control)
            }
            Err(e) => Err(LaunchError::Clone(e)),
        }
    });
    let _ = old_mask.thread_set_mask();
    result
}

/// The running sandbox, as the supervisor holds it.
struct Sandbox {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    sock: OwnedFd,
    signals: SignalFd,
    started: Instant,
}

impl Sandbox {
    fn kill(&self, p: &LaunchPlan) {
        let _ = sys::raw::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        if let Some(c) = &p.cgroup {
            c.kill();
        }
    }
}

/// What the loop saw, for the ending and the report.
#[derive(Default)]
struct Seen {
    facts: Facts,
    /// The failure record (and init's text), or the supervisor's own line.
    failure: Option<(Option<Failure>, String)>,
    changed_paths: Option<Vec<u64>>,
    /// A forwarded signal or a kill request: output waits no longer.
    hurry: bool,
}

fn supervise(
    p: &mut LaunchPlan,
    spec: &Spec,
    opts: &RunOptions,
    sb: Sandbox,
    mut status_file: Option<&mut std::fs::File>,
    control: Option<&mut dyn Control>,
) -> Result<Finished, LaunchError> {
    let kill_and_reap = |e: LaunchError| {
        let _ = sys::raw::pidfd_send_signal(sb.pidfd.as_fd(), libc::SIGKILL);
        let _ = sys::raw::waitpid(sb.pid, 0);
        e
    };
    // Read while pid 1 is still dumpable and ours (it becomes neither).
    let namespaces = status_file.as_ref().map(|_| namespace_inodes(sb.pid));
    write_id_maps(sb.pid, p).map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    let (handed, layers_without_idmap) = idmapped_layers(sb.pid, p).map_err(kill_and_reap)?;
    let fds: Vec<BorrowedFd<'_>> = handed.iter().map(|(_, fd)| fd.as_fd()).collect();
    message::send(
        &sb.sock,
        &Message::Go {
            handed_sources: handed.iter().map(|(i, _)| *i).collect(),
        },
        &fds,
    )
    .map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    drop(fds);
    drop(handed);

    let deadline = spec.limits.wall_clock.map(|d| sb.started + d.0);
    let relay = Relay::new(
        std::mem::take(&mut p.relay),
        spec.limits.output_bytes.map(|b| b.0),
        opts.capture_bytes,
    );
    let mut watch = Watch {
        p,
        spec,
        sb: &sb,
        deadline,
        relay,
        control,
        status_file: status_file.as_deref_mut(),
        namespaces: namespaces.unwrap_or_default(),
        seen: Seen::default(),
        proxy: None,
        init_done: false,
        sock_open: true,
    };
    watch.run().map_err(kill_and_reap)?;
    let Watch {
        mut relay,
        seen,
        proxy,
        ..
    } = watch;
    flush(&mut relay, &sb, deadline, seen.hurry);
    // Every tunnel closes (and writes its audit line) with the sandbox.
    drop(proxy);
    drop(p.proxy.take());
    let duration_ms = sb.started.elapsed().as_millis() as u64;
    let report = report(
        p,
        spec,
        opts,
        seen,
        &relay,
        layers_without_idmap,
        duration_ms,
    );
    if let Some(f) = status_file {
        let _ = writeln!(
            f,
            "{}",
            serde_json::to_string(&report).expect("report serializes")
        );
    }
    Ok(Finished {
        report,
        captured: relay.finish(),
    })
}

/// The poll loop's state: everything that can happen while the sandbox
/// runs, until pid 1 is gone and the workload's pipes are closed.
struct Watch<'a, 'c> {
    p: &'a mut LaunchPlan,
    spec: &'a Spec,
    sb: &'a Sandbox,
    deadline: Option<Instant>,
    relay: Relay,
    control: Option<&'c mut dyn Control>,
    status_file: Option<&'a mut std::fs::File>,
    namespaces: serde_json::Map<String, serde_json::Value>,
    seen: Seen,
    proxy: Option<crate::net::ProxyHandle>,
    init_done: bool,
    sock_open: bool,
}

/// What a ready fd of the poll set is.
#[derive(Clone, Copy)]
enum Ready {
    Pid1,
    Signals,
    Socket,
    Control,
    Pipe(usize),
    Out(usize),
}

impl Watch<'_, '_> {
    fn run(&mut self) -> Result<(), LaunchError> {
        loop {
            if self.init_done && !self.sock_open {
                // Nobody is left to write: what the pipes hold is all.
                self.relay.drain();
                return Ok(());
            }
            let timing = !self.seen.facts.timed_out && !self.init_done;
            let timeout = poll_timeout(self.deadline.filter(|_| timing));
            let ready = self.wait(timeout)?;
            if ready.is_empty() {
                if timing && self.deadline.is_some_and(|d| Instant::now() >= d) {
                    self.seen.facts.timed_out = true;
                    self.sb.kill(self.p);
                }
                continue;
            }
            for r in ready {
                match r {
                    Ready::Pid1 => {
                        let _ = sys::raw::waitpid(self.sb.pid, 0);
                        self.init_done = true;
                    }
                    Ready::Signals => self.forward_signals(),
                    Ready::Socket => self.receive(),
                    Ready::Control => self.control_request(),
                    Ready::Pipe(i) => self.relay.read(i),
                    Ready::Out(i) => self.relay.write(i),
                }
            }
        }
    }

    /// Poll everything that matters now; the ready ones (none on timeout).
    fn wait(&self, timeout: PollTimeout) -> Result<Vec<Ready>, LaunchError> {
        let mut tags = Vec::with_capacity(8);
        let mut pollfds = Vec::with_capacity(8);
        let mut add = |tag, fd, flags| {
            tags.push(tag);
            pollfds.push(PollFd::new(fd, flags));
        };
        if !self.init_done {
            add(Ready::Pid1, self.sb.pidfd.as_fd(), PollFlags::POLLIN);
            add(Ready::Signals, self.sb.signals.as_fd(), PollFlags::POLLIN);
        }
        if self.sock_open {
            add(Ready::Socket, self.sb.sock.as_fd(), PollFlags::POLLIN);
        }
        if let Some(c) = &self.control {
            add(Ready::Control, c.fd(), PollFlags::POLLIN);
        }
        for i in 0..2 {
            let want = self.relay.interest(i);
            if want.read
                && let Some(fd) = self.relay.pipe_fd(i)
            {
                add(Ready::Pipe(i), fd, PollFlags::POLLIN);
            }
            if want.write
                && let Some(fd) = self.relay.out_fd(i)
            {
                add(Ready::Out(i), fd, PollFlags::POLLOUT);
            }
        }
        match poll(&mut pollfds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(LaunchError::Sys(SysError::new("poll()", e))),
        }
        Ok(tags
            .into_iter()
            .zip(&pollfds)
            .filter(|(_, pf)| pf.revents().is_some_and(|r| !r.is_empty()))
            .map(|(tag, _)| tag)
            .collect())
    }

    fn forward_signals(&mut self) {
        while let Ok(Some(info)) = self.sb.signals.read_signal() {
            self.seen.hurry = true;
            let _ =
                sys::raw::pidfd_send_signal(self.sb.pidfd.as_fd(), info.ssi_signo as libc::c_int);
        }
    }

    fn receive(&mut self) {
        match message::recv(&self.sb.sock) {
            Ok(Some(Incoming::Message(msg, fds))) => match msg {
                Message::Started { workload_pid } => {
                    if let Some(f) = self.status_file.as_deref_mut() {
                        write_start_event(
                            f,
                            &self.p.sandbox_id,
                            self.sb.pid,
                            workload_pid,
                            self.namespaces.clone(),
                        );
                    }
                }
                Message::Exited {
                    wait_status,
                    changed_paths,
                } => {
                    self.seen.facts.wait_status = Some(wait_status);
                    self.seen.changed_paths = Some(changed_paths);
                }
                Message::ListenerReady { doors } => {
                    if let Err(e) = start_proxy(self.p, &doors, fds, &mut self.proxy) {
                        self.seen.failed(None, e);
                        self.sb.kill(self.p);
                    }
                }
                Message::Go { .. } => {}
            },
            Ok(Some(Incoming::Failure(f, text))) => {
                let line = failure_line(&f, text.as_deref(), self.p, self.spec);
                if f.stage == Stage::Exec {
                    self.seen.facts.exec_failed = Some((f.errno, f.interpreter_missing));
                    self.seen.failure.get_or_insert((Some(f), line));
                } else {
                    self.seen.failed(Some(f), line);
                }
            }
            Ok(None) => self.sock_open = false,
            Err(e) => {
                self.seen.failed(None, e.to_string());
                self.sock_open = false;
            }
        }
    }

    fn control_request(&mut self) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let request = control.read();
        if request == ControlRequest::None {
            return;
        }
        if !self.init_done {
            self.seen.facts.killed = true;
            self.sb.kill(self.p);
        }
        self.seen.hurry = true;
        match request {
            ControlRequest::Kill => control.acknowledge_kill(),
            _ => self.control = None,
        }
    }
}

/// The exit report (and the notices on stderr): the ending of what was
/// seen, what was enforced, what changed.
fn report(
    p: &mut LaunchPlan,
    spec: &Spec,
    opts: &RunOptions,
    mut seen: Seen,
    relay: &Relay,
    layers_without_idmap: Vec<PathBuf>,
    duration_ms: u64,
) -> ExitReport {
    // Every process is gone (the pid namespace died with its init): read
    // the cgroup's counters, then remove the leaf.
    let limits = p.cgroup.take().map(crate::cgroup::Prepared::finish);
    seen.facts.limit_event = limits.as_ref().and_then(|l| l.ended_by);
    let ending = ending_of(&seen.facts);
    let failure = seen.failure_record();
    let error = match seen.failure {
        Some((_, line)) => Some(line),
        None if ending.reason == Outcome::SetupFailed => {
            Some("the sandbox ended before its workload reported an exit status".into())
        }
        None => None,
    };
    let changes = changes_report(p, seen.changed_paths.as_deref());
    let unenforced = unenforced(p, limits.as_ref());
    if !opts.quiet {
        notices(
            p,
            &layers_without_idmap,
            &changes,
            &unenforced,
            ending.reason,
        );
    }
    ExitReport {
        event: "exit".into(),
        sandbox_id: p.sandbox_id.clone(),
        status: ending.status,
        exit_code: ending.exit_code,
        signal: ending.signal,
        reason: ending.reason,
        error,
        failure,
        duration_ms,
        output_bytes: relay.written,
        output_truncated: relay.truncated,
        output_undelivered: relay.undelivered,
        changes,
        enforced: Enforcement {
            limits,
            layers_without_idmap,
            ..enforcement(p, spec)
        },
        unenforced,
    }
}

impl Seen {
    /// hutch's own failure (the first one is the one reported).
    fn failed(&mut self, record: Option<Failure>, line: String) {
        self.facts.setup_failed = true;
        self.failure.get_or_insert((record, line));
    }

    fn failure_record(&self) -> Option<SetupFailure> {
        let (f, _) = self.failure.as_ref()?;
        let f = (*f)?;
        Some(SetupFailure {
            stage: f.stage,
            errno: (f.errno as i32 != 0).then(|| format!("{:?}", f.errno)),
        })
    }
}

fn poll_timeout(deadline: Option<Instant>) -> PollTimeout {
    match deadline {
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            // Round up: waking a millisecond early would only poll again.
            let ms = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
        }
        None => PollTimeout::NONE,
    }
}

/// The sandbox is gone: give buffered output to a slow reader until the
/// deadline (a short grace after a forwarded signal or a kill request;
/// with no deadline, until a forwarded signal), then drop the rest.
fn flush(relay: &mut Relay, sb: &Sandbox, deadline: Option<Instant>, hurry: bool) {
    let mut until = if hurry {
        Some(Instant::now() + FLUSH_GRACE)
    } else {
        deadline
    };
    while relay.pending() {
        if until.is_some_and(|u| Instant::now() >= u) {
            relay.drop_pending();
            return;
        }
        let mut tags = Vec::with_capacity(3);
        let mut pollfds = vec![PollFd::new(sb.signals.as_fd(), PollFlags::POLLIN)];
        for i in 0..2 {
            if relay.interest(i).write
                && let Some(fd) = relay.out_fd(i)
            {
                tags.push(i);
                pollfds.push(PollFd::new(fd, PollFlags::POLLOUT));
            }
        }
        if tags.is_empty() {
            relay.drop_pending();
            return;
        }
        match poll(&mut pollfds, poll_timeout(until)) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => {
                relay.drop_pending();
                return;
            }
        }
        if pollfds[0].revents().is_some_and(|r| !r.is_empty()) {
            // A signal now: the caller wants hutch gone, output or not.
            while let Ok(Some(_)) = sb.signals.read_signal() {}
            until = Some(Instant::now());
        }
        let ready: Vec<usize> = tags
            .iter()
            .zip(&pollfds[1..])
            .filter(|(_, pf)| pf.revents().is_some_and(|r| !r.is_empty()))
            .map(|(i, _)| *i)
            .collect();
        drop(pollfds);
        for i in ready {
            relay.write(i);
        }
    }
}

/// Serve the egress proxy on the doors the sandbox just sent.
fn start_proxy(
    p: &mut LaunchPlan,
    doors: &[String],
    fds: Vec<OwnedFd>,
    slot: &mut Option<crate::net::ProxyHandle>,
) -> Result<(), String> {
    let sandbox_id = p.sandbox_id.clone();
    let Some(prep) = p.proxy.as_mut() else {
        return Err("the sandbox sent proxy doors it was not asked for".into());
    };
    if slot.is_some() {
        return Err("the sandbox sent its proxy doors twice".into());
    }
    if doors.len() != fds.len() || doors.len() != 2 {
        return Err("the proxy doors message carried the wrong fds".into());
    }
    let mut listeners = Vec::new();
    for (name, fd) in doors.iter().zip(fds) {
        let door = match name.as_str() {
            "tcp" => crate::net::Door::Tcp,
            "unix" => crate::net::Door::Unix,
            other => return Err(format!("the sandbox sent an unknown proxy door {other:?}")),
        };
        listeners.push((door, fd));
    }
    let handle = crate::net::spawn(
        prep.policy.clone(),
        listeners,
        sandbox_id,
        prep.audit.clone(),
    )
    .map_err(|e| format!("starting the egress proxy: {e}"))?;
    *slot = Some(handle);
    Ok(())
}

/// One line for a failed step: what, where, the call, why, what to do.
fn failure_line(f: &Failure, text: Option<&str>, p: &LaunchPlan, spec: &Spec) -> String {
    let errno = f.errno;
    let why = |call: &str| format!("{call} => {errno:?}: {}", errno.desc());
    if f.stage == Stage::Exec {
        return exec_line(f, p, spec);
    }
    match (f.stage, text) {
        // Build errors already say which operation, the call and a hint.
        (Stage::OpenHostSources | Stage::BuildRoot, Some(text)) => return text.to_string(),
        (stage, Some(text)) => return format!("{}: {text}", stage.what()),
        _ => {}
    }
    let c = &p.child;
    let q = |s: &std::ffi::CStr| format!("{:?}", s.to_string_lossy());
    let (what, call, hint): (String, String, Option<&str>) = match f.stage {
        Stage::SetGid => {
            let g = c.ids.inside_gid;
            (
                f.stage.what().into(),
                format!("setresgid({g}, {g}, {g})"),
                None,
            )
        }
        Stage::SetUid => {
            let u = c.ids.inside_uid;
            (
                f.stage.what().into(),
                format!("setresuid({u}, {u}, {u})"),
                None,
            )
        }
        Stage::SetGroups => (f.stage.what().into(), "setgroups(0, NULL)".into(), None),
        Stage::LockUserNamespaces => (
            f.stage.what().into(),
            "write(\"/proc/sys/user/max_user_namespaces\", \"0\")".into(),
            Some("the sandbox's /proc/sys/user must be writable by its own root"),
        ),
        Stage::Hostname => (
            f.stage.what().into(),
            format!("sethostname({:?})", c.hostname.as_deref().unwrap_or("")),
            None,
        ),
        Stage::Loopback => (
            f.stage.what().into(),
            "ioctl(\"lo\", SIOCSIFFLAGS, IFF_UP)".into(),
            None,
        ),
        Stage::ProxyDoors => (
            f.stage.what().into(),
            format!(
                "listen(127.0.0.1:{}) and sendmsg(SCM_RIGHTS)",
                crate::net::PROXY_TCP_PORT
            ),
            None,
        ),
        Stage::Rlimits => {
            let (r, v) = c.rlimits.get(f.index as usize).copied().unwrap_or((-1, 0));
            (
                f.stage.what().into(),
                format!("setrlimit({}, {v})", sys::rlimit_name(r)),
                None,
            )
        }
        Stage::ParentDeathSignal | Stage::ParentDeathSignalAgain => (
            f.stage.what().into(),
            "prctl(PR_SET_PDEATHSIG, SIGKILL)".into(),
            None,
        ),
        Stage::NonDumpable => (
            f.stage.what().into(),
            "prctl(PR_SET_DUMPABLE, 0)".into(),
            None,
        ),
        Stage::BlockSignals => (f.stage.what().into(), "sigprocmask(SIG_BLOCK)".into(), None),
        Stage::StartWorkload => (
            f.stage.what().into(),
            "clone(CLONE_VM|CLONE_VFORK)".into(),
            None,
        ),
        Stage::CloseInheritedFds | Stage::CloseInitFds | Stage::CloseFds => {
            (f.stage.what().into(), "close_range()".into(), None)
        }
        Stage::InitSeccomp => (
            f.stage.what().into(),
            "seccomp(SECCOMP_SET_MODE_FILTER, <seccomp/init.json>)".into(),
            None,
        ),
        Stage::InitSession | Stage::WorkloadSession => {
            (f.stage.what().into(), "setsid()".into(), None)
        }
        Stage::Stdio => (f.stage.what().into(), "dup2()".into(), None),
        Stage::WorkingDirectory => {
            let cwd = &c.command.cwd;
            let hint = match errno {
                Errno::ELOOP | Errno::EXDEV => Some(
                    "the working directory must be a directory inside the sandbox; a path \
                     through a /proc magic link such as /proc/self/fd/N is refused",
                ),
                Errno::ENOENT => Some("no such directory inside the sandbox; fix --chdir"),
                Errno::ENOTDIR => Some("not a directory inside the sandbox; fix --chdir"),
                _ => None,
            };
            (
                format!("{} {}", f.stage.what(), q(cwd)),
                format!(
                    "openat2(\"/\", {}, O_PATH|O_DIRECTORY, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) and fchdir",
                    q(cwd)
                ),
                hint,
            )
        }
        Stage::NoNewPrivs => (
            f.stage.what().into(),
            "prctl(PR_SET_NO_NEW_PRIVS, 1)".into(),
            None,
        ),
        Stage::BoundingSet => (
            f.stage.what().into(),
            format!("prctl(PR_CAPBSET_DROP, {})", f.index),
            None,
        ),
        Stage::Capabilities => (
            f.stage.what().into(),
            format!("capset({:#x})", c.caps.keep),
            None,
        ),
        Stage::AmbientCapabilities => (f.stage.what().into(), "prctl(PR_CAP_AMBIENT)".into(), None),
        Stage::LandlockRuleset => (
            f.stage.what().into(),
            "landlock_create_ruleset()".into(),
            None,
        ),
        Stage::LandlockPathRule => {
            let path = c
                .confinement
                .landlock_plan()
                .and_then(|l| l.paths.get(f.index as usize))
                .map(|r| q(&r.path))
                .unwrap_or_default();
            (
                f.stage.what().into(),
                format!("landlock_add_rule(PATH_BENEATH, {path})"),
                None,
            )
        }
        Stage::LandlockPortRule => (
            f.stage.what().into(),
            "landlock_add_rule(NET_PORT)".into(),
            None,
        ),
        Stage::LandlockRestrict => (
            f.stage.what().into(),
            "landlock_restrict_self(0)".into(),
            None,
        ),
        Stage::Seccomp => {
            let n = c
                .confinement
                .workload_filter()
                .map_or(0, |f| f.program.len());
            (
                f.stage.what().into(),
                format!("seccomp(SECCOMP_SET_MODE_FILTER, 0, <{n} instructions>)"),
                None,
            )
        }
        Stage::MountPropagation | Stage::OpenHostSources | Stage::BuildRoot | Stage::Exec => {
            (f.stage.what().into(), "?".into(), None)
        }
    };
    let mut line = format!("{what}: {}", why(&call));
    if let Some(h) = hint {
        line.push_str(&format!(" ({h})"));
    }
    line
}

/// The 126/127 line: not found in PATH, not found, or not executable.
fn exec_line(f: &Failure, p: &LaunchPlan, spec: &Spec) -> String {
    let errno = f.errno;
    let code = super::ending::exec_failure_status(errno, f.interpreter_missing);
    let program = spec.command[0].as_str();
    if code == 127 && !program.contains('/') {
        let path = spec
            .env
            .get("PATH")
            .map_or(crate::spec::DEFAULT_PATH, String::as_str);
        return format!("command {program:?} not found in the sandbox's PATH ({path})");
    }
    let what = if code == 127 {
        "command not found in the sandbox"
    } else {
        "command not executable in the sandbox"
    };
    let why = if f.interpreter_missing {
        " (the file exists; its ELF or #! interpreter is missing in the sandbox)"
    } else if errno == Errno::ELOOP {
        " (a path through a /proc magic link is refused)"
    } else {
        ""
    };
    let candidate = p
        .child
        .command
        .exec
        .candidates
        .get(f.index as usize)
        .map(|c| format!("{:?}", c.to_string_lossy()))
        .unwrap_or_else(|| format!("{program:?}"));
    format!(
        "{what}: execve({candidate}) => {errno:?}: {}{why}",
        errno.desc()
    )
}

/// Notices on stderr (unless quiet): layers without idmapping, changed
/// paths, and preferred limits this host does not enforce (once, when the
/// workload ran).
fn notices(
    p: &LaunchPlan,
    layers_without_idmap: &[PathBuf],
    changes: &[ChangesReport],
    unenforced: &[String],
    reason: Outcome,
) {
    for layer in layers_without_idmap {
        eprintln!(
            "hutch: note: {} is on a filesystem without idmapped mounts; the sandbox \
             saw it with its host owners, as host uid {}",
            layer.display(),
            p.child.ids.host_uid
        );
    }
    for c in changes {
        if c.changed_paths == 0 {
            continue;
        }
        match &c.kept_in {
            Some(dir) => eprintln!(
                "hutch: {} paths changed under {}; kept in {}",
                c.changed_paths,
                c.dest.display(),
                dir.display()
            ),
            None => eprintln!(
                "hutch: {} paths changed under {}; discarded (keep them with --changes DIR)",
                c.changed_paths,
                c.dest.display()
            ),
        }
    }
    if !matches!(reason, Outcome::SetupFailed | Outcome::ExecFailed) {
        for u in unenforced
            .iter()
            .filter(|u| !u.starts_with("limits.upper_size"))
        {
            eprintln!("hutch: note: not enforced on this host: {u}");
        }
    }
}

fn unenforced(p: &LaunchPlan, limits: Option<&crate::cgroup::LimitsReport>) -> Vec<String> {
    limits
        .iter()
        .flat_map(|l| &l.unenforced)
        .map(|u| format!("limits.{}: {}", u.limit, u.reason))
        .chain(p.kept_uppers.iter().map(|(dest, upper)| {
            format!(
                "limits.upper_size: the upper of {} is on the host's disk ({}); \
                 only that filesystem's quota bounds it",
                dest.display(),
                upper.display()
            )
        }))
        .collect()
}

fn write_id_maps(pid: libc::pid_t, p: &LaunchPlan) -> Result<(), SysError> {
    let proc = format!("/proc/{pid}");
    let ids = &p.child.ids;
    let write = |file: &str, data: String| {
        std::fs::write(format!("{proc}/{file}"), data.as_bytes())
            .map_err(|e| sys::io_err(format!("write(\"{proc}/{file}\", {data:?})"), e))
    };
    if !ids.root_launch {
        write("setgroups", "deny".into())?;
    }
    write("uid_map", format!("{} {} 1", ids.inside_uid, ids.host_uid))?;
    write("gid_map", format!("{} {} 1", ids.inside_gid, ids.host_gid))
}

/// Root launches: each overlay lower becomes an idmapped mount whose
/// on-disk owner is the workload's host id, so the workspace is fully the
/// workload's even when the host directory is root's and mode 0700.
///
/// A filesystem without idmapped mounts (the kernel answers EINVAL; ENOSYS
/// before Linux 5.12) gets the plain detached copy instead, and its path
/// is returned as the second list: the run works wherever the workload's
/// host id may read the workspace (a usual 0755 checkout), and the report
/// says that this layer was not idmapped.
#[allow(clippy::type_complexity)]
fn idmapped_layers(
    pid: libc::pid_t,
    p: &LaunchPlan,
) -> Result<(Vec<(usize, OwnedFd)>, Vec<PathBuf>), LaunchError> {
    let ids = &p.child.ids;
    let mut out = Vec::new();
    let mut without_idmap = Vec::new();
    for (index, path) in &p.idmap_sources {
        let fail = |e: SysError| LaunchError::Idmap {
            path: path.clone(),
            err: e,
        };
        let meta = std::fs::metadata(path)
            .map_err(|e| fail(sys::io_err(format!("stat({})", path.display()), e)))?;
        let (uid, gid) = (
            std::os::unix::fs::MetadataExt::uid(&meta),
            std::os::unix::fs::MetadataExt::gid(&meta),
        );
        let userns: OwnedFd = if uid == ids.inside_uid && gid == ids.inside_gid {
            std::fs::File::open(format!("/proc/{pid}/ns/user"))
                .map(OwnedFd::from)
                .map_err(|e| fail(sys::io_err(format!("open(/proc/{pid}/ns/user)"), e)))?
        } else {
            sys::userns_with_maps(
                &format!("{uid} {} 1", ids.host_uid),
                &format!("{gid} {} 1", ids.host_gid),
            )
            .map_err(fail)?
        };
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
            .expect("validated: no NUL");
        let dir = sys::openat2(None, &c, libc::O_PATH | libc::O_DIRECTORY, 0, 0).map_err(fail)?;
        let tree = sys::open_tree_clone(dir.as_fd(), false).map_err(fail)?;
        match sys::mount_setattr(
            tree.as_fd(),
            false,
            sys::MOUNT_ATTR_IDMAP,
            0,
            Some(userns.as_fd()),
        ) {
            Ok(()) => {}
            Err(e) if matches!(e.errno, Errno::EINVAL | Errno::ENOSYS) => {
                without_idmap.push(path.clone());
            }
            Err(e) => return Err(fail(e)),
        }
        out.push((*index, tree));
    }
    Ok((out, without_idmap))
}

fn changes_report(p: &LaunchPlan, counted: Option<&[u64]>) -> Vec<ChangesReport> {
    let mut out: Vec<ChangesReport> = p
        .tmp_overlay_dests
        .iter()
        .enumerate()
        .map(|(i, dest)| ChangesReport {
            dest: dest.clone(),
            changed_paths: counted.and_then(|c| c.get(i)).copied().unwrap_or(0),
            kept_in: None,
        })
        .collect();
    for (dest, upper) in &p.kept_uppers {
        let count = std::fs::File::open(upper)
            .ok()
            .filter(|f| f.metadata().is_ok_and(|m| m.is_dir()))
            .map_or(0, |f| crate::fs::count::changed_paths(f.as_fd()));
        out.push(ChangesReport {
            dest: dest.clone(),
            changed_paths: count,
            kept_in: Some(upper.clone()),
        });
    }
    out
}

fn enforcement(p: &LaunchPlan, spec: &Spec) -> Enforcement {
    let ns = &spec.namespaces;
    let namespaces = [
        ("user", true),
        ("mount", true),
        ("pid", true),
        ("ipc", ns.ipc),
        ("uts", ns.uts),
        ("net", ns.net),
        ("cgroup", ns.cgroup),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(n, _)| n.to_string())
    .collect();
    let confinement = p.child.confinement.report();
    let ids = &p.child.ids;
    Enforcement {
        namespaces,
        uid: ids.inside_uid,
        gid: ids.inside_gid,
        host_uid: ids.host_uid,
        host_gid: ids.host_gid,
        no_new_privs: true,
        capabilities: confinement.caps_kept.clone(),
        network: network_name(&spec.network).into(),
        wall_clock_ms: spec.limits.wall_clock.map(|d| d.0.as_millis() as u64),
        output_bytes: spec.limits.output_bytes.map(|b| b.0),
        confinement: Some(confinement),
        limits: None,
        layers_without_idmap: Vec::new(),
    }
}

fn namespace_inodes(pid: libc::pid_t) -> serde_json::Map<String, serde_json::Value> {
    let mut namespaces = serde_json::Map::new();
    for ns in ["user", "mnt", "pid", "ipc", "uts", "net", "cgroup"] {
        if let Ok(m) = std::fs::metadata(format!("/proc/{pid}/ns/{ns}")) {
            namespaces.insert(ns.into(), std::os::unix::fs::MetadataExt::ino(&m).into());
        }
    }
    namespaces
}

fn write_start_event(
    f: &mut std::fs::File,
    id: &str,
    pid: libc::pid_t,
    workload_pid: i32,
    namespaces: serde_json::Map<String, serde_json::Value>,
) {
    let event = serde_json::json!({
        "event": "start",
        "sandbox_id": id,
        "pid": pid,
        "workload_pid": workload_pid,
        "namespaces": namespaces,
        "time_ms": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
    });
    let _ = writeln!(f, "{event}");
}
