//! Confinement through `hutch run`: the syscall matrix inside the sandbox,
//! foreign ABIs killed, nested user namespaces, Landlock with and without
//! the host network, the ABI floor, real workloads, and the strict and log
//! profiles.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::is_root;

fn hutch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hutch"))
}

/// A fresh workspace directory (the sandbox sees it as its cwd).
fn workspace(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hutch-confine-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compile tests/programs/NAME.c into `dir`.
fn compile(name: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(["-O1", "-Wall", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(st.success(), "compiling {}", src.display());
    out
}

/// `hutch run [args] -- cmd...` in `dir`, stdin closed, quiet.
fn run_in(dir: &Path, args: &[&str], cmd: &[&str]) -> Output {
    hutch()
        .current_dir(dir)
        .arg("run")
        .arg("--quiet")
        .args(args)
        .arg("--")
        .args(cmd)
        .stdin(Stdio::null())
        .output()
        .expect("hutch runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn matrix(out: &Output) -> BTreeMap<String, i32> {
    matrix_of(&text(&out.stdout))
}

/// The `NAME ERRNO` lines of the syscall matrix in `text`.
fn matrix_of(text: &str) -> BTreeMap<String, i32> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// What `tests/programs/syscall_matrix` prints under the default seccomp
/// profile: each call's errno (0: allowed).
fn default_matrix() -> BTreeMap<String, i32> {
    let eperm = [
        "unshare",
        "setns",
        "clone_newuser",
        "clone_newns",
        "clone_newnet",
        "clone_newuser_high",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "open_by_handle_at",
        "add_key",
        "keyctl",
        "request_key",
        "bpf",
        "perf_event_open",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "syslog",
        "acct",
        "quotactl",
        "swapon",
        "swapoff",
        "reboot",
        "iopl",
        "ioperm",
        "uselib",
        "userfaultfd",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "kcmp",
        "pidfd_getfd",
        "mbind",
        "set_mempolicy",
        "migrate_pages",
        "move_pages",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "personality_addr_no_randomize",
        "personality_high",
        "ioctl_tiocsti",
        "ioctl_tiocsti_high",
        "ioctl_tioclinux",
    ];
    let enosys = [
        "clone3",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "fsopen",
        "open_tree",
        "move_mount",
        "mount_setattr",
    ];
    let eafnosupport = [
        "socket_vsock",
        "socket_packet",
        "socket_alg",
        "socket_vsock_high",
    ];
    let mut want: BTreeMap<String, i32> = BTreeMap::new();
    want.extend(eperm.iter().map(|n| (n.to_string(), libc::EPERM)));
    want.extend(enosys.iter().map(|n| (n.to_string(), libc::ENOSYS)));
    want.extend(
        eafnosupport
            .iter()
            .map(|n| (n.to_string(), libc::EAFNOSUPPORT)),
    );
    want.insert("socket_unix".into(), 0);
    want.insert("socket_inet".into(), 0);
    want
}

#[test]
fn syscall_matrix_under_default() {
    let ws = workspace("matrix");
    compile("syscall_matrix", &ws);
    let out = run_in(&ws, &[], &["./syscall_matrix"]);
    assert_ok(&out, "matrix under default");
    let got = matrix(&out);
    let want = default_matrix();
    assert_eq!(got, want);

    // Unconfined, the same calls reach the kernel (different errnos or
    // success): the errnos above are the filter's, not a missing capability's.
    let out = run_in(&ws, &["--seccomp", "unconfined"], &["./syscall_matrix"]);
    assert_ok(&out, "matrix unconfined");
    let raw = matrix(&out);
    for name in [
        "setns",
        "clone_newuser",
        "clone_newuser_high",
        "open_by_handle_at",
        "bpf",
        "clone3",
        "io_uring_setup",
        "socket_vsock",
        "socket_vsock_high",
        "personality_high",
        "ioctl_tiocsti",
    ] {
        assert_ne!(
            raw.get(name),
            want.get(name),
            "{name} is not decided by the filter"
        );
    }
    std::fs::remove_dir_all(&ws).unwrap();
}

/// The unprivileged path (uid 65534 when the tests run as root, else the
/// current user): what the workload itself observes of its confinement.
/// Capabilities and no-new-privs from /proc/self/status; seccomp from the
/// status line and the syscall matrix; Landlock from a TCP bind and a
/// signal to pid 1 (outside the workload's domain), both of which work in
/// the same sandbox with Landlock disabled; and the exit report agrees.
#[test]
fn confinement_observed_from_inside_on_the_unprivileged_path() {
    let who = common::As::Nobody;
    require!(
        common::can_launch_as(who).is_ok(),
        common::can_launch_as(who).unwrap_err()
    );
    require!(
        hutch::internals::sys::landlock_abi_version() >= 6,
        "Landlock ABI 6 (TCP rules, signal scoping) not available"
    );
    let ws = common::TempDir::new("confine-unpriv", who);
    compile("syscall_matrix", ws.path());
    let status = ws.path().join("status.jsonl");
    let no_landlock = ws.path().join("no-landlock.json");
    let mut spec = hutch::spec::default_profile();
    spec.security.landlock.enabled = false;
    common::write_as(&no_landlock, &serde_json::to_string(&spec).unwrap(), who);
    let probe = r#"
id -u
grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status
python3 -c '
import errno, socket
try:
    socket.socket().bind(("127.0.0.1", 0)); print("tcp-bind: ok")
except OSError as e:
    print("tcp-bind:", errno.errorcode[e.errno])
'
if kill -0 1 2>/dev/null; then echo "signal-pid1: ok"; else echo "signal-pid1: denied"; fi
"#;
    let run = |args: &[&str], script: &str| {
        let out = common::hutch_command(who)
            .current_dir(ws.path())
            .arg("run")
            .arg("--quiet")
            .args(args)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("hutch runs");
        assert_ok(&out, &format!("{who:?} {args:?}"));
        text(&out.stdout)
    };
    let seen = run(
        &["--status-file", status.to_str().unwrap()],
        &format!("{probe}./syscall_matrix"),
    );
    let mut lines = seen.lines();
    let uid = lines.next().unwrap_or("").to_string();
    let expected_uid = if who.drops_to_nobody() {
        common::NOBODY
    } else {
        nix::unistd::geteuid().as_raw()
    };
    assert_eq!(uid, expected_uid.to_string(), "{seen}");
    let rest: Vec<&str> = lines.collect();
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            rest.contains(&format!("{cap}:\t0000000000000000").as_str()),
            "{cap} not empty:\n{seen}"
        );
    }
    for line in [
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        // A network namespace of its own: TCP is left to it.
        "tcp-bind: ok",
        "signal-pid1: denied",
    ] {
        assert!(rest.contains(&line), "no {line:?} in:\n{seen}");
    }
    assert_eq!(
        matrix_of(&seen),
        default_matrix(),
        "the syscall matrix as {who:?}"
    );
    let report = common::exit_report(&status);
    let c = &report["enforced"]["confinement"];
    assert_eq!(c["seccomp"]["profile"], "default", "{report}");
    assert_eq!(c["seccomp"]["enforced"], true, "{report}");
    assert_eq!(c["landlock"]["tcp"], "own-namespace", "{report}");
    assert!(
        c["landlock"]["enforced_abi"].as_u64() >= Some(6),
        "{report}"
    );
    assert_eq!(
        report["enforced"]["capabilities"],
        serde_json::json!([]),
        "{report}"
    );

    // The same sandbox without Landlock: the signal was Landlock's.
    let seen = run(&["--profile", no_landlock.to_str().unwrap()], probe);
    assert!(
        seen.contains("tcp-bind: ok") && seen.contains("signal-pid1: ok"),
        "without Landlock:\n{seen}"
    );
}

#[test]
fn tiocsti_on_an_inherited_terminal_is_denied() {
    // SAFETY: plain pty allocation; the fds are owned below.
    let (master, slave) = unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(m)).to_owned();
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        assert!(s >= 0);
        use std::os::fd::FromRawFd;
        (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s))
    };
    let ws = workspace("tiocsti");
    compile("syscall_matrix", &ws);
    let out = hutch()
        .current_dir(&ws)
        .args(["run", "--quiet", "--", "./syscall_matrix"])
        .stdin(Stdio::from(slave))
        .output()
        .unwrap();
    assert_ok(&out, "matrix with a terminal on stdin");
    let got = matrix(&out);
    assert_eq!(got["ioctl_tiocsti"], libc::EPERM);
    assert_eq!(got["ioctl_tiocsti_high"], libc::EPERM);
    drop(master);
    std::fs::remove_dir_all(&ws).unwrap();
}

