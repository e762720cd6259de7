//! The post-clone path, quarantined here. Everything it uses was prepared
//! by the supervisor before clone; the process is a copy of a
//! single-threaded parent, so it may still allocate.
//!
//! Fixed order in the sandbox's pid 1 ("hutch init"):
//!  1. PDEATHSIG(SIGKILL), close the supervisor's socket end, new session.
//!  2. Wait for `Go` (id maps written; detached mounts of what the
//!     supervisor prepared itself attached as fds: idmapped layers, and
//!     sources only host root may reach).
//!  3. `/` made a slave mount; every host source opened (with the
//!     launching user's filesystem identity).
//!  4. Switch to the sandbox's uid/gid (root launches: clear groups too);
//!     PDEATHSIG again (a credential change clears it).
//!  5. Lock nested user namespaces: `user.max_user_namespaces = 0` in the
//!     sandbox's own user namespace.
//!  6. Build the new root on a tmpfs (fs ops in order), `pivot_root`,
//!     detach the old root.
//!  7. Hostname; `lo` up.
//!  8. rlimits (RLIMIT_CORE = 0).
//!  9. Non-dumpable; signals blocked; start the workload (vfork-style: it
//!     shares init's memory until its execve, so init waits until then);
//!     report `Started` (when a status file wants the start event).
//! 10. Close every fd it does not need; reap and forward signals until the
//!     workload ends; kill what is left; count changes; report `Exited`.
//!
//! The workload, in order: default signal dispositions and an empty mask,
//! `setsid`, stdio, close every other fd (close-on-exec), `chdir`,
//! no-new-privs, drop capabilities, confinement (Landlock, then seccomp
//! last), `execve`.

use std::convert::Infallible;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::sys::signal::{SigSet, Signal};

use super::message::{self, Message};
use super::prepare::Prepared;
use super::real_fs::RealFs;
use crate::fs;
use crate::sys::{self, Errno, SysError};

