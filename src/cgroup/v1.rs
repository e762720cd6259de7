//! cgroup v1 leaves, for hosts whose controllers live in v1 hierarchies
//! (legacy, and hybrid where the cgroup2 mount holds none of them).
//!
//! Each hierarchy gets its own leaf `hutch-<id>` under a parent `hutch`:
//! for root at the hierarchy's top (as runc's cgroupfs driver, never
//! inside a group the host made), for another user in its own cgroup of
//! that hierarchy when that is delegated (writable). v1 has no
//! `CLONE_INTO_CGROUP`: the supervisor moves itself into the leaves right
//! before clone3 and back right after ([`V1Leaf::enter`],
//! [`V1Leaf::leave`]), so hutch init starts in them and its new cgroup
//! namespace is rooted at them, as on v2. Each leaf directory is held open with an
//! exclusive flock while its sandbox lives: a leaf left by a SIGKILLed
//! supervisor is unlocked, and the next launch removes it ([`sweep`]).

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::errno_text;
use super::host::HostCgroups;
use super::io::IoDevice;
use super::report::CgroupStats;
use super::tree::{Cgroup, parse_key};

/// The parent of hutch's leaves in each v1 hierarchy.
pub const PARENT: &str = "hutch";

/// The v1 controller that enforces a limit key of the Spec.
pub fn controller_for(key: &str) -> &'static str {
    match key {
        "memory" => "memory",
        "pids" => "pids",
        "cpus" => "cpu",
        "io" => "blkio",
        _ => "",
    }
}

/// The v1 controllers hutch makes groups in, by name.
pub const CONTROLLERS: &[&str] = &[
    "memory", "pids", "cpu", "cpuacct", "cpuset", "blkio", "hugetlb",
];

/// `name` as one of [`CONTROLLERS`] (records keep controller names as
/// strings).
pub fn controller_name(name: &str) -> Option<&'static str> {
    CONTROLLERS.iter().copied().find(|c| *c == name)
}

/// Where hutch's leaves of `controller` go (the `hutch` parent, which may
/// not exist yet), or what hutch found that rules v1 out. Reads only.
pub fn parent_for(host: &HostCgroups, controller: &str) -> Result<Cgroup, String> {
    let Some(h) = host.v1_hierarchy(controller) else {
        return Err(format!("no cgroup v1 {controller} hierarchy mounted"));
    };
    let base = if host.uid == 0 {
        Cgroup::new(&h.mount)
    } else {
        // Another user may use only a subtree delegated to it: its own
        // cgroup, when that is writable.
        let Some(own) = h.own.as_deref() else {
            return Err(format!(
                "/proc/self/cgroup names no cgroup in the v1 {controller} hierarchy"
            ));
        };
        Cgroup::new(own)
    };
    let ok = base.dir_writable() && base.writable("cgroup.procs") && base.writable(MOVE_FILE);
    if !ok {
        return Err(format!(
            "cgroup v1 {controller} hierarchy: {} is not writable by uid {} (not delegated)",
            base.dir.display(),
            host.uid
        ));
    }
    Ok(base.child(PARENT))
}

/// How the launcher moves itself between v1 groups: "0" (the calling
/// thread) written to `tasks`. Writing its pid to `cgroup.procs` moves the
/// whole thread group, which takes the kernel's global threadgroup lock
/// for writing and so waits for an RCU grace period (6-20 ms per launch
/// on the 2-core test host); moving only `current` skips that lock
/// (kernel/cgroup/cgroup.c, `cgroup_procs_write_start`: "If we migrate a
/// single thread ... we can skip the global lock"), 0.2 ms. The launcher
/// is single-threaded when it moves, so the effect is the same.
const MOVE_FILE: &str = "tasks";
const MOVE_SELF: &str = "0";

/// One leaf per v1 hierarchy the sandbox joins.
#[derive(Debug)]
pub struct V1Leaf {
    dirs: Vec<V1Dir>,
}

