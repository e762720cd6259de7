//! Kernel feature detection for `hutch check` and the tests.
//!
//! Every probe *tries* the feature in a forked child that exits (see
//! [`fork::in_child`]); nothing is guessed from the kernel
//! version and nothing is left behind: mounts live in the child's private
//! mount namespace, namespaces die with the child, and children are reaped.

mod env;
mod fork;
mod id_range;
mod idmap;
mod image;
mod landlock;
mod mounts;
mod namespaces;
mod registry;
mod render;
mod seccomp;
mod syscalls;
mod userns;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::sys::Errno;
use fork::{ChildOutcome, ProbeResult};

pub use env::HostSettings;
pub use render::human;

/// How long one probe child may take before it is killed. A probe takes
/// milliseconds, but on a loaded host (a test suite in parallel on two
/// cores) forking and faulting in can take seconds, and a verdict that
/// depends on the load is wrong; a probe that hangs is still bounded.
const CHILD_LIMIT: Duration = Duration::from_secs(10);

/// Whether a feature works here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It works.
    Ok,
    /// The kernel does not have it (not built in, too old, not loaded).
    Missing,
    /// The kernel has it, but a policy (sysctl, LSM, container runtime,
    /// privileges) stops hutch from using it.
    Restricted,
    /// Not probed because hutch does not use it in this situation
    /// (e.g. idmapped mounts when not running as root).
    Skipped,
}

impl Status {
    /// The word printed by `hutch check`.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Missing => "missing",
            Status::Restricted => "restricted",
            Status::Skipped => "skipped",
        }
    }
}

/// The verdict on one kernel feature.
#[derive(Debug, Clone, Serialize)]
pub struct Feature {
    /// Stable identifier, e.g. `user_namespace`.
    pub name: &'static str,
    /// `status == ok`.
    pub ok: bool,
    pub status: Status,
    /// Whether `hutch run` with the default profile needs it here.
    pub required: bool,
    /// What was tried and what happened (the failing call and errno).
    pub detail: String,
    /// How to make it work, when it does not.
    pub fix: Option<String>,
}

impl Feature {
    fn ok(name: &'static str, required: bool, detail: impl Into<String>) -> Self {
        Feature {
            name,
            ok: true,
            status: Status::Ok,
            required,
            detail: detail.into(),
            fix: None,
        }
    }

    fn bad(
        name: &'static str,
        required: bool,
        status: Status,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        let fix = fix.into();
        Feature {
            name,
            ok: status == Status::Ok,
            status,
            required,
            detail: detail.into(),
            fix: (!fix.is_empty()).then_some(fix),
        }
    }
}

/// Everything `hutch check` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// hutch's version.
    pub hutch_version: &'static str,
    /// `uname -r`.
    pub kernel_release: String,
    /// Effective uid of the probing process.
    pub uid: u32,
    /// Whether it ran as root (uid 0): hutch then takes the root path
    /// (idmapped mounts, an unprivileged host id for the workload).
    pub root: bool,
    /// True when every required feature is ok (the exit code is 0).
    pub ok: bool,
    /// One entry per feature, in a stable order.
    pub features: Vec<Feature>,
    /// Which seccomp return actions the kernel supports
    /// (`SECCOMP_GET_ACTION_AVAIL`), by name.
    pub seccomp_actions: BTreeMap<&'static str, bool>,
    /// The Landlock ABI version, when Landlock is enabled.
    pub landlock_abi: Option<i32>,
    /// The host's user namespace settings, as read.
    pub host: HostSettings,
    /// The cgroup layout (from [`crate::cgroup::probe::probe`]).
    pub cgroup: serde_json::Value,
}

impl Report {
    /// The feature called `name`, if probed.
    #[cfg(feature = "internals")]
    pub fn feature(&self, name: &str) -> Option<&Feature> {
        self.features.iter().find(|f| f.name == name)
    }
}

