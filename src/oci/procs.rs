//! Which host processes are a container's, and signalling every one of
//! them: `kill --all`, `delete` and `ps` (docs/oci.md, "Processes of a
//! container").
//!
//! A process is the container's when any of these holds:
//! - it is in the container's cgroup (when hutch-oci made one);
//! - the container has a pid namespace of its own and the process is in
//!   it, or in a pid namespace nested in it (a process never leaves its
//!   pid namespace);
//! - its mount namespace is the container's. hutch init makes one unless
//!   the config joins one by path (then the namespace is never used: other
//!   processes live in it), and a process leaves its mount namespace only
//!   with `CAP_SYS_ADMIN` (setns, unshare), which podman's and hutch's
//!   default capability sets do not give.
//!
//! Parentage, sessions and process groups are not used: a daemon escapes
//! them (`setsid`, a double fork, reparenting to the host's pid 1).
//!
//! The mount namespace is named by its 64-bit id (`NS_GET_MNTNS_ID`,
//! Linux 6.10), recorded at `create`: ids are never reused, so the record
//! still names the container's namespace once hutch init is gone (the
//! orphans of a container without a pid namespace). Before 6.10 the
//! namespace is named by its nsfs inode, and only while hutch init is
//! alive: hutch init pins the namespace, so the inode cannot be reused
//! meanwhile; afterwards it could be, and a reused inode would name
//! another container's processes, so none are taken.
//!
//! Against pid reuse every candidate is pinned by a pidfd first,
//! identified through `/proc/PID` after, and signalled through the pidfd:
//! if the pinned process ended before it was identified, its pid may name
//! another process in `/proc`, but the signal goes to the pinned one,
//! which is gone (ESRCH).

use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::OciError;
use super::record::Record;
use crate::sys;

