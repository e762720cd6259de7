//! Differential tests: the same bubblewrap argv under the installed
//! `bwrap` (Debian's 0.8.0) and under `hutch-bwrap`, as root and as uid
//! 65534, compared on exit status, the probe's stdout (ids, cwd, env,
//! namespace relations, capabilities, mounts, file modes) and the status
//! fds' JSON keys; error cases on status and message. Options bwrap 0.8
//! lacks (overlays) are checked against their documented behaviour.

mod bwrap_support;
mod common;

use std::path::{Path, PathBuf};

use bwrap_support::{Case, Seen, hutch_bwrap, json_keys, run};
use common::{As, TempDir};

fn bwrap() -> PathBuf {
    PathBuf::from("/usr/bin/bwrap")
}

fn ready(who: As) -> Result<(), String> {
    common::can_launch_as(who)?;
    if !bwrap().exists() {
        return Err(
            "bubblewrap (/usr/bin/bwrap) is the reference; apt-get install bubblewrap".into(),
        );
    }
    Ok(())
}

/// The common prefix of most cases: the host's / read-only.
const SYSTEM: &[&str] = &["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"];

fn with_system(name: &'static str, extra: &[&str]) -> Case {
    let mut args: Vec<&str> = SYSTEM.to_vec();
    args.extend_from_slice(extra);
    Case::new(name, &args)
}

/// What /dev holds (type, mode, owner, link targets), its mounts with
/// their flags, and whether shm takes a file.
const DEV_PROBE: &str = r#"cd /dev; for f in * .*; do
  case "$f" in .|..) continue;; esac
  if [ -L "$f" ]; then echo "dev $f -> $(readlink "$f")"; else echo "dev $f $(stat -c '%F %a %u:%g' "$f")"; fi
done
while read -r _ _ _ _ mp opts rest; do
  case "$mp" in /dev*) t=${rest##*- }; echo "mount $mp $opts ${t%% *}";; esac
done < /proc/self/mountinfo | sort
echo x > /dev/shm/f && echo shm-writable"#;

/// The argv cases both implementations run the same way, for `who`.
fn cases(who: As) -> Vec<Case> {
    let mut c = vec![
        with_system("system", &[]),
        with_system("unshare-all", &["--unshare-all"]).paths("/ /tmp"),
        with_system("unshare-all-share-net", &["--unshare-all", "--share-net"]),
        with_system(
            "pid-ipc-uts-hostname",
            &["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sbx"],
        ),
        with_system("unshare-net", &["--unshare-net"])
            .env("HT_CMD", "awk -F: 'NR>2{gsub(/ /,\"\",$1); print \"netdev\", $1}' /proc/net/dev | sort"),
        with_system("unshare-cgroup", &["--unshare-cgroup", "--unshare-pid"]),
        with_system("env", &["--setenv", "HT_NEW", "a b", "--unsetenv", "HT_DROP"]),
        with_system(
            "clearenv",
            &["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HT_AFTER", "x"],
        ),
        with_system("chdir", &["--chdir", "/usr/share"]),
        Case {
            cwd: Some("/usr/lib"),
            ..with_system("cwd-kept", &[])
        },
        with_system(
            "fs-ops-in-order",
            &[
                "--tmpfs", "/tmp", "--perms", "0700", "--dir", "/tmp/d", "--perms", "0750",
                "--tmpfs", "/tmp/t", "--dir", "/tmp/a/b/c", "--chmod", "0711", "/tmp/a/b",
                "--symlink", "../d", "/tmp/a/l", "--bind", "/tmp", "/mnt", "--remount-ro", "/mnt",
                "--bind-try", "/nonexistent-ht", "/tmp/n",
                "--ro-bind-try", "/usr/share", "/tmp/share",
            ],
        )
        .paths("/tmp /tmp/d /tmp/t /tmp/a /tmp/a/b /tmp/a/b/c /tmp/a/l /tmp/n /mnt/d /tmp/share"),
        // That mount only: the submount stays writable.
        with_system(
            "remount-ro-submount",
            &["--tmpfs", "/mnt", "--tmpfs", "/mnt/sub", "--remount-ro", "/mnt"],
        )
        .env(
            "HT_CMD",
            "touch /mnt/sub/x && echo sub-writable; touch /mnt/x 2>/dev/null || echo mnt-readonly",
        ),
        Case {
            fd5: Some(b"file content\n".to_vec()),
            fd6: Some(b"data content\n".to_vec()),
            ..with_system(
                "file-and-bind-data",
                &["--tmpfs", "/tmp", "--perms", "0640", "--file", "5", "/tmp/f", "--ro-bind-data", "6", "/tmp/g"],
            )
            .paths("/tmp/f /tmp/g")
            .env("HT_CMD", "cat /tmp/f /tmp/g; echo x > /tmp/g 2>/dev/null || echo g-readonly")
        },
        // Any bytes; --bind-data is a read-write mount of its own.
        Case {
            fd5: Some(b"\x00\xffbin\x80\n".to_vec()),
            fd6: Some(b"\xfe\x00file".to_vec()),
            ..with_system(
                "bind-data-binary",
                &["--tmpfs", "/tmp", "--bind-data", "5", "/tmp/b", "--file", "6", "/tmp/f"],
            )
            .paths("/tmp/b /tmp/f")
            .env("HT_CMD", "od -An -tx1 /tmp/b /tmp/f; echo more >> /tmp/b && echo b-writable; od -An -c /tmp/b")
        },
        // Fds the caller left open reach the command at their numbers
        // (fd 5 read through, 6 consumed by --file, 7 and 8 open).
        Case {
            fd5: Some(b"inherited\n".to_vec()),
            fd6: Some(b"consumed\n".to_vec()),
            ..with_system("inherited-fds", &["--unshare-pid", "--tmpfs", "/tmp", "--file", "6", "/tmp/f"])
                .env("HT_CMD", "cat <&5; cat /tmp/f")
        },
        Case {
            fd5: Some(b"--unshare-pid\0--setenv\0HT_FROM_ARGS\0yes\0--tmpfs\0/tmp\0".to_vec()),
            ..with_system("args-fd", &["--args", "5"]).paths("/tmp")
        },
        with_system("new-session", &["--new-session", "--unshare-pid"])
            .env("HT_CMD", "ps -o sid= -p $$ >/dev/null 2>&1; awk '{print \"sid-is-self\", ($6 == $1)}' /proc/self/stat"),
        Case {
            fd5: Some(bwrap_support::deny_mkdir_bpf()),
            ..with_system("seccomp-raw-bpf", &["--tmpfs", "/tmp", "--seccomp", "5"]).env(
                "HT_CMD",
                "mkdir /tmp/x 2>/dev/null && echo mkdir-allowed || echo mkdir-denied; touch /tmp/y && echo touch-allowed",
            )
        },
        with_system("die-with-parent", &["--die-with-parent", "--unshare-pid"]),
        with_system("exit-status", &[]).env("HT_EXIT", "7"),
        // The command is pid 1 of its pid namespace; its status is the
        // sandbox's.
        with_system("as-pid-1", &["--unshare-pid", "--as-pid-1"])
            .env("HT_CMD", "echo probe-pid $PPID")
            .env("HT_EXIT", "9"),
        with_system("info-and-json-status", &["--unshare-pid", "--unshare-net", "--info-fd", "7", "--json-status-fd", "8"]),
        with_system("userns-ids", &["--unshare-user", "--uid", "1234", "--gid", "5678"]),
        with_system("userns-root", &["--unshare-user", "--uid", "0", "--gid", "0"]),
        with_system("userns-cap-add", &["--unshare-user", "--cap-add", "CAP_NET_RAW", "--cap-add", "cap_chown"]),
        // bubblewrap's /dev: nodes, links (core), shm, pts and the mount
        // flags of each (a usr-only root: nothing of the host's /dev
        // under it).
        Case::new(
            "dev-layout",
            &[
                "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
            ],
        )
        .env("HT_CMD", DEV_PROBE),
        with_system("dev-bind", &["--dev-bind", "/dev", "/dev"])
            .env("HT_CMD", "[ -c /dev/null ] && echo null-is-char"),
    ];
    if who == As::Root {
        c.push(with_system(
            "root-cap-drop",
            &["--cap-drop", "ALL", "--cap-add", "CAP_CHOWN"],
        ));
        c.push(with_system(
            "mqueue",
            &["--unshare-ipc", "--mqueue", "/mnt"],
        ));
        c.push(with_system(
            "root-cap-drop-one",
            &["--cap-drop", "CAP_SYS_ADMIN"],
        ));
    }
    c
}

/// bubblewrap's capability lines with CAP_SYS_RESOURCE taken out: in a
/// user namespace of its own hutch-bwrap never grants it (docs/bwrap.md,
/// `--cap-add`), which shows where the caller's root holds it.
fn without_sys_resource(stdout: &str) -> String {
    stdout
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((k, v)) if k.starts_with("Cap") && v.len() == 16 => {
                let bits = u64::from_str_radix(v, 16).unwrap_or(0) & !(1 << 24);
                format!("{k} {bits:016x}\n")
            }
            _ => format!("{l}\n"),
        })
        .collect()
}

