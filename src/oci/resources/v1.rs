//! `linux.resources` on a host whose controllers live in cgroup v1
//! hierarchies (legacy, hybrid), as runc maps it there:
//!
//! - memory.limit/reservation → `memory.limit_in_bytes`/
//!   `memory.soft_limit_in_bytes`, swap (memory+swap, as in OCI) →
//!   `memory.memsw.limit_in_bytes`, swappiness → `memory.swappiness`,
//!   disableOOMKiller → `memory.oom_control`;
//! - pids.limit → `pids.max`;
//! - cpu.shares → `cpu.shares`, quota/period → `cpu.cfs_quota_us`/
//!   `cpu.cfs_period_us`, burst → `cpu.cfs_burst_us`, idle → `cpu.idle`,
//!   realtime → `cpu.rt_period_us`/`cpu.rt_runtime_us`, cpus/mems →
//!   `cpuset.*`;
//! - blockIO.weight → `blkio.weight`, throttle devices →
//!   `blkio.throttle.*_device`;
//! - hugepageLimits → `hugetlb.<size>.limit_in_bytes`;
//! - unified: refused (cgroup v2 keys; runc refuses them on v1 too);
//! - devices → a devices group ([`super::devices`]).
//!
//! The container's path is made in each hierarchy it needs (and in
//! memory, pids and cpuacct, whose counters and membership the report,
//! `ps` and `delete` read), values are checked by the v2 mapping first.

use std::path::{Path, PathBuf};

use super::{Applied, CgroupPlan, Write, cannot, err, io_err, kernel_release, remove_dirs};
use crate::cgroup::host::HostCgroups;
use crate::cgroup::tree::Cgroup;
use crate::oci::OciError;
use crate::oci::config::Resources;

/// The v1 interface files `r` asks to write, in the order to write them.
pub fn writes(r: &Resources) -> Result<Vec<Write>, OciError> {
    if let Some(k) = r.unified.keys().next() {
        return Err(err(
            format!("linux.resources.unified.{k}"),
            "unified keys are cgroup v2 files, and this host's controllers are cgroup v1",
        ));
    }
    // What v1 has and v2 lost is taken out before the v2 mapping checks
    // the rest.
    let mut rest = r.clone();
    let mut extra: Vec<Write> = Vec::new();
    let put = |out: &mut Vec<Write>, key: &str, file: &str, value: String| {
        out.push(Write {
            key: key.into(),
            file: file.into(),
            value,
        })
    };
    if let Some(m) = rest.memory.as_mut() {
        const K: &str = "linux.resources.memory";
        // Above 100 is runc's "unset".
        if let Some(s) = m.swappiness.take().filter(|s| *s <= 100) {
            put(
                &mut extra,
                &format!("{K}.swappiness"),
                "memory.swappiness",
                s.to_string(),
            );
        }
        if m.disable_oom_killer.take() == Some(true) {
            put(
                &mut extra,
                &format!("{K}.disableOOMKiller"),
                "memory.oom_control",
                "1".into(),
            );
        }
    }
    if let Some(c) = rest.cpu.as_mut() {
        const K: &str = "linux.resources.cpu";
        if let Some(p) = c.realtime_period.take().filter(|p| *p != 0) {
            put(
                &mut extra,
                &format!("{K}.realtimePeriod"),
                "cpu.rt_period_us",
                p.to_string(),
            );
        }
        if let Some(rt) = c.realtime_runtime.take().filter(|r| *r != 0) {
            put(
                &mut extra,
                &format!("{K}.realtimeRuntime"),
                "cpu.rt_runtime_us",
                rt.to_string(),
            );
        }
    }
    let limit = r.memory.as_ref().and_then(|m| m.limit).unwrap_or(0);
    let mut out = Vec::new();
    for w in super::writes(&rest)? {
        let v1 = |file: &str, value: String| Write {
            key: w.key.clone(),
            file: file.into(),
            value,
        };
        match w.file.as_str() {
            "memory.max" => out.push(v1("memory.limit_in_bytes", w.value.clone())),
            "memory.low" => out.push(v1("memory.soft_limit_in_bytes", w.value.clone())),
            // v2's file holds swap alone; v1's memory+swap, as OCI does.
            "memory.swap.max" => {
                let swap = r.memory.as_ref().and_then(|m| m.swap).unwrap_or(limit);
                out.push(v1("memory.memsw.limit_in_bytes", swap.to_string()))
            }
            "pids.max" => out.push(w),
            "cpu.weight" => {
                let shares = r.cpu.as_ref().and_then(|c| c.shares).unwrap_or(1024);
                out.push(v1("cpu.shares", shares.to_string()))
            }
            "cpu.max" => {
                let (quota, period) = w.value.split_once(' ').unwrap_or((&w.value, "100000"));
                out.push(v1("cpu.cfs_period_us", period.to_string()));
                out.push(v1("cpu.cfs_quota_us", quota.to_string()));
            }
            "cpu.max.burst" => out.push(v1("cpu.cfs_burst_us", w.value.clone())),
            "cpu.idle" | "cpuset.cpus" | "cpuset.mems" => out.push(w),
            "io.weight" => {
                let weight = r.block_io.as_ref().and_then(|b| b.weight).unwrap_or(0);
                out.push(v1("blkio.weight", weight.to_string()))
            }
            "io.max" => {
                // `MAJ:MIN rbps=N` → blkio.throttle.read_bps_device `MAJ:MIN N`
                // (0 lifts it).
                let (dev, kv) = w.value.split_once(' ').unwrap_or((&w.value, ""));
                let (k, rate) = kv.split_once('=').unwrap_or(("", ""));
                let stem = match k {
                    "rbps" => "read_bps",
                    "wbps" => "write_bps",
                    "riops" => "read_iops",
                    _ => "write_iops",
                };
                let rate = if rate == "max" { "0" } else { rate };
                out.push(v1(
                    &format!("blkio.throttle.{stem}_device"),
                    format!("{dev} {rate}"),
                ))
            }
            f if f.starts_with("hugetlb.") && f.ends_with(".max") => {
                let size = &f["hugetlb.".len()..f.len() - ".max".len()];
                out.push(v1(
                    &format!("hugetlb.{size}.limit_in_bytes"),
                    w.value.clone(),
                ))
            }
            _ => out.push(w),
        }
    }
    out.extend(extra);
    Ok(out)
}