#[derive(Debug)]
struct V1Dir {
    controller: &'static str,
    cg: Cgroup,
    /// This process's own group in the hierarchy, to go back to after
    /// clone.
    home: Option<Cgroup>,
    /// The leaf's directory, flocked while the sandbox lives; None for a
    /// leaf an engine made (it is removed by its `delete`).
    _lock: Option<OwnedFd>,
    /// The leaf's counter files ([`COUNTERS`]), opened with the leaf:
    /// [`V1Leaf::stats`] then reads each with one `pread` on the report's
    /// path instead of a path walk, open, stat and close (11 files on a
    /// host with every v1 controller: ~0.1 ms of a warm command's report).
    counters: Vec<(&'static str, std::fs::File)>,
}

/// The counter files [`V1Leaf::stats`] reads, by controller.
const COUNTERS: &[(&str, &str)] = &[
    ("memory", "memory.max_usage_in_bytes"),
    ("memory", "memory.failcnt"),
    ("memory", "memory.memsw.failcnt"),
    ("memory", "memory.oom_control"),
    ("pids", "pids.events"),
    ("pids", "pids.peak"),
    ("cpuacct", "cpuacct.usage"),
    ("cpuacct", "cpuacct.usage_user"),
    ("cpuacct", "cpuacct.usage_sys"),
    ("cpu", "cpu.stat"),
    ("blkio", "blkio.throttle.io_service_bytes"),
];

/// The [`COUNTERS`] of `controller` that `cg` has, open (a file the
/// kernel lacks is read by path later, and fails the same way then).
fn open_counters(controller: &str, cg: &Cgroup) -> Vec<(&'static str, std::fs::File)> {
    COUNTERS
        .iter()
        .filter(|(c, _)| *c == controller)
        .filter_map(|(_, f)| Some((*f, std::fs::File::open(cg.file(f)).ok()?)))
        .collect()
}

/// A v1 leaf could not be made; `path` and the errno say where and why.
#[derive(Debug)]
pub struct V1Failure {
    pub controller: &'static str,
    pub action: &'static str,
    pub path: PathBuf,
    pub error: std::io::Error,
}

impl V1Leaf {
    /// Make leaf `name` under `parent` for each `(controller, parent)`,
    /// each locked; on failure what was made is removed.
    pub fn create(
        host: &HostCgroups,
        parents: &[(&'static str, Cgroup)],
        name: &str,
    ) -> Result<V1Leaf, V1Failure> {
        let mut leaf = V1Leaf { dirs: Vec::new() };
        for (controller, parent) in parents {
            // Comounted controllers (`cpu,cpuacct`) share one leaf.
            if let Some(same) = leaf.dirs.iter().find(|d| d.cg == parent.child(name)) {
                let cg = same.cg.clone();
                leaf.dirs.push(V1Dir {
                    controller,
                    counters: open_counters(controller, &cg),
                    cg,
                    home: home(host, controller),
                    _lock: None,
                });
                continue;
            }
            match make_leaf(controller, parent, name) {
                Ok(mut d) => {
                    d.home = home(host, controller);
                    d.counters = open_counters(controller, &d.cg);
                    leaf.dirs.push(d)
                }
                Err(f) => {
                    leaf.teardown(Instant::now() + Duration::from_secs(1)).ok();
                    return Err(f);
                }
            }
        }
        Ok(leaf)
    }

    /// Leaves an engine made (an OCI `cgroupsPath` in each hierarchy):
    /// not locked, not removed here.
    pub fn adopt(host: &HostCgroups, dirs: Vec<(&'static str, PathBuf)>) -> V1Leaf {
        V1Leaf {
            dirs: dirs
                .into_iter()
                .map(|(controller, dir)| V1Dir {
                    controller,
                    cg: Cgroup::new(dir),
                    home: home(host, controller),
                    _lock: None,
                    counters: Vec::new(),
                })
                .collect(),
        }
    }

    /// Move the calling thread into every leaf, right before clone3: the
    /// child starts there. On failure the moves done are undone. The
    /// callers are single-threaded, so the thread is the whole process.
    pub fn enter(&self) -> Result<(), (PathBuf, std::io::Error)> {
        for d in &self.dirs {
            if d.home.is_none() {
                return Err((
                    d.cg.file(MOVE_FILE),
                    std::io::Error::from_raw_os_error(libc::ENOENT),
                ));
            }
        }
        for d in &self.dirs {
            if let Err(e) = d.cg.write(MOVE_FILE, MOVE_SELF) {
                let _ = self.leave();
                return Err((d.cg.file(MOVE_FILE), e));
            }
        }
        Ok(())
    }

    /// Move the calling thread back into its own groups, right after
    /// clone3.
    pub fn leave(&self) -> Result<(), (PathBuf, std::io::Error)> {
        let mut first = Ok(());
        for d in &self.dirs {
            if let Some(home) = &d.home
                && let Err(e) = home.write(MOVE_FILE, MOVE_SELF)
                && first.is_ok()
            {
                first = Err((home.file(MOVE_FILE), e));
            }
        }
        first
    }

    /// The leaf of `controller`, when the sandbox joins its hierarchy.
    pub fn dir(&self, controller: &str) -> Option<&Cgroup> {
        self.dirs
            .iter()
            .find(|d| d.controller == controller)
            .map(|d| &d.cg)
    }

    /// The leaf that names the sandbox's cgroup in reports and the
    /// registry: the memory one, else the first.
    pub fn primary(&self) -> Option<&Path> {
        self.dir("memory")
            .or(self.dirs.first().map(|d| &d.cg))
            .map(|c| c.dir.as_path())
    }

    /// SIGKILL every process in the leaves (v1 has no `cgroup.kill`).
    pub fn kill(&self) {
        for d in &self.dirs {
            kill_members(&d.cg);
        }
    }

    /// Kill what is left, wait until the leaves are empty and remove them.
    pub fn teardown(&self, deadline: Instant) -> Result<(), String> {
        for d in &self.dirs {
            if d._lock.is_none() {
                continue;
            }
            // Repeated: a process may fork between the read and the kill.
            while !d.cg.wait_empty(Instant::now()) {
                kill_members(&d.cg);
                let settle = (Instant::now() + Duration::from_millis(100)).min(deadline);
                if !d.cg.wait_empty(settle) && Instant::now() >= deadline {
                    return Err(format!(
                        "{}: processes survived SIGKILL",
                        d.cg.dir.display()
                    ));
                }
            }
            d.cg.remove(deadline)
                .map_err(|e| format!("rmdir {} => {}", d.cg.dir.display(), errno_text(&e)))?;
        }
        Ok(())
    }

    /// The counters v1 keeps, in the report's terms.
    pub fn stats(&self) -> CgroupStats {
        let mut s = CgroupStats::default();
        let num = |c: &str, f: &str| {
            self.counter(c, f)
                .and_then(|t| t.trim().parse::<u64>().ok())
        };
        let key = |c: &str, f: &str, k: &str| parse_key(&self.counter(c, f)?, k);
        if self.dir("memory").is_some() {
            s.memory_peak = num("memory", "memory.max_usage_in_bytes");
            // Hits of the memory cap, or of memory+swap at the same cap.
            s.memory_max_events = match (
                num("memory", "memory.failcnt"),
                num("memory", "memory.memsw.failcnt"),
            ) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            // `oom_kill` in memory.oom_control: Linux >= 4.13.
            s.oom_kill = key("memory", "memory.oom_control", "oom_kill");
        }
        if self.dir("pids").is_some() {
            s.pids_max_events = key("pids", "pids.events", "max");
        }
        if self.dir("cpuacct").is_some() {
            let ns = |f: &str| num("cpuacct", f).map(|ns| ns / 1000);
            s.cpu_usage_usec = ns("cpuacct.usage");
            s.cpu_user_usec = ns("cpuacct.usage_user");
            s.cpu_system_usec = ns("cpuacct.usage_sys");
        }
        if self.dir("pids").is_some() {
            s.pids_peak = num("pids", "pids.peak");
        }
        if self.dir("cpu").is_some() {
            s.cpu_throttled_usec = key("cpu", "cpu.stat", "throttled_time").map(|ns| ns / 1000);
        }
        if self.dir("blkio").is_some()
            && let Some(t) = self.counter("blkio", "blkio.throttle.io_service_bytes")
        {
            let (r, w) = parse_service_bytes(&t);
            s.io_rbytes = Some(r);
            s.io_wbytes = Some(w);
        }
        s
    }

    /// Reset the memory leaf's peak (`memory.max_usage_in_bytes`: a write
    /// sets it to the usage now); whether it was.
    pub fn reset_memory_peak(&self) -> bool {
        self.dir("memory")
            .is_some_and(|cg| cg.write("memory.max_usage_in_bytes", "0").is_ok())
    }

    /// The text of counter file `file` of the `controller` leaf: through
    /// the file opened with the leaf when there is one, else by path.
    fn counter(&self, controller: &str, file: &str) -> Option<String> {
        let d = self.dirs.iter().find(|d| d.controller == controller)?;
        match d.counters.iter().find(|(f, _)| *f == file) {
            Some((_, opened)) => read_from_start(opened).ok(),
            None => d.cg.read(file).ok(),
        }
    }
}

/// The whole of an open cgroup file, read from offset 0 (`pread`: a
/// cgroup file read at offset 0 is generated afresh each time).
fn read_from_start(file: &std::fs::File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = file.read_at(&mut buf[len..], len as u64)?;
        if n == 0 {
            break;
        }
        len += n;
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))
}

fn make_leaf(controller: &'static str, parent: &Cgroup, name: &str) -> Result<V1Dir, V1Failure> {
    let fail = |action, path: &Path, error| V1Failure {
        controller,
        action,
        path: path.to_path_buf(),
        error,
    };
    ensure_parent(controller, parent).map_err(|(p, e)| fail("mkdir", &p, e))?;
    let leaf = parent.child(name);
    // A shared lock on the parent while the leaf is made and locked: a
    // sweep holds the parent exclusively, so it never sees a leaf between
    // its mkdir and its lock (unlocked and empty, as a dead one).
    let parent_fd = parent
        .open_dir()
        .map_err(|e| fail("open", &parent.dir, e))?;
    crate::sys::image::flock_shared(parent_fd.as_fd())
        .map_err(|e| fail("lock", &parent.dir, std::io::Error::from_raw_os_error(e.errno as i32)))?;
    std::fs::create_dir(&leaf.dir).map_err(|e| fail("mkdir", &leaf.dir, e))?;
    let locked = leaf.open_dir().and_then(|fd| {
        crate::sys::flock_exclusive(fd.as_fd(), true)
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))?;
        Ok(fd)
    });
    drop(parent_fd);
    let fd = match locked {
        Ok(fd) => fd,
        Err(e) => {
            let _ = std::fs::remove_dir(&leaf.dir);
            return Err(fail("lock", &leaf.dir, e));
        }
    };
    if controller == "cpuset" {
        copy_cpuset(parent, &leaf).map_err(|(p, e)| fail("write", &p, e))?;
    }
    Ok(V1Dir {
        controller,
        cg: leaf,
        home: None,
        _lock: Some(fd),
        counters: Vec::new(),
    })
}