#[test]
fn int80_and_x32_are_killed() {
    let ws = workspace("abi");
    compile("abi_escape", &ws);
    for how in ["int80", "x32"] {
        let out = run_in(&ws, &[], &["./abi_escape", how]);
        assert_eq!(
            out.status.code(),
            Some(128 + libc::SIGSYS),
            "{how}: {out:?}"
        );
        assert!(!text(&out.stdout).contains("survived"), "{how}");
    }
    // Unconfined, the same program survives (the kill is the filter's).
    for how in ["int80", "x32"] {
        let out = run_in(&ws, &["--seccomp", "unconfined"], &["./abi_escape", how]);
        assert_ok(&out, how);
        assert!(text(&out.stdout).contains("survived"), "{how}");
    }
    std::fs::remove_dir_all(&ws).unwrap();
}

#[test]
fn nested_user_namespaces_fail_also_unconfined() {
    let ws = workspace("userns");
    for profile in ["default", "unconfined"] {
        let out = run_in(&ws, &["--seccomp", profile], &["unshare", "-U", "true"]);
        assert!(
            !out.status.success(),
            "unshare -U succeeded under {profile}"
        );
        assert_eq!(out.status.code(), Some(1), "{profile}: {out:?}");
        assert!(text(&out.stderr).contains("unshare failed"), "{profile}");
    }
    std::fs::remove_dir_all(&ws).unwrap();
}

