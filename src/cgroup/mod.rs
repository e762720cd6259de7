//! cgroup leaf per sandbox (limits, events, kill, removal), and the
//! rlimits applied inside the sandbox. cgroup v2 is preferred; on a host
//! whose controllers live in v1 hierarchies (legacy, hybrid) the sandbox
//! gets a leaf in each of them instead ([`v1`]).
//!
//! hutch writes cgroupfs directly (docs/decisions/0001-cgroupfs-direct.md).
//! Flow: [`prepare`] in the supervisor before clone decides what can be
//! enforced, creates the leaf and writes its limits; the launcher passes
//! [`Leaf::cgroup_fd`] to clone3 (`CLONE_INTO_CGROUP`) and calls
//! [`apply_rlimits`] in the sandbox; at the end [`Leaf::finish`] reads
//! the counters, kills what is left and removes the leaf. v1 has no
//! `CLONE_INTO_CGROUP`: around clone3 the launcher calls
//! [`Leaf::enter_for_clone`] and [`Leaf::leave_after_clone`].

mod error;
pub mod host;
pub mod io;
pub mod plan;
pub mod probe;
mod report;
pub mod rlimits;
pub mod tree;
pub mod v1;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use serde_json::json;

pub use error::CgroupError;
pub use report::{CgroupStats, Enforced, LimitsReport, Unenforced};

use crate::spec::{Limit, Limits, SpecError};
pub(crate) use error::errno_text;
use host::HostCgroups;
use plan::{NoPlace, Place, SUPERVISOR};
use tree::Cgroup;

/// Period written to `cpu.max` (the kernel's default, 100 ms).
pub const CPU_PERIOD_US: u64 = 100_000;
/// Smallest memory cap accepted (hutch's own init must fit).
pub const MIN_MEMORY: u64 = 4 << 20;
/// Largest `pids.max` the kernel accepts (PID_MAX_LIMIT).
pub const MAX_PIDS: u64 = 4 << 20;
/// How long teardown waits for killed processes and the leaf's removal.
const TEARDOWN: Duration = Duration::from_secs(5);

/// Check the cgroup-backed limits and rlimits of a Spec; errors name the
/// key under `limits.`.
pub fn validate_limits(l: &Limits) -> Result<(), SpecError> {
    let err = |k: &str, m: String| Err(SpecError::new(format!("limits.{k}"), m));
    if let Some(m) = &l.memory
        && m.value().0 < MIN_MEMORY
    {
        return err(
            "memory",
            format!("{} bytes is below the minimum of 4M", m.value().0),
        );
    }
    if let Some(p) = &l.pids
        && !(1..=MAX_PIDS).contains(&p.value())
    {
        return err("pids", format!("must be 1 to {MAX_PIDS}"));
    }
    if let Some(c) = &l.cpus {
        let v = c.value();
        if !(v.is_finite() && (0.01..=4096.0).contains(&v)) {
            return err("cpus", "must be a number of CPUs from 0.01 to 4096".into());
        }
    }
    if let Some(io) = &l.io {
        io::validate(io.get())?;
    }
    for (name, value) in &l.rlimits {
        if let Err(m) = rlimits::check(name, *value) {
            return err(&format!("rlimits.{name}"), m);
        }
    }
    if let Some(p) = &l.cgroup_parent
        && (!p.is_absolute()
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir)))
    {
        return err(
            "cgroup_parent",
            "must be an absolute path without `..` (a directory under the cgroup2 mount)".into(),
        );
    }
    Ok(())
}

/// A limit asked for in the Spec and the controller that would enforce it.
struct Wanted {
    key: &'static str,
    controller: &'static str,
    required: bool,
    value: serde_json::Value,
}