/// This process's own group in the hierarchy of `controller`.
fn home(host: &HostCgroups, controller: &str) -> Option<Cgroup> {
    host.v1_hierarchy(controller)?
        .own
        .as_deref()
        .map(Cgroup::new)
}

/// Make the `hutch` parent when it is missing (a cpuset parent starts
/// with no CPUs: it gets its parent's).
fn ensure_parent(controller: &str, parent: &Cgroup) -> Result<(), (PathBuf, std::io::Error)> {
    match std::fs::create_dir(&parent.dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err((parent.dir.clone(), e)),
    }
    if controller == "cpuset"
        && let Some(up) = parent.parent()
    {
        copy_cpuset(&up, parent)?;
    }
    Ok(())
}

/// A new cpuset group has empty `cpuset.cpus`/`mems` and refuses tasks
/// until they are set: copy them from `from`.
pub fn copy_cpuset(from: &Cgroup, to: &Cgroup) -> Result<(), (PathBuf, std::io::Error)> {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        if !to.read(f).unwrap_or_default().trim().is_empty() {
            continue;
        }
        let v = from.read(f).map_err(|e| (from.file(f), e))?;
        to.write(f, v.trim()).map_err(|e| (to.file(f), e))?;
    }
    Ok(())
}

/// [`sweep`] the `hutch` parent of every v1 hierarchy this process may
/// use: a launch cleans what SIGKILLed supervisors left in all of them,
/// not only in the hierarchies it joins.
pub fn sweep_all(host: &HostCgroups) {
    for h in &host.v1 {
        if let Ok(parent) = parent_for(host, &h.controllers[0]) {
            sweep(&parent);
        }
    }
}

