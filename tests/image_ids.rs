//! Id ranges without host setup (`docs/images.md`, "Id ranges"): an
//! image whose files have several owners, run as root with no
//! /etc/subuid entry for root (a private /etc/subuid and /etc/subgid, seen
//! only by the test through a mount namespace: the host's files are never
//! touched), gets a private 65 536-id range from hutch's region; two
//! sandboxes get disjoint ranges; a SIGKILLed supervisor's range is
//! reclaimed; nothing on the host is left owned by an id below the region.
//! As uid 65534, the caller's own /etc/subuid range is used through
//! newuidmap/newgidmap, and without one the run is refused with the fix.
//!
//! The image is built from the host's static busybox with files owned as a
//! Debian tree has them (root 0, mail 8, shadow 42, utmp 43, staff 50) and
//! a user 1000; python3 is not in it, so `id -u` reports the uid. One
//! test runs a real `debootstrap --variant=minbase` bookworm tree with
//! python3 (tests/setup builds it once, cached under /opt/hutch-test-debian).

mod common;
mod image_support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use image_support::*;

/// hutch's region (src/launch/prepare/range.rs).
const REGION_START: u32 = 0x0008_0000;
const REGION_END: u32 = 0x6FFF_0000;
const RANGE: u32 = 65536;
const RANGES_DIR: &str = "/run/hutch/ranges";

/// Files as a Debian minbase tree owns them.
const OWNED: &[(&str, u32, u32)] = &[
    ("etc/root-file", 0, 0),
    ("var/mail/box", 0, 8),
    ("etc/shadow-like", 0, 42),
    ("var/log/wtmp-like", 0, 43),
    ("usr/local/staff-file", 0, 50),
    ("home/app/mine", 1000, 1000),
];

fn debian_like() -> Vec<u8> {
    let mut t = Tar::default()
        .busybox(TOOLS)
        .dir("etc")
        .file(
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n",
        )
        .file(
            "etc/group",
            "root:x:0:\nmail:x:8:\nshadow:x:42:\nutmp:x:43:\nstaff:x:50:\napp:x:1000:\n",
        )
        .dir("var")
        .dir("var/mail")
        .dir("var/log")
        .dir("usr")
        .dir("usr/local")
        .dir("home")
        .owned_dir("home/app", 0o755, 1000, 1000);
    for (path, uid, gid) in OWNED {
        t = t.owned_file(path, "data\n", 0o664, *uid, *gid);
    }
    t.dir("tmp").finish()
}

struct Image {
    t: TempDir,
    store: PathBuf,
    digest: String,
    ws: PathBuf,
}

fn import(who: As, user: &str) -> Image {
    let t = TempDir::new("img-ids", who);
    let lay = t.path().join("layout");
    let spec = ImageSpec {
        user: user.into(),
        ..ImageSpec::default()
    };
    oci_layout(&lay, &[(debian_like(), Comp::Tar)], &spec);
    let ws = t.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("input"), "from the workspace\n").unwrap();
    give(t.path(), who);
    let store = t.path().join("store");
    let digest = import_ok(who, &store, &[lay.to_str().unwrap(), "--name", "deb"]);
    Image {
        t,
        store,
        digest,
        ws,
    }
}

/// `hutch run --quiet --image-store S --image D TAIL` as `who`, with
/// /etc/subuid and /etc/subgid holding `ranges` (private to this command).
fn run_cmd(img: &Image, who: As, ranges: &str, scratch: &str, tail: &[&str]) -> Command {
    let mut args = vec![
        "run",
        "--quiet",
        "--image-store",
        img.store.to_str().unwrap(),
        "--image",
        &img.digest,
    ];
    args.extend_from_slice(tail);
    hutch_cmd(img, who, ranges, scratch, &args)
}

