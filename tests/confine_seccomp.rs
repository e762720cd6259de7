//! seccomp profiles compiled by hutch, installed in a forked child (never in
//! the test harness itself), checked with raw syscalls.

use hutch::internals::confine::seccomp::{self, CompiledFilter};

const HIGH: u64 = 1 << 32;

/// How a forked child ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Exit(i32),
    Signal(i32),
}

/// Fork; in the child install `filter` (no-new-privs first) and run `body`,
/// whose return value becomes the exit status. The child only makes raw
/// syscalls after the fork.
fn in_child(filter: &CompiledFilter, body: impl FnOnce() -> i32) -> End {
    // SAFETY: the child calls only async-signal-safe raw syscalls (no
    // allocation, no locks) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: raw prctl/seccomp/_exit in the child.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                libc::_exit(200);
            }
            let prog = libc::sock_fprog {
                len: filter.program.len() as u16,
                filter: filter.program.as_ptr() as *mut libc::sock_filter,
            };
            if libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &prog as *const libc::sock_fprog,
            ) != 0
            {
                libc::_exit(201);
            }
        }
        let code = body();
        // SAFETY: leave without running the harness's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    wait(pid)
}

fn wait(pid: libc::pid_t) -> End {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    if libc::WIFEXITED(status) {
        End::Exit(libc::WEXITSTATUS(status))
    } else {
        End::Signal(libc::WTERMSIG(status))
    }
}

/// Errno of a raw syscall (0 on success).
fn errno_of(ret: libc::c_long) -> i32 {
    if ret < 0 {
        // SAFETY: reads this thread's errno.
        unsafe { *libc::__errno_location() }
    } else {
        0
    }
}

macro_rules! sys {
    ($($arg:expr),+ $(,)?) => {{
        // SAFETY: every call below uses arguments that make it fail
        // harmlessly (bad fd, bad pointer, nonexistent path, invalid flag
        // combination) should the filter not stop it.
        errno_of(unsafe { libc::syscall($($arg as libc::c_long),+) })
    }};
}

/// A raw syscall made in the child, returning its errno.
type Call = Box<dyn Fn() -> i32>;

fn default_filter() -> CompiledFilter {
    seccomp::load("default").unwrap().unwrap()
}

fn name(nr: libc::c_long) -> String {
    format!("syscall {nr}")
}

/// What compiling costs a spawn is measured by `benches/seccomp.sh`.
#[test]
fn builtin_profiles_compile_within_the_instruction_limit() {
    for (name, _) in seccomp::BUILTIN {
        let f = seccomp::load(name).unwrap().unwrap();
        println!(
            "profile {name}: {} instructions, stages {:?}",
            f.program.len(),
            f.stages
        );
        assert!(f.program.len() < seccomp::MAX_INSTRUCTIONS);
    }
    assert!(seccomp::load("unconfined").unwrap().is_none());
}

