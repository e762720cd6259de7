//! hutch::Pool: warm sandboxes from the library, as root and as uid 65534.
//! Each pooled command gets a sandbox of its own (fresh pid namespace,
//! /tmp, ipc, network namespace, execve), confined exactly as a cold one;
//! only the workspace carries over.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;

fn binary(who: As, tools: &TempDir) -> std::path::PathBuf {
    if who == As::Nobody {
        nobody_wrapper(tools.path())
    } else {
        hutch_bin()
    }
}

/// The default profile with `ws` as the workspace, its changes kept in
/// `changes` (a session's shape).
fn workspace_spec(ws: &std::path::Path, changes: &std::path::Path) -> hutch::Spec {
    let mut c = hutch::Command::new("true");
    c.workspace(ws).changes(changes).current_dir(ws);
    c.as_spec().clone()
}

const READY: Duration = Duration::from_secs(30);

/// What one command sees of what earlier ones left, then what it leaves
/// for the next: a file in /tmp, a SysV shm segment, a POSIX shm object,
/// an abstract socket held by a background process, a double-forked
/// daemon, and one more line in the workspace.
const PROBE: &str = r#"
echo "pid $$"
echo "procs" /proc/[0-9]*
echo "tmp $(ls -A /tmp | tr '\n' ' ')"
echo "shm $(ls -A /dev/shm | tr '\n' ' ')"
echo "sysv $(tail -n +2 /proc/sysvipc/shm | wc -l) $(tail -n +2 /proc/sysvipc/msg | wc -l) $(tail -n +2 /proc/sysvipc/sem | wc -l)"
echo "abstract $(grep -c ' @' /proc/net/unix)"
echo "fds" $(ls /proc/self/fd)
echo "stack $(grep -F '[stack]' /proc/self/maps | cut -d' ' -f1)"
echo "count $(wc -l < log)"
touch /tmp/left-behind
: > /dev/shm/left-behind
ipcmk -M 4096 > /dev/null
setsid sh -c 'sleep 1000 & exec sleep 1000' < /dev/null > /dev/null 2>&1 &
python3 -c 'import socket, time; s = socket.socket(socket.AF_UNIX); s.bind("\0hutch-left"); s.listen(); open("/tmp/bound", "w"); time.sleep(1000)' < /dev/null > /dev/null 2>&1 &
while [ ! -e /tmp/bound ]; do :; done
echo "abstract-now $(grep -c ' @' /proc/net/unix)"
echo line >> log
"#;

#[test]
fn consecutive_pooled_commands_share_nothing_but_the_workspace() {
    require!(
        have("python3") && have("ipcmk"),
        "python3 and ipcmk are needed"
    );
    for who in identities() {
        let tools = TempDir::new("warm-tools", As::Root);
        let ws = TempDir::new("warm-ws", who);
        write_as(&ws.path().join("log"), "", who);
        let keep = TempDir::new("warm-keep", who);
        let changes = keep.path().join("c");
        let spec = workspace_spec(ws.path(), &changes);
        let pool = hutch::Pool::with_binary(spec, 2, binary(who, &tools)).unwrap();
        assert!(pool.wait_ready(2, READY), "{who:?}: {:?}", pool.status());
        let mut stacks = BTreeSet::new();
        const N: usize = 20;
        for i in 0..N {
            let out = pool.command(["sh", "-c", PROBE]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.report.success(),
                "{who:?} #{i}: {:?}\n{text}\n{}",
                out.report,
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.report.warm, "{who:?} #{i}: served cold");
            let line = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
                    .unwrap_or_else(|| panic!("{who:?} #{i}: no {key:?} in {text}"))
                    .trim()
                    .to_string()
            };
            // A fresh pid namespace: the workload is pid 2 under hutch init,
            // and nothing else runs (the daemons of the last command died
            // with its sandbox).
            assert_eq!(line("pid"), "2", "{who:?} #{i}");
            assert_eq!(line("procs"), "/proc/1 /proc/2", "{who:?} #{i}");
            // A fresh /tmp (holding only the workspace's mount point: the
            // tests' workspaces are under the host's /tmp), /dev/shm, ipc
            // and network namespace.
            let ws_name = ws.path().file_name().unwrap().to_str().unwrap();
            assert_eq!(line("tmp"), ws_name, "{who:?} #{i}");
            assert_eq!(line("shm"), "", "{who:?} #{i}");
            assert_eq!(line("sysv"), "0 0 0", "{who:?} #{i}");
            assert_eq!(line("abstract"), "0", "{who:?} #{i}");
            assert_eq!(line("abstract-now"), "1", "{who:?} #{i}: the probe works");
            // Only stdio reach the workload (3 is the directory ls reads).
            assert_eq!(line("fds"), "0 1 2 3", "{who:?} #{i}");
            // A fresh execve: the stack is placed anew each time.
            stacks.insert(line("stack"));
            // The workspace carries over, as without a pool.
            assert_eq!(line("count"), i.to_string(), "{who:?} #{i}");
        }
        assert_eq!(stacks.len(), N, "{who:?}: ASLR bases repeat: {stacks:?}");
        assert_eq!(
            std::fs::read_to_string(changes.join("upper/log"))
                .unwrap()
                .lines()
                .count(),
            N
        );
        // The host workspace itself is untouched.
        assert_eq!(std::fs::read_to_string(ws.path().join("log")).unwrap(), "");
    }
}

