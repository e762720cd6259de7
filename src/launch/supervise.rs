//! The supervisor after clone: id maps, idmapped layers, `Go`, then one
//! poll loop (messages, pidfd, forwarded signals, wall clock, output relay)
//! until the sandbox's pid 1 is gone.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::SigSet;
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::child::{self, FORWARDED};
use super::message::{self, Message};
use super::prepare::{Prepared, network_name, prepare};
use super::report::{ChangesReport, Enforcement, ExitReport, Outcome};
use super::{LaunchError, RunOptions};
use crate::spec::Spec;
use crate::sys::{self, Errno, Forked, SysError};

/// First and last bytes of a stream, bounded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Captured {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    /// Bytes the stream carried in all.
    pub total: u64,
}

struct Capture {
    limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Capture {
    fn new(limit: usize) -> Self {
        Capture {
            limit,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.limit.saturating_sub(self.head.len());
        let take = room.min(data.len());
        self.head.extend_from_slice(&data[..take]);
        data = &data[take..];
        if data.len() > self.limit {
            data = &data[data.len() - self.limit..];
        }
        self.tail.extend(data);
        while self.tail.len() > self.limit {
            self.tail.pop_front();
        }
    }

    fn finish(self) -> Captured {
        Captured {
            head: self.head,
            tail: self.tail.into(),
            total: self.total,
        }
    }
}

/// Output relayed from the workload to hutch's stdout/stderr.
struct Relay {
    limit: Option<u64>,
    written: u64,
    truncated: bool,
    captures: [Option<Capture>; 2],
}

impl Relay {
    fn forward(&mut self, stream: usize, data: &[u8]) {
        if let Some(c) = &mut self.captures[stream] {
            c.push(data);
        }
        let allowed = match self.limit {
            Some(limit) => (limit.saturating_sub(self.written) as usize).min(data.len()),
            None => data.len(),
        };
        if allowed < data.len() {
            self.truncated = true;
        }
        self.written += allowed as u64;
        let out = &data[..allowed];
        if out.is_empty() {
            return;
        }
        // A closed stdout only means nobody reads; the sandbox goes on.
        let _ = if stream == 0 {
            std::io::stdout().lock().write_all(out)
        } else {
            std::io::stderr().lock().write_all(out)
        };
    }
}

/// Run a sandbox to completion from this (single-threaded) process.
pub fn run(
    spec: &Spec,
    opts: &RunOptions,
) -> Result<(ExitReport, [Option<Captured>; 2]), LaunchError> {
    let started = Instant::now();
    let status = sys::self_status();
    if status.threads != 1 {
        return Err(LaunchError::MultiThreaded(status.threads));
    }
    let mut p = prepare(spec, opts.capture_bytes.is_some())?;
    // Read before prepare, which installs no signal handler.
    p.non_default_signals = status.non_default_signals;
    p.report_started = opts.status_file.is_some();
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
        forwarded.add(s);
    }
    let old_mask = forwarded
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
        .map_err(|e| SysError::new("sigprocmask(SIG_BLOCK)", e))?;
    let signals = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| SysError::new("signalfd()", e));
    let result = signals.map_err(LaunchError::Sys).and_then(|signals| {
        // SAFETY: asserted single-threaded above.
        let cgroup_fd = p
            .cgroup
            .as_ref()
            .and_then(|c| c.cgroup_fd())
            .map(|fd| fd.as_raw_fd());
        match unsafe { sys::clone3(p.clone_flags, cgroup_fd) } {
            Ok(Forked::Child) => child::sandbox_main(&p, child_sock, sup_sock.as_raw_fd()),
            Ok(Forked::Parent { pid, pidfd }) => {
                drop(child_sock);
                p.stdio.child_ends.clear();
                supervise(
                    &mut p,
                    spec,
                    opts,
                    pid,
                    pidfd,
                    sup_sock,
                    signals,
                    started,
                    status_file.as_mut(),
                )
            }
            Err(e) => Err(LaunchError::Clone(e)),
        }
    });
    let _ = old_mask.thread_set_mask();
    result
}

