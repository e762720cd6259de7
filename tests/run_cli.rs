//! `hutch run` through the binary, as root and as uid 65534.

mod common;

use std::path::Path;

use common::*;

fn workspace(tag: &str, who: As) -> TempDir {
    let dir = TempDir::new(tag, who);
    write_as(&dir.path().join("existing.txt"), "original\n", who);
    dir
}

#[test]
fn writes_land_in_the_upper_and_never_on_the_host() {
    for who in identities() {
        let ws = workspace("writes", who);
        let keep = TempDir::new("keep", who);
        let changes = keep.path().join("changes");
        let status = keep.path().join("status.jsonl");
        let out = hutch_as(
            who,
            ws.path(),
            &[
                "run",
                "--changes",
                changes.to_str().unwrap(),
                "--status-file",
                status.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "echo new > new.txt && echo more >> existing.txt && rm -f gone.txt; cat existing.txt",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "original\nmore\n");
        // The host directory is untouched...
        assert_eq!(
            std::fs::read_to_string(ws.path().join("existing.txt")).unwrap(),
            "original\n"
        );
        assert!(
            !ws.path().join("new.txt").exists(),
            "{who:?}: write leaked to the host"
        );
        // ...and the upper holds exactly what was written.
        let upper = changes.join("upper");
        assert_eq!(
            std::fs::read_to_string(upper.join("new.txt")).unwrap(),
            "new\n"
        );
        assert_eq!(
            std::fs::read_to_string(upper.join("existing.txt")).unwrap(),
            "original\nmore\n"
        );
        assert!(stderr(&out).contains("kept in"), "{}", stderr(&out));
        // A disk-backed upper has no size cap, and the report says so.
        let exit = exit_report(&status);
        assert!(
            exit["unenforced"].as_array().unwrap().iter().any(|u| u
                .as_str()
                .unwrap()
                .starts_with("limits.upper_size: the upper of")),
            "{exit}"
        );

        // Without --changes the user is told how many paths changed.
        let out = hutch_as(who, ws.path(), &["run", "--", "sh", "-c", "touch a b c"]);
        assert_eq!(out.status.code(), Some(0));
        assert!(
            stderr(&out).contains("3 paths changed") && stderr(&out).contains("discarded"),
            "{}",
            stderr(&out)
        );
        assert!(!ws.path().join("a").exists());
    }
}

#[test]
fn read_only_paths_stay_read_only() {
    for who in identities() {
        let ws = workspace("ro", who);
        // The mount check needs both mounts listed, or it would check nothing.
        let script = "for p in /usr/hutch-probe /etc/hutch-probe /hutch-probe; do if touch $p 2>/dev/null; then echo WROTE $p; fi; done; \
                      for m in /usr /etc; do grep -q \" $m \" /proc/self/mountinfo || echo NO-MOUNT $m; done; \
                      grep -E ' /usr | /etc ' /proc/self/mountinfo | grep -v ' ro,' | head -1; echo done";
        let out = sandbox_sh(who, ws.path(), script);
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            "done\n",
            "{who:?}: read-only paths were writable or mounted rw"
        );
        assert!(!Path::new("/usr/hutch-probe").exists());
    }
}

#[test]
fn only_sandbox_pids_are_visible() {
    for who in identities() {
        let ws = workspace("pids", who);
        let out = sandbox_sh(
            who,
            ws.path(),
            "echo $$; ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '",
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = stdout(&out);
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("2"),
            "the workload is pid 2 under hutch init"
        );
        let pids: Vec<u32> = lines
            .next()
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert!(
            // init, sh and the pipeline: a few small pids, none of the host's.
            pids.contains(&1) && pids.len() <= 8 && pids.iter().all(|p| *p < 20),
            "{who:?}: host pids visible: {pids:?}"
        );
    }
}

