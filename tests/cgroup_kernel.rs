//! The cgroup module against a real cgroup v2 kernel: leaf creation in a
//! delegated tree, limits written, OOM and pids events reported, kill and
//! removal, and the RLIMIT_NPROC fallback's per-user-namespace accounting.
//!
//! Needs a delegated cgroup v2 tree (or root in the root cgroup): the
//! kernel-VM harness (tests/kernel/run) runs it as root and as an
//! unprivileged user, with HUTCH_REQUIRE=all, where a skip is a failure.
//! It is not part of `cargo nextest run` (`test = false` in Cargo.toml:
//! a host without such a tree, hybrid v1 like our CI machine, could only
//! skip it); `cargo test --test cgroup_kernel` builds and runs it on
//! purpose.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use hutch::internals::cgroup::{self, host::HostCgroups, plan};
use hutch::spec::{ByteSize, Limit, Limits};

/// Why there is no delegated cgroup v2 tree where memory, pids and cpu
/// can be had, or None when there is one.
fn undelegated() -> Option<String> {
    let host = HostCgroups::detect();
    match plan::find_place(&host, None) {
        Ok(place) => ["memory", "pids", "cpu"]
            .iter()
            .find_map(|c| plan::controller_status(&host, &place, c).err())
            .map(|e| format!("{e:?}")),
        Err(np) => Some(format!("{:?}", np.found)),
    }
}

/// Skip (fail under HUTCH_REQUIRE=all) without a delegated tree.
macro_rules! require_delegated {
    () => {
        let why = undelegated();
        require!(
            why.is_none(),
            format!("no delegated cgroup v2 tree: {why:?} (tests/kernel/run has one)")
        );
    };
}

fn id(name: &str) -> String {
    format!("t{}-{name}", std::process::id())
}

/// Re-run this test binary as a helper process (see `role_entry`), stopped
/// until we write a line to its stdin, so it can be moved into the leaf
/// first.
fn helper(role: &str, arg: &str) -> Child {
    helper_via(&[], role, arg)
}