/// `name` as a v1 controller hutch-oci makes groups in: hutch's own
/// ([`crate::cgroup::v1::CONTROLLERS`]) and `devices`
/// ([`super::devices`]).
fn controller_name(name: &str) -> Option<&'static str> {
    crate::cgroup::v1::controller_name(name).or((name == "devices").then_some("devices"))
}

/// The container's groups in the v1 hierarchies: (controller, directory).
pub type Dirs = Vec<(&'static str, PathBuf)>;

/// Make the plan's path in each hierarchy it needs and write its files.
/// Fails before touching anything when a needed hierarchy is missing; on
/// any failure what was made is removed.
pub fn apply(host: &HostCgroups, plan: &CgroupPlan) -> Result<(Applied, Dirs), OciError> {
    let mut wanted: Vec<(&'static str, &Write)> = Vec::new();
    for w in &plan.writes {
        let Some(c) = controller_name(w.controller()) else {
            return Err(cannot(
                w,
                format!(
                    "{} is no cgroup v1 controller hutch-oci writes",
                    w.controller()
                ),
            ));
        };
        if host.v1_hierarchy(c).is_none() {
            return Err(cannot(
                w,
                format!(
                    "{} layout without a cgroup v1 {c} hierarchy (and no cgroup v2 one)",
                    host.layout.name()
                ),
            ));
        }
        wanted.push((c, w));
    }
    // Another user may make groups only where a subtree is delegated to
    // it: the deepest existing directory of the path must be writable.
    for (c, w) in &wanted {
        let mount = &host.v1_hierarchy(c).expect("checked").mount;
        let mut deepest = Cgroup::new(mount);
        for part in plan.path.iter() {
            let next = deepest.child(&part.to_string_lossy());
            if !next.dir.is_dir() {
                break;
            }
            deepest = next;
        }
        if !deepest.dir_writable() {
            return Err(cannot(
                w,
                format!(
                    "cgroup v1 {c} hierarchy: {} is not writable by uid {} (not delegated)",
                    deepest.dir.display(),
                    host.uid
                ),
            ));
        }
    }
    let mut controllers: Vec<&'static str> = wanted.iter().map(|(c, _)| *c).collect();
    for c in ["memory", "pids", "cpuacct"] {
        if host.v1_hierarchy(c).is_some() {
            controllers.push(c);
        }
    }
    controllers.sort();
    controllers.dedup();
    let mut made = Vec::new();
    let result = apply_in(host, plan, &controllers, &wanted, &mut made);
    match result {
        Ok(dirs) => {
            let primary = dirs
                .iter()
                .find(|(c, _)| *c == "memory")
                .or(dirs.first())
                .map(|(_, d)| d.clone())
                .expect("at least one hierarchy");
            Ok((
                Applied {
                    dir: primary,
                    fd: None,
                    made,
                },
                dirs,
            ))
        }
        Err(e) => {
            remove_dirs(&made);
            Err(e)
        }
    }
}

fn apply_in(
    host: &HostCgroups,
    plan: &CgroupPlan,
    controllers: &[&'static str],
    wanted: &[(&'static str, &Write)],
    made: &mut Vec<PathBuf>,
) -> Result<Dirs, OciError> {
    let first = wanted[0].1;
    let mut dirs: Dirs = Vec::new();
    for &c in controllers {
        let mount = &host.v1_hierarchy(c).expect("checked").mount;
        let mut cur = mount.to_path_buf();
        for part in plan.path.iter() {
            let parent = Cgroup::new(&cur);
            cur.push(part);
            match std::fs::create_dir(&cur) {
                Ok(()) => {
                    made.push(cur.clone());
                    if c == "cpuset" {
                        crate::cgroup::v1::copy_cpuset(&parent, &Cgroup::new(&cur)).map_err(
                            |(p, e)| io_err(first, format!("write({})", p.display()), &e),
                        )?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(io_err(first, format!("mkdir({})", cur.display()), &e));
                }
            }
        }
        if !Cgroup::new(&cur).procs().is_empty() {
            return Err(err(
                "linux.cgroupsPath",
                format!(
                    "{} already holds processes: not a new container's cgroup",
                    cur.display()
                ),
            ));
        }
        dirs.push((c, cur));
    }
    write_all(&dirs, wanted.iter().map(|(c, w)| (*c, *w)))?;
    Ok(dirs)
}

fn write_all<'a>(
    dirs: &[(&'static str, PathBuf)],
    writes: impl Iterator<Item = (&'static str, &'a Write)>,
) -> Result<(), OciError> {
    for (c, w) in writes {
        let Some((_, dir)) = dirs.iter().find(|(dc, _)| *dc == c) else {
            return Err(err(
                w.key.clone(),
                format!(
                    "the container's cgroup has no {c} group (it was created without a limit of this kind): create it with the limit"
                ),
            ));
        };
        let leaf = Cgroup::new(dir);
        let path = leaf.file(&w.file);
        if !path.exists() {
            return Err(err(
                w.key.clone(),
                format!(
                    "{} is not an interface file of this kernel (Linux {}): leave the key out",
                    path.display(),
                    kernel_release()
                ),
            ));
        }
        leaf.write(&w.file, &w.value)
            .map_err(|e| io_err(w, format!("write({}, {:?})", path.display(), w.value), &e))?;
    }
    Ok(())
}

/// The OCI `update` on v1: each write into the group of its controller.
/// Raising memory above the current memory+swap cap needs the latter
/// first (the kernel keeps limit <= memsw), as runc orders it.
pub fn update(dirs: &[(&'static str, PathBuf)], writes: &[Write]) -> Result<(), OciError> {
    let mut writes = writes.to_vec();
    let at = |f: &str, w: &[Write]| w.iter().position(|w| w.file == f);
    if let (Some(limit), Some(memsw)) = (
        at("memory.limit_in_bytes", &writes),
        at("memory.memsw.limit_in_bytes", &writes),
    ) {
        let current = dirs
            .iter()
            .find(|(c, _)| *c == "memory")
            .and_then(|(_, d)| {
                Cgroup::new(d)
                    .read("memory.memsw.limit_in_bytes")
                    .ok()?
                    .trim()
                    .parse::<i64>()
                    .ok()
            });
        let new_limit = writes[limit].value.parse::<i64>().unwrap_or(i64::MAX);
        if current.is_some_and(|c| new_limit > c) && memsw > limit {
            let w = writes.remove(memsw);
            writes.insert(limit, w);
        }
    }
    let mut tagged = Vec::new();
    for w in &writes {
        let Some(c) = controller_name(w.controller()) else {
            return Err(cannot(
                w,
                format!(
                    "{} is no cgroup v1 controller hutch-oci writes",
                    w.controller()
                ),
            ));
        };
        tagged.push((c, w));
    }
    write_all(dirs, tagged.into_iter())
}

/// The records' (controller, directory) pairs as [`Dirs`]; unknown names
/// are left out.
pub fn dirs_of(recorded: &[(String, PathBuf)]) -> Dirs {
    recorded
        .iter()
        .filter_map(|(c, d)| Some((controller_name(c)?, d.clone())))
        .collect()
}

/// The recorded form of [`Dirs`].
pub fn recorded(dirs: &[(&'static str, PathBuf)]) -> Vec<(String, PathBuf)> {
    dirs.iter()
        .map(|(c, d)| (c.to_string(), d.clone()))
        .collect()
}

/// Whether `linux.resources` goes to the v1 hierarchies on this host: no
/// unified cgroup v2 tree, and v1 hierarchies mounted.
pub fn used(host: &HostCgroups) -> bool {
    host.layout != crate::cgroup::host::Layout::Unified && !host.v1.is_empty()
}

/// Every group of the container, for `delete`: (directory) list.
pub fn leaves<'a>(dirs: &'a [(&'static str, PathBuf)]) -> Vec<&'a Path> {
    let mut out: Vec<&Path> = Vec::new();
    for (_, d) in dirs {
        if !out.contains(&d.as_path()) {
            out.push(d);
        }
    }
    out
}
