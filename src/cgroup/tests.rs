//! Unit tests against a fake cgroupfs: a temp directory holding the
//! interface files the kernel would show.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::host::{HostCgroups, Layout};
use super::*;
use crate::spec::{ByteSize, Limit, Limits};
use crate::test_support::require;

struct Fake {
    root: PathBuf,
}

impl Fake {
    fn new(controllers: &str) -> Fake {
        static N: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "hutch-fakecg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let f = Fake { root };
        f.cgroup("", controllers, "", "");
        f
    }

    /// Create a cgroup directory `rel` with its files.
    fn cgroup(&self, rel: &str, controllers: &str, subtree: &str, procs: &str) -> PathBuf {
        let d = self.root.join(rel);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cgroup.controllers"), controllers).unwrap();
        std::fs::write(d.join("cgroup.subtree_control"), subtree).unwrap();
        std::fs::write(d.join("cgroup.procs"), procs).unwrap();
        d
    }

    fn host(&self, layout: Layout, own: &str, uid: u32) -> HostCgroups {
        HostCgroups {
            layout,
            v2_mount: Some(self.root.clone()),
            own: Some(self.root.join(own).components().collect()),
            uid,
            v1: Vec::new(),
        }
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    fn dirs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.root)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn limits(
    memory: Option<Limit<ByteSize>>,
    pids: Option<Limit<u64>>,
    cpus: Option<Limit<f64>>,
) -> Limits {
    Limits {
        memory,
        pids,
        cpus,
        ..Limits::default()
    }
}

const G2: ByteSize = ByteSize(2 << 30);

#[test]
fn delegated_own_cgroup_gets_leaf_with_all_limits() {
    let f = Fake::new("cpuset cpu io memory pids");
    f.cgroup("deleg", "cpu io memory pids", "", "4242\n");
    let host = f.host(Layout::Unified, "deleg", 1000);
    let l = limits(
        Some(Limit::Required(G2)),
        Some(Limit::Required(64)),
        Some(Limit::Required(1.5)),
    );
    let p = prepare_on(&host, &l, "t1").expect("prepare");
    let leaf = p.cgroup_dir().expect("leaf").to_path_buf();
    assert_eq!(leaf, f.root.join("deleg/hutch-t1"));
    assert!(p.cgroup_fd().is_some());
    assert_eq!(f.read("deleg/hutch-t1/memory.max"), "2147483648");
    assert_eq!(f.read("deleg/hutch-t1/memory.swap.max"), "0");
    assert_eq!(f.read("deleg/hutch-t1/memory.oom.group"), "1");
    assert_eq!(f.read("deleg/hutch-t1/pids.max"), "64");
    assert_eq!(f.read("deleg/hutch-t1/cpu.max"), "150000 100000");
    // No internal processes: hutch's cgroup was emptied into the supervisor
    // child before controllers were enabled.
    assert_eq!(f.read("deleg/hutch-supervisor/cgroup.procs"), "4242");
    let r = p.report();
    let by: Vec<(&str, &str)> = r
        .enforced
        .iter()
        .map(|e| (e.limit.as_str(), e.by.as_str()))
        .collect();
    assert!(
        by.contains(&(
            "memory",
            "cgroup memory.max, memory.swap.max=0, memory.oom.group=1"
        )),
        "{by:?}"
    );
    assert!(by.contains(&("pids", "cgroup pids.max")));
    assert!(by.contains(&("cpus", "cgroup cpu.max")));
    assert!(r.unenforced.is_empty());
    // pids is enforced by the cgroup, so no RLIMIT_NPROC; core dumps off.
    assert_eq!(p.rlimits(), &[(libc::RLIMIT_CORE as i32, 0)]);
    drop(p);
}

#[test]
fn rerun_from_supervisor_uses_the_delegated_parent() {
    let f = Fake::new("memory pids");
    f.cgroup("deleg", "memory pids", "memory pids", "");
    f.cgroup("deleg/hutch-supervisor", "", "", "77\n");
    let host = f.host(Layout::Unified, "deleg/hutch-supervisor", 1000);
    let p = prepare_on(&host, &limits(Some(Limit::Required(G2)), None, None), "t2").unwrap();
    assert_eq!(p.cgroup_dir().unwrap(), f.root.join("deleg/hutch-t2"));
    // Controllers were already on: subtree_control untouched.
    assert_eq!(f.read("deleg/cgroup.subtree_control"), "memory pids");
}

#[test]
fn hybrid_layout_required_memory_fails_with_the_fix_and_writes_nothing() {
    let f = Fake::new("hugetlb");
    let host = f.host(Layout::Hybrid, "", 0);
    let err = prepare_on(
        &host,
        &limits(Some(Limit::Required(ByteSize(256 << 20))), None, None),
        "t3",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        format!(
            "limits.memory: cgroup v2 memory controller not available (hybrid v1 layout, {} offers only hugetlb); run under a delegated cgroup v2 tree, e.g. `systemd-run --user --scope -p Delegate=yes hutch ...`, or boot with systemd.unified_cgroup_hierarchy=1",
            f.root.display()
        )
    );
    assert!(!err.contains('\n'));
    assert!(f.dirs().is_empty(), "host tree touched: {:?}", f.dirs());
    assert_eq!(f.read("cgroup.subtree_control"), "");
}

#[test]
fn hybrid_layout_preferred_is_unenforced_and_pids_falls_back_to_nproc() {
    let f = Fake::new("hugetlb");
    let host = f.host(Layout::Hybrid, "", 0);
    let l = limits(
        Some(Limit::preferred(G2)),
        Some(Limit::Required(64)),
        Some(Limit::preferred(0.5)),
    );
    let p = prepare_on(&host, &l, "t4").unwrap();
    assert!(p.cgroup_fd().is_none());
    assert!(f.dirs().is_empty());
    let r = p.report();
    let un: Vec<&str> = r.unenforced.iter().map(|u| u.limit.as_str()).collect();
    assert_eq!(un, ["memory", "cpus"]);
    assert!(
        r.unenforced[0]
            .reason
            .contains("memory controller not available (hybrid v1 layout")
    );
    let pids = r.enforced.iter().find(|e| e.limit == "pids").unwrap();
    assert!(pids.by.starts_with("RLIMIT_NPROC"), "{}", pids.by);
    assert!(p.rlimits().contains(&(libc::RLIMIT_NPROC as i32, 64)));
    assert!(p.rlimits().contains(&(libc::RLIMIT_CORE as i32, 0)));
    assert_eq!(p.ended_by(), None);
    let fin = p.finish();
    assert_eq!(fin.cgroup, None);
    assert_eq!(fin.stats, None);
}

#[test]
fn root_in_root_cgroup_creates_leaf_directly() {
    let f = Fake::new("cpu memory pids");
    let host = f.host(Layout::Unified, "", 0);
    let p = prepare_on(&host, &limits(None, Some(Limit::Required(10)), None), "t5").unwrap();
    assert_eq!(p.cgroup_dir().unwrap(), f.root.join("hutch-t5"));
    assert!(!f.root.join(plan::SUPERVISOR).exists());
    assert_eq!(f.read("hutch-t5/pids.max"), "10");
    // The last controller hutch enabled (memory and pids are always on for
    // the report's counters; cpu only when asked).
    assert_eq!(f.read("cgroup.subtree_control"), "+pids");
}

#[test]
fn root_in_undelegated_systemd_cgroup_does_not_touch_it() {
    let f = Fake::new("cpu memory pids");
    f.cgroup("system.slice/x.service", "cpu memory pids", "", "99\n");
    let host = f.host(Layout::Unified, "system.slice/x.service", 0);
    let err = prepare_on(&host, &limits(None, None, Some(Limit::Required(1.0))), "t6")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("limits.cpus: cgroup v2 cpu controller not available ("),
        "{err}"
    );
    assert!(
        err.contains("is managed by systemd and not delegated"),
        "{err}"
    );
    // The fix names the key, not a front end's flag.
    assert!(err.contains("limits.cgroup_parent"), "{err}");
    assert!(!err.contains("--cgroup-parent"), "{err}");
    assert!(!f.root.join("system.slice/x.service/hutch-t6").exists());
    // Preferred: runs, unenforced.
    let p = prepare_on(
        &host,
        &limits(None, None, Some(Limit::preferred(1.0))),
        "t6",
    )
    .unwrap();
    assert!(p.cgroup_fd().is_none());
    assert_eq!(p.report().unenforced[0].limit, "cpus");
}