#[test]
fn no_capabilities_and_no_new_privs() {
    for who in identities() {
        let ws = workspace("caps", who);
        let out = sandbox_sh(
            who,
            ws.path(),
            "grep -E '^(Cap(Eff|Prm|Bnd|Amb|Inh)|NoNewPrivs):' /proc/self/status",
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = stdout(&out);
        for cap in ["CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"] {
            assert!(
                text.contains(&format!("{cap}:\t0000000000000000")),
                "{who:?}: {cap} not empty:\n{text}"
            );
        }
        assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    }
}

#[test]
fn network_namespace_holds_only_lo() {
    for who in identities() {
        let ws = workspace("net", who);
        let out = sandbox_sh(
            who,
            ws.path(),
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out), "lo\n", "{who:?}");
    }
}

#[test]
fn host_environment_does_not_leak() {
    for who in identities() {
        let ws = workspace("env", who);
        let out = hutch_command(who)
            .args(["run", "--quiet", "--setenv", "CHOSEN", "yes", "--", "env"])
            .current_dir(ws.path())
            .env("GITHUB_TOKEN", "s3cret")
            .env("LD_PRELOAD", "/evil.so")
            .env("SSH_AUTH_SOCK", "/tmp/agent")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let env = stdout(&out);
        for leaked in ["s3cret", "LD_PRELOAD", "SSH_AUTH_SOCK"] {
            assert!(!env.contains(leaked), "{who:?}: {leaked} leaked:\n{env}");
        }
        assert!(env.contains("CHOSEN=yes") && env.contains("PATH="), "{env}");
    }
}