/// `/proc/PID/stat` field 22 (start time in clock ticks), if the process
/// exists and is not a zombie.
pub fn start_time(pid: i32) -> Option<u64> {
    let mut buf = String::new();
    std::fs::File::open(format!("/proc/{pid}/stat"))
        .ok()?
        .take(4096)
        .read_to_string(&mut buf)
        .ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it follow the last ')'.
    let rest = &buf[buf.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state).
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// How long `delete` and `kill --all` go on finding and signalling
/// processes (a container that forks as fast as it is killed).
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Pid namespaces nest at most 32 deep (the kernel's MAX_PID_NS_LEVEL).
const MAX_PID_NS_DEPTH: usize = 33;

/// A namespace by its nsfs device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NsInode {
    dev: u64,
    ino: u64,
}

fn ns_inode(path: &str) -> Option<NsInode> {
    let m = std::fs::metadata(path).ok()?;
    Some(NsInode {
        dev: m.dev(),
        ino: m.ino(),
    })
}

fn fd_inode(fd: BorrowedFd<'_>) -> Option<NsInode> {
    let st = rustix::fs::fstat(fd).ok()?;
    Some(NsInode {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// The container's mount namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MntNs {
    /// By its never-reused id.
    Id(u64),
    /// By its inode, while hutch init pins it (kernels before 6.10).
    Inode(NsInode),
}

/// The id of `pid`'s mount namespace (`NS_GET_MNTNS_ID`); None if the
/// process is gone, a zombie, not ours to inspect, or the kernel is older
/// than 6.10.
pub fn mnt_ns_id(pid: i32) -> Option<u64> {
    let ns: OwnedFd = std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
        .ok()?
        .into();
    sys::raw::mnt_ns_id(ns.as_fd()).ok()
}

/// The id of hutch init's mount namespace to record at `create`: only
/// when it is not hutch-oci's own (it never is: hutch init always makes
/// one).
pub fn container_mnt_ns_id(init: i32) -> Option<u64> {
    let theirs = mnt_ns_id(init)?;
    (Some(theirs) != mnt_ns_id(sys::getpid())).then_some(theirs)
}

/// What identifies a container's processes (module docs).
pub struct Members {
    /// hutch init, pinned, while it is the container's.
    init: Option<(i32, OwnedFd)>,
    mnt: Option<MntNs>,
    /// The container's own pid namespace (hutch init alive, and not in
    /// hutch-oci's pid namespace).
    pid_ns: Option<NsInode>,
    own_pid_ns: Option<NsInode>,
    cgroup: Option<PathBuf>,
    own_pid: i32,
}

/// One process found: its pid, start time, and a pidfd pinning it.
pub struct Found {
    pub pid: i32,
    start: u64,
    pidfd: OwnedFd,
}

impl Members {
    /// The identification of `r`'s processes, read now.
    pub fn of(r: &Record) -> Members {
        let own_pid = sys::getpid();
        let init = sys::raw::pidfd_open(r.pid)
            .ok()
            .filter(|_| r.pid > 0 && start_time(r.pid) == Some(r.start_time))
            .map(|fd| (r.pid, fd));
        let own_mnt = ns_inode("/proc/self/ns/mnt");
        let own_pid_ns = ns_inode("/proc/self/ns/pid");
        let mut mnt = r.mnt_ns.map(MntNs::Id);
        let mut pid_ns = None;
        if let Some((pid, _)) = &init {
            if mnt.is_none() && !r.mnt_ns_joined {
                let by_inode = ns_inode(&format!("/proc/{pid}/ns/mnt"))
                    .filter(|ns| Some(*ns) != own_mnt)
                    .map(MntNs::Inode);
                mnt = container_mnt_ns_id(*pid).map(MntNs::Id).or(by_inode);
            }
            pid_ns = ns_inode(&format!("/proc/{pid}/ns/pid")).filter(|ns| Some(*ns) != own_pid_ns);
        }
        // Whatever pinned init's namespaces, check it is still the
        // container's: a namespace read from a reused pid names nothing.
        if init.is_some() && start_time(r.pid) != Some(r.start_time) {
            return Members {
                init: None,
                mnt: r.mnt_ns.map(MntNs::Id),
                pid_ns: None,
                own_pid_ns,
                cgroup: r.cgroup.clone(),
                own_pid,
            };
        }
        Members {
            init,
            mnt,
            pid_ns,
            own_pid_ns,
            cgroup: r.cgroup.clone(),
            own_pid,
        }
    }

    fn in_mnt_ns(&self, pid: i32) -> bool {
        match self.mnt {
            Some(MntNs::Id(id)) => mnt_ns_id(pid) == Some(id),
            Some(MntNs::Inode(ns)) => ns_inode(&format!("/proc/{pid}/ns/mnt")) == Some(ns),
            None => false,
        }
    }

    /// In the container's pid namespace or one nested in it.
    fn in_pid_ns(&self, pid: i32) -> bool {
        let Some(target) = self.pid_ns else {
            return false;
        };
        let path = format!("/proc/{pid}/ns/pid");
        match ns_inode(&path) {
            Some(ns) if ns == target => return true,
            // hutch-oci's own namespace is no descendant of the
            // container's (the common case: a host process).
            Some(ns) if Some(ns) == self.own_pid_ns => return false,
            None => return false,
            Some(_) => {}
        }
        let Ok(file) = std::fs::File::open(&path) else {
            return false;
        };
        let mut ns: OwnedFd = file.into();
        for _ in 0..MAX_PID_NS_DEPTH {
            match sys::raw::ns_parent(ns.as_fd()) {
                Ok(parent) => ns = parent,
                // EPERM: the parent is outside hutch-oci's namespace.
                Err(_) => return false,
            }
            if fd_inode(ns.as_fd()) == Some(target) {
                return true;
            }
        }
        false
    }

    fn is_member(&self, pid: i32, cgroup_procs: &BTreeSet<i32>) -> bool {
        cgroup_procs.contains(&pid) || self.in_pid_ns(pid) || self.in_mnt_ns(pid)
    }

    /// Every live process of the container now (hutch init included),
    /// each pinned by a pidfd. Processes hutch-oci may not inspect are not
    /// the container's: they are another user's.
    pub fn find(&self) -> Result<Vec<Found>, OciError> {
        let cgroup_procs: BTreeSet<i32> = match &self.cgroup {
            Some(dir) => crate::cgroup::tree::Cgroup::new(dir)
                .procs()
                .into_iter()
                .collect(),
            None => BTreeSet::new(),
        };
        let entries =
            std::fs::read_dir("/proc").map_err(OciError::io("reading /proc".to_string()))?;
        let mut found = Vec::new();
        for entry in entries {
            let Some(pid) = entry
                .ok()
                .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
            else {
                continue;
            };
            if pid == self.own_pid {
                continue;
            }
            // Pinned before it is identified (module docs).
            let Ok(pidfd) = sys::raw::pidfd_open(pid) else {
                continue;
            };
            let is_init = self.init.as_ref().is_some_and(|(p, _)| *p == pid);
            if !is_init && !self.is_member(pid, &cgroup_procs) {
                continue;
            }
            let Some(start) = start_time(pid) else {
                continue;
            };
            found.push(Found { pid, start, pidfd });
        }
        Ok(found)
    }

    /// The host pids of the container's processes, sorted (`ps`).
    pub fn pids(&self) -> Result<Vec<i32>, OciError> {
        let mut pids: Vec<i32> = self.find()?.iter().map(|f| f.pid).collect();
        pids.sort_unstable();
        Ok(pids)
    }

    fn is_init(&self, f: &Found) -> bool {
        self.init.as_ref().is_some_and(|(p, _)| *p == f.pid)
    }

    /// `kill --all SIGNAL`: `signal` to every process of the container,
    /// found again until a pass finds none it has not signalled (one
    /// forked during a pass is found by the next). hutch init forwards
    /// what it receives to the workload, so it gets the signal only when
    /// no other process is left (a created container): the workload never
    /// gets it twice. SIGKILL goes to every process and is waited for
    /// ([`Members::kill_all`]).
    pub fn signal_all(&self, id: &str, signal: i32) -> Result<(), OciError> {
        if signal == libc::SIGKILL {
            return self.kill_all(id);
        }
        let deadline = Instant::now() + DEADLINE;
        let mut signalled: BTreeSet<(i32, u64)> = BTreeSet::new();
        loop {
            let found = self.find()?;
            let others: Vec<&Found> = found.iter().filter(|f| !self.is_init(f)).collect();
            let targets: Vec<&Found> = if others.is_empty() {
                found.iter().collect()
            } else {
                others
            };
            let fresh: Vec<&&Found> = targets
                .iter()
                .filter(|f| !signalled.contains(&(f.pid, f.start)))
                .collect();
            if fresh.is_empty() {
                return Ok(());
            }
            for f in fresh {
                // ESRCH: it ended meanwhile.
                let _ = sys::raw::pidfd_send_signal(f.pidfd.as_fd(), signal);
                signalled.insert((f.pid, f.start));
            }
            if Instant::now() >= deadline {
                return Err(OciError::Survivors {
                    id: id.into(),
                    what: format!("signal {signal}: new processes kept appearing"),
                    pids: Vec::new(),
                    secs: DEADLINE.as_secs(),
                });
            }
        }
    }

    /// SIGKILL every process of the container and wait until a pass finds
    /// none (a fork during a pass is found by the next), within
    /// [`DEADLINE`].
    pub fn kill_all(&self, id: &str) -> Result<(), OciError> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let found = self.find()?;
            if found.is_empty() {
                return Ok(());
            }
            for f in &found {
                let _ = sys::raw::pidfd_send_signal(f.pidfd.as_fd(), libc::SIGKILL);
            }
            let mut left = Vec::new();
            for f in &found {
                if !wait_exit(f.pidfd.as_fd(), deadline) {
                    left.push(f.pid);
                }
            }
            if !left.is_empty() || Instant::now() >= deadline {
                return Err(OciError::Survivors {
                    id: id.into(),
                    what: "SIGKILL".into(),
                    pids: left,
                    secs: DEADLINE.as_secs(),
                });
            }
        }
    }
}

/// Wait until the process of `pidfd` has exited (its pidfd is readable),
/// at most until `deadline`.
fn wait_exit(pidfd: BorrowedFd<'_>, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match sys::raw::poll_one(pidfd, libc::POLLIN, left.as_millis() as i32) {
            Ok(r) if r != 0 => return true,
            Err(sys::Errno::EINTR) => continue,
            _ if Instant::now() < deadline => continue,
            _ => return false,
        }
    }
}
