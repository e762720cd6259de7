//! `linux.resources` and `linux.cgroupsPath` → a cgroup v2 directory and
//! the interface files to write, as runc and crun do on a unified host:
//!
//! - memory.limit/reservation/swap → `memory.max`/`memory.low`/
//!   `memory.swap.max` (OCI's swap is memory+swap: the v2 file gets
//!   `swap - limit`);
//! - pids.limit → `pids.max`;
//! - cpu.shares → `cpu.weight` (crun's quadratic conversion: 2..262144
//!   onto 1..10000, 1024 → 100), quota/period → `cpu.max`, burst →
//!   `cpu.max.burst`, idle → `cpu.idle`, cpus/mems → `cpuset.*`;
//! - blockIO.weight → `io.weight` (runc's linear conversion), throttle
//!   devices → `io.max` lines;
//! - hugepageLimits → `hugetlb.<size>.max`;
//! - unified: written as given, for keys of a known controller only.
//!
//! [`plan`] is pure (the config and the id in, the writes out); [`apply`]
//! creates the directory and writes them; [`remove`] ends it at `delete`.
//! A cgroup is made only when the config asks for a limit: without one
//! the container stays in the engine's cgroup (the layout hutch-oci had
//! before). See docs/oci.md. A host whose controllers are in cgroup v1
//! hierarchies takes runc's v1 mapping instead ([`v1`]).

use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use super::OciError;
use super::config::{Linux, Resources};
use crate::cgroup::host::{HostCgroups, Layout};
use crate::cgroup::tree::Cgroup;

/// Smallest memory limit accepted (hutch init must fit).
pub const MIN_MEMORY: i64 = 4 << 20;
/// Largest pids.max the kernel knows (PID_MAX_LIMIT).
pub const MAX_PIDS: i64 = 4 << 20;
/// The controllers a unified key may address.
const UNIFIED_CONTROLLERS: &[&str] = &[
    "cpu", "cpuset", "io", "memory", "pids", "hugetlb", "misc", "rdma",
];

/// One interface file to write, and the config key it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub key: String,
    pub file: String,
    pub value: String,
}

impl Write {
    /// The controller the file belongs to (`memory` of `memory.max`).
    pub fn controller(&self) -> &str {
        self.file.split('.').next().unwrap_or("")
    }
}

/// The container's cgroup: where (relative to the cgroup2 mount) and what
/// to write there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupPlan {
    /// Relative to the cgroup2 mount, without a leading `/`.
    pub path: PathBuf,
    pub writes: Vec<Write>,
}

fn err(key: impl Into<String>, message: impl Into<String>) -> OciError {
    OciError::Config {
        key: key.into(),
        message: message.into(),
    }
}

/// The writes `linux.resources` asks for, and where; None when it asks
/// for no limit (no cgroup is made then).
#[cfg(test)]
pub fn plan(linux: &Linux, id: &str, systemd: bool) -> Result<Option<CgroupPlan>, OciError> {
    plan_for(linux, id, systemd, false)
}

/// The writes `linux.resources` asks for, and where (None when it asks
/// for no limit: no cgroup is made then), with the cgroup v1 files instead ([`v1::writes`]) when `v1`.
pub fn plan_for(
    linux: &Linux,
    id: &str,
    systemd: bool,
    v1: bool,
) -> Result<Option<CgroupPlan>, OciError> {
    let writes = match &linux.resources {
        Some(r) if v1 => v1::writes(r)?,
        Some(r) => writes(r)?,
        None => Vec::new(),
    };
    // The path is checked even when unused: a hostile one is an error.
    let path = cgroup_path(linux.cgroups_path.as_deref(), id, systemd)?;
    if writes.is_empty() {
        return Ok(None);
    }
    Ok(Some(CgroupPlan { path, writes }))
}

