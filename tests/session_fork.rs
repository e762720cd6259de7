//! Sessions that branch and undo (issue 36): provision, snapshot, fork N
//! children that each try their own fix from that one prepared state;
//! rollback after a destructive command; layers shared, never copied, and
//! removed by their last user; forks wait for the parent's lock; a hostile
//! child reaches neither its siblings nor its parent.

mod common;
mod session_prod_support;
mod session_support;

use std::path::Path;

use anyhow::Result;
use session_prod_support::*;

use crate::common::can_launch_as;

/// The session's entry of `session list`.
fn listed(w: &World, id: &str) -> Result<serde_json::Value> {
    let all = lines(&ok(&w.session(&["list"]))?)?;
    all.into_iter()
        .find(|l| l["id"] == id)
        .ok_or_else(|| anyhow::anyhow!("{id} is not listed"))
}

fn best_of_n(who: As) -> Result<()> {
    let w = World::new("fork-best-of-n", who);
    let repo_dir = w.path("repo");
    let rev = repo(
        &w,
        &repo_dir,
        &[
            (".gitignore", ".deps/\n"),
            ("requirements.txt", "requests\n"),
            ("value.sh", "VALUE=0\n"),
            (
                "test.sh",
                ". ./value.sh\n[ \"$VALUE\" -ge 1 ] && grep -q urllib3 requirements.txt && test -f .deps/pkg/ok\n",
            ),
        ],
    )?;
    let parent = w.create(&["--from-git", repo_dir.to_str().unwrap(), "--rev", &rev])?;
    // Provisioning: ignored dependencies and a tracked pin.
    ok(&w.session(&[
        "run",
        &parent,
        "--",
        "sh",
        "-c",
        "mkdir -p .deps/pkg && echo 1 > .deps/pkg/ok && echo urllib3==2 >> requirements.txt",
    ]))?;
    let snap = w.json(&["snapshot", &parent, "--name", "provisioned"])?;
    assert_eq!(snap["id"], 1);
    assert_eq!(snap["name"], "provisioned");
    assert_eq!(snap["kind"], "snapshot");
    assert_eq!(snap["files"], 2, "{snap}");
    let forked = w.json(&["fork", &parent, "--from", "provisioned", "--count", "4"])?;
    assert_eq!(forked["snapshot"], 1);
    let children: Vec<String> = forked["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert_eq!(children.len(), 4);
    for (i, child) in children.iter().enumerate() {
        let value = format!("VALUE={}", i + 1);
        ok(&w.session(&[
            "run",
            child,
            "--",
            "sh",
            "-c",
            &format!("echo {value} > value.sh && sh test.sh"),
        ]))?;
        let diff = ok(&w.session(&["diff", child]))?;
        assert!(diff.contains(&format!("+{value}")), "{diff}");
        assert!(diff.contains("+urllib3==2"), "inherited: {diff}");
        for j in 0..4 {
            if j != i {
                assert!(!diff.contains(&format!("+VALUE={}", j + 1)), "{diff}");
            }
        }
        assert!(!diff.contains(".deps"), "{diff}");
        w.applies_to_fresh_checkout(&repo_dir, &rev, &diff)?;
        let own = ok(&w.session(&[
            "diff",
            child,
            "--since",
            if i % 2 == 0 { "1" } else { "provisioned" },
            "--format",
            "stat",
        ]))?;
        assert!(
            own.contains("value.sh") && own.contains("1 file changed"),
            "{own}"
        );
        let info = listed(&w, child)?;
        assert_eq!(info["parent"], parent.as_str());
        let snaps = w.json(&["snapshots", child])?;
        assert_eq!(snaps["snapshots"][0]["session"], parent.as_str());
        let audit = w.audit(child)?;
        assert_eq!(audit[0]["event"], "create");
        assert_eq!(audit[0]["parent"], parent.as_str());
    }
    // The parent is unchanged: its tests still fail, its diff holds only
    // the provisioning.
    let o = w.session(&["run", &parent, "--", "sh", "test.sh"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let diff = ok(&w.session(&["diff", &parent]))?;
    assert!(
        diff.contains("+urllib3==2") && !diff.contains("+VALUE"),
        "{diff}"
    );
    let audit = w.audit(&parent)?;
    assert!(audit.iter().any(|l| l["event"] == "snapshot"));
    assert!(
        audit
            .iter()
            .any(|l| l["event"] == "fork" && l["children"].as_array().unwrap().len() == 4)
    );
    // Closing the parent while a child runs a command leaves the child
    // working.
    let status = w.path("child-status");
    let mut bg = w.spawn_session(&[
        "run",
        &children[0],
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "cat requirements.txt value.sh > seen.txt; sh test.sh",
    ]);
    wait_for_event(&status, "start", READY);
    ok(&w.session(&["close", &parent]))?;
    let o = bg.0.take().unwrap().wait_with_output()?;
    assert!(o.status.success(), "{o:?}");
    let seen = ok(&w.session(&["read", &children[0], "seen.txt"]))?;
    assert_eq!(seen, "requests\nurllib3==2\nVALUE=1\n");
    ok(&w.session(&["run", &children[1], "--", "sh", "test.sh"]))?;
    // A child forks in turn (its baseline and layers shared again).
    let grand = w.json(&["fork", &children[1]])?;
    let grand = grand["children"][0].as_str().unwrap().to_string();
    ok(&w.session(&["run", &grand, "--", "sh", "test.sh"]))?;
    assert!(ok(&w.session(&["diff", &grand]))?.contains("+VALUE=2"));
    for c in children.iter().chain([&grand]) {
        ok(&w.session(&["close", c]))?;
    }
    ok(&w.session(&["gc", "--older-than", "0s"]))?;
    w.state_is_empty()
}

as_root_and_unprivileged!(best_of_n: best_of_n_as_root, best_of_n_unprivileged);

/// Every entry of the workspace: path, type, mode, size, link target,
/// and the sha256 of each file (listed inside the sandbox).
const LISTING: &str = "find . -path ./.listing -prune -o -printf '%p %y %m %s %l\\n' | sort; \
     find . -type f -exec sha256sum {} + | sort";

fn rollback_restores(who: As) -> Result<()> {
    let w = World::new("fork-rollback", who);
    let src = w.tree(
        "src",
        &[
            ("a.txt", "a\n"),
            ("d/old", "old\n"),
            ("d/sub/deep", "deep\n"),
            ("gone/x", "x\n"),
            ("run.sh", "#!/bin/sh\n"),
        ],
    )?;
    std::os::unix::fs::symlink("a.txt", src.join("link"))?;
    w.own(&src);
    let id = w.create(&["--from", src.to_str().unwrap()])?;
    // Deletions (whiteouts), a replaced directory (opaque), a new link,
    // changed modes, a new file: then snapshot.
    ok(&w.session(&[
        "run",
        &id,
        "--",
        "sh",
        "-c",
        "rm -rf gone a.txt && rm -rf d && mkdir d && echo new > d/new && \
         ln -s d/new newlink && chmod 700 run.sh && echo b > b.txt && chmod 600 b.txt",
    ]))?;
    let before = ok(&w.session(&["run", &id, "--", "sh", "-c", LISTING]))?;
    assert!(before.contains("./newlink l 777 5 d/new"), "{before}");
    assert!(
        !before.contains("./d/old") && !before.contains("./gone"),
        "{before}"
    );
    ok(&w.session(&["snapshot", &id, "--name", "good"]))?;
    // A second snapshot, then the destructive command.
    ok(&w.session(&["run", &id, "--", "sh", "-c", "echo later > later.txt"]))?;
    assert_eq!(ok(&w.session(&["snapshot", &id]))?.trim(), "2");
    ok(&w.session(&[
        "run",
        &id,
        "--",
        "sh",
        "-c",
        "find . -mindepth 1 -delete && echo junk > junk",
    ]))?;
    let r = w.json(&["rollback", &id, "good"])?;
    assert_eq!(r["id"], 1);
    // The discarded upper was only renamed aside (its removal is off the
    // rollback's path) ...
    let aside = || -> Result<usize> {
        Ok(std::fs::read_dir(w.state.join(&id))?
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("discarded-"))
            })
            .count())
    };
    assert_eq!(aside()?, 1, "the discarded upper is set aside");
    let after = ok(&w.session(&["run", &id, "--", "sh", "-c", LISTING]))?;
    assert_eq!(after, before);
    let snaps = w.json(&["snapshots", &id])?;
    assert_eq!(snaps["snapshots"].as_array().unwrap().len(), 1, "{snaps}");
    assert!(w.audit(&id)?.iter().any(|l| l["event"] == "rollback"));
    // The diff still starts at the baseline (a snapshot is not a seal).
    let stat = ok(&w.session(&["diff", &id, "--format", "stat"]))?;
    assert!(stat.contains("b.txt") && stat.contains("a.txt"), "{stat}");
    // ... and removed by the next freeze.
    ok(&w.session(&["snapshot", &id]))?;
    assert_eq!(aside()?, 0, "the next snapshot removed the discarded upper");
    // Killed at each point of a snapshot or a rollback: the next
    // operation finds the session before or after it, never between.
    for (verb, point, done) in [
        ("snapshot", "seal-renamed", false),
        ("snapshot", "seal-fresh-upper", false),
        ("snapshot", "seal-committed", true),
        ("rollback", "rollback-journaled", true),
        ("rollback", "rollback-committed", true),
    ] {
        ok(&w.session(&["run", &id, "--", "sh", "-c", "echo crash > crash.txt"]))?;
        let layers = w.json(&["snapshots", &id])?["snapshots"]
            .as_array()
            .unwrap()
            .len();
        let args: Vec<&str> = match verb {
            "snapshot" => vec!["snapshot", &id],
            _ => vec!["rollback", &id, "1"],
        };
        let o = w
            .session_command(&args)
            .env("HUTCH_FAULT", point)
            .output()?;
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&o.status),
            Some(9),
            "{point}: {o:?}"
        );
        let now = w.json(&["snapshots", &id])?["snapshots"]
            .as_array()
            .unwrap()
            .len();
        let crash = w.session(&["read", &id, "crash.txt"]);
        match (verb, done) {
            ("snapshot", false) => assert_eq!(now, layers, "{point}"),
            ("snapshot", true) => assert_eq!(now, layers + 1, "{point}"),
            _ => {
                assert_eq!(now, 1, "{point}");
                assert!(!crash.status.success(), "{point}: rolled back");
            }
        }
        if verb == "snapshot" {
            assert_eq!(ok(&crash)?, "crash\n", "{point}");
        }
        let after = ok(&w.session(&["run", &id, "--", "sh", "-c", "rm -f crash.txt"]));
        after?;
        ok(&w.session(&["rollback", &id, "1"]))?;
        assert_eq!(
            ok(&w.session(&["run", &id, "--", "sh", "-c", LISTING]))?,
            before,
            "{point}"
        );
    }
    ok(&w.session(&["close", &id]))?;
    w.state_is_empty()
}

