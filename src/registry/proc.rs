//! What the registry reads of a process from procfs: its start time (the
//! identity that, with the pid, no later process can share), its parent,
//! its real uid and its pid-namespace depth. Reads are bounded and every
//! field is parsed, never trusted: a process controls its `comm`.

use std::io::Read;

/// Bytes read of `/proc/PID/stat` or `/proc/PID/status` (both are far
/// smaller).
const PROC_FILE_MAX: u64 = 16 * 1024;

/// What procfs says about one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcInfo {
    /// `starttime` of `/proc/PID/stat`: clock ticks after boot.
    pub start_time: u64,
    pub ppid: i32,
    /// `/proc/PID/stat` state (`Z` for a zombie).
    pub state: u8,
}

fn read_bounded(path: &str) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(PROC_FILE_MAX)
        .read_to_end(&mut data)
        .ok()?;
    Some(data)
}

/// `/proc/PID/stat`: `None` when the process does not exist (any more).
pub fn stat(pid: i32) -> Option<ProcInfo> {
    let data = read_bounded(&format!("/proc/{pid}/stat"))?;
    parse_stat(&data)
}

/// Parse a `/proc/PID/stat` line. The command name is in parentheses and
/// may itself hold `)` and spaces, so the fields start after the last `)`.
pub fn parse_stat(data: &[u8]) -> Option<ProcInfo> {
    let close = data.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&data[close + 1..]).ok()?;
    // Fields after the name: state (3), ppid (4), ... starttime (22).
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let state = *fields.first()?.as_bytes().first()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let start_time = fields.get(19)?.parse().ok()?;
    Some(ProcInfo {
        start_time,
        ppid,
        state,
    })
}

/// The real uid and the `NSpid` list of `/proc/PID/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    pub uid: u32,
    /// The process's pid in each pid namespace, outermost first.
    pub ns_pids: Vec<i32>,
}

/// `/proc/PID/status`, or `None` when the process is gone.
pub fn status(pid: i32) -> Option<ProcStatus> {
    let data = read_bounded(&format!("/proc/{pid}/status"))?;
    parse_status(&data)
}

pub fn parse_status(data: &[u8]) -> Option<ProcStatus> {
    let text = std::str::from_utf8(data).ok()?;
    let mut uid = None;
    let mut ns_pids = Vec::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Uid:") {
            uid = v.split_ascii_whitespace().next()?.parse().ok();
        } else if let Some(v) = line.strip_prefix("NSpid:") {
            ns_pids = v
                .split_ascii_whitespace()
                .map(|p| p.parse().ok())
                .collect::<Option<Vec<i32>>>()?;
        }
    }
    Some(ProcStatus { uid: uid?, ns_pids })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_follow_the_last_parenthesis() {
        let line = b"4242 (a) b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 100 10\n";
        let info = parse_stat(line).unwrap();
        assert_eq!(info.ppid, 17);
        assert_eq!(info.state, b'S');
        assert_eq!(info.start_time, 987654);
        assert!(parse_stat(b"12 (x").is_none());
        assert!(parse_stat(b"12 (x) S 1").is_none());
    }

    #[test]
    fn this_process_is_readable() {
        let me = std::process::id() as i32;
        let info = stat(me).unwrap();
        assert!(info.start_time > 0);
        let st = status(me).unwrap();
        assert_eq!(st.uid, crate::sys::geteuid());
        assert_eq!(st.ns_pids.first(), Some(&me));
        assert!(stat(-5).is_none());
    }

    #[test]
    fn status_lines_are_parsed() {
        let s = parse_status(b"Name:\tx\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t900\t1\n").unwrap();
        assert_eq!(s.uid, 1000);
        assert_eq!(s.ns_pids, vec![900, 1]);
        assert!(parse_status(b"Name:\tx\n").is_none());
    }
}
