use super::*;
use crate::oci::config::Config;

fn linux(json: serde_json::Value) -> Linux {
    let c: Config = serde_json::from_value(serde_json::json!({"linux": json})).unwrap();
    c.linux.unwrap()
}

fn files(p: &CgroupPlan) -> Vec<(&str, &str)> {
    p.writes
        .iter()
        .map(|w| (w.file.as_str(), w.value.as_str()))
        .collect()
}

#[test]
fn resources_become_cgroup_v2_files() {
    let l = linux(serde_json::json!({
        "cgroupsPath": "/machine/c1",
        "resources": {
            "memory": {"limit": 67108864, "reservation": 33554432, "swap": 134217728},
            "pids": {"limit": 32},
            "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0-1", "mems": "0"},
            "blockIO": {"weight": 500,
                        "throttleWriteBpsDevice": [{"major": 8, "minor": 0, "rate": 1048576}]},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 0}],
            "unified": {"memory.high": "50000000", "memory.oom.group": "1"}
        }
    }));
    let p = plan(&l, "c1", false).unwrap().unwrap();
    assert_eq!(p.path, Path::new("machine/c1"));
    let f = files(&p);
    for want in [
        ("memory.max", "67108864"),
        ("memory.low", "33554432"),
        // OCI swap is memory+swap.
        ("memory.swap.max", "67108864"),
        ("pids.max", "32"),
        ("cpu.weight", "59"),
        ("cpu.max", "50000 100000"),
        ("cpuset.cpus", "0-1"),
        ("cpuset.mems", "0"),
        ("io.weight", "default 4950"),
        ("io.max", "8:0 wbps=1048576"),
        ("hugetlb.2MB.max", "0"),
        ("memory.high", "50000000"),
        ("memory.oom.group", "1"),
    ] {
        assert!(f.contains(&want), "{want:?} in {f:?}");
    }
    // Keys name the config property, for the errors.
    let w = p.writes.iter().find(|w| w.file == "pids.max").unwrap();
    assert_eq!(w.key, "linux.resources.pids.limit");
}

#[test]
fn crun_share_conversion() {
    assert_eq!(shares_to_weight(2), 1);
    assert_eq!(shares_to_weight(1024), 100);
    assert_eq!(shares_to_weight(262_144), 10_000);
    assert_eq!(shares_to_weight(u64::MAX), 10_000);
    assert!(shares_to_weight(512) < 100 && shares_to_weight(2048) > 100);
    assert_eq!(blkio_to_io_weight(10), 1);
    assert_eq!(blkio_to_io_weight(1000), 10_000);
}

#[test]
fn no_limit_means_no_cgroup() {
    for r in [
        serde_json::json!({}),
        serde_json::json!({"pids": {"limit": 0}}),
        serde_json::json!({"pids": {"limit": -1}, "memory": {"limit": -1, "swap": -1}}),
        serde_json::json!({"cpu": {"shares": 1024, "quota": -1, "period": 100000}}),
        serde_json::json!({"devices": [{"allow": false, "access": "rwm"}]}),
    ] {
        let l = linux(serde_json::json!({"resources": r}));
        assert_eq!(plan(&l, "c", false).unwrap(), None, "{r}");
    }
}

#[test]
fn cgroups_paths() {
    let p = |given: Option<&str>, systemd| cgroup_path(given, "cid", systemd);
    assert_eq!(p(None, false).unwrap(), Path::new("cid"));
    assert_eq!(p(Some("a/b"), false).unwrap(), Path::new("a/b"));
    assert_eq!(p(Some("/a/./b/"), false).unwrap(), Path::new("a/b"));
    // systemd's form, as systemd would lay it out (crun without systemd).
    assert_eq!(
        p(Some("machine.slice:libpod:abc"), true).unwrap(),
        Path::new("machine.slice/libpod-abc.scope")
    );
    assert_eq!(
        p(Some("user-1000.slice:crio:x"), true).unwrap(),
        Path::new("user.slice/user-1000.slice/crio-x.scope")
    );
    assert_eq!(
        p(Some(":runc:x"), true).unwrap(),
        Path::new("system.slice/runc-x.scope")
    );
    assert_eq!(
        p(Some("-.slice::x.scope"), true).unwrap(),
        Path::new("x.scope")
    );
    for (given, systemd, want) in [
        ("/a/../../etc", false, "`..`"),
        ("../x", false, "`..`"),
        ("/", false, "cgroup2 root"),
        ("/a/cgroup.procs", false, "cannot name a cgroup"),
        ("machine.slice:libpod:abc", false, "--systemd-cgroup"),
        ("machine.slice:abc", true, "slice:prefix:name"),
        ("notaslice:p:n", true, "not a systemd slice"),
        ("a--b.slice:p:n", true, "not a systemd slice"),
        ("machine.slice:p:../x", true, "`/`"),
        ("a\nb", false, "not a usable path"),
    ] {
        let e = p(Some(given), systemd).unwrap_err().to_string();
        assert!(
            e.starts_with("config.json: linux.cgroupsPath:"),
            "{given}: {e}"
        );
        assert!(e.contains(want), "{given}: {e}");
    }
}

