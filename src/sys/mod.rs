//! The only place with raw syscalls, in one set of thin wrappers.
//!
//! [`raw`] is that set: every syscall once, returning the bare [`Errno`],
//! allocation-free and async-signal-safe, so a forked child of a
//! multi-threaded process (the probes of `hutch check`) and the vfork'd
//! workload (which shares its parent's heap) may call it. The functions at
//! this module's top level are the same calls whose errors read like the
//! call that failed, e.g. `mount("/a", "/b") => EPERM: Operation not
//! permitted` (they allocate that text only on failure). Nothing here
//! knows hutch concepts.

mod caps;
mod cgroup;
mod fdio;
pub mod image;
mod landlock;
mod loopdev;
mod mount;
mod net;
mod privilege;
mod process;
// Also the egress proxy's (tokio is always a dependency).
pub mod reactor;
mod rlimit;
mod sealed_exe;
mod seccomp;
pub mod socket;
pub use socket::peer_hung_up;
mod tty;
mod walk;

/// Every syscall wrapper, allocation-free: results carry the bare errno.
pub mod raw {
    pub use super::caps::raw::*;
    pub use super::landlock::raw::*;
    pub use super::mount::raw::*;
    pub use super::net::raw::*;
    pub use super::process::raw::*;
    pub use super::seccomp::raw::*;
    pub use super::socket::raw::*;
    pub use super::tty::raw::*;
}

use std::ffi::CStr;
use std::fmt;

pub use caps::*;
pub use cgroup::*;
pub use fdio::*;
pub use landlock::*;
pub use loopdev::*;
pub use mount::*;
pub use net::*;
pub use privilege::*;
pub use process::*;
pub use rlimit::*;
pub use sealed_exe::ensure_sealed;
pub use seccomp::*;
pub use tty::setns;
pub use walk::*;

pub use nix::errno::Errno;

/// A failed syscall: the call as written (with its arguments) and the errno.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SysError {
    pub call: String,
    pub errno: Errno,
}

impl SysError {
    pub fn new(call: impl Into<String>, errno: Errno) -> Self {
        SysError {
            call: call.into(),
            errno,
        }
    }

    /// The errno of the last failed libc call.
    pub fn last(call: impl Into<String>) -> Self {
        SysError::new(call, Errno::last())
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} => {:?}: {}",
            self.call,
            self.errno,
            self.errno.desc()
        )
    }
}

/// Quote a path or string for a call description.
pub fn q(s: &CStr) -> String {
    format!("{:?}", s.to_string_lossy())
}

/// A libc return value as a Result with the bare errno.
pub(crate) fn ret(r: libc::c_long) -> Result<libc::c_long, Errno> {
    if r < 0 { Err(Errno::last()) } else { Ok(r) }
}

/// Turn a libc return value into a Result.
pub(crate) fn check(
    ret: libc::c_long,
    call: impl FnOnce() -> String,
) -> Result<libc::c_long, SysError> {
    if ret < 0 {
        Err(SysError::last(call()))
    } else {
        Ok(ret)
    }
}

/// What the launcher needs from /proc/self/status, read once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SelfStatus {
    /// Threads of this process (0 when unknown).
    pub threads: usize,
    /// Signals whose disposition is not SIG_DFL (ignored or caught), bit
    /// N-1 for signal N; every signal when unknown.
    pub non_default_signals: u64,
}