/// Signals pid 1 forwards to the workload.
pub const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The sandbox's pid 1. Never returns.
pub fn sandbox_main(p: &Prepared, sock: OwnedFd, parent_end: RawFd) -> ! {
    // A setup failure is reported to the supervisor and ends the sandbox.
    let fail = |what: &str, err: SysError, hint: Option<&str>| -> ! {
        let _ = message::send(
            &sock,
            &Message::SetupFailed {
                what: what.to_string(),
                call: err.call.clone(),
                errno: err.errno as i32,
                hint: hint.map(str::to_string),
            },
            &[],
        );
        sys::exit_now(125)
    };
    if let Err(e) = sys::set_pdeathsig(libc::SIGKILL) {
        fail("setting the parent-death signal", e, None);
    }
    sys::close(parent_end);
    if let Err(e) = sys::setsid() {
        fail("starting a new session", e, None);
    }

    let handed = match message::recv(&sock) {
        Ok(Some((Message::Go { handed_sources }, fds))) if fds.len() == handed_sources.len() => {
            handed_sources
                .into_iter()
                .zip(fds)
                .collect::<Vec<(usize, OwnedFd)>>()
        }
        // The supervisor went away or spoke nonsense: nothing to report to.
        _ => sys::exit_now(125),
    };

    let mut real = RealFs;
    let sources = match fs::open_sources(&mut real, &p.plan) {
        Ok(s) => s,
        Err(e) => fail(&e.what, e.err, e.hint),
    };
    if let Err(e) = switch_identity(p) {
        fail("switching to the sandbox's user", e, None);
    }
    // Changing credentials cleared the parent-death signal: set it again,
    // then make sure the supervisor did not die in between.
    if let Err(e) = sys::set_pdeathsig(libc::SIGKILL) {
        fail("setting the parent-death signal", e, None);
    }
    if sys::peer_hung_up(sock.as_fd()) {
        sys::exit_now(125);
    }
    if let Err(e) = lock_nested_userns() {
        fail(
            "locking nested user namespaces",
            e,
            Some("the sandbox's /proc/sys/user must be writable by its own root"),
        );
    }
    let handed_raw: Vec<(usize, RawFd)> =
        handed.iter().map(|(i, fd)| (*i, fd.as_raw_fd())).collect();
    let built = match fs::build(&mut real, &p.plan, sources, &handed_raw, &p.op_names) {
        Ok(b) => b,
        Err(e) => fail(&e.what, e.err, e.hint),
    };
    drop(handed);

    if let Some(name) = &p.hostname
        && let Err(e) = sys::sethostname(name)
    {
        fail("setting the hostname", e, None);
    }
    if p.net_namespace
        && let Err(e) = crate::net::loopback::bring_up_lo()
    {
        fail("bringing up lo", e, None);
    }
    if p.proxy.is_some() {
        // The egress proxy's TCP door lives in this namespace and is served
        // by the supervisor; it listens before the workload exists.
        let door = match crate::net::tcp_door_in_current_netns() {
            Ok(fd) => fd,
            Err(e) => fail("creating the egress proxy listener", e, None),
        };
        let ready = Message::ListenerReady { door: "tcp".into() };
        if let Err(e) = message::send(&sock, &ready, &[door.as_raw_fd()]) {
            fail("handing the egress proxy listener over", e, None);
        }
    }
    for (resource, value) in &p.rlimits {
        if let Err(e) = sys::setrlimit(*resource, *value) {
            fail("setting resource limits", e, None);
        }
    }
    if let Err(e) = sys::set_dumpable(false) {
        fail("making hutch init non-dumpable", e, None);
    }

    let mut blocked = SigSet::empty();
    blocked.add(Signal::SIGCHLD);
    for s in FORWARDED {
        blocked.add(s);
    }
    if let Err(e) = blocked.thread_block() {
        fail(
            "blocking signals",
            SysError::new("sigprocmask(SIG_BLOCK)", e),
            None,
        );
    }

    // SAFETY: this process is single-threaded (a copy of the single-threaded
    // supervisor's calling thread); workload_main only reads `p`, ends in
    // execve or _exit, and allocates nothing init uses afterwards.
    let workload =
        match unsafe { sys::spawn_vfork(&mut || -> Infallible { workload_main(p, &sock) }) } {
            Ok(pid) => pid,
            Err(e) => fail("starting the workload", e, None),
        };
    if p.report_started {
        let _ = message::send(
            &sock,
            &Message::Started {
                workload_pid: workload,
            },
            &[],
        );
    }

    // Keep only the socket and the uppers to count; stdio relays and any
    // host fd are the workload's business, not init's.
    let mut keep: Vec<RawFd> = built.tmp_upper_fds.clone();
    keep.push(sock.as_raw_fd());
    sys::close_all_except(&keep);
    // From here on init only reaps, forwards signals, reports and counts
    // changes: a minimal filter (seccomp/init.json) the workload never had.
    if let Err(e) = p.confinement.apply_init() {
        fail("confining hutch init (seccomp)", e, None);
    }
    init_loop(workload, blocked, &sock, &built.tmp_upper_fds)
}

fn switch_identity(p: &Prepared) -> Result<(), SysError> {
    if p.ids.clear_groups {
        sys::clear_groups()?;
    }
    sys::setresgid(p.ids.inside_gid)?;
    sys::setresuid(p.ids.inside_uid)
}

