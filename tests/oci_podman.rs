//! podman runs its containers through `hutch-oci` (`podman --runtime`):
//! a busybox image built here (no registry), `run --rm` exit codes and
//! output, the flags users rely on observed from inside, a terminal
//! through the console socket, `run -d` + `exec` + `stop` + `rm`, and nothing left
//! behind. Each test has its own podman storage (`--root`/`--runroot`,
//! vfs driver: no mounts to leak).
//!
//! The podman flags every run needs on this kind of host (docs/oci.md):
//! `--ulimit nofile=1024:1024 --ulimit nproc=4096:4096` (root lacks
//! CAP_SYS_RESOURCE here, so podman's default rlimits cannot be set),
//! `--cgroup-manager cgroupfs`. podman's default limits (a pids limit of
//! 2048) are enforced through the cgroup v1 hierarchies on this hybrid
//! host, so no `--pids-limit 0` is needed. podman's own seccomp profile is
//! translated and enforced in every run.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

const BUSYBOX: &str = "/bin/busybox";
const IMAGE: &str = "localhost/hutch-oci-busybox:test";

struct Podman {
    dir: TempDir,
}

impl Podman {
    /// Fresh storage with the busybox image imported.
    fn new(tag: &str) -> Podman {
        let dir = TempDir::new(tag, As::Root);
        let p = Podman { dir };
        let rootfs = p.dir.path().join("rootfs");
        let bin = rootfs.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(BUSYBOX, bin.join("busybox")).unwrap();
        for applet in [
            "sh", "echo", "cat", "sleep", "ls", "id", "touch", "grep", "tty", "test", "hostname",
            "setsid", "dd",
        ] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        for d in ["etc", "proc", "sys", "dev", "tmp", "run"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        let tar = p.dir.path().join("rootfs.tar");
        let o = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .output()
            .unwrap();
        assert!(o.status.success(), "tar: {}", stderr(&o));
        let o = p
            .podman(&["import", "-q"])
            .arg(&tar)
            .arg(IMAGE)
            .output()
            .unwrap();
        assert!(o.status.success(), "podman import: {}", stderr(&o));
        p
    }

    fn podman(&self, args: &[&str]) -> Command {
        let d = self.dir.path();
        let mut c = Command::new("podman");
        c.arg("--root")
            .arg(d.join("storage"))
            .arg("--runroot")
            .arg(d.join("run"))
            .arg("--tmpdir")
            .arg(d.join("tmp"))
            .args(["--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"])
            .args(["--events-backend", "file"])
            .arg("--runtime")
            .arg(env!("CARGO_BIN_EXE_hutch-oci"))
            .args(args)
            // conmon writes an `oom` mark into its working directory when
            // the container is OOM-killed: not into the source tree.
            .current_dir(d)
            .stdin(Stdio::null());
        c
    }

    /// `podman run` with the flags this host needs, then `extra`.
    fn run(&self, extra: &[&str]) -> Output {
        self.podman(&["run"])
            .args(RUN_FLAGS)
            .args(extra)
            .output()
            .unwrap()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Whatever a failed assertion left: containers, then the storage
        // (vfs: plain directories).
        let _ = self.podman(&["rm", "-a", "-f", "-t", "0"]).output();
        let _ = self.podman(&["system", "reset", "-f"]).output();
    }
}

const RUN_FLAGS: &[&str] = &[
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=4096:4096",
];

fn requirements() -> Result<(), String> {
    if !is_root() {
        return Err("rootful podman (the tests run as root in CI)".into());
    }
    for tool in ["podman", "conmon", "tar"] {
        if !have(tool) {
            return Err(format!("{tool} is needed (apt: podman, conmon)"));
        }
    }
    if !Path::new(BUSYBOX).exists() {
        return Err(format!("{BUSYBOX} (busybox-static) builds the test image"));
    }
    Ok(())
}

/// No state directory of a hutch-oci container is left for any of `ids`,
/// and no process of theirs.
fn assert_nothing_left(ids: &[String]) {
    for id in ids {
        let dir = PathBuf::from("/run/hutch-oci").join(id);
        assert!(!dir.exists(), "state left: {}", dir.display());
    }
}

fn container_ids(p: &Podman) -> Vec<String> {
    let o = p
        .podman(&["ps", "-a", "--no-trunc", "-q"])
        .output()
        .unwrap();
    stdout(&o).lines().map(String::from).collect()
}

#[test]
fn run_rm_passes_output_and_exit_codes_like_runc() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let p = Podman::new("podman-rm");
    // The default (bridge) network: podman hands a netns path to join.
    let o = p.run(&["--rm", IMAGE, "sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(stdout(&o), "out\n");
    assert!(stderr(&o).contains("err"), "{}", stderr(&o));
    // A signal death: 128+N, as podman reports it with runc.
    let o = p.run(&[
        "--rm",
        "--network",
        "none",
        IMAGE,
        "sh",
        "-c",
        "kill -TERM $$",
    ]);
    assert_eq!(o.status.code(), Some(143), "{}", stderr(&o));
    assert!(container_ids(&p).is_empty(), "--rm removed the containers");
}

#[test]
fn podman_flags_are_observed_inside_the_container() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let p = Podman::new("podman-flags");
    let vol = p.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("f"), "from the host\n").unwrap();
    let volume = format!("{}:/vol:ro", vol.display());
    let script = "id -u; id -g; cat /vol/f; touch /vol/x 2>/dev/null || echo vol-ro; \
                  touch /new 2>/dev/null || echo root-ro; ls /sys/class/net; \
                  grep CapEff /proc/self/status; hostname; touch /tmp/t /run/r /var/tmp/v && echo tmpfs-rw";
    let o = p.run(&[
        "--rm",
        "--network",
        "none",
        "-v",
        &volume,
        // podman's tmpfs over /tmp, /run, /var/tmp (`tmpcopyup`).
        "--read-only",
        "--user",
        "1000:1000",
        "--cap-drop",
        "ALL",
        "--hostname",
        "inside",
        IMAGE,
        "sh",
        "-c",
        script,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(String::from).collect();
    assert_eq!(
        lines,
        [
            "1000",
            "1000",
            "from the host",
            "vol-ro",
            "root-ro",
            "lo",
            "CapEff:\t0000000000000000",
            "inside",
            "tmpfs-rw"
        ],
        "{}",
        stderr(&o)
    );
    assert!(!vol.join("x").exists());
}

#[test]
fn a_tty_run_gets_a_terminal_through_the_console_socket() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    require!(
        have("script"),
        "script (util-linux/bsdutils) drives the pty"
    );
    let p = Podman::new("podman-tty");
    let mut cmd = p.podman(&["run", "--rm", "-t"]);
    cmd.args(RUN_FLAGS).args([
        "--network",
        "none",
        IMAGE,
        "sh",
        "-c",
        "tty; test -t 0 && test -t 1 && echo both-ttys; exit 4",
    ]);
    // script gives podman a terminal of its own; -e passes the exit code.
    let quote = |s: &std::ffi::OsStr| format!("'{}'", s.to_str().unwrap().replace('\'', "'\\''"));
    let line = std::iter::once(quote(cmd.get_program()))
        .chain(cmd.get_args().map(quote))
        .collect::<Vec<_>>()
        .join(" ");
    let o = Command::new("script")
        .args(["-qefc", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(4), "{out} {}", stderr(&o));
    assert!(out.contains("/dev/pts/0"), "{out}");
    assert!(out.contains("both-ttys"), "{out}");
}

#[test]
fn detached_run_exec_stop_and_rm_leave_nothing() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let p = Podman::new("podman-detached");
    let mut ids = Vec::new();
    // One that ends on SIGTERM, one that ignores it (SIGKILL after -t 1).
    for script in ["sleep 1000", "trap '' TERM; while :; do sleep 1; done"] {
        let o = p.run(&["-d", "--network", "none", IMAGE, "sh", "-c", script]);
        assert!(o.status.success(), "{}", stderr(&o));
        let id = stdout(&o).trim().to_string();
        let o = p
            .podman(&["inspect", "--format", "{{.State.Status}}", &id])
            .output()
            .unwrap();
        assert_eq!(stdout(&o).trim(), "running", "{}", stderr(&o));
        let state = PathBuf::from("/run/hutch-oci").join(&id).join("state.json");
        assert!(state.exists(), "hutch-oci holds its state");
        // podman exec: a process in the same container, its code back.
        let o = p
            .podman(&[
                "exec",
                "--user",
                "1000:1000",
                &id,
                "sh",
                "-c",
                "id -u; ls /proc | grep -c '^[0-9]'; exit 5",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(5), "exec: {}", stderr(&o));
        let out = stdout(&o);
        assert_eq!(out.lines().next(), Some("1000"), "{out}");
        // Its own pid namespace: hutch init, the workload and the exec'd
        // processes only.
        let pids: u32 = out
            .lines()
            .nth(1)
            .unwrap_or("0")
            .trim()
            .parse()
            .unwrap_or(0);
        assert!((3..10).contains(&pids), "{out}");
        let o = p.podman(&["stop", "-t", "1", &id]).output().unwrap();
        assert!(o.status.success(), "stop: {}", stderr(&o));
        let o = p
            .podman(&["inspect", "--format", "{{.State.Status}}", &id])
            .output()
            .unwrap();
        assert_eq!(stdout(&o).trim(), "exited");
        let o = p.podman(&["rm", &id]).output().unwrap();
        assert!(o.status.success(), "rm: {}", stderr(&o));
        ids.push(id);
    }
    wait_until(Duration::from_secs(10), "podman rm to finish", || {
        container_ids(&p).is_empty()
    });
    assert_nothing_left(&ids);
    for id in &ids {
        let o = Command::new("pgrep").args(["-f", id]).output().unwrap();
        assert_eq!(stdout(&o), "", "a process of {id} is left");
    }
}

#[test]
fn podman_seccomp_profiles_are_enforced() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let p = Podman::new("podman-seccomp");
    // podman's default profile: a filter is installed.
    let o = p.run(&[
        "--rm",
        "--network",
        "none",
        IMAGE,
        "grep",
        "^Seccomp:",
        "/proc/self/status",
    ]);
    assert_eq!(stdout(&o), "Seccomp:\t2\n", "{}", stderr(&o));
    // A profile of the user's: mkdir answers EPERM, the rest is allowed.
    let profile = p.path().join("deny-mkdir.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}"#,
    )
    .unwrap();
    let opt = format!("seccomp={}", profile.display());
    let o = p.run(&[
        "--rm",
        "--network",
        "none",
        "--security-opt",
        &opt,
        IMAGE,
        "sh",
        "-c",
        "mkdir /tmp/d 2>&1; echo made=$?; echo still-runs",
    ]);
    let out = stdout(&o);
    assert!(
        out.contains("Operation not permitted"),
        "{out} {}",
        stderr(&o)
    );
    assert!(
        out.contains("made=1") && out.contains("still-runs"),
        "{out}"
    );
}

/// podman's defaults include a pids limit (2048, as `linux.resources.pids`)
/// and `--memory 64m` a memory limit (with swap: memory+swap 128m). On this
/// host (hybrid: the controllers are cgroup v1) hutch-oci enforces both in
/// the container's group of each v1 hierarchy: the files hold podman's
/// values while it runs, a 100 MiB buffer is OOM-killed (137) where a
/// 10 MiB one passes, and `rm` leaves no group behind.
#[test]
fn podman_default_pids_limit_and_memory_are_enforced_through_cgroup_v1() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let host = hutch::internals::cgroup::host::HostCgroups::detect();
    let offered = host
        .v2_mount
        .as_ref()
        .map(|m| std::fs::read_to_string(m.join("cgroup.controllers")).unwrap_or_default())
        .unwrap_or_default();
    require!(
        !offered.contains("pids") && host.v1_hierarchy("pids").is_some(),
        "this host has no cgroup v1 pids hierarchy, or a cgroup v2 one (the VM suite covers that)"
    );
    let p = Podman::new("podman-pids");
    let o = p
        .podman(&["run", "-d", "--network", "none", "--memory", "64m"])
        .args(RUN_FLAGS)
        .args([IMAGE, "sleep", "100"])
        .output()
        .unwrap();
    assert!(o.status.success(), "run -d: {}", stderr(&o));
    let id = stdout(&o).trim().to_string();
    // podman's cgroupfs manager: /libpod_parent/libpod-ID in each hierarchy.
    let group = |c: &str| {
        PathBuf::from("/sys/fs/cgroup")
            .join(c)
            .join("libpod_parent")
            .join(format!("libpod-{id}"))
    };
    let read = |c: &str, f: &str| {
        std::fs::read_to_string(group(c).join(f))
            .unwrap_or_else(|e| panic!("{}: {e}", group(c).join(f).display()))
    };
    assert_eq!(read("pids", "pids.max").trim(), "2048");
    assert_eq!(read("memory", "memory.limit_in_bytes").trim(), "67108864");
    let procs = read("memory", "cgroup.procs");
    assert!(!procs.trim().is_empty(), "the container runs in its group");
    assert_eq!(procs, read("pids", "cgroup.procs"));
    let o = p.podman(&["rm", "-f", "-t", "0", &id]).output().unwrap();
    assert!(o.status.success(), "rm: {}", stderr(&o));
    for c in ["memory", "pids", "cpuacct"] {
        assert!(!group(c).exists(), "{} left", group(c).display());
    }
    for (size, code) in [("100M", 137), ("10M", 0)] {
        let o = p
            .podman(&["run", "--rm", "--network", "none", "--memory", "64m"])
            .args(RUN_FLAGS)
            .args([IMAGE, "dd", "if=/dev/zero", "of=/dev/null", "count=1"])
            .arg(format!("bs={size}"))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "bs={size}: {}", stderr(&o));
    }
    // conmon saw the kill through the v1 group's OOM events.
    assert!(p.path().join("oom").exists(), "conmon's oom mark");
    let ids = container_ids(&p);
    assert_nothing_left(&ids);
}