/// [`helper`] started through `wrapper` (e.g. `unshare -U`).
fn helper_via(wrapper: &[&str], role: &str, arg: &str) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.args(["--exact", "role_entry", "--nocapture", "--test-threads=1"])
        .env("HUTCH_CGTEST_ROLE", role)
        .env("HUTCH_CGTEST_ARG", arg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn join_and_go(child: &mut Child, leaf: &Path) {
    std::fs::write(leaf.join("cgroup.procs"), child.id().to_string()).unwrap();
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
}

fn output_line(child: &mut Child, prefix: &str) -> String {
    let out = BufReader::new(child.stdout.take().unwrap());
    out.lines()
        .map_while(Result::ok)
        .find_map(|l| l.find(prefix).map(|i| l[i..].to_string()))
        .unwrap_or_default()
}

#[test]
fn leaf_gets_limits_and_is_removed() {
    require_delegated!();
    let mut limits = Limits::default();
    limits.memory = Some(Limit::Required(ByteSize(64 << 20)));
    limits.pids = Some(Limit::Required(16));
    limits.cpus = Some(Limit::Required(0.5));
    let p = cgroup::prepare(&limits, &id("limits")).unwrap();
    let leaf = p.cgroup_dir().unwrap().to_path_buf();
    let read = |f: &str| std::fs::read_to_string(leaf.join(f)).unwrap();
    assert_eq!(read("memory.max").trim(), (64u64 << 20).to_string());
    assert_eq!(read("memory.swap.max").trim(), "0");
    assert_eq!(read("memory.oom.group").trim(), "1");
    assert_eq!(read("pids.max").trim(), "16");
    assert_eq!(read("cpu.max").trim(), "50000 100000");
    assert!(p.cgroup_fd().is_some());
    assert!(
        !p.rlimits()
            .iter()
            .any(|(r, _)| *r == libc::RLIMIT_NPROC as i32)
    );
    let r = p.finish();
    assert_eq!(
        r.enforced
            .iter()
            .filter(|e| e.by.starts_with("cgroup"))
            .count(),
        3
    );
    assert!(r.cleanup_error.is_none(), "{:?}", r.cleanup_error);
    assert!(!leaf.exists(), "leaf left behind");
}

#[test]
fn memory_cap_oom_kills_and_is_reported() {
    require_delegated!();
    let mut limits = Limits::default();
    limits.memory = Some(Limit::Required(ByteSize(64 << 20)));
    let p = cgroup::prepare(&limits, &id("oom")).unwrap();
    let mut child = helper("memhog", "256");
    join_and_go(&mut child, p.cgroup_dir().unwrap());
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert_eq!(p.ended_by(), Some("oom-killed"));
    let r = p.finish();
    let s = r.stats.unwrap();
    assert!(s.oom_kill.unwrap() >= 1);
    let peak = s.memory_peak.unwrap();
    assert!(peak > 32 << 20 && peak <= 64 << 20, "peak {peak}");
    assert_eq!(r.ended_by, Some("oom-killed"));
}

#[test]
fn pids_cap_refuses_forks_and_is_reported() {
    require_delegated!();
    let mut limits = Limits::default();
    limits.pids = Some(Limit::Required(8));
    let p = cgroup::prepare(&limits, &id("pids")).unwrap();
    let mut child = helper("spawn", "30");
    join_and_go(&mut child, p.cgroup_dir().unwrap());
    let line = output_line(&mut child, "spawned");
    child.wait().unwrap();
    let failed: u32 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(failed >= 20, "{line}");
    assert_eq!(p.ended_by(), Some("pids-limit-hit"));
    let r = p.finish();
    assert!(r.stats.unwrap().pids_max_events.unwrap() >= 1);
}

#[test]
fn finish_kills_escaped_daemons_and_removes_the_leaf() {
    require_delegated!();
    let p = cgroup::prepare(&Limits::default(), &id("kill")).unwrap();
    let leaf = p.cgroup_dir().unwrap().to_path_buf();
    let mut child = helper("detach", "");
    join_and_go(&mut child, &leaf);
    let line = output_line(&mut child, "detached");
    child.wait().unwrap();
    let pid: i32 = line.rsplit(' ').next().unwrap().parse().unwrap();
    let procs = std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap();
    assert!(
        procs.split_whitespace().any(|p| p == pid.to_string()),
        "{procs}"
    );
    let r = p.finish();
    assert!(r.cleanup_error.is_none(), "{:?}", r.cleanup_error);
    assert!(!leaf.exists());
    // Gone, or a zombie waiting for the VM's init to reap it.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().unwrap_or("").trim().chars().next();
    assert!(matches!(state, None | Some('Z') | Some('X')), "{stat}");
}

/// The fallback's premise: inside a new user namespace RLIMIT_NPROC counts
/// only that namespace's processes (Linux >= 5.14), yet still binds there.
#[test]
fn nproc_counts_only_the_user_namespace() {
    let mut child = helper("nproc", "");
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let line = output_line(&mut child, "nproc ");
    let status = child.wait().unwrap();
    assert!(status.success(), "{line}");
    // "nproc plain: limited first_failed A more_failed B; userns: limited ..."
    let (plain, in_ns) = line.split_once("; userns: ").expect(&line);
    let nums = |s: &str| -> Vec<u32> { s.split(' ').filter_map(|w| w.parse().ok()).collect() };
    let (plain, in_ns) = (nums(plain), nums(in_ns));
    require!(in_ns.len() == 2, format!("unshare -U did not run: {line}"));
    assert_eq!(plain.len(), 2, "{line}");
    assert_eq!(
        plain[0], 5,
        "without a user namespace the 12 other processes should count: {line}"
    );
    assert_eq!(
        in_ns[0], 0,
        "host processes of the same uid were counted in the namespace: {line}"
    );
    assert!(
        in_ns[1] > 0,
        "the limit did not bind inside the namespace: {line}"
    );
}

/// Not a test: the entry point of the helper processes above (libtest can
/// only start a process in a test function). The kernel-VM suite runs this
/// binary with `--skip role_entry`, so it is not counted as a passing test.
#[test]
fn role_entry() {
    let Ok(role) = std::env::var("HUTCH_CGTEST_ROLE") else {
        return;
    };
    let arg = std::env::var("HUTCH_CGTEST_ARG").unwrap_or_default();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let n: usize = arg.parse().unwrap_or(0);
    match role.as_str() {
        "memhog" => {
            let mut v: Vec<Vec<u8>> = Vec::new();
            for _ in 0..n {
                v.push(vec![1u8; 1 << 20]);
            }
            println!("survived {}", v.len());
        }
        "spawn" => {
            let mut kids = Vec::new();
            let mut failed = 0;
            for _ in 0..n {
                match Command::new("sleep").arg("2").spawn() {
                    Ok(c) => kids.push(c),
                    Err(_) => failed += 1,
                }
            }
            println!("spawned {} failed {failed}", kids.len());
            for mut k in kids {
                let _ = k.wait();
            }
        }
        "detach" => {
            let c = Command::new("sleep").arg("1000").spawn().unwrap();
            println!("detached {}", c.id());
            std::mem::forget(c);
        }
        "nproc" => nproc_role(),
        "nproc-limited" => nproc_limited_role(),
        _ => panic!("unknown role {role}"),
    }
    std::process::exit(0);
}

fn spawn_sleeps(n: usize) -> (Vec<Child>, usize) {
    let mut kids = Vec::new();
    let mut failed = 0;
    for _ in 0..n {
        match Command::new("sleep").arg("20").spawn() {
            Ok(c) => kids.push(c),
            Err(_) => failed += 1,
        }
    }
    (kids, failed)
}

fn reap(kids: &mut [Child]) {
    for c in kids {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// RLIMIT_NPROC=10, then 5 and 12 more forks. Prints how many of each
/// failed. Run plain (this uid's other processes count) and under
/// `unshare -U` (the limit is set after the user namespace exists, as
/// hutch does in the sandbox).
fn nproc_limited_role() {
    use nix::sys::resource::{Resource, setrlimit};
    setrlimit(Resource::RLIMIT_NPROC, 10, 10).unwrap();
    let (mut first, f1) = spawn_sleeps(5);
    let (mut more, f2) = spawn_sleeps(12);
    println!("limited first_failed {f1} more_failed {f2}");
    reap(&mut first);
    reap(&mut more);
}

fn nproc_role() {
    use nix::unistd::{Gid, Uid, getuid, setgid, setgroups, setuid};
    if getuid().is_root() {
        // root is exempt from RLIMIT_NPROC: test as nobody.
        setgroups(&[]).unwrap();
        setgid(Gid::from_raw(65534)).unwrap();
        setuid(Uid::from_raw(65534)).unwrap();
    }
    // 12 processes of this uid outside any new namespace.
    let (mut host_kids, f) = spawn_sleeps(12);
    assert_eq!(f, 0);
    let run = |wrapper: &[&str]| {
        let mut sub = helper_via(wrapper, "nproc-limited", "");
        let _ = writeln!(sub.stdin.as_mut().unwrap(), "go");
        let line = output_line(&mut sub, "limited");
        let _ = sub.wait();
        line
    };
    let plain = run(&[]);
    let in_ns = run(&["unshare", "-U"]);
    println!("nproc plain: {plain}; userns: {in_ns}");
    reap(&mut host_kids);
}

/// Cost of the leaf's life cycle (prepare: mkdir + limits + open; finish:
/// counters + rmdir), printed as a BENCH line for the VM harness. Fails
/// only when a round leaves its leaf behind.
#[test]
fn leaf_lifecycle_cost() {
    require_delegated!();
    let mut limits = Limits::default();
    limits.pids = Some(Limit::Required(1000));
    limits.cpus = Some(Limit::Required(2.0));
    let n = 20;
    let (mut prep, mut fin) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    for i in 0..n {
        let t0 = std::time::Instant::now();
        let p = cgroup::prepare(&limits, &id(&format!("bench{i}"))).unwrap();
        let leaf = p.cgroup_dir().unwrap().to_path_buf();
        let t1 = std::time::Instant::now();
        let r = p.finish();
        fin += t1.elapsed();
        prep += t1 - t0;
        assert!(r.cleanup_error.is_none() && !leaf.exists());
    }
    println!(
        "\nBENCH leaf_lifecycle uid={} prepare_us={} finish_us={}",
        nix::unistd::getuid(),
        prep.as_micros() / n,
        fin.as_micros() / n
    );
}
