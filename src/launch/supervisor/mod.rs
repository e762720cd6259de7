//! The supervisor: prepare, clone3, then id maps, idmapped layers and `Go`,
//! then one poll loop (messages, pidfd, forwarded signals, wall clock,
//! control requests, output relay) until the sandbox's pid 1 is gone and
//! its output is out; the ending ([`ending`]) and the report.

mod control;
pub(crate) mod describe;
pub mod ending;
pub(crate) mod maps;
pub(crate) mod relay;
pub mod report;
mod seen;
pub(crate) mod summary;
pub(crate) mod terminal;
pub(crate) mod uppers;
pub mod usage;

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::launch::child;
use crate::launch::error::{LaunchError, PrepareError, ProxyDoorsError, StatusFileError};
use crate::launch::options::{FrontEndStatus, RunOptions};
use crate::launch::plan::FORWARDED;
use crate::launch::prepare::{LaunchPlan, prepare};
use crate::launch::wire::message::{self, Incoming, Message};
use crate::launch::wire::stage::Stage;
use crate::spec::Spec;
use crate::sys::{self, Errno, Forked, SysError};
pub(crate) use control::{ClaimRequest, Control, ControlRequest};
use describe::failure_line;
use maps::{idmapped_layers, write_id_maps};
use relay::{Captured, Relay};
use report::{ExitReport, Outcome};
use seen::Seen;
use terminal::{Terminal, TerminalReady};
use summary::{namespace_inodes, report, write_start_event};

/// How long buffered output may still wait for a slow reader once a
/// forwarded signal or a kill request ended the sandbox.
const FLUSH_GRACE: Duration = Duration::from_millis(200);
/// How long a warm command reported on `Exited` runs before its record
/// is written to the runtime registry (see [`supervise`]).
const REGISTER_AFTER: Duration = Duration::from_millis(5);

/// A finished sandbox: its report and, when asked, the captured head and
/// tail of stdout and stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub report: ExitReport,
    pub captured: [Option<Captured>; 2],
}

/// Run a sandbox to completion from this (single-threaded) process.
pub(crate) fn run(
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
    // Held until the sandbox is gone (this returns after init is reaped).
    let _upper_locks = if opts.lock_host_uppers {
        uppers::lock_host_uppers(spec)?
    } else {
        Vec::new()
    };
    // Read before prepare, which installs no signal handler.
    p.child.command.non_default_signals = status.non_default_signals;
    p.child.report_started = opts.status_file.is_some();
    p.child.init_joinable = opts
        .status_protocol
        .as_ref()
        .is_some_and(|FrontEndStatus(s)| s.tells_init_pid());
    let mut status_file = open_status_file(opts)?;
    let mut terminal = match &opts.terminal {
        Some(t) => {
            terminal::check(spec, opts)?;
            let (term, theirs) = Terminal::new(t)?;
            // The terminal is the workload's stdio: no pipe, no /dev/null.
            p.child.console = Some(theirs);
            p.child.console_size = Some(term.size());
            p.child.command.controlling_tty = true;
            p.child.command.stdio = Default::default();
            p.relay = [None, None];
            Some(term)
        }
        None => None,
    };
    let sb = fork_sandbox(&mut p, spec, started)?;
    p.child.console = None;
    if let Some(Err(e)) = terminal.as_mut().map(Terminal::take_over_stdin) {
        sb.kill_and_reap();
        sb.restore_mask();
        return Err(LaunchError::Sys(e));
    }
    // Read while pid 1 is still dumpable and ours (it becomes neither).
    let namespaces = status_file.as_ref().map(|_| namespace_inodes(sb.pid));
    if let Some(FrontEndStatus(protocol)) = &opts.status_protocol
        && let Err(e) = protocol.started(sb.pid, spec)
    {
        sb.kill_and_reap();
        sb.restore_mask();
        return Err(LaunchError::Sys(e));
    }
    let result = go(&p, spec, &sb).and_then(|layers_without_idmap| {
        let with = Supervising {
            layers_without_idmap,
            namespaces: namespaces.unwrap_or_default(),
            proxy: None,
            report_on_exit: false,
            terminal: terminal.take(),
        };
        supervise(&mut p, spec, opts, &sb, status_file.as_mut(), control, with)
    });
    sb.restore_mask();
    if let (Ok(f), Some(FrontEndStatus(protocol))) = (&result, &opts.status_protocol) {
        let workload_started =
            !matches!(f.report.reason, Outcome::SetupFailed | Outcome::ExecFailed);
        protocol.ended(workload_started, f.report.status);
    }
    result
}