/// `hutch ARGS` as `who`, with /etc/subuid and /etc/subgid holding
/// `ranges` (private to this command).
fn hutch_cmd(img: &Image, who: As, ranges: &str, scratch: &str, hutch_args: &[&str]) -> Command {
    let mut argv: Vec<String> = Vec::new();
    if who == As::Nobody {
        argv.extend(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]
            .map(String::from),
        );
    }
    argv.push(hutch_bin().display().to_string());
    argv.extend(hutch_args.iter().map(|a| a.to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut c = with_subids(&img.t.path().join(scratch), ranges, &argv);
    c.current_dir(&img.ws);
    c
}

fn run(img: &Image, who: As, ranges: &str, scratch: &str, tail: &[&str]) -> Output {
    run_cmd(img, who, ranges, scratch, tail).output().unwrap()
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: status {:?}: {}{}",
        o.status.code(),
        out(o),
        err(o)
    );
    out(o)
}

/// The host start of `0 START COUNT` (a `/proc/self/uid_map` line).
fn map_start(line: &str) -> (u32, u32) {
    let f: Vec<u32> = line
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(f.len(), 3, "{line:?}");
    assert_eq!(f[0], 0, "{line:?}");
    (f[1], f[2])
}

fn assert_private(start: u32, count: u32) {
    assert_eq!(count, RANGE);
    assert!(
        (REGION_START..REGION_END).contains(&start) && start.is_multiple_of(RANGE),
        "{start:#x} is not a range of the region"
    );
}

/// Every entry below `dir` (not following links, not crossing into other
/// filesystems) owned by an id of the host below the region that is not
/// `allowed`: none may be.
fn low_owned(dir: &Path, allowed: &[u32]) -> Vec<String> {
    let mut bad = Vec::new();
    let dev = std::fs::symlink_metadata(dir).unwrap().dev();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            for id in [m.uid(), m.gid()] {
                if id < REGION_START && !allowed.contains(&id) {
                    bad.push(format!("{} {}:{}", p.display(), m.uid(), m.gid()));
                }
            }
            if m.is_dir() && m.dev() == dev {
                stack.push(p);
            }
        }
    }
    bad
}

const SCRIPT: &str = "id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map; \
    stat -c %u:%g /etc/root-file /var/mail/box /etc/shadow-like /var/log/wtmp-like \
    /usr/local/staff-file /home/app/mine";
const OWNERS: &str = "0:0\n0:8\n0:42\n0:43\n0:50\n1000:1000\n";

/// Root with no /etc/subuid entry: the image runs as root and as its user
/// 1000 in a private range, files show their owners, a file of gid 42 is
/// copied up and keeps its group, and the host keeps nothing of an id
/// below the region (the workspace written to is checked).
#[test]
fn root_without_subuid_runs_a_many_owner_image_in_a_private_range() {
    require!(have_busybox(), "busybox-static is needed for the image");
    require!(
        is_root(),
        "a private /etc/subuid needs a mount namespace made by root"
    );
    for user in ["", "app"] {
        let img = import(As::Root, user);
        let script = format!(
            "{SCRIPT}; echo more >> /etc/shadow-like && stat -c %u:%g /etc/shadow-like; \
             echo made > made-here && stat -c %u:%g made-here"
        );
        // A root left writable, so that /etc/shadow-like can be copied up.
        let mut spec = hutch::spec::default_profile();
        let mut image = hutch::spec::ImageRef::new(&img.digest);
        image.store = Some(img.store.clone());
        hutch::spec::use_image(&mut spec, image);
        spec.root_readonly = false;
        let profile = img.t.path().join(format!("writable-root-{user}.json"));
        std::fs::write(&profile, serde_json::to_string(&spec).unwrap()).unwrap();
        let o = hutch_cmd(
            &img,
            As::Root,
            "",
            "none",
            &[
                "run",
                "--quiet",
                "--profile",
                profile.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &script,
            ],
        )
        .output()
        .unwrap();
        let text = ok(&o, "root, no /etc/subuid");
        let lines: Vec<&str> = text.lines().collect();
        let (uid, gid) = if user.is_empty() {
            ("0", "0")
        } else {
            ("1000", "1000")
        };
        assert_eq!((lines[0], lines[1]), (uid, gid), "{text}");
        let (su, cu) = map_start(lines[2]);
        let (sg, cg) = map_start(lines[3]);
        assert_private(su, cu);
        assert_private(sg, cg);
        assert_eq!(lines[4..10].join("\n") + "\n", OWNERS, "{text}");
        if user.is_empty() {
            // Root inside may write the 0664 root:shadow file: copied up
            // with its owner and group.
            assert_eq!(lines[10], "0:42", "{text}{}", err(&o));
            assert_eq!(lines[11], "0:0", "{text}");
        } else {
            // 1000 may not write it (not in group shadow): refused, and
            // the rest still runs.
            assert!(err(&o).contains("Permission denied"), "{}", err(&o));
            assert_eq!(lines[10], "1000:1000", "{text}");
        }
        // The host: the store keeps the archive's owners (its layers are
        // root's import), the workspace nothing below the region but root's.
        assert_eq!(low_owned(&img.ws, &[0]), Vec::<String>::new());
        let report = img.t.path().join(format!("report-{user}"));
        let o = run(
            &img,
            As::Root,
            "",
            "report",
            &["--status-file", report.to_str().unwrap(), "--", "true"],
        );
        ok(&o, "report");
        let r = exit_report(&report);
        assert_eq!(r["enforced"]["image"]["id_map"], "private", "{r}");
        let start = r["enforced"]["image"]["id_range_start"].as_u64().unwrap();
        assert_private(start as u32, RANGE);
        // Released at the end.
        assert!(!Path::new(RANGES_DIR).join(format!("{start}.json")).exists());
    }
}