/// Read [`SelfStatus`] from /proc/self/status (the thread count falls back
/// to counting /proc/self/task; the signal set to "every signal").
pub fn self_status() -> SelfStatus {
    let mut status = SelfStatus {
        threads: 0,
        non_default_signals: u64::MAX,
    };
    // One open and one or two reads: the file is about 1.5 KiB.
    let mut buf = [0u8; 8192];
    let mut len = 0;
    if let Ok(mut f) = std::fs::File::open("/proc/self/status") {
        use std::io::Read;
        while len < buf.len() {
            match f.read(&mut buf[len..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
        }
    }
    let (mut ign, mut cgt) = (None, None);
    for line in buf[..len].split(|b| *b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if let Some(n) = line.strip_prefix("Threads:") {
            status.threads = n.trim().parse().unwrap_or(0);
        } else if let Some(m) = line.strip_prefix("SigIgn:") {
            ign = u64::from_str_radix(m.trim(), 16).ok();
        } else if let Some(m) = line.strip_prefix("SigCgt:") {
            cgt = u64::from_str_radix(m.trim(), 16).ok();
        }
    }
    if let (Some(ign), Some(cgt)) = (ign, cgt) {
        status.non_default_signals = ign | cgt;
    }
    if status.threads == 0 {
        status.threads = thread_count();
    }
    status
}

/// Read a procfs or sysfs text file. These report size 0, so
/// `fs::read_to_string` starts with 32-byte reads and each read makes the
/// kernel regenerate the text up to that offset; one buffer sized for the
/// usual case reads them in one or two calls (they are on the spawn path).
pub fn read_proc(path: impl AsRef<std::path::Path>) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(16 * 1024);
    std::fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Number of threads of this process. procfs gives a task directory
/// 2 links plus one per thread (`proc_task_getattr`): one `statx`, where
/// `/proc/self/status` would have the kernel format some 60 lines (this
/// is asked several times per request of `hutch serve`). Falls back to
/// the status file, then to counting the task directory.
pub fn thread_count() -> usize {
    use std::os::unix::fs::MetadataExt;
    if let Ok(meta) = std::fs::metadata("/proc/self/task")
        && meta.nlink() > 2
    {
        return (meta.nlink() - 2) as usize;
    }
    if let Ok(status) = read_proc("/proc/self/status") {
        for line in status.lines() {
            if let Some(n) = line.strip_prefix("Threads:")
                && let Ok(n) = n.trim().parse()
            {
                return n;
            }
        }
    }
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The task directory's link count and `/proc/self/status` agree on
    /// the number of threads, with one thread and with several (a kernel
    /// that counted links otherwise would fail this, not mislead
    /// `thread_count`'s callers into forking a multi-threaded process).
    #[test]
    fn thread_count_agrees_with_the_status_file() {
        let status_threads = || -> usize {
            let text = read_proc("/proc/self/status").unwrap();
            let line = text.lines().find(|l| l.starts_with("Threads:")).unwrap();
            line["Threads:".len()..].trim().parse().unwrap()
        };
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        assert!((0..100).any(|_| thread_count() == status_threads()));
        let held: Vec<_> = (0..3)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let _ = rx.lock().map(|r| r.recv());
                })
            })
            .collect();
        // The test harness may start or end threads of its own meanwhile:
        // compare both counts at the same moment, retrying a race.
        let agree = (0..100).any(|_| thread_count() == status_threads());
        assert!(agree, "thread_count and /proc/self/status disagree");
        // This thread and the three held ones, at least.
        assert!(thread_count() >= 4);
        drop(tx);
        for t in held {
            t.join().unwrap();
        }
    }

    /// The area `/proc/self/stat` names is this process's argv: its first
    /// bytes are argv[0], NUL-terminated.
    #[test]
    fn args_area_holds_argv() {
        let area = ArgsArea::of_self().unwrap();
        assert!(area.arg_start < area.arg_end && area.env_start <= area.env_end);
        let argv0 = std::env::args_os().next().unwrap();
        let len = argv0.len();
        assert!(len < area.arg_end - area.arg_start);
        // SAFETY: [arg_start, arg_end) is this process's mapped argv area.
        let bytes = unsafe { std::slice::from_raw_parts(area.arg_start as *const u8, len + 1) };
        assert_eq!(
            &bytes[..len],
            std::os::unix::ffi::OsStrExt::as_bytes(argv0.as_os_str())
        );
        assert_eq!(bytes[len], 0);
    }

    #[test]
    fn self_status_reports_ignored_and_default_signals() {
        // SAFETY: SIG_IGN is a valid disposition; this test owns its process
        // (one process per test under nextest).
        unsafe { libc::signal(libc::SIGURG, libc::SIG_IGN) };
        let status = self_status();
        assert!(status.threads >= 1);
        let bit = |sig: libc::c_int| 1u64 << (sig - 1);
        assert_ne!(status.non_default_signals & bit(libc::SIGURG), 0);
        assert_eq!(status.non_default_signals & bit(libc::SIGWINCH), 0);
        // SAFETY: as above.
        unsafe { libc::signal(libc::SIGURG, libc::SIG_DFL) };
        assert_eq!(self_status().non_default_signals & bit(libc::SIGURG), 0);
    }
}
