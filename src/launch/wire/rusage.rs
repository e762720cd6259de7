//! The reaped tree's resource usage, as hutch init sends it with `Exited`.

use serde::{Deserialize, Serialize};

/// `getrusage(RUSAGE_CHILDREN)` of hutch init after it reaped the
/// sandbox's processes: every reaped descendant's CPU time and block I/O
/// summed, the largest one's peak resident set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeRusage {
    pub user_usec: u64,
    pub system_usec: u64,
    /// `ru_maxrss`: of the single largest process, in bytes.
    pub max_rss_bytes: u64,
    /// `ru_inblock` / `ru_oublock` in bytes (512-byte units): reads and
    /// writes that reached a block device (not the page cache or tmpfs).
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl TreeRusage {
    /// This process's reaped children, now.
    pub fn of_children() -> Option<TreeRusage> {
        use nix::sys::resource::{UsageWho, getrusage};
        let u = getrusage(UsageWho::RUSAGE_CHILDREN).ok()?;
        let usec = |t: nix::sys::time::TimeVal| {
            (t.tv_sec().max(0) as u64) * 1_000_000 + t.tv_usec().max(0) as u64
        };
        Some(TreeRusage {
            user_usec: usec(u.user_time()),
            system_usec: usec(u.system_time()),
            max_rss_bytes: (u.max_rss().max(0) as u64).saturating_mul(1024),
            read_bytes: (u.block_reads().max(0) as u64).saturating_mul(512),
            write_bytes: (u.block_writes().max(0) as u64).saturating_mul(512),
        })
    }
}
