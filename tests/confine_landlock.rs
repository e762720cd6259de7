//! Landlock plans and the full `apply_workload` / `apply_init` sequence,
//! enforced in a forked child (never in the test harness itself).

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use hutch::internals::confine::{
    self,
    landlock::{LandlockPlan, TcpRule},
};
use hutch::spec::{FsOp, Network, Spec};

#[derive(Debug, PartialEq, Eq)]
enum End {
    Exit(i32),
    Signal(i32),
}

fn fork_run(body: impl FnOnce() -> i32) -> End {
    // SAFETY: the child runs `body` and leaves with _exit; glibc's fork
    // keeps malloc usable in the child.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = body();
        // SAFETY: leave without running the harness's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFEXITED(status) {
        End::Exit(libc::WEXITSTATUS(status))
    } else {
        End::Signal(libc::WTERMSIG(status))
    }
}

fn landlock_abi() -> u32 {
    hutch::internals::sys::landlock_abi_version()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hutch-ll-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("rw")).unwrap();
    std::fs::create_dir_all(d.join("ro")).unwrap();
    std::fs::write(d.join("ro/file"), "x").unwrap();
    d
}

/// A spec whose mount plan names host paths (the child does not pivot_root,
/// so "inside the new root" is the host here).
fn spec_for(dir: &Path, network: Network) -> Spec {
    let mut spec = Spec::default();
    spec.fs.push(FsOp::RoBind {
        src: dir.join("ro"),
        dest: dir.join("ro"),
        optional: false,
    });
    spec.fs.push(FsOp::Tmpfs {
        dest: dir.join("rw"),
        size: None,
        nr_inodes: None,
        mode: None,
    });
    spec.fs.push(FsOp::Bind {
        src: dir.join("missing"),
        dest: dir.join("missing"),
        optional: true,
    });
    spec.namespaces.net = !matches!(network, Network::Host);
    spec.network = network;
    spec
}