fn compare(case: &Case, b: &Seen, h: &Seen) -> Vec<String> {
    let mut diffs = Vec::new();
    let masked;
    let b = if case.args.iter().any(|a| a == "--unshare-user") {
        masked = Seen {
            stdout: without_sys_resource(&b.stdout),
            status: b.status,
            stderr: b.stderr.clone(),
            info: b.info.clone(),
            json_status: b.json_status.clone(),
        };
        &masked
    } else {
        b
    };
    if b.status != h.status {
        diffs.push(format!(
            "status: bwrap {:?}, hutch-bwrap {:?}\n  bwrap stderr: {}\n  hutch stderr: {}",
            b.status,
            h.status,
            b.stderr.trim(),
            h.stderr.trim()
        ));
    }
    if b.stdout != h.stdout {
        let (bl, hl): (Vec<&str>, Vec<&str>) =
            (b.stdout.lines().collect(), h.stdout.lines().collect());
        let mut d = String::new();
        for l in &bl {
            if !hl.contains(l) {
                d.push_str(&format!("  - {l}\n"));
            }
        }
        for l in &hl {
            if !bl.contains(l) {
                d.push_str(&format!("  + {l}\n"));
            }
        }
        if d.is_empty() {
            d = "  (same lines, another order)\n".into();
        }
        diffs.push(format!("stdout differs:\n{d}"));
    }
    for (what, x, y) in [
        ("info-fd", &b.info, &h.info),
        ("json-status-fd", &b.json_status, &h.json_status),
    ] {
        if json_keys(x) != json_keys(y) {
            diffs.push(format!("{what} keys: bwrap {x:?}, hutch-bwrap {y:?}"));
        }
    }
    diffs
        .iter()
        .map(|d| format!("[{}] {d}", case.name))
        .collect()
}