#[test]
fn landlock_with_host_network() {
    require!(
        hutch::internals::sys::landlock_abi_version() >= 6,
        "Landlock ABI 6 not available"
    );
    use std::os::linux::net::SocketAddrExt;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let name = format!("hutch-e2e-abstract-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _unix = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let ws = workspace("sharenet");
    let script = format!(
        r#"
import errno, os, socket
s = socket.create_connection(("127.0.0.1", {port}))
print("tcp ok")
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    u.connect("\0{name}")
    print("abstract connected")
except OSError as e:
    print("abstract", errno.errorcode[e.errno])
try:
    os.kill({outside}, 0)
    print("signal delivered")
except OSError as e:
    print("signal", errno.errorcode[e.errno])
"#,
        outside = std::process::id()
    );
    let out = run_in(&ws, &["--share-net"], &["python3", "-c", &script]);
    assert_ok(&out, "share-net script");
    let o = text(&out.stdout);
    assert!(o.contains("tcp ok"), "{o}");
    assert!(o.contains("abstract EPERM"), "{o}");
    assert!(o.contains("signal E"), "{o}");
    assert!(!o.contains("delivered") && !o.contains("connected"), "{o}");

    drop(listener);
    std::fs::remove_dir_all(&ws).unwrap();
}

/// A test suite's local server works on the sandbox's own loopback in
/// every network mode (bind, listen, connect, accept), and a sandbox on
/// the host's network cannot bind (a listener there would be the host's).
/// Failed on the code before this change: the bind was EACCES from
/// Landlock's default TCP rules in every mode, and allowed with
/// --share-net.
#[test]
fn a_local_server_works_on_the_sandboxs_own_loopback() {
    require!(
        hutch::internals::sys::landlock_abi_version() >= 4,
        "Landlock ABI 4 (TCP rules) not available"
    );
    let server = "import socket\n\
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n\
c = socket.create_connection(s.getsockname()); a, _ = s.accept()\n\
c.sendall(b'x'); print('served', a.recv(1).decode())";
    for who in common::identities() {
        let ws = common::TempDir::new("own-loopback", who);
        for mode in [
            &[][..],
            &["--allow-host", "example.com"],
            &[
                "--allow-host",
                "example.com",
                "--egress-mode",
                "transparent",
            ],
        ] {
            let mut args = vec!["run", "--quiet"];
            args.extend(mode);
            args.extend(["--", "python3", "-c", server]);
            let out = common::hutch_as(who, ws.path(), &args);
            assert_ok(&out, &format!("{who:?} {mode:?}"));
            assert_eq!(text(&out.stdout), "served x\n", "{who:?} {mode:?}");
        }
        let out = common::hutch_as(
            who,
            ws.path(),
            &[
                "run",
                "--quiet",
                "--share-net",
                "--",
                "python3",
                "-c",
                "import socket\ns=socket.socket()\ntry:\n s.bind(('127.0.0.1', 0)); print('bound')\nexcept PermissionError: print('denied')",
            ],
        );
        assert_ok(&out, &format!("{who:?} --share-net"));
        assert_eq!(text(&out.stdout), "denied\n", "{who:?} --share-net");
    }
}

#[test]
fn landlock_floor_fails_closed_with_one_line() {
    let abi = hutch::internals::sys::landlock_abi_version();
    let ws = workspace("floor");
    let out = run_in(
        &ws,
        &["--landlock-min-abi", &(abi + 1).to_string()],
        &["true"],
    );
    assert_eq!(out.status.code(), Some(125));
    let err = text(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("this kernel provides ABI {abi}")),
        "{err}"
    );
    assert!(err.contains("--landlock-min-abi"), "{err}");
    // At the kernel's own ABI it runs.
    let out = run_in(
        &ws,
        &["--landlock-min-abi", &abi.min(7).to_string()],
        &["true"],
    );
    assert_ok(&out, "at the floor");
    std::fs::remove_dir_all(&ws).unwrap();
}

