//! What was enforced, what was not and why, and what the sandbox used.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::tree::Cgroup;

/// The limits part of the exit report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsReport {
    /// The sandbox's cgroup leaf, when one was created.
    pub cgroup: Option<PathBuf>,
    pub enforced: Vec<Enforced>,
    pub unenforced: Vec<Unenforced>,
    /// Usage and limit events read from the leaf.
    pub stats: Option<CgroupStats>,
    /// `oom-killed` or `pids-limit-hit` when a limit event happened.
    #[serde(deserialize_with = "crate::util::static_words::opt_word")]
    pub ended_by: Option<crate::util::static_words::Word>,
    /// Set when the leaf could not be removed at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup_error: Option<String>,
}

/// A limit in force, and the mechanism that enforces it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Enforced {
    /// Key under `limits.` (`memory`, `pids`, `cpus`, `rlimits.nofile`).
    pub limit: String,
    pub value: serde_json::Value,
    /// e.g. `cgroup memory.max`, `RLIMIT_NPROC in the sandbox user namespace`.
    pub by: String,
}

/// A preferred limit this host could not enforce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unenforced {
    pub limit: String,
    pub value: serde_json::Value,
    pub reason: String,
}

/// Counters read from the leaf's interface files (absent files give None).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupStats {
    /// memory.peak in bytes (Linux >= 5.19).
    pub memory_peak: Option<u64>,
    /// memory.events `max`: times usage hit memory.max.
    pub memory_max_events: Option<u64>,
    /// memory.events `oom`.
    pub oom: Option<u64>,
    /// memory.events `oom_kill`.
    pub oom_kill: Option<u64>,
    /// pids.events `max`: forks refused by pids.max.
    pub pids_max_events: Option<u64>,
    /// cpu.stat `usage_usec`.
    pub cpu_usage_usec: Option<u64>,
    /// cpu.stat `throttled_usec` (cpu controller only).
    pub cpu_throttled_usec: Option<u64>,
    /// io.stat `rbytes`, summed over devices (io controller only).
    pub io_rbytes: Option<u64>,
    /// io.stat `wbytes`, summed over devices (io controller only).
    pub io_wbytes: Option<u64>,
    /// cpu.stat `user_usec` (v1: cpuacct.usage_user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_user_usec: Option<u64>,
    /// cpu.stat `system_usec` (v1: cpuacct.usage_sys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_system_usec: Option<u64>,
    /// pids.peak: the most processes at once (Linux >= 6.13 in v2; pids
    /// controller only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_peak: Option<u64>,
}

impl CgroupStats {
    pub fn read(leaf: &Cgroup) -> CgroupStats {
        let events = leaf.read("memory.events").ok();
        let ev = |k: &str| events.as_deref().and_then(|t| super::tree::parse_key(t, k));
        let cpu = leaf.read("cpu.stat").ok();
        let cs = |k: &str| cpu.as_deref().and_then(|t| super::tree::parse_key(t, k));
        let io = leaf.read("io.stat").ok().map(|t| super::io::parse_stat(&t));
        CgroupStats {
            memory_peak: leaf
                .read("memory.peak")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            memory_max_events: ev("max"),
            oom: ev("oom"),
            oom_kill: ev("oom_kill"),
            pids_max_events: leaf.key("pids.events", "max"),
            cpu_usage_usec: cs("usage_usec"),
            cpu_throttled_usec: cs("throttled_usec"),
            io_rbytes: io.map(|(r, _)| r),
            io_wbytes: io.map(|(_, w)| w),
            cpu_user_usec: cs("user_usec"),
            cpu_system_usec: cs("system_usec"),
            pids_peak: leaf
                .read("pids.peak")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
        }
    }

    /// What changed since `base` (a resident sandbox's command): the
    /// counters' differences; the memory peak only where it was reset at
    /// `base` (`peak_reset`), the process peak never (neither can be told
    /// apart from an earlier command's otherwise).
    pub fn since(&self, base: &CgroupStats, peak_reset: bool) -> CgroupStats {
        let d = |now: Option<u64>, then: Option<u64>| match (now, then) {
            (Some(n), Some(t)) => Some(n.saturating_sub(t)),
            (n, None) => n,
            (None, Some(_)) => None,
        };
        CgroupStats {
            memory_peak: self.memory_peak.filter(|_| peak_reset),
            memory_max_events: d(self.memory_max_events, base.memory_max_events),
            oom: d(self.oom, base.oom),
            oom_kill: d(self.oom_kill, base.oom_kill),
            pids_max_events: d(self.pids_max_events, base.pids_max_events),
            cpu_usage_usec: d(self.cpu_usage_usec, base.cpu_usage_usec),
            cpu_throttled_usec: d(self.cpu_throttled_usec, base.cpu_throttled_usec),
            io_rbytes: d(self.io_rbytes, base.io_rbytes),
            io_wbytes: d(self.io_wbytes, base.io_wbytes),
            cpu_user_usec: d(self.cpu_user_usec, base.cpu_user_usec),
            cpu_system_usec: d(self.cpu_system_usec, base.cpu_system_usec),
            pids_peak: None,
        }
    }

    /// Which limit event most plausibly ended the run.
    pub fn ended_by(&self) -> Option<&'static str> {
        if self.oom_kill.unwrap_or(0) > 0 {
            Some("oom-killed")
        } else if self.pids_max_events.unwrap_or(0) > 0 {
            Some("pids-limit-hit")
        } else {
            None
        }
    }
}
