//! How a request reaches the process that runs it when that process
//! exists before the request: the spare ([`super::spare`]) and the
//! resident process ([`super::runner`]). One message per request on a
//! Unix stream socket: a little-endian `u32` length, the [`Handed`] JSON,
//! the request's descriptors by `SCM_RIGHTS` with its first bytes.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

use crate::sys::SysError;

/// What the spare (or the resident process) gets besides the descriptors.
#[derive(Serialize, Deserialize)]
pub(super) struct Handed {
    pub argv: Vec<String>,
    pub env: Vec<(String, Option<String>)>,
    pub cwd: Option<String>,
    /// The number each descriptor sent along gets, in order.
    pub to: Vec<RawFd>,
    /// Stay after this request and serve the next resident ones
    /// ([`super::runner`]).
    #[serde(default)]
    pub resident: bool,
}

/// Send one request (length-prefixed JSON, the descriptors by
/// `SCM_RIGHTS`) on a spare's or the resident process's channel.
pub(super) fn send_request(
    channel: &UnixStream,
    argv: &[String],
    env: &[(String, Option<String>)],
    cwd: Option<&str>,
    fds: &[(OwnedFd, RawFd)],
    resident: bool,
) -> Result<(), SysError> {
    let handed = Handed {
        argv: argv.to_vec(),
        env: env.to_vec(),
        cwd: cwd.map(str::to_string),
        to: fds.iter().map(|(_, n)| *n).collect(),
        resident,
    };
    let body = serde_json::to_vec(&handed).expect("a request serializes");
    let mut msg = Vec::with_capacity(4 + body.len());
    msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    msg.extend_from_slice(&body);
    let borrowed: Vec<_> = fds.iter().map(|(fd, _)| fd.as_fd()).collect();
    let sent = crate::sys::socket::send_stream(channel.as_fd(), &msg, &borrowed)?;
    let mut writer = channel;
    writer
        .write_all(&msg[sent..])
        .map_err(|e| crate::sys::io_err("write(spare)".into(), e))
}

/// The request (None at the end of the stream or on a malformed one).
pub(super) fn receive(channel: &UnixStream) -> Option<(Handed, Vec<OwnedFd>)> {
    let mut data = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if data.len() >= 4 {
            let len = u32::from_le_bytes(data[..4].try_into().ok()?) as usize;
            if len > super::protocol::MAX_LINE * 2 {
                return None;
            }
            if data.len() >= 4 + len {
                let handed = serde_json::from_slice(&data[4..4 + len]).ok()?;
                return Some((handed, fds));
            }
        }
        let (n, got) = crate::sys::socket::recv_stream(channel.as_fd(), &mut buf).ok()?;
        fds.extend(got);
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
}