as_root_and_unprivileged!(rollback_restores: rollback_restores_every_byte_as_root, rollback_restores_every_byte_unprivileged);

/// A fork while the parent runs a command waits for it: the child starts
/// from what the command left, never from the middle of it.
fn fork_waits(who: As) -> Result<()> {
    let w = World::new("fork-waits", who);
    let src = w.tree("src", &[("f", "base\n")])?;
    w.own(&src);
    let id = w.create(&["--from", src.to_str().unwrap()])?;
    let status = w.path("status");
    let mut bg = w.spawn_session(&[
        "run",
        &id,
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo during > f; sleep 1; echo after > f",
    ]);
    wait_for_event(&status, "start", READY);
    let forked = ok(&w.session(&["fork", &id]))?;
    let child = forked.trim();
    let o = bg.0.take().unwrap().wait_with_output()?;
    assert!(o.status.success(), "{o:?}");
    assert_eq!(ok(&w.session(&["read", child, "f"]))?, "after\n");
    for s in [&id, child] {
        ok(&w.session(&["close", s]))?;
    }
    w.state_is_empty()
}

as_root_and_unprivileged!(fork_waits: fork_waits_for_the_parent_lock_as_root, fork_waits_for_the_parent_lock_unprivileged);

/// A hostile child: links planted towards its siblings' and parent's
/// state and the host, a FIFO, a 1500-deep tree, many files; snapshot,
/// diff, rollback and fork of it work or fail cleanly, and nothing of it
/// reaches the sibling or the parent.
fn hostile_child(who: As) -> Result<()> {
    let w = World::new("fork-hostile", who);
    let src = w.tree("src", &[("a.txt", "a\n")])?;
    w.own(&src);
    let parent = w.create(&["--from", src.to_str().unwrap()])?;
    ok(&w.session(&["run", &parent, "--", "sh", "-c", "echo p > p.txt"]))?;
    let forked = ok(&w.session(&["fork", &parent, "--count", "2"]))?;
    let kids: Vec<&str> = forked.lines().collect();
    let (bad, good) = (kids[0], kids[1]);
    let state = w.state.display().to_string();
    let script = format!(
        "rm a.txt && ln -s /etc/passwd a.txt && ln -s {state}/{good}/upper sib && \
         ln -s {state}/.layers layers && ln -s ../../.. up && mkfifo fifo && \
         mkdir many && (cd many && seq 3000 | sed 's/^/f/' | xargs touch) && \
         deep=$(printf 'd/%.0s' $(seq 1500)) && mkdir -p $deep && echo leaf > ${{deep}}leaf"
    );
    ok(&w.session(&["run", bad, "--", "sh", "-c", &script]))?;
    // Its snapshot, diff and rollback (the tree walked by hutch).
    let snap = w.session(&["snapshot", bad]);
    assert!(
        snap.status.success() || snap.status.code() == Some(125),
        "{snap:?}"
    );
    if !snap.status.success() {
        assert_eq!(stderr(&snap).lines().count(), 1, "{snap:?}");
    }
    let diff = w.session(&["diff", bad, "--format", "stat"]);
    assert!(diff.status.code().is_some(), "{diff:?}");
    let grand = ok(&w.session(&["fork", bad]))?;
    let grand = grand.trim().to_string();
    ok(&w.session(&[
        "run",
        &grand,
        "--",
        "sh",
        "-c",
        "rm -rf many; test -p fifo && test -f $(printf 'd/%.0s' $(seq 1500))leaf",
    ]))?;
    // hutch never follows the planted link.
    let o = w.session(&["read", bad, "a.txt"]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    ok(&w.session(&["rollback", bad, "1"]))?;
    // The layer the rollback dropped stays for the fork that uses it.
    ok(&w.session(&[
        "run",
        &grand,
        "--",
        "sh",
        "-c",
        "test -p fifo && test -L sib",
    ]))?;
    // Nothing reached the sibling or the parent.
    for s in [good, parent.as_str()] {
        assert_eq!(ok(&w.session(&["read", s, "a.txt"]))?, "a\n");
        let stat = ok(&w.session(&["diff", s, "--format", "stat", "--since", "baseline"]))?;
        assert!(
            stat.contains("p.txt") && stat.contains("1 file changed"),
            "{s}: {stat}"
        );
        let ls = ok(&w.session(&["run", s, "--", "sh", "-c", "ls -A"]))?;
        assert_eq!(ls, "a.txt\np.txt\n", "{s}");
    }
    for s in [bad, good, &parent, &grand] {
        ok(&w.session(&["close", s]))?;
    }
    w.state_is_empty()
}

as_root_and_unprivileged!(hostile_child: hostile_child_reaches_no_sibling_as_root, hostile_child_reaches_no_sibling_unprivileged);

/// The library face (`hutch::{StateDir, Session, ForkOptions}`), no
/// sandbox: snapshot, fork, rollback and the shared layers' end, through
/// the file operations.
#[test]
fn library_snapshot_fork_rollback() -> Result<()> {
    let t = Tmp::new("fork-library");
    let src = t.0.join("src");
    std::fs::create_dir(&src)?;
    std::fs::write(src.join("a.txt"), "a\n")?;
    let state_path = t.0.join("state");
    let state = hutch::StateDir::open(&state_path)?;
    let mut s = state.create(&hutch::CreateOptions::new(hutch::Source::Dir {
        path: src.clone(),
    }))?;
    s.write(Path::new("b.txt"), &mut &b"b\n"[..], 1024)?;
    let snap = s.snapshot(Some("one"))?;
    assert_eq!((snap.id, snap.files, snap.bytes), (1, 1, 2));
    assert!(s.snapshot(Some("one")).is_err(), "names are unique");
    let report = state.fork(
        s.id(),
        &hutch::ForkOptions {
            from: Some("one".into()),
            count: 2,
            ..hutch::ForkOptions::default()
        },
    )?;
    assert_eq!(report.children.len(), 2);
    let mut kid = state.open_session(&report.children[0])?;
    assert_eq!(kid.info.parent.as_deref(), Some(s.id()));
    assert_eq!(kid.read(Path::new("b.txt"), 16)?, b"b\n");
    kid.write(Path::new("b.txt"), &mut &b"kid\n"[..], 1024)?;
    assert_eq!(s.read(Path::new("b.txt"), 16)?, b"b\n");
    s.write(Path::new("c.txt"), &mut &b"c\n"[..], 1024)?;
    s.rollback("1")?;
    assert!(s.read(Path::new("c.txt"), 16).is_err());
    let parent = s.id().to_string();
    drop(s);
    assert!(state.close(&parent, false)?);
    assert_eq!(kid.read(Path::new("b.txt"), 16)?, b"kid\n");
    let sibling = state.open_session(&report.children[1])?;
    assert_eq!(sibling.read(Path::new("b.txt"), 16)?, b"b\n");
    assert_eq!(sibling.read(Path::new("a.txt"), 16)?, b"a\n");
    drop((kid, sibling));
    for c in &report.children {
        state.close(c, false)?;
    }
    state.gc(std::time::Duration::ZERO)?;
    assert_eq!(std::fs::read_dir(&state_path)?.count(), 0);
    Ok(())
}

/// A fork can be warm (`fork --warm N`: each child's server, its commands
/// served from it), and a rollback stops the session's warm sandboxes
/// (they staged the upper it discards): the next command launches cold
/// and sees the rolled-back workspace.
fn warm_fork(who: As) -> Result<()> {
    let w = World::new("fork-warm", who);
    let src = w.tree("src", &[("a.txt", "a\n")])?;
    w.own(&src);
    let parent = w.create(&["--from", src.to_str().unwrap()])?;
    ok(&w.session(&["run", &parent, "--", "sh", "-c", "echo p > p.txt"]))?;
    let child = ok(&w.session(&["fork", &parent, "--warm", "1"]))?;
    let child = child.trim().to_string();
    ok(&w.session(&["warm", &child, "--ready", "--timeout", "60s"]))?;
    let status = w.path("status");
    ok(&w.session(&[
        "run",
        &child,
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "cat p.txt && echo c > c.txt",
    ]))?;
    assert_eq!(common::exit_report(&status)["warm"], true);
    // The pool refilled with a sandbox over the upper holding c.txt.
    ok(&w.session(&["warm", &child, "--ready", "--timeout", "60s"]))?;
    ok(&w.session(&["rollback", &child, "1"]))?;
    let o = w.session(&["warm", &child, "--ready"]);
    assert_eq!(o.status.code(), Some(125), "the warm server is gone: {o:?}");
    ok(&w.session(&[
        "run",
        &child,
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "test ! -e c.txt && cat p.txt",
    ]))?;
    assert_eq!(common::exit_report(&status)["warm"], false);
    for s in [&parent, &child] {
        ok(&w.session(&["close", s]))?;
    }
    w.state_is_empty()
}

as_root_and_unprivileged!(warm_fork: warm_fork_and_rollback_as_root, warm_fork_and_rollback_unprivileged);

/// 80 snapshots, each changing, deleting or recreating files (hutch's
/// whiteouts from `session rm`, the overlay's from commands, opaque
/// directories, symlinks, modes, hard links), with a compaction depth of
/// 4: the stack is compacted every few snapshots, and the tree stays the
/// one it was before each compaction, byte for byte; forks taken
/// mid-chain keep their tree while the parent's layers under them are
/// merged; a merged snapshot can no longer be rolled back to; closing
/// every session leaves nothing.
fn compaction_keeps_the_tree(who: As) -> Result<()> {
    let w = World::new("fork-compact", who);
    let src = w.tree("src", &[("base.txt", "base\n"), ("dir/sub/deep", "deep\n")])?;
    std::os::unix::fs::symlink("base.txt", src.join("link"))?;
    w.own(&src);
    let id = w.create(&["--from", src.to_str().unwrap(), "--compact-depth", "4"])?;
    let listing = |sid: &str| ok(&w.session(&["run", sid, "--", "sh", "-c", LISTING]));
    let mut checked = Vec::new();
    let mut forks = Vec::new();
    for k in 1..=80usize {
        match k % 5 {
            0 => {
                // A command: a replaced directory (opaque), a deletion, a
                // link, a mode, hard links.
                ok(&w.session(&[
                    "run",
                    &id,
                    "--",
                    "sh",
                    "-c",
                    &format!(
                        "rm -rf dir && mkdir -p dir/sub && echo {k} > dir/sub/v{k} && \
                         rm -f f{} && ln -sf f{} l{} && {{ [ -e base.txt ] || echo re > base.txt; }} && \
                         chmod 0{} base.txt && \
                         echo h{k} > h1 && ln -f h1 h2",
                        (k + 2) % 7,
                        k % 7,
                        k % 3,
                        [600, 644, 755][k % 3]
                    ),
                ]))?;
            }
            1 | 3 => w.write(&id, &format!("f{}", k % 7), &format!("{k}\n"))?,
            2 => w.write(&id, &format!("dir/sub/w{}", k % 4), &format!("w{k}\n"))?,
            _ => {
                // hutch's own whiteout over what a lower layer holds.
                let _ = w.session(&["rm", &id, &format!("f{}", (k + 3) % 7)]);
                ok(&w.session(&["rm", &id, &format!("dir/sub/w{}", (k + 1) % 4)]))
                    .or_else(|_| ok(&w.session(&["rm", &id, "base.txt"])))
                    .ok();
            }
        }
        let keep = matches!(k, 5 | 20 | 50 | 80);
        let before = if keep { Some(listing(&id)?) } else { None };
        let snap = w.json(&["snapshot", &id])?;
        assert_eq!(snap["id"], k);
        if let Some(before) = before {
            assert_eq!(listing(&id)?, before, "snapshot {k}");
            if k == 20 || k == 50 {
                let c = w.json(&["fork", &id, "--from", &k.to_string()])?;
                forks.push((
                    c["children"][0].as_str().unwrap().to_string(),
                    before.clone(),
                ));
            }
            checked.push((k, before));
        }
    }
    let snaps = w.json(&["snapshots", &id])?["snapshots"].clone();
    let snaps = snaps.as_array().unwrap();
    assert_eq!(snaps.len(), 80);
    let layers = snaps.iter().filter(|s| s["merged_into"].is_null()).count();
    assert!((2..=4).contains(&layers), "{layers} layers left");
    assert!(w.audit(&id)?.iter().any(|l| l["event"] == "compact"));
    // A merged snapshot is gone as a state of its own.
    let merged = snaps.iter().find(|s| !s["merged_into"].is_null()).unwrap();
    let o = w.session(&["rollback", &id, &merged["id"].to_string()]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(stderr(&o).contains("merged into layer"), "{}", stderr(&o));
    // Killed while compacting: the next operation finds the stack before
    // (the half-made layer removed) or after it.
    let last = &checked.last().unwrap().1;
    for (point, layers_after) in [("compact-built", layers), ("compact-committed", 1)] {
        let o = w
            .session_command(&["compact", &id])
            .env("HUTCH_FAULT", point)
            .output()?;
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&o.status),
            Some(9),
            "{point}: {o:?}"
        );
        assert_eq!(&listing(&id)?, last, "{point}");
        let now = w.json(&["snapshots", &id])?["snapshots"].clone();
        let now = now.as_array().unwrap();
        let left = now.iter().filter(|s| s["merged_into"].is_null()).count();
        assert_eq!(left, layers_after, "{point}");
    }
    assert!(
        w.audit(&id)?
            .iter()
            .any(|l| l["event"] == "compact-rolled-back")
    );
    // Explicit compaction to one layer; the tree is still the same.
    let r = w.json(&["compact", &id])?;
    assert_eq!(r["layers_after"], 1, "{r}");
    assert_eq!(&listing(&id)?, last);
    assert!(
        ok(&w.session(&["run", &id, "--", "sh", "-c", "test h1 -ef h2 && echo same"]))?
            .contains("same")
    );
    // The forks still see the state they were made from.
    for (child, want) in &forks {
        assert_eq!(&listing(child)?, want, "fork {child}");
    }
    ok(&w.session(&["close", &id]))?;
    for (child, want) in &forks {
        assert_eq!(
            &listing(child)?,
            want,
            "fork {child} after the parent closed"
        );
        ok(&w.session(&["close", child]))?;
    }
    ok(&w.session(&["gc", "--older-than", "0s"]))?;
    w.state_is_empty()
}