pub(crate) fn open_status_file(opts: &RunOptions) -> Result<Option<std::fs::File>, LaunchError> {
    opts.status_file
        .as_deref()
        .map(open_status_path)
        .transpose()
}

/// Create or truncate the status file the caller named, as the caller.
/// The path may sit in a directory others can write to (a shared /tmp),
/// so what is found there is not trusted: a symbolic link as the last
/// component is refused, not followed (O_NOFOLLOW), and only a regular
/// file is written and truncated, checked on the open file before the
/// truncation; a FIFO is opened non-blocking so that one without a reader
/// fails at once instead of hanging the launch. Streams go to
/// `--status-fd` (bubblewrap's `--json-status-fd`) instead.
pub(crate) fn open_status_path(path: &std::path::Path) -> Result<std::fs::File, LaunchError> {
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |why: StatusFileError| {
        LaunchError::from(PrepareError::StatusFile {
            path: path.into(),
            why,
        })
    };
    let not_regular = || fail(StatusFileError::NotRegular);
    if own_descriptor(path) {
        // `/proc/self/fd/N` (how `--status-fd N` reaches the launcher):
        // a descriptor the caller handed over, reopened as it is (a pipe
        // too, and blocking, so no line is lost). Only the kernel writes
        // that directory, so the link was not planted by anyone.
        return std::fs::File::create(path).map_err(|e| fail(StatusFileError::Open(e)));
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => fail(StatusFileError::Symlink),
            Some(libc::ENXIO) => not_regular(),
            _ => fail(StatusFileError::Open(e)),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| fail(StatusFileError::Fstat(e)))?;
    if !meta.file_type().is_file() {
        return Err(not_regular());
    }
    file.set_len(0)
        .map_err(|e| fail(StatusFileError::Truncate(e)))?;
    Ok(file)
}