/// The same probe of confinement from a cold and a warm sandbox of one
/// Spec: identical capabilities, no-new-privs, seccomp, Landlock, rlimits,
/// ids, mounts (point, options, type), hostname, interfaces and cgroup.
#[test]
fn a_warm_sandbox_is_confined_exactly_as_a_cold_one() {
    const CONFINEMENT: &str = r#"
grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status
cat /proc/self/limits
cat /proc/self/uid_map /proc/self/gid_map /proc/self/cgroup
awk '{ for (i = 7; $i != "-"; i++); print $5, $6, $(i + 1) }' /proc/self/mountinfo | sort
hostname
tail -n +3 /proc/net/dev | cut -d: -f1
cat /proc/sys/user/max_user_namespaces
ls / /dev
touch /etc/x 2>&1 | sed 's/.*: //'
echo nice $(cut -d' ' -f19 /proc/self/stat)
"#;
    for who in identities() {
        let tools = TempDir::new("warm-tools", As::Root);
        let ws = TempDir::new("warm-ws", who);
        let keep = TempDir::new("warm-keep", who);
        let spec = workspace_spec(ws.path(), &keep.path().join("c"));
        let mut cold = hutch::Command::from_spec(spec.clone());
        cold.spec_mut().command = vec!["sh".into(), "-c".into(), CONFINEMENT.into()];
        let cold = cold.hutch_binary(binary(who, &tools)).output().unwrap();
        assert!(cold.report.success(), "{who:?}: {:?}", cold.report);
        assert!(!cold.report.warm);
        let pool = hutch::Pool::with_binary(spec, 1, binary(who, &tools)).unwrap();
        let warm = pool.command(["sh", "-c", CONFINEMENT]).output().unwrap();
        assert!(warm.report.success(), "{who:?}: {:?}", warm.report);
        assert!(warm.report.warm);
        assert_eq!(
            String::from_utf8_lossy(&warm.stdout),
            String::from_utf8_lossy(&cold.stdout),
            "{who:?}"
        );
        assert!(cold.stdout.len() > 1000, "the probe printed its findings");
        // The same limits by the same mechanisms; each sandbox has a leaf
        // (and counters) of its own.
        let same = |e: &hutch::launch::Enforcement| {
            let mut e = e.clone();
            if let Some(l) = e.limits.as_mut() {
                l.cgroup = l.cgroup.as_ref().map(|_| "<leaf>".into());
                l.stats = None;
            }
            e
        };
        assert_eq!(
            same(&warm.report.enforced),
            same(&cold.report.enforced),
            "{who:?}"
        );
        assert_eq!(warm.report.unenforced, cold.report.unenforced, "{who:?}");
    }
}