#[allow(clippy::too_many_arguments)]
fn supervise(
    p: &mut Prepared,
    spec: &Spec,
    opts: &RunOptions,
    pid: libc::pid_t,
    pidfd: OwnedFd,
    sock: OwnedFd,
    signals: SignalFd,
    started: Instant,
    mut status_file: Option<&mut std::fs::File>,
) -> Result<(ExitReport, [Option<Captured>; 2]), LaunchError> {
    let kill_and_reap = |e: LaunchError| {
        let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
        let _ = sys::waitpid(pid, 0);
        e
    };
    // In the runtime registry (`hutch ps`, `hutch kill`) until it is gone.
    let _registration = crate::registry::register(&p.sandbox_id, spec, pid, p.cgroup.as_ref())
        .map_err(|e| kill_and_reap(LaunchError::Prepare(e.to_string())))?;
    // Read while pid 1 is still dumpable and ours (it becomes neither).
    let namespaces = status_file.as_ref().map(|_| namespace_inodes(pid));
    write_id_maps(pid, p).map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    let (mut handed, layers_without_idmap) = idmapped_layers(pid, p).map_err(kill_and_reap)?;
    handed.extend(root_only_sources(p).map_err(|e| kill_and_reap(LaunchError::Sys(e)))?);
    let raw: Vec<RawFd> = handed.iter().map(|(_, fd)| fd.as_raw_fd()).collect();
    message::send(
        &sock,
        &Message::Go {
            handed_sources: handed.iter().map(|(i, _)| *i).collect(),
        },
        &raw,
    )
    .map_err(|e| kill_and_reap(LaunchError::Sys(e)))?;
    drop(handed);

    let deadline = spec.limits.wall_clock.map(|d| started + d.0);
    let mut relay = Relay {
        limit: spec.limits.output_bytes.map(|b| b.0),
        written: 0,
        truncated: false,
        captures: [
            opts.capture_bytes.map(Capture::new),
            opts.capture_bytes.map(Capture::new),
        ],
    };
    let mut pipes = [p.stdio.relay_out.take(), p.stdio.relay_err.take()];
    let mut sock_open = true;
    let mut init_done = false;
    let mut timed_out = false;
    let mut setup_error: Option<String> = None;
    let mut exec_error: Option<(String, i32, bool)> = None;
    let mut exited: Option<(i32, Vec<u64>)> = None;
    // Allocated on first output only: most spawns relay nothing.
    let mut buf: Vec<u8> = Vec::new();
    let mut proxy: Option<crate::net::ProxyHandle> = None;

    while !init_done || sock_open || pipes.iter().any(Option::is_some) {
        let timeout = match (deadline, timed_out || init_done) {
            (Some(d), false) => {
                let left = d.saturating_duration_since(Instant::now());
                PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
                    .unwrap_or(PollTimeout::MAX)
            }
            _ => PollTimeout::NONE,
        };
        let mut tags: Vec<u8> = Vec::with_capacity(5);
        let mut pollfds: Vec<PollFd> = Vec::with_capacity(5);
        if !init_done {
            tags.extend([0, 1]);
            pollfds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
            pollfds.push(PollFd::new(signals.as_fd(), PollFlags::POLLIN));
        }
        if sock_open {
            tags.push(2);
            pollfds.push(PollFd::new(sock.as_fd(), PollFlags::POLLIN));
        }
        for (i, pipe) in pipes.iter().enumerate() {
            if let Some(fd) = pipe {
                tags.push(3 + i as u8);
                pollfds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
        }
        match poll(&mut pollfds, timeout) {
            Ok(0) => {
                if deadline.is_some_and(|d| Instant::now() >= d) && !timed_out {
                    timed_out = true;
                    let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                    if let Some(c) = &p.cgroup {
                        c.kill();
                    }
                }
                continue;
            }
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(kill_and_reap(LaunchError::Sys(SysError::new("poll()", e)))),
        }
        let ready: Vec<u8> = tags
            .iter()
            .zip(&pollfds)
            .filter(|(_, pf)| pf.revents().is_some_and(|r| !r.is_empty()))
            .map(|(tag, _)| *tag)
            .collect();
        drop(pollfds);
        for tag in ready {
            match tag {
                0 => {
                    let _ = sys::waitpid(pid, 0);
                    init_done = true;
                }
                1 => {
                    while let Ok(Some(info)) = signals.read_signal() {
                        let _ =
                            sys::pidfd_send_signal(pidfd.as_fd(), info.ssi_signo as libc::c_int);
                    }
                }
                2 => match message::recv(&sock) {
                    Ok(Some((msg, fds))) => match msg {
                        Message::Started { workload_pid } => {
                            if let Some(f) = status_file.as_deref_mut() {
                                write_start_event(
                                    f,
                                    &p.sandbox_id,
                                    pid,
                                    workload_pid,
                                    namespaces.clone().unwrap_or_default(),
                                );
                            }
                        }
                        Message::SetupFailed {
                            what,
                            call,
                            errno,
                            hint,
                        } => {
                            setup_error = Some(setup_line(&what, &call, errno, hint.as_deref()));
                        }
                        Message::ExecFailed {
                            call,
                            errno,
                            interpreter_missing,
                        } => exec_error = Some((call, errno, interpreter_missing)),
                        Message::Exited {
                            wait_status,
                            changed_paths,
                        } => exited = Some((wait_status, changed_paths)),
                        Message::ListenerReady { door } if door == "tcp" => {
                            if let Err(e) = start_proxy(p, fds, &mut proxy) {
                                setup_error.get_or_insert(e);
                                let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                            }
                        }
                        Message::Go { .. } | Message::ListenerReady { .. } => {}
                    },
                    Ok(None) => sock_open = false,
                    Err(e) => {
                        setup_error.get_or_insert_with(|| e.to_string());
                        sock_open = false;
                    }
                },
                t => {
                    let i = (t - 3) as usize;
                    let fd = pipes[i].as_ref().expect("polled");
                    if buf.is_empty() {
                        buf.resize(64 * 1024, 0);
                    }
                    match nix::unistd::read(fd, &mut buf) {
                        Ok(0) => pipes[i] = None,
                        Ok(n) => relay.forward(i, &buf[..n]),
                        Err(Errno::EINTR | Errno::EAGAIN) => {}
                        Err(_) => pipes[i] = None,
                    }
                }
            }
        }
    }

    // Every tunnel closes (and writes its audit line) with the sandbox.
    drop(proxy);
    drop(p.proxy.take());
    let duration_ms = started.elapsed().as_millis() as u64;
    // Every process is gone (the pid namespace died with its init): read
    // the cgroup's counters, then remove the leaf.
    let limits = p.cgroup.take().map(crate::cgroup::Leaf::finish);
    let ended_by = limits.as_ref().and_then(|l| l.ended_by);
    let changes = changes_report(p, exited.as_ref().map(|(_, c)| c.as_slice()));
    let changes = super::report::with_lowers(changes, spec);
    let (status, exit_code, signal, reason, error) = if let Some(line) = setup_error {
        (125, None, None, Outcome::SetupFailed, Some(line))
    } else if let Some((call, errno, interpreter_missing)) = exec_error {
        let errno = Errno::from_raw(errno);
        let code = if !interpreter_missing && matches!(errno, Errno::ENOENT | Errno::ENOTDIR) {
            127
        } else {
            126
        };
        let program = spec.command[0].as_str();
        let line = if code == 127 && !program.contains('/') {
            let path = spec
                .env
                .get("PATH")
                .map_or(crate::spec::DEFAULT_PATH, String::as_str);
            format!("command {program:?} not found in the sandbox's PATH ({path})")
        } else {
            let what = if code == 127 {
                "command not found in the sandbox"
            } else {
                "command not executable in the sandbox"
            };
            let why = if interpreter_missing {
                " (the file exists; its ELF or #! interpreter is missing in the sandbox)"
            } else {
                ""
            };
            format!("{what}: {call} => {errno:?}: {}{why}", errno.desc())
        };
        (code, None, None, Outcome::ExecFailed, Some(line))
    } else if timed_out {
        (124, None, Some(libc::SIGKILL), Outcome::TimedOut, None)
    } else if ended_by == Some("oom-killed") {
        // memory.oom.group: the kernel killed every process, init included.
        let sig = libc::SIGKILL;
        (128 + sig, None, Some(sig), Outcome::OomKilled, None)
    } else if let Some((ws, _)) = exited {
        // A refused fork explains a failure, not a success.
        let pids_hit = ended_by == Some("pids-limit-hit") && ws != 0;
        if libc::WIFEXITED(ws) {
            (
                libc::WEXITSTATUS(ws),
                Some(libc::WEXITSTATUS(ws)),
                None,
                if pids_hit {
                    Outcome::PidsLimitHit
                } else {
                    Outcome::Exited
                },
                None,
            )
        } else {
            let sig = libc::WTERMSIG(ws);
            let reason = if pids_hit {
                Outcome::PidsLimitHit
            } else {
                Outcome::Signaled
            };
            (128 + sig, None, Some(sig), reason, None)
        }
    } else if let Some(mark) = crate::registry::take_kill_mark(&p.sandbox_id) {
        let line = format!("killed by `{}` (uid {})", mark.by, mark.by_uid);
        (
            128 + libc::SIGKILL,
            None,
            Some(libc::SIGKILL),
            Outcome::Signaled,
            Some(line),
        )
    } else {
        (
            125,
            None,
            None,
            Outcome::SetupFailed,
            Some("the sandbox ended before its workload reported an exit status".into()),
        )
    };
    if !opts.quiet {
        for layer in &layers_without_idmap {
            eprintln!(
                "hutch: note: {} is on a filesystem without idmapped mounts; the sandbox \
                 saw it with its host owners, as host uid {}",
                layer.display(),
                p.ids.host_uid
            );
        }
        for c in &changes {
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
    }
    let report = ExitReport {
        event: "exit".into(),
        sandbox_id: p.sandbox_id.clone(),
        status,
        exit_code,
        signal,
        reason,
        error,
        duration_ms,
        output_bytes: relay.written,
        output_truncated: relay.truncated,
        changes,
        enforced: Enforcement {
            limits: limits
                .as_ref()
                .map(|l| serde_json::to_value(l).expect("limits report serializes")),
            layers_without_idmap,
            ..enforcement(p, spec)
        },
        unenforced: limits
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
            .collect(),
    };
    if let Some(f) = status_file {
        let _ = writeln!(
            f,
            "{}",
            serde_json::to_string(&report).expect("report serializes")
        );
    }
    let [out, err] = relay.captures;
    Ok((report, [out.map(Capture::finish), err.map(Capture::finish)]))
}

/// Serve the egress proxy on the Unix door made before clone and the TCP
/// door the sandbox just sent.
fn start_proxy(
    p: &mut Prepared,
    fds: Vec<OwnedFd>,
    slot: &mut Option<crate::net::ProxyHandle>,
) -> Result<(), String> {
    let Some(prep) = p.proxy.as_mut() else {
        return Err("the sandbox sent a proxy listener it was not asked for".into());
    };
    if slot.is_some() {
        return Err("the sandbox sent a second proxy listener".into());
    }
    let [tcp]: [OwnedFd; 1] = fds
        .try_into()
        .map_err(|_| "the proxy listener message carried no single fd".to_string())?;
    let unix = prep
        .unix_door
        .try_clone()
        .map_err(|e| format!("egress proxy: dup of the unix door: {e}"))?;
    let handle = crate::net::spawn(
        prep.policy.clone(),
        vec![(crate::net::Door::Unix, unix), (crate::net::Door::Tcp, tcp)],
        p.sandbox_id.clone(),
        prep.audit.clone(),
    )
    .map_err(|e| format!("starting the egress proxy: {e}"))?;
    *slot = Some(handle);
    // The sandbox reports its TCP door after its root is built, so the Unix
    // door is bind-mounted by now: the host path can go, and nothing is left
    // behind even if the supervisor is SIGKILLed later.
    let _ = std::fs::remove_dir_all(&prep.dir.0);
    Ok(())
}

fn setup_line(what: &str, call: &str, errno: i32, hint: Option<&str>) -> String {
    let mut line = if errno != 0 {
        let e = Errno::from_raw(errno);
        let call = call.split(" => ").next().unwrap_or(call);
        format!("{what}: {call} => {e:?}: {}", e.desc())
    } else {
        format!("{what}: {call}")
    };
    if let Some(h) = hint {
        line.push_str(&format!(" ({h})"));
    }
    line
}

fn write_id_maps(pid: libc::pid_t, p: &Prepared) -> Result<(), SysError> {
    let proc = format!("/proc/{pid}");
    let ids = &p.ids;
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
    p: &Prepared,
) -> Result<(Vec<(usize, OwnedFd)>, Vec<PathBuf>), LaunchError> {
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
        let userns: OwnedFd = if uid == p.ids.inside_uid && gid == p.ids.inside_gid {
            std::fs::File::open(format!("/proc/{pid}/ns/user"))
                .map(OwnedFd::from)
                .map_err(|e| fail(sys::io_err(format!("open(/proc/{pid}/ns/user)"), e)))?
        } else {
            sys::userns_with_maps(
                &format!("{uid} {} 1", p.ids.host_uid),
                &format!("{gid} {} 1", p.ids.host_gid),
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
            Some(userns.as_raw_fd()),
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

/// Root launches: detached copies (made as host root) of the sources only
/// host root may reach, for the sandbox to attach.
fn root_only_sources(p: &Prepared) -> Result<Vec<(usize, OwnedFd)>, SysError> {
    p.handed_sources
        .iter()
        .map(|(index, path)| {
            let c =
                std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
                    .expect("made by hutch: no NUL");
            let fd = sys::openat2(None, &c, libc::O_PATH | libc::O_NOFOLLOW, 0, 0)?;
            Ok((*index, sys::open_tree_clone(fd.as_fd(), false)?))
        })
        .collect()
}

fn changes_report(p: &Prepared, counted: Option<&[u64]>) -> Vec<ChangesReport> {
    let mut out: Vec<ChangesReport> = p
        .tmp_overlay_dests
        .iter()
        .enumerate()
        .map(|(i, dest)| ChangesReport {
            dest: dest.clone(),
            changed_paths: counted.and_then(|c| c.get(i)).copied().unwrap_or(0),
            kept_in: None,
            lowers: Vec::new(),
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
            lowers: Vec::new(),
        });
    }
    out
}

fn enforcement(p: &Prepared, spec: &Spec) -> Enforcement {
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
    let mut capabilities: Vec<String> = p.keep_caps.iter().map(|c| c.to_string()).collect();
    capabilities.sort();
    Enforcement {
        namespaces,
        uid: p.ids.inside_uid,
        gid: p.ids.inside_gid,
        host_uid: p.ids.host_uid,
        host_gid: p.ids.host_gid,
        no_new_privs: true,
        capabilities,
        network: network_name(&spec.network).into(),
        wall_clock_ms: spec.limits.wall_clock.map(|d| d.0.as_millis() as u64),
        output_bytes: spec.limits.output_bytes.map(|b| b.0),
        confinement: serde_json::to_value(p.confinement.report()).ok(),
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