/// A sandbox that prints its uid map and waits for its stdin to close.
fn spawn_waiting(img: &Image, scratch: &str) -> (std::process::Child, u32) {
    let mut child = run_cmd(
        img,
        As::Root,
        "",
        scratch,
        &[
            "--",
            "sh",
            "-c",
            "head -n 1 /proc/self/uid_map; read x || true",
        ],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let (start, count) = map_start(line.trim());
    assert_private(start, count);
    (child, start)
}

/// Two live sandboxes get disjoint ranges, each recorded under the
/// runtime directory while it runs and released after.
#[test]
fn concurrent_sandboxes_get_disjoint_ranges() {
    require!(have_busybox(), "busybox-static is needed for the image");
    require!(
        is_root(),
        "a private /etc/subuid needs a mount namespace made by root"
    );
    let img = import(As::Root, "");
    let (mut a, sa) = spawn_waiting(&img, "a");
    let (mut b, sb) = spawn_waiting(&img, "b");
    assert!(
        sa + RANGE <= sb || sb + RANGE <= sa,
        "overlapping ranges {sa:#x} and {sb:#x}"
    );
    for s in [sa, sb] {
        assert!(Path::new(RANGES_DIR).join(format!("{s}.json")).exists());
    }
    for c in [&mut a, &mut b] {
        drop(c.stdin.take());
        assert!(c.wait().unwrap().success());
    }
    for s in [sa, sb] {
        assert!(!Path::new(RANGES_DIR).join(format!("{s}.json")).exists());
    }
}

/// A supervisor killed by SIGKILL leaves its record; once its sandbox is
/// gone too (PDEATHSIG), the next allocation reclaims the range.
#[test]
fn a_killed_supervisors_range_is_reclaimed() {
    require!(have_busybox(), "busybox-static is needed for the image");
    require!(
        is_root(),
        "a private /etc/subuid needs a mount namespace made by root"
    );
    let img = import(As::Root, "");
    let (mut a, start) = spawn_waiting(&img, "killed");
    let record = Path::new(RANGES_DIR).join(format!("{start}.json"));
    let held: serde_json::Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let pids: Vec<i64> = held["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(
        pids.len(),
        2,
        "the supervisor and the sandbox's pid 1: {held}"
    );
    // The unshare wrapper execs into sh, which execs hutch: `a` is the
    // supervisor itself.
    assert_eq!(pids[0], i64::from(a.id()), "{held}");
    a.kill().unwrap();
    a.wait().unwrap();
    assert!(record.exists(), "a SIGKILL removes nothing");
    wait_until(Duration::from_secs(20), "the sandbox to die", || {
        pids.iter()
            .all(|p| !Path::new(&format!("/proc/{p}")).exists())
    });
    let o = run(&img, As::Root, "", "next", &["--", "true"]);
    ok(&o, "the next allocation");
    // Gone, or (1 chance in 28 663) given out again and released again.
    assert!(!record.exists(), "the dead holder's record is reclaimed");
}

/// As uid 65534: with an /etc/subuid range of its own the image runs as
/// its user 1000 through newuidmap/newgidmap (inside 0 is the caller,
/// 1.. its range); with none, one line names the fix.
#[test]
fn an_unprivileged_caller_uses_its_own_range_or_is_told_the_fix() {
    require!(have_busybox(), "busybox-static is needed for the image");
    require!(
        is_root(),
        "a private /etc/subuid needs a mount namespace made by root"
    );
    require!(have("newuidmap") && have("newgidmap"), "package uidmap");
    let img = import(As::Nobody, "1000:1000");
    let o = run(&img, As::Nobody, "", "none", &["--", "id", "-u"]);
    assert_eq!(o.status.code(), Some(125), "{}{}", out(&o), err(&o));
    let e = err(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("/etc/subuid") && e.contains("nobody:100000:65536"),
        "{e}"
    );
    let o = run(
        &img,
        As::Nobody,
        "nobody:300000:65536\n",
        "range",
        &["--", "sh", "-c", "id -u; cat /proc/self/uid_map"],
    );
    let text = ok(&o, "uid 65534 with a range");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "1000", "{text}");
    assert!(
        lines[1].split_whitespace().eq(["0", "65534", "1"]),
        "{text}"
    );
    assert!(
        lines[2].split_whitespace().eq(["1", "300000", "65536"]),
        "{text}"
    );
}