fn differential(who: As) {
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-diff", who);
    let mut failures = Vec::new();
    for case in cases(who) {
        let b = run(&bwrap(), &case, who, dir.path());
        let expected = case
            .env
            .iter()
            .find(|(k, _)| k == "HT_EXIT")
            .map_or(0, |(_, v)| v.parse().unwrap());
        assert_eq!(
            b.status,
            Some(expected),
            "[{}] bwrap itself: {}",
            case.name,
            b.stderr
        );
        let h = run(&hutch_bwrap(), &case, who, dir.path());
        failures.extend(compare(&case, &b, &h));
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn argv_cases_behave_alike_as_root() {
    differential(As::Root);
}

#[test]
fn argv_cases_behave_alike_as_nobody() {
    differential(As::Nobody);
}

/// The JSON status documents carry bubblewrap's exact keys, and the
/// namespace inodes are the sandbox's.
#[test]
fn status_fds_have_bubblewraps_keys_and_values() {
    let who = common::caller();
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-status", who);
    let case = with_system(
        "status",
        &[
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--info-fd",
            "7",
            "--json-status-fd",
            "8",
        ],
    )
    .command(&["sh", "-c", "readlink /proc/self/ns/net; exit 3"]);
    let h = run(&hutch_bwrap(), &case, who, dir.path());
    assert_eq!(h.status, Some(3), "{}", h.stderr);
    let keys = json_keys(&h.json_status);
    let ns = [
        "child-pid",
        "ipc-namespace",
        "mnt-namespace",
        "net-namespace",
        "pid-namespace",
        "uts-namespace",
    ];
    assert_eq!(
        keys,
        [
            ns.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            vec!["exit-code".to_string()]
        ]
    );
    assert_eq!(
        json_keys(&h.info),
        [ns.iter().map(|s| s.to_string()).collect::<Vec<_>>()]
    );
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&h.json_status)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(docs[1]["exit-code"], 3);
    let net = h
        .stdout
        .trim()
        .trim_start_matches("net:[")
        .trim_end_matches(']');
    assert_eq!(
        docs[0]["net-namespace"].to_string(),
        net,
        "the sandbox's own net namespace"
    );
    let b = run(&bwrap(), &case, who, dir.path());
    assert_eq!(
        json_keys(&b.json_status),
        keys,
        "bwrap's keys: {}",
        b.json_status
    );
}

/// Error cases: the same exit status and message line.
#[test]
fn errors_match_bubblewrap() {
    for who in common::identities_ready(ready) {
        let dir = TempDir::new("bwrap-err", who);
        for (name, args, cmd) in [
            (
                "missing source",
                &["--ro-bind", "/nonexistent-ht", "/x"][..],
                &["true"][..],
            ),
            ("bad option", &["--bogus-option"], &["true"]),
            ("bad fd", &["--file", "abc", "/x"], &["true"]),
            ("negative fd", &["--info-fd", "-3"], &["true"]),
            ("missing argument", &["--bind", "/usr"], &[]),
            (
                "perms not consumed",
                &["--perms", "0700", "--proc", "/proc"],
                &["true"],
            ),
            ("hostname without uts", &["--hostname", "x"], &["true"]),
            ("no command", &["--ro-bind", "/", "/"], &[]),
            (
                "command not found",
                &["--ro-bind", "/", "/"],
                &["nonexistent-command-ht"],
            ),
            (
                "labels",
                &["--exec-label", "system_u:system_r:x"],
                &["true"],
            ),
            // execve's own errno in the message (issue 33, item 7: an
            // ELOOP was "Permission denied").
            (
                "command is a symlink loop",
                &[
                    "--ro-bind",
                    "/",
                    "/",
                    "--tmpfs",
                    "/tmp",
                    "--symlink",
                    "/tmp/a",
                    "/tmp/b",
                    "--symlink",
                    "/tmp/b",
                    "/tmp/a",
                ],
                &["/tmp/a"],
            ),
        ] {
            let case = Case::new(name, args).command(cmd);
            let b = run(&bwrap(), &case, who, dir.path());
            let h = run(&hutch_bwrap(), &case, who, dir.path());
            assert_eq!(
                b.status, h.status,
                "[{name} as {who:?}] status; bwrap: {}; hutch: {}",
                b.stderr, h.stderr
            );
            assert_eq!(b.status, Some(1), "[{name}] bwrap fails with 1");
            // The usage line names the program as invoked.
            let first = |s: &str| {
                let l = s.lines().next().unwrap_or_default().to_string();
                match l.strip_prefix("usage: ") {
                    Some(rest) => format!("usage: {}", rest.split_once(' ').map_or("", |r| r.1)),
                    None => l,
                }
            };
            assert_eq!(
                first(&b.stderr),
                first(&h.stderr),
                "[{name} as {who:?}] message"
            );
        }
    }
}

/// Overlays (bubblewrap 0.9+; Debian's 0.8 cannot be compared): a
/// tmp-overlay's writes are discarded, an overlay's go to the upper, a
/// ro-overlay is read-only.
#[test]
fn overlays_behave_as_documented() {
    let who = common::caller();
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-overlay", who);
    let d = dir.path();
    for sub in ["lower", "lower2", "upper", "work"] {
        std::fs::create_dir(d.join(sub)).unwrap();
        common::own_as(&d.join(sub), who);
    }
    common::write_as(&d.join("lower/a"), "A\n", who);
    common::write_as(&d.join("lower2/b"), "B\n", who);
    let l = d.join("lower").display().to_string();
    let l2 = d.join("lower2").display().to_string();
    let u = d.join("upper").display().to_string();
    let w = d.join("work").display().to_string();
    let script = "cd /mnt; cat o/a o/b; echo new > o/new && echo wrote; cat r/a r/b; echo x > r/x 2>/dev/null || echo r-readonly; echo t > t/t && echo t-wrote";
    let mut args: Vec<&str> = SYSTEM.to_vec();
    args.extend(["--tmpfs", "/mnt"]);
    args.extend([
        "--overlay-src",
        &l,
        "--overlay-src",
        &l2,
        "--overlay",
        &u,
        &w,
        "/mnt/o",
    ]);
    args.extend([
        "--overlay-src",
        &l,
        "--overlay-src",
        &l2,
        "--ro-overlay",
        "/mnt/r",
    ]);
    args.extend(["--overlay-src", &l, "--tmp-overlay", "/mnt/t"]);
    let case = Case::new("overlays", &args).command(&["sh", "-c", script]);
    let h = run(&hutch_bwrap(), &case, who, d);
    assert_eq!(h.status, Some(0), "{}", h.stderr);
    assert_eq!(h.stdout, "A\nB\nwrote\nA\nB\nr-readonly\nt-wrote\n");
    assert_eq!(
        std::fs::read_to_string(d.join("upper/new")).unwrap(),
        "new\n"
    );
    assert!(
        !d.join("lower/t").exists(),
        "a tmp-overlay's writes are discarded"
    );
}

/// `--die-with-parent`: when the process that started hutch-bwrap dies,
/// the sandbox dies with it.
#[test]
fn die_with_parent_ends_the_sandbox() {
    let who = common::caller();
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-dwp", who);
    let marker = dir.path().join("started");
    let bin = hutch_bwrap();
    // The parent shell starts hutch-bwrap in the background, reports its
    // pid, then waits; the test kills the parent.
    let script = format!(
        "{} --ro-bind / / --unshare-pid --die-with-parent --bind {d} {d} -- sh -c 'echo $$ > {m}; exec sleep 600' & echo $!; wait",
        bin.display(),
        d = dir.path().display(),
        m = marker.display()
    );
    let mut parent = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(parent.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let hutch_pid: i32 = line.trim().parse().unwrap();
    common::wait_until(
        std::time::Duration::from_secs(20),
        "the sandbox started",
        || marker.exists(),
    );
    parent.kill().unwrap();
    parent.wait().unwrap();
    common::wait_until(
        std::time::Duration::from_secs(20),
        "hutch-bwrap died with its parent",
        || {
            !Path::new(&format!("/proc/{hutch_pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{hutch_pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        },
    );
}

/// The argv shapes real tools build, from their source: OpenAI Codex's
/// Linux sandbox (codex-rs/linux-sandbox/src/bwrap.rs: read-only root,
/// minimal /dev, writable roots with `.git` re-protected, a pid namespace
/// and fresh /proc, `--new-session --die-with-parent`), Anthropic's
/// sandbox-runtime (src/sandbox/linux-sandbox-utils.ts: no network, the
/// host read-only, the workspace writable, secrets covered by /dev/null
/// and tmpfs) and Flatpak (the whole argv through `--args FD`, a usr-only
/// root with merged-/usr links, `--ro-bind-data` for /.flatpak-info,
/// `--lock-file`, `--info-fd`). Each runs under bwrap and hutch-bwrap
/// with the probe plus the tool's own checks.
fn tool_shapes(who: As) {
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-tools", who);
    let ws = dir.path().join("ws");
    for d in ["ws", "ws/.git", "ws/secret", "app"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
        common::own_as(&dir.path().join(d), who);
    }
    common::write_as(&ws.join(".env"), "TOKEN=x\n", who);
    common::write_as(&ws.join("secret/key"), "k\n", who);
    common::write_as(&dir.path().join("app/.ref"), "", who);
    let ws_s = ws.display().to_string();
    let app = dir.path().join("app").display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let checks = format!(
        "cd {ws_s}; echo w > f && echo ws-writable; echo x > .git/x 2>/dev/null || echo git-readonly; \
         cat .env 2>/dev/null || echo env-hidden; ls secret | wc -l; echo y > /usr/x 2>/dev/null || echo usr-readonly"
    );
    let codex_ro = Case {
        name: "codex read-only",
        args: s(&[
            "--new-session",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--unshare-pid",
            "--proc",
            "/proc",
        ]),
        ..Case::default()
    };
    let codex_ws = Case {
        name: "codex workspace-write",
        args: s(&[
            "--new-session",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--bind",
            &ws_s,
            &ws_s,
            "--ro-bind",
            &format!("{ws_s}/.git"),
            &format!("{ws_s}/.git"),
            "--unshare-pid",
            "--unshare-net",
            "--proc",
            "/proc",
        ]),
        env: vec![("HT_CMD".into(), checks.clone())],
        ..Case::default()
    };
    let srt = Case {
        name: "sandbox-runtime",
        args: s(&[
            "--new-session",
            "--die-with-parent",
            "--unshare-net",
            "--ro-bind",
            "/",
            "/",
            "--bind",
            &ws_s,
            &ws_s,
            "--ro-bind",
            "/dev/null",
            &format!("{ws_s}/.env"),
            "--tmpfs",
            &format!("{ws_s}/secret"),
            "--dev",
            "/dev",
            "--unshare-pid",
            "--proc",
            "/proc",
        ]),
        env: vec![("HT_CMD".into(), checks)],
        ..Case::default()
    };
    let flatpak_args = [
        "--unshare-pid",
        "--unshare-user-try",
        "--die-with-parent",
        "--new-session",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--ro-bind",
        "/etc",
        "/etc",
        "--dir",
        "/tmp",
        "--dir",
        "/var/tmp",
        "--ro-bind",
        &app,
        "/app",
        "--lock-file",
        "/app/.ref",
        "--setenv",
        "HT_FLATPAK",
        "1",
        "--ro-bind-data",
        "6",
        "/.flatpak-info",
        "--info-fd",
        "7",
    ]
    .join("\0");
    let flatpak = Case {
        name: "flatpak",
        args: s(&["--args", "5"]),
        fd5: Some(flatpak_args.into_bytes()),
        fd6: Some(b"[Application]\nname=org.example.App\n".to_vec()),
        env: vec![
            (
                "HT_PATHS".into(),
                "/ /app /.flatpak-info /lib /tmp /var/tmp".into(),
            ),
            ("HT_CMD".into(), "cat /.flatpak-info".into()),
        ],
        ..Case::default()
    };
    let mut failures = Vec::new();
    for case in [codex_ro, codex_ws, srt, flatpak] {
        let b = run(&bwrap(), &case, who, dir.path());
        assert_eq!(
            b.status,
            Some(0),
            "[{}] bwrap itself: {}",
            case.name,
            b.stderr
        );
        let h = run(&hutch_bwrap(), &case, who, dir.path());
        failures.extend(compare(&case, &b, &h));
    }
    assert!(
        failures.is_empty(),
        "{} tool shape(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn tool_argv_shapes_behave_alike_as_root() {
    tool_shapes(As::Root);
}

#[test]
fn tool_argv_shapes_behave_alike_as_nobody() {
    tool_shapes(As::Nobody);
}

/// `hutch bwrap ARGS` is the same entry as `hutch-bwrap ARGS`, and
/// `hutch-bwrap` speaks bubblewrap under any name (it is not picked by
/// argv[0]).
#[test]
fn hutch_bwrap_subcommand_and_any_name_behave_alike() {
    let who = common::caller();
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-cli", who);
    let renamed = dir.path().join("some-sandbox-helper");
    std::fs::copy(hutch_bwrap(), &renamed).unwrap();
    let args = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--unshare-pid",
        "--proc",
        "/proc",
        "--setenv",
        "HT_X",
        "1",
        "--",
        "sh",
        "-c",
        "echo $HT_X; echo $$",
    ];
    let out = |mut c: std::process::Command| {
        let o = c.args(args).current_dir(dir.path()).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let direct = out(std::process::Command::new(hutch_bwrap()));
    let mut sub = std::process::Command::new(common::hutch_bin());
    sub.arg("bwrap");
    let via_cli = out(sub);
    let via_name = out(std::process::Command::new(&renamed));
    assert_eq!(direct.0, Some(0), "{}", direct.2);
    // The shell is pid 2: hutch init is pid 1 of the sandbox's namespace.
    assert_eq!(direct.1, "1\n2\n");
    assert_eq!(direct, via_cli);
    assert_eq!(direct, via_name);
    let v = std::process::Command::new(common::hutch_bin())
        .args(["bwrap", "--version"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("bubblewrap 0.11.0 (hutch-bwrap "));
}

/// `--hutch-profile FILE` / `HUTCH_BWRAP_PROFILE=FILE` add a hutch
/// profile's limits and confinement to a bwrap argv: the wall clock ends
/// the sandbox (124), the exit report shows hutch's seccomp profile and
/// Landlock enforced; without a profile neither is (bubblewrap has none).
#[test]
fn hutch_profile_adds_limits_and_confinement() {
    let who = common::caller();
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-profile", who);
    let profile = dir.path().join("agent.toml");
    common::write_as(&profile, "[limits]\nwall_clock = \"1s\"\n", who);
    let status = dir.path().join("status.json");
    let argv = ["--ro-bind", "/", "/", "--dev", "/dev", "--", "sleep", "600"];
    let o = std::process::Command::new(hutch_bwrap())
        .arg("--hutch-profile")
        .arg(&profile)
        .arg("--hutch-status-file")
        .arg(&status)
        .args(argv)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report = common::exit_report(&status);
    assert_eq!(report["reason"], "timed-out");
    let confinement = &report["enforced"]["confinement"];
    assert_eq!(confinement["seccomp"]["profile"], "default");
    assert_eq!(confinement["seccomp"]["enforced"], true);
    assert!(
        confinement["landlock"]["enforced_abi"].as_u64().is_some(),
        "{confinement}"
    );
    // The environment variable does the same; the argv's own exit status
    // is kept.
    let o = std::process::Command::new(hutch_bwrap())
        .env("HUTCH_BWRAP_PROFILE", &profile)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    // Without a profile: bubblewrap's confinement only.
    let o = std::process::Command::new(hutch_bwrap())
        .arg("--hutch-status-file")
        .arg(&status)
        .args(["--ro-bind", "/", "/", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let report = common::exit_report(&status);
    assert_eq!(
        report["enforced"]["confinement"]["seccomp"]["enforced"],
        false
    );
    assert!(report["enforced"]["confinement"]["landlock"]["enforced_abi"].is_null());
}

/// Session and terminal: in a terminal (a pty `script` makes, its shell
/// the session leader), without `--new-session` the command stays in the
/// caller's session and foreground process group with the terminal as
/// its stdio, so job control works; with `--new-session` it has a session
/// of its own and no controlling terminal. Compared between bubblewrap
/// and hutch-bwrap through `ps -o sid,pgid,tpgid` of the command.
fn session(who: As) {
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    require!(
        Path::new("/usr/bin/script").exists(),
        "script(1) makes the test's terminal; apt-get install bsdutils"
    );
    let probe = r#"set -- $(ps -o sid=,pgid=,tpgid= -p $$)
[ "$1" = "$HT_SID" ] && echo same-session || echo own-session
[ "$2" = "$3" ] && echo foreground || echo not-foreground
[ -n "$HT_TTY" ] && { [ -t 0 ] && echo stdin-tty; [ -t 1 ] && echo stdout-tty; }
exit 0"#;
    let mut failures = Vec::new();
    for (name, extra, tty) in [
        ("caller's session", &[][..], "1"),
        ("new session", &["--new-session"][..], ""),
    ] {
        let run = |program: &Path| {
            let mut argv = vec![program.display().to_string()];
            argv.extend(["--ro-bind", "/", "/", "--dev", "/dev"].map(String::from));
            argv.extend(extra.iter().map(|s| s.to_string()));
            argv.extend(["--", "sh", "-c", probe].map(String::from));
            let quoted: Vec<String> = argv
                .iter()
                .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
                .collect();
            // The shell in the terminal is its session leader: the sid
            // the command is compared with.
            let inner = format!("HT_SID=$$ exec {}", quoted.join(" "));
            let mut c = if who.drops_to_nobody() {
                let mut c = std::process::Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "script"]);
                c
            } else {
                std::process::Command::new("script")
            };
            let o = c
                .args(["-qec", &inner, "/dev/null"])
                .env("HT_TTY", tty)
                .current_dir("/")
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).replace('\r', ""),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        };
        let b = run(&bwrap());
        let h = run(&hutch_bwrap());
        assert_eq!(b.0, Some(0), "[{name}] bwrap itself: {} {}", b.1, b.2);
        if b.0 != h.0 || b.1 != h.1 {
            failures.push(format!(
                "[{name}] bwrap {:?} {:?}; hutch-bwrap {:?} {:?} {}",
                b.0, b.1, h.0, h.1, h.2
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn session_and_terminal_match_bubblewrap_as_root() {
    session(As::Root);
}

#[test]
fn session_and_terminal_match_bubblewrap_as_nobody() {
    session(As::Nobody);
}

/// `--pidns FD` alone (the command in the joined pid namespace) and with
/// `--unshare-pid` (a pid namespace of its own nested in the joined one):
/// the number of pid namespace levels the command has (seen through the
/// host's procfs), its pid and its exit status, as bubblewrap's. As uid
/// 65534 the holder's user namespace is joined too (`--userns`): joining
/// a pid namespace needs the capabilities of the user namespace owning it.
fn pidns_joined(who: As) {
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let nobody = who.drops_to_nobody();
    let as_who = |program: &str| {
        let mut c = if nobody {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", program]);
            c
        } else {
            std::process::Command::new(program)
        };
        c.env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
        c
    };
    let mut holder = as_who("unshare");
    if nobody {
        holder.args(["--user", "--map-root-user"]);
    }
    let mut holder = holder
        .args(["--pid", "--fork", "--kill-child", "sleep", "600"])
        .spawn()
        .unwrap();
    let ns = format!("/proc/{}/ns/pid_for_children", holder.id());
    let userns = format!("/proc/{}/ns/user", holder.id());
    let own = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let own_user = std::fs::read_link("/proc/self/ns/user").unwrap();
    common::wait_until(
        std::time::Duration::from_secs(20),
        "the holder's namespaces",
        || {
            std::fs::read_link(&ns).is_ok_and(|l| l != own)
                && (!nobody || std::fs::read_link(&userns).is_ok_and(|l| l != own_user))
        },
    );
    // The pid only in a new namespace (the joined one's numbers depend
    // on what ran in it before).
    let probe = "grep NSpid /proc/self/status | awk '{print \"levels\", NF-1}'; [ -n \"$HT_NEW\" ] && echo \"pid $$\"; exit 4";
    let mut results = Vec::new();
    for extra in [&[][..], &["--unshare-pid"]] {
        let seen = |program: &Path| {
            let mut argv = vec![program.display().to_string()];
            if nobody {
                argv.extend(["--userns", "6"].map(String::from));
            }
            argv.extend(["--ro-bind", "/", "/", "--pidns", "5"].map(String::from));
            argv.extend(extra.iter().map(|s| s.to_string()));
            argv.extend(["--", "sh", "-c", probe].map(String::from));
            let out = as_who("sh")
                .args(["-c", &format!("exec \"$@\" 5<{ns} 6<{userns}"), "sh"])
                .args(&argv)
                .env("HT_NEW", if extra.is_empty() { "" } else { "1" })
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        results.push((extra, seen(&bwrap()), seen(&hutch_bwrap())));
    }
    let _ = holder.kill();
    let _ = holder.wait();
    for (extra, b, h) in results {
        assert_eq!(b.0, Some(4), "{extra:?} bwrap: {}", b.2);
        let want = if extra.is_empty() {
            "levels 2\n"
        } else {
            "levels 3\npid 2\n"
        };
        assert_eq!(b.1, want, "{extra:?}");
        assert_eq!((b.0, &b.1), (h.0, &h.1), "{extra:?} hutch-bwrap: {}", h.2);
    }
}

#[test]
fn pidns_joined_and_nested_behave_alike() {
    pidns_joined(As::Root);
}

#[test]
fn pidns_joined_and_nested_behave_alike_as_nobody() {
    pidns_joined(As::Nobody);
}

/// `--userns FD` (the command in a user namespace its caller made, here
/// one where the caller is root) and `--userns2 FD` (a user namespace
/// inside that one, entered after setup): ids, the user namespace the
/// command is in and the exit status, as bubblewrap's, for an
/// unprivileged caller (the launcher must keep using the caller's runtime
/// directory after joining a namespace where it is uid 0) and for root.
fn userns_joined(who: As, second: bool) {
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let as_who = |program: &str| {
        let mut c = if who.drops_to_nobody() {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", program]);
            c
        } else {
            std::process::Command::new(program)
        };
        c.env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
        c
    };
    // The holder (in namespace A) and, in it, the inner holder (in B, a
    // child of A) print their pids and B once they are there: readiness.
    let inner = "echo $$; readlink /proc/self/ns/user; exec sleep 600";
    let mut holder = as_who("unshare")
        .args(["--user", "--map-root-user", "sh", "-c"])
        .arg(format!(
            "echo $$; unshare --user --map-root-user sh -c '{inner}'"
        ))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(holder.stdout.take().unwrap()));
    let mut next = || lines.next().unwrap().unwrap();
    let (outer_pid, inner_pid, inner_ns) = (next(), next(), next());
    let outer_ns = std::fs::read_link(format!("/proc/{outer_pid}/ns/user")).unwrap();
    let probe = "id -u; id -g; readlink /proc/self/ns/user; exit 3";
    let seen = |program: &Path| {
        let mut redirs = format!("5</proc/{outer_pid}/ns/user");
        let mut argv = vec!["--userns", "5"];
        if second {
            redirs.push_str(&format!(" 6</proc/{inner_pid}/ns/user"));
            argv.extend(["--userns2", "6"]);
        }
        let out = as_who("sh")
            .args(["-c", &format!("exec \"$@\" {redirs}"), "sh"])
            .arg(program)
            .args(argv)
            .args(["--ro-bind", "/", "/", "--proc", "/proc"])
            .args(["--unshare-pid", "--", "sh", "-c", probe])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (b, h) = (seen(&bwrap()), seen(&hutch_bwrap()));
    let _ = std::process::Command::new("kill").arg(&inner_pid).status();
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(b.0, Some(3), "bwrap: {}", b.2);
    if second {
        assert_eq!(b.1, format!("0\n0\n{inner_ns}\n"), "bwrap enters B");
    } else {
        let outer_ns = outer_ns.display();
        assert_eq!(b.1, format!("0\n0\n{outer_ns}\n"), "bwrap stays in A");
    }
    assert_eq!((b.0, &b.1), (h.0, &h.1), "hutch-bwrap: {}", h.2);
}

#[test]
fn userns_joined_behaves_alike_as_root() {
    userns_joined(As::Root, false);
}

#[test]
fn userns_joined_behaves_alike_as_nobody() {
    userns_joined(As::Nobody, false);
}

#[test]
fn userns2_entered_after_setup_behaves_alike_as_root() {
    userns_joined(As::Root, true);
}

#[test]
fn userns2_entered_after_setup_behaves_alike_as_nobody() {
    userns_joined(As::Nobody, true);
}

/// Issue 33, items 6-12: what bubblewrap's own tests and manual page
/// expect. Where Debian's bwrap (0.8) behaves as 0.11.1 does, the two are
/// compared; where it does not (items 10, 11: 0.9+ behaviour), 0.11.1's
/// documented behaviour is asserted. Host directories are made under a
/// scratch directory of the identity's own.
#[test]
fn bubblewrap_0_11_fs_and_exec_semantics() {
    for who in common::identities_ready(ready) {
        let dir = TempDir::new("bwrap-items", who);
        let d = dir.path().display().to_string();
        let both = |name: &'static str, args: &[&str], cmd: &[&str]| {
            let case = Case::new(name, args).command(cmd);
            let b = run(&bwrap(), &case, who, dir.path());
            let h = run(&hutch_bwrap(), &case, who, dir.path());
            (b, h)
        };
        let same = |name: &'static str, args: &[&str], cmd: &[&str]| {
            let (b, h) = both(name, args, cmd);
            assert_eq!(
                (b.status, &b.stdout),
                (h.status, &h.stdout),
                "[{name} as {who:?}] bwrap stderr: {}\nhutch-bwrap stderr: {}",
                b.stderr,
                h.stderr
            );
            h
        };
        // Item 6: a bind on / after other operations hides them.
        same(
            "bind-root-after-ops",
            &[
                "--bind",
                "/",
                "/",
                "--tmpfs",
                "/usr/share",
                "--ro-bind",
                "/",
                "/",
            ],
            &[
                "sh",
                "-c",
                "ls /usr/share | grep -c . >/dev/null && echo share-shown; test -w / || echo root-readonly",
            ],
        );
        // Item 7: /proc/self/exe is the sandbox's own binary, run again.
        let (b, h) = both(
            "proc-self-exe",
            &["--ro-bind", "/", "/"],
            &["/proc/self/exe", "--version"],
        );
        assert_eq!(b.status, Some(0), "bwrap: {}", b.stderr);
        assert_eq!(h.status, Some(0), "[proc-self-exe as {who:?}] {}", h.stderr);
        assert!(h.stdout.starts_with("bubblewrap "), "{}", h.stdout);
        // Item 8: --dir leaves an existing directory's mode alone (a host
        // one under a bind too), works under a read-only root, and parents
        // follow --perms.
        let stat = format!(
            "stat -c '%a %n' {d}/e0700 {d}/e0754 {d}/p/a {d}/p/a/b {d}/p/a/b/c {d}/q {d}/q/r"
        );
        for (sub, mode) in [("e0700", 0o700), ("e0754", 0o754)] {
            let p = dir.path().join(sub);
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir(&p).unwrap();
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
            common::own_as(&p, who);
        }
        same(
            "dir-modes",
            &[
                "--ro-bind",
                "/",
                "/",
                "--dir",
                "/tmp",
                "--bind",
                &d,
                &d,
                "--dir",
                &format!("{d}/e0700"),
                "--perms",
                "0741",
                "--dir",
                &format!("{d}/e0754"),
                "--tmpfs",
                &format!("{d}/p"),
                "--perms",
                "0700",
                "--dir",
                &format!("{d}/p/a/b/c"),
                "--perms",
                "0750",
                "--dir",
                &format!("{d}/q/r"),
            ],
            &["sh", "-c", &stat],
        );
        let _ = std::fs::remove_dir_all(dir.path().join("q"));
        // Item 9: a file's mount point is made 0444 (seen on the host
        // after the run, under a bound directory).
        let mut modes = Vec::new();
        for program in [bwrap(), hutch_bwrap()] {
            let m = dir.path().join("m");
            let _ = std::fs::remove_dir_all(&m);
            std::fs::create_dir(&m).unwrap();
            common::own_as(&m, who);
            let case = Case::new(
                "file-mount-point",
                &[
                    "--ro-bind",
                    "/",
                    "/",
                    "--bind",
                    &format!("{d}/m"),
                    &format!("{d}/m"),
                    "--ro-bind",
                    "/etc/hostname",
                    &format!("{d}/m/f"),
                ],
            )
            .command(&["true"]);
            let s = run(&program, &case, who, dir.path());
            assert_eq!(s.status, Some(0), "{}", s.stderr);
            modes.push(
                std::os::unix::fs::PermissionsExt::mode(
                    &std::fs::metadata(m.join("f")).unwrap().permissions(),
                ) & 0o7777,
            );
        }
        assert_eq!(
            modes,
            [0o444, 0o444],
            "[file-mount-point as {who:?}] bwrap, hutch-bwrap"
        );
        // Item 12: --add-seccomp-fd programs go in with prctl: a first one
        // that denies seccomp(2) does not stop the second.
        let case = Case {
            fd5: Some(bwrap_support::deny_seccomp_syscall_bpf()),
            fd6: Some(bwrap_support::deny_mkdir_bpf()),
            ..Case::new(
                "seccomp-prctl",
                &[
                    "--ro-bind",
                    "/",
                    "/",
                    "--tmpfs",
                    "/tmp",
                    "--add-seccomp-fd",
                    "5",
                    "--add-seccomp-fd",
                    "6",
                ],
            )
            .command(&[
                "sh",
                "-c",
                "mkdir /tmp/x 2>/dev/null && echo mkdir-allowed || echo mkdir-denied",
            ])
        };
        let b = run(&bwrap(), &case, who, dir.path());
        let h = run(&hutch_bwrap(), &case, who, dir.path());
        assert_eq!(
            (b.status, b.stdout.as_str()),
            (Some(0), "mkdir-denied\n"),
            "bwrap: {}",
            b.stderr
        );
        assert_eq!(
            (h.status, h.stdout.as_str()),
            (Some(0), "mkdir-denied\n"),
            "[seccomp-prctl as {who:?}] {}",
            h.stderr
        );
        // Item 10 (bubblewrap 0.10+, not Debian's 0.8): an identical
        // symlink already there is fine; another target is refused.
        let link = [
            "--ro-bind",
            "/",
            "/",
            "--tmpfs",
            "/tmp",
            "--symlink",
            "/a",
            "/tmp/l",
        ];
        let again = [&link[..], &["--symlink", "/a", "/tmp/l"]].concat();
        let (_, h) = both("symlink-again", &again, &["readlink", "/tmp/l"]);
        assert_eq!(
            (h.status, h.stdout.as_str()),
            (Some(0), "/a\n"),
            "[symlink-again as {who:?}] {}",
            h.stderr
        );
        // Refused in bubblewrap's words (its test-run.sh matches them).
        let other = [&link[..], &["--symlink", "/b", "/tmp/l"]].concat();
        let (_, h) = both("symlink-other", &other, &["true"]);
        assert_eq!(
            (h.status, h.stderr.as_str()),
            (
                Some(1),
                "bwrap: Can't make symlink at /tmp/l: existing destination is /a\n"
            ),
            "[symlink-other as {who:?}]"
        );
        // A hostile existing target stays one escaped line.
        let hostile = [
            "--ro-bind",
            "/",
            "/",
            "--tmpfs",
            "/tmp",
            "--symlink",
            "/x\ny\"z",
            "/tmp/l",
            "--symlink",
            "/b",
            "/tmp/l",
        ];
        let (_, h) = both("symlink-other-hostile", &hostile, &["true"]);
        assert_eq!(
            (h.status, h.stderr.as_str()),
            (
                Some(1),
                "bwrap: Can't make symlink at /tmp/l: existing destination is /x\\ny\"z\n"
            ),
            "[symlink-other-hostile as {who:?}]"
        );
        // bubblewrap 0.12's --not-a-security-boundary: accepted (Debian's
        // 0.8 refuses it as unknown, so hutch-bwrap alone is checked).
        let (_, h) = both(
            "not-a-security-boundary",
            &["--ro-bind", "/", "/", "--not-a-security-boundary"],
            &["true"],
        );
        assert_eq!(
            (h.status, h.stderr.as_str()),
            (Some(0), ""),
            "[not-a-security-boundary as {who:?}]"
        );
        // Item 11 (bubblewrap 0.9+): an --overlay-src no overlay takes.
        let (_, h) = both(
            "overlay-src-trailing",
            &["--ro-bind", "/", "/", "--overlay-src", "/usr"],
            &["true"],
        );
        assert_eq!(h.status, Some(1));
        assert_eq!(
            h.stderr.trim(),
            "bwrap: --overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or --ro-overlay"
        );
    }
}

/// Issue 33, item 14: `--die-with-parent` without `--unshare-pid` ends the
/// command too when the caller is SIGKILLed (bubblewrap arms the
/// command's own parent-death signal). Compared with Debian's bwrap.
#[test]
fn die_with_parent_without_a_pid_namespace_ends_the_command() {
    let who = common::caller();
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-dwp-nopid", who);
    for program in [bwrap(), hutch_bwrap()] {
        let marker = dir.path().join("pid");
        let _ = std::fs::remove_file(&marker);
        let script = format!(
            "{} --ro-bind / / --die-with-parent --bind {d} {d} -- sh -c 'echo $$ > {m}.tmp; mv {m}.tmp {m}; exec sleep 600' & wait",
            program.display(),
            d = dir.path().display(),
            m = marker.display()
        );
        let mut parent = std::process::Command::new("sh")
            .args(["-c", &script])
            .spawn()
            .unwrap();
        common::wait_until(
            std::time::Duration::from_secs(20),
            "the command started",
            || marker.exists(),
        );
        let pid: i32 = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        parent.kill().unwrap();
        parent.wait().unwrap();
        let gone = || {
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !gone() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if !gone() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!(
                "{}: the command outlived its killed caller",
                program.display()
            );
        }
    }
}

/// bubblewrap's `test-specifying-pidns.sh` and `test-specifying-userns.sh`
/// (issue 33, item 13): a sandbox with its own user and pid namespaces
/// tells its `child-pid` on `--info-fd`; a second sandbox run by the same
/// caller joins them through that pid's `/proc/PID/ns/{user,pid}`
/// (`--userns`, `--pidns`) and sees the first one's pid namespace, as
/// bubblewrap's. As uid 65534 this needs hutch init to be dumpable (its
/// `/proc/PID/ns` is unreadable otherwise); the workload still cannot
/// read hutch init's `/proc/1/environ` (it lacks init's capabilities).
fn child_pid_joined(who: As) {
    require!(ready(who).is_ok(), ready(who).unwrap_err());
    let dir = TempDir::new("bwrap-child-pid", who);
    let as_who = |program: &str| {
        let mut c = if who.drops_to_nobody() {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", program]);
            c
        } else {
            std::process::Command::new(program)
        };
        c.env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
        c
    };
    let d = dir.path().display().to_string();
    let seen = |program: &Path| -> (String, String, String) {
        let ns_file = dir.path().join("ns");
        let info = dir.path().join("info.json");
        let _ = std::fs::remove_file(&ns_file);
        let _ = std::fs::remove_file(&info);
        // Records its pid namespace, tries init's environ, then waits for
        // its stdin to close.
        let first = format!(
            "if cat /proc/1/environ > {d}/env 2> {d}/env.err; then echo init-readable; else echo init-unreadable; fi > {d}/init; readlink /proc/self/ns/pid > {d}/ns.tmp; mv {d}/ns.tmp {d}/ns; cat"
        );
        let mut holder = as_who("sh")
            .args(["-c", "exec \"$@\" 9>\"$INFO\"", "sh"])
            .arg(program)
            .args(["--info-fd", "9", "--unshare-user", "--unshare-pid"])
            .args(["--ro-bind", "/", "/", "--bind", &d, &d, "--proc", "/proc"])
            .args(["sh", "-c", &first])
            .env("INFO", &info)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        common::wait_until(
            std::time::Duration::from_secs(20),
            "the first sandbox's pid namespace",
            || ns_file.exists(),
        );
        let text = std::fs::read_to_string(&info).unwrap();
        let pid: u32 = text
            .split("\"child-pid\":")
            .nth(1)
            .and_then(|r| r.split([',', '}']).next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no child-pid in {text:?}"));
        let second = as_who("sh")
            .args([
                "-c",
                &format!("exec \"$@\" 5</proc/{pid}/ns/user 6</proc/{pid}/ns/pid"),
                "sh",
            ])
            .arg(program)
            .args(["--userns", "5", "--pidns", "6", "--ro-bind", "/", "/"])
            .args(["readlink", "/proc/self/ns/pid"])
            .output()
            .unwrap();
        drop(holder.stdin.take());
        let _ = holder.wait();
        (
            std::fs::read_to_string(&ns_file).unwrap(),
            String::from_utf8_lossy(&second.stdout).into_owned()
                + &String::from_utf8_lossy(&second.stderr),
            std::fs::read_to_string(dir.path().join("init")).unwrap_or_default(),
        )
    };
    let b = seen(&bwrap());
    assert_eq!(b.0, b.1, "bwrap joins the first sandbox's pid namespace");
    // bubblewrap's own pid 1 holds nothing: its workload may read it.
    if who.drops_to_nobody() {
        assert_eq!(b.2, "init-readable\n", "the probe reads a dumpable pid 1");
    }
    let h = seen(&hutch_bwrap());
    assert_eq!(
        h.0, h.1,
        "hutch-bwrap joins the first sandbox's pid namespace"
    );
    assert_eq!(h.2, "init-unreadable\n", "the workload reads hutch init");
}

#[test]
fn child_pid_namespaces_are_joinable_as_root() {
    child_pid_joined(As::Root);
}

#[test]
fn child_pid_namespaces_are_joinable_as_nobody() {
    child_pid_joined(As::Nobody);
}
