//! hutch init's side of a claim: the command a warm sandbox was waiting
//! for, decoded into the plan the workload reads.

use std::io::Read;
use std::os::fd::OwnedFd;

use crate::launch::plan::CommandPlan;
use crate::launch::wire::command::{MAX_COMMAND_BYTES, WireCommand};
use crate::sys::Errno;

/// What hutch init got from a claim.
pub(crate) struct Claimed {
    pub command: CommandPlan,
    /// Whether to report `Started` (the claim has a status file).
    pub report_started: bool,
    /// After `Exited`, wait for the supervisor to close the socket before
    /// ending (see `Message::Claim`).
    pub linger: bool,
}

/// hutch init's side: the claim's command (inline, or read from the memfd
/// after the three stdio fds), as the plan the workload reads.
pub(crate) fn decode(
    command: Option<WireCommand>,
    report_started: bool,
    linger: bool,
    fds: Vec<OwnedFd>,
    non_default_signals: u64,
) -> Result<Claimed, Errno> {
    let mut fds = fds.into_iter();
    let (Some(a), Some(b), Some(c)) = (fds.next(), fds.next(), fds.next()) else {
        return Err(Errno::EPROTO);
    };
    let command = match (command, fds.next()) {
        (Some(c), None) => c,
        (None, Some(memfd)) => {
            let mut text = Vec::new();
            std::fs::File::from(memfd)
                .take(MAX_COMMAND_BYTES + 1)
                .read_to_end(&mut text)
                .map_err(|_| Errno::EIO)?;
            if text.len() as u64 > MAX_COMMAND_BYTES {
                return Err(Errno::E2BIG);
            }
            serde_json::from_slice(&text).map_err(|_| Errno::EPROTO)?
        }
        _ => return Err(Errno::EPROTO),
    };
    if fds.next().is_some() {
        return Err(Errno::EPROTO);
    }
    Ok(Claimed {
        command: command.into_plan([a, b, c], non_default_signals)?,
        report_started,
        linger,
    })
}