#[test]
fn pooled_commands_report_exit_codes_timeouts_and_kills() {
    require!(can_launch_as(caller()).is_ok(), "cannot launch here");
    let mut spec = hutch::spec::default_profile();
    spec.command = vec!["true".into()];
    let pool = hutch::Pool::with_binary(spec, 2, hutch_bin()).unwrap();
    let r = pool.command(["sh", "-c", "exit 7"]).status().unwrap();
    assert_eq!((r.status, r.warm), (7, true), "{r:?}");
    let r = pool
        .command(["sh", "-c", "kill -TERM $$"])
        .status()
        .unwrap();
    assert_eq!((r.status, r.signal), (143, Some(libc::SIGTERM)), "{r:?}");
    let r = pool
        .command(["sleep", "100"])
        .timeout(Duration::from_millis(300))
        .status()
        .unwrap();
    assert_eq!(
        (r.status, r.reason),
        (124, hutch::Outcome::TimedOut),
        "{r:?}"
    );
    let r = pool.command(["no-such-program"]).status().unwrap();
    assert_eq!(r.status, 127, "{r:?}");
    // A kill ends the whole sandbox through its supervisor.
    let dir = TempDir::new("warm-kill", As::Root);
    let status = dir.path().join("status");
    let mut child = pool
        .command(["sleep", "100"])
        .status_file(&status)
        .spawn()
        .unwrap();
    wait_for_event(&status, "start", Duration::from_secs(20));
    child.kill().unwrap();
    let r = child.wait().unwrap();
    assert_eq!((r.status, r.reason), (137, hutch::Outcome::Killed), "{r:?}");
    // Environment and working directory are the command's own.
    let out = pool
        .command(["sh", "-c", "echo $X; pwd"])
        .env("X", "from-the-claim")
        .current_dir("/usr")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "from-the-claim\n/usr\n"
    );
    // Stdin reaches the workload.
    let mut child = pool
        .command(["cat"])
        .stdin(hutch::Redirect::Piped)
        .stdout(hutch::Redirect::Piped)
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin().unwrap(), b"through the claim\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through the claim\n");
}

/// The helpers this process started (`hutch __supervise`, its children).
fn helpers_of_this_process() -> Vec<i32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').nth(1).map(str::to_string));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid.as_deref() == Some(me.as_str())
                && cmdline.split(|b| *b == 0).any(|a| a == b"__supervise")
        })
        .collect()
}

/// The nice value of process `pid` (its main thread), from its stat.
fn nice_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(") ").unwrap();
    // Field 19; `rest` starts at field 3.
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

/// A sandbox built ahead is speculative work: where its priority can be
/// given back (CAP_SYS_NICE: root) the helper and hutch init build it at
/// nice 19, and a claim gives both the caller's priority back before the
/// command starts; elsewhere nothing changes. Either way the command runs
/// at the caller's priority (`a_warm_sandbox_is_confined_exactly_as_a_cold_one`
/// compares it with a cold launch's too).
#[test]
fn a_sandbox_is_built_in_the_background_and_its_command_runs_at_the_callers_priority() {
    let caller_nice = nice_of(std::process::id() as i32);
    for who in identities() {
        let tools = TempDir::new("warm-nice-tools", As::Root);
        let mut spec = hutch::spec::default_profile();
        spec.command = vec!["true".into()];
        let pool = hutch::Pool::with_binary(spec, 1, binary(who, &tools)).unwrap();
        assert!(pool.wait_ready(1, READY), "{who:?}: {:?}", pool.status());
        let helpers = helpers_of_this_process();
        assert_eq!(helpers.len(), 1, "{who:?}");
        let helper = helpers[0];
        let children =
            std::fs::read_to_string(format!("/proc/{helper}/task/{helper}/children")).unwrap();
        let init: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
        let build = if who == As::Root { 19 } else { caller_nice };
        assert_eq!((nice_of(helper), nice_of(init)), (build, build), "{who:?}");
        let out = pool
            .command(["sh", "-c", "cut -d' ' -f19 /proc/self/stat"])
            .output()
            .unwrap();
        assert!(
            out.report.success() && out.report.warm,
            "{who:?}: {:?}",
            out.report
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            caller_nice.to_string(),
            "{who:?}: the command runs at the caller's priority"
        );
    }
}