/// A session of a many-owner image, as root with no /etc/subuid entry:
/// the range is allocated at create, recorded in session.json and held by
/// the session (not by a process) between commands; every command maps
/// it, so files earlier commands made as root and as 1000 keep their
/// owners in the next; it
/// is released at close, and the session's files on the host are owned by
/// the range, never by an id below the region.
#[test]
fn a_session_keeps_its_range_across_commands() {
    require!(have_busybox(), "busybox-static is needed for the image");
    require!(
        is_root(),
        "a private /etc/subuid needs a mount namespace made by root"
    );
    let img = import(As::Root, "");
    let state = img.t.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let session = |args: &[&str], scratch: &str| {
        let mut a = vec!["session", "--state-dir", state.to_str().unwrap()];
        a.extend_from_slice(args);
        hutch_cmd(&img, As::Root, "", scratch, &a).output().unwrap()
    };
    let o = session(
        &[
            "create",
            "--from",
            img.ws.to_str().unwrap(),
            "--image",
            &img.digest,
            "--image-store",
            img.store.to_str().unwrap(),
        ],
        "create",
    );
    let id = ok(&o, "create").trim().to_string();
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join(&id).join("session.json")).unwrap())
            .unwrap();
    let start = info["id_range_start"]
        .as_u64()
        .expect("a range in session.json") as u32;
    assert_private(start, RANGE);
    let record = Path::new(RANGES_DIR).join(format!("{start}.json"));
    assert!(record.exists());

    let o = session(
        &[
            "run",
            &id,
            "--",
            "sh",
            "-c",
            "head -n 1 /proc/self/uid_map; echo a > mine; stat -c %u:%g mine",
        ],
        "run1",
    );
    let text = ok(&o, "first command");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(map_start(lines[0]), (start, RANGE), "{text}");
    assert_eq!(&lines[1..], ["0:0"], "{text}");
    // A second owner: the image's user 1000 writes a file of its own.
    let o = session(
        &[
            "run",
            &id,
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--",
            "sh",
            "-c",
            "head -n 1 /proc/self/uid_map; echo b > theirs; stat -c %u:%g theirs",
        ],
        "run1b",
    );
    let text = ok(&o, "command as 1000");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(map_start(lines[0]), (start, RANGE), "{text}");
    assert_eq!(&lines[1..], ["1000:1000"], "{text}");
    // Between commands no process holds it: the session does.
    assert!(record.exists());
    let o = session(
        &[
            "run",
            &id,
            "--",
            "sh",
            "-c",
            "head -n 1 /proc/self/uid_map; stat -c %u:%g mine theirs",
        ],
        "run2",
    );
    let text = ok(&o, "second command");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(map_start(lines[0]), (start, RANGE), "{text}");
    assert_eq!(&lines[1..], ["0:0", "1000:1000"], "{text}");
    // On the host: the range's ids, nothing below the region but root's
    // own (hutch's baseline and bookkeeping).
    let upper = state.join(&id).join("upper");
    let m = std::fs::metadata(upper.join("theirs")).unwrap();
    assert_eq!((m.uid(), m.gid()), (start + 1000, start + 1000));
    let m = std::fs::metadata(upper.join("mine")).unwrap();
    assert_eq!((m.uid(), m.gid()), (start, start));
    assert_eq!(low_owned(&upper, &[0]), Vec::<String>::new());

    let o = session(&["close", &id], "close");
    ok(&o, "close");
    assert!(!record.exists(), "released at close");
}

