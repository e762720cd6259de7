//! The channel from the process that asked for a sandbox to its
//! supervisor (the helper's control socket): kill, signal, or claim a
//! warm sandbox.

use std::os::fd::{BorrowedFd, OwnedFd};

use crate::launch::options::RunOptions;
use crate::launch::prepare::claim::ClaimCommand;

/// What the process that asked for the sandbox wants while it runs (the
/// helper's control channel, [`crate::launch::helper`]).
pub(crate) trait Control {
    fn fd(&self) -> BorrowedFd<'_>;
    /// A pipe whose other end only the sandbox's owner holds: readable
    /// (hung up) once the owner is gone, even when the control channel
    /// itself was handed to someone else (a session's warm server).
    fn lifeline(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// A whole request already read (it came in one read with an earlier
    /// one): [`Control::read`] returns it without reading the fd, and
    /// nobody may wait for the fd to become readable first.
    fn buffered(&self) -> bool {
        false
    }
    /// The fd is readable (or [`Control::buffered`]): read the request.
    fn read(&mut self) -> ControlRequest;
    /// The sandbox is being killed as asked (sent before the report).
    fn acknowledge_kill(&mut self);
}

#[derive(Debug)]
pub(crate) enum ControlRequest {
    None,
    /// End the sandbox now (then clean up and report as usual).
    Kill,
    /// The other end went away: nobody will read the report.
    Gone,
    /// Forward this signal to the sandbox, as the supervisor forwards its
    /// own (a warm sandbox's client is not its supervisor's caller).
    Signal(i32),
    /// A warm sandbox: the command that claims it.
    Claim(Box<ClaimRequest>),
    /// A resident sandbox's claimer is done with it: its owner reads what
    /// comes next (`ToHelper::Release`).
    Release,
}

/// A claim: the shape it was made for, the command, how to run it, the
/// workload's stdin, stdout and stderr, and the claimer's lock on the
/// host uppers, if it gave one (the helper's `ToHelper::Claim`).
#[derive(Debug)]
pub(crate) struct ClaimRequest {
    pub shape: String,
    pub command: ClaimCommand,
    pub options: RunOptions,
    pub stdio: [OwnedFd; 3],
    pub upper_lock: Option<OwnedFd>,
}