/// With the limit at 0 in the sandbox's own user namespace, no process in
/// it can create another (the count is checked at every ancestor level),
/// and without CAP_SYS_RESOURCE the workload cannot raise it again.
fn lock_nested_userns() -> Result<(), SysError> {
    std::fs::write("/proc/sys/user/max_user_namespaces", b"0").map_err(|e| {
        SysError::new(
            "write(\"/proc/sys/user/max_user_namespaces\", \"0\")",
            Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })
}

fn init_loop(workload: libc::pid_t, set: SigSet, sock: &OwnedFd, uppers: &[RawFd]) -> ! {
    let mut status = None;
    while status.is_none() {
        let Ok(sig) = set.wait() else { continue };
        if sig != Signal::SIGCHLD {
            let _ = sys::kill(workload, sig as libc::c_int);
            continue;
        }
        loop {
            match sys::waitpid(-1, libc::WNOHANG) {
                Ok(Some((pid, st))) if pid == workload => status = Some(st),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
    // The workload is gone: nothing else in the sandbox may outlive it.
    let _ = sys::kill(-1, libc::SIGKILL);
    while let Ok(Some(_)) = sys::waitpid(-1, 0) {}
    let changed_paths = uppers
        .iter()
        // SAFETY: these fds were opened by the builder and kept open.
        .map(|fd| fs::count::changed_paths(unsafe { BorrowedFd::borrow_raw(*fd) }))
        .collect();
    let _ = message::send(
        sock,
        &Message::Exited {
            wait_status: status.unwrap_or(0),
            changed_paths,
        },
        &[],
    );
    sys::exit_now(0)
}

/// The workload, between clone and execve, on its own stack over init's
/// memory ([`sys::spawn_vfork`]). Never returns.
fn workload_main(p: &Prepared, sock: &OwnedFd) -> ! {
    let fail = |what: &str, err: SysError| -> ! {
        let _ = message::send(
            sock,
            &Message::SetupFailed {
                what: what.to_string(),
                call: err.call.clone(),
                errno: err.errno as i32,
                hint: None,
            },
            &[],
        );
        sys::exit_now(125)
    };
    sys::reset_signals(p.non_default_signals);
    if let Err(e) = sys::setsid() {
        fail("starting the workload's session", e);
    }
    for (from, to) in &p.stdio.dup {
        if let Err(e) = sys::dup2(*from, *to) {
            fail("setting up stdio", e);
        }
    }
    // The socket stays open (close-on-exec) to report an execve failure.
    if let Err(e) = sys::close_range(3, sys::CLOSE_RANGE_CLOEXEC) {
        fail("closing inherited file descriptors", e);
    }
    if let Err(e) = sys::chdir(&p.cwd) {
        fail("entering the working directory", e);
    }
    if let Err(e) = sys::set_no_new_privs() {
        fail("setting no-new-privs", e);
    }
    if let Err(e) = crate::confine::caps::drop_all_except(&p.keep_caps, p.cap_last_cap) {
        fail("dropping capabilities", e);
    }
    // Landlock, then seccomp: the very last steps before execve.
    match p.confinement.apply_workload() {
        Ok(()) => {}
        Err(crate::confine::ConfineError::Landlock(e)) => fail("enforcing Landlock", e),
        Err(crate::confine::ConfineError::Seccomp(e)) => fail("installing the seccomp filter", e),
        Err(other) => fail(
            &other.to_string(),
            SysError::new("confine::apply_workload", Errno::EINVAL),
        ),
    }
    exec(p, sock)
}

fn exec(p: &Prepared, sock: &OwnedFd) -> ! {
    let mut reported: Option<SysError> = None;
    let mut interpreter_missing = false;
    for candidate in &p.exec.candidates {
        let err = sys::execve(candidate, &p.exec.argv_ptrs, &p.exec.envp_ptrs);
        // ENOENT for a file that exists: its ELF or #! interpreter is what
        // is missing, a "cannot execute" rather than a "not found".
        let missing_interpreter = err.errno == Errno::ENOENT && sys::exists(candidate);
        // Like execvp: a missing candidate moves on; any other error is
        // the one worth reporting.
        let keep = match &reported {
            None => true,
            Some(r) => {
                r.errno == Errno::ENOENT
                    && !interpreter_missing
                    && (missing_interpreter || !matches!(err.errno, Errno::ENOENT | Errno::ENOTDIR))
            }
        };
        if keep {
            interpreter_missing = missing_interpreter;
            reported = Some(err);
        }
    }
    let err = reported
        .unwrap_or_else(|| SysError::new(format!("execve({:?})", cmd_name(p)), Errno::ENOENT));
    let _ = message::send(
        sock,
        &Message::ExecFailed {
            call: err.call.clone(),
            errno: err.errno as i32,
            interpreter_missing,
        },
        &[],
    );
    sys::exit_now(
        if !interpreter_missing && matches!(err.errno, Errno::ENOENT | Errno::ENOTDIR) {
            127
        } else {
            126
        },
    )
}

fn cmd_name(p: &Prepared) -> &CStr {
    p.exec.argv.first().map(|c| c.as_c_str()).unwrap_or(c"")
}