/// An image whose `/bin/sh` is a trap: run by anyone, it records that it
/// ran and with which capabilities into `/mark` (a volume the test reads),
/// the way a hostile image's shell would do its work. Its own programs use
/// `/bin/busybox` by path.
const TRAP_IMAGE: &str = "localhost/hutch-oci-trap:test";
const TRAP_SH: &str = "#!/bin/busybox sh\n\
    { echo \"the image's /bin/sh ran as uid $(/bin/busybox id -u)\"; \
    /bin/busybox grep CapEff /proc/self/status; } >> /mark/trap\n";

fn import_trap_image(p: &Podman) {
    let rootfs = p.path().join("trap-rootfs");
    let bin = rootfs.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(BUSYBOX, bin.join("busybox")).unwrap();
    std::fs::write(bin.join("sh"), TRAP_SH).unwrap();
    std::fs::set_permissions(
        bin.join("sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    for d in ["etc", "proc", "sys", "dev", "tmp", "run", "mark"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    let tar = p.path().join("trap.tar");
    let o = Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .output()
        .unwrap();
    assert!(o.status.success(), "tar: {}", stderr(&o));
    let o = p
        .podman(&["import", "-q"])
        .arg(&tar)
        .arg(TRAP_IMAGE)
        .output()
        .unwrap();
    assert!(o.status.success(), "podman import: {}", stderr(&o));
}

/// One hook of podman's hooks.d format (`podman --hooks-dir DIR`) in a
/// directory of its own.
fn hooks_dir(p: &Podman, name: &str, stage: &str, path: &str, args: &[&str]) -> PathBuf {
    let dir = p.path().join(format!("hooks.d-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let hook = serde_json::json!({
        "version": "1.0.0",
        "hook": {"path": path, "args": args, "timeout": 30},
        "when": {"always": true},
        "stages": [stage],
    });
    std::fs::write(dir.join(format!("{name}.json")), hook.to_string()).unwrap();
    dir
}

/// capability(7) number of CAP_KILL.
const CAP_KILL: u32 = 5;

/// The effective capabilities of a `CapEff:` line of /proc/PID/status.
fn cap_eff(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// runtime-spec createContainer: "before pivot_root", path resolved in the
/// runtime namespace. podman sends a host `#!/bin/sh` script as a
/// createContainer hook for an image whose `/bin/sh` is a trap: the
/// host's shell runs it (with the host's `/` in the container's mount
/// namespace, the built root at root.path), the image's never runs, and
/// the container starts. Before the fix hutch-oci executed the hook after
/// pivot_root: the kernel took the image's `/bin/sh` as the interpreter
/// and ran it as host root with every capability (the trap's mark).
#[test]
fn a_create_container_hook_runs_the_hosts_shell_never_the_images() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let p = Podman::new("podman-hookc");
    import_trap_image(&p);
    let mark = p.path().join("mark");
    std::fs::create_dir_all(&mark).unwrap();
    // Only the host's view has this file.
    let host_only = p.path().join("host-only");
    std::fs::write(&host_only, "").unwrap();
    let out = p.path().join("hook.out");
    let script = p.path().join("hook.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             root=$(sed -n 's/.*\"root\": *{{\"path\": *\"\\([^\"]*\\)\".*/\\1/p' \"$(sed -n 's/.*\"bundle\": *\"\\([^\"]*\\)\".*/\\1/p')/config.json\")\n\
             {{ echo \"uid $(id -u)\"; grep CapEff /proc/self/status; \
             test -e {host} && echo host-root; \
             test -e \"$root/bin/busybox\" && echo rootfs-at-root-path; }} > {out}\n",
            host = host_only.display(),
            out = out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let hooks = hooks_dir(
        &p,
        "create",
        "createContainer",
        script.to_str().unwrap(),
        &["hook.sh"],
    );
    let volume = format!("{}:/mark", mark.display());
    let o = p
        .podman(&["--hooks-dir", hooks.to_str().unwrap(), "run"])
        .args(RUN_FLAGS)
        .args(["--rm", "--network", "none", "-v", &volume, TRAP_IMAGE])
        .args(["/bin/busybox", "echo", "workload ran"])
        .output()
        .unwrap();
    let trap = std::fs::read_to_string(mark.join("trap")).unwrap_or_default();
    assert_eq!(
        trap, "",
        "the image's /bin/sh ran as the hook's interpreter"
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "workload ran\n");
    let hook = std::fs::read_to_string(&out).unwrap_or_else(|e| {
        panic!(
            "the host's /bin/sh never ran the hook ({e}): {}",
            stderr(&o)
        )
    });
    assert!(
        hook.contains("host-root"),
        "the hook sees the host's /: {hook}"
    );
    assert!(
        hook.contains("rootfs-at-root-path"),
        "the hook sees the container's root at root.path: {hook}"
    );
}

/// runtime-spec startContainer: in the container, before the workload;
/// whatever runs there is the image's, so the hook runs as the container
/// process: its uid, its capabilities (here only CAP_KILL), its
/// no-new-privs and podman's seccomp filter, never host root with every
/// capability. The workload records the same. Before the fix the hook ran
/// as uid 0 with CapEff 1fffeffffff (or all of this kernel's) in the
/// host's user namespace, without a filter.
#[test]
fn a_start_container_hook_runs_as_the_container_process() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let p = Podman::new("podman-hooks");
    import_trap_image(&p);
    let mark = p.path().join("mark");
    std::fs::create_dir_all(&mark).unwrap();
    std::fs::set_permissions(&mark, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let record = |name: &str| {
        format!(
            "{{ /bin/busybox id -u; /bin/busybox grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; }} > /mark/{name}"
        )
    };
    // The path must exist for podman on the host and, as the spec says,
    // resolves in the container: /bin/busybox is both.
    let hook_cmd = record("hook");
    let hooks = hooks_dir(
        &p,
        "start",
        "startContainer",
        "/bin/busybox",
        &["busybox", "sh", "-c", &hook_cmd],
    );
    let volume = format!("{}:/mark", mark.display());
    let workload = record("workload");
    for user in ["0:0", "1000:1000"] {
        for f in ["hook", "workload", "trap"] {
            let _ = std::fs::remove_file(mark.join(f));
        }
        let o = p
            .podman(&["--hooks-dir", hooks.to_str().unwrap(), "run"])
            .args(RUN_FLAGS)
            .args(["--rm", "--network", "none", "-v", &volume])
            .args(["--user", user, "--cap-drop", "ALL", "--cap-add", "CAP_KILL"])
            .args([TRAP_IMAGE, "/bin/busybox", "sh", "-c", &workload])
            .output()
            .unwrap();
        assert!(o.status.success(), "{user}: {}", stderr(&o));
        let hook = std::fs::read_to_string(mark.join("hook")).unwrap();
        let ran = std::fs::read_to_string(mark.join("workload")).unwrap();
        let uid = user.split(':').next().unwrap();
        assert_eq!(
            hook.lines().next(),
            Some(uid),
            "{user}: the hook's uid: {hook}"
        );
        assert_eq!(hook, ran, "{user}: the hook is confined as the workload is");
        let caps = cap_eff(&hook).unwrap_or_else(|| panic!("{hook}"));
        assert_eq!(caps & !(1 << CAP_KILL), 0, "{user}: {hook}");
        assert!(
            hook.contains("Seccomp:\t2"),
            "{user}: podman's filter: {hook}"
        );
    }
}

/// `podman run --pid=host`: the container has no pid namespace, so ending
/// hutch init ends nothing else. Its workload and a daemon it starts
/// (`setsid` in a subshell that exits: another session, reparented away)
/// must not outlive `podman stop` (hutch-oci `kill --all 15`, then
/// `delete --force`), `podman kill` (hutch init only, then podman's
/// cleanup `delete --force`), or `podman rm -f`. Before the fix the
/// daemon (and after `podman kill` the workload) stayed on the host,
/// reparented to its pid 1.
#[test]
fn stop_kill_and_rm_end_every_process_of_a_pid_host_container() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let p = Podman::new("podman-pidhost");
    let base = 8_000_000 + std::process::id() * 10;
    for (step, end) in [
        (1, &["stop", "-t", "1"][..]),
        (2, &["kill"][..]),
        (3, &["rm", "-f", "-t", "0"][..]),
    ] {
        let n = base + step;
        let (daemon, workload) = (format!("{n}1"), format!("{n}2"));
        let script = format!("(setsid sleep {daemon} &); exec sleep {workload}");
        let o = p.run(&[
            "-d",
            "--network",
            "none",
            "--pid",
            "host",
            IMAGE,
            "sh",
            "-c",
            &script,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let id = stdout(&o).trim().to_string();
        wait_until(
            Duration::from_secs(30),
            "the workload and its daemon",
            || live_sleeps(&daemon).len() == 1 && live_sleeps(&workload).len() == 1,
        );
        let o = p.podman(end).arg(&id).output().unwrap();
        assert!(o.status.success(), "podman {end:?}: {}", stderr(&o));
        wait_until(
            Duration::from_secs(30),
            &format!("podman {end:?} to end the workload and its daemon"),
            || live_sleeps(&daemon).is_empty() && live_sleeps(&workload).is_empty(),
        );
        let _ = p.podman(&["rm", "-f", &id]).output();
    }
}
