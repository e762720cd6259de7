//! One more process in a running sandbox (the OCI runtime's `exec`): it
//! enters the namespaces of the sandbox's hutch init and goes through the
//! workload's own steps ([`crate::launch::child::workload`]: session, stdio,
//! working directory, ids, capabilities, no-new-privs, Landlock, seccomp,
//! execve) from a plan prepared from the same Spec.
//!
//! The calling process keeps its own namespaces (its files stay the
//! host's): a first child enters the sandbox's namespaces and forks the
//! process that runs (so that it is inside the sandbox's pid namespace),
//! reports its pid and exits. The process is then an orphan: it goes to
//! the nearest subreaper (the engine's conmon or shim, or the caller when
//! it made itself one to wait).

use std::os::fd::{AsFd, OwnedFd};

use crate::launch::error::{LaunchError, PrepareError};
use crate::launch::options::WorkloadStdio;
use crate::launch::prepare::prepare_with;
use crate::launch::wire::message::{self, Incoming};
use crate::spec::Spec;
use crate::sys::{self, Forked};

/// Namespace kinds in the order they are entered (user first: the others
/// are owned by it).
const KINDS: &[(&str, libc::c_int)] = &[
    ("user", libc::CLONE_NEWUSER),
    ("mnt", libc::CLONE_NEWNS),
    ("pid", libc::CLONE_NEWPID),
    ("ipc", libc::CLONE_NEWIPC),
    ("uts", libc::CLONE_NEWUTS),
    ("net", libc::CLONE_NEWNET),
    ("cgroup", libc::CLONE_NEWCGROUP),
];