#[test]
fn only_stdio_fds_are_open_in_the_workload() {
    for who in identities() {
        let ws = workspace("fds", who);
        // A shell glob lists the fds without opening one of its own.
        let out = sandbox_sh(who, ws.path(), "cd /proc/self/fd && echo *");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let fds = stdout(&out);
        let mut fds: Vec<u32> = fds.split_whitespace().map(|f| f.parse().unwrap()).collect();
        // sh itself may hold one fd open on the script's directory walk.
        fds.retain(|f| *f > 2);
        assert!(fds.len() <= 1, "{who:?}: extra fds open: {fds:?}");
        let out = sandbox_sh(
            who,
            ws.path(),
            // readlink sees its own fds: the glob's fd (sh's) is gone.
            "for f in /proc/self/fd/*; do readlink $f || echo gone; done",
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let targets = stdout(&out);
        // stdin, stdout and stderr at least: the listing really ran.
        assert!(targets.lines().count() >= 3, "{who:?}: {targets}");
        assert!(
            !targets.contains("socket:") && !targets.contains("/proc/self/fd/"),
            "{who:?}: {targets}"
        );
    }
}

#[test]
fn exit_codes_follow_the_workload() {
    for who in identities() {
        let ws = workspace("exit", who);
        let code = |args: &[&str]| hutch_as(who, ws.path(), args).status.code();
        assert_eq!(code(&["run", "--", "sh", "-c", "exit 42"]), Some(42));
        assert_eq!(
            code(&["run", "--", "sh", "-c", "kill -TERM $$"]),
            Some(128 + 15)
        );
        assert_eq!(
            code(&["run", "--", "sh", "-c", "kill -KILL $$"]),
            Some(128 + 9)
        );
        assert_eq!(code(&["run", "--", "hutch-no-such-command"]), Some(127));
        assert_eq!(code(&["run", "--", "/etc/hostname"]), Some(126));
        assert_eq!(code(&["run", "--no-such-flag", "--", "true"]), Some(125));
    }
}

#[test]
fn timeout_kills_the_whole_tree() {
    for who in identities() {
        let ws = workspace("timeout", who);
        let marker = format!(
            "{}",
            900_000 + std::process::id() % 90_000 + if who == As::Root { 0 } else { 1 }
        );
        let script = format!("setsid sh -c 'sleep {marker}' & (sleep {marker} &) ; sleep {marker}");
        let status_dir = TempDir::new("status", who);
        let status = status_dir.path().join("status.jsonl");
        let started = std::time::Instant::now();
        let out = hutch_as(
            who,
            ws.path(),
            &[
                "run",
                "--timeout",
                "500ms",
                "--status-file",
                status.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        assert_eq!(out.status.code(), Some(124), "{who:?}: {}", stderr(&out));
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        let left = std::process::Command::new("pgrep")
            .args(["-f", &format!("sleep {marker}")])
            .output()
            .unwrap();
        assert!(
            stdout(&left).trim().is_empty(),
            "{who:?}: processes survived the timeout: {}",
            stdout(&left)
        );
        let report = std::fs::read_to_string(&status).unwrap();
        let last = exit_report(&status);
        assert_eq!(last["reason"], "timed-out");
        assert_eq!(last["status"], 124);
        let first: serde_json::Value =
            serde_json::from_str(report.lines().next().unwrap()).unwrap();
        assert_eq!(first["event"], "start");
        assert!(first["namespaces"]["pid"].as_u64().is_some(), "{first}");
    }
}

#[test]
fn missing_bind_source_is_one_clear_line() {
    for who in identities() {
        let ws = workspace("missing", who);
        let out = hutch_as(
            who,
            ws.path(),
            &[
                "run",
                "--ro-bind",
                "/hutch/does/not/exist",
                "/x",
                "--",
                "true",
            ],
        );
        assert_eq!(out.status.code(), Some(125));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("/hutch/does/not/exist") && err.contains("ENOENT"),
            "{err}"
        );
    }
}

#[test]
fn overlay_paths_with_option_characters_are_mounted_not_injected() {
    for who in identities() {
        let base = TempDir::new("odd", who);
        for name in ["a,upperdir=x", "b:c", "d\\e", "lowerdir=f,g"] {
            let ws = base.path().join(name);
            std::fs::create_dir(&ws).unwrap();
            own_as(&ws, who);
            write_as(&ws.join("in.txt"), "inside\n", who);
            let out = sandbox_sh(who, &ws, "cat in.txt && echo w > w.txt && pwd");
            assert_eq!(
                out.status.code(),
                Some(0),
                "{who:?} {name}: {}",
                stderr(&out)
            );
            assert_eq!(stdout(&out), format!("inside\n{}\n", ws.display()));
            assert!(!ws.join("w.txt").exists());
        }
    }
}

#[test]
fn root_launch_runs_as_an_unprivileged_host_id_with_a_usable_workspace() {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    let ws = TempDir::new("root0700", As::Root);
    std::fs::set_permissions(
        ws.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    std::fs::write(ws.path().join("secret.txt"), "mine\n").unwrap();
    std::fs::set_permissions(
        ws.path().join("secret.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let keep = TempDir::new("root-keep", As::Root);
    let changes = keep.path().join("c");
    let out = hutch_as(
        As::Root,
        ws.path(),
        &[
            "run",
            "--quiet",
            "--changes",
            changes.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "cat secret.txt; echo x >> secret.txt; mkdir sub && echo y > sub/f; cat /etc/shadow >/dev/null 2>&1 && echo SHADOW; id -u",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "mine\n0\n",
        "workspace usable, /etc/shadow unreadable"
    );
    let meta = std::fs::metadata(changes.join("upper/sub/f")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        65534,
        "files written are not root's on the host"
    );
}

/// A root launch whose workspace lives on a filesystem without idmapped
/// mounts (ramfs here; tmpfs before Linux 6.3, some FUSE and network
/// filesystems) still runs: the layer is attached as it is, stderr and the
/// report say so, and the workload sees the host owners, so what only root
/// may read stays unreadable while the rest of the workspace works.
#[test]
fn root_launch_on_a_filesystem_without_idmapped_mounts_falls_back_and_says_so() {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    require!(have("unshare"), "unshare(1) (util-linux) is not installed");
    let dir = TempDir::new("ramfs-ws", As::Root);
    let ws = dir.path().join("ws");
    let status = dir.path().join("status.jsonl");
    // In a private mount namespace: the ramfs never shows on the host.
    let script = format!(
        "set -e; mount --make-rprivate /; mkdir '{ws}'; mount -t ramfs ramfs '{ws}'; \
         chmod 755 '{ws}'; echo shared > '{ws}/open.txt'; echo mine > '{ws}/secret.txt'; \
         chmod 600 '{ws}/secret.txt'; cd '{ws}'; \
         '{hutch}' run --status-file '{status}' -- sh -c \
           'cat open.txt; cat secret.txt 2>/dev/null || echo DENIED; echo new > made.txt; cat made.txt'; \
         cat '{ws}/open.txt'; test ! -e '{ws}/made.txt' && echo HOST-UNCHANGED",
        ws = ws.display(),
        hutch = hutch_bin().display(),
        status = status.display(),
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "shared\nDENIED\nnew\nshared\nHOST-UNCHANGED\n",
        "world-readable files work, root-only ones stay closed, writes go to the upper"
    );
    assert!(
        stderr(&out).contains(&format!(
            "{} is on a filesystem without idmapped mounts",
            ws.display()
        )),
        "{}",
        stderr(&out)
    );
    let last = exit_report(&status);
    assert_eq!(
        last["enforced"]["layers_without_idmap"],
        serde_json::json!([ws.display().to_string()]),
        "{last}"
    );
}

#[test]
fn many_runs_leave_nothing_behind() {
    // Needs no particular identity: root in CI, else the unprivileged path.
    let who = caller();
    let ws = workspace("soak", who);
    // hutch's own temp dir (TMPDIR) is private to this test, so parallel
    // tests cannot muddy it; the marker names this test's processes.
    let tmp = TempDir::new("soak-tmpdir", who);
    let marker = format!("hutch-soak-{}", std::process::id());
    let script = format!("echo x > f; sleep 0 & : {marker}");
    let mounts_before = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for i in 0..200 {
        let out = std::process::Command::new(hutch_bin())
            .args(["run", "--", "sh", "-c", &script])
            .current_dir(ws.path())
            .env("TMPDIR", tmp.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "run {i}: {}", stderr(&out));
    }
    assert_eq!(
        std::fs::read_to_string("/proc/self/mountinfo").unwrap(),
        mounts_before,
        "host mount table changed"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "temp files left: {left:?}");
    let ps = std::process::Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .unwrap();
    assert!(
        stdout(&ps).trim().is_empty(),
        "sandbox processes left: {}",
        stdout(&ps)
    );
    assert!(!ws.path().join("f").exists(), "a write reached the host");
}

#[test]
fn sigkill_of_hutch_takes_the_sandbox_with_it() {
    // Needs no particular identity: root in CI, else the unprivileged path.
    let who = caller();
    let ws = workspace("sigkill", who);
    let keep = TempDir::new("sigkill-status", who);
    let status = keep.path().join("status.jsonl");
    let marker = format!("{}", 800_000 + std::process::id() % 90_000);
    let sleepers = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", &format!("sleep {marker}")])
            .output()
            .unwrap();
        stdout(&out).lines().count()
    };
    let mut child = hutch_command(who)
        .args([
            "run",
            "--quiet",
            "--status-file",
            status.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &format!("setsid sleep {marker} & sleep {marker}"),
        ])
        .current_dir(ws.path())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The sandbox has started (its start event) and both sleeps run in it
    // (the detached one included) before hutch is killed.
    let start = wait_for_event(&status, "start", std::time::Duration::from_secs(10));
    assert!(start["namespaces"]["pid"].as_u64().is_some(), "{start}");
    wait_until(
        std::time::Duration::from_secs(10),
        "both sleeps running",
        || sleepers() >= 2,
    );
    child.kill().unwrap();
    child.wait().unwrap();
    wait_until(
        std::time::Duration::from_secs(5),
        "the sandbox to end with hutch (it survived SIGKILL)",
        || sleepers() == 0,
    );
}

#[test]
fn signals_are_forwarded_to_the_workload() {
    // Needs no particular identity: root in CI, else the unprivileged path.
    let who = caller();
    let ws = workspace("sig", who);
    let mut child = std::process::Command::new(hutch_bin())
        .args([
            "run",
            "--quiet",
            "--",
            "sh",
            "-c",
            "trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done",
        ])
        .current_dir(ws.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 6];
    std::io::Read::read_exact(&mut out, &mut buf).unwrap();
    assert_eq!(&buf, b"ready\n");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest, "got-term\n");
    assert_eq!(status.code(), Some(3));
}

#[test]
fn output_limit_caps_and_reports() {
    // Needs no particular identity: root in CI, else the unprivileged path.
    let who = caller();
    let ws = workspace("outlim", who);
    let run = |quiet: bool| {
        let mut args = vec!["run"];
        if quiet {
            args.push("--quiet");
        }
        args.extend([
            "--output-limit",
            "1000",
            "--",
            "sh",
            "-c",
            "yes hutch | head -c 100000; echo done >&2",
        ]);
        hutch_as(who, ws.path(), &args)
    };
    let out = run(false);
    assert_eq!(out.status.code(), Some(0));
    let notices: usize = stderr(&out)
        .lines()
        .filter(|l| l.starts_with("hutch:"))
        .map(|l| l.len() + 1)
        .sum();
    assert_eq!(out.stdout.len() + out.stderr.len() - notices, 1000);
    assert!(
        stderr(&out).contains("output limit reached; 1000 of 100005 bytes relayed"),
        "{}",
        stderr(&out)
    );
    // --quiet: the cap holds, the notice is not printed.
    let out = run(true);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        out.stdout.len() + out.stderr.len(),
        1000,
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("hutch:"), "{}", stderr(&out));
}

#[test]
fn bad_input_gets_one_line_and_125() {
    // Needs no particular identity: root in CI, else the unprivileged path.
    let who = caller();
    let ws = workspace("badin", who);
    let profile = ws.path().join("p.toml");
    std::fs::write(&profile, "[[fs]]\nop = \"tmpfs\"\ndest = \"relative\"\n").unwrap();
    for args in [
        vec!["run", "--profile", profile.to_str().unwrap(), "--", "true"],
        vec!["run", "--timeout", "5 parsecs", "--", "true"],
        vec!["run", "--tmpfs"],
        vec!["run", "--bind", "/tmp", "relative/dest", "--", "true"],
        vec!["run"],
    ] {
        let out = hutch_as(who, ws.path(), &args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("hutch: "), "{err}");
    }
    let out = hutch_as(
        who,
        ws.path(),
        &["run", "--profile", profile.to_str().unwrap(), "--", "true"],
    );
    assert!(
        stderr(&out).contains("fs[0].dest"),
        "key path named: {}",
        stderr(&out)
    );
}

#[test]
fn every_fs_operation_of_a_profile_applies_in_order() {
    for who in identities() {
        let dir = TempDir::new("fsops", who);
        for (layer, file) in [("l1", "a"), ("l2", "b")] {
            let d = dir.path().join(layer);
            std::fs::create_dir(&d).unwrap();
            write_as(&d.join(file), file, who);
            own_as(&d, who);
        }
        let profile = format!(
            r#"
command = ["sh", "-c", "cat /f /bd; stat -c %a /d; ls /ro | tr '\n' ' '; echo; for p in /ro/x /t/x /bd; do touch $p 2>/dev/null && echo wrote $p; done; echo ro-held; grep -c ' /dev/mqueue ' /proc/self/mountinfo; echo w > /f && cat /f"]
[env]
PATH = "/usr/bin:/bin"
[[fs]]
op = "ro-bind"
src = "/usr"
dest = "/usr"
[[fs]]
op = "symlink"
target = "usr/bin"
dest = "/bin"
[[fs]]
op = "symlink"
target = "usr/lib"
dest = "/lib"
[[fs]]
op = "symlink"
target = "usr/lib64"
dest = "/lib64"
[[fs]]
op = "proc"
dest = "/proc"
[[fs]]
op = "mqueue"
dest = "/dev/mqueue"
[[fs]]
op = "tmpfs"
dest = "/rw"
[[fs]]
op = "file"
dest = "/rw/f"
content = "file-content\n"
[[fs]]
op = "symlink"
target = "/rw/f"
dest = "/f"
[[fs]]
op = "bind-data"
dest = "/bd"
content = "bind-data\n"
[[fs]]
op = "dir"
dest = "/d"
mode = 0o700
[[fs]]
op = "chmod"
dest = "/d"
mode = 0o750
[[fs]]
op = "ro-overlay"
lowers = ["{l1}", "{l2}"]
dest = "/ro"
[[fs]]
op = "tmpfs"
dest = "/t"
[[fs]]
op = "remount-ro"
dest = "/t"
"#,
            l1 = dir.path().join("l1").display(),
            l2 = dir.path().join("l2").display()
        );
        let path = dir.path().join("ops.toml");
        write_as(&path, &profile, who);
        let out = hutch_as(
            who,
            dir.path(),
            &["run", "--profile", path.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            "file-content\nbind-data\n750\na b \nro-held\n1\nw\n",
            "{who:?}"
        );
    }
}

#[test]
fn a_missing_interpreter_is_not_executable_rather_than_not_found() {
    // Needs no particular identity: root in CI, else the unprivileged path.
    let who = caller();
    let dir = TempDir::new("interp", who);
    // /usr without /lib64: the dynamic loader of /usr/bin/true is missing.
    let out = hutch_as(
        who,
        dir.path(),
        &[
            "run",
            "--bare",
            "--ro-bind",
            "/usr",
            "/usr",
            "--",
            "/usr/bin/true",
        ],
    );
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("interpreter is missing"),
        "{}",
        stderr(&out)
    );
}

/// A wall clock that runs out while the sandbox is still being built is a
/// timeout (124), not a setup failure: the socket the supervisor reads is
/// reset by its own kill. Failed on the code before this change (most of
/// 30 runs ended `125 recvmsg => ECONNRESET`).
#[test]
fn a_timeout_during_setup_is_a_timeout() {
    let who = caller();
    let ws = workspace("early-timeout", who);
    for _ in 0..30 {
        let out = hutch_as(
            who,
            ws.path(),
            &["run", "--quiet", "--timeout", "1ms", "--", "true"],
        );
        let code = out.status.code();
        assert!(
            code == Some(124) || code == Some(0),
            "{who:?}: {code:?}: {}",
            stderr(&out)
        );
    }
}

/// pid 1 of the sandbox killed from outside the supervisor (a platform's
/// reaper, `hutch kill`) ends the run as killed (137), not as a setup
/// failure. Failed on the code before this change (125, "the sandbox
/// ended before its workload reported an exit status").
#[test]
fn pid1_killed_from_outside_is_reported_as_killed() {
    let who = caller();
    let ws = workspace("outside-kill", who);
    let keep = TempDir::new("outside-kill-status", who);
    let status = keep.path().join("status.jsonl");
    let child = hutch_command(who)
        .args([
            "run",
            "--quiet",
            "--status-file",
            status.to_str().unwrap(),
            "--",
            "sleep",
            "1000",
        ])
        .current_dir(ws.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = wait_for_event(&status, "start", std::time::Duration::from_secs(10));
    let pid1 = start["pid"].as_i64().expect("start event names pid 1") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid1),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    let last = exit_report(&status);
    assert_eq!(last["reason"], "killed", "{last}");
    assert_eq!(last["signal"], 9, "{last}");
}

/// `--profile` with `--workspace DIR:DEST --changes DIR`: the workspace is
/// overlaid at DEST, is the working directory, and its upper is kept (the
/// agent spawner's "foo.txt lands in the upper, not in the host repo").
/// Failed on the code before this change: both flags were dropped without
/// a word, the command ran in `/` with no overlay and nothing was kept.
#[test]
fn a_profile_keeps_the_workspace_and_changes_flags() {
    for who in identities() {
        let ws = workspace("profile-ws", who);
        let keep = TempDir::new("profile-keep", who);
        let profile = keep.path().join("profile.json");
        write_as(
            &profile,
            &serde_json::to_string(&hutch::spec::default_profile()).unwrap(),
            who,
        );
        let changes = keep.path().join("changes");
        let out = hutch_as(
            who,
            keep.path(),
            &[
                "run",
                "--quiet",
                "--profile",
                profile.to_str().unwrap(),
                "--workspace",
                &format!("{}:/workspace/demo", ws.path().display()),
                "--changes",
                changes.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "pwd && cat existing.txt && echo made > foo.txt",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "/workspace/demo\noriginal\n", "{who:?}");
        assert_eq!(
            std::fs::read_to_string(changes.join("upper/foo.txt")).unwrap(),
            "made\n"
        );
        assert!(!ws.path().join("foo.txt").exists(), "{who:?}: write leaked");

        // `--changes` alone: the current directory is the workspace.
        let changes = keep.path().join("changes-cwd");
        let out = hutch_as(
            who,
            ws.path(),
            &[
                "run",
                "--quiet",
                "--profile",
                profile.to_str().unwrap(),
                "--changes",
                changes.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "pwd && echo again > bar.txt",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), format!("{}\n", ws.path().display()));
        assert!(changes.join("upper/bar.txt").exists(), "{who:?}");
        assert!(!ws.path().join("bar.txt").exists(), "{who:?}: write leaked");
    }
}

/// `--unsetenv` and `--setenv` of a proxy variable win over hutch's own:
/// neither case of an unset variable is there, a set one has the caller's
/// value only. Failed on the code before this change: hutch's
/// `HTTPS_PROXY` and `NO_PROXY` were added after the options, over them.
#[test]
fn explicit_proxy_variables_win_over_hutchs() {
    for who in identities() {
        let ws = workspace("proxy-env", who);
        let out = hutch_as(
            who,
            ws.path(),
            &[
                "run",
                "--quiet",
                "--allow-host",
                "example.com",
                "--unsetenv",
                "HTTPS_PROXY",
                "--setenv",
                "NO_PROXY",
                "localhost,.internal",
                "--",
                "env",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        let env = stdout(&out);
        let mut proxy: Vec<&str> = env
            .lines()
            .filter(|l| l.to_ascii_lowercase().contains("_proxy="))
            .collect();
        proxy.sort();
        assert_eq!(
            proxy,
            [
                "ALL_PROXY=http://127.0.0.1:3128",
                "HTTP_PROXY=http://127.0.0.1:3128",
                "NO_PROXY=localhost,.internal",
                "all_proxy=http://127.0.0.1:3128",
                "http_proxy=http://127.0.0.1:3128",
            ],
            "{who:?}"
        );
    }
}

/// The sandbox's pid 1 shows no more of hutch's command line than
/// `hutch init`: no host path, no `--setenv` value (every process of the
/// sandbox can read `/proc/1/cmdline`). Failed on the code before this
/// change: it held hutch's whole command line, the value included.
#[test]
fn pid1_command_line_carries_no_setenv_value() {
    for who in identities() {
        let ws = workspace("cmdline", who);
        let out = hutch_as(
            who,
            ws.path(),
            &[
                "run",
                "--quiet",
                "--setenv",
                "SOME_TOKEN",
                "value-that-must-not-show",
                "--",
                "sh",
                "-c",
                "tr '\\0' ' ' < /proc/1/cmdline; echo; test \"$SOME_TOKEN\" = value-that-must-not-show && echo set",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        let text = stdout(&out);
        let mut lines = text.lines();
        let cmdline = lines.next().unwrap_or_default();
        assert_eq!(cmdline.trim_end(), "hutch init", "{who:?}: {text}");
        assert!(
            !text.contains("value-that-must-not-show"),
            "{who:?}: {text}"
        );
        assert!(
            !text.contains(&ws.path().display().to_string()),
            "{who:?}: {text}"
        );
        assert_eq!(
            lines.next(),
            Some("set"),
            "{who:?}: the variable still reaches the workload"
        );
    }
}