#[test]
fn real_workloads_run_unchanged_under_default() {
    let ws = workspace("workloads");
    compile("threads_spawn", &ws);
    std::fs::write(
        ws.join("hello.c"),
        "#include <stdio.h>\nint main(void){puts(\"compiled\");return 0;}\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("Makefile"),
        "out.txt: in.txt\n\ttr a-z A-Z < in.txt > out.txt\n",
    )
    .unwrap();
    std::fs::write(ws.join("in.txt"), "make works\n").unwrap();
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "bash pipeline + job control",
            &[
                "bash",
                "-c",
                "set -m; sleep 0.2 & jobs >/dev/null; fg >/dev/null; printf 'a\\nb\\nc\\n' | grep b | tr b B",
            ],
            "B",
        ),
        (
            "python3",
            &[
                "python3",
                "-c",
                "import subprocess, threading, sqlite3, hashlib; t=threading.Thread(target=lambda: None); t.start(); t.join(); print(subprocess.run(['echo','py'],capture_output=True,text=True).stdout.strip())",
            ],
            "py",
        ),
        (
            "gcc",
            &["sh", "-c", "gcc -O1 -o /tmp/hello hello.c && /tmp/hello"],
            "compiled",
        ),
        (
            "git",
            &[
                "sh",
                "-c",
                "cd /tmp && git init -q r && cd r && echo x > f && git add f && git -c user.name=t -c user.email=t@e commit -qm m && git log --oneline | wc -l",
            ],
            "1",
        ),
        (
            "tar",
            &[
                "sh",
                "-c",
                "tar czf /tmp/a.tgz hello.c Makefile && tar tzf /tmp/a.tgz | sort | paste -sd,",
            ],
            "Makefile,hello.c",
        ),
        (
            "make",
            &["sh", "-c", "make -s && cat out.txt"],
            "MAKE WORKS",
        ),
        ("threads + posix_spawn", &["./threads_spawn"], "ok"),
    ];
    for (what, cmd, want) in cases {
        let out = run_in(&ws, &[], cmd);
        assert_ok(&out, what);
        assert_eq!(text(&out.stdout).trim(), *want, "{what}");
    }
    std::fs::remove_dir_all(&ws).unwrap();
}

#[test]
fn strict_runs_small_tools() {
    let ws = workspace("strict");
    let out = run_in(&ws, &["--seccomp", "strict"], &["/bin/true"]);
    assert_ok(&out, "strict true");
    let out = run_in(&ws, &["--seccomp", "strict"], &["sh", "-c", "echo hi"]);
    assert_ok(&out, "strict sh");
    assert_eq!(text(&out.stdout), "hi\n");
    let out = run_in(
        &ws,
        &["--seccomp", "strict"],
        &["python3", "-c", "print(6*7)"],
    );
    assert_ok(&out, "strict python3");
    assert_eq!(text(&out.stdout), "42\n");
    std::fs::remove_dir_all(&ws).unwrap();
}

