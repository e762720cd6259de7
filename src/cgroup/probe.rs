//! What the host's cgroup layout allows (used by `hutch check`).

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The cgroup layout as seen from this process.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupProbe {
    /// `unified` (pure v2), `hybrid` (v1 with a v2 mount), `legacy` (v1 only) or `none`.
    pub layout: String,
    /// Where cgroup2 is mounted, if anywhere.
    pub v2_mount: Option<PathBuf>,
    /// Controllers the v2 hierarchy offers at its root.
    pub v2_controllers: Vec<String>,
    /// This process's v2 cgroup (from `/proc/self/cgroup`, `0::` line).
    pub own_cgroup: Option<String>,
}

/// Inspect the host. Reads files only; changes nothing.
pub fn probe() -> CgroupProbe {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v2_mount = None;
    let mut has_v1 = false;
    for line in mounts.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fstype = right.split_whitespace().next().unwrap_or("");
        let mount_point = left.split_whitespace().nth(4).unwrap_or("");
        match fstype {
            "cgroup2" if v2_mount.is_none() => v2_mount = Some(PathBuf::from(mount_point)),
            "cgroup" => has_v1 = true,
            _ => {}
        }
    }
    let layout = match (&v2_mount, has_v1) {
        (Some(_), false) => "unified",
        (Some(_), true) => "hybrid",
        (None, true) => "legacy",
        (None, false) => "none",
    };
    let v2_controllers = v2_mount
        .as_deref()
        .map(|m| read_words(&m.join("cgroup.controllers")))
        .unwrap_or_default();
    let own_cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        });
    CgroupProbe {
        layout: layout.into(),
        v2_mount,
        v2_controllers,
        own_cgroup,
    }
}

fn read_words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}
