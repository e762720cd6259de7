//! Why hutch init stopped before the workload ran.

use crate::fs::BuildError;
use crate::launch::wire::stage::{Failure, Stage};
use crate::sys;

/// Why hutch init stopped before the workload ran.
#[derive(Debug)]
pub(crate) enum Stop {
    /// A step failed; the text (init may allocate) says more than the
    /// record when there is more to say.
    Failed(Failure, Option<String>),
    /// The supervisor went away or spoke nonsense: nothing to report to.
    SupervisorGone,
}

impl From<Failure> for Stop {
    fn from(f: Failure) -> Stop {
        Stop::Failed(f, None)
    }
}

pub(super) fn described(stage: Stage) -> impl FnOnce(sys::SysError) -> Stop {
    move |e| Stop::Failed(Failure::new(stage, e.errno), Some(e.to_string()))
}

pub(super) fn built(stage: Stage) -> impl FnOnce(BuildError) -> Stop {
    move |e| Stop::Failed(Failure::new(stage, e.err.errno), Some(e.to_string()))
}