/// `linux.cgroupsPath` as a path under the cgroup2 mount. Absolute and
/// relative cgroupfs paths both start at the mount (as runc does); with
/// `--systemd-cgroup`, `slice:prefix:name` becomes the path systemd would
/// give the scope (`a-b.slice` → `a.slice/a-b.slice/prefix-name.scope`),
/// as crun does without a systemd to ask. Without a path: `/ID`.
pub fn cgroup_path(given: Option<&str>, id: &str, systemd: bool) -> Result<PathBuf, OciError> {
    const KEY: &str = "linux.cgroupsPath";
    let given = given.unwrap_or("");
    if given.len() > 4096 || given.contains('\0') || given.contains('\n') {
        return Err(err(KEY, "not a usable path"));
    }
    let text = if systemd && !given.is_empty() {
        let parts: Vec<&str> = given.split(':').collect();
        let [slice, prefix, name] = parts[..] else {
            return Err(err(
                KEY,
                "with --systemd-cgroup it must be slice:prefix:name",
            ));
        };
        let slice = if slice.is_empty() {
            "system.slice"
        } else {
            slice
        };
        if !slice.ends_with(".slice") || slice.contains('/') {
            return Err(err(KEY, format!("{slice:?} is not a systemd slice name")));
        }
        let stem = slice.trim_end_matches(".slice");
        let mut path = String::new();
        if stem != "-" {
            // Each dash opens a parent slice: a-b.slice is in a.slice.
            let mut acc = String::new();
            for part in stem.split('-') {
                if part.is_empty() {
                    return Err(err(KEY, format!("{slice:?} is not a systemd slice name")));
                }
                if !acc.is_empty() {
                    acc.push('-');
                }
                acc.push_str(part);
                path.push_str(&format!("/{acc}.slice"));
            }
        }
        // A name that is a unit already (`x.scope`, `x.slice`) stands as it is.
        let unit = if name.ends_with(".scope") || name.ends_with(".slice") {
            name.to_string()
        } else if prefix.is_empty() {
            format!("{name}.scope")
        } else {
            format!("{prefix}-{name}.scope")
        };
        if name.is_empty() || unit.contains('/') {
            return Err(err(
                KEY,
                "the systemd unit name must not be empty or hold `/`",
            ));
        }
        path.push('/');
        path.push_str(&unit);
        path
    } else if given.is_empty() {
        format!("/{id}")
    } else {
        if given.contains(':') && !given.starts_with('/') {
            return Err(err(
                KEY,
                format!(
                    "{given:?} looks like systemd's slice:prefix:name, which needs --systemd-cgroup"
                ),
            ));
        }
        given.to_string()
    };
    let path = Path::new(&text);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => {
                let n = n.to_str().unwrap_or("");
                if n.starts_with("cgroup.") || n.is_empty() {
                    return Err(err(KEY, format!("{n:?} cannot name a cgroup")));
                }
                out.push(n);
            }
            Component::ParentDir | Component::Prefix(_) => {
                return Err(err(KEY, "must not hold `..`"));
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(err(KEY, "the cgroup2 root cannot be a container's cgroup"));
    }
    Ok(out)
}

/// crun's `cpu.shares` → `cpu.weight` (crun >= 1.5, runc >= 1.2): a
/// quadratic in log2(shares) through (2, 1), (1024, 100), (262144, 10000).
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    if shares <= 2 {
        return 1;
    }
    if shares >= 262_144 {
        return 10_000;
    }
    let l = (shares as f64).log2();
    let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
    10f64.powf(exponent).ceil() as u64
}

/// runc's `blkio.weight` (10..1000) → `io.weight` (1..10000).
pub fn blkio_to_io_weight(w: u16) -> u64 {
    1 + (u64::from(w).saturating_sub(10) * 9999) / 990
}

/// A cpuset list (`0-3,5`): digits, commas and ranges only.
fn cpuset_list(key: &str, s: &str) -> Result<String, OciError> {
    let ok = s.len() <= 1024
        && s.split(',').all(|part| {
            let mut ends = part.splitn(2, '-');
            let num = |x: Option<&str>| {
                x.is_some_and(|x| {
                    !x.is_empty() && x.len() <= 6 && x.bytes().all(|b| b.is_ascii_digit())
                })
            };
            let a = ends.next();
            let b = ends.next();
            num(a) && (b.is_none() || num(b))
        });
    if ok {
        Ok(s.to_string())
    } else {
        Err(err(key, "expected a CPU or node list such as 0-3,5"))
    }
}