#[test]
fn exit_report_says_what_is_enforced() {
    let ws = workspace("report");
    let status = ws.join("status.json");
    let report = |args: &[&str]| {
        let mut a = vec!["--status-file", status.to_str().unwrap()];
        a.extend_from_slice(args);
        let out = run_in(&ws, &a, &["true"]);
        assert_ok(&out, "report run");
        let s = std::fs::read_to_string(&status).unwrap();
        let last = s.lines().last().unwrap().to_string();
        let v: serde_json::Value = serde_json::from_str(&last).unwrap();
        v["enforced"]["confinement"].clone()
    };
    let c = report(&[]);
    assert_eq!(c["seccomp"]["profile"], "default");
    assert_eq!(c["seccomp"]["enforced"], true);
    assert_eq!(c["seccomp"]["architectures"], serde_json::json!(["x86_64"]));
    assert_eq!(
        c["seccomp"]["killed_abis"],
        serde_json::json!(["i386", "x32"])
    );
    assert_eq!(c["landlock"]["requested"], true);
    assert_eq!(
        c["landlock"]["available"],
        hutch::internals::sys::landlock_abi_version()
    );
    assert_eq!(c["landlock"]["tcp"], "own-namespace");
    let c = report(&["--seccomp", "unconfined", "--share-net"]);
    assert_eq!(c["seccomp"]["profile"], "unconfined");
    assert_eq!(c["seccomp"]["enforced"], false);
    assert_eq!(c["landlock"]["tcp"], "no-bind");
    std::fs::remove_dir_all(&ws).unwrap();
}

/// SECCOMP_RET_LOG records reach the kernel log (audit type 1326).
#[test]
fn log_profile_reports_syscalls_in_the_kernel_log() {
    require!(is_root(), "reading /dev/kmsg needs root (dmesg_restrict)");
    let ws = workspace("log");
    // A uniquely named program, so its records are ours.
    let probe = format!("hutchlogprobe{}", std::process::id() % 100000);
    std::fs::copy("/bin/true", ws.join(&probe)).unwrap();
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .unwrap();
    // Skip what is already in the log.
    // SAFETY: lseek on our own fd.
    unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&kmsg), 0, libc::SEEK_END) };
    // The kernel rate-limits audit printks (about 10 per 5 s): when other
    // records used the budget, wait for the next window and run again.
    let mut syscalls = Vec::new();
    for _attempt in 0..4 {
        let out = run_in(&ws, &["--seccomp", "log"], &[&format!("./{probe}")]);
        assert_ok(&out, "log run");
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
        while std::time::Instant::now() < deadline && syscalls.is_empty() {
            let mut buf = vec![0u8; 8192];
            loop {
                match kmsg.read(&mut buf) {
                    Ok(n) => {
                        let rec = text(&buf[..n]);
                        if rec.contains("type=1326")
                            && rec.contains(&probe)
                            && rec.contains("code=0x7ffc0000")
                            && let Some(nr) = rec.split(" syscall=").nth(1)
                        {
                            syscalls.push(nr.split(' ').next().unwrap_or("").to_string());
                        }
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                    Err(_) => break,
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if !syscalls.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(5));
    }

    assert!(
        !syscalls.is_empty(),
        "no SECCOMP_RET_LOG record for {probe}"
    );
    println!("logged syscalls of {probe}: {syscalls:?}");
    std::fs::remove_dir_all(&ws).unwrap();
}

/// hutch init runs under its own filter after starting the workload; it
/// must still reap, report and count the overlay's changes.
#[test]
fn init_filter_keeps_init_working() {
    let ws = workspace("initf");
    let out = hutch()
        .current_dir(&ws)
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "echo x > f; mkdir d; echo y > d/g; sleep 0.1 & wait; exit 5",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(
        text(&out.stderr).contains("2 paths changed"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&ws).unwrap();
}

use std::os::unix::fs::OpenOptionsExt;
