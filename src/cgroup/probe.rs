//! What the host's cgroup layout allows (printed by `hutch check`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::host::HostCgroups;
use super::plan::{self, Place};
use super::tree::Cgroup;
use super::v1;

/// The cgroup layout as seen from this process, and which limits work.
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
    /// That cgroup as a directory, its controllers and enabled subtree.
    pub own_dir: Option<PathBuf>,
    pub own_controllers: Vec<String>,
    pub own_subtree_control: Vec<String>,
    /// Whether hutch may create sandbox leaves under its own cgroup.
    pub delegation: Placement,
    /// The same for `--cgroup-parent`, when one was given.
    pub cgroup_parent: Option<Placement>,
    /// `memory`, `pids`, `cpus`, `io`: would a limit on it work here.
    pub limits: BTreeMap<&'static str, LimitSupport>,
    /// The cgroup v1 hierarchies hutch would use when the v2 tree gives
    /// no place (empty on a unified host).
    pub v1: Vec<V1Support>,
}

/// One cgroup v1 hierarchy and whether hutch may make leaves in it.
#[derive(Debug, Clone, Serialize)]
pub struct V1Support {
    pub controllers: Vec<String>,
    pub mount: PathBuf,
    /// Where the leaves go (`<mount>/hutch` for root).
    pub parent: Option<PathBuf>,
    pub usable: bool,
    pub reason: Option<String>,
}

/// Where sandbox leaves would be created.
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    pub usable: bool,
    /// Parent directory of the leaves.
    pub parent: Option<PathBuf>,
    /// hutch would first move its own processes into `hutch-supervisor`.
    pub moves_own_processes: bool,
    /// What hutch found, when unusable.
    pub reason: Option<String>,
    pub fix: Option<String>,
}

/// Whether one limit can be enforced, how, or why not.
#[derive(Debug, Clone, Serialize)]
pub struct LimitSupport {
    /// The Spec key that asks for it (`limits.memory`); front ends name
    /// their own way of setting it (the CLI adds its flag).
    pub key: &'static str,
    pub works: bool,
    pub by: Option<String>,
    pub why_not: Option<String>,
    pub fix: Option<String>,
}

/// Inspect the host. Reads files only; changes nothing.
pub fn probe() -> CgroupProbe {
    probe_with(None)
}

/// [`probe`], also judging a `--cgroup-parent` directory.
pub fn probe_with(cgroup_parent: Option<&Path>) -> CgroupProbe {
    let host = HostCgroups::detect();
    let own_cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        });
    probe_host(&host, own_cgroup, cgroup_parent, nproc_per_userns())
}

/// RLIMIT_NPROC is counted per user namespace since Linux 5.14.
fn nproc_per_userns() -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = rel
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (major, minor) >= (5, 14)
}

/// [`probe_with`] against a given host description.
pub fn probe_host(
    host: &HostCgroups,
    own_cgroup: Option<String>,
    cgroup_parent: Option<&Path>,
    nproc_fallback: bool,
) -> CgroupProbe {
    let own = host.own.as_deref().map(Cgroup::new);
    let placement = |r: &Result<Place, plan::NoPlace>| match r {
        Ok(p) => Placement {
            usable: true,
            parent: Some(p.parent.dir.clone()),
            moves_own_processes: p.evacuate,
            reason: None,
            fix: None,
        },
        Err(np) => Placement {
            usable: false,
            parent: None,
            moves_own_processes: false,
            reason: Some(np.found.clone()),
            fix: Some(np.fix.clone()),
        },
    };
    let own_place = plan::find_place(host, None);
    let parent_place = cgroup_parent.map(|p| plan::find_place(host, Some(p)));
    // Limits are judged where hutch would put the leaf.
    let effective = parent_place.as_ref().unwrap_or(&own_place);
    let mut limits = BTreeMap::new();
    for (name, key, controller, by) in [
        ("memory", "limits.memory", "memory", "cgroup memory.max"),
        ("pids", "limits.pids", "pids", "cgroup pids.max"),
        ("cpus", "limits.cpus", "cpu", "cgroup cpu.max"),
        ("io", "limits.io", "io", "cgroup io.max"),
    ] {
        let status = match effective {
            Ok(place) => plan::controller_status(host, place, controller).map_err(|f| {
                (
                    f,
                    format!(
                        "delegate the {controller} controller to {}",
                        place.parent.dir.display()
                    ),
                )
            }),
            Err(np) => Err((np.found.clone(), np.fix.clone())),
        };
        // No v2 place: the v1 hierarchy of the controller, when usable.
        let v1_by = match effective {
            Err(np) if !np.explicit && !host.v1.is_empty() => {
                let c = v1::controller_for(name);
                Some(v1::parent_for(host, c).map(|parent| {
                    format!(
                        "cgroup v1 {} ({})",
                        v1_files(name),
                        parent.child("hutch-ID").dir.display()
                    )
                }))
            }
            _ => None,
        };
        let status = match (status, &v1_by) {
            (Err((found, fix)), Some(Err(v1_found))) => Err((format!("{found}; {v1_found}"), fix)),
            (status, _) => status,
        };
        let support = match status {
            Err(_) if matches!(v1_by, Some(Ok(_))) => LimitSupport {
                key,
                works: true,
                by: v1_by.and_then(Result::ok),
                why_not: None,
                fix: None,
            },
            Ok(()) => LimitSupport {
                key,
                works: true,
                by: Some(by.into()),
                why_not: None,
                fix: None,
            },
            Err(_) if name == "pids" && nproc_fallback => LimitSupport {
                key,
                works: true,
                by: Some("RLIMIT_NPROC in the sandbox user namespace (fallback)".into()),
                why_not: None,
                fix: None,
            },
            Err((found, fix)) => LimitSupport {
                key,
                works: false,
                by: None,
                why_not: Some(format!(
                    "cgroup v2 {controller} controller not available ({found})"
                )),
                fix: Some(fix),
            },
        };
        limits.insert(name, support);
    }
    CgroupProbe {
        layout: match host.layout {
            super::host::Layout::Unified => "unified",
            super::host::Layout::Hybrid => "hybrid",
            super::host::Layout::Legacy => "legacy",
            super::host::Layout::None => "none",
        }
        .into(),
        v2_mount: host.v2_mount.clone(),
        v2_controllers: host
            .v2_mount
            .as_deref()
            .map(|m| Cgroup::new(m).controllers())
            .unwrap_or_default(),
        own_cgroup,
        own_dir: host.own.clone(),
        own_controllers: own.as_ref().map(Cgroup::controllers).unwrap_or_default(),
        own_subtree_control: own
            .as_ref()
            .map(Cgroup::subtree_control)
            .unwrap_or_default(),
        v1: host
            .v1
            .iter()
            .map(|h| {
                let r = v1::parent_for(host, &h.controllers[0]);
                V1Support {
                    controllers: h.controllers.clone(),
                    mount: h.mount.clone(),
                    parent: r.as_ref().ok().map(|c| c.dir.clone()),
                    usable: r.is_ok(),
                    reason: r.err(),
                }
            })
            .collect(),
        delegation: placement(&own_place),
        cgroup_parent: parent_place.as_ref().map(placement),
        limits,
    }
}

/// The v1 interface files that enforce a limit, for `hutch check`.
fn v1_files(limit: &str) -> &'static str {
    match limit {
        "memory" => "memory.limit_in_bytes",
        "pids" => "pids.max",
        "cpus" => "cpu.cfs_quota_us",
        "io" => "blkio.throttle.*_device",
        _ => "",
    }
}