/// The interface files `r` asks to write (an `update`'s resources).
pub fn writes(r: &Resources) -> Result<Vec<Write>, OciError> {
    let mut out = Vec::new();
    let mut put = |key: &str, file: &str, value: String| {
        out.push(Write {
            key: key.into(),
            file: file.into(),
            value,
        })
    };
    if let Some(c) = &r.cpu {
        const K: &str = "linux.resources.cpu";
        if let Some(s) = c.cpus.as_deref().filter(|s| !s.is_empty()) {
            put(
                &format!("{K}.cpus"),
                "cpuset.cpus",
                cpuset_list(&format!("{K}.cpus"), s)?,
            );
        }
        if let Some(s) = c.mems.as_deref().filter(|s| !s.is_empty()) {
            put(
                &format!("{K}.mems"),
                "cpuset.mems",
                cpuset_list(&format!("{K}.mems"), s)?,
            );
        }
        // 1024 shares is the kernel's default weight (100): no limit.
        if let Some(s) = c.shares.filter(|s| *s > 0 && *s != 1024) {
            put(
                &format!("{K}.shares"),
                "cpu.weight",
                shares_to_weight(s).to_string(),
            );
        }
        let period = match c.period {
            None | Some(0) => None,
            Some(p) if (1000..=1_000_000).contains(&p) => Some(p),
            Some(_) => {
                return Err(err(
                    format!("{K}.period"),
                    "must be 1000 to 1000000 microseconds",
                ));
            }
        };
        match c.quota {
            Some(q) if q > 0 => {
                if q < 1000 {
                    return Err(err(
                        format!("{K}.quota"),
                        "must be at least 1000 microseconds",
                    ));
                }
                put(
                    &format!("{K}.quota"),
                    "cpu.max",
                    format!("{q} {}", period.unwrap_or(crate::cgroup::CPU_PERIOD_US)),
                );
            }
            Some(0) | Some(-1) | None => {
                // A period alone changes nothing the container could use.
            }
            Some(_) => return Err(err(format!("{K}.quota"), "must be positive or -1")),
        }
        if let Some(b) = c.burst.filter(|b| *b > 0) {
            put(&format!("{K}.burst"), "cpu.max.burst", b.to_string());
        }
        match c.idle {
            None | Some(0) => {}
            Some(1) => put(&format!("{K}.idle"), "cpu.idle", "1".into()),
            Some(_) => return Err(err(format!("{K}.idle"), "must be 0 or 1")),
        }
        if c.realtime_runtime.is_some_and(|v| v != 0) || c.realtime_period.is_some_and(|v| v != 0) {
            return Err(err(
                format!("{K}.realtimeRuntime"),
                "cgroup v2 has no realtime CPU budget",
            ));
        }
    }
    if let Some(m) = &r.memory {
        const K: &str = "linux.resources.memory";
        let bytes = |key: &str, v: i64| -> Result<Option<String>, OciError> {
            match v {
                -1 => Ok(Some("max".into())),
                0 => Ok(None),
                v if v < 0 => Err(err(key, "must be a number of bytes or -1")),
                v if v < MIN_MEMORY => {
                    Err(err(key, format!("{v} bytes is below the minimum of 4M")))
                }
                v => Ok(Some(v.to_string())),
            }
        };
        let limit = m.limit.unwrap_or(0);
        // "max" alone is no limit: it needs no cgroup.
        if let Some(v) = bytes(&format!("{K}.limit"), limit)?.filter(|v| v != "max") {
            put(&format!("{K}.limit"), "memory.max", v);
        }
        if let Some(v) =
            bytes(&format!("{K}.reservation"), m.reservation.unwrap_or(0))?.filter(|v| v != "max")
        {
            put(&format!("{K}.reservation"), "memory.low", v);
        }
        match m.swap {
            None | Some(0) | Some(-1) => {}
            Some(s) if s < 0 => {
                return Err(err(format!("{K}.swap"), "must be a number of bytes or -1"));
            }
            Some(s) => {
                if limit <= 0 || s < limit {
                    return Err(err(
                        format!("{K}.swap"),
                        "is memory plus swap: it needs a memory.limit and must not be below it",
                    ));
                }
                put(
                    &format!("{K}.swap"),
                    "memory.swap.max",
                    (s - limit).to_string(),
                );
            }
        }
        for (key, set) in [
            ("kernel", m.kernel.is_some_and(|v| v != 0)),
            ("kernelTCP", m.kernel_tcp.is_some_and(|v| v != 0)),
            ("swappiness", m.swappiness.is_some_and(|v| v <= 100)),
            ("disableOOMKiller", m.disable_oom_killer == Some(true)),
        ] {
            if set {
                return Err(err(format!("{K}.{key}"), "cgroup v2 has no such setting"));
            }
        }
    }
    if let Some(p) = &r.pids {
        const K: &str = "linux.resources.pids.limit";
        match p.limit {
            // 0 and -1 are "no limit" (runc).
            0 | -1 => {}
            n if (1..=MAX_PIDS).contains(&n) => put(K, "pids.max", n.to_string()),
            _ => return Err(err(K, format!("must be 1 to {MAX_PIDS}, or -1"))),
        }
    }
    if let Some(b) = &r.block_io {
        const K: &str = "linux.resources.blockIO";
        if let Some(w) = b.weight.filter(|w| *w != 0) {
            if !(10..=1000).contains(&w) {
                return Err(err(format!("{K}.weight"), "must be 10 to 1000"));
            }
            put(
                &format!("{K}.weight"),
                "io.weight",
                format!("default {}", blkio_to_io_weight(w)),
            );
        }
        if b.leaf_weight.is_some() || !b.weight_device.is_empty() {
            return Err(err(
                format!("{K}.weightDevice"),
                "per-device and leaf weights are not supported by hutch-oci",
            ));
        }
        for (name, list, io_key) in [
            ("throttleReadBpsDevice", &b.throttle_read_bps_device, "rbps"),
            (
                "throttleWriteBpsDevice",
                &b.throttle_write_bps_device,
                "wbps",
            ),
            (
                "throttleReadIOPSDevice",
                &b.throttle_read_iops_device,
                "riops",
            ),
            (
                "throttleWriteIOPSDevice",
                &b.throttle_write_iops_device,
                "wiops",
            ),
        ] {
            for (i, d) in list.iter().enumerate() {
                let key = format!("{K}.{name}[{i}]");
                if !(0..=0xfff).contains(&d.major) || !(0..=0xfffff).contains(&d.minor) {
                    return Err(err(key, "major/minor out of range"));
                }
                let rate = if d.rate == 0 {
                    "max".to_string()
                } else {
                    d.rate.to_string()
                };
                put(
                    &key,
                    "io.max",
                    format!("{}:{} {io_key}={rate}", d.major, d.minor),
                );
            }
        }
    }
    for (i, h) in r.hugepage_limits.iter().enumerate() {
        let key = format!("linux.resources.hugepageLimits[{i}]");
        let size = &h.page_size;
        let digits = size.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = &size[digits.len()..];
        if digits.is_empty()
            || digits.len() > 6
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || !matches!(unit, "KB" | "MB" | "GB")
        {
            return Err(err(
                format!("{key}.pageSize"),
                "expected a size such as 2MB or 1GB",
            ));
        }
        put(&key, &format!("hugetlb.{size}.max"), h.limit.to_string());
    }
    for (key, set) in [
        ("linux.resources.network", r.network.is_some()),
        ("linux.resources.rdma", r.rdma.is_some()),
    ] {
        if set {
            return Err(err(key, "not supported by hutch-oci (see docs/oci.md)"));
        }
    }
    for (k, v) in &r.unified {
        let key = format!("linux.resources.unified.{k}");
        let (controller, rest) = k.split_once('.').unwrap_or(("", ""));
        let name_ok = !rest.is_empty()
            && k.len() <= 64
            && k.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._".contains(&b));
        if !name_ok || !UNIFIED_CONTROLLERS.contains(&controller) {
            return Err(err(
                key,
                format!(
                    "not an interface file of a controller hutch-oci writes ({})",
                    UNIFIED_CONTROLLERS.join(", ")
                ),
            ));
        }
        if v.is_empty() || v.len() > 4096 || v.contains('\0') || v.contains('\n') {
            return Err(err(key, "the value must be one non-empty line"));
        }
        put(&key, k, v.clone());
    }
    Ok(out)
}