/// The deny list of SECURITY §4 and its errnos, each call made with
/// arguments that fail harmlessly when not filtered.
#[test]
fn default_profile_syscall_matrix() {
    let f = default_filter();
    let bad = usize::MAX as libc::c_long; // an invalid pointer / fd
    let nopath = c"/nonexistent/hutch".as_ptr();
    let mut cases: Vec<(&str, libc::c_long, Call, i32)> = vec![
        (
            "unshare(CLONE_NEWUSER)",
            libc::SYS_unshare,
            Box::new(|| sys!(libc::SYS_unshare, libc::CLONE_NEWUSER)),
            libc::EPERM,
        ),
        (
            "setns",
            libc::SYS_setns,
            Box::new(|| sys!(libc::SYS_setns, -1, 0)),
            libc::EPERM,
        ),
        (
            "mount",
            libc::SYS_mount,
            Box::new(move || sys!(libc::SYS_mount, nopath, nopath, nopath, 0, 0)),
            libc::EPERM,
        ),
        (
            "umount2",
            libc::SYS_umount2,
            Box::new(move || sys!(libc::SYS_umount2, nopath, 0)),
            libc::EPERM,
        ),
        (
            "pivot_root",
            libc::SYS_pivot_root,
            Box::new(move || sys!(libc::SYS_pivot_root, nopath, nopath)),
            libc::EPERM,
        ),
        (
            "chroot",
            libc::SYS_chroot,
            Box::new(move || sys!(libc::SYS_chroot, nopath)),
            libc::EPERM,
        ),
        (
            "open_by_handle_at",
            libc::SYS_open_by_handle_at,
            Box::new(move || sys!(libc::SYS_open_by_handle_at, -1, bad, 0)),
            libc::EPERM,
        ),
        (
            "add_key",
            libc::SYS_add_key,
            Box::new(move || sys!(libc::SYS_add_key, bad, bad, bad, 0, 0)),
            libc::EPERM,
        ),
        (
            "keyctl",
            libc::SYS_keyctl,
            Box::new(|| sys!(libc::SYS_keyctl, 0, -1, 0)),
            libc::EPERM,
        ),
        (
            "request_key",
            libc::SYS_request_key,
            Box::new(move || sys!(libc::SYS_request_key, bad, bad, bad, 0)),
            libc::EPERM,
        ),
        (
            "bpf",
            libc::SYS_bpf,
            Box::new(|| sys!(libc::SYS_bpf, -1, 0, 0)),
            libc::EPERM,
        ),
        (
            "perf_event_open",
            libc::SYS_perf_event_open,
            Box::new(move || sys!(libc::SYS_perf_event_open, bad, 0, -1, -1, 0)),
            libc::EPERM,
        ),
        (
            "kexec_load",
            libc::SYS_kexec_load,
            Box::new(|| sys!(libc::SYS_kexec_load, 0, 0, 0, -1)),
            libc::EPERM,
        ),
        (
            "kexec_file_load",
            libc::SYS_kexec_file_load,
            Box::new(|| sys!(libc::SYS_kexec_file_load, -1, -1, 0, 0, -1)),
            libc::EPERM,
        ),
        (
            "init_module",
            libc::SYS_init_module,
            Box::new(move || sys!(libc::SYS_init_module, bad, 0, bad)),
            libc::EPERM,
        ),
        (
            "finit_module",
            libc::SYS_finit_module,
            Box::new(move || sys!(libc::SYS_finit_module, -1, bad, 0)),
            libc::EPERM,
        ),
        (
            "delete_module",
            libc::SYS_delete_module,
            Box::new(|| sys!(libc::SYS_delete_module, c"hutch_no_such_module".as_ptr(), 0)),
            libc::EPERM,
        ),
        (
            "syslog",
            libc::SYS_syslog,
            Box::new(|| sys!(libc::SYS_syslog, 10, 0, 0)),
            libc::EPERM,
        ),
        (
            "acct",
            libc::SYS_acct,
            Box::new(move || sys!(libc::SYS_acct, nopath)),
            libc::EPERM,
        ),
        (
            "quotactl",
            libc::SYS_quotactl,
            Box::new(|| sys!(libc::SYS_quotactl, -1, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "swapon",
            libc::SYS_swapon,
            Box::new(move || sys!(libc::SYS_swapon, nopath, 0)),
            libc::EPERM,
        ),
        (
            "swapoff",
            libc::SYS_swapoff,
            Box::new(move || sys!(libc::SYS_swapoff, nopath)),
            libc::EPERM,
        ),
        (
            "reboot",
            libc::SYS_reboot,
            Box::new(|| sys!(libc::SYS_reboot, 0, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "iopl",
            libc::SYS_iopl,
            Box::new(|| sys!(libc::SYS_iopl, 0)),
            libc::EPERM,
        ),
        (
            "ioperm",
            libc::SYS_ioperm,
            Box::new(|| sys!(libc::SYS_ioperm, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "uselib",
            libc::SYS_uselib,
            Box::new(move || sys!(libc::SYS_uselib, nopath)),
            libc::EPERM,
        ),
        (
            "userfaultfd",
            libc::SYS_userfaultfd,
            Box::new(|| sys!(libc::SYS_userfaultfd, -1)),
            libc::EPERM,
        ),
        (
            "ptrace",
            libc::SYS_ptrace,
            Box::new(|| sys!(libc::SYS_ptrace, libc::PTRACE_PEEKDATA, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "process_vm_readv",
            libc::SYS_process_vm_readv,
            Box::new(|| sys!(libc::SYS_process_vm_readv, 0, 0, 0, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "process_vm_writev",
            libc::SYS_process_vm_writev,
            Box::new(|| sys!(libc::SYS_process_vm_writev, 0, 0, 0, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "kcmp",
            libc::SYS_kcmp,
            Box::new(|| sys!(libc::SYS_kcmp, 0, 0, -1, 0, 0)),
            libc::EPERM,
        ),
        (
            "pidfd_getfd",
            libc::SYS_pidfd_getfd,
            Box::new(|| sys!(libc::SYS_pidfd_getfd, -1, 0, 0)),
            libc::EPERM,
        ),
        (
            "mbind",
            libc::SYS_mbind,
            Box::new(|| sys!(libc::SYS_mbind, 0, 0, -1, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "set_mempolicy",
            libc::SYS_set_mempolicy,
            Box::new(|| sys!(libc::SYS_set_mempolicy, -1, 0, 0)),
            libc::EPERM,
        ),
        (
            "migrate_pages",
            libc::SYS_migrate_pages,
            Box::new(|| sys!(libc::SYS_migrate_pages, -1, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "move_pages",
            libc::SYS_move_pages,
            Box::new(|| sys!(libc::SYS_move_pages, -1, 0, 0, 0, 0, 0)),
            libc::EPERM,
        ),
        (
            "settimeofday",
            libc::SYS_settimeofday,
            Box::new(move || sys!(libc::SYS_settimeofday, bad, 0)),
            libc::EPERM,
        ),
        (
            "clock_settime",
            libc::SYS_clock_settime,
            Box::new(|| sys!(libc::SYS_clock_settime, -1, 0)),
            libc::EPERM,
        ),
        (
            "clock_adjtime",
            libc::SYS_clock_adjtime,
            Box::new(|| sys!(libc::SYS_clock_adjtime, -1, 0)),
            libc::EPERM,
        ),
        (
            "adjtimex",
            libc::SYS_adjtimex,
            Box::new(move || sys!(libc::SYS_adjtimex, bad)),
            libc::EPERM,
        ),
        (
            "vhangup",
            libc::SYS_vhangup,
            Box::new(|| {
                sys!(libc::SYS_setsid);
                sys!(libc::SYS_vhangup)
            }),
            libc::EPERM,
        ),
        (
            "personality(ADDR_NO_RANDOMIZE)",
            libc::SYS_personality,
            Box::new(|| sys!(libc::SYS_personality, 0x0040000)),
            libc::EPERM,
        ),
        (
            "personality(READ_IMPLIES_EXEC)",
            libc::SYS_personality,
            Box::new(|| sys!(libc::SYS_personality, 0x0400000)),
            libc::EPERM,
        ),
        (
            "ioctl(TIOCSTI)",
            libc::SYS_ioctl,
            Box::new(|| sys!(libc::SYS_ioctl, -1, libc::TIOCSTI)),
            libc::EPERM,
        ),
        (
            "ioctl(TIOCLINUX)",
            libc::SYS_ioctl,
            Box::new(|| sys!(libc::SYS_ioctl, -1, libc::TIOCLINUX)),
            libc::EPERM,
        ),
        // ENOSYS so that libraries fall back.
        (
            "clone3",
            libc::SYS_clone3,
            Box::new(|| sys!(libc::SYS_clone3, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "io_uring_setup",
            libc::SYS_io_uring_setup,
            Box::new(|| sys!(libc::SYS_io_uring_setup, 1, 0)),
            libc::ENOSYS,
        ),
        (
            "io_uring_enter",
            libc::SYS_io_uring_enter,
            Box::new(|| sys!(libc::SYS_io_uring_enter, -1, 0, 0, 0, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "io_uring_register",
            libc::SYS_io_uring_register,
            Box::new(|| sys!(libc::SYS_io_uring_register, -1, 0, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "fsopen",
            libc::SYS_fsopen,
            Box::new(|| sys!(libc::SYS_fsopen, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "fsconfig",
            libc::SYS_fsconfig,
            Box::new(|| sys!(libc::SYS_fsconfig, -1, 0, 0, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "fsmount",
            libc::SYS_fsmount,
            Box::new(|| sys!(libc::SYS_fsmount, -1, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "fspick",
            libc::SYS_fspick,
            Box::new(|| sys!(libc::SYS_fspick, -1, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "open_tree",
            libc::SYS_open_tree,
            Box::new(|| sys!(libc::SYS_open_tree, -1, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "move_mount",
            libc::SYS_move_mount,
            Box::new(|| sys!(libc::SYS_move_mount, -1, 0, -1, 0, 0)),
            libc::ENOSYS,
        ),
        (
            "mount_setattr",
            libc::SYS_mount_setattr,
            Box::new(|| sys!(libc::SYS_mount_setattr, -1, 0, 0, 0, 0)),
            libc::ENOSYS,
        ),
        // Socket families outside the allow-list.
        (
            "socket(AF_VSOCK)",
            libc::SYS_socket,
            Box::new(|| sys!(libc::SYS_socket, libc::AF_VSOCK, libc::SOCK_STREAM, 0)),
            libc::EAFNOSUPPORT,
        ),
        (
            "socket(AF_PACKET)",
            libc::SYS_socket,
            Box::new(|| sys!(libc::SYS_socket, libc::AF_PACKET, libc::SOCK_RAW, 0)),
            libc::EAFNOSUPPORT,
        ),
        (
            "socket(AF_ALG)",
            libc::SYS_socket,
            Box::new(|| sys!(libc::SYS_socket, libc::AF_ALG, libc::SOCK_SEQPACKET, 0)),
            libc::EAFNOSUPPORT,
        ),
        (
            "socket(AF_KEY)",
            libc::SYS_socket,
            Box::new(|| sys!(libc::SYS_socket, libc::AF_KEY, libc::SOCK_RAW, 2)),
            libc::EAFNOSUPPORT,
        ),
        (
            "socket(AF_XDP)",
            libc::SYS_socket,
            Box::new(|| sys!(libc::SYS_socket, libc::AF_XDP, libc::SOCK_RAW, 0)),
            libc::EAFNOSUPPORT,
        ),
        (
            "socket(AF_BLUETOOTH)",
            libc::SYS_socket,
            Box::new(|| sys!(libc::SYS_socket, libc::AF_BLUETOOTH, libc::SOCK_RAW, 0)),
            libc::EAFNOSUPPORT,
        ),
        // The same calls with high bits in 32-bit arguments.
        (
            "socket(AF_VSOCK | 1<<32)",
            libc::SYS_socket,
            Box::new(|| {
                sys!(
                    libc::SYS_socket,
                    libc::AF_VSOCK as u64 | HIGH,
                    libc::SOCK_STREAM,
                    0
                )
            }),
            libc::EAFNOSUPPORT,
        ),
        (
            "socket(AF_PACKET | 1<<63)",
            libc::SYS_socket,
            Box::new(|| {
                sys!(
                    libc::SYS_socket,
                    libc::AF_PACKET as u64 | (1 << 63),
                    libc::SOCK_RAW,
                    0
                )
            }),
            libc::EAFNOSUPPORT,
        ),
        (
            "ioctl(TIOCSTI | 1<<32)",
            libc::SYS_ioctl,
            Box::new(|| sys!(libc::SYS_ioctl, -1, libc::TIOCSTI | HIGH)),
            libc::EPERM,
        ),
        (
            "ioctl(TIOCLINUX | 0xffff<<48)",
            libc::SYS_ioctl,
            Box::new(|| sys!(libc::SYS_ioctl, -1, libc::TIOCLINUX | (0xffff << 48))),
            libc::EPERM,
        ),
        (
            "personality(ADDR_NO_RANDOMIZE | 1<<32)",
            libc::SYS_personality,
            Box::new(|| sys!(libc::SYS_personality, 0x0040000u64 | HIGH)),
            libc::EPERM,
        ),
        (
            "clone(CLONE_NEWUSER | 1<<32)",
            libc::SYS_clone,
            Box::new(|| {
                sys!(
                    libc::SYS_clone,
                    libc::CLONE_NEWUSER as u64 | libc::CLONE_THREAD as u64 | HIGH,
                    0,
                    0,
                    0,
                    0
                )
            }),
            libc::EPERM,
        ),
    ];
    // clone with a CLONE_NEW* flag; CLONE_THREAD without CLONE_SIGHAND
    // makes the unfiltered call fail with EINVAL.
    for (name, flag) in [
        ("clone(CLONE_NEWUSER)", libc::CLONE_NEWUSER),
        ("clone(CLONE_NEWNS)", libc::CLONE_NEWNS),
        ("clone(CLONE_NEWPID)", libc::CLONE_NEWPID),
        ("clone(CLONE_NEWNET)", libc::CLONE_NEWNET),
        ("clone(CLONE_NEWIPC)", libc::CLONE_NEWIPC),
        ("clone(CLONE_NEWUTS)", libc::CLONE_NEWUTS),
        ("clone(CLONE_NEWCGROUP)", libc::CLONE_NEWCGROUP),
    ] {
        cases.push((
            name,
            libc::SYS_clone,
            Box::new(move || sys!(libc::SYS_clone, flag | libc::CLONE_THREAD, 0, 0, 0, 0)),
            libc::EPERM,
        ));
    }
    let mut failures = Vec::new();
    for (what, nr, call, want) in cases {
        let got = in_child(&f, call);
        if got != End::Exit(want) {
            failures.push(format!(
                "{what} ({}): want errno {want}, got {got:?}",
                name(nr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What the default profile must keep working.
#[test]
fn default_profile_allows_ordinary_calls() {
    let f = default_filter();
    let cases: Vec<(&str, Call, i32)> = vec![
        ("getpid", Box::new(|| sys!(libc::SYS_getpid)), 0),
        (
            "socket(AF_UNIX)",
            Box::new(|| sys!(libc::SYS_socket, libc::AF_UNIX, libc::SOCK_STREAM, 0)),
            0,
        ),
        (
            "socket(AF_INET)",
            Box::new(|| sys!(libc::SYS_socket, libc::AF_INET, libc::SOCK_STREAM, 0)),
            0,
        ),
        (
            "socket(AF_INET6)",
            Box::new(|| sys!(libc::SYS_socket, libc::AF_INET6, libc::SOCK_DGRAM, 0)),
            0,
        ),
        (
            "socket(AF_NETLINK)",
            Box::new(|| sys!(libc::SYS_socket, libc::AF_NETLINK, libc::SOCK_RAW, 0)),
            0,
        ),
        (
            "socket(AF_UNIX | 1<<32)",
            Box::new(|| {
                sys!(
                    libc::SYS_socket,
                    libc::AF_UNIX as u64 | HIGH,
                    libc::SOCK_STREAM,
                    0
                )
            }),
            0,
        ),
        (
            "personality(query)",
            Box::new(|| sys!(libc::SYS_personality, 0xffff_ffffu32)),
            0,
        ),
        (
            "personality(PER_LINUX)",
            Box::new(|| sys!(libc::SYS_personality, 0)),
            0,
        ),
        (
            "ioctl(FIONREAD) on a bad fd",
            Box::new(|| sys!(libc::SYS_ioctl, -1, libc::FIONREAD)),
            libc::EBADF,
        ),
        (
            "clone without CLONE_NEW* reaches the kernel",
            Box::new(|| sys!(libc::SYS_clone, libc::CLONE_THREAD, 0, 0, 0, 0)),
            libc::EINVAL,
        ),
        (
            "get_mempolicy",
            Box::new(|| sys!(libc::SYS_get_mempolicy, 0, 0, 0, 0, 0)),
            0,
        ),
        ("getppid", Box::new(|| sys!(libc::SYS_getppid)), 0),
    ];
    for (what, call, want) in cases {
        assert_eq!(in_child(&f, call), End::Exit(want), "{what}");
    }
}

#[test]
fn int80_and_x32_syscalls_are_killed() {
    let f = default_filter();
    // getpid through the i386 entry point (int 0x80, eax = 20).
    let got = in_child(&f, || {
        let mut ret: i64 = 20;
        // SAFETY: i386 getpid takes no arguments and touches no memory.
        unsafe { std::arch::asm!("int 0x80", inout("rax") ret, options(nostack)) };
        ret as i32
    });
    assert_eq!(got, End::Signal(libc::SIGSYS), "int 0x80 getpid");
    // getpid with the x32 bit.
    let got = in_child(&f, || {
        sys!(seccomp::X32_SYSCALL_BIT as libc::c_long | libc::SYS_getpid)
    });
    assert_eq!(got, End::Signal(libc::SIGSYS), "x32 getpid");
    // Without a filter both calls work (so the kill above is the filter's).
    let unfiltered = seccomp::compile(
        "allow-all",
        br#"{"t": {"mismatch_action": "allow", "match_action": "log", "filter": []}}"#,
    );
    assert!(unfiltered.is_ok());
}

#[test]
fn strict_runs_simple_programs_and_refuses_unknown_calls() {
    let f = seccomp::load("strict").unwrap().unwrap();
    let run = |argv: &[&std::ffi::CStr]| {
        let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let env = [c"PATH=/usr/bin:/bin".as_ptr(), std::ptr::null()];
        in_child(&f, || {
            // SAFETY: valid NUL-terminated argv/envp arrays.
            unsafe { libc::execve(ptrs[0], ptrs.as_ptr(), env.as_ptr()) };
            99
        })
    };
    assert_eq!(run(&[c"/bin/true"]), End::Exit(0));
    assert_eq!(
        run(&[c"/bin/sh", c"-c", c"echo hi >/dev/null && exit 3"]),
        End::Exit(3)
    );
    assert_eq!(
        run(&[
            c"/usr/bin/python3",
            c"-c",
            c"import json,os,sys; sys.exit(len(json.dumps([os.getpid()])) > 2 and 4)"
        ]),
        End::Exit(4)
    );
    // A syscall not on the allow-list: ENOSYS; the deny list still EPERMs.
    assert_eq!(
        in_child(&f, || sys!(libc::SYS_getcpu, 0, 0, 0)),
        End::Exit(libc::ENOSYS)
    );
    assert_eq!(
        in_child(&f, || sys!(libc::SYS_unshare, libc::CLONE_NEWUSER)),
        End::Exit(libc::EPERM)
    );
    assert_eq!(
        in_child(&f, || sys!(
            libc::SYS_socket,
            libc::AF_PACKET,
            libc::SOCK_RAW,
            0
        )),
        End::Exit(libc::EAFNOSUPPORT)
    );
}

#[test]
fn unconfined_user_profile_and_log_profile_stack_as_documented() {
    // A user profile: one stage returning EACCES for getppid.
    let f = seccomp::compile(
        "user",
        br#"{"mine": {"mismatch_action": "allow", "match_action": {"errno": 13},
             "filter": [{"syscall": "getppid", "comment": "example"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        in_child(&f, || sys!(libc::SYS_getppid)),
        End::Exit(libc::EACCES)
    );
    assert_eq!(in_child(&f, || sys!(libc::SYS_getpid)), End::Exit(0));
    // Foreign arch is killed for user profiles too.
    assert_eq!(
        in_child(&f, || sys!(
            seccomp::X32_SYSCALL_BIT as libc::c_long | libc::SYS_getppid
        )),
        End::Signal(libc::SIGSYS)
    );
    // The log profile denies like default and allows (logs) the rest.
    let log = seccomp::load("log").unwrap().unwrap();
    assert_eq!(in_child(&log, || sys!(libc::SYS_getpid)), End::Exit(0));
    assert_eq!(
        in_child(&log, || sys!(libc::SYS_unshare, libc::CLONE_NEWUSER)),
        End::Exit(libc::EPERM)
    );
    assert_eq!(
        in_child(&log, || sys!(libc::SYS_io_uring_setup, 1, 0)),
        End::Exit(libc::ENOSYS)
    );
}

/// socketpair() has the same family allow-list as socket(). The result
/// pointer is NULL, so an allowed call reaches the kernel and faults
/// (EFAULT); a refused one gets the filter's EAFNOSUPPORT.
#[test]
fn default_profile_socketpair_families() {
    let f = default_filter();
    let pair = |family: u64| -> Call {
        Box::new(move || sys!(libc::SYS_socketpair, family, libc::SOCK_STREAM, 0, 0))
    };
    let unix = libc::AF_UNIX as u64;
    let cases: Vec<(&str, Call, i32)> = vec![
        ("AF_UNIX", pair(unix), libc::EFAULT),
        ("AF_UNIX | 1<<32", pair(unix | HIGH), libc::EFAULT),
        ("AF_INET", pair(libc::AF_INET as u64), libc::EFAULT),
        (
            "AF_PACKET",
            pair(libc::AF_PACKET as u64),
            libc::EAFNOSUPPORT,
        ),
        ("AF_ALG", pair(libc::AF_ALG as u64), libc::EAFNOSUPPORT),
        (
            "AF_PACKET | 1<<63",
            pair(libc::AF_PACKET as u64 | (1 << 63)),
            libc::EAFNOSUPPORT,
        ),
        (
            "AF_VSOCK | AF_UNIX<<32",
            pair(libc::AF_VSOCK as u64 | (unix << 32)),
            libc::EAFNOSUPPORT,
        ),
    ];
    let mut failures = Vec::new();
    for (what, call, want) in cases {
        let got = in_child(&f, call);
        if got != End::Exit(want) {
            failures.push(format!(
                "socketpair({what}): want errno {want}, got {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// AF_NETLINK is allowed for NETLINK_ROUTE (what glibc, Python, Go and `ip`
/// use) only; other netlink protocols get EAFNOSUPPORT, also with the
/// route protocol in the high bits.
#[test]
fn default_profile_netlink_route_only() {
    let f = default_filter();
    let nl = |proto: u64| -> Call {
        Box::new(move || {
            sys!(
                libc::SYS_socket,
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                proto
            )
        })
    };
    let route = libc::NETLINK_ROUTE as u64;
    let cases: Vec<(&str, Call, i32)> = vec![
        ("NETLINK_ROUTE", nl(route), 0),
        ("NETLINK_ROUTE | 1<<32", nl(route | HIGH), 0),
        (
            "NETLINK_AUDIT",
            nl(libc::NETLINK_AUDIT as u64),
            libc::EAFNOSUPPORT,
        ),
        (
            "NETLINK_NETFILTER",
            nl(libc::NETLINK_NETFILTER as u64),
            libc::EAFNOSUPPORT,
        ),
        (
            "NETLINK_GENERIC",
            nl(libc::NETLINK_GENERIC as u64),
            libc::EAFNOSUPPORT,
        ),
        (
            "NETLINK_SOCK_DIAG | 1<<32",
            nl(libc::NETLINK_SOCK_DIAG as u64 | HIGH),
            libc::EAFNOSUPPORT,
        ),
    ];
    let mut failures = Vec::new();
    for (what, call, want) in cases {
        let got = in_child(&f, call);
        if got != End::Exit(want) {
            failures.push(format!(
                "socket(AF_NETLINK, {what}): want errno {want}, got {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