/// `hutch run --private-ids` without an image: a workload that changes
/// ids (here setpriv to 1000, given CAP_SETUID/CAP_SETGID) runs in a
/// range of its own. Root with no /etc/subuid entry: a private range
/// from the region (without the flag the one-id map refuses the switch);
/// uid 65534: its own range through newuidmap (inside 0 is the caller),
/// or one line naming the fix when it has none.
#[test]
fn a_run_without_an_image_changes_ids_in_a_private_range() {
    require!(
        is_root(),
        "a private /etc/subuid needs a mount namespace made by root"
    );
    require!(have("newuidmap") && have("newgidmap"), "package uidmap");
    let script =
        "head -n 1 /proc/self/uid_map; setpriv --reuid 1000 --regid 1000 --clear-groups id -u";
    for who in [As::Root, As::Nobody] {
        let t = TempDir::new("ids-noimage", who);
        let ws = t.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        give(t.path(), who);
        let cmd = |ranges: &str, scratch: &str, flags: &[&str]| {
            let mut argv: Vec<String> = Vec::new();
            if who == As::Nobody {
                argv.extend(
                    [
                        "setpriv",
                        "--reuid=65534",
                        "--regid=65534",
                        "--clear-groups",
                    ]
                    .map(String::from),
                );
            }
            argv.push(hutch_bin().display().to_string());
            argv.extend(
                [
                    "run",
                    "--quiet",
                    "--cap-add",
                    "SETUID",
                    "--cap-add",
                    "SETGID",
                ]
                .map(String::from),
            );
            argv.extend(flags.iter().map(|a| a.to_string()));
            argv.extend(["--", "sh", "-c", script].map(String::from));
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            with_subids(&t.path().join(scratch), ranges, &argv)
                .current_dir(&ws)
                .output()
                .unwrap()
        };
        // The one-id map: no other id to become.
        let o = cmd("", "single", &[]);
        assert!(!out(&o).ends_with("1000\n"), "{}{}", out(&o), err(&o));
        assert!(err(&o).contains("setresuid"), "{}", err(&o));
        if who == As::Root {
            let o = cmd("", "private", &["--private-ids"]);
            let text = ok(&o, "root --private-ids");
            let lines: Vec<&str> = text.lines().collect();
            let (start, count) = map_start(lines[0]);
            assert_private(start, count);
            assert_eq!(lines[1], "1000", "{text}");
        } else {
            let o = cmd("", "none", &["--private-ids"]);
            assert_eq!(o.status.code(), Some(125), "{}{}", out(&o), err(&o));
            assert_eq!(err(&o).lines().count(), 1, "{}", err(&o));
            assert!(err(&o).contains("nobody:100000:65536"), "{}", err(&o));
            let o = cmd("nobody:300000:65536\n", "own", &["--private-ids"]);
            let text = ok(&o, "uid 65534 --private-ids");
            let lines: Vec<&str> = text.lines().collect();
            assert!(
                lines[0].split_whitespace().eq(["0", "65534", "1"]),
                "{text}"
            );
            assert_eq!(lines[1], "1000", "{text}");
        }
    }
}

