//! The post-clone path against a recording syscall layer (the documented
//! order, every step), and the real workload steps in a forked child
//! under an allocation counter (they must allocate nothing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::fs::tests::Recorder;
use crate::launch::child::syscalls::ChildSys;
use crate::launch::child::{self, Stop};
use crate::launch::plan::{CapPlan, ChildPlan, CommandPlan, Ids, StdioPlan};
use crate::launch::prepare::exec_of;
use crate::launch::wire::message::Message;
use crate::launch::wire::stage::{Failure, Stage};
use crate::spec::{FsOp, Spec};
use crate::sys::{Errno, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, sock_filter};

fn s(c: &CStr) -> String {
    c.to_string_lossy().into_owned()
}

fn n(fd: BorrowedFd<'_>) -> RawFd {
    fd.as_raw_fd()
}

// What the recorder answers where an answer matters.
thread_local! {
    static EXEC_ERRNO: Cell<Errno> = const { Cell::new(Errno::ENOENT) };
    static CWD_INSIDE: Cell<bool> = const { Cell::new(true) };
    /// `transparent_sockets` fails as a kernel without local routes would.
    static NO_LOCAL_ROUTE: Cell<bool> = const { Cell::new(false) };
}

impl Recorder {
    fn note(&mut self, call: String) {
        self.calls.push(format!("child {call}"));
    }
}

