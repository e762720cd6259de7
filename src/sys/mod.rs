//! The only place with raw syscalls: thin wrappers whose errors read like
//! the call that failed, e.g. `mount("/a", "/b") => EPERM: Operation not
//! permitted`. Nothing here knows hutch concepts.

mod caps;
mod cgroup;
mod landlock;
mod mount;
mod net;
pub mod probe;
mod process;
mod rlimit;
mod seccomp;
pub mod socket;
pub use socket::peer_hung_up;
mod walk;

use std::ffi::CStr;
use std::fmt;

pub use caps::*;
pub use cgroup::*;
pub use landlock::*;
pub use mount::*;
pub use net::*;
pub use process::*;
pub use rlimit::*;
pub use seccomp::*;
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

/// Number of threads of this process, from /proc/self/status (or the task
/// directory count when that is unreadable).
pub fn thread_count() -> usize {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
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
