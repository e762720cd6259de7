//! What the supervisor's loop saw of a sandbox, for its ending and report.

use super::ending::Facts;
use super::report::SetupFailure;
use crate::launch::wire::stage::Failure;

/// What the loop saw, for the ending and the report.
#[derive(Default)]
pub(crate) struct Seen {
    pub facts: Facts,
    /// The failure record (and init's text), or the supervisor's own line.
    pub failure: Option<(Option<Failure>, String)>,
    pub changed_paths: Option<Vec<u64>>,
    /// The reaped tree's usage, as hutch init sent it with `Exited`.
    pub rusage: Option<crate::launch::wire::rusage::TreeRusage>,
    /// A forwarded signal or a kill request: output waits no longer.
    pub hurry: bool,
}

impl Seen {
    /// hutch's own failure (the first one is the one reported).
    pub(crate) fn failed(&mut self, record: Option<Failure>, line: String) {
        self.facts.setup_failed = true;
        self.failure.get_or_insert((record, line));
    }

    pub(crate) fn failure_record(&self) -> Option<SetupFailure> {
        let (f, _) = self.failure.as_ref()?;
        let f = (*f)?;
        Some(SetupFailure {
            stage: f.stage,
            errno: (f.errno as i32 != 0).then(|| format!("{:?}", f.errno)),
        })
    }
}