/// Whether `path` is `/proc/self/fd/N`: one of this process's own
/// descriptors.
fn own_descriptor(path: &std::path::Path) -> bool {
    path.parent() == Some(std::path::Path::new("/proc/self/fd"))
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Create the sandbox of a prepared plan: the socketpair, the forwarded
/// signals blocked and queued on a signalfd (the sandbox inherits the mask
/// and its pid 1 keeps them blocked for sigwait), clone3. The caller
/// restores the signal mask ([`Sandbox::restore_mask`]) when it is done.
pub(crate) fn fork_sandbox(
    p: &mut LaunchPlan,
    spec: &Spec,
    started: Instant,
) -> Result<Sandbox, LaunchError> {
    let (sup_sock, child_sock) = sys::socket::seqpacket_pair()?;
    let mut forwarded = SigSet::empty();
    for s in FORWARDED {
        forwarded.add(Signal::try_from(s).expect("a valid signal"));
    }
    let old_mask = forwarded
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
        .map_err(|e| SysError::new("sigprocmask(SIG_BLOCK)", e))?;
    let signals = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| LaunchError::Sys(SysError::new("signalfd()", e)));
    let joins = crate::launch::prepare::join::open_joins(spec);
    let result = signals.and_then(|signals| {
        // Prepare ran code that could have started a thread: look again
        // right before the fork.
        let threads = sys::thread_count();
        if threads != 1 {
            return Err(LaunchError::MultiThreaded(threads));
        }
        let joins = joins?;
        if spec.namespaces.join.user.is_some() {
            // After setns this process's uid is the joined namespace's.
            p.registry_dir =
                Some(crate::registry::open_runtime_dir().map_err(PrepareError::Registry)?);
        }
        joins.enter()?;
        let cgroup_fd = p.cgroup.as_ref().and_then(|c| c.cgroup_fd());
        let nested = spec.namespaces.pid && spec.namespaces.join.pid.is_some();
        if let Some(c) = &p.cgroup {
            c.enter_for_clone()?;
        }
        let forked = if nested {
            clone_nested(p, cgroup_fd)
        } else {
            // SAFETY: the process is single-threaded (checked just above).
            unsafe { sys::clone3(p.clone_flags, cgroup_fd) }.map_err(LaunchError::clone_failed)
        };
        let forked = match (forked, &p.cgroup) {
            (Ok(Forked::Parent { pid, pidfd }), Some(c)) => match c.leave_after_clone() {
                Ok(()) => Ok(Forked::Parent { pid, pidfd }),
                Err(e) => {
                    let _ = sys::raw::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                    let _ = sys::raw::waitpid(pid, 0);
                    Err(e.into())
                }
            },
            (Err(e), Some(c)) => {
                let _ = c.leave_after_clone();
                Err(e)
            }
            (forked, _) => forked,
        };
        match forked {
            Ok(Forked::Child) => child::sandbox_main(&mut p.child, child_sock),
            Ok(Forked::Parent { pid, pidfd }) => {
                drop(child_sock);
                // The workload's ends of its stdio pipes are the child's now.
                p.child.command.stdio = Default::default();
                Ok(Sandbox {
                    pid,
                    pidfd,
                    sock: sup_sock,
                    signals,
                    started,
                    old_mask,
                    command_ended: std::cell::Cell::new(false),
                })
            }
            Err(e) => Err(e),
        }
    });
    if result.is_err() {
        let _ = old_mask.thread_set_mask();
    }
    result
}

/// A pid namespace of the sandbox's own inside a joined one: the kernel
/// creates a pid namespace only from a process already inside its parent
/// (after setns, `CLONE_NEWPID` is EINVAL for the caller itself), so an
/// intermediate process, forked into the joined namespace, clones hutch
/// init with `CLONE_PARENT` (init stays this process's child, for its
/// parent-death signal and for the wait), hands init's pidfd back and
/// exits. Returns as `clone3` does, in hutch init and here.
fn clone_nested(p: &LaunchPlan, cgroup_fd: Option<BorrowedFd<'_>>) -> Result<Forked, LaunchError> {
    let (back_r, back_w) = sys::socket::seqpacket_pair()?;
    // SAFETY: the caller checked that the process is single-threaded.
    let intermediate = unsafe { sys::clone3(0, None) }.map_err(LaunchError::clone_failed)?;
    let (pid, _pidfd) = match intermediate {
        Forked::Child => {
            drop(back_r);
            // SAFETY: a copy of the single thread.
            match unsafe { sys::raw::clone3(p.clone_flags | sys::CLONE_PARENT, cgroup_fd) } {
                Ok(Forked::Child) => return Ok(Forked::Child),
                Ok(Forked::Parent { pidfd, .. }) => {
                    let sent = sys::raw::send_fd(back_w.as_fd(), b"init", pidfd.as_fd());
                    sys::exit_now(if sent.is_ok() { 0 } else { 125 })
                }
                Err(e) => {
                    let _ = sys::raw::write_all(back_w.as_fd(), &(e as i32).to_le_bytes());
                    sys::exit_now(125)
                }
            }
        }
        Forked::Parent { pid, pidfd } => (pid, pidfd),
    };
    drop(back_w);
    let _ = sys::raw::waitpid(pid, 0);
    let failed = |errno| {
        LaunchError::clone_failed(SysError::new(
            format!(
                "clone3(flags={:#x}) inside the joined pid namespace",
                p.clone_flags | sys::CLONE_PARENT
            ),
            errno,
        ))
    };
    match sys::socket::recv(back_r.as_fd()) {
        Ok(Some((bytes, mut fds))) if bytes == b"init" && fds.len() == 1 => {
            let pidfd = fds.remove(0);
            let pid = sys::pidfd_pid(pidfd.as_fd())?;
            Ok(Forked::Parent { pid, pidfd })
        }
        Ok(Some((bytes, _))) if bytes.len() == 4 => Err(failed(Errno::from_raw(
            i32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")),
        ))),
        _ => Err(failed(Errno::EIO)),
    }
}