/// Remove the leaves under `parent` that no sandbox holds (their
/// supervisor was killed): unlocked and empty (rmdir of a group with
/// processes fails with EBUSY, and it stays).
pub fn sweep(parent: &Cgroup) {
    // Exclusive on the parent, or no sweep now: a launch making a leaf
    // holds it shared (see `make_leaf`); the next launch sweeps.
    let Ok(parent_fd) = parent.open_dir() else {
        return;
    };
    if !matches!(
        crate::sys::flock_exclusive(parent_fd.as_fd(), false),
        Ok(true)
    ) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(&parent.dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("hutch-") || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let leaf = parent.child(name);
        let Ok(fd) = leaf.open_dir() else { continue };
        if matches!(crate::sys::flock_exclusive(fd.as_fd(), false), Ok(true)) {
            let _ = std::fs::remove_dir(&leaf.dir);
        }
    }
}

fn kill_members(cg: &Cgroup) {
    // Never this process (were it left in a leaf by a failed `leave`).
    let me = std::process::id() as i32;
    for pid in cg.procs().into_iter().filter(|p| *p != me) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Write one limit of the Spec into `leaf` (the leaf of its controller);
/// Ok is the mechanism for the report, Err the file and the errno text.
pub fn write_limit(
    leaf: &Cgroup,
    key: &str,
    limits: &crate::spec::Limits,
    io_devices: &[IoDevice],
) -> Result<String, (String, String)> {
    let w = |file: &str, v: String| {
        leaf.write(file, &v)
            .map_err(|e| (file.to_string(), errno_text(&e)))
    };
    match key {
        "memory" => {
            let bytes = limits.memory.map(|m| m.value().0).unwrap_or(u64::MAX);
            w("memory.limit_in_bytes", bytes.to_string())?;
            // memory+swap at the same cap: no swap. The file exists only
            // with swap accounting (swapaccount=1).
            if leaf.file("memory.memsw.limit_in_bytes").exists() {
                w("memory.memsw.limit_in_bytes", bytes.to_string())?;
                Ok("cgroup v1 memory.limit_in_bytes, memory.memsw.limit_in_bytes (no swap)".into())
            } else {
                Ok("cgroup v1 memory.limit_in_bytes (no swap accounting)".into())
            }
        }
        "pids" => {
            let n = limits.pids.map(|p| p.value()).unwrap_or(super::MAX_PIDS);
            w("pids.max", n.to_string())?;
            Ok("cgroup v1 pids.max".into())
        }
        "cpus" => {
            let c = limits.cpus.map(|c| c.value()).unwrap_or(1.0);
            let max = super::cpu_max(c);
            let (quota, period) = max.split_once(' ').unwrap_or((&max, "100000"));
            w("cpu.cfs_period_us", period.to_string())?;
            w("cpu.cfs_quota_us", quota.to_string())?;
            Ok("cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us".into())
        }
        "io" => {
            let mut lines = Vec::new();
            for d in io_devices {
                for (k, v) in throttle_values(&d.line) {
                    let file = format!("blkio.throttle.{k}_device");
                    let line = format!("{}:{} {v}", d.major, d.minor);
                    w(&file, line.clone())?;
                    lines.push(format!("{file} {line}"));
                }
            }
            Ok(format!("cgroup v1 blkio throttle ({})", lines.join("; ")))
        }
        _ => Err((key.to_string(), "unknown limit".into())),
    }
}

/// `rbps=N wbps=N ...` of an `io.max` line → v1 throttle file stems.
fn throttle_values(io_max_line: &str) -> Vec<(&'static str, String)> {
    io_max_line
        .split_whitespace()
        .skip(1)
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let stem = match k {
                "rbps" => "read_bps",
                "wbps" => "write_bps",
                "riops" => "read_iops",
                "wiops" => "write_iops",
                _ => return None,
            };
            Some((stem, v.to_string()))
        })
        .collect()
}

