//! hutch::tokio (cargo feature `tokio`), as root and as uid 65534: many
//! sandboxes from one current-thread runtime without blocking it, async
//! pipes, warm and cold pooled commands, and cancellation that leaves no
//! process, mount namespace, cgroup leaf or socket behind.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

fn binary(who: As, tools: &TempDir) -> PathBuf {
    if who == As::Nobody {
        nobody_wrapper(tools.path())
    } else {
        hutch_bin()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// 100 sandboxes run at once from one current-thread runtime. Each blocks
/// on its stdin until every one of them has started and a timer task has
/// ticked meanwhile: if awaiting a sandbox blocked the thread, the timer
/// could not tick and the sandboxes would never be released.
#[test]
fn a_hundred_concurrent_sandboxes_from_one_thread_do_not_block_it() {
    for who in identities() {
        let tools = TempDir::new("tokio-tools", As::Root);
        let bin = binary(who, &tools);
        runtime().block_on(async {
            let ticks = std::rc::Rc::new(std::cell::Cell::new(0u32));
            let ticker = {
                let ticks = ticks.clone();
                async move {
                    let mut every = tokio::time::interval(Duration::from_millis(5));
                    loop {
                        every.tick().await;
                        ticks.set(ticks.get() + 1);
                    }
                }
            };
            let work = async {
                const N: usize = 100;
                let mut children = Vec::with_capacity(N);
                for i in 0..N {
                    let mut c = hutch::tokio::Command::new("sh");
                    c.args(["-c", "echo ready; read x; echo \"$I $x\""])
                        .env("I", i.to_string())
                        .hutch_binary(&bin)
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped());
                    children.push(c.spawn().unwrap());
                }
                // Every sandbox runs (it said so on its pipe) ...
                let mut lines = Vec::with_capacity(N);
                for c in &mut children {
                    let mut out = tokio::io::BufReader::new(c.stdout.take().unwrap());
                    let mut line = String::new();
                    out.read_line(&mut line).await.unwrap();
                    assert_eq!(line, "ready\n", "{who:?}");
                    lines.push(out);
                }
                // ... and the timer keeps ticking while all of them wait.
                let before = ticks.get();
                while ticks.get() < before + 3 {
                    tokio::task::yield_now().await;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                for c in &mut children {
                    assert!(c.try_wait().unwrap().is_none(), "{who:?}: still waiting");
                    let mut stdin = c.stdin.take().unwrap();
                    stdin.write_all(b"go\n").await.unwrap();
                }
                let mut all = Vec::with_capacity(N);
                for (i, (mut c, mut out)) in children.into_iter().zip(lines).enumerate() {
                    all.push(async move {
                        let mut line = String::new();
                        out.read_line(&mut line).await.unwrap();
                        assert_eq!(line, format!("{i} go\n"));
                        let report = c.wait().await.unwrap();
                        assert!(report.success(), "{report:?}");
                        assert!(!report.warm);
                    });
                }
                join_all(all).await;
            };
            tokio::select! {
                () = work => {}
                () = ticker => unreachable!(),
            }
        });
    }
}

/// Await every future, polling them together on this task.
async fn join_all<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
    let mut set = Vec::from_iter(futures.into_iter().map(Box::pin));
    std::future::poll_fn(|cx| {
        set.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if set.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

#[test]
fn async_commands_and_pools_report_like_the_sync_ones() {
    for who in identities() {
        let tools = TempDir::new("tokio-tools", As::Root);
        let bin = binary(who, &tools);
        runtime().block_on(async {
            let out = hutch::tokio::Command::new("sh")
                .args(["-c", "echo out; echo err >&2; exit 3"])
                .hutch_binary(&bin)
                .output()
                .await
                .unwrap();
            assert_eq!(out.report.exit_code, Some(3), "{who:?}: {:?}", out.report);
            assert_eq!(
                (&out.stdout[..], &out.stderr[..]),
                (&b"out\n"[..], &b"err\n"[..])
            );

            let mut spec = hutch::spec::default_profile();
            spec.command = vec!["true".into()];
            let pool = hutch::tokio::Pool::with_binary(spec, 2, &bin).unwrap();
            assert!(
                pool.wait_ready(2, Duration::from_secs(30)).await,
                "{:?}",
                pool.status()
            );
            let out = pool
                .command(["sh", "-c", "echo $X"])
                .env("X", "pooled")
                .output()
                .await
                .unwrap();
            assert!(out.report.warm, "{who:?}: {:?}", out.report);
            assert_eq!(out.stdout, b"pooled\n");
            // More at once than the pool holds: each claim beyond it
            // takes the next sandbox the refill starts (waiting for its
            // warm-up), so every one runs warm.
            let mut all = Vec::new();
            let warm = std::rc::Rc::new(std::cell::Cell::new(0));
            for i in 0..6 {
                let mut c = pool.command(["sh", "-c", "echo $I"]);
                c.env("I", i.to_string());
                let mut child = c.spawn().unwrap();
                let warm = warm.clone();
                all.push(async move {
                    let report = child.wait().await.unwrap();
                    assert!(report.success(), "{report:?}");
                    warm.set(warm.get() + usize::from(report.warm));
                });
            }
            join_all(all).await;
            assert_eq!(warm.get(), 6, "{who:?}: {} of 6 warm", warm.get());
            // From a ready sandbox (a kill that reaches a sandbox still
            // warming up ends it without a report: docs/warm.md).
            assert!(
                pool.wait_ready(2, Duration::from_secs(30)).await,
                "{:?}",
                pool.status()
            );
            let mut sleeper = pool.command(["sleep", "1000"]).spawn().unwrap();
            sleeper.kill().await.unwrap();
            let report = sleeper.wait().await.unwrap();
            assert_eq!(report.reason, hutch::Outcome::Killed, "{report:?}");
        });
    }
}

/// What a running sandbox holds on the host: its pid 1, its mount
/// namespace, its cgroup leaf's name.
struct Held {
    init: std::os::fd::OwnedFd,
    init_pid: i32,
    mnt: u64,
    /// The mount namespace `mnt` names, held open: a freed namespace's
    /// inode number is the next one given (the kernel hands out the
    /// lowest free), so without it a pool's refill could take `mnt` and
    /// pass for what was left.
    _mnt_ns: std::fs::File,
    sandbox_id: String,
}

fn held(status: &Path) -> Held {
    let start = wait_for_event(status, "start", Duration::from_secs(30));
    let init_pid = start["pid"].as_i64().unwrap() as i32;
    let init = hutch::internals::sys::raw::pidfd_open(init_pid).unwrap();
    let mnt_ns = std::fs::File::open(format!("/proc/{init_pid}/ns/mnt")).unwrap();
    let mnt = std::os::unix::fs::MetadataExt::ino(&mnt_ns.metadata().unwrap());
    Held {
        init,
        init_pid,
        mnt,
        _mnt_ns: mnt_ns,
        sandbox_id: start["sandbox_id"].as_str().unwrap().to_string(),
    }
}

fn sockets_of_this_process() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Processes (anywhere on the host) in mount namespace `mnt`.
fn in_mount_namespace(mnt: u64) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
                .is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == mnt)
        })
        .collect()
}

