//! bubblewrap's status-fd protocol (`--info-fd`, `--json-status-fd`,
//! `--block-fd`), spoken for `hutch-bwrap` by the launcher's supervisor
//! through [`StatusProtocol`]: the bytes are bubblewrap's own
//! (`tests/bwrap_diff.rs` compares them with a real bwrap's).

use std::os::unix::fs::MetadataExt;

use crate::launch::StatusProtocol;
use crate::spec::Spec;
use crate::sys::{self, Errno, SysError};

/// bubblewrap's status fds (`docs/bwrap.md`). Right after the sandbox is
/// created, `info` gets the pretty JSON object and `json_status` one line
/// with `child-pid` (the host pid of the sandbox's first process, hutch
/// init) and the inode of every namespace the sandbox made of its own
/// among `cgroup ipc mnt net pid uts` (`"mnt-namespace": N`, ...); `info`
/// is then closed. Then each `block` fd is read (one byte or EOF) and
/// closed before the sandbox goes on. When the workload was started and
/// has ended, `json_status` gets `{ "exit-code": N }`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusFds {
    pub info: Option<i32>,
    pub json_status: Option<i32>,
    pub block: Vec<i32>,
}

/// The namespaces bubblewrap names in its status JSON, in its order
/// (`ns_infos` in bubblewrap.c), and whether the sandbox made each one.
fn bwrap_namespaces(spec: &Spec) -> [(&'static str, bool); 6] {
    let ns = &spec.namespaces;
    [
        ("cgroup", ns.cgroup),
        ("ipc", ns.ipc),
        ("mnt", true),
        ("net", ns.net),
        ("pid", ns.pid),
        ("uts", ns.uts),
    ]
}

impl StatusProtocol for StatusFds {
    /// bubblewrap's start records on the status fds, then its block fds.
    /// A failed write is a launch failure, as in bubblewrap (`Write to
    /// info_fd`).
    fn started(&self, pid: libc::pid_t, spec: &Spec) -> Result<(), SysError> {
        if self.info.is_none() && self.json_status.is_none() && self.block.is_empty() {
            return Ok(());
        }
        let ids: Vec<(&str, u64)> = bwrap_namespaces(spec)
            .into_iter()
            .filter(|(_, own)| *own)
            .filter_map(|(name, _)| {
                std::fs::metadata(format!("/proc/{pid}/ns/{name}"))
                    .ok()
                    .map(|m| (name, m.ino()))
            })
            .collect();
        let fail = |e: std::io::Error| {
            SysError::new(
                "write(info fd)",
                Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            )
        };
        if let Some(fd) = self.info {
            let mut text = format!("{{\n    \"child-pid\": {pid}");
            for (name, ino) in &ids {
                text.push_str(&format!(",\n    \"{name}-namespace\": {ino}"));
            }
            text.push_str("\n}\n");
            sys::write_fd_all(fd, text.as_bytes()).map_err(fail)?;
            sys::close_fd(fd);
        }
        if let Some(fd) = self.json_status {
            let mut text = format!("{{ \"child-pid\": {pid}");
            for (name, ino) in &ids {
                text.push_str(&format!(", \"{name}-namespace\": {ino}"));
            }
            text.push_str(" }\n");
            sys::write_fd_all(fd, text.as_bytes()).map_err(fail)?;
        }
        for fd in &self.block {
            sys::read_one_byte_and_close(*fd).map_err(|e| {
                SysError::new(
                    "read(block fd)",
                    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                )
            })?;
        }
        Ok(())
    }

    /// `child-pid` is written: bubblewrap's callers open its
    /// `/proc/PID/ns/*` to join the sandbox (`--userns`, `--pidns`).
    fn tells_init_pid(&self) -> bool {
        self.info.is_some() || self.json_status.is_some()
    }

    /// bubblewrap's `{ "exit-code": N }` on the json status fd, only when
    /// the workload was started (bubblewrap writes none when setup or exec
    /// failed).
    fn ended(&self, workload_started: bool, status: i32) {
        let Some(fd) = self.json_status else { return };
        if workload_started {
            let _ = sys::write_fd_all(fd, format!("{{ \"exit-code\": {status} }}\n").as_bytes());
        }
        sys::close_fd(fd);
    }
}
