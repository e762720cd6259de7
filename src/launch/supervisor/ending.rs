//! How a sandbox ended, as a pure function of what the supervisor saw:
//! the exit status, code, signal and [`Outcome`] of the report.

use super::report::Outcome;
use crate::launch::wire::stage::exec_failure_status;
use crate::sys::Errno;

/// What the supervisor saw happen, in no particular order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// The setup failed (a failure record from the sandbox, or the
    /// supervisor's own error).
    pub setup_failed: bool,
    /// execve failed for every candidate: its errno, and whether the file
    /// exists but its interpreter does not.
    pub exec_failed: Option<(Errno, bool)>,
    /// The wall clock ran out and the sandbox was killed.
    pub timed_out: bool,
    /// The sandbox was killed on request (`Child::kill`, or its owner went
    /// away).
    pub killed: bool,
    /// A cgroup limit event (`oom-killed`, `pids-limit-hit`).
    pub limit_event: Option<&'static str>,
    /// The workload's raw wait status, as hutch init reported it.
    pub wait_status: Option<i32>,
    /// hutch init (the sandbox's pid 1) was killed by this signal from
    /// outside the supervisor (e.g. `hutch kill`, or the engine of a
    /// platform) before it could report the workload's status.
    pub init_signaled: Option<i32>,
}

/// The ending: what `hutch run` exits with and the report says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// hutch's exit status.
    pub status: i32,
    /// The workload's exit code, when it exited by itself.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    pub reason: Outcome,
}

/// The ending of a sandbox from the facts. The order is the precedence:
/// hutch's own failure, then the command's, then the wall clock, a kill
/// on request, the OOM killer, and last the workload's own status.
pub fn ending_of(f: &Facts) -> Ending {
    let end = |status, exit_code, signal, reason| Ending {
        status,
        exit_code,
        signal,
        reason,
    };
    let sigkill = libc::SIGKILL;
    if f.setup_failed {
        return end(125, None, None, Outcome::SetupFailed);
    }
    if let Some((errno, interpreter_missing)) = f.exec_failed {
        let status = exec_failure_status(errno, interpreter_missing);
        return end(status, None, None, Outcome::ExecFailed);
    }
    if f.timed_out {
        return end(124, None, Some(sigkill), Outcome::TimedOut);
    }
    if f.killed {
        return end(128 + sigkill, None, Some(sigkill), Outcome::Killed);
    }
    if f.limit_event == Some("oom-killed") {
        // memory.oom.group: the kernel killed every process, init included.
        return end(128 + sigkill, None, Some(sigkill), Outcome::OomKilled);
    }
    let Some(ws) = f.wait_status else {
        if let Some(sig) = f.init_signaled {
            // Killed from outside: every process of the sandbox went with
            // its pid 1, as a kill on request does.
            return end(128 + sig, None, Some(sig), Outcome::Killed);
        }
        return end(125, None, None, Outcome::SetupFailed);
    };
    // A refused fork explains a failure, not a success.
    let pids_hit = f.limit_event == Some("pids-limit-hit") && ws != 0;
    if libc::WIFEXITED(ws) {
        let code = libc::WEXITSTATUS(ws);
        let reason = if pids_hit {
            Outcome::PidsLimitHit
        } else {
            Outcome::Exited
        };
        end(code, Some(code), None, reason)
    } else {
        let sig = libc::WTERMSIG(ws);
        let reason = if pids_hit {
            Outcome::PidsLimitHit
        } else {
            Outcome::Signaled
        };
        end(128 + sig, None, Some(sig), reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> i32 {
        code << 8
    }

    #[test]
    fn the_workload_status_passes_through() {
        let f = |ws| Facts {
            wait_status: Some(ws),
            ..Default::default()
        };
        assert_eq!(
            ending_of(&f(exited(0))),
            Ending {
                status: 0,
                exit_code: Some(0),
                signal: None,
                reason: Outcome::Exited
            }
        );
        assert_eq!(ending_of(&f(exited(42))).status, 42);
        let term = ending_of(&f(libc::SIGTERM));
        assert_eq!(
            (term.status, term.signal, term.reason),
            (143, Some(15), Outcome::Signaled)
        );
    }

    #[test]
    fn exec_failures_are_126_or_127() {
        for (errno, missing, status) in [
            (Errno::ENOENT, false, 127),
            (Errno::ENOTDIR, false, 127),
            (Errno::ENOENT, true, 126),
            (Errno::EACCES, false, 126),
            (Errno::ENOEXEC, false, 126),
            (Errno::ELOOP, false, 126),
        ] {
            assert_eq!(exec_failure_status(errno, missing), status, "{errno:?}");
            let e = ending_of(&Facts {
                exec_failed: Some((errno, missing)),
                wait_status: Some(exited(status)),
                ..Default::default()
            });
            assert_eq!((e.status, e.reason), (status, Outcome::ExecFailed));
        }
    }

    #[test]
    fn precedence_hutch_then_command_then_clock_then_kill_then_limits() {
        let all = Facts {
            setup_failed: true,
            exec_failed: Some((Errno::ENOENT, false)),
            timed_out: true,
            killed: true,
            limit_event: Some("oom-killed"),
            wait_status: Some(exited(3)),
            init_signaled: None,
        };
        assert_eq!(ending_of(&all).reason, Outcome::SetupFailed);
        let f = Facts {
            setup_failed: false,
            ..all.clone()
        };
        assert_eq!(ending_of(&f).reason, Outcome::ExecFailed);
        let f = Facts {
            exec_failed: None,
            ..f
        };
        assert_eq!(
            (ending_of(&f).status, ending_of(&f).reason),
            (124, Outcome::TimedOut)
        );
        let f = Facts {
            timed_out: false,
            ..f
        };
        assert_eq!(
            (ending_of(&f).status, ending_of(&f).reason),
            (137, Outcome::Killed)
        );
        let f = Facts { killed: false, ..f };
        assert_eq!(
            (ending_of(&f).status, ending_of(&f).reason),
            (137, Outcome::OomKilled)
        );
    }

    #[test]
    fn pid1_killed_from_outside_is_a_kill_not_a_setup_failure() {
        let f = Facts {
            init_signaled: Some(libc::SIGKILL),
            ..Default::default()
        };
        assert_eq!(
            (ending_of(&f).status, ending_of(&f).reason),
            (137, Outcome::Killed)
        );
        // hutch's own failure still comes first, and a reported workload
        // status wins over how init ended.
        let failed = Facts {
            setup_failed: true,
            ..f.clone()
        };
        assert_eq!(ending_of(&failed).reason, Outcome::SetupFailed);
        let exited_first = Facts {
            wait_status: Some(exited(0)),
            ..f
        };
        assert_eq!(ending_of(&exited_first).reason, Outcome::Exited);
        assert_eq!(ending_of(&Facts::default()).reason, Outcome::SetupFailed);
    }

    #[test]
    fn a_refused_fork_explains_failures_only() {
        let f = |ws| Facts {
            limit_event: Some("pids-limit-hit"),
            wait_status: Some(ws),
            ..Default::default()
        };
        assert_eq!(ending_of(&f(exited(0))).reason, Outcome::Exited);
        assert_eq!(ending_of(&f(exited(1))).reason, Outcome::PidsLimitHit);
        assert_eq!(ending_of(&f(libc::SIGKILL)).reason, Outcome::PidsLimitHit);
    }

    #[test]
    fn no_status_is_a_setup_failure() {
        let e = ending_of(&Facts::default());
        assert_eq!((e.status, e.reason), (125, Outcome::SetupFailed));
    }
}