/// Bytes read and written from `blkio.throttle.io_service_bytes`
/// (`MAJ:MIN Read N` lines).
fn parse_service_bytes(text: &str) -> (u64, u64) {
    let (mut r, mut w) = (0u64, 0u64);
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let [_, op, n] = f[..]
            && let Ok(n) = n.parse::<u64>()
        {
            match op {
                "Read" => r = r.saturating_add(n),
                "Write" => w = w.saturating_add(n),
                _ => {}
            }
        }
    }
    (r, w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher moves itself by writing "0" to `tasks`, never its pid
    /// to `cgroup.procs` (which waits for an RCU grace period; see
    /// [`MOVE_FILE`]), in and back out.
    #[test]
    fn moves_the_calling_thread_through_tasks() {
        let tmp = std::env::temp_dir().join(format!("hutch-v1-move-{}", std::process::id()));
        let (leaf, home) = (tmp.join("leaf"), tmp.join("home"));
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let v1 = V1Leaf {
            dirs: vec![V1Dir {
                controller: "memory",
                cg: Cgroup::new(&leaf),
                home: Some(Cgroup::new(&home)),
                _lock: None,
                counters: Vec::new(),
            }],
        };
        v1.enter().unwrap();
        assert_eq!(std::fs::read_to_string(leaf.join("tasks")).unwrap(), "0");
        assert!(!leaf.join("cgroup.procs").exists());
        v1.leave().unwrap();
        assert_eq!(std::fs::read_to_string(home.join("tasks")).unwrap(), "0");
        assert!(!home.join("cgroup.procs").exists());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// The counters opened with the leaf are read afresh from their start
    /// at the report (as the kernel's change after the leaf is made); a
    /// file that was not there then is read by path.
    #[test]
    fn stats_read_the_counters_opened_with_the_leaf() {
        let tmp = std::env::temp_dir().join(format!("hutch-v1-counters-{}", std::process::id()));
        let (mem, acct) = (tmp.join("memory"), tmp.join("cpuacct"));
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::create_dir_all(&acct).unwrap();
        std::fs::write(mem.join("memory.max_usage_in_bytes"), "1\n").unwrap();
        std::fs::write(mem.join("memory.oom_control"), "oom_kill_disable 0\n").unwrap();
        std::fs::write(acct.join("cpuacct.usage"), "0\n").unwrap();
        let dir = |controller, cg: &Path| V1Dir {
            controller,
            counters: open_counters(controller, &Cgroup::new(cg)),
            cg: Cgroup::new(cg),
            home: None,
            _lock: None,
        };
        let v1 = V1Leaf {
            dirs: vec![dir("memory", &mem), dir("cpuacct", &acct)],
        };
        assert_eq!(v1.dirs[0].counters.len(), 2);
        // What the command's end finds: longer and shorter than before.
        std::fs::write(mem.join("memory.max_usage_in_bytes"), "123456789\n").unwrap();
        std::fs::write(
            mem.join("memory.oom_control"),
            format!("oom_kill_disable 0\n{}oom_kill 3\n", "x 0\n".repeat(2000)),
        )
        .unwrap();
        std::fs::write(acct.join("cpuacct.usage"), "7000\n").unwrap();
        std::fs::write(acct.join("cpuacct.usage_user"), "5000\n").unwrap();
        let s = v1.stats();
        assert_eq!(s.memory_peak, Some(123456789));
        assert_eq!(s.oom_kill, Some(3));
        assert_eq!(s.cpu_usage_usec, Some(7));
        assert_eq!(s.cpu_user_usec, Some(5), "a file made later, read by path");
        assert_eq!(s.cpu_system_usec, None);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn throttle_lines_from_io_max() {
        assert_eq!(
            throttle_values("8:0 wbps=1048576 riops=200"),
            [("write_bps", "1048576".into()), ("read_iops", "200".into())]
        );
        let t = "8:0 Read 4096\n8:0 Write 512\n8:0 Sync 0\n8:16 Read 1\nTotal 4609\n";
        assert_eq!(parse_service_bytes(t), (4097, 512));
    }
}