#[test]
fn explicit_parent_outside_the_mount_is_refused() {
    let f = Fake::new("memory pids");
    let host = f.host(Layout::Unified, "", 1000);
    let mut l = limits(None, None, None);
    l.cgroup_parent = Some("/tmp".into());
    let err = prepare_on(&host, &l, "t7").unwrap_err().to_string();
    assert!(
        err.starts_with("limits.cgroup_parent: /tmp: not inside the cgroup2 mount"),
        "{err}"
    );
}

#[test]
fn explicit_parent_is_used() {
    let f = Fake::new("memory pids cpu");
    let dir = f.cgroup("ci", "memory pids cpu", "memory pids cpu", "");
    let host = f.host(Layout::Unified, "", 1000);
    let mut l = limits(Some(Limit::Required(G2)), None, Some(Limit::Required(0.5)));
    l.cgroup_parent = Some(dir.clone());
    let p = prepare_on(&host, &l, "t8").unwrap();
    assert_eq!(p.cgroup_dir().unwrap(), dir.join("hutch-t8"));
    assert_eq!(f.read("ci/hutch-t8/cpu.max"), "50000 100000");
    assert!(!dir.join(plan::SUPERVISOR).exists());
}

#[test]
fn explicit_parent_holding_processes_hits_the_internal_process_rule() {
    let f = Fake::new("memory pids");
    let dir = f.cgroup("busy", "memory pids", "", "555\n");
    let host = f.host(Layout::Unified, "", 1000);
    let mut l = limits(Some(Limit::Required(G2)), None, None);
    l.cgroup_parent = Some(dir);
    let err = prepare_on(&host, &l, "t9").unwrap_err().to_string();
    assert!(
        err.contains("holds processes, and the no-internal-processes rule"),
        "{err}"
    );
}