/// How to exec.
pub struct ExecOptions {
    /// A connected Unix socket: the process gets a new terminal of the
    /// sandbox's devpts as stdio and controlling terminal, its master goes
    /// here.
    pub console: Option<OwnedFd>,
    /// The sandbox's cgroup (an OCI container's `cgroupsPath`): the
    /// process is cloned into it, so that its limits bind it too.
    pub cgroup: Option<OwnedFd>,
    /// The same on cgroup v1: (controller, directory) per hierarchy; this
    /// process enters them around the clone.
    pub cgroup_v1: Vec<(&'static str, std::path::PathBuf)>,
}

fn inode(path: &str) -> Option<u64> {
    std::fs::metadata(path)
        .ok()
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
}

/// Start `spec.command` in the sandbox whose hutch init is `init_pid`
/// (in the caller's pid namespace); returns the process's pid once its
/// execve succeeded, or the step that failed. The caller must be
/// single-threaded.
pub fn exec(
    spec: &Spec,
    init_pid: libc::pid_t,
    opts: ExecOptions,
) -> Result<libc::pid_t, LaunchError> {
    let mut p = prepare_with(spec, false, WorkloadStdio::Inherit, false)?;
    let status = sys::self_status();
    if status.threads != 1 {
        return Err(LaunchError::MultiThreaded(status.threads));
    }
    p.child.command.non_default_signals = status.non_default_signals;
    p.child.command.controlling_tty = opts.console.is_some();
    // Its parent is a short-lived intermediate (the double fork below),
    // not a supervisor: a parent-death signal armed before that one exits
    // would kill the new process at random (as runc, an exec'd process
    // lives as long as the container, not as its launcher).
    p.child.detached = true;
    // The namespaces that are not already ours.
    let mut joins: Vec<(&str, libc::c_int, OwnedFd)> = Vec::new();
    for (kind, ty) in KINDS {
        let theirs = format!("/proc/{init_pid}/ns/{kind}");
        if inode(&theirs) == inode(&format!("/proc/self/ns/{kind}")) {
            continue;
        }
        let fd = std::fs::File::open(&theirs)
            .map_err(|e| LaunchError::Sys(sys::io_err(format!("open({theirs:?})"), e)))?;
        joins.push((kind, *ty, fd.into()));
    }
    let own_userns = joins.iter().any(|(k, _, _)| *k == "user");
    let (report_r, report_w) = sys::socket::seqpacket_pair()?;
    let (pid_r, pid_w) = sys::socket::seqpacket_pair()?;
    let cgroup_fd = opts.cgroup.as_ref().map(|f| f.as_fd());
    let v1 = (!opts.cgroup_v1.is_empty()).then(|| {
        crate::cgroup::v1::V1Leaf::adopt(
            &crate::cgroup::host::HostCgroups::detect(),
            opts.cgroup_v1.clone(),
        )
    });
    if let Some(v1) = &v1 {
        v1.enter()
            .map_err(|(path, e)| LaunchError::Sys(sys::io_err(format!("write({path:?})"), e)))?;
    }
    // SAFETY: the process is single-threaded (checked above).
    let forked = unsafe { sys::clone3(0, cgroup_fd) };
    if let (Some(v1), false) = (&v1, matches!(forked, Ok(Forked::Child))) {
        // The child keeps the groups; this process goes back. A failure
        // leaves only this short-lived waiter counted in them; the
        // process runs either way.
        let _ = v1.leave();
    }
    match forked {
        Ok(Forked::Child) => {
            drop(report_r);
            drop(pid_r);
            let code = (|| -> Result<(), sys::Errno> {
                // Not dumpable before the first setns, until the
                // workload's execve resets it (CVE-2019-5736): no process
                // of the container may ptrace this one, read its memory
                // or open its /proc/PID/exe or fds (which include the
                // host's cgroup directory).
                sys::raw::set_dumpable(false)?;
                for (_, ty, fd) in &joins {
                    sys::raw::setns(fd.as_fd(), *ty)?;
                }
                if own_userns && let Some((uid, gid)) = p.child.ids.init_ids {
                    sys::raw::setresgid(gid)?;
                    sys::raw::setresuid(uid)?;
                }
                for (resource, value) in &p.child.rlimits {
                    sys::raw::setrlimit(*resource, *value)?;
                }
                // SAFETY: still single-threaded (a copy of the caller's
                // one thread).
                match unsafe { sys::clone3(0, None) }.map_err(|e| e.errno)? {
                    Forked::Child => {
                        drop(pid_w);
                        if let Some(console) = &opts.console {
                            let (master, peer) = sys::raw::open_pty(c"/dev/ptmx")?;
                            sys::raw::send_fd(console.as_fd(), b"/dev/ptmx", master.as_fd())?;
                            for target in 0..3 {
                                sys::raw::dup2(peer.as_fd(), target)?;
                            }
                        }
                        let failure = crate::launch::child::workload(
                            &mut crate::launch::child::real_sys::RealSys,
                            &p.child,
                            report_w.as_fd(),
                        );
                        message::send_failure(report_w.as_fd(), &failure, None);
                        sys::exit_now(failure.exit_status())
                    }
                    Forked::Parent { pid, .. } => {
                        let _ = sys::raw::write_all(pid_w.as_fd(), &pid.to_le_bytes());
                        Ok(())
                    }
                }
            })();
            sys::exit_now(if code.is_ok() { 0 } else { 125 })
        }
        Ok(Forked::Parent { pid: first, .. }) => {
            drop(report_w);
            drop(pid_w);
            let reaped = sys::raw::waitpid(first, 0);
            let ok = matches!(reaped, Ok(Some((_, s))) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0);
            let mut buf = [0u8; 4];
            let n = sys::raw::read(pid_r.as_fd(), &mut buf).unwrap_or(0);
            if !ok || n != 4 {
                return Err(PrepareError::EnterNamespaces { init_pid }.into());
            }
            let pid = i32::from_le_bytes(buf);
            // A failure record, or the end (the socket closed on execve).
            match message::recv(&report_r) {
                Ok(None) => Ok(pid),
                Ok(Some(Incoming::Failure(f, _))) => {
                    // Reap it when it came to us (a subreaper caller): a
                    // zombie of the sandbox's pid namespace would keep its
                    // hutch init from ever ending.
                    let _ = sys::raw::waitpid(pid, 0);
                    Err(LaunchError::Setup {
                        stage: f.stage,
                        errno: f.errno,
                        exit_status: f.exit_status(),
                        line: format!("{} failed: {}", f.stage.what(), f.errno.desc()),
                    })
                }
                Ok(Some(Incoming::Message(..))) => Ok(pid),
                Err(e) => Err(PrepareError::Message(e).into()),
            }
        }
        Err(e) => Err(LaunchError::clone_failed(e)),
    }
}