/// The running sandbox, as the supervisor holds it.
pub(crate) struct Sandbox {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
    pub sock: OwnedFd,
    pub signals: SignalFd,
    /// When the command started (a warm sandbox: when it was claimed).
    pub started: Instant,
    pub old_mask: SigSet,
    /// A resident sandbox: hutch init said `CommandEnded` for the last
    /// claim (read by the poll loop or after it).
    pub command_ended: std::cell::Cell<bool>,
}

impl Sandbox {
    pub(crate) fn kill(&self, p: &LaunchPlan) {
        let _ = sys::raw::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        if let Some(c) = &p.cgroup {
            c.kill();
        }
    }

    /// Kill pid 1 and reap it (a failure before the poll loop).
    pub(crate) fn kill_and_reap(&self) {
        let _ = sys::raw::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        let _ = sys::raw::waitpid(self.pid, 0);
    }

    pub(crate) fn restore_mask(&self) {
        let _ = self.old_mask.thread_set_mask();
    }
}

/// The supervision of a created container after its `Held`, in its
/// keeper (a process that is not the sandbox's parent): serve the egress
/// proxy on the doors the sandbox sent, write the start event and the exit
/// report. Ends when the sandbox does.
pub(crate) fn keep(
    p: &mut LaunchPlan,
    spec: &Spec,
    opts: &RunOptions,
    sb: Sandbox,
    mut status_file: Option<std::fs::File>,
    doors: Option<(Vec<String>, Vec<OwnedFd>)>,
) -> Result<Finished, LaunchError> {
    let namespaces = status_file.as_ref().map(|_| namespace_inodes(sb.pid));
    let mut watch = Watch {
        relay: Relay::new([None, None], None, None),
        p,
        spec,
        sb: &sb,
        deadline: None,
        control: None,
        status_file: status_file.as_mut(),
        namespaces: namespaces.unwrap_or_default(),
        seen: Seen::default(),
        proxy: None,
        init_done: false,
        sock_open: true,
        command_ended: false,
        report_on_exit: false,
        registration: None,
        register_at: None,
        terminal: None,
    };
    if let Some((names, fds)) = doors
        && let Err(e) = start_proxy(watch.p, &names, fds, &mut watch.proxy)
    {
        watch.seen.failed(None, e.to_string());
        sb.kill(watch.p);
    }
    watch.run()?;
    let Watch {
        relay, seen, proxy, ..
    } = watch;
    drop(proxy);
    drop(p.proxy.take());
    let duration_ms = sb.started.elapsed().as_millis() as u64;
    let report = report(p, spec, opts, seen, &relay, Vec::new(), duration_ms, false);
    if let Some(f) = status_file.as_mut() {
        let _ = writeln!(
            f,
            "{}",
            serde_json::to_string(&report).expect("report serializes")
        );
    }
    Ok(Finished {
        report,
        captured: [None, None],
    })
}
/// The id maps, the idmapped layers and `Go`; returns the layers that
/// could not be idmapped. On failure the sandbox is killed and reaped.
pub(crate) fn go(
    p: &LaunchPlan,
    spec: &Spec,
    sb: &Sandbox,
) -> Result<Vec<std::path::PathBuf>, LaunchError> {
    let kill_and_reap = |e: LaunchError| {
        sb.kill_and_reap();
        e
    };
    maps::hold_id_range(sb.pid, p).map_err(kill_and_reap)?;
    write_id_maps(sb.pid, p).map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    maps::write_oom_score_adj(sb.pid, spec.limits.oom_score_adj)
        .map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    let (mut handed, layers_without_idmap) = idmapped_layers(sb.pid, p).map_err(kill_and_reap)?;
    handed.extend(maps::layer_mounts(sb.pid, p).map_err(kill_and_reap)?);
    let fds: Vec<BorrowedFd<'_>> = handed.iter().map(|(_, fd)| fd.as_fd()).collect();
    message::send(
        &sb.sock,
        &Message::Go {
            handed_sources: handed.iter().map(|(i, _)| *i).collect(),
        },
        &fds,
    )
    .map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    Ok(layers_without_idmap)
}