#[test]
fn controller_not_delegated() {
    let f = Fake::new("memory pids cpu");
    f.cgroup("deleg", "pids", "", "");
    let host = f.host(Layout::Unified, "deleg", 1000);
    let err = prepare_on(&host, &limits(None, None, Some(Limit::Required(2.0))), "ta")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "{} offers only pids",
            f.root.join("deleg").display()
        )),
        "{err}"
    );
    assert!(err.contains("delegate the cpu controller"), "{err}");
}

#[test]
fn stats_events_kill_and_ended_by() {
    let f = Fake::new("memory pids");
    let host = f.host(Layout::Unified, "", 0);
    let p = prepare_on(
        &host,
        &limits(Some(Limit::Required(G2)), Some(Limit::Required(64)), None),
        "tb",
    )
    .unwrap();
    let leaf = p.cgroup_dir().unwrap().to_path_buf();
    assert_eq!(p.ended_by(), None);
    std::fs::write(leaf.join("pids.events"), "max 3\n").unwrap();
    assert_eq!(p.ended_by(), Some("pids-limit-hit"));
    std::fs::write(
        leaf.join("memory.events"),
        "low 0\nhigh 0\nmax 40\noom 1\noom_kill 2\n",
    )
    .unwrap();
    std::fs::write(leaf.join("memory.peak"), "2147479552\n").unwrap();
    std::fs::write(
        leaf.join("cpu.stat"),
        "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
    )
    .unwrap();
    assert_eq!(p.ended_by(), Some("oom-killed"));
    let r = p.report();
    let s = r.stats.clone().unwrap();
    assert_eq!(s.memory_peak, Some(2147479552));
    assert_eq!(s.oom_kill, Some(2));
    assert_eq!(s.pids_max_events, Some(3));
    assert_eq!(s.cpu_usage_usec, Some(1500));
    assert_eq!((s.cpu_user_usec, s.cpu_system_usec), (Some(1000), Some(500)));
    assert_eq!(r.ended_by, Some("oom-killed"));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["stats"]["memory_peak"], 2147479552u64);
    assert_eq!(json["enforced"][0]["limit"], "memory");
    p.kill();
    assert_eq!(f.read("hutch-tb/cgroup.kill"), "1");
}