fn write_file(p: &Path) -> i32 {
    match std::fs::File::create(p).and_then(|mut f| f.write_all(b"hi")) {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

#[test]
fn plan_follows_the_mount_plan() {
    let mut spec = hutch::spec::default_profile();
    spec.fs
        .push(hutch::spec::workspace_overlay(Path::new("/work/x"), None));
    let plan = LandlockPlan::new(&spec, 7);
    let rights = |p: &str| {
        plan.paths
            .iter()
            .find(|r| r.path.to_str() == Ok(p))
            .map(|r| r.access)
    };
    let all = confine::landlock::fs_rights(7);
    let read_exec = confine::landlock::READ_EXEC_RIGHTS;
    assert_eq!(rights("/"), Some(read_exec));
    assert_eq!(rights("/usr"), Some(read_exec));
    assert_eq!(rights("/tmp"), Some(all));
    assert_eq!(rights("/work/x"), Some(all));
    assert_eq!(rights("/dev/shm"), Some(all));
    let dev = rights("/dev").unwrap();
    assert_ne!(dev & confine::landlock::IOCTL_DEV, 0);
    assert_eq!(dev & confine::landlock::REFER, 0);
    let proc_ = rights("/proc").unwrap();
    assert_ne!(proc_ & confine::landlock::WRITE_FILE, 0);
    assert_eq!(proc_ & confine::landlock::IOCTL_DEV, 0);
    // The sandbox's own network namespace: TCP is left to it.
    assert_eq!(plan.handled_net, 0);
    assert_eq!(plan.tcp, TcpRule::OwnNamespace);
    assert!(plan.ports.is_empty());
    assert_eq!(plan.scoped, 3);
    // A namespace not its own (joined): no TCP at all.
    spec.namespaces.net = false;
    let shared = LandlockPlan::new(&spec, 7);
    assert_eq!(
        shared.handled_net,
        confine::landlock::BIND_TCP | confine::landlock::CONNECT_TCP
    );
    assert_eq!(shared.tcp, TcpRule::Denied);
    // Older kernels: rights and features the ABI lacks are not asked for.
    let v1 = LandlockPlan::new(&spec, 1);
    assert_eq!(v1.handled_fs, (1 << 13) - 1);
    assert_eq!((v1.handled_net, v1.scoped), (0, 0));
    let v4 = LandlockPlan::new(&spec, 4);
    assert_eq!(v4.handled_fs & confine::landlock::IOCTL_DEV, 0);
    assert_ne!(v4.handled_net, 0);
    assert_eq!(v4.scoped, 0);
    // Proxy mode in a namespace not its own: only the proxy door may be
    // connected to (in its own namespace, as for mode none, nothing).
    spec.network = Network::Proxy(Default::default());
    let p = LandlockPlan::new(&spec, 7);
    assert_eq!(
        p.ports,
        vec![(
            confine::landlock::PROXY_PORT,
            confine::landlock::CONNECT_TCP
        )]
    );
    spec.namespaces.net = true;
    assert_eq!(LandlockPlan::new(&spec, 7).handled_net, 0);
    // Host network: connect anywhere, bind nowhere (the host's ports).
    spec.network = Network::Host;
    spec.namespaces.net = false;
    let host = LandlockPlan::new(&spec, 7);
    assert_eq!(
        (host.handled_net, host.tcp),
        (confine::landlock::BIND_TCP, TcpRule::NoBind)
    );
    // A network namespace given to join (a container engine's): its own
    // business, not restricted.
    spec.namespaces.join.net = Some(hutch::spec::NamespaceRef::path("/proc/1/ns/net"));
    assert_eq!(LandlockPlan::new(&spec, 7).tcp, TcpRule::Unrestricted);
}

#[test]
fn filesystem_rights_follow_the_plan() {
    require!(landlock_abi() >= 1, "Landlock not available");
    let dir = scratch("fs");
    let spec = spec_for(&dir, Network::None);
    let c = confine::prepare(&spec).unwrap();
    let d = dir.clone();
    let got = fork_run(move || {
        if let Err(e) = c.apply_workload() {
            eprintln!("{e}");
            return 100;
        }
        if write_file(&d.join("rw/new")) != 0 {
            return 1;
        }
        if write_file(&d.join("ro/new")) != libc::EACCES {
            return 2;
        }
        if write_file(&d.join("ro/file")) != libc::EACCES {
            return 3;
        }
        if std::fs::read(d.join("ro/file")).is_err() {
            return 4;
        }
        if std::fs::read("/etc/hostname").is_err() && std::fs::read("/etc/passwd").is_err() {
            return 5;
        }
        // Outside every writable mount: denied.
        if write_file(&std::env::temp_dir().join(format!("hutch-ll-out-{}", std::process::id())))
            != libc::EACCES
        {
            return 6;
        }
        if std::fs::create_dir(d.join("mkdir-denied")).map_err(|e| e.raw_os_error())
            != Err(Some(libc::EACCES))
        {
            return 7;
        }
        0
    });
    assert_eq!(got, End::Exit(0));
    assert!(dir.join("rw/new").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tcp_connect(port: u16) -> i32 {
    match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn tcp_bind() -> i32 {
    match TcpListener::bind("127.0.0.1:0") {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn abstract_connect(name: &[u8]) -> i32 {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
    match std::os::unix::net::UnixStream::connect_addr(&addr) {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

#[test]
fn network_and_scopes() {
    require!(
        landlock_abi() >= 6,
        "Landlock ABI 6 (TCP rules, scoping) not available"
    );
    use std::os::linux::net::SocketAddrExt;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let name = format!("hutch-ll-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _unix = UnixListener::bind_addr(&addr).unwrap();
    let dir = scratch("net");
    // SAFETY: getpid has no preconditions.
    let outside = unsafe { libc::getpid() };

    // Sanity: without confinement everything works.
    let n = name.clone();
    let plain = fork_run(move || {
        // SAFETY: signal 0 only checks permission.
        let k = unsafe { libc::kill(outside, 0) };
        (tcp_connect(port) + abstract_connect(n.as_bytes()) + k) as i32
    });
    assert_eq!(plain, End::Exit(0));

    // A network namespace of the sandbox's own: Landlock leaves TCP to it
    // (its loopback is the sandbox's; a port rule could not tell it from
    // the host's). Applied here, in the test's namespace, nothing of TCP
    // is refused.
    let c = confine::prepare(&spec_for(&dir, Network::None)).unwrap();
    let got = fork_run(move || {
        c.apply_workload().map_err(|e| eprintln!("{e}")).ok();
        (tcp_connect(port) != 0) as i32 | ((tcp_bind() != 0) as i32) << 1
    });
    assert_eq!(got, End::Exit(0), "bits: 1 connect, 2 bind");

    // No network in a namespace not its own: TCP bind and connect denied;
    // outside abstract socket and signals to outside processes denied.
    let mut shared_none = spec_for(&dir, Network::None);
    shared_none.namespaces.net = false;
    let c = confine::prepare(&shared_none).unwrap();
    let n = name.clone();
    let got = fork_run(move || {
        c.apply_workload().map_err(|e| eprintln!("{e}")).ok();
        let mut fails = 0;
        if tcp_connect(port) != libc::EACCES {
            fails |= 1;
        }
        if tcp_bind() != libc::EACCES {
            fails |= 2;
        }
        if abstract_connect(n.as_bytes()) != libc::EPERM {
            fails |= 4;
        }
        // SAFETY: signal 0 only checks permission.
        if unsafe { libc::kill(outside, 0) } == 0 || errno() != libc::EPERM {
            fails |= 8;
        }
        // The process's own children stay reachable (same domain).
        // SAFETY: plain fork; the grandchild exits immediately.
        let kid = unsafe { libc::fork() };
        if kid == 0 {
            // SAFETY: sleep then leave.
            unsafe {
                libc::pause();
                libc::_exit(0)
            };
        }
        // SAFETY: signalling and reaping our own child.
        unsafe {
            if libc::kill(kid, libc::SIGTERM) != 0 {
                fails |= 16;
            }
            libc::waitpid(kid, std::ptr::null_mut(), 0);
        }
        fails
    });
    assert_eq!(
        got,
        End::Exit(0),
        "bits: 1 connect, 2 bind, 4 abstract, 8 signal, 16 own child"
    );

    // Host network (--share-net): connect works, bind (a listener the
    // host's processes would reach) is denied, scoping still holds.
    let c = confine::prepare(&spec_for(&dir, Network::Host)).unwrap();
    let n = name.clone();
    let got = fork_run(move || {
        c.apply_workload().map_err(|e| eprintln!("{e}")).ok();
        let mut fails = 0;
        if tcp_connect(port) != 0 {
            fails |= 1;
        }
        if tcp_bind() != libc::EACCES {
            fails |= 2;
        }
        if abstract_connect(n.as_bytes()) != libc::EPERM {
            fails |= 4;
        }
        // SAFETY: signal 0 only checks permission.
        if unsafe { libc::kill(outside, 0) } == 0 {
            fails |= 8;
        }
        fails
    });
    assert_eq!(
        got,
        End::Exit(0),
        "bits: 1 connect, 2 bind, 4 abstract, 8 signal"
    );

    // Proxy mode in a namespace not its own: connect only to the proxy
    // port.
    let mut shared_proxy = spec_for(&dir, Network::Proxy(Default::default()));
    shared_proxy.namespaces.net = false;
    let c = confine::prepare(&shared_proxy).unwrap();
    let got = fork_run(move || {
        c.apply_workload().map_err(|e| eprintln!("{e}")).ok();
        let proxy = tcp_connect(confine::landlock::PROXY_PORT);
        // Nothing listens on 3128 here: refused, not denied by Landlock.
        let other = tcp_connect(port);
        match (proxy, other) {
            (libc::ECONNREFUSED, libc::EACCES) | (0, libc::EACCES) => 0,
            _ => 1,
        }
    });
    assert_eq!(got, End::Exit(0));
    drop(listener);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn apply_workload_installs_seccomp_after_landlock() {
    let dir = scratch("both");
    let mut spec = spec_for(&dir, Network::None);
    spec.security.landlock.enabled = landlock_abi() >= 1;
    let c = confine::prepare(&spec).unwrap();
    let got = fork_run(move || {
        if c.apply_workload().is_err() {
            return 100;
        }
        // SAFETY: harmless raw syscalls.
        let r = unsafe { libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER) };
        if r == 0 || errno() != libc::EPERM {
            return 1;
        }
        // SAFETY: as above.
        let r = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, 0) };
        if r == 0 || errno() != libc::ENOSYS {
            return 2;
        }
        // A program still runs.
        let status = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 7"])
            .status();
        match status.map(|s| s.code()) {
            Ok(Some(7)) => 0,
            _ => 3,
        }
    });
    assert_eq!(got, End::Exit(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn init_filter_allows_reaping_and_refuses_exec() {
    let c = confine::prepare(&Spec::default()).unwrap();
    let got = fork_run(move || {
        if c.apply_init().is_err() {
            return 100;
        }
        // SAFETY: the raw syscalls below have no memory effects beyond
        // their (valid) arguments.
        unsafe {
            if libc::getpid() <= 0 {
                return 1;
            }
            if libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) != -1
                || errno() != libc::ECHILD
            {
                return 2;
            }
            let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
            libc::execve(argv[0], argv.as_ptr(), std::ptr::null());
            if errno() != libc::EPERM {
                return 3;
            }
            if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) != -1 || errno() != libc::EPERM {
                return 4;
            }
            if libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER) != -1 || errno() != libc::EPERM
            {
                return 5;
            }
            let fd = libc::openat(
                libc::AT_FDCWD,
                c"/".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            );
            if fd < 0 {
                return 6;
            }
            libc::close(fd);
            libc::syscall(
                hutch::internals::confine::seccomp::X32_SYSCALL_BIT as libc::c_long
                    | libc::SYS_getpid,
            );
        }
        7
    });
    assert_eq!(got, End::Signal(libc::SIGSYS));
}