#[test]
fn hostile_values_are_refused_by_key() {
    for (r, key) in [
        (
            serde_json::json!({"memory": {"limit": 100}}),
            "linux.resources.memory.limit",
        ),
        (
            serde_json::json!({"memory": {"limit": -5}}),
            "linux.resources.memory.limit",
        ),
        (
            serde_json::json!({"memory": {"limit": 67108864, "swap": 1048576}}),
            "linux.resources.memory.swap",
        ),
        (
            serde_json::json!({"memory": {"swap": 67108864}}),
            "linux.resources.memory.swap",
        ),
        (
            serde_json::json!({"memory": {"kernel": 67108864}}),
            "linux.resources.memory.kernel",
        ),
        (
            serde_json::json!({"memory": {"disableOOMKiller": true}}),
            "linux.resources.memory.disableOOMKiller",
        ),
        (
            serde_json::json!({"pids": {"limit": 99999999999i64}}),
            "linux.resources.pids.limit",
        ),
        (
            serde_json::json!({"pids": {"limit": -7}}),
            "linux.resources.pids.limit",
        ),
        (
            serde_json::json!({"cpu": {"quota": 10}}),
            "linux.resources.cpu.quota",
        ),
        (
            serde_json::json!({"cpu": {"quota": -9}}),
            "linux.resources.cpu.quota",
        ),
        (
            serde_json::json!({"cpu": {"quota": 5000, "period": 1}}),
            "linux.resources.cpu.period",
        ),
        (
            serde_json::json!({"cpu": {"cpus": "0-3; rm -rf /"}}),
            "linux.resources.cpu.cpus",
        ),
        (
            serde_json::json!({"cpu": {"mems": "1-"}}),
            "linux.resources.cpu.mems",
        ),
        (
            serde_json::json!({"cpu": {"realtimeRuntime": 5}}),
            "linux.resources.cpu.realtimeRuntime",
        ),
        (
            serde_json::json!({"blockIO": {"weight": 5000}}),
            "linux.resources.blockIO.weight",
        ),
        (
            serde_json::json!({"hugepageLimits": [{"pageSize": "../x", "limit": 1}]}),
            "linux.resources.hugepageLimits[0].pageSize",
        ),
        (
            serde_json::json!({"unified": {"cgroup.procs": "1"}}),
            "linux.resources.unified.cgroup.procs",
        ),
        (
            serde_json::json!({"unified": {"cgroup.subtree_control": "+memory"}}),
            "linux.resources.unified.cgroup.subtree_control",
        ),
        (
            serde_json::json!({"unified": {"memory/../x": "1"}}),
            "linux.resources.unified.memory/../x",
        ),
        (
            serde_json::json!({"unified": {"bogus.max": "1"}}),
            "linux.resources.unified.bogus.max",
        ),
        (
            serde_json::json!({"unified": {"memory": "1"}}),
            "linux.resources.unified.memory",
        ),
        (
            serde_json::json!({"unified": {"memory.high": "1\nmax"}}),
            "linux.resources.unified.memory.high",
        ),
        (
            serde_json::json!({"network": {"classID": 1}}),
            "linux.resources.network",
        ),
    ] {
        let l = linux(serde_json::json!({"resources": r}));
        let e = plan(&l, "c", false).unwrap_err().to_string();
        assert!(e.contains(key), "{r}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

/// A fake cgroup2 mount (a plain directory: tree.rs's writes create
/// files), as HostCgroups would describe it.
fn fake_host(dir: &Path, controllers: &str, layout: Layout) -> HostCgroups {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("cgroup.controllers"), controllers).unwrap();
    HostCgroups {
        layout,
        v2_mount: Some(dir.to_path_buf()),
        own: Some(dir.to_path_buf()),
        uid: 0,
        v1: Vec::new(),
    }
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hutch-oci-res-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_host_without_the_controller_fails_with_one_line_and_touches_nothing() {
    let d = tmp("hybrid");
    let host = fake_host(&d, "", Layout::Hybrid);
    let l =
        linux(serde_json::json!({"cgroupsPath": "/x/c", "resources": {"pids": {"limit": 2048}}}));
    let p = plan(&l, "c", false).unwrap().unwrap();
    let e = apply(&host, &p).unwrap_err().to_string();
    assert!(e.starts_with("config.json: linux.resources.pids.limit: cannot be enforced: cgroup v2 pids controller not available (hybrid v1 layout"), "{e}");
    assert!(e.contains("--pids-limit 0"), "{e}");
    assert!(!e.contains('\n'));
    assert!(!d.join("x").exists(), "nothing made");
    // A controller the hybrid host's cgroup2 tree does offer is refused
    // too: that tree is not the host's hierarchy.
    let host = fake_host(&d, "hugetlb", Layout::Hybrid);
    let l = linux(serde_json::json!({"cgroupsPath": "/x/c",
        "resources": {"hugepageLimits": [{"pageSize": "2MB", "limit": 0}]}}));
    let p = plan(&l, "c", false).unwrap().unwrap();
    let e = apply(&host, &p).unwrap_err().to_string();
    assert!(e.contains("hugepageLimits[0]: cannot be enforced"), "{e}");
    assert!(e.contains("only a unified cgroup v2 host is used"), "{e}");
    assert!(!d.join("x").exists(), "nothing made");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn apply_enables_controllers_down_the_path_and_remove_undoes_it() {
    let d = tmp("apply");
    let host = fake_host(&d, "cpu memory pids", Layout::Unified);
    let l = linux(serde_json::json!({"cgroupsPath": "/pod/c", "resources": {
        "pids": {"limit": 16}, "memory": {"limit": 67108864}}}));
    let p = plan(&l, "c", false).unwrap().unwrap();
    // The fake tree has no interface files: the kernel's would exist.
    let e = apply(&host, &p).unwrap_err().to_string();
    assert!(e.contains("is not an interface file of this kernel"), "{e}");
    // (The fake parent keeps its written subtree_control; cgroupfs would not.)
    assert!(!d.join("pod/c").exists(), "what was made is removed");
    // With the files present (as the kernel makes them in a new cgroup).
    std::fs::create_dir_all(d.join("pod/c")).unwrap();
    for f in ["pids.max", "memory.max"] {
        std::fs::write(d.join("pod/c").join(f), "max").unwrap();
    }
    let a = apply(&host, &p).unwrap();
    assert_eq!(a.dir, d.join("pod/c"));
    assert!(a.made.is_empty(), "both existed");
    assert_eq!(
        std::fs::read_to_string(d.join("pod/c/pids.max")).unwrap(),
        "16"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("pod/c/memory.max")).unwrap(),
        "67108864"
    );
    let sub = std::fs::read_to_string(d.join("cgroup.subtree_control")).unwrap();
    assert!(sub.starts_with('+'), "{sub}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn resources_become_runcs_cgroup_v1_files_in_order() {
    let l = linux(serde_json::json!({
        "resources": {
            "memory": {"limit": 67108864, "reservation": 33554432, "swap": 134217728,
                       "swappiness": 10, "disableOOMKiller": true},
            "pids": {"limit": 32},
            "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0-1",
                    "realtimeRuntime": 950000, "realtimePeriod": 1000000},
            "blockIO": {"weight": 500,
                        "throttleWriteBpsDevice": [{"major": 8, "minor": 0, "rate": 1048576}],
                        "throttleReadIOPSDevice": [{"major": 8, "minor": 0, "rate": 0}]},
            "hugepageLimits": [{"pageSize": "2MB", "limit": 0}]
        }
    }));
    let w = v1::writes(l.resources.as_ref().unwrap()).unwrap();
    let got: Vec<(&str, &str)> = w
        .iter()
        .map(|w| (w.file.as_str(), w.value.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("cpuset.cpus", "0-1"),
            ("cpu.shares", "512"),
            ("cpu.cfs_period_us", "100000"),
            ("cpu.cfs_quota_us", "50000"),
            // The limit before memory+swap (the kernel wants memsw >= it).
            ("memory.limit_in_bytes", "67108864"),
            ("memory.soft_limit_in_bytes", "33554432"),
            ("memory.memsw.limit_in_bytes", "134217728"),
            ("pids.max", "32"),
            ("blkio.weight", "500"),
            ("blkio.throttle.write_bps_device", "8:0 1048576"),
            ("blkio.throttle.read_iops_device", "8:0 0"),
            ("hugetlb.2MB.limit_in_bytes", "0"),
            ("memory.swappiness", "10"),
            ("memory.oom_control", "1"),
            ("cpu.rt_period_us", "1000000"),
            ("cpu.rt_runtime_us", "950000"),
        ]
    );
    // Values are checked as on v2; unified keys are v2 files.
    let bad = |json: serde_json::Value| {
        let l = linux(serde_json::json!({ "resources": json }));
        v1::writes(l.resources.as_ref().unwrap())
            .unwrap_err()
            .to_string()
    };
    assert!(bad(serde_json::json!({"pids": {"limit": -5}})).contains("linux.resources.pids.limit"));
    assert!(
        bad(serde_json::json!({"unified": {"memory.high": "1"}}))
            .contains("linux.resources.unified.memory.high: unified keys are cgroup v2 files")
    );
}