/// What the supervisor brings to the poll loop besides the plan.
#[derive(Default)]
pub(crate) struct Supervising {
    pub layers_without_idmap: Vec<std::path::PathBuf>,
    /// The namespaces' inodes, for the status file's start event.
    pub namespaces: serde_json::Map<String, serde_json::Value>,
    /// The egress proxy, when it was started before the loop.
    pub proxy: Option<crate::net::ProxyHandle>,
    /// Report as soon as hutch init says the workload exited, without
    /// waiting for init's own end (its namespaces' teardown): init sends
    /// `Exited` only after it killed everything else in its pid namespace
    /// (`kill(-1)`) and reaped it, so no process of the command is left.
    /// Only for a sandbox whose report needs nothing from init's end
    /// ([`report_on_exit_allowed`]); the caller reaps init afterwards.
    pub report_on_exit: bool,
    /// `RunOptions::terminal`: the workload's terminal.
    pub terminal: Option<Terminal>,
}

/// Whether a warm sandbox's report may go out on `Exited`, before its
/// pid 1 is reaped ([`Supervising::report_on_exit`]): hutch init is the
/// pid namespace's own init (its `kill(-1)` reaches every process of the
/// sandbox and nothing else). A writable overlay with a host upper does
/// not stand in the way: the claim locked each such upper
/// (`launch::uppers`, and a session's `upper.lock`), and the supervisor
/// holds the locks until init is reaped, so the next mounter waits for
/// the overlay's end. Nor does a cgroup leaf: on `Exited` only the idle
/// init is left in it, so its counters are the command's (read for the
/// report then), and it is removed once init is reaped, after the report
/// (every sandbox has a leaf of its own: the next command never sees it).
pub(crate) fn report_on_exit_allowed(p: &LaunchPlan) -> bool {
    p.child.pid_namespace_init
}