/// The container's cgroup, made by [`apply`].
#[derive(Debug)]
pub struct Applied {
    /// The leaf directory (on v1: the memory hierarchy's).
    pub dir: PathBuf,
    /// For `CLONE_INTO_CGROUP` (v2 only).
    pub fd: Option<OwnedFd>,
    /// The directories hutch-oci made (deepest last): `delete` removes them.
    pub made: Vec<PathBuf>,
}

/// The one line for a limit this host cannot enforce.
fn cannot(w: &Write, why: String) -> OciError {
    err(
        w.key.clone(),
        format!(
            "cannot be enforced: {why}; run it on a host with a writable cgroup v2 tree (systemd.unified_cgroup_hierarchy=1) or, where the controllers are cgroup v1, as root, or without this limit (podman: --pids-limit 0, no --memory/--cpus)"
        ),
    )
}

/// Make the container's cgroup and write the plan's files. Fails before
/// touching anything when this host has no cgroup v2 tree with the
/// controllers the plan needs; on any failure what was made is removed.
pub fn apply(host: &HostCgroups, plan: &CgroupPlan) -> Result<Applied, OciError> {
    let first = &plan.writes[0];
    let Some(mount) = host.v2_mount.as_deref() else {
        return Err(cannot(
            first,
            format!(
                "{} layout, no cgroup2 filesystem mounted",
                host.layout.name()
            ),
        ));
    };
    let root = Cgroup::new(mount);
    let offered = root.controllers();
    for w in &plan.writes {
        // On a hybrid host the cgroup2 tree is not the hierarchy that
        // holds the controllers (crun refuses it too): never a place for
        // a container, whatever it offers.
        let hybrid = host.layout != Layout::Unified;
        if hybrid || !offered.iter().any(|c| c == w.controller()) {
            let what = if offered.is_empty() {
                format!("{} offers no controllers", mount.display())
            } else {
                format!("{} offers only {}", mount.display(), offered.join(" "))
            };
            let layout = if hybrid {
                format!(
                    "{} layout, only a unified cgroup v2 host is used; ",
                    host.layout.name()
                )
            } else {
                String::new()
            };
            return Err(cannot(
                w,
                format!(
                    "cgroup v2 {} controller not available ({layout}{what})",
                    w.controller()
                ),
            ));
        }
    }
    let mut made = Vec::new();
    let result = apply_in(mount, plan, &mut made);
    match result {
        Ok((dir, fd)) => Ok(Applied {
            dir,
            fd: Some(fd),
            made,
        }),
        Err(e) => {
            remove_dirs(&made);
            Err(e)
        }
    }
}

