//! A warm sandbox is built before any command asks for it: speculative
//! work, which should not take the CPU from the commands running now. A
//! pool refills right after a claim, so on a busy machine the build of the
//! next sandbox (the helper's start, its namespaces and mounts: several
//! milliseconds of CPU) runs beside the command that was just claimed and
//! delays it. The helper therefore builds at nice [`BUILD_NICE`] and gives
//! itself and hutch init the caller's priority back when a command claims
//! the sandbox, before that command's part is prepared: the workload (a
//! child of hutch init) starts with the caller's priority, as in a cold
//! launch.
//!
//! Lowering a nice value again needs CAP_SYS_NICE, so the build is put in
//! the background only where the helper has it (root): elsewhere it runs
//! at the caller's priority, as before. A command never runs at the build's
//! priority: a restore that fails fails the claim.

use crate::sys::{self, SysError};

/// The build's nice value (the lowest priority).
pub(crate) const BUILD_NICE: i32 = 19;

/// `CAP_SYS_NICE` (linux/capability.h).
const CAP_SYS_NICE: u32 = 23;

/// The priority to give back at the claim; none when the build was not put
/// in the background.
#[derive(Debug)]
pub(crate) struct Background {
    restore_to: Option<i32>,
}

impl Background {
    /// Put this process (and what it forks from now on) at [`BUILD_NICE`]
    /// when its priority can be restored later. This process must be
    /// single-threaded: a nice value is a thread's.
    pub(crate) fn enter() -> Background {
        let can_restore =
            sys::raw::effective().is_ok_and(|caps| caps & (1u64 << CAP_SYS_NICE) != 0);
        let restore_to = match sys::raw::nice_of(0) {
            Ok(nice) if can_restore && nice < BUILD_NICE => {
                sys::raw::set_nice(0, BUILD_NICE).ok().map(|()| nice)
            }
            _ => None,
        };
        Background { restore_to }
    }

    /// Whether the build runs in the background.
    #[cfg(test)]
    pub(crate) fn lowered(&self) -> bool {
        self.restore_to.is_some()
    }

    /// Give hutch init (`init`, its host pid) and this process the
    /// caller's priority back. Once: a second call does nothing.
    pub(crate) fn leave(&mut self, init: libc::pid_t) -> Result<(), SysError> {
        let Some(nice) = self.restore_to.take() else {
            return Ok(());
        };
        sys::raw::set_nice(init, nice)
            .map_err(|e| SysError::new(format!("setpriority(hutch init {init}, {nice})"), e))?;
        // A resident sandbox's per-command init, made before the claim,
        // has the build's priority too.
        if let Ok(text) = sys::read_proc(format!("/proc/{init}/task/{init}/children")) {
            for child in text.split_whitespace().filter_map(|c| c.parse().ok()) {
                let _ = sys::raw::set_nice(child, nice);
            }
        }
        sys::raw::set_nice(0, nice)
            .map_err(|e| SysError::new(format!("setpriority(the supervisor, {nice})"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a thread of its own (a nice value is a thread's): lowered
    /// exactly when CAP_SYS_NICE is effective, and given back.
    #[test]
    fn the_build_is_lowered_only_where_it_can_be_restored() {
        let has_cap = sys::raw::effective().unwrap() & (1u64 << CAP_SYS_NICE) != 0;
        let (before, lowered, during, left, after) = std::thread::spawn(|| {
            let before = sys::raw::nice_of(0).unwrap();
            let mut b = Background::enter();
            let during = sys::raw::nice_of(0).unwrap();
            let lowered = b.lowered();
            // This thread stands for hutch init too.
            // SAFETY: gettid has no arguments and cannot fail.
            let me = unsafe { libc::gettid() };
            let left = b.leave(me).is_ok() && b.leave(me).is_ok();
            (before, lowered, during, left, sys::raw::nice_of(0).unwrap())
        })
        .join()
        .unwrap();
        let expect_lowered = has_cap && before < BUILD_NICE;
        assert_eq!(lowered, expect_lowered);
        assert_eq!(during, if expect_lowered { BUILD_NICE } else { before });
        assert!(left);
        assert_eq!(after, before);
    }
}