/// Probe every feature hutch uses. Safe to call from any thread; takes
/// well under a second.
pub fn run_all() -> Report {
    let host = HostSettings::read();
    let mut features = Vec::new();
    features.extend(userns::probe(&host));
    features.extend(mounts::probe(&host));
    features.extend(namespaces::probe(&host));
    features.push(idmap::probe(&host));
    let (seccomp_feature, seccomp_actions) = seccomp::probe(&host);
    features.push(seccomp_feature);
    let (landlock_feature, landlock_abi) = landlock::probe(&host);
    features.push(landlock_feature);
    let cgroup = crate::cgroup::probe::probe();
    let cgroup = serde_json::to_value(&cgroup).unwrap_or(serde_json::Value::Null);
    features.push(cgroup_feature(&cgroup));
    features.extend(syscalls::probe(&host));
    features.push(image::probe(&host));
    features.push(id_range::probe(&host));
    features.push(registry::probe());
    let ok = features.iter().all(|f| f.ok || !f.required);
    Report {
        hutch_version: env!("CARGO_PKG_VERSION"),
        kernel_release: crate::sys::kernel_release(),
        uid: host.uid,
        root: host.uid == 0,
        ok,
        features,
        seccomp_actions,
        landlock_abi,
        host,
        cgroup,
    }
}

/// cgroup v2 as hutch's limits need it: a v2 hierarchy with the memory,
/// pids, cpu and io controllers. Limits are opt-in, so not required.
fn cgroup_feature(cg: &serde_json::Value) -> Feature {
    const NAME: &str = "cgroup_v2";
    let layout = cg.get("layout").and_then(|v| v.as_str()).unwrap_or("none");
    let mount = cg.get("v2_mount").and_then(|v| v.as_str());
    let controllers: Vec<&str> = cg
        .get("v2_controllers")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
        .unwrap_or_default();
    let wanted = ["memory", "pids", "cpu", "io"];
    let lacking: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|w| !controllers.contains(w))
        .collect();
    // The v1 hierarchies hutch may use instead (a legacy or hybrid host).
    let v1_usable: Vec<String> = cg
        .get("v1")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter(|h| h.get("usable").and_then(|u| u.as_bool()) == Some(true))
        .filter_map(|h| {
            let names: Vec<&str> = h
                .get("controllers")?
                .as_array()?
                .iter()
                .filter_map(|c| c.as_str())
                .collect();
            Some(format!(
                "{} at {}",
                names.join(","),
                h.get("parent")?.as_str()?
            ))
        })
        .collect();
    let boot_fix = if v1_usable.is_empty() {
        "boot with systemd.unified_cgroup_hierarchy=1 (and without cgroup_no_v1=) so all controllers are on cgroup v2; \
         only needed for --memory/--pids/--cpus/--io-max limits"
            .to_string()
    } else {
        format!(
            "limits use the cgroup v1 hierarchies here ({}); for cgroup v2 boot with systemd.unified_cgroup_hierarchy=1",
            v1_usable.join("; ")
        )
    };
    match mount {
        None => Feature::bad(
            NAME,
            false,
            Status::Missing,
            format!("no cgroup2 filesystem mounted (layout: {layout})"),
            boot_fix.as_str(),
        ),
        Some(m) if !lacking.is_empty() => Feature::bad(
            NAME,
            false,
            Status::Restricted,
            format!(
                "{layout} layout: cgroup2 at {m} offers [{}], lacks [{}]",
                controllers.join(" "),
                lacking.join(" ")
            ),
            boot_fix.as_str(),
        ),
        Some(m) => Feature::ok(
            NAME,
            false,
            format!(
                "{layout} layout: cgroup2 at {m} with [{}]",
                controllers.join(" ")
            ),
        ),
    }
}

/// Run `f` in a probe child; Err(description) when the child itself could
/// not run or report (fork failed, it crashed or hung).
fn in_child(f: impl FnOnce() -> ProbeResult) -> Result<ProbeResult, String> {
    match fork::in_child(f, CHILD_LIMIT) {
        Ok(ChildOutcome::Done(r)) => Ok(r),
        Ok(ChildOutcome::Died(status)) => {
            Err(format!("probe child died (wait status {status:#x})"))
        }
        Ok(ChildOutcome::TimedOut) => Err(format!(
            "probe child did not answer within {}s and was killed",
            CHILD_LIMIT.as_secs()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// `call => ERRNO: description`, the way every failure is shown.
fn failed(call: &str, errno: Errno) -> String {
    format!("{call} => {errno:?}: {}", errno.desc())
}

/// Name of step `n` in `steps`.
fn step_name(steps: &[&'static str], n: u32) -> &'static str {
    steps.get(n as usize).copied().unwrap_or("probe")
}