impl ChildSys for Recorder {
    fn set_parent_death_signal(&mut self) -> Result<(), Errno> {
        self.note("pdeathsig".into());
        Ok(())
    }
    fn close_fds_except(
        &mut self,
        keep: &[BorrowedFd<'_>],
        inherited: &[RawFd],
    ) -> Result<(), Errno> {
        self.note(format!("close_range keep {}", keep.len() + inherited.len()));
        Ok(())
    }
    fn new_session(&mut self) -> Result<(), Errno> {
        self.note("setsid".into());
        Ok(())
    }
    fn recv_go(&mut self, _sock: BorrowedFd<'_>) -> Option<Vec<(usize, OwnedFd)>> {
        self.note("recv Go".into());
        Some(Vec::new())
    }
    fn recv_pivot(&mut self, _sock: BorrowedFd<'_>) -> bool {
        self.note("recv Pivot".into());
        true
    }
    fn send(
        &mut self,
        _sock: BorrowedFd<'_>,
        msg: &Message,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), Errno> {
        let name = match msg {
            Message::Started { .. } => "Started",
            Message::ListenerReady { .. } => "ListenerReady",
            Message::Exited { .. } => "Exited",
            Message::Go { .. } => "Go",
            Message::Ready => "Ready",
            Message::Claim { .. } => "Claim",
            Message::Held => "Held",
            Message::RootBuilt => "RootBuilt",
            Message::Pivot => "Pivot",
            Message::CommandEnded => "CommandEnded",
        };
        self.note(format!("send {name} {}", fds.len()));
        Ok(())
    }
    fn clear_groups(&mut self) -> Result<(), Errno> {
        self.note("setgroups".into());
        Ok(())
    }
    fn set_gid(&mut self, gid: u32) -> Result<(), Errno> {
        self.note(format!("setresgid {gid}"));
        Ok(())
    }
    fn set_uid(&mut self, uid: u32) -> Result<(), Errno> {
        self.note(format!("setresuid {uid}"));
        Ok(())
    }
    fn keep_caps_on_setuid(&mut self) -> Result<(), Errno> {
        self.note("securebits NO_SETUID_FIXUP".into());
        Ok(())
    }
    fn supervisor_alive(&mut self, _sock: BorrowedFd<'_>) -> bool {
        self.note("supervisor alive".into());
        true
    }
    fn lock_user_namespaces(&mut self) -> Result<(), Errno> {
        self.note("max_user_namespaces 0".into());
        Ok(())
    }
    fn set_hostname(&mut self, name: &[u8]) -> Result<(), Errno> {
        self.note(format!("sethostname {}", String::from_utf8_lossy(name)));
        Ok(())
    }
    fn enter_user_namespace(&mut self, _fd: BorrowedFd<'_>) -> Result<(), Errno> {
        self.note("setns user".into());
        Ok(())
    }
    fn enter_mount_namespace(&mut self, _fd: BorrowedFd<'_>) -> Result<(), Errno> {
        self.note("setns mount".into());
        Ok(())
    }
    fn loopback_up(&mut self) -> Result<(), Errno> {
        self.note("lo up".into());
        Ok(())
    }
    fn tcp_door(&mut self) -> Result<OwnedFd, Errno> {
        self.note("tcp door".into());
        Ok(self.fd())
    }
    fn transparent_sockets(&mut self, ports: &[u16]) -> Result<Vec<OwnedFd>, crate::sys::SysError> {
        if NO_LOCAL_ROUTE.get() {
            return Err(crate::sys::SysError::new(
                "rtnetlink RTM_NEWROUTE(local 198.18.0.0/15 dev \"lo\")",
                Errno::EOPNOTSUPP,
            ));
        }
        self.note(format!("transparent {ports:?}"));
        // The resolver, one listener per port, the refusals watch.
        Ok((0..ports.len() + 2).map(|_| self.fd()).collect())
    }
    fn recv_claim(
        &mut self,
        _sock: BorrowedFd<'_>,
        non_default_signals: u64,
    ) -> Result<Option<crate::launch::child::claim::Claimed>, Errno> {
        self.note("recv Claim".into());
        let mut spec = test_spec();
        spec.command = vec!["/usr/bin/true".into(), "claimed".into()];
        Ok(Some(crate::launch::child::claim::Claimed {
            command: CommandPlan {
                exec: exec_of(&spec.command, &spec.env),
                cwd: CString::new("/work").unwrap(),
                stdio: StdioPlan {
                    fds: [Some(self.fd()), Some(self.fd()), Some(self.fd())],
                },
                non_default_signals,
                umask: spec.umask,
                controlling_tty: false,
            },
            report_started: true,
            linger: false,
        }))
    }
    fn clone_per_command(&mut self, flags: u64) -> Result<Option<libc::pid_t>, Errno> {
        self.note(format!("clone per-command {flags:#x}"));
        // The recorder follows the per-command init's path.
        Ok(None)
    }
    fn wait_per_command(&mut self, pid: libc::pid_t, _forwarded: u64) {
        self.note(format!("wait per-command {pid}"));
    }
    fn claim_pipe(&mut self) -> Result<(OwnedFd, OwnedFd), Errno> {
        self.note("claim pipe".into());
        let (r, w) = std::io::pipe().map_err(|_| Errno::EMFILE)?;
        Ok((r.into(), w.into()))
    }
    fn mark_claimed(&mut self, _pipe: BorrowedFd<'_>) {
        self.note("claimed".into());
    }
    fn was_claimed(&mut self, _pipe: BorrowedFd<'_>) -> bool {
        true
    }
    fn own_namespaces(&mut self) -> Vec<(String, u64)> {
        self.note("own namespaces".into());
        Vec::new()
    }
    fn set_rlimit(&mut self, resource: libc::c_int, value: u64) -> Result<(), Errno> {
        self.note(format!("setrlimit {resource} {value}"));
        Ok(())
    }
    fn set_dumpable(&mut self, on: bool) -> Result<(), Errno> {
        self.note(format!("dumpable {on}"));
        Ok(())
    }
    fn permitted_caps(&mut self) -> Result<u64, Errno> {
        Ok(u64::MAX)
    }
    fn block_signals(&mut self, signals: &[libc::c_int]) -> Result<(), Errno> {
        self.note(format!("block {}", signals.len()));
        Ok(())
    }
    fn start_workload(&mut self, plan: &ChildPlan, sock: BorrowedFd<'_>) -> Result<i32, Errno> {
        self.note("start workload".into());
        let failure = child::workload(self, plan, sock);
        self.note(format!(
            "workload ended {:?} {:?}",
            failure.stage, failure.errno
        ));
        Ok(2)
    }
    fn confine_init(&mut self, _c: &crate::confine::Confinement) -> Result<(), Errno> {
        self.note("init seccomp".into());
        Ok(())
    }
    fn reset_signals(&mut self, _non_default: u64) {
        self.note("reset signals".into());
    }
    fn keep_across_exec(&mut self, fd: RawFd) -> Result<(), Errno> {
        self.note(format!("keep fd {fd}"));
        Ok(())
    }
    fn dup2(&mut self, from: BorrowedFd<'_>, to: RawFd) -> Result<(), Errno> {
        self.note(format!("dup2 {} {to}", n(from)));
        Ok(())
    }
    fn openat2(
        &mut self,
        dir: Option<BorrowedFd<'_>>,
        path: &CStr,
        _flags: libc::c_int,
        resolve: u64,
    ) -> Result<OwnedFd, Errno> {
        let fd = self.fd();
        self.note(format!(
            "openat2 {} {} {resolve:#x} = {}",
            dir.map_or(-100, n),
            s(path),
            fd.as_raw_fd()
        ));
        Ok(fd)
    }
    fn file_type(&mut self, _fd: BorrowedFd<'_>) -> Result<libc::mode_t, Errno> {
        Ok(libc::S_IFDIR)
    }
    fn enter_dir(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        self.note(format!("fchdir {}", n(fd)));
        Ok(())
    }
    fn cwd_inside_root(&mut self) -> Result<bool, Errno> {
        self.note("getcwd".into());
        Ok(CWD_INSIDE.get())
    }
    fn set_no_new_privs(&mut self) -> Result<(), Errno> {
        self.note("no_new_privs".into());
        Ok(())
    }
    fn drop_bounding_cap(&mut self, cap: u32) -> Result<(), Errno> {
        self.note(format!("capbset_drop {cap}"));
        Ok(())
    }
    fn set_caps(&mut self, effective: u64, permitted: u64, inheritable: u64) -> Result<(), Errno> {
        assert_eq!((effective, inheritable), (permitted, permitted));
        self.note(format!("capset {permitted:#x}"));
        Ok(())
    }
    fn keep_caps(&mut self) -> Result<(), Errno> {
        self.note("keepcaps".into());
        Ok(())
    }
    fn set_groups(&mut self, groups: &[libc::gid_t]) -> Result<(), Errno> {
        self.note(format!("setgroups {groups:?}"));
        Ok(())
    }
    fn set_umask(&mut self, mask: u32) {
        self.note(format!("umask {mask:o}"));
    }
    fn set_controlling_tty(&mut self) -> Result<(), Errno> {
        self.note("tiocsctty".into());
        Ok(())
    }
    fn write_sysctl(&mut self, path: &CStr, value: &[u8]) -> Result<(), Errno> {
        self.note(format!(
            "sysctl {} {}",
            s(path),
            String::from_utf8_lossy(value)
        ));
        Ok(())
    }
    fn set_rlimit_soft(&mut self, resource: libc::c_int, soft: u64) -> Result<(), Errno> {
        self.note(format!("setrlimit soft {resource} {soft}"));
        Ok(())
    }
    fn set_subreaper(&mut self) -> Result<(), Errno> {
        self.note("subreaper".into());
        Ok(())
    }
    fn open_terminal(&mut self, _size: Option<(u16, u16)>) -> Result<(OwnedFd, OwnedFd), Errno> {
        self.note("open pty".into());
        Ok((self.fd(), self.fd()))
    }
    fn send_fd(&mut self, _sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        self.note(format!("send fd {}", n(fd)));
        Ok(())
    }
    fn accept_start(&mut self, _listener: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
        self.note("accept start".into());
        Ok(self.fd())
    }
    fn clear_ambient_caps(&mut self) -> Result<(), Errno> {
        self.note("ambient clear".into());
        Ok(())
    }
    fn raise_ambient_cap(&mut self, cap: u32) -> Result<(), Errno> {
        self.note(format!("ambient raise {cap}"));
        Ok(())
    }
    fn landlock_ruleset(&mut self, _fs: u64, _net: u64, _scoped: u64) -> Result<OwnedFd, Errno> {
        self.note("landlock ruleset".into());
        Ok(self.fd())
    }
    fn landlock_path_rule(
        &mut self,
        _ruleset: BorrowedFd<'_>,
        _parent: BorrowedFd<'_>,
        _access: u64,
    ) -> Result<(), Errno> {
        self.note("landlock path rule".into());
        Ok(())
    }
    fn landlock_port_rule(
        &mut self,
        _ruleset: BorrowedFd<'_>,
        port: u16,
        _access: u64,
    ) -> Result<(), Errno> {
        self.note(format!("landlock port rule {port}"));
        Ok(())
    }
    fn landlock_restrict(&mut self, _ruleset: BorrowedFd<'_>) -> Result<(), Errno> {
        self.note("landlock restrict".into());
        Ok(())
    }
    fn seccomp(&mut self, program: &[sock_filter]) -> Result<(), Errno> {
        self.note(format!("seccomp {}", program.len()));
        Ok(())
    }
    fn seccomp_prctl(&mut self, program: &[sock_filter]) -> Result<(), Errno> {
        self.note(format!("seccomp-prctl {}", program.len()));
        Ok(())
    }
    fn execve(
        &mut self,
        path: &CStr,
        _argv: &[*const libc::c_char],
        _envp: &[*const libc::c_char],
    ) -> Errno {
        self.note(format!("execve {}", s(path)));
        EXEC_ERRNO.get()
    }
}

fn ids(root_launch: bool) -> Ids {
    Ids {
        inside_uid: 0,
        inside_gid: 0,
        host_uid: 65534,
        host_gid: 65534,
        root_launch,
        clear_groups: root_launch,
        init_ids: Some((0, 0)),
        workload_ids: None,
        maps: None,
        subordinate: None,
    }
}

/// A child plan for `spec` without the side effects of `prepare` (no
/// cgroup leaf, no pipes).
fn plan_for(spec: &Spec, proxy: bool, keep_caps: u64) -> ChildPlan {
    ChildPlan {
        args_area: Default::default(),
        ids: ids(true),
        fs: crate::fs::plan(spec, false),
        op_names: crate::fs::op_names(spec),
        hostname: spec.identity.hostname.clone(),
        net_namespace: true,
        proxy_doors: proxy,
        transparent_ports: None,
        rlimits: vec![(libc::RLIMIT_CORE as libc::c_int, 0)],
        caps: CapPlan::keeping(keep_caps, 40),
        confinement: crate::confine::prepare(spec).unwrap(),
        report_started: true,
        warm: false,
        command: CommandPlan {
            exec: exec_of(&spec.command, &spec.env),
            cwd: CString::new(spec.cwd.as_ref().unwrap().as_os_str().as_encoded_bytes()).unwrap(),
            stdio: StdioPlan::default(),
            non_default_signals: u64::MAX,
            umask: None,
            controlling_tty: false,
        },
        detached: false,
        own_userns: true,
        pid_namespace_init: true,
        sysctls: Vec::new(),
        rlimits_soft: Vec::new(),
        forwarded_signals: crate::launch::plan::signal_mask(&crate::launch::plan::FORWARDED),
        console: None,
        console_size: None,
        userns_after_setup: None,
        bounding_set_dropped: false,
        init_joinable: false,
        mount_namespace: None,
        landlock_ruleset: None,
        hold: None,
        inherited_fds: Vec::new(),
        new_session: true,
        exec_in_place: false,
        resident: false,
        per_command_flags: 0,
        pause_before_pivot: false,
    }
}

fn test_spec() -> Spec {
    let mut spec = crate::spec::default_profile();
    spec.command = vec!["/usr/bin/true".into()];
    spec.cwd = Some("/work".into());
    spec.fs.push(FsOp::Tmpfs {
        dest: "/work".into(),
        size: None,
        nr_inodes: None,
        mode: None,
    });
    spec
}

/// The kinds of the recorded child calls, in order, with runs of the same
/// kind collapsed (the builder's own calls are one `build` entry).
fn kinds(calls: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in calls {
        let kind = match c.strip_prefix("child ") {
            None if c.starts_with("mount  / ") => "slave /".to_string(),
            None if c.starts_with("open -100 /") && !out.iter().any(|k| k == "build") => {
                "open sources".to_string()
            }
            None if c.starts_with("pivot_root") => "pivot_root".to_string(),
            None => "build".to_string(),
            Some(rest) => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                match words.as_slice() {
                    ["openat2", _, path, ..] if *path == "/" => "open root".into(),
                    ["openat2", _, path, ..] if *path == "/work" => "open cwd".into(),
                    ["openat2", _, path, ..] if *path == "/usr/bin/true" => "open candidate".into(),
                    ["openat2", ..] => "open landlock path".into(),
                    ["send", name, ..] => format!("send {name}"),
                    ["setrlimit", ..] => "setrlimit".into(),
                    ["capbset_drop", ..] => "capbset_drop".into(),
                    ["workload", "ended", ..] => "workload ended".into(),
                    [first, second, ..] if first.starts_with("landlock") => {
                        format!("{first} {second}")
                    }
                    [first, ..] => first.to_string(),
                    [] => String::new(),
                }
            }
        };
        if out.last() != Some(&kind) {
            out.push(kind);
        }
    }
    // The builder's calls after pivot_root (detach, chdir) are part of it.
    let mut folded = Vec::new();
    for k in out {
        if k == "build" && folded.last().is_some_and(|l: &String| l == "pivot_root") {
            continue;
        }
        if folded.last() != Some(&k) {
            folded.push(k);
        }
    }
    folded
}