fn wanted(limits: &Limits) -> Vec<Wanted> {
    fn w<T: Copy>(
        key: &'static str,
        controller: &'static str,
        l: &Option<Limit<T>>,
        v: impl Fn(T) -> serde_json::Value,
    ) -> Option<Wanted> {
        l.as_ref().map(|l| Wanted {
            key,
            controller,
            required: l.is_required(),
            value: v(l.value()),
        })
    }
    let io = limits.io.as_ref().map(|l| Wanted {
        key: "io",
        controller: "io",
        required: l.is_required(),
        value: json!(l.get()),
    });
    [
        w("memory", "memory", &limits.memory, |b| json!(b.0)),
        w("pids", "pids", &limits.pids, |n| json!(n)),
        w("cpus", "cpu", &limits.cpus, |c| json!(c)),
        io,
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The sandbox's cgroup leaf (when this host gives hutch one) with the
/// limits written into it, and the rlimits applied inside the sandbox;
/// between [`prepare`] and [`Leaf::finish`].
#[derive(Debug)]
pub struct Leaf {
    /// The leaf's directory; None where no cgroup could be created (the
    /// rlimits and the report still apply).
    leaf: Option<LeafDir>,
    /// The leaves in the v1 hierarchies, on a host without the v2 ones.
    v1: Option<v1::V1Leaf>,
    rlimits: Vec<(libc::c_int, u64)>,
    enforced: Vec<Enforced>,
    unenforced: Vec<Unenforced>,
    /// Only the process that created the leaf removes it on drop (a forked
    /// child holding a copy must not).
    owner: u32,
    /// The leaf is an engine's (an OCI `cgroupsPath`): it is read for the
    /// report and killed with the sandbox, but removed by its owner
    /// (`hutch-oci delete`), not here.
    external: bool,
    /// A resident sandbox: the counters when its current command started
    /// ([`Leaf::start_command`]); the report gives what changed since.
    baseline: Option<CommandBaseline>,
}

/// The counters of a leaf when a resident sandbox's command started.
#[derive(Debug, Clone)]
struct CommandBaseline {
    stats: CgroupStats,
    /// The peak of memory was reset for the command (v1's
    /// `memory.max_usage_in_bytes`): it is the command's own.
    memory_peak_reset: bool,
}

/// The created leaf: its directory and an fd for `CLONE_INTO_CGROUP`.
#[derive(Debug)]
struct LeafDir {
    cg: Cgroup,
    fd: OwnedFd,
}

/// Decide what can be enforced, create the leaf and write its limits.
/// Runs in the supervisor before clone. A required limit that cannot be
/// enforced is an error; a preferred one is recorded as unenforced.
pub fn prepare(limits: &Limits, sandbox_id: &str) -> Result<Leaf, CgroupError> {
    prepare_on(&HostCgroups::detect(), limits, sandbox_id)
}

/// [`prepare`] against a given host description (tests use a fake tree).
pub fn prepare_on(
    host: &HostCgroups,
    limits: &Limits,
    sandbox_id: &str,
) -> Result<Leaf, CgroupError> {
    let leaf_name = format!("hutch-{sandbox_id}");
    if !tree::valid_name(&leaf_name) {
        return Err(CgroupError::Io {
            action: "name leaf",
            path: leaf_name.into(),
            errno: "EINVAL: invalid sandbox id".into(),
            hint: "sandbox ids hold only letters, digits, '-', '_' and '.'".into(),
        });
    }
    let mut p = Leaf {
        leaf: None,
        v1: None,
        rlimits: Vec::new(),
        enforced: Vec::new(),
        unenforced: Vec::new(),
        owner: std::process::id(),
        external: false,
        baseline: None,
    };
    let mut wanted = wanted(limits);
    // Devices first: a path that is no disk is a mistake in the Spec,
    // whatever the host's controllers.
    let io_devices = match &limits.io {
        None => Vec::new(),
        Some(l) => match io::resolve(l.get()) {
            Ok(d) => d,
            Err((index, problem)) if l.is_required() => {
                return Err(CgroupError::IoDevice {
                    index,
                    device: l.get()[index].device.clone(),
                    problem,
                });
            }
            Err((index, problem)) => {
                p.unenforced.push(Unenforced {
                    limit: "io".into(),
                    value: json!(l.get()),
                    reason: format!(
                        "limits.io[{index}].device: {}: {problem}",
                        l.get()[index].device.display()
                    ),
                });
                wanted.retain(|w| w.key != "io");
                Vec::new()
            }
        },
    };
    // Controllers the leaf gets: the limited ones, plus memory and pids
    // for the report's counters when they come for free.
    let mut missing: Vec<(&Wanted, String, String)> = Vec::new();
    match plan::find_place(host, limits.cgroup_parent.as_deref()) {
        Err(np) if np.explicit => {
            return Err(CgroupError::BadParent {
                path: limits.cgroup_parent.clone().unwrap_or_default(),
                problem: np.found,
                fix: np.fix,
            });
        }
        Err(np) if !host.v1.is_empty() => {
            prepare_v1(
                host,
                &np,
                &leaf_name,
                limits,
                &io_devices,
                &wanted,
                &mut p,
                &mut missing,
            )?;
        }
        Err(np) => {
            for w in &wanted {
                missing.push((w, np.found.clone(), np.fix.clone()));
            }
        }
        Ok(place) => {
            let enabled = enable_controllers(host, &place, &wanted, &mut missing)?;
            // Even with nothing to limit, a leaf gives cgroup.kill.
            let leaf = place.parent.child(&leaf_name);
            std::fs::create_dir(&leaf.dir).map_err(|e| {
                CgroupError::io(
                    "mkdir",
                    &leaf.dir,
                    &e,
                    "a stale leaf of a crashed run may need `rmdir`",
                )
            })?;
            let fd = match leaf.open_dir() {
                Ok(fd) => fd,
                Err(e) => {
                    let _ = std::fs::remove_dir(&leaf.dir);
                    return Err(CgroupError::io("open", &leaf.dir, &e, "check permissions"));
                }
            };
            p.leaf = Some(LeafDir { cg: leaf, fd });
            for w in &wanted {
                if !enabled.contains(&w.controller) {
                    continue;
                }
                let leaf = p.leaf.as_ref().map(|l| &l.cg).expect("leaf");
                match write_limit(leaf, limits, &io_devices, w.key) {
                    Ok(by) => p.enforced.push(Enforced {
                        limit: w.key.into(),
                        value: w.value.clone(),
                        by,
                    }),
                    Err((file, e)) => missing.push((
                        w,
                        format!("writing {file} failed: {e}"),
                        "report this as a bug with `hutch check` output".into(),
                    )),
                }
            }
        }
    }
    for (w, found, fix) in missing {
        if w.key == "pids" {
            // RLIMIT_NPROC in the sandbox's user namespace counts only the
            // sandbox's processes (Linux >= 5.14 per-namespace ucounts).
            let n = w.value.as_u64().unwrap_or(MAX_PIDS);
            let (_, hard) =
                crate::sys::getrlimit(libc::RLIMIT_NPROC as i32).unwrap_or((u64::MAX, u64::MAX));
            rlimits::merge_min(&mut p.rlimits, libc::RLIMIT_NPROC as i32, n.min(hard));
            p.enforced.push(Enforced {
                limit: "pids".into(),
                value: w.value.clone(),
                by: format!(
                    "RLIMIT_NPROC in the sandbox user namespace (pids controller: {found})"
                ),
            });
            continue;
        }
        if w.required {
            return Err(CgroupError::Unavailable {
                limit: w.key,
                controller: w.controller,
                found,
                fix,
            });
        }
        p.unenforced.push(Unenforced {
            limit: w.key.into(),
            value: w.value.clone(),
            reason: format!(
                "cgroup v2 {} controller not available ({found})",
                w.controller
            ),
        });
    }
    plan_rlimits(limits, &mut p)?;
    Ok(p)
}

/// No cgroup v2 place, but v1 hierarchies: a leaf in each v1 hierarchy
/// of a wanted limit (and in memory, pids and cpuacct for the report's
/// counters, where usable), its limits written. Limits whose hierarchy
/// hutch may not use go to `missing`, saying both what the v2 tree and
/// the v1 hierarchy lack.
#[allow(clippy::too_many_arguments)]
fn prepare_v1<'w>(
    host: &HostCgroups,
    np: &NoPlace,
    leaf_name: &str,
    limits: &Limits,
    io_devices: &[io::IoDevice],
    wanted: &'w [Wanted],
    p: &mut Leaf,
    missing: &mut Vec<(&'w Wanted, String, String)>,
) -> Result<(), CgroupError> {
    let fix = format!(
        "{}, or run hutch as root (it then uses the cgroup v1 hierarchies), or delegate a v1 subtree to this user (chown its cgroup directory in each v1 hierarchy)",
        np.fix
    );
    let mut parents: Vec<(&'static str, Cgroup)> = Vec::new();
    let mut limited: Vec<&Wanted> = Vec::new();
    for w in wanted {
        let c = v1::controller_for(w.key);
        match v1::parent_for(host, c) {
            Ok(parent) => {
                if !parents.iter().any(|(pc, _)| *pc == c) {
                    parents.push((c, parent));
                }
                limited.push(w);
            }
            Err(found) => missing.push((w, format!("{}; {found}", np.found), fix.clone())),
        }
    }
    for c in ["memory", "pids", "cpuacct"] {
        if !parents.iter().any(|(pc, _)| *pc == c)
            && let Ok(parent) = v1::parent_for(host, c)
        {
            parents.push((c, parent));
        }
    }
    if parents.is_empty() {
        return Ok(());
    }
    v1::sweep_all(host);
    let leaf = v1::V1Leaf::create(host, &parents, leaf_name).map_err(|f| {
        CgroupError::io(
            f.action,
            f.path,
            &f.error,
            format!(
                "hutch needs its own group in the cgroup v1 {} hierarchy; `hutch check` shows the layout",
                f.controller
            ),
        )
    })?;
    for w in limited {
        let dir = leaf
            .dir(v1::controller_for(w.key))
            .expect("a leaf in each hierarchy of a limit");
        match v1::write_limit(dir, w.key, limits, io_devices) {
            Ok(by) => p.enforced.push(Enforced {
                limit: w.key.into(),
                value: w.value.clone(),
                by,
            }),
            Err((file, e)) => missing.push((
                w,
                format!("writing {}/{file} failed: {e}", dir.dir.display()),
                "report this as a bug with `hutch check` output".into(),
            )),
        }
    }
    p.v1 = Some(leaf);
    Ok(())
}

/// Make sure `place`'s children get the controllers hutch wants; returns
/// those enabled. Wanted limits whose controller cannot be had go to
/// `missing` with what hutch found and the fix.
fn enable_controllers<'w>(
    host: &HostCgroups,
    place: &Place,
    wanted: &'w [Wanted],
    missing: &mut Vec<(&'w Wanted, String, String)>,
) -> Result<Vec<&'static str>, CgroupError> {
    let delegate_fix = |c: &str| {
        format!(
            "delegate the {c} controller to {} (systemd: Delegate=yes; or enable it in its parent's cgroup.subtree_control)",
            place.parent.dir.display()
        )
    };
    let mut try_enable: Vec<&'static str> = Vec::new();
    for c in plan::CONTROLLERS {
        let asked: Vec<&Wanted> = wanted.iter().filter(|w| w.controller == *c).collect();
        let for_stats = matches!(*c, "memory" | "pids");
        match plan::controller_status(host, place, c) {
            Ok(()) if !asked.is_empty() || for_stats => try_enable.push(c),
            Ok(()) => {}
            Err(found) => {
                for w in asked {
                    missing.push((w, found.clone(), delegate_fix(c)));
                }
            }
        }
    }
    let parent = &place.parent;
    let already = parent.subtree_control();
    let need: Vec<&'static str> = try_enable
        .iter()
        .copied()
        .filter(|c| !already.iter().any(|a| a == c))
        .collect();
    if !need.is_empty() && place.evacuate {
        evacuate(parent).map_err(|(path, e)| {
            CgroupError::io(
                "move hutch's processes into",
                path,
                &e,
                "the no-internal-processes rule needs hutch's own cgroup emptied; start hutch in a fresh delegated scope",
            )
        })?;
    }
    let mut enabled = Vec::new();
    for c in try_enable {
        if !need.contains(&c) {
            enabled.push(c);
            continue;
        }
        match parent.write("cgroup.subtree_control", &format!("+{c}")) {
            Ok(()) => enabled.push(c),
            Err(e) => {
                let why = if e.raw_os_error() == Some(libc::EBUSY) {
                    "holds processes (no-internal-processes rule)".to_string()
                } else {
                    errno_text(&e)
                };
                for w in wanted.iter().filter(|w| w.controller == c) {
                    missing.push((
                        w,
                        format!(
                            "enabling it in {}/cgroup.subtree_control failed: {why}",
                            parent.dir.display()
                        ),
                        delegate_fix(c),
                    ));
                }
            }
        }
    }
    Ok(enabled)
}

/// Move every process of `cg` into `cg/hutch-supervisor` (including this
/// one). Stops when a round makes no progress.
fn evacuate(cg: &Cgroup) -> Result<(), (std::path::PathBuf, std::io::Error)> {
    let sup = cg.child(SUPERVISOR);
    match std::fs::create_dir(&sup.dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err((sup.dir, e)),
    }
    let mut last: Vec<i32> = Vec::new();
    for _ in 0..16 {
        let procs = cg.procs();
        if procs.is_empty() || procs == last {
            break;
        }
        for pid in &procs {
            match sup.write("cgroup.procs", &pid.to_string()) {
                Ok(()) => {}
                // Exited meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err((sup.file("cgroup.procs"), e)),
            }
        }
        last = procs;
    }
    Ok(())
}

/// Write the interface file for one limit; Ok is the mechanism text.
fn write_limit(
    leaf: &Cgroup,
    limits: &Limits,
    io_devices: &[io::IoDevice],
    key: &str,
) -> Result<String, (String, String)> {
    let w = |file: &str, v: String| {
        leaf.write(file, &v)
            .map_err(|e| (file.to_string(), errno_text(&e)))
    };
    match key {
        "memory" => {
            let bytes = limits.memory.map(|m| m.value().0).unwrap_or(u64::MAX);
            w("memory.max", bytes.to_string())?;
            w("memory.oom.group", "1".into())?;
            // Without swap accounting the file is absent: no swap to cap.
            match w("memory.swap.max", "0".into()) {
                Err(_) if !leaf.file("memory.swap.max").exists() => {
                    Ok("cgroup memory.max, memory.oom.group=1 (no swap accounting)".into())
                }
                Err(e) => Err(e),
                Ok(()) => Ok("cgroup memory.max, memory.swap.max=0, memory.oom.group=1".into()),
            }
        }
        "pids" => {
            let n = limits.pids.map(|p| p.value()).unwrap_or(MAX_PIDS);
            w("pids.max", n.to_string())?;
            Ok("cgroup pids.max".into())
        }
        "cpus" => {
            let c = limits.cpus.map(|c| c.value()).unwrap_or(1.0);
            w("cpu.max", cpu_max(c))?;
            Ok("cgroup cpu.max".into())
        }
        "io" => {
            // One line per write: the kernel parses a single device each.
            for d in io_devices {
                w("io.max", d.line.clone())?;
            }
            let lines: Vec<&str> = io_devices.iter().map(|d| d.line.as_str()).collect();
            Ok(format!("cgroup io.max ({})", lines.join("; ")))
        }
        _ => Err((key.to_string(), "unknown limit".into())),
    }
}

/// No cgroup of hutch's own: the caller places the sandbox in a cgroup it
/// manages (an OCI engine's `cgroupsPath`). Only the rlimits are planned;
/// a cgroup limit in `limits` cannot be enforced here (required: an
/// error; preferred: reported unenforced).
pub fn rlimits_only(limits: &Limits) -> Result<Leaf, CgroupError> {
    let mut p = Leaf {
        leaf: None,
        v1: None,
        rlimits: Vec::new(),
        enforced: Vec::new(),
        unenforced: Vec::new(),
        owner: std::process::id(),
        external: false,
        baseline: None,
    };
    for w in wanted(limits) {
        let found = "the sandbox joins a cgroup its caller manages".to_string();
        if w.required {
            return Err(CgroupError::Unavailable {
                limit: w.key,
                controller: w.controller,
                found,
                fix: "set the limit on the caller's cgroup instead".into(),
            });
        }
        p.unenforced.push(Unenforced {
            limit: w.key.into(),
            value: w.value.clone(),
            reason: found,
        });
    }
    plan_rlimits(limits, &mut p)?;
    Ok(p)
}

/// `cpu.max` text for a number of CPUs: quota and period in µs.
pub fn cpu_max(cpus: f64) -> String {
    let quota = ((cpus * CPU_PERIOD_US as f64).round() as u64).max(1000);
    format!("{quota} {CPU_PERIOD_US}")
}

/// RLIMIT_CORE=0 unless asked otherwise, then the Spec's `rlimits`.
fn plan_rlimits(limits: &Limits, p: &mut Leaf) -> Result<(), CgroupError> {
    if !limits.rlimits.contains_key("core") {
        p.rlimits.push((libc::RLIMIT_CORE as i32, 0));
        p.enforced.push(Enforced {
            limit: "rlimits.core".into(),
            value: json!(0),
            by: "setrlimit".into(),
        });
    }
    for (name, value) in &limits.rlimits {
        let Some(r) = rlimits::resource(name) else {
            continue; // validate_limits refused it already
        };
        let (_, hard) = crate::sys::getrlimit(r).unwrap_or((u64::MAX, u64::MAX));
        if *value > hard {
            return Err(CgroupError::RlimitAboveHard {
                name: name.clone(),
                value: *value,
                hard,
            });
        }
        rlimits::merge_min(&mut p.rlimits, r, *value);
        p.enforced.push(Enforced {
            limit: format!("rlimits.{name}"),
            value: json!(value),
            by: "setrlimit".into(),
        });
    }
    Ok(())
}

impl Leaf {
    /// The leaf's directory fd, for clone3 `CLONE_INTO_CGROUP`; None when
    /// no leaf was created.
    pub fn cgroup_fd(&self) -> Option<BorrowedFd<'_>> {
        self.leaf.as_ref().map(|l| l.fd.as_fd())
    }

    /// Use `dir` (a cgroup the caller made, with its limits written: an OCI
    /// container's `cgroupsPath`) as the sandbox's cgroup: the sandbox is
    /// cloned into it through `fd`, its counters go to the report, but
    /// [`Leaf::finish`] and drop leave it to the caller.
    pub fn adopt(&mut self, dir: std::path::PathBuf, fd: OwnedFd, enforced: Vec<Enforced>) {
        self.leaf = Some(LeafDir {
            cg: Cgroup::new(dir),
            fd,
        });
        self.external = true;
        self.enforced.extend(enforced);
    }

    /// Use `dirs` (the groups an engine made in each cgroup v1 hierarchy,
    /// with their limits written) as the sandbox's cgroups: [`Leaf::attach`]
    /// moves hutch init into them; the caller removes them.
    pub fn adopt_v1(
        &mut self,
        dirs: Vec<(&'static str, std::path::PathBuf)>,
        enforced: Vec<Enforced>,
    ) {
        self.v1 = Some(v1::V1Leaf::adopt(&HostCgroups::detect(), dirs));
        self.external = true;
        self.enforced.extend(enforced);
    }

    /// The leaf's directory, when one was created (on v1: the memory
    /// hierarchy's leaf).
    pub fn cgroup_dir(&self) -> Option<&std::path::Path> {
        match (&self.leaf, &self.v1) {
            (Some(l), _) => Some(l.cg.dir.as_path()),
            (None, Some(v1)) => v1.primary(),
            (None, None) => None,
        }
    }

    /// v1 leaves: move this (single-threaded) process into them right
    /// before clone3, so that the sandbox starts in them and its new cgroup
    /// namespace is rooted at them. Nothing to do for a v2 leaf
    /// (`CLONE_INTO_CGROUP`). Always pair with [`Leaf::leave_after_clone`].
    pub fn enter_for_clone(&self) -> Result<(), CgroupError> {
        match &self.v1 {
            Some(v1) => v1.enter().map_err(|(path, e)| {
                CgroupError::io(
                    "move the launcher into",
                    path,
                    &e,
                    "hutch could not enter its cgroup v1 leaf; `hutch check` shows the layout",
                )
            }),
            None => Ok(()),
        }
    }

    /// Move this process back into its own v1 groups after clone3.
    pub fn leave_after_clone(&self) -> Result<(), CgroupError> {
        match &self.v1 {
            Some(v1) => v1.leave().map_err(|(path, e)| {
                CgroupError::io(
                    "move the launcher back into",
                    path,
                    &e,
                    "hutch could not leave its cgroup v1 leaf; the sandbox was ended",
                )
            }),
            None => Ok(()),
        }
    }

    /// (resource, value) pairs to apply in the sandbox with
    /// [`apply_rlimits`], after its user namespace exists.
    pub fn rlimits(&self) -> &[(libc::c_int, u64)] {
        &self.rlimits
    }

    /// Kill every process in the leaf (`cgroup.kill`; SIGKILL to each
    /// member where that file is missing, before Linux 5.14).
    pub fn kill(&self) {
        if let Some(leaf) = &self.leaf {
            kill_all(&leaf.cg);
        }
        if let Some(v1) = &self.v1 {
            v1.kill();
        }
    }

    fn stats(&self) -> Option<CgroupStats> {
        let now = match (&self.leaf, &self.v1) {
            (Some(l), _) => CgroupStats::read(&l.cg),
            (None, Some(v1)) => v1.stats(),
            (None, None) => return None,
        };
        Some(match &self.baseline {
            None => now,
            Some(b) => now.since(&b.stats, b.memory_peak_reset),
        })
    }

    /// A resident sandbox's command starts: from now on the report counts
    /// from here (CPU, events, I/O: what changed since; the memory peak
    /// where it can be reset, v1's, else none; the process peak none).
    pub fn start_command(&mut self) {
        self.baseline = None;
        let memory_peak_reset = self
            .v1
            .as_ref()
            .is_some_and(|v1| v1.reset_memory_peak());
        if let Some(stats) = self.stats() {
            self.baseline = Some(CommandBaseline {
                stats,
                memory_peak_reset,
            });
        }
    }

    /// Enforced and unenforced limits with the counters read now.
    pub fn report(&self) -> LimitsReport {
        let stats = self.stats();
        LimitsReport {
            cgroup: self.cgroup_dir().map(std::path::Path::to_path_buf),
            enforced: self.enforced.clone(),
            unenforced: self.unenforced.clone(),
            ended_by: stats.as_ref().and_then(CgroupStats::ended_by),
            stats,
            cleanup_error: None,
        }
    }

    /// `oom-killed` or `pids-limit-hit` when the leaf's events show one
    /// (OOM wins). Use it to explain a workload that did not exit 0.
    #[cfg(any(test, feature = "internals"))]
    pub fn ended_by(&self) -> Option<&'static str> {
        self.stats()?.ended_by()
    }

    /// Read the final counters, kill what is left, remove the leaf.
    pub fn finish(self) -> LimitsReport {
        let mut report = self.report();
        report.cleanup_error = self.remove().err();
        report
    }

    /// Kill what is left and remove the leaf (its counters read before,
    /// with [`Leaf::report`]): a warm sandbox's report goes out first and
    /// its leaf is removed after, off the caller's path. The error names
    /// what stayed.
    pub fn remove(mut self) -> Result<(), String> {
        let mut result = Ok(());
        if let Some(leaf) = self.leaf.take()
            && !self.external
            && let Err(e) = teardown(&leaf.cg)
        {
            result = Err(e);
        }
        if let Some(v1) = self.v1.take()
            && !self.external
            && let Err(e) = v1.teardown(Instant::now() + TEARDOWN)
        {
            result = Err(e);
        }
        result
    }
}

fn kill_all(cg: &Cgroup) {
    if cg.write("cgroup.kill", "1").is_ok() {
        return;
    }
    for pid in cg.procs() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn teardown(cg: &Cgroup) -> Result<(), String> {
    let deadline = Instant::now() + TEARDOWN;
    if !cg.wait_empty(Instant::now()) {
        kill_all(cg);
        if !cg.wait_empty(deadline) {
            return Err(format!(
                "{}: processes survived cgroup.kill",
                cg.dir.display()
            ));
        }
    }
    cg.remove(deadline)
        .map_err(|e| format!("rmdir {} => {}", cg.dir.display(), errno_text(&e)))
}

impl Drop for Leaf {
    fn drop(&mut self) {
        if std::process::id() != self.owner || self.external {
            return;
        }
        if let Some(leaf) = self.leaf.take() {
            let _ = teardown(&leaf.cg);
        }
        if let Some(v1) = self.v1.take() {
            let _ = v1.teardown(Instant::now() + TEARDOWN);
        }
    }
}

#[cfg(test)]
mod tests;