fn apply_in(
    mount: &Path,
    plan: &CgroupPlan,
    made: &mut Vec<PathBuf>,
) -> Result<(PathBuf, OwnedFd), OciError> {
    let mut controllers: Vec<&str> = plan.writes.iter().map(Write::controller).collect();
    controllers.sort();
    controllers.dedup();
    // Down from the mount: enable the controllers in each parent, make
    // each directory.
    let mut cur = mount.to_path_buf();
    for part in plan.path.iter() {
        let parent = Cgroup::new(&cur);
        let enabled = parent.subtree_control();
        for c in &controllers {
            if enabled.iter().any(|e| e == c) {
                continue;
            }
            if let Err(e) = parent.write("cgroup.subtree_control", &format!("+{c}")) {
                let w = plan
                    .writes
                    .iter()
                    .find(|w| w.controller() == *c)
                    .expect("a write");
                let why = if e.raw_os_error() == Some(libc::EBUSY) {
                    format!(
                        "{} holds processes (no-internal-processes rule)",
                        cur.display()
                    )
                } else {
                    crate::cgroup::errno_text(&e)
                };
                return Err(cannot(
                    w,
                    format!(
                        "enabling +{c} in {}/cgroup.subtree_control failed: {why}",
                        cur.display()
                    ),
                ));
            }
        }
        cur.push(part);
        match std::fs::create_dir(&cur) {
            Ok(()) => made.push(cur.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(io_err(
                    &plan.writes[0],
                    format!("mkdir({})", cur.display()),
                    &e,
                ));
            }
        }
    }
    let leaf = Cgroup::new(&cur);
    if !leaf.procs().is_empty() {
        return Err(err(
            "linux.cgroupsPath",
            format!(
                "{} already holds processes: not a new container's cgroup",
                cur.display()
            ),
        ));
    }
    for w in &plan.writes {
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
        if let Err(e) = leaf.write(&w.file, &w.value) {
            return Err(io_err(
                w,
                format!("write({}, {:?})", path.display(), w.value),
                &e,
            ));
        }
    }
    let fd = leaf
        .open_dir()
        .map_err(|e| io_err(&plan.writes[0], format!("open({})", cur.display()), &e))?;
    Ok((cur, fd))
}