#[test]
fn transparent_egress_hands_its_sockets_over_or_fails_closed_with_the_fix() {
    let spec = test_spec();
    let mut plan = plan_for(&spec, true, 0);
    plan.transparent_ports = Some(vec![22, 443]);
    let mut rec = Recorder::default();
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    assert!(child::init(&mut rec, &mut plan, sock.as_fd()).is_ok());
    let at = |calls: &[String], what: &str| calls.iter().position(|c| c.contains(what));
    let tcp = at(&rec.calls, "tcp door").expect("the tcp door");
    let transparent = at(&rec.calls, "transparent [22, 443]").expect("transparent sockets");
    assert!(tcp < transparent, "{:?}", rec.calls);
    // Before the workload exists, with nothing started: one line naming
    // the call, errno, what the kernel must allow and the way out.
    NO_LOCAL_ROUTE.set(true);
    let mut plan = plan_for(&spec, true, 0);
    plan.transparent_ports = Some(vec![443]);
    let mut rec = Recorder::default();
    let r = child::init(&mut rec, &mut plan, sock.as_fd());
    NO_LOCAL_ROUTE.set(false);
    match r {
        Err(Stop::Failed(f, Some(text))) => {
            assert_eq!(
                f.stage,
                crate::launch::wire::stage::Stage::TransparentEgress
            );
            assert_eq!(f.exit_status(), 125);
            assert!(
                text.contains("RTM_NEWROUTE") && text.contains("EOPNOTSUPP"),
                "{text}"
            );
            assert!(
                text.contains("--egress-mode proxy") && !text.contains('\n'),
                "{text}"
            );
        }
        Err(Stop::Failed(f, None)) => panic!("{f:?} without its text"),
        Err(Stop::SupervisorGone) => panic!("supervisor gone"),
        Ok(_) => panic!("started without transparent egress"),
    }
    assert!(!rec.calls.iter().any(|c| c.contains("start workload")));
}

