//! The typed, versioned messages between the supervisor and the sandbox,
//! one per SOCK_SEQPACKET datagram, fds attached by SCM_RIGHTS.
//!
//! Messages are JSON in a versioned envelope. A setup failure is not a
//! message but a fixed-size [`Failure`] record (see [`crate::launch::wire::stage`]): the
//! workload must report one without allocating.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use serde::{Deserialize, Serialize};

use crate::launch::wire::stage::Failure;
use crate::sys::{self, SysError};

/// Bumped whenever a message changes shape.
pub const PROTOCOL_VERSION: u32 = 7;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// Supervisor → sandbox: id maps are written, go on. Carries one
    /// detached mount fd (`open_tree(OPEN_TREE_CLONE)`, idmapped or not)
    /// per listed source index: sources the supervisor prepares itself.
    Go { handed_sources: Vec<usize> },
    /// Sandbox → supervisor: the workload started (pid inside the sandbox);
    /// sent once it has exec'd, or failed to (then its failure record came
    /// first), and only when the supervisor writes a status file.
    Started {
        workload_pid: i32,
        /// A resident sandbox's per-command init: the inodes of its own
        /// namespaces (by name: `mnt`, `pid`...), which the supervisor
        /// cannot read once that process is not dumpable.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        namespaces: Vec<(String, u64)>,
    },
    /// Sandbox → supervisor: the workload ended with this wait status;
    /// paths changed in each private overlay upper.
    Exited {
        wait_status: i32,
        changed_paths: Vec<u64>,
        /// hutch init's `getrusage(RUSAGE_CHILDREN)` once every process
        /// of the sandbox it could reap is reaped: the resource usage of
        /// the reaped tree, for a report without a cgroup.
        #[serde(default)]
        rusage: Option<super::rusage::TreeRusage>,
    },
    /// Sandbox → supervisor: the egress proxy's listening sockets, made
    /// inside the sandbox (attached, in this order: the TCP door in its
    /// network namespace, the Unix door in its root), served by the host.
    ListenerReady { doors: Vec<String> },
    /// Sandbox → supervisor (warm sandboxes): everything that does not
    /// depend on the command is done; hutch init waits for `Claim`.
    Ready,
    /// Supervisor → sandbox (warm sandboxes): the command that claims the
    /// sandbox. Carries the workload's stdin, stdout and stderr, then,
    /// when `command` is None (it did not fit in a datagram), a memfd
    /// holding it as JSON. `report_started`: send `Started`. `linger`:
    /// after `Exited`, stay (holding the sandbox's namespaces) until the
    /// supervisor closes the socket, so that its report goes out before
    /// init's teardown competes with it for a CPU.
    Claim {
        command: Option<super::command::WireCommand>,
        report_started: bool,
        #[serde(default)]
        linger: bool,
    },
    /// Sandbox → supervisor: the sandbox is built and its command found;
    /// hutch init now waits for the start request (a created container).
    Held,
    /// A resident sandbox's hutch init: the per-command init of the last
    /// claim is reaped (its namespaces and overlay gone); the next claim
    /// may come.
    CommandEnded,
    /// Sandbox → supervisor (`ChildPlan::pause_before_pivot`): the root is
    /// built and shown at its host directory, `pivot_root` not done yet;
    /// hutch init waits for `Pivot` (the supervisor runs the OCI
    /// createContainer hooks in between).
    RootBuilt,
    /// Supervisor → sandbox: go on with `pivot_root` after `RootBuilt`.
    Pivot,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    v: u32,
    msg: Message,
}

/// What the sandbox sent: a message, or a failure record (with the text
/// hutch init may attach to it).
#[derive(Debug)]
pub enum Incoming {
    Message(Message, Vec<OwnedFd>),
    Failure(Failure, Option<String>),
}

/// A message that could not be received.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error(transparent)]
    Sys(#[from] SysError),
    #[error("malformed message from the sandbox: {0}")]
    Malformed(String),
    #[error("message protocol version {0} (this hutch speaks {PROTOCOL_VERSION})")]
    Version(u32),
}

/// Send one message with fds.
pub fn send(sock: &impl AsFd, msg: &Message, fds: &[BorrowedFd<'_>]) -> Result<(), SysError> {
    let bytes = serde_json::to_vec(&Envelope {
        v: PROTOCOL_VERSION,
        msg: msg.clone(),
    })
    .expect("messages serialize");
    sys::socket::send(sock.as_fd(), &bytes, fds)
}

/// Send a failure record, without allocating when `text` is None (the
/// workload never attaches text; hutch init may).
pub fn send_failure(sock: BorrowedFd<'_>, failure: &Failure, text: Option<&str>) {
    let record = failure.encode();
    let _ = match text {
        None => sys::raw::send(sock, &record),
        Some(text) => {
            let mut bytes = record.to_vec();
            // Bounded: a datagram larger than the receiver's buffer is refused.
            let text = &text.as_bytes()[..text.len().min(sys::socket::MAX_MESSAGE / 2)];
            bytes.extend_from_slice(text);
            sys::raw::send(sock, &bytes)
        }
    };
}

/// Receive one datagram; `Ok(None)` when the peer closed.
pub fn recv(sock: &impl AsFd) -> Result<Option<Incoming>, MessageError> {
    let Some((bytes, fds)) = sys::socket::recv(sock.as_fd())? else {
        return Ok(None);
    };
    if Failure::is_record(&bytes) {
        let (f, text) = Failure::decode(&bytes).map_err(MessageError::Malformed)?;
        return Ok(Some(Incoming::Failure(f, text)));
    }
    let env: Envelope =
        serde_json::from_slice(&bytes).map_err(|e| MessageError::Malformed(e.to_string()))?;
    if env.v != PROTOCOL_VERSION {
        return Err(MessageError::Version(env.v));
    }
    Ok(Some(Incoming::Message(env.msg, fds)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::wire::stage::Stage;

    #[test]
    fn round_trip_with_fds_failures_and_version_check() {
        let (a, b) = sys::socket::seqpacket_pair().unwrap();
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let msg = Message::Go {
            handed_sources: vec![3],
        };
        send(&a, &msg, &[devnull.as_fd()]).unwrap();
        match recv(&b).unwrap().unwrap() {
            Incoming::Message(got, fds) => {
                assert_eq!(got, msg);
                assert_eq!(fds.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        let f = Failure::new(Stage::WorkingDirectory, crate::sys::Errno::ELOOP).at(2);
        send_failure(a.as_fd(), &f, None);
        assert!(matches!(recv(&b).unwrap(), Some(Incoming::Failure(g, None)) if g == f));
        send_failure(a.as_fd(), &f, Some("fs[0] (tmpfs /x): mount(...) => EPERM"));
        assert!(
            matches!(recv(&b).unwrap(), Some(Incoming::Failure(_, Some(t))) if t.starts_with("fs[0]"))
        );
        sys::socket::send(
            a.as_fd(),
            br#"{"v":99,"msg":{"Started":{"workload_pid":2}}}"#,
            &[],
        )
        .unwrap();
        assert!(matches!(recv(&b), Err(MessageError::Version(99))));
        sys::socket::send(a.as_fd(), b"junk", &[]).unwrap();
        assert!(matches!(recv(&b), Err(MessageError::Malformed(_))));
        drop(a);
        assert!(recv(&b).unwrap().is_none());
    }
}