#[test]
fn rlimits_planned_and_checked_against_the_hard_limit() {
    let f = Fake::new("hugetlb");
    let host = f.host(Layout::Hybrid, "", 0);
    let mut l = limits(None, Some(Limit::Required(100)), None);
    l.rlimits.insert("nofile".into(), 64);
    l.rlimits.insert("nproc".into(), 50);
    l.rlimits.insert("core".into(), 1 << 20);
    let p = prepare_on(&host, &l, "tc").unwrap();
    let rl = p.rlimits();
    assert!(rl.contains(&(libc::RLIMIT_NOFILE as i32, 64)));
    // The smaller of --pids (fallback) and --rlimit nproc wins.
    assert!(rl.contains(&(libc::RLIMIT_NPROC as i32, 50)));
    assert!(rl.contains(&(libc::RLIMIT_CORE as i32, 1 << 20)));
    assert!(!rl.contains(&(libc::RLIMIT_CORE as i32, 0)));
    let (_, hard) = crate::sys::getrlimit(libc::RLIMIT_NOFILE as i32).unwrap();
    if hard != u64::MAX {
        let mut l = limits(None, None, None);
        l.rlimits.insert("nofile".into(), hard + 1);
        let err = prepare_on(&host, &l, "td").unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "limits.rlimits.nofile: {} is above the hard limit {hard}",
                hard + 1
            )),
            "{err}"
        );
    }
}

#[test]
fn bad_sandbox_id() {
    let f = Fake::new("memory");
    let host = f.host(Layout::Unified, "", 0);
    assert!(prepare_on(&host, &Limits::default(), "../x").is_err());
    assert!(f.dirs().is_empty());
}

#[test]
fn validate_names_and_ranges() {
    let ok = |l: &Limits| validate_limits(l);
    let mut l = Limits::default();
    assert!(ok(&l).is_ok());
    l.rlimits.insert("nofile".into(), 1024);
    assert!(ok(&l).is_ok());
    l.rlimits.insert("bogus".into(), 1);
    assert_eq!(ok(&l).unwrap_err().path, "limits.rlimits.bogus");
    let l = limits(Some(Limit::Required(ByteSize(4096))), None, None);
    assert_eq!(ok(&l).unwrap_err().path, "limits.memory");
    let l = limits(None, Some(Limit::Required(0)), None);
    assert_eq!(ok(&l).unwrap_err().path, "limits.pids");
    let l = limits(None, None, Some(Limit::Required(0.001)));
    assert_eq!(ok(&l).unwrap_err().path, "limits.cpus");
    let l = Limits {
        cgroup_parent: Some("rel/dir".into()),
        ..Limits::default()
    };
    assert_eq!(ok(&l).unwrap_err().path, "limits.cgroup_parent");
    assert_eq!(cpu_max(1.5), "150000 100000");
    assert_eq!(cpu_max(0.01), "1000 100000");
}

#[test]
fn probe_reports_what_works() {
    let f = Fake::new("hugetlb");
    let host = f.host(Layout::Hybrid, "", 0);
    let pr = probe::probe_host(&host, Some("/".into()), None, true);
    assert_eq!(pr.layout, "hybrid");
    assert!(!pr.delegation.usable);
    assert!(!pr.limits["memory"].works);
    assert!(
        pr.limits["memory"]
            .why_not
            .as_deref()
            .unwrap()
            .contains("offers only hugetlb")
    );
    assert!(pr.limits["pids"].works);
    assert!(
        pr.limits["pids"]
            .by
            .as_deref()
            .unwrap()
            .starts_with("RLIMIT_NPROC")
    );
    assert!(!pr.limits["cpus"].works);

    let f = Fake::new("memory pids cpu io");
    f.cgroup("deleg", "memory pids cpu io", "", "1\n");
    let host = f.host(Layout::Unified, "deleg", 1000);
    let pr = probe::probe_host(&host, None, Some(Path::new("/nope")), true);
    assert!(pr.delegation.usable);
    assert!(pr.delegation.moves_own_processes);
    assert!(!pr.cgroup_parent.as_ref().unwrap().usable);
    let pr = probe::probe_host(&host, None, None, false);
    assert!(pr.limits.values().all(|s| s.works));
    assert!(f.dirs() == ["deleg"], "probe must not write");
}

fn io_entry(device: &str) -> crate::spec::IoMax {
    crate::spec::IoMax {
        device: device.into(),
        rbps: None,
        wbps: None,
        riops: None,
        wiops: None,
    }
}

fn io_limits(l: Limit<Vec<crate::spec::IoMax>>) -> Limits {
    Limits {
        io: Some(l),
        ..Limits::default()
    }
}

/// A whole-disk block device of this host (from /sys/block), if any.
fn some_disk() -> Option<(String, u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    std::fs::read_dir("/sys/block")
        .ok()?
        .flatten()
        .find_map(|e| {
            let dev = format!("/dev/{}", e.file_name().to_string_lossy());
            let md = std::fs::metadata(&dev).ok()?;
            md.file_type()
                .is_block_device()
                .then(|| (dev, libc::major(md.rdev()), libc::minor(md.rdev())))
        })
}