/// A failed cgroupfs step, named by the key it was for.
fn io_err(w: &Write, what: String, e: &std::io::Error) -> OciError {
    err(
        w.key.clone(),
        format!("{what} => {}", crate::cgroup::errno_text(e)),
    )
}

/// `uname -r`, for the error of a file this kernel lacks.
fn kernel_release() -> String {
    crate::sys::read_proc("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Write `writes` into the existing cgroup `leaf` (the OCI `update`), in
/// order; the first failure is the error, naming its key.
pub fn update(leaf: &Path, writes: &[Write]) -> Result<(), OciError> {
    let cg = Cgroup::new(leaf);
    for w in writes {
        let path = cg.file(&w.file);
        if !path.exists() {
            return Err(err(
                w.key.clone(),
                format!(
                    "{} does not exist: the container's cgroup lacks that controller (it was created without a limit of this kind) or the kernel lacks the file",
                    path.display()
                ),
            ));
        }
        cg.write(&w.file, &w.value).map_err(|e| {
            err(
                w.key.clone(),
                format!(
                    "write({}, {:?}) => {}",
                    path.display(),
                    w.value,
                    crate::cgroup::errno_text(&e)
                ),
            )
        })?;
    }
    Ok(())
}

fn remove_dirs(made: &[PathBuf]) {
    for d in made.iter().rev() {
        // A parent another container still uses stays (EBUSY).
        let _ = std::fs::remove_dir(d);
    }
}

/// End the container's cgroup at `delete`: kill what is left in each
/// leaf (one, or one per v1 hierarchy), then remove the directories
/// hutch-oci made (parents another container still uses stay).
pub fn remove(leaves: &[&Path], made: &[PathBuf]) -> Result<(), OciError> {
    for leaf in leaves {
        remove_leaf(leaf)?;
    }
    remove_dirs(made);
    Ok(())
}

fn remove_leaf(leaf: &Path) -> Result<(), OciError> {
    let cg = Cgroup::new(leaf);
    if !cg.dir.exists() {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    if !cg.wait_empty(Instant::now()) {
        if cg.write("cgroup.kill", "1").is_err() {
            for pid in cg.procs() {
                let _ = crate::sys::raw::kill(pid, libc::SIGKILL);
            }
        }
        if !cg.wait_empty(deadline) {
            return Err(OciError::Io {
                what: format!("{}: processes survived cgroup.kill", leaf.display()),
                source: std::io::Error::from(std::io::ErrorKind::TimedOut),
            });
        }
    }
    cg.remove(deadline)
        .map_err(OciError::io(format!("rmdir({})", leaf.display())))?;
    Ok(())
}

pub mod devices;
pub mod v1;

#[cfg(test)]
mod tests;