#[test]
fn dropping_the_pool_ends_every_warm_sandbox() {
    require!(can_launch_as(caller()).is_ok(), "cannot launch here");
    let mut spec = hutch::spec::default_profile();
    spec.command = vec!["true".into()];
    let pool = hutch::Pool::with_binary(spec, 3, hutch_bin()).unwrap();
    assert!(pool.wait_ready(3, READY), "{:?}", pool.status());
    assert_eq!(helpers_of_this_process().len(), 3);
    let status = pool.status();
    assert_eq!((status.size, status.ready, status.warming), (3, 3, 0));
    pool.resize(1);
    assert_eq!(pool.status().size, 1);
    wait_until(
        Duration::from_secs(10),
        "the extra sandboxes to end",
        || helpers_of_this_process().len() == 1,
    );
    drop(pool);
    // Drop reaps: nothing is left, not even a zombie.
    assert_eq!(helpers_of_this_process(), Vec::<i32>::new());
}

/// A library pool's sandbox serves one command: its claimer does not
/// give it back (a session's warm server does: docs/warm.md, "Resident
/// sandboxes"), so each command gets a sandbox of its own, and a pool
/// dropped while the finished commands' `Child`ren are still held ends at
/// once, its helpers reaped.
#[test]
fn a_library_pools_sandbox_serves_one_command() {
    require!(can_launch_as(caller()).is_ok(), "cannot launch here");
    let mut spec = hutch::spec::default_profile();
    spec.command = vec!["true".into()];
    let pool = hutch::Pool::with_binary(spec, 1, hutch_bin()).unwrap();
    let mut ids = BTreeSet::new();
    let mut held = Vec::new();
    for _ in 0..2 {
        assert!(pool.wait_ready(1, READY), "{:?}", pool.status());
        let mut child = pool.command(["true"]).spawn().unwrap();
        let report = child.wait().unwrap();
        assert!(report.success(), "{report:?}");
        ids.insert(report.sandbox_id.clone());
        held.push(child);
    }
    assert_eq!(ids.len(), 2, "one sandbox served both commands");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(pool);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("dropping the pool waited for helpers the held Children keep");
    drop(held);
    assert_eq!(helpers_of_this_process(), Vec::<i32>::new());
}

#[test]
fn a_pool_refuses_a_spec_it_cannot_warm() {
    let mut spec = hutch::spec::default_profile();
    spec.fs.push(hutch::spec::workspace_overlay(
        std::path::Path::new("/w"),
        None,
    ));
    spec.fs.push(hutch::spec::FsOp::Tmpfs {
        dest: "/w/target".into(),
        size: None,
        nr_inodes: None,
        mode: None,
    });
    let e = hutch::Pool::with_binary(spec, 1, hutch_bin())
        .err()
        .expect("refused");
    assert!(e.to_string().contains("inside or above"), "{e}");
}

/// Host processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<(i32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            text.contains(marker).then_some((pid, text))
        })
        .collect()
}

/// When a pooled command's report returns, no process of the command is
/// left: not the workload, not a background child, not a double-forked
/// daemon in a session of its own. Both with the report sent as soon as
/// hutch init reports the exit (no host upper: the default profile) and
/// with the report waiting for init's end (a workspace with a host upper).
#[test]
fn a_pooled_report_returns_once_every_process_of_the_command_is_gone() {
    for who in identities() {
        let tools = TempDir::new("warm-tools", As::Root);
        let ws = TempDir::new("warm-ws", who);
        let keep = TempDir::new("warm-keep", who);
        let mut plain = hutch::spec::default_profile();
        plain.command = vec!["true".into()];
        let with_upper = workspace_spec(ws.path(), &keep.path().join("c"));
        for (kind, spec) in [("no upper", plain), ("host upper", with_upper)] {
            let pool = hutch::Pool::with_binary(spec, 1, binary(who, &tools)).unwrap();
            for round in 0..5 {
                // Each round starts from a ready pool: this test is about
                // the pooled path's end, not about claims during a refill.
                assert!(
                    pool.wait_ready(1, READY),
                    "{who:?} {kind} #{round}: {:?}",
                    pool.status()
                );
                // Unique per round: every process of the command carries
                // it in its command line (a forked shell its script's).
                let marker = format!("{}{round}", std::process::id());
                let script = format!(
                    "setsid sh -c ': > /tmp/up; exec sleep 1000.{marker}' </dev/null >/dev/null 2>&1 &
                     sleep 1000.{marker} </dev/null >/dev/null 2>&1 &
                     while [ ! -e /tmp/up ]; do :; done; echo up"
                );
                let out = pool
                    .command(["sh", "-c", script.as_str()])
                    .output()
                    .unwrap();
                assert!(
                    out.report.success() && out.report.warm,
                    "{who:?} {kind} #{round}: {:?} {}",
                    out.report,
                    String::from_utf8_lossy(&out.stderr)
                );
                assert_eq!(String::from_utf8_lossy(&out.stdout), "up\n");
                assert_eq!(
                    processes_with(&format!("1000.{marker}")),
                    Vec::new(),
                    "{who:?} {kind} #{round}: processes of the command outlived its report"
                );
            }
        }
    }
}