#[test]
fn io_max_flag_parses() {
    let e = io::parse_flag("/dev/vda:wbps=1M,riops=200").unwrap();
    assert_eq!(e.device, Path::new("/dev/vda"));
    assert_eq!(e.wbps, Some(ByteSize(1 << 20)));
    assert_eq!(e.riops, Some(200));
    assert_eq!((e.rbps, e.wiops), (None, None));
    let e = io::parse_flag("/dev/disk/by-path/pci-0000:00:04.0:rbps=10M,wiops=5").unwrap();
    assert_eq!(e.device, Path::new("/dev/disk/by-path/pci-0000:00:04.0"));
    assert_eq!(e.rbps, Some(ByteSize(10 << 20)));
    assert_eq!(e.wiops, Some(5));
    for (bad, says) in [
        ("/dev/vda", "expected DEVICE:KEY=VALUE"),
        ("/dev/vda:", "expected DEVICE:KEY=VALUE"),
        (":wbps=1M", "expected DEVICE:KEY=VALUE"),
        ("/dev/vda:wbps", "expected DEVICE:KEY=VALUE"),
        ("/dev/vda:speed=1M", "unknown key \"speed\""),
        ("/dev/vda:wbps=fast", "wbps: \"fast\" is not a size"),
        ("/dev/vda:riops=1.5", "riops=\"1.5\": not a whole number"),
        ("/dev/vda:wbps=1M,wbps=2M", "wbps given twice"),
    ] {
        let err = io::parse_flag(bad).unwrap_err();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(!err.contains('\n'));
    }
}

#[test]
fn io_max_line_leaves_out_unset_keys() {
    let mut e = io_entry("/dev/vda");
    e.wbps = Some(ByteSize(1 << 20));
    assert_eq!(io::io_max_line(254, 0, &e), "254:0 wbps=1048576");
    e.rbps = Some(ByteSize(2048));
    e.riops = Some(100);
    e.wiops = Some(50);
    assert_eq!(
        io::io_max_line(8, 16, &e),
        "8:16 rbps=2048 wbps=1048576 riops=100 wiops=50"
    );
    assert_eq!(
        io::parse_stat(
            "254:0 rbytes=4096 wbytes=100 rios=1 wios=1 dbytes=0 dios=0\n7:0 rbytes=1 wbytes=2\n"
        ),
        (4097, 102)
    );
    assert_eq!(io::parse_stat(""), (0, 0));
}

#[test]
fn io_validation_names_the_key() {
    let check = |entries: Vec<crate::spec::IoMax>| {
        validate_limits(&io_limits(Limit::Required(entries)))
            .map_err(|e| format!("{}: {}", e.path, e.message))
    };
    let mut good = io_entry("/dev/vda");
    good.wbps = Some(ByteSize(1 << 20));
    assert!(check(vec![good.clone()]).is_ok());
    assert_eq!(
        check(vec![]).unwrap_err(),
        "limits.io: empty list; name at least one device or omit limits.io"
    );
    let mut rel = good.clone();
    rel.device = "dev/vda".into();
    assert!(
        check(vec![rel])
            .unwrap_err()
            .starts_with("limits.io[0].device: \"dev/vda\" must be an absolute path")
    );
    assert_eq!(
        check(vec![io_entry("/dev/vda")]).unwrap_err(),
        "limits.io[0]: set at least one of rbps, wbps, riops, wiops"
    );
    let mut zero = good.clone();
    zero.riops = Some(0);
    assert_eq!(
        check(vec![zero]).unwrap_err(),
        "limits.io[0].riops: 0 is below the minimum of 2"
    );
    let mut huge = good.clone();
    huge.wiops = Some(1 << 40);
    assert!(
        check(vec![huge])
            .unwrap_err()
            .starts_with("limits.io[0].wiops: 1099511627776 is above the maximum")
    );
    let mut other = good.clone();
    other.device = "/dev/vdb".into();
    assert_eq!(
        check(vec![good.clone(), other, good.clone()]).unwrap_err(),
        "limits.io[2].device: /dev/vda is already limited by io[0]"
    );
}

