//! A claimed command as the supervisor sends it to hutch init.

use std::ffi::CString;
use std::os::fd::OwnedFd;

use serde::{Deserialize, Serialize};

use crate::launch::plan::{CommandPlan, Exec, StdioPlan};
use crate::sys::Errno;

/// Largest command (argv, environment, candidates) a claim carries; the
/// kernel's own execve limit is lower than this.
pub(crate) const MAX_COMMAND_BYTES: u64 = 8 << 20;

/// The command as the supervisor sends it to hutch init (which may
/// allocate; the workload then reads the [`CommandPlan`] built from it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireCommand {
    pub candidates: Vec<String>,
    pub argv: Vec<String>,
    pub envp: Vec<String>,
    /// Bytes: a working directory need not be UTF-8.
    pub cwd: Vec<u8>,
    /// The workload's umask (the Spec's).
    #[serde(default)]
    pub umask: Option<u32>,
}

impl WireCommand {
    pub(crate) fn of(plan: &CommandPlan) -> WireCommand {
        let strings = |v: &[CString]| {
            v.iter()
                .map(|c| String::from_utf8_lossy(c.as_bytes()).into_owned())
                .collect()
        };
        WireCommand {
            candidates: strings(&plan.exec.candidates),
            argv: strings(&plan.exec.argv),
            envp: strings(&plan.exec.envp),
            cwd: plan.cwd.as_bytes().to_vec(),
            umask: plan.umask,
        }
    }

    pub(crate) fn into_plan(
        self,
        stdio: [OwnedFd; 3],
        non_default_signals: u64,
    ) -> Result<CommandPlan, Errno> {
        let has_nul = |v: &[String]| v.iter().any(|s| s.contains('\0'));
        if has_nul(&self.candidates) || has_nul(&self.argv) || has_nul(&self.envp) {
            return Err(Errno::EINVAL);
        }
        if self.argv.is_empty() || self.candidates.is_empty() {
            return Err(Errno::EINVAL);
        }
        let cwd = CString::new(self.cwd).map_err(|_| Errno::EINVAL)?;
        let [a, b, c] = stdio;
        Ok(CommandPlan {
            exec: Exec::from_strings(self.candidates, self.argv, self.envp),
            cwd,
            stdio: StdioPlan {
                fds: [Some(a), Some(b), Some(c)],
            },
            non_default_signals,
            umask: self.umask,
            controlling_tty: false,
        })
    }
}