/// Two commands of one pool at once, on a workspace whose changes are
/// kept on the host: the second waits (in its helper) until the first's
/// sandbox, and with it its overlay of the kept upper, is gone (an upper
/// is never mounted by two overlays at once), then sees what the first
/// wrote. Both served warm, and both cold (a pool of none: its cold
/// launches lock the upper as its claims do).
#[test]
fn concurrent_pooled_commands_on_a_kept_upper_take_turns() {
    for size in [2, 0] {
        for who in identities() {
            let warm = size > 0;
            let tools = TempDir::new("warm-turns-tools", As::Root);
            let ws = TempDir::new("warm-turns-ws", who);
            let keep = TempDir::new("warm-turns-keep", who);
            let changes = keep.path().join("c");
            let spec = workspace_spec(ws.path(), &changes);
            let pool = hutch::Pool::with_binary(spec, size, binary(who, &tools)).unwrap();
            assert!(pool.wait_ready(size, READY), "{who:?}: {:?}", pool.status());
            let mut first = pool
                .command(["sh", "-c", "echo one > a; read x || true"])
                .stdin(hutch::Redirect::Piped)
                .spawn()
                .unwrap();
            let stdin = first.stdin().unwrap();
            let written = changes.join("upper/a");
            wait_until(READY, "the first command's file", || written.exists());
            let second = pool
                .command(["cat", "a"])
                .stdout(hutch::Redirect::Piped)
                .spawn()
                .unwrap();
            let upper = changes.join("upper");
            wait_until(READY, "the second command to wait for the upper", || {
                flocks_on(&upper) == (1, 1)
            });
            assert!(first.try_wait().unwrap().is_none(), "{who:?}");
            drop(stdin);
            let one = first.wait().unwrap();
            assert!(one.success() && one.warm == warm, "{who:?}: {one:?}");
            let two = second.wait_with_output().unwrap();
            assert!(
                two.report.success() && two.report.warm == warm,
                "{who:?}: {:?}",
                two.report
            );
            assert_eq!(String::from_utf8_lossy(&two.stdout), "one\n", "{who:?}");
            // The last report may come before its sandbox's end: the lock
            // goes with it.
            wait_until(READY, "the upper's lock to go with the sandbox", || {
                flocks_on(&upper) == (0, 0)
            });
        }
    }
}

/// Two claims back to back on a pool of one: the second comes while the
/// refill is starting the replacement of the first, and takes that one
/// (waiting for the rest of its warm-up) rather than launching cold.
#[test]
fn a_claim_while_the_refill_starts_a_sandbox_is_served_warm() {
    require!(can_launch_as(caller()).is_ok(), "cannot launch here");
    let mut spec = hutch::spec::default_profile();
    spec.command = vec!["true".into()];
    let pool = hutch::Pool::with_binary(spec, 1, hutch_bin()).unwrap();
    for round in 0..5 {
        assert!(pool.wait_ready(1, READY), "#{round}: {:?}", pool.status());
        let mut first = pool
            .command(["cat"])
            .stdin(hutch::Redirect::Piped)
            .spawn()
            .unwrap();
        let second = pool.command(["true"]).status().unwrap();
        assert!(
            second.success() && second.warm,
            "#{round}: the second claim was served cold: {second:?}"
        );
        drop(first.stdin());
        let one = first.wait().unwrap();
        assert!(one.success() && one.warm, "#{round}: {one:?}");
    }
}