#[test]
fn io_device_must_be_a_block_device() {
    let f = Fake::new("cpu io memory pids");
    let host = f.host(Layout::Unified, "", 0);
    let mut e = io_entry("/dev/null");
    e.wbps = Some(ByteSize(1 << 20));
    let err = prepare_on(&host, &io_limits(Limit::Required(vec![e.clone()])), "io1")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("limits.io[0].device: /dev/null: not a block device (a character device)"),
        "{err}"
    );
    assert!(f.dirs().is_empty(), "nothing created: {:?}", f.dirs());
    e.device = "/nonexistent-disk".into();
    let err = prepare_on(&host, &io_limits(Limit::Required(vec![e.clone()])), "io2")
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot stat it: ENOENT"), "{err}");
    // Preferred: reported unenforced with the reason; the run goes on.
    let p = prepare_on(&host, &io_limits(Limit::preferred(vec![e])), "io3").unwrap();
    let r = p.report();
    assert_eq!(r.unenforced.len(), 1);
    assert_eq!(r.unenforced[0].limit, "io");
    assert!(r.unenforced[0].reason.contains("/nonexistent-disk"));
}

#[test]
fn io_max_written_and_controller_enabled_only_when_asked() {
    let disk = some_disk();
    require!(disk.is_some(), "no block device under /sys/block");
    let (disk, major, minor) = disk.unwrap();
    let f = Fake::new("cpu io memory pids");
    let host = f.host(Layout::Unified, "", 0);
    // Without io limits the io controller is left alone.
    let p = prepare_on(&host, &Limits::default(), "io4").unwrap();
    assert!(!f.read("cgroup.subtree_control").contains("io"));
    drop(p);
    let mut e = io_entry(&disk);
    e.wbps = Some(ByteSize(1 << 20));
    e.riops = Some(200);
    let p = prepare_on(&host, &io_limits(Limit::Required(vec![e])), "io5").unwrap();
    assert_eq!(f.read("cgroup.subtree_control"), "+io");
    let line = format!("{major}:{minor} wbps=1048576 riops=200");
    assert_eq!(f.read("hutch-io5/io.max"), line);
    let r = p.report();
    let io = r
        .enforced
        .iter()
        .find(|e| e.limit == "io")
        .expect("io enforced");
    assert_eq!(io.by, format!("cgroup io.max ({line})"));
    assert_eq!(io.value[0]["device"], disk.as_str());
    assert_eq!(io.value[0]["wbps"], 1 << 20);
}

#[test]
fn io_required_without_controller_fails_closed() {
    let f = Fake::new("hugetlb");
    let host = f.host(Layout::Hybrid, "", 0);
    let disk = some_disk();
    require!(disk.is_some(), "no block device under /sys/block");
    let (disk, _, _) = disk.unwrap();
    let mut e = io_entry(&disk);
    e.wbps = Some(ByteSize(1 << 20));
    let err = prepare_on(&host, &io_limits(Limit::Required(vec![e.clone()])), "io6")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("limits.io: cgroup v2 io controller not available (hybrid v1 layout"),
        "{err}"
    );
    let p = prepare_on(&host, &io_limits(Limit::preferred(vec![e])), "io7").unwrap();
    let r = p.report();
    assert_eq!(r.unenforced[0].limit, "io");
    assert!(
        r.unenforced[0]
            .reason
            .contains("io controller not available")
    );
}

#[test]
fn io_in_a_profile_required_and_preferred() {
    let s = crate::spec::parse_toml(
        "[limits]\nio = [{ device = \"/dev/vda\", wbps = \"1M\", riops = 200 }]\n",
    )
    .unwrap();
    let io = s.limits.io.as_ref().unwrap();
    assert!(io.is_required());
    assert_eq!(io.get()[0].wbps, Some(ByteSize(1 << 20)));
    assert_eq!(io.get()[0].riops, Some(200));
    let s = crate::spec::parse_toml(
        "[limits.io]\npreferred = true\nvalue = [{ device = \"/dev/vda\", rbps = 4096 }]\n",
    )
    .unwrap();
    let io = s.limits.io.as_ref().unwrap();
    assert!(!io.is_required());
    assert_eq!(io.get()[0].rbps, Some(ByteSize(4096)));
    // Unknown keys are refused at their own path.
    let err = crate::spec::parse_toml("[limits]\nio = [{ device = \"/dev/vda\", wbs = 1 }]\n")
        .unwrap_err();
    assert_eq!(err.path, "limits.io[0].wbs", "{err}");
    // Semantic errors name the entry's key.
    let mut s = crate::spec::default_profile();
    s.command = vec!["true".into()];
    let mut first = io_entry("/dev/vda");
    first.wbps = Some(ByteSize(1 << 20));
    s.limits.io = Some(Limit::Required(vec![first.clone(), io_entry("vdb")]));
    let err = crate::launch::validate(&s).unwrap_err();
    assert_eq!(err.path, "limits.io[1].device", "{err}");
    // A Spec round-trips through JSON (the form the library sends).
    s.limits.io = Some(Limit::preferred(vec![first]));
    let back = crate::spec::parse_json(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back.limits.io, s.limits.io);
}

