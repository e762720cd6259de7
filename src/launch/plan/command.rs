//! The command-dependent part of the child plan: argv, environment,
//! working directory and stdio, ready for execve.

use std::cell::Cell;
use std::ffi::CString;
use std::os::fd::OwnedFd;

use crate::sys::Errno;

/// argv/envp and the paths execve tries, as C strings and pointer arrays
/// (valid in the child, which has a copy of this memory).
pub(crate) struct Exec {
    pub candidates: Vec<CString>,
    /// One slot per candidate: how it resolved inside the root (`None`:
    /// it exists), filled by the workload before its seccomp filter is
    /// loaded, so that only execve runs under the filter. Allocated here:
    /// the workload allocates nothing.
    pub resolved: Vec<Cell<Option<Errno>>>,
    /// The strings `argv_ptrs` and `envp_ptrs` point into.
    #[allow(dead_code)]
    pub argv: Vec<CString>,
    #[allow(dead_code)]
    pub envp: Vec<CString>,
    pub argv_ptrs: Vec<*const libc::c_char>,
    pub envp_ptrs: Vec<*const libc::c_char>,
}

impl Exec {
    /// From validated strings (no NUL).
    pub(crate) fn from_strings(
        candidates: Vec<String>,
        argv: Vec<String>,
        envp: Vec<String>,
    ) -> Exec {
        let to_c = |s: String| CString::new(s).expect("validated: no NUL");
        let argv: Vec<CString> = argv.into_iter().map(to_c).collect();
        let envp: Vec<CString> = envp.into_iter().map(to_c).collect();
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        Exec {
            resolved: candidates.iter().map(|_| Cell::new(None)).collect(),
            argv_ptrs: ptrs(&argv),
            envp_ptrs: ptrs(&envp),
            candidates: candidates.into_iter().map(to_c).collect(),
            argv,
            envp,
        }
    }
}

/// The fds the workload gets as its stdin, stdout and stderr (None: the
/// supervisor's own, inherited).
#[derive(Default)]
pub(crate) struct StdioPlan {
    pub fds: [Option<OwnedFd>; 3],
}

/// The command-dependent part of the child plan.
pub(crate) struct CommandPlan {
    pub exec: Exec,
    pub cwd: CString,
    pub stdio: StdioPlan,
    /// Signals whose disposition in the supervisor is not SIG_DFL (bit N-1
    /// for signal N): those the workload resets. Every signal unless the
    /// caller knows better.
    pub non_default_signals: u64,
    /// The workload's umask.
    pub umask: Option<u32>,
    /// Make stdin (a terminal hutch init opened) the workload's
    /// controlling terminal.
    pub controlling_tty: bool,
}

impl CommandPlan {
    /// No command yet (a warm sandbox, until it is claimed).
    pub(crate) fn placeholder() -> CommandPlan {
        CommandPlan {
            exec: Exec::from_strings(Vec::new(), Vec::new(), Vec::new()),
            cwd: CString::from(c"/"),
            stdio: StdioPlan::default(),
            non_default_signals: u64::MAX,
            umask: None,
            controlling_tty: false,
        }
    }
}