/// Children of this process (the test's only children are helpers),
/// zombies included.
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
            ppid.as_deref() == Some(me.as_str())
        })
        .collect()
}

/// The sandbox is gone and nothing of it is left: pid 1 exited, no
/// process is in its mount namespace (so its mounts are gone), no cgroup
/// leaf, no helper (not even a zombie), no socket of ours.
async fn nothing_left(h: Held, sockets_before: usize) {
    let init =
        hutch::internals::sys::reactor::async_fd(h.init, tokio::io::Interest::READABLE).unwrap();
    // Killed now, not at its wall clock (120 s).
    let ended = tokio::time::timeout(Duration::from_secs(10), init.readable()).await;
    assert!(
        ended.is_ok(),
        "the sandbox still runs 10 s after its cancellation"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = in_mount_namespace(h.mnt);
        let helpers = helpers_of_this_process();
        if left.is_empty() && helpers.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "left behind: processes {left:?} in the sandbox's mount namespace, helpers {helpers:?} (init was {})",
            h.init_pid
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!Path::new("/sys/fs/cgroup").join(&h.sandbox_id).exists());
    assert_eq!(
        sockets_of_this_process(),
        sockets_before,
        "a socket is left open"
    );
}

#[test]
fn cancellation_kills_the_sandbox_and_leaves_nothing_behind() {
    for who in identities() {
        let tools = TempDir::new("tokio-tools", As::Root);
        let bin = binary(who, &tools);
        let dir = TempDir::new("tokio-cancel", who);
        runtime().block_on(async {
            let sockets = sockets_of_this_process();

            // Dropping a running Child.
            let status = dir.path().join("drop");
            let mut c = hutch::tokio::Command::new("sh");
            c.args(["-c", "sleep 1000 & exec sleep 1000"])
                .status_file(&status)
                .timeout(Duration::from_secs(120))
                .hutch_binary(&bin);
            let child = c.spawn().unwrap();
            let h = held(&status);
            drop(child);
            nothing_left(h, sockets).await;

            // A timeout around `status()` drops its future, and the Child
            // it owns.
            let status = dir.path().join("timeout");
            let mut c = hutch::tokio::Command::new("sleep");
            c.arg("1000")
                .status_file(&status)
                .timeout(Duration::from_secs(120))
                .hutch_binary(&bin);
            let path = status.clone();
            // Boxed, so that the timeout below owns (and drops) it.
            let mut run = Box::pin(async move { c.status().await });
            let watch = async move { held(&path) };
            // The command must have started before the timeout fires.
            let h = tokio::select! {
                // `run` first: its first poll spawns the sandbox.
                biased;
                r = &mut run => panic!("ended early: {:?}", r.map(|r| r.reason)),
                h = watch => h,
            };
            let timed = tokio::time::timeout(Duration::from_millis(50), run).await;
            assert!(timed.is_err(), "{who:?}: the command ran to its end");
            nothing_left(h, sockets).await;

            // A pooled command dropped mid-run: the same, and the pool
            // goes on serving.
            let mut spec = hutch::spec::default_profile();
            spec.command = vec!["true".into()];
            let pool = hutch::tokio::Pool::with_binary(spec, 1, &bin).unwrap();
            assert!(pool.wait_ready(1, Duration::from_secs(30)).await);
            let status = dir.path().join("pooled");
            let child = pool
                .command(["sleep", "1000"])
                .timeout(Duration::from_secs(120))
                .status_file(&status)
                .spawn()
                .unwrap();
            let h = held(&status);
            let mnt = h.mnt;
            drop(child);
            let init =
                hutch::internals::sys::reactor::async_fd(h.init, tokio::io::Interest::READABLE)
                    .unwrap();
            let ended = tokio::time::timeout(Duration::from_secs(10), init.readable()).await;
            assert!(ended.is_ok(), "{who:?}: the pooled sandbox still runs");
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while !in_mount_namespace(mnt).is_empty() {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{who:?}: sandbox left"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let report = pool.command(["true"]).status().await.unwrap();
            assert!(report.success(), "{report:?}");
        });
    }
}

/// hutch::tokio::Session: commands awaited, their changes kept in the
/// session; a dropped command is killed, and the session's lock is free
/// for the next one. In this process's own identity (a session belongs to
/// the user who opens it), so root in CI.
#[test]
fn async_session_commands_persist_and_cancel() {
    let who = caller();
    require!(can_launch_as(who).is_ok(), can_launch_as(who).unwrap_err());
    let t = TempDir::new("tokio-session", who);
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("log"), "").unwrap();
    let state = t.path().join("state");
    let out = hutch_as(
        who,
        t.path(),
        &[
            "session",
            "--state-dir",
            state.to_str().unwrap(),
            "create",
            "--from",
            src.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    let dir = hutch::StateDir::open(&state).unwrap();
    let session = hutch::tokio::Session::new(dir.open_session(&id).unwrap());
    runtime().block_on(async {
        let mut spec = session.base_spec();
        spec.command = vec!["sh".into(), "-c".into(), "echo one >> log".into()];
        let record = session.run(spec).await.unwrap();
        assert!(record.report.success(), "{:?}", record.report);

        let mut spec = session.base_spec();
        spec.command = vec!["sleep".into(), "1000".into()];
        spec.limits.wall_clock = Some(hutch::spec::Duration(Duration::from_secs(120)));
        let started = tokio::time::Instant::now();
        let timed = tokio::time::timeout(Duration::from_millis(500), session.run(spec)).await;
        assert!(timed.is_err());
        // The lock is free again once the killed command has recorded its
        // end; a session command fails `Busy` while another holds it.
        let mut spec = session.base_spec();
        spec.command = vec!["sh".into(), "-c".into(), "echo two >> log".into()];
        let record = loop {
            match session.run(spec.clone()).await {
                Err(hutch::workspace::WorkspaceError::Busy(_)) => {
                    assert!(started.elapsed() < Duration::from_secs(30), "still busy");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => break other.unwrap(),
            }
        };
        assert!(record.report.success(), "{:?}", record.report);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the cancelled command ran on"
        );
    });
    let session = session.into_sync().expect("no command runs");
    let log = session.read(Path::new("log"), 1 << 10).unwrap();
    assert_eq!(log, b"one\ntwo\n");
    let audit = String::from_utf8(session.audit_log().unwrap()).unwrap();
    assert!(
        audit.contains("\"reason\":\"killed\""),
        "the cancelled command's end is audited: {audit}"
    );
}