#[test]
fn the_child_runs_every_step_in_the_documented_order() {
    let spec = test_spec();
    let mut plan = plan_for(&spec, true, 0);
    let mut rec = Recorder::default();
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    let running = match child::init(&mut rec, &mut plan, sock.as_fd()) {
        Ok(r) => r,
        Err(Stop::Failed(f, text)) => panic!("{f:?} {text:?}"),
        Err(Stop::SupervisorGone) => panic!("supervisor gone"),
    };
    assert_eq!(running.workload, 2);
    let mut expected: Vec<&str> = vec![
        // hutch init
        "pdeathsig",
        "close_range",
        "setsid",
        "recv",
        "slave /",
        "open sources",
        "setgroups",
        "setresgid",
        "setresuid",
        "pdeathsig",
        "supervisor",
        "max_user_namespaces",
        "build",
        "pivot_root",
        "sethostname",
        "lo",
        "tcp",
        "send ListenerReady",
        "capbset_drop",
    ];
    let has_landlock = plan.confinement.landlock_plan().is_some();
    if has_landlock {
        // Init adds the rules (the first for `/`, then one per fs
        // operation: open, rule, ...); the workload only enforces them.
        expected.extend([
            "open root",
            "landlock ruleset",
            "open root",
            "landlock path",
        ]);
    }
    let head_len = expected.len();
    let mut tail = vec![
        "setrlimit",
        "dumpable",
        "block",
        "start",
        // the workload
        "reset",
        "setsid",
        "close_range",
        "open root",
        "open cwd",
        "fchdir",
        "getcwd",
        "no_new_privs",
        "capset",
        "ambient",
        // armed after the credential change (issue 33, item 14)
        "pdeathsig",
        "supervisor",
        // The command is looked up before the filters: under the
        // workload's seccomp filter only execve runs.
        "open candidate",
    ];
    if has_landlock {
        tail.push("landlock restrict");
    }
    tail.extend([
        "seccomp",
        "execve",
        "workload ended",
        "send Started",
        "close_range",
        "init",
    ]);
    let got = kinds(&rec.calls);
    assert_eq!(&got[..head_len], &expected[..], "{:#?}", rec.calls);
    let cut = got
        .iter()
        .position(|k| k == "setrlimit")
        .unwrap_or_else(|| panic!("{got:#?}"));
    assert_eq!(&got[cut..], &tail[..], "{:#?}", rec.calls);
    // In between, only Landlock's path rules (open, rule).
    for pair in got[head_len..cut].chunks(2) {
        assert!(
            matches!(pair, [open, rule] if open.starts_with("open ") && rule == "landlock path"),
            "{pair:?}: {got:#?}"
        );
    }
    // Landlock paths and the cwd are resolved inside the root, never
    // through a magic link; from a root fd opened just before (init's for
    // the rules, the workload's for the cwd).
    let in_root = format!("{:#x}", RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
    let root_fds: Vec<String> = rec
        .calls
        .iter()
        .filter_map(|c| {
            c.strip_prefix("child openat2 -100 / ")
                .and_then(|r| r.rsplit(" = ").next())
                .map(str::to_string)
        })
        .collect();
    assert_eq!(root_fds.len(), if has_landlock { 2 } else { 1 });
    // Exec candidates are looked up as execve resolves them (magic links
    // followed: `/proc/self/exe`, issue 33 item 7).
    let candidates: Vec<String> = plan
        .command
        .exec
        .candidates
        .iter()
        .map(|c| format!(" {} 0x0 = ", c.to_string_lossy()))
        .collect();
    for c in rec.calls.iter().filter(|c| {
        c.starts_with("child openat2 ")
            && !c.contains(" -100 ")
            && !candidates.iter().any(|k| c.contains(k.as_str()))
    }) {
        assert!(
            root_fds
                .iter()
                .any(|fd| c.contains(&format!("openat2 {fd} ")))
                && c.contains(&in_root),
            "{c}"
        );
    }
    // The Unix door is made in the new root, before pivot_root.
    let door = rec
        .calls
        .iter()
        .position(|c| c.starts_with("unix_listener"))
        .unwrap();
    let pivot = rec
        .calls
        .iter()
        .position(|c| c.starts_with("pivot_root"))
        .unwrap();
    assert!(door < pivot);
}

/// A warm sandbox: the same steps, with `Ready` and the claim between the
/// doors and the rlimits; its writable overlay is staged (a tmpfs at its
/// destination, binds of its layers, the overlay's context) before
/// `pivot_root`, and created and moved into place after the claim.
/// What a warm sandbox with a workspace does from `Ready` on until it
/// goes on as a cold launch: the claim, the overlay's mount, the
/// workspace's Landlock rule (its inode exists only after the mount).
const CLAIM_STEPS: [&str; 6] = [
    "send Ready",
    "recv",
    "build",
    "open root",
    "open landlock path",
    "landlock path",
];

#[test]
fn a_warm_sandbox_waits_for_its_claim_then_mounts_its_workspace() {
    let mut spec = test_spec();
    spec.fs.push(crate::spec::workspace_overlay(
        std::path::Path::new("/w"),
        None,
    ));
    let mut plan = plan_for(&spec, true, 0);
    plan.warm = true;
    plan.fs.claim_overlays = crate::launch::prepare::claim::claim_overlays(&spec);
    assert_eq!(plan.fs.claim_overlays, vec![spec.fs.len() - 1]);
    let mut rec = Recorder::default();
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    let running = match child::init(&mut rec, &mut plan, sock.as_fd()) {
        Ok(r) => r,
        Err(Stop::Failed(f, text)) => panic!("{f:?} {text:?}"),
        Err(Stop::SupervisorGone) => panic!("supervisor gone"),
    };
    assert_eq!(running.workload, 2);
    assert_eq!(running.uppers.len(), 1, "the discarded upper is counted");
    let calls = &rec.calls;
    let at = |needle: &str| {
        calls
            .iter()
            .position(|c| c.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in {calls:#?}"))
    };
    let got = kinds(calls);
    // Command-independent, so done before `Ready`: the bounding set and
    // Landlock's rules but the workspace's.
    let before = [
        "send ListenerReady",
        "capbset_drop",
        "open root",
        "landlock ruleset",
    ];
    let from = got.iter().position(|k| k == "send ListenerReady").unwrap();
    assert_eq!(&got[from..from + before.len()], &before, "{calls:#?}");
    // After the claim's mount, the workspace's rule (its inode exists
    // only then), then on as a cold launch.
    let order: Vec<&str> = CLAIM_STEPS
        .into_iter()
        .chain(["setrlimit", "dumpable", "block", "start"])
        .collect();
    let ready = got.iter().position(|k| k == "send Ready").unwrap();
    assert_eq!(&got[ready..ready + order.len()], &order, "{calls:#?}");
    let workspace_rule = calls
        .iter()
        .rposition(|c| c.starts_with("child openat2 ") && c.contains(" /w "))
        .expect("the workspace's rule");
    assert!(at("fs_mount") < workspace_rule, "{calls:#?}");
    // Staged before pivot_root: a private tmpfs at the destination, the
    // lower (opened from /w before the build) bound onto it, and the
    // overlay's context naming the bind.
    let pivot = at("pivot_root");
    let source = calls
        .iter()
        .find_map(|c| c.strip_prefix("open -100 /w = "))
        .expect("the workspace's source opened");
    let stage = calls
        .iter()
        .position(|c| c.contains(" tmpfs ") && c.contains("mode=700,size=65536"))
        .expect("the stage tmpfs");
    let bind = calls
        .iter()
        .position(|c| {
            c.starts_with(&format!("mount /proc/self/fd/{source} ")) && c.contains(" 0x1000 ")
        })
        .expect("a bind onto the stage");
    let lower = calls[bind + 1]
        .strip_prefix("open ")
        .and_then(|c| c.rsplit_once(" = "))
        .map(|(_, fd)| fd.to_string())
        .expect("the bind opened");
    let context = at(&format!(
        "fs_context overlay lowerdir=/proc/self/fd/{lower},upperdir=/proc/self/fd/"
    ));
    assert!(
        calls[context].contains(",userxattr,metacopy=off = "),
        "{}",
        calls[context]
    );
    assert!(
        stage < bind && bind < context && context < pivot,
        "{calls:#?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("mount ") && c.contains(" overlay ")),
        "no overlay is mounted with mount(2): {calls:#?}"
    );
    // Mounted after the claim: the filesystem created, the stage detached,
    // the overlay moved onto the destination, before the workload starts.
    let claim = at("child recv Claim");
    let created = at("fs_mount ");
    assert!(
        calls[created].contains(" 0x6 = "),
        "nosuid,nodev: {}",
        calls[created]
    );
    let detach = calls
        .iter()
        .enumerate()
        .position(|(i, c)| i > created && c.starts_with("umount2 . "))
        .expect("the stage detached");
    let moved = calls
        .iter()
        .enumerate()
        .position(|(i, c)| i > detach && c.starts_with("move_mount_at ") && c.ends_with(" w"))
        .expect("the overlay moved onto /w");
    let workload = at("child start workload");
    assert!(
        claim < created && created < detach && detach < moved && moved < workload,
        "{calls:#?}"
    );
    // The claimed command is the one executed.
    assert!(calls.iter().any(|c| c == "child execve /usr/bin/true"));
}

/// A resident sandbox: after `Ready`, hutch init makes the per-command
/// init (fresh pid, mount, ipc, uts and network namespaces) before any
/// claim; that process mounts `/proc`, `/dev` and each tmpfs again over
/// the kept ones, brings its `lo` up, and only then takes the claim,
/// mounts the workspace from a new overlay context and runs the command's
/// steps as a sandbox used once does. hutch init builds no Landlock
/// ruleset of its own: the workload builds one naming this command's
/// inodes, and enforces it before seccomp and execve.
#[test]
fn a_resident_sandbox_makes_each_command_its_own_init_before_its_claim() {
    use crate::sys::{CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUTS};
    let mut spec = test_spec();
    spec.fs.push(FsOp::Overlay {
        lowers: vec!["/base".into()],
        upper: "/s/upper".into(),
        work: "/s/work".into(),
        dest: "/w".into(),
    });
    let mut plan = plan_for(&spec, false, 0);
    plan.warm = true;
    plan.resident = true;
    let flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET;
    plan.per_command_flags = flags;
    plan.fs.claim_overlays = crate::launch::prepare::claim::claim_overlays(&spec);
    assert_eq!(crate::fs::resident::blocker(&plan.fs), None);
    plan.fs.resident = true;
    let mut rec = Recorder::default();
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    let running = match child::init(&mut rec, &mut plan, sock.as_fd()) {
        Ok(r) => r,
        Err(Stop::Failed(f, text)) => panic!("{f:?} {text:?}"),
        Err(Stop::SupervisorGone) => panic!("supervisor gone"),
    };
    assert_eq!(running.workload, 2);
    assert!(running.pid_namespace_init, "its kill(-1) ends the command");
    let calls = &rec.calls;
    let after = |from: usize, needle: &str| -> usize {
        calls
            .iter()
            .enumerate()
            .position(|(i, c)| i > from && c.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} after #{from} in {calls:#?}"))
    };
    let ready = after(0, "child send Ready");
    // In order, each after the one before.
    let steps = [
        "child block".to_string(),
        "child claim pipe".to_string(),
        format!("child clone per-command {flags:#x}"),
        "child pdeathsig".to_string(),
        "mount  / ".to_string(),
        " proc ".to_string(),
        " /proc/self/fd/".to_string(),
        "child lo up".to_string(),
        "child recv Claim".to_string(),
        "child claimed".to_string(),
        "fs_context overlay lowerdir=/proc/self/fd/".to_string(),
        "fs_mount ".to_string(),
        "move_mount_at ".to_string(),
        "child setrlimit".to_string(),
        "child dumpable false".to_string(),
        "child start workload".to_string(),
        "child landlock ruleset".to_string(),
        "child landlock restrict".to_string(),
        "child seccomp".to_string(),
        "child execve /usr/bin/true".to_string(),
        "child init seccomp".to_string(),
    ];
    let mut at = ready;
    for step in &steps {
        at = after(at, step);
    }
    // Before `Ready` hutch init dropped the bounding set but made no
    // ruleset, and nothing of the command's mounts happened before its
    // per-command init existed.
    let clone = after(ready, "child clone per-command");
    assert!(
        !calls[..clone].iter().any(|c| c.contains("landlock ruleset")),
        "{calls:#?}"
    );
    assert!(
        !calls[..clone]
            .iter()
            .any(|c| c.starts_with("fs_mount ") || c.starts_with("fs_context ")),
        "{calls:#?}"
    );
    // The workspace's layers were kept as detached copies when the
    // sandbox was built, the upper's holder found before the sandbox's
    // identity was taken.
    assert!(calls[..ready].iter().any(|c| c.starts_with("clone_tree ")), "{calls:#?}");
    // The claimed command is the one executed.
    assert!(calls.iter().any(|c| c == "child execve /usr/bin/true"));
}

/// The warm path is the cold path with a pause: the same steps, in the
/// same order (ids, root, hostname, loopback, doors, the bounding set,
/// Landlock's rules, rlimits, setsid, stdio, cwd, no-new-privs,
/// capabilities, Landlock's restriction, seccomp, execve, the init
/// filter), with only `Ready`, the claim and the overlay's mount inserted
/// before the rlimits, and the Landlock rule of the overlay mounted at the
/// claim (its inode exists only then) added after that mount.
#[test]
fn a_warm_sandbox_runs_the_same_setup_steps_as_a_cold_one() {
    let mut spec = test_spec();
    spec.fs.push(crate::spec::workspace_overlay(
        std::path::Path::new("/w"),
        None,
    ));
    let run = |warm: bool| {
        let mut plan = plan_for(&spec, true, 0);
        let mut rec = Recorder::default();
        if warm {
            plan.warm = true;
            plan.fs.claim_overlays = crate::launch::prepare::claim::claim_overlays(&spec);
        } else {
            // A claim always brings explicit stdio; so does this launch.
            plan.command.stdio = StdioPlan {
                fds: [Some(rec.fd()), Some(rec.fd()), Some(rec.fd())],
            };
        }
        let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
        match child::init(&mut rec, &mut plan, sock.as_fd()) {
            Ok(r) => assert_eq!(r.uppers.len(), 1),
            Err(Stop::Failed(f, text)) => panic!("{f:?} {text:?}"),
            Err(Stop::SupervisorGone) => panic!("supervisor gone"),
        }
        kinds(&rec.calls)
    };
    let cold = run(false);
    let warm = run(true);
    let mut expected = cold.clone();
    let rlimits = expected
        .iter()
        .position(|k| k == "setrlimit")
        .expect("the rlimits");
    // The last rule is the workspace's (the last fs operation).
    assert_eq!(
        &expected[rlimits - 2..rlimits],
        ["open landlock path", "landlock path"]
    );
    expected.splice(rlimits - 2..rlimits, CLAIM_STEPS.map(String::from));
    assert_eq!(warm, expected);
    for step in [
        "landlock restrict",
        "seccomp",
        "capbset_drop",
        "execve",
        "init",
    ] {
        assert!(
            warm.iter().any(|k| k.starts_with(step)),
            "{step}: {warm:#?}"
        );
    }
}

/// An unprivileged image run with a subordinate range: hutch init is root
/// inside (the caller's own id) and must keep its capabilities when it
/// becomes the image's user, so the securebit comes right before the uid
/// switch; with single-id maps it is never set.
#[test]
fn init_keeps_its_capabilities_into_a_subordinate_uid() {
    use crate::launch::plan::{Extent, Subordinate};
    let spec = test_spec();
    let run = |ids: Ids| {
        let mut plan = plan_for(&spec, false, 0);
        plan.ids = ids;
        let mut rec = Recorder::default();
        let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
        assert!(child::init(&mut rec, &mut plan, sock.as_fd()).is_ok());
        rec.calls
    };
    let e = |inside, host, count| Extent {
        inside,
        host,
        count,
    };
    let mapped = Ids {
        inside_uid: 1000,
        inside_gid: 1000,
        host_uid: 200999,
        host_gid: 200999,
        root_launch: false,
        clear_groups: true,
        subordinate: Some(Subordinate {
            uid: [e(0, 65534, 1), e(1, 200000, 65536)],
            gid: [e(0, 65534, 1), e(1, 200000, 65536)],
            len: 2,
            helpers: true,
        }),
        init_ids: Some((1000, 1000)),
        workload_ids: None,
        maps: None,
    };
    let calls = run(mapped.clone());
    let secure = pos_of(&calls, "child securebits NO_SETUID_FIXUP");
    assert!(pos_of(&calls, "child setresgid 1000") < secure);
    assert_eq!(calls[secure + 1], "child setresuid 1000");
    assert!(pos_of(&calls, "child setgroups") < secure);
    let calls = run(ids(false));
    assert!(
        !calls.iter().any(|c| c.contains("securebits")),
        "{calls:#?}"
    );
    assert_eq!(
        Subordinate::host_of(&mapped.subordinate.unwrap().uid, 1000),
        Some(200999)
    );
}

fn pos_of(calls: &[String], call: &str) -> usize {
    calls
        .iter()
        .position(|c| c.starts_with(call))
        .unwrap_or_else(|| panic!("no {call:?} in {calls:#?}"))
}

#[test]
fn kept_capabilities_stay_out_of_the_drops_and_are_raised_ambient() {
    let spec = test_spec();
    let keep = 1u64 << 13; // CAP_NET_RAW
    let plan = plan_for(&spec, false, keep);
    let mut rec = Recorder::default();
    let sock = rec.fd();
    let failure = child::workload(&mut rec, &plan, sock.as_fd());
    assert_eq!((failure.stage, failure.errno), (Stage::Exec, Errno::ENOENT));
    let drops: Vec<&String> = rec
        .calls
        .iter()
        .filter(|c| c.contains("capbset_drop"))
        .collect();
    assert_eq!(drops.len(), 40, "0..=40 but the kept one");
    assert!(!rec.calls.iter().any(|c| c == "child capbset_drop 13"));
    assert!(rec.calls.iter().any(|c| c == "child capset 0x2000"));
    assert!(rec.calls.iter().any(|c| c == "child ambient raise 13"));
}

#[test]
fn a_working_directory_outside_the_root_is_refused_before_exec() {
    let spec = test_spec();
    let plan = plan_for(&spec, false, 0);
    let mut rec = Recorder::default();
    CWD_INSIDE.set(false);
    let sock = rec.fd();
    let failure = child::workload(&mut rec, &plan, sock.as_fd());
    assert_eq!(
        failure,
        Failure::new(Stage::WorkingDirectory, Errno::EXDEV),
        "{:#?}",
        rec.calls
    );
    assert!(
        !rec.calls
            .iter()
            .any(|c| c.contains("execve") || c.contains("no_new_privs"))
    );
}

#[test]
fn exec_failures_pick_the_error_worth_reporting() {
    let mut spec = test_spec();
    spec.command = vec!["prog".into()];
    spec.env.insert("PATH".into(), "/a:/b".into());
    let plan = plan_for(&spec, false, 0);
    let mut rec = Recorder::default();
    EXEC_ERRNO.set(Errno::EACCES);
    let sock = rec.fd();
    let failure = child::workload(&mut rec, &plan, sock.as_fd());
    // Both candidates are tried; EACCES (not "not found") is kept.
    assert_eq!(
        (failure.stage, failure.errno, failure.index),
        (Stage::Exec, Errno::EACCES, 0)
    );
    assert_eq!(failure.exit_status(), 126);
    assert_eq!(
        rec.calls
            .iter()
            .filter(|c| c.contains("child execve"))
            .count(),
        2
    );
}

// An allocation counter for the forked workload below. It only counts
// while armed, on the thread that armed it.
struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.try_with(Cell::get).unwrap_or(false) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if ARMED.try_with(Cell::get).unwrap_or(false) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The real workload steps (real syscalls: close_range, fchdir, capability
/// drops, Landlock, seccomp, execve) in a forked child, up to an execve
/// that fails, and the failure record sent: no allocation at all.
#[test]
fn the_workload_allocates_nothing_even_when_it_fails() {
    let mut spec = crate::spec::default_profile();
    spec.command = vec!["/hutch/no/such/program".into()];
    spec.cwd = Some("/tmp".into());
    let mut plan = plan_for(&spec, false, 0);
    plan.caps.last = crate::sys::cap_last_cap();
    let (sock, peer) = crate::sys::socket::seqpacket_pair().unwrap();
    let pid = crate::sys::raw::fork_then(|| {
        // In a user namespace of its own, as the real workload is: the
        // capability drops need its capabilities, root or not.
        if crate::sys::raw::unshare(libc::CLONE_NEWUSER).is_err() {
            return 99;
        }
        ARMED.set(true);
        let failure = child::workload(
            &mut crate::launch::child::real_sys::RealSys,
            &plan,
            sock.as_fd(),
        );
        crate::launch::wire::message::send_failure(sock.as_fd(), &failure, None);
        ARMED.set(false);
        ALLOCATIONS.load(Ordering::Relaxed).min(100) as i32
    })
    .unwrap();
    drop(sock);
    let (_, status) = crate::sys::raw::waitpid(pid, 0).unwrap().unwrap();
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "allocations in the workload");
    match crate::launch::wire::message::recv(&peer).unwrap() {
        Some(crate::launch::wire::message::Incoming::Failure(f, None)) => {
            assert_eq!((f.stage, f.errno), (Stage::Exec, Errno::ENOENT));
            assert_eq!(f.exit_status(), 127);
        }
        other => panic!("{other:?}"),
    }
}

/// `Spec::new_session = false`: neither hutch init nor the workload calls
/// setsid (the workload stays in the caller's session); inherited fds are
/// kept by init's first close and the workload's, and made to survive
/// execve, but init's own last close drops them.
#[test]
fn without_a_new_session_no_setsid_and_inherited_fds_are_kept() {
    let spec = test_spec();
    let mut plan = plan_for(&spec, false, 0);
    plan.new_session = false;
    plan.inherited_fds = vec![5, 9];
    let mut rec = Recorder::default();
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    if let Err(Stop::Failed(f, text)) = child::init(&mut rec, &mut plan, sock.as_fd()) {
        panic!("{f:?} {text:?}");
    }
    assert!(
        !rec.calls.iter().any(|c| c.contains("setsid")),
        "{:#?}",
        rec.calls
    );
    let closes: Vec<&String> = rec
        .calls
        .iter()
        .filter(|c| c.contains("close_range"))
        .collect();
    assert_eq!(closes.len(), 3, "{closes:?}");
    let count = |c: &str| -> usize { c.rsplit(' ').next().unwrap().parse().unwrap() };
    // init's first close keeps the socket and the two fds; the workload's
    // the socket, Landlock's ruleset (until it enforces it) and the two
    // fds; init's last the socket only.
    assert!(count(closes[0]) >= 3, "{closes:?}");
    let ruleset = usize::from(plan.landlock_ruleset.is_some());
    assert_eq!(count(closes[1]), 3 + ruleset, "{closes:?}");
    assert_eq!(count(closes[2]), 1, "{closes:?}");
    let kept: Vec<&String> = rec.calls.iter().filter(|c| c.contains("keep fd")).collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept[0].ends_with("keep fd 5") && kept[1].ends_with("keep fd 9"));
    // hutch's default: both call setsid.
    let mut plan = plan_for(&spec, false, 0);
    let mut rec = Recorder::default();
    let _ = child::init(&mut rec, &mut plan, sock.as_fd());
    assert_eq!(rec.calls.iter().filter(|c| c.contains("setsid")).count(), 2);
}

/// `Spec::init = none`: hutch init's steps up to non-dumpable, then the
/// workload's own steps in init itself (no fork, no second setsid, no
/// signal blocking, no init seccomp, no reaper), ending in execve; its
/// failure is init's, with the workload's exit status.
#[test]
fn exec_in_place_runs_the_workload_steps_in_init() {
    let spec = test_spec();
    let mut plan = plan_for(&spec, false, 0);
    plan.exec_in_place = true;
    plan.inherited_fds = vec![7];
    let mut rec = Recorder::default();
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    let failure = match child::init(&mut rec, &mut plan, sock.as_fd()) {
        Err(Stop::Failed(f, None)) => f,
        Err(Stop::Failed(f, text)) => panic!("{f:?} {text:?}"),
        Err(Stop::SupervisorGone) => panic!("supervisor gone"),
        Ok(_) => panic!("init forked a workload"),
    };
    assert_eq!((failure.stage, failure.errno), (Stage::Exec, Errno::ENOENT));
    // The recorder's candidate resolves in the root and its execve says
    // ENOENT: what is missing is its interpreter ("cannot execute").
    assert!(failure.interpreter_missing);
    assert_eq!(failure.exit_status(), 126);
    let got = kinds(&rec.calls);
    let dumpable = got.iter().position(|k| k == "dumpable").expect("dumpable");
    assert_eq!(
        &got[dumpable..dumpable + 5],
        ["dumpable", "reset", "close_range", "keep", "open root"],
        "{:#?}",
        rec.calls
    );
    assert_eq!(got.last().map(String::as_str), Some("execve"), "{got:#?}");
    assert_eq!(rec.calls.iter().filter(|c| c.contains("setsid")).count(), 1);
    for absent in [
        "start workload",
        "block",
        "subreaper",
        "init seccomp",
        "send Started",
    ] {
        assert!(
            !rec.calls.iter().any(|c| c.contains(absent)),
            "{absent}: {:#?}",
            rec.calls
        );
    }
}

/// `namespaces.join.user_after_setup`: hutch init keeps the fd through its
/// first close, enters the namespace once the root is built (after the
/// last mount, before non-dumpable and the workload), sets the
/// parent-death signal again, checks the supervisor, and the workload
/// starts after.
#[test]
fn a_user_namespace_after_setup_is_entered_last_before_the_workload() {
    let spec = test_spec();
    let mut plan = plan_for(&spec, false, 0);
    let (ns, _other) = crate::sys::socket::seqpacket_pair().unwrap();
    plan.userns_after_setup = Some(ns);
    let mut rec = Recorder::default();
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    if let Err(Stop::Failed(f, text)) = child::init(&mut rec, &mut plan, sock.as_fd()) {
        panic!("{f:?} {text:?}");
    }
    assert!(plan.userns_after_setup.is_none(), "the fd is closed after");
    let calls = &rec.calls;
    let setns = pos_of(calls, "child setns user");
    let pivot = pos_of(calls, "pivot_root");
    assert!(pivot < setns, "{calls:#?}");
    assert_eq!(calls[setns + 1], "child pdeathsig", "{calls:#?}");
    assert_eq!(calls[setns + 2], "child supervisor alive", "{calls:#?}");
    assert!(setns < pos_of(calls, "child dumpable false"), "{calls:#?}");
    assert!(setns < pos_of(calls, "child start workload"), "{calls:#?}");
    // Entering a user namespace resets the bounding set: the workload
    // drops it, after.
    assert!(setns < pos_of(calls, "child capbset_drop"), "{calls:#?}");
    assert!(!plan.bounding_set_dropped);
    // Without it, no setns, and init drops the bounding set (once).
    let mut plan = plan_for(&spec, false, 0);
    let mut rec = Recorder::default();
    let _ = child::init(&mut rec, &mut plan, sock.as_fd());
    assert!(!rec.calls.iter().any(|c| c.ends_with("setns user")));
    assert!(plan.bounding_set_dropped);
    let drops = rec
        .calls
        .iter()
        .filter(|c| c.contains("capbset_drop"))
        .count();
    assert_eq!(drops, 41, "{:#?}", rec.calls);
    assert!(pos_of(&rec.calls, "child capbset_drop") < pos_of(&rec.calls, "child start workload"));
}

/// A created container with createContainer hooks
/// (`ChildPlan::pause_before_pivot`): the root is built, moved onto its
/// host directory, the staging tmpfs detached, `RootBuilt` sent and
/// `Pivot` awaited, all before the read-only remount and `pivot_root`.
/// Without the flag (every `hutch run`) the calls are exactly those of
/// the paused path minus these four: no extra syscall.
#[test]
fn create_container_hooks_get_a_pause_after_the_root_is_built_and_before_pivot_root() {
    let mut spec = test_spec();
    spec.root = Some(crate::spec::RootDir::new("/srv/bundle/rootfs"));
    spec.root_readonly = true;
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    let run = |pause: bool| {
        let mut plan = plan_for(&spec, false, 0);
        plan.pause_before_pivot = pause;
        let mut rec = Recorder::default();
        match child::init(&mut rec, &mut plan, sock.as_fd()) {
            Ok(_) => rec.calls,
            Err(Stop::Failed(f, text)) => panic!("{f:?} {text:?}"),
            Err(Stop::SupervisorGone) => panic!("supervisor gone"),
        }
    };
    let paused = run(true);
    let plain = run(false);
    let at = |what: &str| {
        paused
            .iter()
            .position(|c| c.starts_with(what))
            .unwrap_or_else(|| panic!("{what}: {paused:#?}"))
    };
    // The root source was opened (before the staging tmpfs covers /tmp);
    // the root is moved onto that very fd.
    let source = paused
        .iter()
        .find(|c| c.starts_with("open -100 /srv/bundle/rootfs "))
        .and_then(|c| c.rsplit(" = ").next())
        .unwrap_or_else(|| panic!("{paused:#?}"));
    let moved = paused
        .iter()
        .position(|c| c.starts_with("move_mount_at ") && c.ends_with(&format!(" {source} ")))
        .unwrap_or_else(|| panic!("the root moved onto {source}: {paused:#?}"));
    let pause = [
        moved,
        at("umount2 /tmp "),
        at("child send RootBuilt"),
        at("child recv Pivot"),
        // The read-only remount of the root: after the hooks, as runc's.
        moved
            + paused[moved..]
                .iter()
                .position(|c| c.starts_with("setattr ") && c.ends_with(" 0x1"))
                .unwrap_or_else(|| panic!("{paused:#?}")),
        at("pivot_root"),
    ];
    assert!(pause.windows(2).all(|w| w[0] < w[1]), "{paused:#?}");
    // The last build step (the root's mounts) comes before the pause.
    let last_mount = paused[..moved]
        .iter()
        .rposition(|c| c.starts_with("mount "))
        .unwrap();
    assert!(last_mount < moved);
    let without: Vec<&String> = paused
        .iter()
        .enumerate()
        .filter(|(i, _)| !pause[..4].contains(i))
        .map(|(_, c)| c)
        .collect();
    assert_eq!(without, plain.iter().collect::<Vec<_>>());
    for absent in ["RootBuilt", "Pivot", "umount2 /tmp"] {
        assert!(!plain.iter().any(|c| c.contains(absent)), "{absent}");
    }
}

/// A claim crosses the socket (the supervisor's `wire::claim::send`) and
/// is decoded by hutch init (`child::claim::decode`) intact.
mod claim_wire {
    use std::os::fd::OwnedFd;

    use crate::launch::child::claim::decode;
    use crate::launch::wire::claim::send;
    use crate::launch::wire::command::WireCommand;
    use crate::launch::wire::message::{self, Message};
    use crate::spec::default_profile;
    use crate::sys::{self, Errno};

    #[test]
    fn a_claim_round_trips_inline_and_through_a_memfd() {
        for big in [false, true] {
            let (a, b) = sys::socket::seqpacket_pair().unwrap();
            let mut spec = default_profile();
            spec.command = vec!["echo".into(), "x".repeat(if big { 100_000 } else { 10 })];
            let (plan, _) =
                crate::launch::prepare::prepare_command(&spec, None, false, Default::default())
                    .unwrap();
            let wire = WireCommand::of(&plan);
            let null = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
            let stdio = [null(), null(), null()];
            send(&a, &wire, true, big, [&stdio[0], &stdio[1], &stdio[2]]).unwrap();
            let Some(message::Incoming::Message(
                Message::Claim {
                    command,
                    report_started,
                    linger,
                },
                fds,
            )) = message::recv(&b).unwrap()
            else {
                panic!("not a claim")
            };
            assert_eq!(command.is_none(), big);
            let claimed = decode(command, report_started, linger, fds, 5).unwrap();
            assert!(claimed.report_started);
            assert_eq!(claimed.linger, big);
            assert_eq!(WireCommand::of(&claimed.command), wire);
            assert_eq!(claimed.command.non_default_signals, 5);
            assert!(claimed.command.stdio.fds.iter().all(Option::is_some));
        }
    }

    #[test]
    fn a_malformed_claim_is_refused() {
        let null = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let wire = WireCommand {
            candidates: vec!["/bin/true".into()],
            argv: vec!["true".into()],
            envp: vec![],
            cwd: b"/".to_vec(),
            umask: None,
        };
        assert!(matches!(
            decode(Some(wire.clone()), false, false, vec![null(), null()], 0),
            Err(Errno::EPROTO)
        ));
        assert!(matches!(
            decode(
                Some(wire.clone()),
                false,
                false,
                vec![null(), null(), null(), null()],
                0
            ),
            Err(Errno::EPROTO)
        ));
        let mut nul = wire.clone();
        nul.argv.push("a\0b".into());
        assert!(matches!(
            decode(Some(nul), false, false, vec![null(), null(), null()], 0),
            Err(Errno::EINVAL)
        ));
        assert!(decode(Some(wire), false, false, vec![null(), null(), null()], 0).is_ok());
    }
}

/// hutch init stays dumpable only for a front end that tells its pid
/// (bubblewrap's `child-pid`), in a user namespace of the sandbox's own,
/// and only while the workload can hold neither CAP_SYS_PTRACE nor all of
/// init's capabilities (the recorder's init holds every one).
#[test]
fn init_stays_dumpable_only_where_the_workload_cannot_reach_it() {
    let spec = test_spec();
    let dumpable = |plan: &ChildPlan| {
        let mut rec = Recorder::default();
        child::steps::init_stays_dumpable(&mut rec, plan)
    };
    let mut plan = plan_for(&spec, false, 0);
    assert!(!dumpable(&plan), "no front end asked");
    plan.init_joinable = true;
    assert!(dumpable(&plan));
    plan.caps = CapPlan::keeping(1 << 19, 40);
    assert!(!dumpable(&plan), "the workload keeps CAP_SYS_PTRACE");
    plan.caps = CapPlan::keeping(!(1 << 19), 40);
    assert!(dumpable(&plan), "init holds CAP_SYS_PTRACE, the workload not");
    plan.caps = CapPlan::keeping(1 << 21, 40);
    plan.own_userns = false;
    assert!(!dumpable(&plan), "a joined or the host's user namespace");
    plan.own_userns = true;
    plan.exec_in_place = true;
    assert!(!dumpable(&plan), "the command is pid 1");
}

/// `namespaces.join.mount`: hutch init keeps the fd through its first
/// close and enters the namespace after `Go`, before its first mount (the
/// slave `/`), so nothing of the root is built in the launcher's
/// namespace; without it, no setns.
#[test]
fn a_joined_mount_namespace_is_entered_before_the_first_mount() {
    let spec = test_spec();
    let mut plan = plan_for(&spec, false, 0);
    let (ns, _other) = crate::sys::socket::seqpacket_pair().unwrap();
    plan.mount_namespace = Some(ns);
    let mut rec = Recorder::default();
    let (sock, _peer) = crate::sys::socket::seqpacket_pair().unwrap();
    if let Err(Stop::Failed(f, text)) = child::init(&mut rec, &mut plan, sock.as_fd()) {
        panic!("{f:?} {text:?}");
    }
    assert!(plan.mount_namespace.is_none(), "the fd is closed after");
    let k = kinds(&rec.calls);
    let setns = k.iter().position(|c| c == "setns").expect("setns");
    assert_eq!(k[setns - 1], "recv", "{k:#?}");
    assert_eq!(k[setns + 1], "slave /", "{k:#?}");
    let mut plan = plan_for(&spec, false, 0);
    let mut rec = Recorder::default();
    let _ = child::init(&mut rec, &mut plan, sock.as_fd());
    assert!(!rec.calls.iter().any(|c| c.ends_with("setns mount")));
}