/// An adopted cgroup (an OCI container's `cgroupsPath`): its counters and
/// limit events go to the report, but finish and drop leave the directory
/// to its owner (`hutch-oci delete`).
#[test]
fn an_adopted_cgroup_is_reported_and_left_to_its_owner() {
    let dir = std::env::temp_dir().join(format!("hutch-adopt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("memory.events"),
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
    )
    .unwrap();
    let fd: OwnedFd = std::fs::File::open(&dir).unwrap().into();
    let mut leaf = rlimits_only(&Limits::default()).unwrap();
    leaf.adopt(
        dir.clone(),
        fd,
        vec![Enforced {
            limit: "linux.resources.memory.limit".into(),
            value: json!("67108864"),
            by: "cgroup memory.max".into(),
        }],
    );
    assert!(leaf.cgroup_fd().is_some(), "the sandbox is cloned into it");
    assert_eq!(leaf.ended_by(), Some("oom-killed"));
    let report = leaf.finish();
    assert_eq!(report.cgroup.as_deref(), Some(dir.as_path()));
    assert_eq!(report.ended_by, Some("oom-killed"));
    assert!(report.enforced.iter().any(|e| e.by == "cgroup memory.max"));
    assert!(dir.exists(), "finish leaves an adopted cgroup alone");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A hybrid host whose controllers are in fake v1 hierarchies under the
/// fake root: memory, pids and a comounted cpu,cpuacct.
fn fake_v1_host(f: &Fake, uid: u32) -> HostCgroups {
    f.cgroup("unified", "hugetlb", "", "");
    let mut v1 = Vec::new();
    for (name, controllers) in [
        ("memory", vec!["memory"]),
        ("pids", vec!["pids"]),
        ("cpu,cpuacct", vec!["cpu", "cpuacct"]),
    ] {
        let mount = f.root.join("v1").join(name);
        std::fs::create_dir_all(&mount).unwrap();
        std::fs::write(mount.join("cgroup.procs"), "").unwrap();
        // The launcher moves itself through `tasks` (cgroup::v1).
        std::fs::write(mount.join("tasks"), "").unwrap();
        v1.push(host::V1Hierarchy {
            controllers: controllers.into_iter().map(String::from).collect(),
            own: Some(mount.clone()),
            mount,
        });
    }
    HostCgroups {
        layout: Layout::Hybrid,
        v2_mount: Some(f.root.join("unified")),
        own: Some(f.root.join("unified")),
        uid,
        v1,
    }
}

#[test]
fn hybrid_host_gets_a_leaf_in_each_v1_hierarchy_with_runcs_files() {
    use std::os::fd::AsFd;
    let f = Fake::new("");
    let host = fake_v1_host(&f, 0);
    let mem_leaf = "v1/memory/hutch/hutch-t1";
    // A leaf of a SIGKILLed supervisor (unlocked, empty) goes; a live
    // sandbox's (locked) stays.
    std::fs::create_dir_all(f.root.join("v1/memory/hutch/hutch-stale")).unwrap();
    std::fs::create_dir_all(f.root.join("v1/pids/hutch/hutch-live")).unwrap();
    let live = Cgroup::new(f.root.join("v1/pids/hutch/hutch-live"));
    let live_fd = live.open_dir().unwrap();
    assert!(crate::sys::flock_exclusive(live_fd.as_fd(), false).unwrap());
    let l = limits(
        Some(Limit::Required(G2)),
        Some(Limit::Required(64)),
        Some(Limit::Required(1.5)),
    );
    let p = prepare_on(&host, &l, "t1").expect("prepare");
    assert!(p.cgroup_fd().is_none(), "no CLONE_INTO_CGROUP on v1");
    assert_eq!(p.cgroup_dir(), Some(f.root.join(mem_leaf).as_path()));
    assert_eq!(
        f.read(&format!("{mem_leaf}/memory.limit_in_bytes")),
        "2147483648"
    );
    assert_eq!(f.read("v1/pids/hutch/hutch-t1/pids.max"), "64");
    // cpu and cpuacct share one leaf.
    assert_eq!(
        f.read("v1/cpu,cpuacct/hutch/hutch-t1/cpu.cfs_quota_us"),
        "150000"
    );
    assert_eq!(
        f.read("v1/cpu,cpuacct/hutch/hutch-t1/cpu.cfs_period_us"),
        "100000"
    );
    assert!(
        !f.root.join("v1/memory/hutch/hutch-stale").exists(),
        "swept"
    );
    assert!(live.dir.exists(), "a locked leaf is a live sandbox's");
    let by: Vec<(String, String)> = p
        .report()
        .enforced
        .iter()
        .map(|e| (e.limit.clone(), e.by.clone()))
        .collect();
    for (limit, mechanism) in [
        (
            "memory",
            "cgroup v1 memory.limit_in_bytes (no swap accounting)",
        ),
        ("pids", "cgroup v1 pids.max"),
        ("cpus", "cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us"),
    ] {
        assert!(by.contains(&(limit.into(), mechanism.into())), "{by:?}");
    }
    // The counters v1 keeps, and the ending they tell.
    let leaf_file = |rel: &str, text: &str| std::fs::write(f.root.join(rel), text).unwrap();
    leaf_file(
        &format!("{mem_leaf}/memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
    );
    leaf_file(&format!("{mem_leaf}/memory.max_usage_in_bytes"), "4096\n");
    leaf_file("v1/pids/hutch/hutch-t1/pids.events", "max 3\n");
    leaf_file("v1/cpu,cpuacct/hutch/hutch-t1/cpuacct.usage", "5000\n");
    let r = p.report();
    let stats = r.stats.expect("stats");
    assert_eq!(stats.oom_kill, Some(1));
    assert_eq!(stats.memory_peak, Some(4096));
    assert_eq!(stats.pids_max_events, Some(3));
    assert_eq!(stats.cpu_usage_usec, Some(5));
    assert_eq!(r.ended_by, Some("oom-killed"));
    drop(live_fd);
}

#[test]
fn v1_memory_with_swap_accounting_caps_memory_plus_swap() {
    let f = Fake::new("");
    // The kernel shows memsw in a memory group only with swap accounting.
    let leaf = f.root.join("leaf");
    std::fs::create_dir_all(&leaf).unwrap();
    std::fs::write(leaf.join("memory.memsw.limit_in_bytes"), "").unwrap();
    let l = limits(Some(Limit::Required(G2)), None, None);
    let by = v1::write_limit(&Cgroup::new(&leaf), "memory", &l, &[]).unwrap();
    assert_eq!(
        by,
        "cgroup v1 memory.limit_in_bytes, memory.memsw.limit_in_bytes (no swap)"
    );
    assert_eq!(f.read("leaf/memory.limit_in_bytes"), "2147483648");
    assert_eq!(f.read("leaf/memory.memsw.limit_in_bytes"), "2147483648");
}

/// A resident sandbox's command is reported from its own start: the
/// counters' differences, an event of an earlier command never names this
/// one's ending, and a peak only where it was reset for the command.
#[test]
fn a_resident_commands_counters_are_its_own() {
    let base = CgroupStats {
        memory_peak: Some(900 << 20),
        oom_kill: Some(1),
        pids_max_events: Some(2),
        cpu_usage_usec: Some(5_000),
        cpu_user_usec: Some(3_000),
        io_wbytes: Some(4096),
        pids_peak: Some(40),
        ..CgroupStats::default()
    };
    let now = CgroupStats {
        memory_peak: Some(100 << 20),
        oom_kill: Some(1),
        pids_max_events: Some(2),
        cpu_usage_usec: Some(7_500),
        cpu_user_usec: Some(4_000),
        io_wbytes: Some(8192),
        pids_peak: Some(40),
        ..CgroupStats::default()
    };
    let own = now.since(&base, true);
    assert_eq!(own.cpu_usage_usec, Some(2_500));
    assert_eq!(own.cpu_user_usec, Some(1_000));
    assert_eq!(own.io_wbytes, Some(4096));
    assert_eq!(own.oom_kill, Some(0));
    assert_eq!(own.ended_by(), None, "the earlier command's OOM kill");
    assert_eq!(own.memory_peak, Some(100 << 20));
    assert_eq!(own.pids_peak, None);
    assert_eq!(now.since(&base, false).memory_peak, None);
}
