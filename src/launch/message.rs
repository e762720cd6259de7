//! The typed, versioned messages between the supervisor and the sandbox,
//! one per SOCK_SEQPACKET datagram, fds attached by SCM_RIGHTS.

use std::os::fd::{AsFd, OwnedFd, RawFd};

use serde::{Deserialize, Serialize};

use crate::sys::{self, SysError};

/// Bumped whenever a message changes shape.
pub const PROTOCOL_VERSION: u32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// Supervisor → sandbox: id maps are written, go on. Carries one
    /// detached mount fd (`open_tree(OPEN_TREE_CLONE)`, idmapped or not)
    /// per listed source index: sources the supervisor prepares itself.
    Go { handed_sources: Vec<usize> },
    /// Sandbox → supervisor: setup failed; the sandbox exits 125.
    SetupFailed {
        what: String,
        call: String,
        errno: i32,
        hint: Option<String>,
    },
    /// Sandbox → supervisor: the workload started (pid inside the sandbox);
    /// sent once it has exec'd, or failed to (then `ExecFailed` came first),
    /// and only when the supervisor writes a status file.
    Started { workload_pid: i32 },
    /// Workload → supervisor: execve failed for every candidate.
    /// `interpreter_missing`: the file exists but its ELF or `#!`
    /// interpreter does not (execve says ENOENT).
    ExecFailed {
        call: String,
        errno: i32,
        #[serde(default)]
        interpreter_missing: bool,
    },
    /// Sandbox → supervisor: the workload ended with this wait status;
    /// paths changed in each private overlay upper.
    Exited {
        wait_status: i32,
        changed_paths: Vec<u64>,
    },
    /// Sandbox → supervisor: a listening socket created inside the
    /// sandbox's network namespace (attached), to be served by the host.
    ListenerReady { door: String },
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    v: u32,
    msg: Message,
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
pub fn send(sock: &impl AsFd, msg: &Message, fds: &[RawFd]) -> Result<(), SysError> {
    let bytes = serde_json::to_vec(&Envelope {
        v: PROTOCOL_VERSION,
        msg: msg.clone(),
    })
    .expect("messages serialize");
    sys::socket::send(sock.as_fd(), &bytes, fds)
}

/// Receive one message; `Ok(None)` when the peer closed.
pub fn recv(sock: &impl AsFd) -> Result<Option<(Message, Vec<OwnedFd>)>, MessageError> {
    let Some((bytes, fds)) = sys::socket::recv(sock.as_fd())? else {
        return Ok(None);
    };
    let env: Envelope =
        serde_json::from_slice(&bytes).map_err(|e| MessageError::Malformed(e.to_string()))?;
    if env.v != PROTOCOL_VERSION {
        return Err(MessageError::Version(env.v));
    }
    Ok(Some((env.msg, fds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_fds_and_version_check() {
        let (a, b) = sys::socket::seqpacket_pair().unwrap();
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let msg = Message::Go {
            handed_sources: vec![3],
        };
        send(&a, &msg, &[std::os::fd::AsRawFd::as_raw_fd(&devnull)]).unwrap();
        let (got, fds) = recv(&b).unwrap().unwrap();
        assert_eq!(got, msg);
        assert_eq!(fds.len(), 1);
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
