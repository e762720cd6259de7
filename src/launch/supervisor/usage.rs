//! What the command used: the report's `usage`, from the sandbox's cgroup
//! where it has the counter, else from the reaped tree's rusage.

use serde::{Deserialize, Serialize};

use crate::cgroup::CgroupStats;
use crate::launch::wire::rusage::TreeRusage;

/// Resource usage of one sandbox, all of its processes together. A field
/// is `None` when neither source has it (no cgroup, and rusage does not
/// count processes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time in user mode, microseconds.
    pub cpu_user_usec: Option<u64>,
    /// CPU time in the kernel, microseconds.
    pub cpu_system_usec: Option<u64>,
    /// Peak memory: the cgroup's (page cache and tmpfs files included),
    /// else the largest process's resident set.
    pub memory_peak_bytes: Option<u64>,
    /// Bytes read from and written to block devices (page-cache hits and
    /// tmpfs do not count).
    pub io_read_bytes: Option<u64>,
    pub io_write_bytes: Option<u64>,
    /// The most processes alive at once (cgroup `pids.peak` only).
    pub pids_peak: Option<u64>,
    /// `cgroup` when any value came from the cgroup, else `rusage`.
    pub source: String,
}

/// The usage from `stats` where it has each counter, else from `rusage`;
/// `None` when there is neither.
pub fn usage(stats: Option<&CgroupStats>, rusage: Option<&TreeRusage>) -> Option<Usage> {
    if stats.is_none() && rusage.is_none() {
        return None;
    }
    let cg = |f: fn(&CgroupStats) -> Option<u64>| stats.and_then(f);
    let ru = |f: fn(&TreeRusage) -> u64| rusage.map(f);
    let u = Usage {
        cpu_user_usec: cg(|s| s.cpu_user_usec).or(ru(|r| r.user_usec)),
        cpu_system_usec: cg(|s| s.cpu_system_usec).or(ru(|r| r.system_usec)),
        memory_peak_bytes: cg(|s| s.memory_peak).or(ru(|r| r.max_rss_bytes)),
        io_read_bytes: cg(|s| s.io_rbytes).or(ru(|r| r.read_bytes)),
        io_write_bytes: cg(|s| s.io_wbytes).or(ru(|r| r.write_bytes)),
        pids_peak: cg(|s| s.pids_peak),
        source: String::new(),
    };
    let from_cgroup = stats.is_some_and(|s| {
        [
            s.cpu_user_usec,
            s.cpu_system_usec,
            s.memory_peak,
            s.io_rbytes,
            s.io_wbytes,
            s.pids_peak,
        ]
        .iter()
        .any(Option::is_some)
    });
    Some(Usage {
        source: if from_cgroup { "cgroup" } else { "rusage" }.into(),
        ..u
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_counters_win_and_rusage_fills_the_gaps() {
        let stats = CgroupStats {
            memory_peak: Some(300 << 20),
            cpu_user_usec: Some(7),
            pids_peak: Some(3),
            ..CgroupStats::default()
        };
        let ru = TreeRusage {
            user_usec: 1,
            system_usec: 2,
            max_rss_bytes: 100 << 20,
            read_bytes: 512,
            write_bytes: 1024,
        };
        let u = usage(Some(&stats), Some(&ru)).unwrap();
        assert_eq!(u.cpu_user_usec, Some(7));
        assert_eq!(u.cpu_system_usec, Some(2));
        assert_eq!(u.memory_peak_bytes, Some(300 << 20));
        assert_eq!((u.io_read_bytes, u.io_write_bytes), (Some(512), Some(1024)));
        assert_eq!(u.pids_peak, Some(3));
        assert_eq!(u.source, "cgroup");
        let u = usage(None, Some(&ru)).unwrap();
        assert_eq!((u.memory_peak_bytes, u.pids_peak), (Some(100 << 20), None));
        assert_eq!(u.source, "rusage");
        assert_eq!(usage(None, None), None);
    }
}
