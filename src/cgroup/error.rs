//! Why a limit cannot be enforced, as one line: the limit and controller,
//! what hutch found, and the fix.

use std::path::PathBuf;

/// An error preparing the sandbox's cgroup. Display is one line.
#[derive(thiserror::Error, Debug)]
pub enum CgroupError {
    /// A required limit needs a controller this host does not give hutch.
    #[error("limits.{limit}: cgroup v2 {controller} controller not available ({found}); {fix}")]
    Unavailable {
        limit: &'static str,
        controller: &'static str,
        found: String,
        fix: String,
    },
    /// `--cgroup-parent` names something hutch cannot use.
    #[error("limits.cgroup_parent: {path}: {problem}; {fix}")]
    BadParent {
        path: PathBuf,
        problem: String,
        fix: String,
    },
    /// A cgroupfs operation failed.
    #[error("cgroup: {action} {path} => {errno}; {hint}")]
    Io {
        action: &'static str,
        path: PathBuf,
        errno: String,
        hint: String,
    },
    /// A device of `limits.io` that `io.max` cannot limit.
    #[error("limits.io[{index}].device: {}: {problem}", device.display())]
    IoDevice {
        index: usize,
        device: PathBuf,
        problem: String,
    },
    /// A requested rlimit is above the hard limit hutch itself runs with.
    #[error(
        "limits.rlimits.{name}: {value} is above the hard limit {hard} hutch runs with, and the sandbox cannot raise it (needs CAP_SYS_RESOURCE on the host); ask for at most {hard} or raise the hard limit before starting hutch (ulimit -H)"
    )]
    RlimitAboveHard { name: String, value: u64, hard: u64 },
}

/// `EACCES: Permission denied`-style text for an io::Error.
pub(crate) fn errno_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => {
            let errno = nix::errno::Errno::from_raw(n);
            format!("{errno}: {}", errno.desc())
        }
        None => e.to_string(),
    }
}

impl CgroupError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        e: &std::io::Error,
        hint: impl Into<String>,
    ) -> Self {
        CgroupError::Io {
            action,
            path: path.into(),
            errno: errno_text(e),
            hint: hint.into(),
        }
    }
}