/// A resident sandbox's per-command init: hutch init's only child, by
/// its pid here (`/proc/PID/task/PID/children`).
fn command_init_of(init: libc::pid_t) -> Option<libc::pid_t> {
    let text = sys::read_proc(format!("/proc/{init}/task/{init}/children")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The poll loop until the sandbox is gone, then the report.
pub(crate) fn supervise(
    p: &mut LaunchPlan,
    spec: &Spec,
    opts: &RunOptions,
    sb: &Sandbox,
    mut status_file: Option<&mut std::fs::File>,
    control: Option<&mut dyn Control>,
    with: Supervising,
) -> Result<Finished, LaunchError> {
    // In the runtime registry (`hutch ps`, `hutch kill`) until it is gone
    // (a warm sandbox from its claim on, with the command's Spec). A warm
    // command reported on `Exited` and named by no status file (nobody
    // knows its id yet) is recorded once it has run for
    // [`REGISTER_AFTER`]: a command that ends sooner never was.
    let defer = with.report_on_exit && opts.status_file.is_none();
    let (registration, register_at) = if defer {
        (None, Some(sb.started + REGISTER_AFTER))
    } else {
        let r = register(p, spec, sb.pid).map_err(|e| {
            sb.kill_and_reap();
            LaunchError::from(PrepareError::Registry(e))
        })?;
        (Some(r), None)
    };
    let deadline = spec.limits.wall_clock.map(|d| sb.started + d.0);
    let relay = Relay::new(
        std::mem::take(&mut p.relay),
        spec.limits.output_bytes.map(|b| b.0),
        opts.capture_bytes,
    );
    let mut watch = Watch {
        p,
        spec,
        sb,
        deadline,
        relay,
        control,
        status_file: status_file.as_deref_mut(),
        namespaces: with.namespaces,
        seen: Seen::default(),
        proxy: with.proxy,
        init_done: false,
        sock_open: true,
        command_ended: false,
        report_on_exit: with.report_on_exit,
        registration,
        register_at,
        terminal: with.terminal,
    };
    watch.run().inspect_err(|_| sb.kill_and_reap())?;
    // Reported on `Exited` while init still lives: its cgroup leaf is
    // removed after the report, when init is reaped (`helper::warm`).
    let leaf_removed_after = watch.report_on_exit && !watch.init_done;
    let Watch {
        p,
        mut relay,
        seen,
        proxy,
        terminal,
        ..
    } = watch;
    flush(&mut relay, sb, deadline, seen.hurry);
    // The caller's terminal leaves raw mode once the output is out.
    drop(terminal);
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
        with.layers_without_idmap,
        duration_ms,
        leaf_removed_after,
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
    /// A resident sandbox said its command's init is reaped.
    command_ended: bool,
    /// See [`Supervising::report_on_exit`].
    report_on_exit: bool,
    /// The sandbox's record in the runtime registry, removed with it.
    registration: Option<crate::registry::Registration>,
    /// When to write the record, if it is not written yet.
    register_at: Option<Instant>,
    terminal: Option<Terminal>,
}

/// What a ready fd of the poll set is.
#[derive(Clone, Copy)]
enum Ready {
    Pid1,
    Signals,
    Socket,
    Control,
    Lifeline,
    Pipe(usize),
    Out(usize),
    Terminal(TerminalReady),
}

/// The sandbox's record in the runtime registry: in the directory opened
/// before a joined user namespace was entered, if one was.
fn register(
    p: &mut LaunchPlan,
    spec: &Spec,
    init_pid: i32,
) -> Result<crate::registry::Registration, crate::registry::RegistryError> {
    let dir = match p.registry_dir.take() {
        Some(dir) => {
            p.registry_path = Some(dir.path().to_path_buf());
            dir
        }
        None => crate::registry::open_runtime_dir()?,
    };
    crate::registry::register_in(dir, &p.sandbox_id, spec, init_pid, p.cgroup.as_ref())
}

impl Watch<'_, '_> {
    /// Write the sandbox's registry record now (it was deferred); a
    /// sandbox that cannot be recorded is ended.
    fn register(&mut self) {
        self.register_at = None;
        if self.init_done {
            return;
        }
        match register(self.p, self.spec, self.sb.pid) {
            Ok(r) => self.registration = Some(r),
            Err(e) => {
                self.seen.failed(None, e.to_string());
                self.sb.kill(self.p);
            }
        }
    }

    fn run(&mut self) -> Result<(), LaunchError> {
        loop {
            if self.command_ended {
                // A resident sandbox's per-command init was reaped: every
                // process of the command is gone, its overlay with it.
                self.relay.drain();
                return Ok(());
            }
            if self.init_done && !self.sock_open {
                // Nobody is left to write: what the pipes hold is all.
                self.relay.drain();
                return Ok(());
            }
            if self.report_on_exit && !self.init_done {
                if self.seen.facts.wait_status.is_some() {
                    // `Exited`: init killed and reaped every other process
                    // of its pid namespace first, so nobody can write to
                    // the pipes any more. Init waits for this report
                    // (`linger`) and is reaped after it.
                    self.relay.drain();
                    return Ok(());
                }
                if !self.sock_open {
                    // Init's socket broke without `Exited`: it might wait
                    // for a close that never comes. End it.
                    self.sb.kill(self.p);
                }
            }
            let timing = !self.seen.facts.timed_out && !self.init_done;
            let wake = match (self.deadline.filter(|_| timing), self.register_at) {
                (Some(d), Some(r)) => Some(d.min(r)),
                (d, r) => d.or(r),
            };
            let timeout = poll_timeout(wake);
            let buffered = self.control.as_ref().is_some_and(|c| c.buffered());
            let ready = if buffered {
                vec![Ready::Control]
            } else {
                self.wait(timeout)?
            };
            if self.register_at.is_some_and(|at| Instant::now() >= at) {
                self.register();
            }
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
                        if let Ok(Some((_, ws))) = sys::raw::waitpid(self.sb.pid, 0) {
                            if self.p.child.exec_in_place {
                                // pid 1 is the command (`Spec::init = none`).
                                self.seen.facts.wait_status = Some(ws);
                            } else if libc::WIFSIGNALED(ws) {
                                self.seen.facts.init_signaled = Some(libc::WTERMSIG(ws));
                            }
                        }
                        self.init_done = true;
                    }
                    Ready::Signals => self.forward_signals(),
                    Ready::Socket => self.receive(),
                    Ready::Control => self.control_request(),
                    Ready::Lifeline => self.owner_gone(),
                    Ready::Pipe(i) => self.relay.read(i),
                    Ready::Out(i) => self.relay.write(i),
                    Ready::Terminal(t) => self.terminal_ready(t),
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
            if let Some(l) = c.lifeline() {
                add(Ready::Lifeline, l, PollFlags::POLLIN);
            }
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
        if let Some(t) = &self.terminal {
            for (tag, fd, write) in t.interest() {
                let flags = if write {
                    PollFlags::POLLOUT
                } else {
                    PollFlags::POLLIN
                };
                add(Ready::Terminal(tag), fd, flags);
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

    fn terminal_ready(&mut self, ready: TerminalReady) {
        let Some(t) = self.terminal.as_mut() else {
            return;
        };
        match ready {
            TerminalReady::Console => {
                if let Some(reader) = t.receive_master() {
                    self.relay.attach(0, reader);
                }
            }
            TerminalReady::Stdin => {
                t.read_stdin();
                t.write_master();
            }
            TerminalReady::Master => t.write_master(),
            TerminalReady::Winch => t.resize_from_stdin(),
        }
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
                Message::Started {
                    workload_pid,
                    namespaces: own,
                } => {
                    if let Some(f) = self.status_file.as_deref_mut() {
                        // A resident sandbox's command runs under its own
                        // init, in namespaces of its own: those are the
                        // sandbox the event names (to join, to watch).
                        let (pid, namespaces) = match (self.p.child.resident, own.is_empty()) {
                            (true, false) => (
                                command_init_of(self.sb.pid).unwrap_or(self.sb.pid),
                                own.into_iter().map(|(k, v)| (k, v.into())).collect(),
                            ),
                            _ => (self.sb.pid, self.namespaces.clone()),
                        };
                        write_start_event(f, &self.p.sandbox_id, pid, workload_pid, namespaces);
                    }
                }
                Message::Exited {
                    wait_status,
                    changed_paths,
                    rusage,
                } => {
                    self.seen.facts.wait_status = Some(wait_status);
                    self.seen.changed_paths = Some(changed_paths);
                    self.seen.rusage = rusage;
                }
                Message::ListenerReady { doors } => {
                    if let Err(e) = start_proxy(self.p, &doors, fds, &mut self.proxy) {
                        self.seen.failed(None, e.to_string());
                        self.sb.kill(self.p);
                    }
                }
                // A resident sandbox: the command's own init is gone.
                Message::CommandEnded => {
                    self.command_ended = true;
                    self.sb.command_ended.set(true);
                }
                // Sent by the supervisor, or only before a claim or a start.
                Message::Go { .. }
                | Message::Claim { .. }
                | Message::Ready
                | Message::Held
                | Message::RootBuilt
                | Message::Pivot => {}
            },
            Ok(Some(Incoming::Failure(f, text))) => {
                // An image run describes the Spec it launched (the image's
                // command and PATH), not the caller's.
                let spec = self.p.image.as_ref().map_or(self.spec, |i| &i.spec);
                let line = failure_line(&f, text.as_deref(), self.p, spec);
                if f.stage == Stage::Exec {
                    self.seen.facts.exec_failed = Some((f.errno, f.interpreter_missing));
                    self.seen.failure.get_or_insert((Some(f), line));
                } else {
                    self.seen.failed(Some(f), line);
                }
            }
            Ok(None) => {
                // `Spec::init = none`: the socket closes on the command's
                // execve (close-on-exec) when no failure came first; the
                // command is pid 1 itself.
                if self.p.child.exec_in_place
                    && self.seen.failure.is_none()
                    && !self.init_done
                    && let Some(f) = self.status_file.as_deref_mut()
                {
                    write_start_event(
                        f,
                        &self.p.sandbox_id,
                        self.sb.pid,
                        self.sb.pid,
                        self.namespaces.clone(),
                    );
                }
                self.sock_open = false;
            }
            Err(e) => {
                // After the supervisor killed the sandbox (wall clock, kill
                // on request) a reset socket is the kill's doing, not a
                // setup failure.
                if !(self.seen.facts.timed_out || self.seen.facts.killed) {
                    self.seen.failed(None, e.to_string());
                }
                self.sock_open = false;
            }
        }
    }

    fn control_request(&mut self) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let request = control.read();
        match request {
            // A release comes only between commands.
            ControlRequest::None | ControlRequest::Release => return,
            ControlRequest::Signal(signo) => {
                if !self.init_done {
                    self.seen.hurry = true;
                    let _ = sys::raw::pidfd_send_signal(self.sb.pidfd.as_fd(), signo);
                }
                return;
            }
            _ => {}
        }
        if !self.init_done {
            self.seen.facts.killed = true;
            self.sb.kill(self.p);
        }
        self.seen.hurry = true;
        match request {
            ControlRequest::Kill => control.acknowledge_kill(),
            // Gone, or a claim of a sandbox that runs: nobody to answer.
            _ => self.control = None,
        }
    }

    /// The owner went away (its lifeline hung up): end as for `Gone`.
    fn owner_gone(&mut self) {
        if !self.init_done {
            self.seen.facts.killed = true;
            self.sb.kill(self.p);
        }
        self.seen.hurry = true;
        self.control = None;
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
pub(crate) fn start_proxy(
    p: &mut LaunchPlan,
    doors: &[String],
    fds: Vec<OwnedFd>,
    slot: &mut Option<crate::net::ProxyHandle>,
) -> Result<(), ProxyDoorsError> {
    let sandbox_id = p.sandbox_id.clone();
    let Some(prep) = p.proxy.as_mut() else {
        return Err(ProxyDoorsError::NotAsked);
    };
    if slot.is_some() {
        return Err(ProxyDoorsError::Twice);
    }
    // The TCP and Unix doors, then (transparent egress) the resolver, one
    // capture listener per captured port and the watch on refused
    // attempts: exactly what was asked for.
    let expected = 2 + prep.transparent_ports.as_ref().map_or(0, |p| 2 + p.len());
    if doors.len() != fds.len() || doors.len() != expected {
        return Err(ProxyDoorsError::WrongFds);
    }
    let mut listeners = Vec::new();
    for (name, fd) in doors.iter().zip(fds) {
        let door = match name.as_str() {
            "tcp" => crate::net::Door::Tcp,
            "unix" => crate::net::Door::Unix,
            "resolver" if prep.transparent_ports.is_some() => crate::net::Door::Resolver,
            "transparent" if prep.transparent_ports.is_some() => crate::net::Door::Transparent,
            "refusals" if prep.transparent_ports.is_some() => crate::net::Door::Refusals,
            other => return Err(ProxyDoorsError::Unknown(other.to_string())),
        };
        listeners.push((door, fd));
    }
    // The armed secrets leave the plan for the proxy's broker, their only
    // holder from now on (the child's plan never held them).
    let brokering = crate::net::Brokering {
        secrets: std::mem::take(&mut prep.secrets),
        interception: prep.interception.clone(),
    };
    let handle = crate::net::spawn(
        prep.policy.clone(),
        listeners,
        sandbox_id,
        prep.audit.clone(),
        brokering,
    )
    .map_err(ProxyDoorsError::Start)?;
    *slot = Some(handle);
    Ok(())
}
