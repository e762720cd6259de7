//! The supervisor's side of a claim: the command and the workload's stdio
//! sent to hutch init of a warm sandbox (its side is `child::claim`).

use std::io::{Seek, Write};
use std::os::fd::{AsFd, OwnedFd};

use super::command::WireCommand;
use super::message::{self, Message};
use crate::sys::{self, Errno, SysError};

/// Supervisor side: send the claim to hutch init, with the workload's
/// stdin, stdout and stderr. A command too large for one datagram goes
/// in a memfd attached after them.
pub(crate) fn send(
    sock: &impl AsFd,
    command: &WireCommand,
    report_started: bool,
    linger: bool,
    stdio: [&OwnedFd; 3],
) -> Result<(), SysError> {
    let fds = stdio.map(|f| f.as_fd());
    let inline = Message::Claim {
        command: Some(command.clone()),
        report_started,
        linger,
    };
    let size = serde_json::to_vec(&inline).map_or(usize::MAX, |v| v.len());
    // The envelope adds a few bytes.
    if size + 64 <= sys::socket::MAX_MESSAGE {
        return message::send(sock, &inline, &fds);
    }
    let json = serde_json::to_vec(command).expect("a command serializes");
    let memfd =
        rustix::fs::memfd_create("hutch-claim", rustix::fs::MemfdFlags::CLOEXEC).map_err(|e| {
            SysError::new(
                "memfd_create(\"hutch-claim\")",
                Errno::from_raw(e.raw_os_error()),
            )
        })?;
    let mut file = std::fs::File::from(memfd);
    file.write_all(&json)
        .and_then(|()| file.rewind())
        .map_err(|e| sys::io_err("write(memfd \"hutch-claim\")".into(), e))?;
    let [a, b, c] = fds;
    message::send(
        sock,
        &Message::Claim {
            command: None,
            report_started,
            linger,
        },
        &[a, b, c, file.as_fd()],
    )
}