as_root_and_unprivileged!(compaction_keeps_the_tree: compaction_keeps_the_tree_as_root, compaction_keeps_the_tree_unprivileged);

/// A stack of 40 frozen layers (no compaction below the depth of 60)
/// still runs commands: a root launch hands one idmapped mount per layer
/// to the sandbox in one message, which held at most 16 fds before (every
/// command of a stack deeper than ~14 layers failed with EMSGSIZE).
/// (Unprivileged launches hand no idmapped layers: root only.)
fn deep_stack_runs(who: As) -> Result<()> {
    let w = World::new("fork-deep", who);
    let src = w.tree("src", &[("f0", "0\n")])?;
    w.own(&src);
    let id = w.create(&["--from", src.to_str().unwrap(), "--compact-depth", "60"])?;
    for k in 1..=40 {
        w.write(&id, &format!("f{k}"), &format!("{k}\n"))?;
        ok(&w.session(&["snapshot", &id]))?;
    }
    let out = ok(&w.session(&["run", &id, "--", "sh", "-c", "cat f1 f20 f40"]))?;
    assert_eq!(out, "1\n20\n40\n");
    let snaps = w.json(&["snapshots", &id])?["snapshots"].clone();
    assert!(
        snaps
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["merged_into"].is_null())
    );
    ok(&w.session(&["close", &id]))?;
    w.state_is_empty()
}

#[test]
fn deep_stack_runs_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    deep_stack_runs(As::Root)
}