/// The Debian minbase tree tests/setup builds once (debootstrap, cached).
const DEBIAN_TREE: &str = "/opt/hutch-test-debian/current/rootfs";

/// An OCI layout at `dir` of one uncompressed layer, `tar` of `tree`
/// (numeric owners kept), with the image user `user`: returns nothing, the
/// import names it. The layer streams from tar to a file, never to memory.
fn tree_layout(dir: &Path, tree: &str, user: &str) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let layer = dir.join("layer.tar");
    let o = Command::new("tar")
        .args(["--numeric-owner", "--sort=name", "-C", tree, "-cf"])
        .arg(&layer)
        .arg(".")
        .output()
        .unwrap();
    assert!(o.status.success(), "tar: {}", err(&o));
    let o = Command::new("sha256sum").arg(&layer).output().unwrap();
    let hex = String::from_utf8_lossy(&o.stdout)[..64].to_string();
    let size = std::fs::metadata(&layer).unwrap().len();
    std::fs::rename(&layer, blobs.join(&hex)).unwrap();
    let put = |data: &[u8]| -> (String, usize) {
        let d = sha(data);
        std::fs::write(blobs.join(&d[7..]), data).unwrap();
        (d, data.len())
    };
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Cmd": ["bash"], "User": user},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{hex}")]},
    });
    let (cd, cn) = put(&serde_json::to_vec(&config).unwrap());
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": format!("sha256:{hex}"), "size": size}],
    });
    let (md, mn) = put(&serde_json::to_vec(&manifest).unwrap());
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mn}
        ]}))
        .unwrap(),
    )
    .unwrap();
}

/// A real `debootstrap --variant=minbase` bookworm tree (with python3),
/// its image user 1000, run as root with no /etc/subuid entry: python3
/// reports uid 1000 (the image user) and 0 (`--uid 0 --gid 0`), the
/// files debootstrap gave gids 8, 42, 43 and 50 show those owners inside,
/// in a private range; the host keeps nothing below the region.
#[test]
fn a_debootstrap_minbase_image_runs_python_as_root_and_as_user_1000() {
    require!(
        Path::new(DEBIAN_TREE).join("usr/bin/python3").exists(),
        format!("{DEBIAN_TREE} is missing (tests/setup builds it with debootstrap)")
    );
    require!(
        is_root(),
        "a private /etc/subuid needs a mount namespace made by root"
    );
    let t = TempDir::new("img-debian", As::Root);
    let lay = t.path().join("layout");
    tree_layout(&lay, DEBIAN_TREE, "1000:1000");
    let ws = t.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let store = t.path().join("store");
    let digest = import_ok(
        As::Root,
        &store,
        &[lay.to_str().unwrap(), "--name", "minbase"],
    );
    std::fs::remove_dir_all(&lay).unwrap();
    let img = Image {
        t,
        store,
        digest,
        ws,
    };
    let script = "python3 -c 'import os; print(os.getuid(), os.getgid())'; \
        head -n 1 /proc/self/uid_map; \
        stat -c %u:%g /etc/passwd /var/mail /etc/shadow /var/log/wtmp /var/local; \
        echo made > made-here && stat -c %u:%g made-here";
    for (tail, uid) in [
        (&[][..], "1000 1000"),
        (&["--uid", "0", "--gid", "0"][..], "0 0"),
    ] {
        let mut args = tail.to_vec();
        args.extend(["--", "sh", "-c", script]);
        let o = run(&img, As::Root, "", "none", &args);
        let text = ok(&o, "the minbase image");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], uid, "{text}");
        let (start, count) = map_start(lines[1]);
        assert_private(start, count);
        assert_eq!(
            lines[2..7],
            ["0:0", "0:8", "0:42", "0:43", "0:50"],
            "{text}"
        );
        assert_eq!(lines[7], uid.replace(' ', ":"), "{text}");
        assert_eq!(low_owned(&img.ws, &[0]), Vec::<String>::new());
    }
}
