//! `hutch-oci` driven the way an engine drives it, without an engine: a
//! bundle (a busybox rootfs and a config.json) through `create`, `state`,
//! `start`, `kill`, `delete`, with this test process as the subreaper that
//! reads the container's exit status (as conmon or containerd's shim do);
//! the annotations; and bad bundles, which fail with one line and leave no
//! state behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn hutch_oci() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hutch-oci"))
}

/// `hutch-oci`, run as `who` (through setpriv when root drops to 65534).
fn hutch_oci_as(who: As) -> Command {
    if who.drops_to_nobody() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(hutch_oci());
        c
    } else {
        Command::new(hutch_oci())
    }
}

const BUSYBOX: &str = "/bin/busybox";

/// A bundle: `rootfs/` with busybox and its applets, and a config.json.
struct Bundle {
    dir: TempDir,
    state_root: PathBuf,
    /// Containers created, deleted (--force) when the test ends, even by
    /// a failed assertion.
    ids: std::cell::RefCell<Vec<String>>,
}

impl Drop for Bundle {
    fn drop(&mut self) {
        for id in self.ids.borrow().iter() {
            let _ = self.run(&["delete", "--force", id]);
        }
    }
}

fn base_config(args: &[&str]) -> Value {
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "args": args,
            "env": ["PATH=/bin", "HOME=/"],
            "cwd": "/",
            "user": {"uid": 0, "gid": 0},
            "capabilities": {
                "bounding": ["CAP_KILL"], "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]
            },
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs"},
        "hostname": "oci-test",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]}
        ],
        "linux": {
            "namespaces": [
                {"type": "pid"}, {"type": "mount"}, {"type": "ipc"},
                {"type": "uts"}, {"type": "network"}
            ],
            "maskedPaths": ["/proc/kcore"],
            "readonlyPaths": ["/proc/sys"]
        }
    })
}

impl Bundle {
    fn new(tag: &str, config: &Value) -> Bundle {
        let dir = TempDir::new(tag, As::Root);
        let bin = dir.path().join("rootfs/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(BUSYBOX, bin.join("busybox")).unwrap();
        for applet in ["sh", "echo", "cat", "sleep", "ls", "id", "hostname", "true"] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        let state_root = dir.path().join("state");
        let b = Bundle {
            dir,
            state_root,
            ids: Default::default(),
        };
        b.write_config(config);
        b
    }

    fn write_config(&self, config: &Value) {
        std::fs::write(
            self.dir.path().join("config.json"),
            serde_json::to_vec_pretty(config).unwrap(),
        )
        .unwrap();
    }

    fn oci(&self, args: &[&str]) -> Command {
        let mut c = Command::new(hutch_oci());
        c.arg("--root").arg(&self.state_root).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.oci(args).output().unwrap()
    }

    /// `create` with the container's stdout and stderr in files (a pipe
    /// would stay open as long as the container runs).
    /// Returns the exit status, hutch-oci's stderr (which the container
    /// shares) and the path of the container's stdout.
    fn create(&self, id: &str) -> (std::process::ExitStatus, String, PathBuf) {
        let out = self.dir.path().join(format!("{id}.out"));
        let err = self.dir.path().join(format!("{id}.err"));
        let pid_file = self.dir.path().join(format!("{id}.pid"));
        self.ids.borrow_mut().push(id.to_string());
        let status = self
            .oci(&["create", "--bundle"])
            .arg(self.dir.path())
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .status()
            .unwrap();
        (status, std::fs::read_to_string(&err).unwrap(), out)
    }

    fn pid(&self, id: &str) -> i32 {
        std::fs::read_to_string(self.dir.path().join(format!("{id}.pid")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn state(&self, id: &str) -> Value {
        let o = self.run(&["state", id]);
        assert!(o.status.success(), "state: {}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Be the subreaper of what `hutch-oci create` leaves behind, like an
/// engine's shim.
fn become_subreaper() {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(r, 0);
}

/// The exit status of `pid` (a child after reparenting), waited for.
fn wait_exit(pid: i32) -> i32 {
    let mut status = 0;
    wait_until(
        Duration::from_secs(30),
        &format!("process {pid} to end"),
        || {
            // SAFETY: a valid out-pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            assert!(r == 0 || r == pid, "waitpid({pid}) = {r}");
            r == pid
        },
    );
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

fn requirements() -> Result<(), String> {
    if !is_root() {
        return Err("hutch-oci runs containers as root (the engines it serves run as root)".into());
    }
    if !Path::new(BUSYBOX).exists() {
        return Err(format!("{BUSYBOX} (busybox-static) builds the test rootfs"));
    }
    Ok(())
}

#[test]
fn create_start_state_delete_follow_the_runtime_spec() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let config = base_config(&[
        "sh",
        "-c",
        "echo hello from $(hostname) as $(id -u); exit 7",
    ]);
    let b = Bundle::new("oci-lifecycle", &config);
    let id = format!("lifecycle-{}", std::process::id());
    let (st, err, out) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let pid = b.pid(&id);
    let s = b.state(&id);
    assert_eq!(s["status"], "created", "{s}");
    assert_eq!(s["pid"], pid);
    assert_eq!(s["id"], id.as_str());
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "",
        "nothing runs before start"
    );
    let o = b.run(&["start", &id]);
    assert!(o.status.success(), "start: {}", stderr(&o));
    assert_eq!(wait_exit(pid), 7, "the engine reads the workload's code");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "hello from oci-test as 0\n"
    );
    assert_eq!(b.state(&id)["status"], "stopped");
    let o = b.run(&["kill", &id, "KILL"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("container not running"),
        "{}",
        stderr(&o)
    );
    let o = b.run(&["start", &id]);
    assert!(
        !o.status.success(),
        "a stopped container does not start again"
    );
    let o = b.run(&["delete", &id]);
    assert!(o.status.success(), "delete: {}", stderr(&o));
    assert!(!b.state_root.join(&id).exists(), "delete removes the state");
    let o = b.run(&["state", &id]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    let o = b.run(&["delete", "--force", &id]);
    assert!(o.status.success(), "delete --force of nothing succeeds");
}

#[test]
fn kill_signals_the_workload_and_delete_force_ends_a_running_container() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let b = Bundle::new("oci-kill", &base_config(&["sleep", "1000"]));
    let id = format!("kill-{}", std::process::id());
    let (st, err, _) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let pid = b.pid(&id);
    assert!(b.run(&["start", &id]).status.success());
    assert_eq!(b.state(&id)["status"], "running");
    // exec: in the container's namespaces, its code back, flags after the
    // id belong to the command.
    let o = b.run(&["exec", &id, "sh", "-c", "hostname; exit 4"]);
    assert_eq!(o.status.code(), Some(4), "exec: {}", stderr(&o));
    assert_eq!(stdout(&o), "oci-test\n");
    let o = b.run(&["exec", &id, "/bin/not-there"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("executing the command failed"),
        "{}",
        stderr(&o)
    );
    let o = b.run(&["delete", &id]);
    assert!(!o.status.success(), "a running container needs --force");
    // CRI-O's form: the name without SIG.
    let o = b.run(&["kill", &id, "TERM"]);
    assert!(o.status.success(), "kill: {}", stderr(&o));
    assert_eq!(wait_exit(pid), 128 + libc::SIGTERM);
    assert!(b.run(&["delete", &id]).status.success());

    // A second one, never started, then one running: delete --force.
    let id2 = format!("kill2-{}", std::process::id());
    let (st, err, _) = b.create(&id2);
    assert!(st.success(), "create: {err}");
    let pid2 = b.pid(&id2);
    assert!(b.run(&["start", &id2]).status.success());
    let o = b.run(&["delete", "--force", &id2]);
    assert!(o.status.success(), "delete --force: {}", stderr(&o));
    assert_eq!(wait_exit(pid2), 128 + libc::SIGKILL);
    assert!(!b.state_root.join(&id2).exists());
}

#[test]
fn run_is_create_and_start_and_reports_the_exit_code() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let mut b = Bundle::new("oci-run", &base_config(&["sh", "-c", "echo ran; exit 5"]));
    // A state root whose hold socket's path is longer than sun_path.
    b.state_root = b.path().join("s".repeat(110));
    let id = format!("run-{}", std::process::id());
    let o = b
        .oci(&["run", "--bundle"])
        .arg(b.path())
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert_eq!(stdout(&o), "ran\n");
    assert!(!b.state_root.join(&id).exists(), "run removes its state");
}

#[test]
fn annotations_choose_landlock_and_the_egress_proxy() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let script = "ls /sys/class/net 2>/dev/null; test -S /run/hutch/proxy.sock && echo door; echo $HTTP_PROXY";
    for (landlock, egress) in [("off", false), ("best-effort", true)] {
        let mut config = base_config(&["sh", "-c", script]);
        let b = Bundle::new("oci-annotations", &config);
        let status = b.path().join("status.jsonl");
        config["mounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["ro", "nosuid", "nodev", "noexec"]}));
        let mut ann = json!({
            "run.hutch.landlock": landlock,
            "run.hutch.status-file": status.to_str().unwrap(),
        });
        if egress {
            ann["run.hutch.egress.allow"] = json!("example.invalid");
        }
        config["annotations"] = ann;
        b.write_config(&config);
        let id = format!("ann-{landlock}-{}", std::process::id());
        let (st, err, out) = b.create(&id);
        assert!(st.success(), "create: {err}");
        let pid = b.pid(&id);
        assert!(b.run(&["start", &id]).status.success());
        assert_eq!(wait_exit(pid), 0);
        let text = std::fs::read_to_string(&out).unwrap();
        // The keeper writes the report once the sandbox is gone.
        wait_until(Duration::from_secs(10), "the exit report", || {
            std::fs::read_to_string(&status)
                .is_ok_and(|t| t.lines().any(|l| l.contains("\"exit_code\"")))
        });
        let report = exit_report(&status);
        assert_eq!(
            report["enforced"]["namespaces"],
            json!(["mount", "pid", "ipc", "uts", "net"]),
            "the container's own namespaces (no user namespace in the config)"
        );
        let ll = &report["enforced"]["confinement"]["landlock"];
        if landlock == "off" {
            assert_eq!(ll["enforced_abi"], Value::Null, "{report}");
        } else {
            assert!(ll["enforced_abi"].is_u64(), "{report}");
        }
        if egress {
            assert!(text.contains("door"), "the proxy door is there: {text}");
            assert!(text.contains("127.0.0.1:3128"), "{text}");
            assert_eq!(text.lines().next(), Some("lo"), "an empty netns: {text}");
        }
        assert!(b.run(&["delete", &id]).status.success());
    }
}

#[test]
fn bad_bundles_fail_with_one_line_and_leave_nothing() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let good = base_config(&["true"]);
    let b = Bundle::new("oci-bad", &good);
    // Static: runs in the container's namespaces without the host's libraries.
    let busybox_in_bundle = b.path().join("rootfs/bin/busybox").display().to_string();
    let busybox_in_bundle = busybox_in_bundle.as_str();
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut with = |f: &dyn Fn(&mut Value), expect: &'static str| {
        let mut c = good.clone();
        f(&mut c);
        cases.push((c, expect));
    };
    with(&|c| c["mounts"][0]["type"] = json!("nfs"), "mounts[0].type");
    with(
        &|c| {
            c["mounts"].as_array_mut().unwrap().push(
                json!({"destination": "/x", "type": "bind", "source": "../../etc", "options": ["rbind"]}),
            )
        },
        "mounts[3].source",
    );
    with(
        &|c| c["linux"]["namespaces"][0]["type"] = json!("bogus"),
        "linux.namespaces[0].type",
    );
    with(
        &|c| c["linux"]["resources"] = json!({"pids": {"limit": -5}}),
        "linux.resources.pids.limit: must be 1 to",
    );
    with(
        &|c| c["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_NOTIFY"}),
        "linux.seccomp.defaultAction",
    );
    with(
        &|c| c["hooks"] = json!({"prestart": [{"path": "bin/true"}]}),
        "hooks.prestart[0].path",
    );
    // A failing createRuntime hook fails create and ends the container.
    with(
        &|c| {
            c["hooks"] =
                json!({"createRuntime": [{"path": "/bin/sh", "args": ["sh", "-c", "exit 3"]}]})
        },
        "hooks.createRuntime[0] (/bin/sh) failed: exited with status 3",
    );
    with(
        &|c| c["hooks"] = json!({"createContainer": [{"path": busybox_in_bundle, "args": ["sh", "-c", "exit 4"]}]}),
        "failed: exited with status 4",
    );
    with(
        &|c| c["linux"]["resources"] = json!({"unified": {"cgroup.procs": "1"}}),
        "linux.resources.unified.cgroup.procs",
    );
    with(
        &|c| {
            c["linux"]["cgroupsPath"] = json!("/../../etc");
            c["linux"]["resources"] = json!({"memory": {"limit": 67108864}});
        },
        "linux.cgroupsPath: must not hold `..`",
    );
    with(
        &|c| c["annotations"] = json!({"run.hutch.landlok": "off"}),
        "run.hutch.landlok",
    );
    with(
        &|c| c["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "hard": 10, "soft": 20}]),
        "process.rlimits[0]",
    );
    with(&|c| c["process"]["cwd"] = json!("relative"), "process.cwd");
    with(
        &|c| {
            c["mounts"].as_array_mut().unwrap().push(
                json!({"destination": "/bin", "type": "tmpfs", "source": "tmpfs", "options": ["tmpcopyup"]}),
            )
        },
        "tmpcopyup works only over an empty or missing directory",
    );
    with(
        &|c| c["process"]["args"] = json!(["/bin/not-there"]),
        "command not found",
    );
    for (i, (config, expect)) in cases.iter().enumerate() {
        b.write_config(config);
        let id = format!("bad{i}-{}", std::process::id());
        let (st, err, _) = b.create(&id);
        assert!(!st.success(), "case {expect}: accepted");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.contains(expect), "case {expect}: {err}");
        assert!(
            !b.state_root.join(&id).exists(),
            "case {expect}: state left"
        );
    }
    // Not JSON, and JSON of the wrong shape: the place, never the content.
    for text in ["{\"ociVersion\": \x1b[31m", "{\"process\": 7}"] {
        std::fs::write(b.path().join("config.json"), text).unwrap();
        let (st, err, _) = b.create("notjson");
        assert!(!st.success());
        assert!(
            err.contains("config.json is not a runtime-spec config"),
            "{err}"
        );
        assert!(!err.contains('\x1b'), "{err}");
    }
    let o = b.run(&["state", "../escape"]);
    assert!(
        stderr(&o).contains("invalid container id"),
        "{}",
        stderr(&o)
    );
    let o = b.run(&["checkpoint", "x"]);
    assert!(!o.status.success(), "unsupported commands fail");
}

#[test]
fn features_name_the_versions_engines_check() {
    let o = Command::new(hutch_oci()).arg("features").output().unwrap();
    assert!(o.status.success());
    let f: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(f["ociVersionMin"], "1.0.0");
    assert!(f["ociVersionMax"].as_str().unwrap().starts_with("1."));
    assert!(
        f["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .contains(&json!("network"))
    );
    assert_eq!(
        f["hooks"],
        json!([
            "prestart",
            "createRuntime",
            "createContainer",
            "startContainer",
            "poststart",
            "poststop"
        ])
    );
    assert_eq!(f["linux"]["cgroup"]["v2"], true);
    assert_eq!(f["linux"]["cgroup"]["v1"], true);
    // CRI-O's gate for annotations that change confinement.
    assert_eq!(
        f["potentiallyUnsafeConfigAnnotations"],
        json!(["run.hutch."])
    );
    assert_eq!(f["linux"]["mountExtensions"]["idmap"]["enabled"], false);
}

/// A config with a user namespace of its own (root inside mapped to the
/// launcher), run as root and as uid 65534: hutch-oci's unprivileged path.
#[test]
fn a_user_namespace_container_runs_as_root_and_as_nobody() {
    for who in identities() {
        require!(
            Path::new(BUSYBOX).exists(),
            "busybox-static builds the rootfs"
        );
        let host = if who == As::Root { 0 } else { caller_id(who) };
        let mut config = base_config(&[
            "sh",
            "-c",
            "echo uid $(id -u); cat /proc/self/uid_map; cat /hooked; exit 6",
        ]);
        config["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "user"}));
        let map = json!([{"containerID": 0, "hostID": host, "size": 1}]);
        config["linux"]["uidMappings"] = map.clone();
        config["linux"]["gidMappings"] = map;
        let b = Bundle::new("oci-userns", &config);
        // A createContainer hook joins the container's user and mount
        // namespaces before pivot_root and writes into its root, at
        // root.path, before the workload starts: as root and as nobody
        // (hutch init has not changed credentials yet there). Once hutch
        // init is non-dumpable (startContainer), only a root hutch-oci
        // may enter its namespaces: an unprivileged one fails `start`,
        // saying why (docs/oci.md).
        let busybox = b.path().join("rootfs/bin/busybox");
        let hooked = b.path().join("rootfs/hooked");
        config["hooks"] = json!({"createContainer": [
            {"path": busybox.to_str().unwrap(), "args": ["sh", "-c", format!("echo hooked > {}", hooked.display())]}
        ]});
        b.write_config(&config);
        let rootless = who.drops_to_nobody();
        // A rootless engine's rootfs belongs to its user.
        let rootfs = b.path().join("rootfs");
        let mut owned = vec![b.path().to_path_buf(), b.path().join("config.json")];
        owned.push(rootfs.clone());
        owned.push(rootfs.join("bin"));
        owned.extend(
            std::fs::read_dir(rootfs.join("bin"))
                .unwrap()
                .map(|e| e.unwrap().path()),
        );
        for p in owned {
            own_as(&p, who);
        }
        let id = format!("userns-{}-{}", host, std::process::id());
        let oci = |args: &[&str]| {
            let mut cmd = hutch_oci_as(who);
            cmd.arg("--root")
                .arg(&b.state_root)
                .args(args)
                .arg("--bundle")
                .arg(b.path())
                .arg(&id)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        };
        if rootless {
            let mut with_start = config.clone();
            with_start["hooks"]["startContainer"] = json!([{"path": "/bin/true"}]);
            b.write_config(&with_start);
            own_as(&b.path().join("config.json"), who);
            let o = oci(&["run"]);
            assert!(!o.status.success(), "{}", stderr(&o));
            assert!(
                stderr(&o).contains("open only to a root hutch-oci"),
                "{}",
                stderr(&o)
            );
            b.write_config(&config);
            own_as(&b.path().join("config.json"), who);
            let _ = oci(&["delete", "--force"]);
            assert!(!b.state_root.join(&id).exists());
            let _ = std::fs::remove_file(b.path().join("rootfs/hooked"));
        }
        let mut cmd = hutch_oci_as(who);
        let o = cmd
            .arg("--root")
            .arg(&b.state_root)
            .args(["run", "--bundle"])
            .arg(b.path())
            .arg(&id)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(6), "{who:?}: {}", stderr(&o));
        let out = stdout(&o);
        let map: Vec<&str> = out
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(out.lines().next(), Some("uid 0"), "{out}");
        assert_eq!(map, ["0", &host.to_string(), "1"], "{out}");
        assert_eq!(out.lines().nth(2), Some("hooked"), "{who:?}: {out}");
        assert!(!b.state_root.join(&id).exists());
    }
}

/// The host uid `who` launches as.
fn caller_id(who: As) -> u32 {
    if who.drops_to_nobody() {
        NOBODY
    } else {
        nix::unistd::getuid().as_raw()
    }
}

/// Without a device cgroup, a device node works only where hutch made it:
/// one shipped in the rootfs, or made with CAP_MKNOD on a tmpfs, opens
/// nothing (the root, binds and tmpfs mounts are nodev).
#[test]
fn device_nodes_work_only_where_hutch_made_them() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let script = "echo x > /dev/null && echo dev-null-ok; \
                  echo x > /shipped 2>/dev/null || echo shipped-denied; \
                  mknod /tmp/made c 1 3 && { echo x > /tmp/made 2>/dev/null || echo made-denied; }";
    let mut config = base_config(&["sh", "-c", script]);
    let caps = json!(["CAP_KILL", "CAP_MKNOD"]);
    for set in ["bounding", "effective", "permitted"] {
        config["process"]["capabilities"][set] = caps.clone();
    }
    let b = Bundle::new("oci-nodev", &config);
    let shipped =
        std::ffi::CString::new(b.path().join("rootfs/shipped").to_str().unwrap()).unwrap();
    // SAFETY: a valid path; mknod of /dev/null's numbers.
    let r = unsafe { libc::mknod(shipped.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(r, 0, "mknod in the test rootfs");
    let id = format!("nodev-{}", std::process::id());
    let o = b
        .oci(&["run", "--bundle"])
        .arg(b.path())
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        stdout(&o),
        "dev-null-ok\nshipped-denied\nmade-denied\n",
        "{}",
        stderr(&o)
    );
}

/// A bundle-level hook: a script that records its stdin (the state), its
/// mount namespace (from a child process, which is in the container's
/// pid namespace when the hook joined it), its hostname, its environment
/// and its effective capabilities into `OUT.*`.
const HOOK_SCRIPT: &str = r#"#!/bin/sh
cat > "$1.state"
echo "$(readlink /proc/self/ns/mnt) $(hostname) $PHASE" > "$1.ns"
grep CapEff /proc/self/status > "$1.caps"
"#;

fn ns_of(pid: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
        .unwrap()
        .display()
        .to_string()
}

#[test]
fn hooks_run_at_their_points_with_the_state_and_in_the_right_namespaces() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let mut config = base_config(&["sh", "-c", "echo workload >> /rec/order; exit 0"]);
    let b = Bundle::new("oci-hooks", &config);
    for applet in ["readlink", "grep"] {
        std::os::unix::fs::symlink("busybox", b.path().join("rootfs/bin").join(applet)).unwrap();
    }
    let rec = b.path().join("rec");
    std::fs::create_dir(&rec).unwrap();
    let script = b.path().join("hook.sh");
    // startContainer's path resolves in the container: a copy in the root.
    for at in [script.clone(), b.path().join("rootfs/hook.sh")] {
        std::fs::write(&at, HOOK_SCRIPT).unwrap();
        std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/rec", "type": "bind", "source": rec.to_str().unwrap(), "options": ["rbind"]}),
    );
    let hook = |phase: &str, inside: bool| {
        // startContainer runs in the pivoted root: it sees the container's
        // files; every other hook sees the host's `/` (createContainer: in
        // the container's mount namespace, before pivot_root).
        let (path, out) = if inside {
            ("/hook.sh".to_string(), format!("/rec/{phase}"))
        } else {
            (
                script.display().to_string(),
                rec.join(phase).display().to_string(),
            )
        };
        json!({"path": path, "args": ["hook", out], "env": [format!("PHASE={phase}")], "timeout": 20})
    };
    // Before pivot_root the built root, with its mounts, is at root.path.
    let rootfs = b.path().join("rootfs");
    let sees_root = json!({"path": "/bin/sh", "args": ["sh", "-c", format!(
        "test -e {}/proc/self/status && echo built > {}/root-path", rootfs.display(), rec.display()
    )]});
    let failing = json!({"path": "/bin/sh", "args": ["sh", "-c", "exit 9"]});
    config["hooks"] = json!({
        "prestart": [hook("prestart", false)],
        "createRuntime": [hook("createRuntime", false)],
        "createContainer": [hook("createContainer", false), sees_root],
        "startContainer": [hook("startContainer", true)],
        // Failures after start are logged, the next hook still runs.
        "poststart": [failing.clone(), hook("poststart", false)],
        "poststop": [failing, hook("poststop", false)],
    });
    config["annotations"] = json!({"org.example": "v"});
    b.write_config(&config);
    let id = format!("hooks-{}", std::process::id());
    let (st, err, _) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let pid = b.pid(&id).to_string();
    let host_ns = ns_of("self");
    let container_ns = ns_of(&pid);
    assert_ne!(host_ns, container_ns);
    let read = |phase: &str| -> (Value, String) {
        let state = std::fs::read_to_string(rec.join(format!("{phase}.state")))
            .unwrap_or_else(|e| panic!("{phase} did not run: {e}"));
        let ns = std::fs::read_to_string(rec.join(format!("{phase}.ns"))).unwrap();
        (serde_json::from_str(&state).unwrap(), ns.trim().to_string())
    };
    for phase in ["prestart", "createRuntime", "createContainer"] {
        let (state, _) = read(phase);
        // runtime.md: `created` is "after step 2" (the environment made);
        // these hooks are steps 3 to 5 (as crun; hooks_stdin checks it).
        assert_eq!(state["status"], "created", "{phase}: {state}");
        assert_eq!(state["id"], id.as_str());
        assert_eq!(state["pid"].to_string(), pid);
        assert_eq!(state["bundle"], b.path().to_str().unwrap());
        assert_eq!(state["annotations"]["org.example"], "v");
    }
    let host_name = nix::unistd::gethostname().unwrap().into_string().unwrap();
    assert_eq!(
        read("createRuntime").1,
        format!("{host_ns} {host_name} createRuntime")
    );
    assert_eq!(
        read("prestart").1,
        format!("{host_ns} {host_name} prestart")
    );
    // Before pivot_root, and before the hostname is set (as under runc).
    assert_eq!(
        read("createContainer").1,
        format!("{container_ns} {host_name} createContainer")
    );
    assert_eq!(
        std::fs::read_to_string(rec.join("root-path")).unwrap_or_default(),
        "built\n",
        "createContainer sees the built root at root.path"
    );
    assert!(
        !rec.join("startContainer.state").exists(),
        "not before start"
    );
    let o = b.run(&["start", &id]);
    assert!(o.status.success(), "start: {}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: hooks.poststart[0] (/bin/sh): exited with status 9"),
        "{}",
        stderr(&o)
    );
    let (state, ns) = read("startContainer");
    assert_eq!(state["status"], "created");
    assert_eq!(ns, format!("{container_ns} oci-test startContainer"));
    // It runs as the container process: CAP_KILL alone (base_config).
    let caps = |phase: &str| std::fs::read_to_string(rec.join(format!("{phase}.caps"))).unwrap();
    assert_eq!(caps("startContainer"), "CapEff:\t0000000000000020\n");
    assert_eq!(read("poststart").0["status"], "running");
    assert_eq!(wait_exit(b.pid(&id)), 0);
    let o = b.run(&["delete", &id]);
    assert!(o.status.success(), "delete: {}", stderr(&o));
    let (state, ns) = read("poststop");
    assert_eq!(state["status"], "stopped");
    assert_eq!(state.get("pid"), None, "{state}");
    assert_eq!(ns, format!("{host_ns} {host_name} poststop"));
    assert!(!b.state_root.join(&id).exists());
}

/// On a host whose controllers are cgroup v1 (hybrid here: the cgroup2
/// mount offers none of them), root's hutch-oci makes the container's
/// `cgroupsPath` in each v1 hierarchy and writes runc's v1 files there,
/// hutch init starts in them, `update` writes them again and `delete`
/// removes them. An unprivileged hutch-oci, for which no v1 subtree is
/// delegated, fails create with one line naming the key, before anything
/// is made. (The v2 mapping is tested in the kernel VM:
/// tests/kernel/suite.sh.)
#[test]
fn limits_go_to_the_cgroup_v1_hierarchies_and_delete_removes_them() {
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
    become_subreaper();
    let parent = format!("hutch-oci-test-{}", std::process::id());
    let mut config = base_config(&["sh", "-c", "cat /proc/self/cgroup; sleep 100"]);
    config["linux"]["cgroupsPath"] = json!(format!("/{parent}/c1"));
    config["linux"]["resources"] = json!({
        "pids": {"limit": 2048},
        "memory": {"limit": 67108864, "swap": 134217728, "swappiness": 10},
        "cpu": {"shares": 512, "quota": 50000, "period": 100000}
    });
    let b = Bundle::new("oci-limits", &config);
    let id = format!("limits-{}", std::process::id());
    let (st, err, out) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let group = |c: &str| {
        PathBuf::from("/sys/fs/cgroup")
            .join(c)
            .join(&parent)
            .join("c1")
    };
    let read = |c: &str, f: &str| std::fs::read_to_string(group(c).join(f)).unwrap();
    assert_eq!(read("pids", "pids.max").trim(), "2048");
    assert_eq!(read("memory", "memory.limit_in_bytes").trim(), "67108864");
    assert_eq!(
        read("memory", "memory.memsw.limit_in_bytes").trim(),
        "134217728"
    );
    // v1 keeps swappiness (cgroup v2 has no such file).
    assert_eq!(read("memory", "memory.swappiness").trim(), "10");
    assert_eq!(read("cpu", "cpu.shares").trim(), "512");
    assert_eq!(read("cpu", "cpu.cfs_quota_us").trim(), "50000");
    // hutch init is in each group before it starts anything.
    let init = b.pid(&id).to_string();
    for c in ["memory", "pids", "cpu", "cpuacct"] {
        let procs = read(c, "cgroup.procs");
        assert!(procs.lines().any(|p| p == init), "{c}: {procs}");
    }
    let o = b.run(&["start", &id]);
    assert!(o.status.success(), "start: {}", stderr(&o));
    wait_until(Duration::from_secs(20), "the workload's output", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.contains("pids:"))
    });
    let seen = std::fs::read_to_string(&out).unwrap();
    assert!(
        seen.lines()
            .any(|l| l.ends_with(&format!(":pids:/{parent}/c1"))),
        "{seen}"
    );
    // An exec'd process joins the same groups.
    let o = b.run(&["exec", &id, "cat", "/proc/self/cgroup"]);
    assert!(o.status.success(), "exec: {}", stderr(&o));
    for c in ["memory", "pids", "cpu"] {
        assert!(
            stdout(&o)
                .lines()
                .any(|l| l.ends_with(&format!(":{c}:/{parent}/c1"))),
            "{c}: {}",
            stdout(&o)
        );
    }
    // `update` writes the v1 files.
    let res = b.path().join("update.json");
    // Memory raised above the old memory+swap cap: memsw goes first.
    std::fs::write(
        &res,
        r#"{"pids": {"limit": 100}, "cpu": {"shares": 256},
            "memory": {"limit": 209715200, "swap": 419430400}}"#,
    )
    .unwrap();
    let o = b
        .oci(&["update", "--resources"])
        .arg(&res)
        .arg(&id)
        .output()
        .unwrap();
    assert!(o.status.success(), "update: {}", stderr(&o));
    assert_eq!(read("pids", "pids.max").trim(), "100");
    assert_eq!(read("cpu", "cpu.shares").trim(), "256");
    assert_eq!(read("memory", "memory.limit_in_bytes").trim(), "209715200");
    assert_eq!(
        read("memory", "memory.memsw.limit_in_bytes").trim(),
        "419430400"
    );
    let o = b.run(&["delete", "--force", &id]);
    assert!(o.status.success(), "delete: {}", stderr(&o));
    for c in ["memory", "pids", "cpu", "cpuacct"] {
        let made = PathBuf::from("/sys/fs/cgroup").join(c).join(&parent);
        assert!(!made.exists(), "{} left", made.display());
    }

    // An unprivileged hutch-oci (a rootless engine's) may not write the v1
    // hierarchies: one line, nothing made.
    if can_launch_as(As::Nobody).is_ok() {
        for p in [b.path().to_path_buf(), b.path().join("config.json")] {
            own_as(&p, As::Nobody);
        }
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(hutch_oci())
            .arg("--root")
            .arg(b.path().join("nobody-state"))
            .args(["create", "--bundle"])
            .arg(b.path())
            .arg(&id)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = stderr(&o);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains(": cannot be enforced: cgroup v1 ")
                && err.contains(" hierarchy: /sys/fs/cgroup/")
                && err.contains(" is not writable by uid 65534 (not delegated)"),
            "{err}"
        );
        assert!(!b.path().join("nobody-state").join(&id).exists());
        for c in ["memory", "pids"] {
            assert!(
                !PathBuf::from("/sys/fs/cgroup")
                    .join(c)
                    .join(&parent)
                    .exists()
            );
        }
    }
}

/// `linux.resources.devices` on a cgroup v1 host (runc's v1 mapping, as
/// crun writes it): a devices group at `cgroupsPath` with `a` denied
/// first, then the rules in the config's order, then the default
/// devices; hutch init starts in it, a node of `linux.devices` no rule
/// allows opens nothing, `delete` removes the group. Fails without the
/// devices group (the write reaches the node, no group exists).
#[test]
fn device_rules_go_to_a_cgroup_v1_devices_group_and_delete_removes_it() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    require!(
        Path::new("/sys/fs/cgroup/devices/devices.list").exists(),
        "this host has no cgroup v1 devices hierarchy (a unified host has no devices file)"
    );
    become_subreaper();
    let parent = format!("hutch-oci-devtest-{}", std::process::id());
    // /dev/kmsg's numbers: a write needs no capability, so only the
    // devices group can refuse it.
    let script = "echo hutch-oci-devices-test > /dev/nokmsg 2>/dev/null && echo kmsg-written || echo kmsg-denied; \
                  echo x > /dev/null && echo null-ok; cat /proc/self/cgroup";
    let mut config = base_config(&["sh", "-c", script]);
    config["linux"]["cgroupsPath"] = json!(format!("/{parent}/c1"));
    config["linux"]["devices"] =
        json!([{"path": "/dev/nokmsg", "type": "c", "major": 1, "minor": 11, "fileMode": 438}]);
    config["linux"]["resources"] = json!({"devices": [
        {"allow": false, "access": "rwm"},
        {"allow": true, "type": "c", "major": 10, "minor": 229, "access": "rwm"},
        {"allow": true, "type": "b", "major": 8, "minor": -1, "access": "r"}
    ]});
    let b = Bundle::new("oci-devices", &config);
    let id = format!("devices-{}", std::process::id());
    let (st, err, out) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let group = PathBuf::from("/sys/fs/cgroup/devices")
        .join(&parent)
        .join("c1");
    let list = std::fs::read_to_string(group.join("devices.list")).unwrap_or_default();
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(
        lines.get(..2),
        Some(&["c 10:229 rwm", "b 8:* r"][..]),
        "{list}"
    );
    assert!(lines.contains(&"c 1:3 rwm"), "{list}");
    assert!(!lines.iter().any(|l| l.starts_with("c 1:11 ")), "{list}");
    let procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap();
    assert!(
        procs.lines().any(|p| p == b.pid(&id).to_string()),
        "{procs}"
    );
    let o = b.run(&["start", &id]);
    assert!(o.status.success(), "start: {}", stderr(&o));
    wait_until(Duration::from_secs(20), "the workload's output", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.contains("devices:"))
    });
    let seen = std::fs::read_to_string(&out).unwrap();
    assert!(seen.starts_with("kmsg-denied\nnull-ok\n"), "{seen}");
    assert!(
        seen.lines()
            .any(|l| l.ends_with(&format!(":devices:/{parent}/c1"))),
        "{seen}"
    );
    let o = b.run(&["delete", "--force", &id]);
    assert!(o.status.success(), "delete: {}", stderr(&o));
    let made = PathBuf::from("/sys/fs/cgroup/devices").join(&parent);
    assert!(!made.exists(), "{} left", made.display());
    // A create that fails after the group is made removes it.
    config["process"]["args"] = json!(["/no/such/command"]);
    b.write_config(&config);
    let (st, _, _) = b.create(&format!("{id}-bad"));
    assert!(!st.success());
    assert!(!made.exists(), "{} left by a failed create", made.display());
}

/// `hutch ps` lists hutch-oci's containers under the default state root
/// (where podman's conmon finds them) beside its own sandboxes.
#[test]
fn hutch_ps_lists_hutch_oci_containers() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let mut b = Bundle::new("oci-ps", &base_config(&["sleep", "100"]));
    b.state_root = PathBuf::from(hutch::internals::oci::lifecycle::DEFAULT_ROOT);
    let id = format!("hutch-ps-test-{}", std::process::id());
    let (st, err, _) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let ps = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hutch"));
        c.arg("ps");
        if json {
            c.arg("--json");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "hutch ps: {}", stderr(&o));
        stdout(&o)
    };
    let v: Value = serde_json::from_str(ps(true).trim()).unwrap();
    let list = v["result"]["oci_containers"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"));
    let me = list
        .iter()
        .find(|c| c["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in {v}"));
    assert_eq!(me["status"], "created");
    assert_eq!(me["pid"], b.pid(&id));
    assert_eq!(me["bundle"], b.path().to_str().unwrap());
    let text = ps(false);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("oci:{id}")))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("created"), "{line}");
    let o = b.run(&["delete", "--force", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!ps(false).contains(&format!("oci:{id}")));
}

/// `update --resources FILE|-` (containerd's shim, CRI-O): a container
/// created without limits has no cgroup of hutch-oci's, so a limit is
/// refused by key; no limit is a no-op; runc's per-limit flags are refused
/// with the form to use. (Writing a cgroup is tested in the kernel VM.)
#[test]
fn update_without_a_cgroup_refuses_limits_by_key() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let b = Bundle::new("oci-update", &base_config(&["sleep", "100"]));
    let id = format!("update-{}", std::process::id());
    let (st, err, _) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let update = |json: &str, extra: &[&str]| {
        let mut c = b.oci(&["update"]);
        c.args(extra).args(["--resources", "-", &id]);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        // A refusal of the argv may come before stdin is read: the pipe is
        // then closed, which is not this test's failure.
        if let Err(e) = std::io::Write::write_all(&mut child.stdin.take().unwrap(), json.as_bytes())
        {
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe,
                "writing the resources: {e}"
            );
        }
        child.wait_with_output().unwrap()
    };
    let o = update(r#"{"pids": {"limit": 10}}"#, &[]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("linux.resources.pids.limit: container")
            && stderr(&o).contains("created without limits"),
        "{}",
        stderr(&o)
    );
    let o = update(r#"{"pids": {"limit": -1}, "cpu": {"shares": 1024}}"#, &[]);
    assert!(o.status.success(), "no limit: {}", stderr(&o));
    let o = update(r#"{"unified": {"cgroup.procs": "1"}}"#, &[]);
    assert!(
        stderr(&o).contains("linux.resources.unified.cgroup.procs"),
        "{}",
        stderr(&o)
    );
    let o = update("{}", &["--memory", "10m"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("update --memory: not supported"),
        "{}",
        stderr(&o)
    );
    let o = update("not json", &[]);
    assert!(
        stderr(&o).contains("not linux.resources JSON"),
        "{}",
        stderr(&o)
    );
    let o = b.run(&["update", "--resources", "/dev/null", "nope"]);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    assert!(b.run(&["delete", "--force", &id]).status.success());
}

/// runtime.md: a failing createRuntime hook fails create, the container is
/// stopped and the lifecycle goes on at poststop; nothing is left.
#[test]
fn a_failing_create_runtime_hook_ends_at_poststop() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let mut config = base_config(&["true"]);
    let b = Bundle::new("oci-hookfail", &config);
    let mark = b.path().join("poststop.state");
    config["hooks"] = json!({
        "createRuntime": [{"path": "/bin/sh", "args": ["sh", "-c", "exit 5"]}],
        "poststop": [{"path": "/bin/sh", "args": ["sh", "-c", format!("cat > {}", mark.display())]}],
    });
    b.write_config(&config);
    let id = format!("hookfail-{}", std::process::id());
    let (st, err, _) = b.create(&id);
    assert!(!st.success());
    assert_eq!(
        err.trim_end(),
        "hutch-oci: hooks.createRuntime[0] (/bin/sh) failed: exited with status 5"
    );
    let state: Value = serde_json::from_str(&std::fs::read_to_string(&mark).unwrap()).unwrap();
    assert_eq!(state["status"], "stopped");
    assert_eq!(state["id"], id.as_str());
    assert!(!b.state_root.join(&id).exists());
}

/// A failing startContainer hook fails start and stops the container
/// before its workload runs; delete then cleans up.
#[test]
fn a_failing_start_container_hook_stops_the_container() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let mut config = base_config(&["sh", "-c", "echo ran"]);
    let b = Bundle::new("oci-startfail", &config);
    // Its path resolves in the container (runtime-spec).
    config["hooks"] = json!({
        "startContainer": [{"path": "/bin/busybox", "args": ["sh", "-c", "exit 6"]}],
    });
    b.write_config(&config);
    let id = format!("startfail-{}", std::process::id());
    let (st, err, out) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let pid = b.pid(&id);
    let o = b.run(&["start", &id]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("hooks.startContainer[0]")
            && stderr(&o).contains("exited with status 6"),
        "{}",
        stderr(&o)
    );
    assert_eq!(wait_exit(pid), 128 + libc::SIGKILL);
    assert_eq!(b.state(&id)["status"], "stopped");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "",
        "the workload never ran"
    );
    assert!(b.run(&["delete", &id]).status.success());
    assert!(!b.state_root.join(&id).exists());
}

#[test]
fn ps_lists_the_containers_processes_and_only_them() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let b = Bundle::new("oci-ps", &base_config(&["sleep", "1000"]));
    let id = format!("ps-{}", std::process::id());
    let (st, err, _) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let pid = b.pid(&id);
    assert!(b.run(&["start", &id]).status.success());
    // A detached process keeps the stdio it is given: not this test's pipes.
    let st = b
        .oci(&["exec", "--detach", &id, "sleep", "500"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "exec --detach");
    let comm = |p: i64| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
    let json_pids = || -> Vec<i64> {
        let o = b.run(&["ps", "--format", "json", &id]);
        assert!(o.status.success(), "ps: {}", stderr(&o));
        serde_json::from_str(&stdout(&o)).expect("ps --format json prints an array of pids")
    };
    // The workload execs sleep after start, the exec'd one after exec.
    wait_until(Duration::from_secs(30), "both sleeps in ps", || {
        json_pids()
            .iter()
            .filter(|&&p| comm(p) == "sleep\n")
            .count()
            == 2
    });
    let pids = json_pids();
    assert!(
        pids.contains(&i64::from(pid)),
        "hutch init {pid} in {pids:?}"
    );
    assert!(
        !pids.contains(&i64::from(std::process::id() as i32)),
        "the engine is not the container's"
    );
    assert!(
        pids.iter()
            .all(|p| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok()
                == std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()),
        "every listed process is in the container's pid namespace: {pids:?}"
    );
    // Table: ps's header, then exactly the container's lines.
    let o = b.run(&["ps", &id, "-o", "pid,comm"]);
    assert!(o.status.success(), "ps table: {}", stderr(&o));
    let text = stdout(&o);
    let mut lines = text.lines();
    assert!(lines.next().unwrap().contains("PID"), "{text}");
    let listed: Vec<i64> = lines
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        listed
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        pids.iter().copied().collect(),
        "{text}"
    );
    let o = b.run(&["ps", "--format", "yaml", &id]);
    assert!(
        !o.status.success() && stderr(&o).contains("--format"),
        "{}",
        stderr(&o)
    );
    assert!(b.run(&["kill", &id, "KILL"]).status.success());
    // The detached exec's process was reparented to this subreaper; the
    // kernel reports hutch init's end only once every process of its pid
    // namespace is reaped, so reap everything, as a shim does.
    wait_until(Duration::from_secs(30), "the container to end", || {
        let mut status = 0;
        // SAFETY: a valid out-pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        r == pid || r == -1
    });
    let o = b.run(&["ps", &id]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("container not running"),
        "{}",
        stderr(&o)
    );
    assert!(b.run(&["delete", &id]).status.success());
}

/// The live processes (zombies are not) whose argv is exactly `sleep N`,
/// anywhere on the host; zombies of this test (a subreaper) are reaped on
/// the way.
fn live_sleeps(n: &str) -> Vec<i32> {
    loop {
        let mut status = 0;
        // SAFETY: a valid out-pointer.
        if unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } <= 0 {
            break;
        }
    }
    common::live_sleeps(n)
}

/// A container without a pid namespace of its own (podman `--pid=host`):
/// its workload and a daemon it starts (`setsid` in a subshell that exits:
/// a new session, reparented away from the workload) are both the
/// container's. `ps` lists both, `kill --all` ends both, and so do
/// `delete --force`, and the `delete` and `kill --all` of a container
/// stopped by a kill of hutch init alone, which leaves them orphaned. As root and as uid 65534
/// (a user namespace of its own then). Before the fix `--all` was ignored
/// and delete ended hutch init only: the two sleeps outlived every step.
#[test]
fn kill_all_and_delete_end_every_process_of_a_container_without_a_pid_namespace() {
    require!(
        Path::new(BUSYBOX).exists(),
        "busybox-static builds the rootfs"
    );
    for who in identities() {
        become_subreaper();
        // The Nobody half is rootless: dropped to 65534 by root, or the
        // non-root caller itself.
        let rootless = who == As::Nobody;
        let mut config = base_config(&["true"]);
        // No pid namespace, so no /proc of its own to mount (a rootless
        // container may not mount the host's).
        config["linux"]["namespaces"] =
            json!([{"type": "mount"}, {"type": "ipc"}, {"type": "uts"}, {"type": "network"}]);
        config["mounts"].as_array_mut().unwrap().remove(0);
        config["linux"]
            .as_object_mut()
            .unwrap()
            .remove("maskedPaths");
        config["linux"]
            .as_object_mut()
            .unwrap()
            .remove("readonlyPaths");
        if rootless {
            config["linux"]["namespaces"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": "user"}));
            let gid = if who.drops_to_nobody() {
                NOBODY
            } else {
                nix::unistd::getegid().as_raw()
            };
            config["linux"]["uidMappings"] =
                json!([{"containerID": 0, "hostID": who.uid(), "size": 1}]);
            config["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": gid, "size": 1}]);
        }
        let b = Bundle::new("oci-killall", &config);
        std::os::unix::fs::symlink("busybox", b.path().join("rootfs/bin/setsid")).unwrap();
        let rootfs = b.path().join("rootfs");
        let mut owned = vec![b.path().to_path_buf(), rootfs.clone(), rootfs.join("bin")];
        owned.extend(
            std::fs::read_dir(rootfs.join("bin"))
                .unwrap()
                .map(|e| e.unwrap().path()),
        );
        for p in owned {
            own_as(&p, who);
        }
        let oci = |args: &[&str]| -> Output {
            let mut cmd = hutch_oci_as(who);
            cmd.arg("--root")
                .arg(&b.state_root)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .output()
                .unwrap()
        };
        let base = 7_000_000 + std::process::id() * 10;
        // A fresh container whose workload and daemon are `sleep N1` and
        // `sleep N2`, started and both seen running.
        let start = |step: u32| -> (String, [String; 2]) {
            let n = base + step;
            let (daemon, workload) = (format!("{n}1"), format!("{n}2"));
            let mut config = config.clone();
            config["process"]["args"] = json!([
                "sh",
                "-c",
                format!("(setsid sleep {daemon} &); exec sleep {workload}")
            ]);
            b.write_config(&config);
            own_as(&b.path().join("config.json"), who);
            let id = format!("killall-{}-{n}", if rootless { "nobody" } else { "root" });
            b.ids.borrow_mut().push(id.clone());
            // The container's stdio is not a pipe of ours (it would stay
            // open as long as the container runs).
            let mut cmd = hutch_oci_as(who);
            let st = cmd
                .arg("--root")
                .arg(&b.state_root)
                .args(["create", "--bundle"])
                .arg(b.path())
                .arg(&id)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success(), "{who:?}: create {id}");
            let o = oci(&["start", &id]);
            assert!(o.status.success(), "{who:?}: start: {}", stderr(&o));
            wait_until(
                Duration::from_secs(30),
                "the workload and its daemon",
                || live_sleeps(&daemon).len() == 1 && live_sleeps(&workload).len() == 1,
            );
            (id, [daemon, workload])
        };
        let gone = |marks: &[String; 2], what: &str| {
            wait_until(Duration::from_secs(30), what, || {
                marks.iter().all(|m| live_sleeps(m).is_empty())
            });
        };

        // ps lists both; kill --all ends both.
        let (id, marks) = start(1);
        let o = oci(&["ps", "--format", "json", &id]);
        assert!(o.status.success(), "{who:?}: ps: {}", stderr(&o));
        let pids: Vec<i32> = serde_json::from_str(&stdout(&o)).unwrap();
        for m in &marks {
            let p = live_sleeps(m)[0];
            assert!(pids.contains(&p), "{who:?}: sleep {m} ({p}) in ps {pids:?}");
        }
        assert!(
            !pids.contains(&(std::process::id() as i32)),
            "{who:?}: the caller is not the container's"
        );
        let o = oci(&["kill", "--all", &id, "KILL"]);
        assert!(o.status.success(), "{who:?}: kill --all: {}", stderr(&o));
        gone(&marks, "kill --all to end the workload and its daemon");
        let o = oci(&["delete", &id]);
        assert!(o.status.success(), "{who:?}: delete: {}", stderr(&o));
        assert!(!b.state_root.join(&id).exists());

        // hutch init alone killed: the container is stopped, its workload
        // and daemon are orphans, and delete (no --force) ends them.
        let (id, marks) = start(2);
        let o = oci(&["kill", &id, "KILL"]);
        assert!(o.status.success(), "{who:?}: kill: {}", stderr(&o));
        wait_until(Duration::from_secs(30), "the container to stop", || {
            let o = oci(&["state", &id]);
            serde_json::from_slice::<Value>(&o.stdout).is_ok_and(|s| s["status"] == "stopped")
        });
        assert!(
            marks.iter().all(|m| live_sleeps(m).len() == 1),
            "{who:?}: killing hutch init alone leaves the orphans this delete must end"
        );
        let o = oci(&["delete", &id]);
        assert!(o.status.success(), "{who:?}: delete: {}", stderr(&o));
        gone(&marks, "delete of a stopped container to end its orphans");

        // The same orphans, ended by kill --all: a stopped container whose
        // processes are left still takes it (as with runc).
        let (id, marks) = start(4);
        let o = oci(&["kill", &id, "KILL"]);
        assert!(o.status.success(), "{who:?}: kill: {}", stderr(&o));
        wait_until(Duration::from_secs(30), "the container to stop", || {
            let o = oci(&["state", &id]);
            serde_json::from_slice::<Value>(&o.stdout).is_ok_and(|s| s["status"] == "stopped")
        });
        let o = oci(&["kill", "--all", &id, "KILL"]);
        assert!(o.status.success(), "{who:?}: kill --all: {}", stderr(&o));
        gone(
            &marks,
            "kill --all of a stopped container to end its orphans",
        );
        let o = oci(&["kill", "--all", &id, "KILL"]);
        assert!(
            stderr(&o).contains("container not running"),
            "{who:?}: nothing left: {}",
            stderr(&o)
        );
        assert!(oci(&["delete", &id]).status.success());

        // delete --force of a running one.
        let (id, marks) = start(3);
        let o = oci(&["delete", "--force", &id]);
        assert!(
            o.status.success(),
            "{who:?}: delete --force: {}",
            stderr(&o)
        );
        gone(&marks, "delete --force to end the workload and its daemon");
        assert!(!b.state_root.join(&id).exists());
    }
}

/// CVE-2019-5736: the process `hutch-oci exec` starts is hutch-oci's image
/// inside the container until its execve. strace holds it at that execve
/// (`inject=execve:delay_enter`) while the container's workload, a loop
/// over /proc, tries every hutch-oci process it sees but hutch init.
/// Without CAP_SYS_PTRACE it may not even open `/proc/PID/exe`: the
/// process is not dumpable from before its first setns. With
/// CAP_SYS_PTRACE (root in the host's user namespace: no user namespace of
/// its own) it can, and `tests/programs/exe_mount` finds the file on a
/// read-only mount, so the O_PATH fd an attacker keeps can never be
/// reopened for writing, even once nothing runs the binary (until then a
/// write open fails with ETXTBSY either way). Landlock is off: it alone
/// denies the ptrace access. Before the fix the process was dumpable with
/// its capabilities already cut to the container's, so the first probe
/// read the host's binary ("readable"); without the read-only copy the
/// second finds it on a writable mount ("rw").
/// tests/programs/exe_mount.c, built into the bundle's rootfs as
/// /bin/exe_mount.
fn build_exe_mount(b: &Bundle) {
    let helper = b.path().join("rootfs/bin/exe_mount");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/exe_mount.c");
    let st = Command::new("gcc")
        .args(["-O1", "-Wall", "-static", "-o"])
        .arg(&helper)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(st.success(), "compiling {}", src.display());
}

// hutch init (and the keeper) are hutch-oci's image for the container's
// whole life: a container process with CAP_SYS_PTRACE in the host's user
// namespace (no user namespace, Landlock off) can open /proc/1/exe, and
// must find a read-only copy there, never the host's binary
// (CVE-2019-5736). Before: "rw".
#[test]
fn hutch_init_runs_from_a_read_only_copy() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let mut config = base_config(&["/bin/exe_mount", "/proc/1/exe"]);
    for set in ["bounding", "effective", "permitted"] {
        config["process"]["capabilities"][set] = json!(["CAP_SYS_PTRACE"]);
    }
    config["annotations"] = json!({"run.hutch.landlock": "off"});
    let b = Bundle::new("oci-init-exe", &config);
    build_exe_mount(&b);
    let id = format!("init-exe-{}", std::process::id());
    let o = b
        .oci(&["run", "--bundle"])
        .arg(b.path())
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "ro\n", "{}", stderr(&o));
}

#[test]
fn exec_is_not_dumpable_and_runs_from_a_read_only_copy() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    require!(
        have("strace"),
        "strace holds the exec'd process (apt: strace)"
    );
    become_subreaper();
    for (tag, cap, probe) in [
        (
            "read",
            "CAP_KILL",
            "if cat $d/exe >/dev/null 2>&1; then echo \"$p readable\"; else echo \"$p denied\"; fi",
        ),
        (
            "write",
            "CAP_SYS_PTRACE",
            "echo \"$p $(/bin/exe_mount $d/exe)\"",
        ),
    ] {
        let checker = format!(
            "while :; do for d in /proc/[0-9]*; do p=${{d#/proc/}}; \
             [ \"$p\" = 1 ] || [ -e /tmp/seen-$p ] && continue; \
             grep -q hutch[-]oci $d/cmdline 2>/dev/null || continue; touch /tmp/seen-$p; \
             {probe} >> /tmp/report; done; sleep 0.05; done"
        );
        let mut config = base_config(&["sh", "-c", &checker]);
        for set in ["bounding", "effective", "permitted"] {
            config["process"]["capabilities"][set] = json!([cap]);
        }
        config["annotations"] = json!({"run.hutch.landlock": "off"});
        let b = Bundle::new("oci-exec-cve", &config);
        for applet in ["grep", "touch"] {
            std::os::unix::fs::symlink("busybox", b.path().join("rootfs/bin").join(applet))
                .unwrap();
        }
        build_exe_mount(&b);
        let id = format!("exec-{tag}-{}", std::process::id());
        let (st, err, _) = b.create(&id);
        assert!(st.success(), "create: {err}");
        assert!(b.run(&["start", &id]).status.success());
        // Every execve is held 2 s: strace's own of hutch-oci, hutch-oci's
        // re-exec from its read-only copy, the exec'd process's.
        let o = Command::new("strace")
            .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=execve"])
            .args(["-e", "inject=execve:delay_enter=2000000"])
            .arg(hutch_oci())
            .arg("--root")
            .arg(&b.state_root)
            .args(["exec", &id, "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{tag}: exec: {}", stderr(&o));
        let mut report = String::new();
        wait_until(Duration::from_secs(30), "the workload's report", || {
            let o = b.run(&["exec", &id, "cat", "/tmp/report"]);
            report = stdout(&o);
            !report.is_empty()
        });
        for line in report.lines() {
            match tag {
                "read" => assert!(line.ends_with(" denied"), "{tag}: {report}"),
                _ => assert!(line.ends_with(" ro"), "{tag}: {report}"),
            }
        }
        let o = b.run(&["delete", "--force", &id]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
}

/// A seccomp profile without `openat2` (older engines' defaults lack it;
/// here it fails with EPERM): the command is looked up before the
/// container's filter, under which only the execve runs (runc's order),
/// so `start` runs it; a missing command is still reported as such.
#[test]
fn a_seccomp_profile_without_openat2_still_starts_the_command() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let profile = json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["openat2"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]
    });
    for nnp in [true, false] {
        let mut config = base_config(&["sh", "-c", "echo ran; exit 3"]);
        config["linux"]["seccomp"] = profile.clone();
        config["process"]["noNewPrivileges"] = json!(nnp);
        let b = Bundle::new("oci-no-openat2", &config);
        let id = format!("no-openat2-{nnp}-{}", std::process::id());
        let (st, err, out) = b.create(&id);
        assert!(st.success(), "create: {err}");
        let pid = b.pid(&id);
        let o = b.run(&["start", &id]);
        assert!(o.status.success(), "start (nnp {nnp}): {}", stderr(&o));
        assert_eq!(wait_exit(pid), 3, "nnp {nnp}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "ran\n");
        assert!(b.run(&["delete", &id]).status.success());

        // Under the same profile, a command that is not there.
        config["process"]["args"] = json!(["/bin/not-there"]);
        b.write_config(&config);
        let o = b
            .oci(&["run", "--bundle"])
            .arg(b.path())
            .arg(format!("{id}-missing"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!o.status.success());
        assert!(stderr(&o).contains("not-there"), "{}", stderr(&o));
    }
}

/// `run` of `config` in `b`: its exit code and stdout (the container's).
fn run_container(b: &Bundle, id: &str, config: &Value) -> (Option<i32>, String, String) {
    b.write_config(config);
    let o = b
        .oci(&["run", "--bundle"])
        .arg(b.path())
        .arg(id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (o.status.code(), stdout(&o), stderr(&o))
}

/// A filesystem mount's `source` is what mountinfo shows (runc passes it
/// to mount(2)): `shm` for /dev/shm, not `tmpfs`.
#[test]
fn a_tmpfs_source_is_kept_in_mountinfo() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let mut config = base_config(&["cat", "/proc/self/mountinfo"]);
    config["mounts"].as_array_mut().unwrap().push(json!(
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}
    ));
    let b = Bundle::new("oci-shm-source", &config);
    let (code, out, err) = run_container(&b, &format!("shm-{}", std::process::id()), &config);
    assert_eq!(code, Some(0), "{err}");
    let shm = out
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/dev/shm"))
        .unwrap_or_else(|| panic!("no /dev/shm in {out}"));
    assert!(shm.contains(" - tmpfs shm "), "{shm}");
    // Without a source, the type.
    let tmp = out
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/tmp"))
        .unwrap_or_else(|| panic!("no /tmp in {out}"));
    assert!(tmp.contains(" - tmpfs tmpfs "), "{tmp}");
}

/// `hostname` with a UTS namespace joined by `path` is set there, as
/// runc does: the container and the namespace's other process see it,
/// the host's hostname stays.
#[test]
fn hostname_is_set_in_a_uts_namespace_joined_by_path() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let host_before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut holder = Command::new("unshare")
        .args([
            "--uts",
            "sh",
            "-c",
            "hostname before-join && echo ready && exec sleep 1000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "ready\n");
    let path = format!("/proc/{}/ns/uts", holder.id());
    let mut config = base_config(&["hostname"]);
    config["hostname"] = json!("joined-uts");
    config["linux"]["namespaces"] = json!([
        {"type": "pid"}, {"type": "mount"}, {"type": "ipc"},
        {"type": "uts", "path": path}, {"type": "network"}
    ]);
    let b = Bundle::new("oci-uts-join", &config);
    let (code, out, err) = run_container(&b, &format!("uts-{}", std::process::id()), &config);
    let seen = Command::new("nsenter")
        .arg("-t")
        .arg(holder.id().to_string())
        .args(["-u", "hostname"])
        .output()
        .unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "joined-uts\n");
    assert_eq!(stdout(&seen), "joined-uts\n", "{}", stderr(&seen));
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host_before,
        "the host's hostname stays"
    );
}

/// Filesystem data options on a bind (podman sends `mode=`/`size=`) are
/// ignored, as runc does: mount(2) ignores them with MS_BIND.
#[test]
fn mode_and_size_on_a_bind_are_ignored() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let mut config = base_config(&["cat", "/data/file"]);
    let b = Bundle::new("oci-bind-data", &config);
    std::fs::create_dir(b.path().join("data")).unwrap();
    std::fs::write(b.path().join("data/file"), "bound\n").unwrap();
    config["mounts"].as_array_mut().unwrap().push(json!(
        {"destination": "/data", "type": "bind", "source": b.path().join("data"),
         "options": ["rbind", "ro", "mode=755", "size=65536k"]}
    ));
    let (code, out, err) = run_container(&b, &format!("bind-data-{}", std::process::id()), &config);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "bound\n");
}

/// The propagation fields (`shared:N`, `master:N`, ...) of every mount of
/// this process's mount namespace, by mount point.
fn host_propagation() -> Vec<(String, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let end = f.iter().position(|x| *x == "-").unwrap();
            (f[4].to_string(), f[6..end].join(" "))
        })
        .collect()
}

/// `rootfsPropagation: shared` and `rshared` mounts: shared among the
/// container's own mounts (a bind of `/` sees a mount made after it),
/// never with the host's: the host's mounts keep their propagation
/// through create, start and delete, also for a config without a mount
/// namespace, and no mount of the container appears on the host.
#[test]
fn shared_propagation_stays_inside_and_the_host_propagation_never_changes() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let script = "b=/bin/busybox; $b mkdir -p /tmp/a /tmp/b /tmp/src && $b touch /tmp/src/f && \
        $b mount --rbind / /tmp/a && $b mount --bind /tmp/src /tmp/b && \
        $b test -e /tmp/a/tmp/b/f && $b awk '$5 == \"/\" && / shared:/ {ok=1} END {exit !ok}' /proc/self/mountinfo && \
        echo shared";
    let mut config = base_config(&["sh", "-c", script]);
    config["process"]["capabilities"] = json!({
        "bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"], "permitted": ["CAP_SYS_ADMIN"]
    });
    config["linux"]["rootfsPropagation"] = json!("shared");
    // Landlock refuses mount(2) to the workload.
    config["annotations"] = json!({"run.hutch.landlock": "off"});
    config["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW"});
    config["mounts"].as_array_mut().unwrap().push(json!(
        {"destination": "/mnt", "type": "tmpfs", "source": "tmpfs", "options": ["rshared"]}
    ));
    let b = Bundle::new("oci-propagation", &config);
    for mount_ns in [true, false] {
        if !mount_ns {
            // runtime-tools' linux_ns_itype: no mount namespace asked for
            // (hutch-oci makes one all the same).
            config["linux"]["namespaces"] = json!([
                {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "network"}
            ]);
            b.write_config(&config);
        }
        let before = host_propagation();
        let id = format!("propagation-{mount_ns}-{}", std::process::id());
        let (st, err, out) = b.create(&id);
        assert!(st.success(), "create: {err}");
        let pid = b.pid(&id);
        assert_eq!(host_propagation(), before, "after create");
        let o = b.run(&["start", &id]);
        assert!(o.status.success(), "start: {}", stderr(&o));
        assert_eq!(
            wait_exit(pid),
            0,
            "{}",
            std::fs::read_to_string(&out).unwrap()
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "shared\n");
        assert_eq!(host_propagation(), before, "after start");
        assert!(b.run(&["delete", &id]).status.success());
        assert_eq!(host_propagation(), before, "after delete");
        assert!(
            !b.path().join("rootfs/tmp/a/bin").exists(),
            "no mount of the container reaches the host"
        );
    }
}

/// `linux.mountLabel` on a host without SELinux means nothing and is
/// ignored, as crun does; where SELinux is on, hutch-oci cannot apply it
/// and refuses it by name.
#[test]
fn a_mount_label_is_ignored_only_without_selinux() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let mut config = base_config(&["true"]);
    config["linux"]["mountLabel"] = json!("system_u:object_r:svirt_sandbox_file_t:s0:c715,c811");
    let b = Bundle::new("oci-mount-label", &config);
    let (code, _, err) = run_container(&b, &format!("label-{}", std::process::id()), &config);
    if Path::new("/sys/fs/selinux/enforce").exists() {
        assert_ne!(code, Some(0));
        assert!(err.contains("linux.mountLabel"), "{err}");
    } else {
        assert_eq!(code, Some(0), "{err}");
    }
}

/// A process in a mount namespace of its own (`unshare --mount`, private
/// propagation), ready: what runtime-tools' `linux_ns_path` joins. Killed
/// when dropped (also by a failed assertion).
struct Holder(std::process::Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mount_namespace_holder() -> Holder {
    let mut holder = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "echo ready && exec sleep 1000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "ready\n");
    Holder(holder)
}

/// runtime-tools' `linux_ns_path` (its `mnt` case): a mount namespace
/// joined by `path` holds the container (hutch init's `/proc/PID/ns/mnt`
/// is it) and its mounts, never the caller's (the caller's mounts keep
/// their propagation, none appears under the bundle); `kill --all` and
/// `delete` end the container's processes and leave the namespace's
/// other process alone. Refused with one line, leaving nothing: the
/// caller's own mount namespace or pid 1's, and a joined mount namespace
/// without a pid namespace of the container's own (its processes could
/// not be told from the namespace's others). Before: every mount
/// namespace `path` was refused at create.
#[test]
fn a_mount_namespace_joined_by_path_holds_the_container_and_only_it() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    become_subreaper();
    let mut config = base_config(&["sleep", "1000"]);
    let b = Bundle::new("oci-mnt-join", &config);
    let mut holder = mount_namespace_holder();
    let ns_path = format!("/proc/{}/ns/mnt", holder.0.id());
    let joined = std::fs::read_link(&ns_path).unwrap();
    let with_mount = |path: &str, pid: bool| {
        let mut namespaces = vec![
            json!({"type": "mount", "path": path}),
            json!({"type": "ipc"}),
            json!({"type": "uts"}),
            json!({"type": "network"}),
        ];
        if pid {
            namespaces.push(json!({"type": "pid"}));
        }
        json!(namespaces)
    };
    config["linux"]["namespaces"] = with_mount(&ns_path, true);
    b.write_config(&config);
    let before = host_propagation();
    let id = format!("mnt-join-{}", std::process::id());
    let (st, err, _) = b.create(&id);
    assert!(st.success(), "create: {err}");
    let pid = b.pid(&id);
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap(),
        joined
    );
    let o = b.run(&["start", &id]);
    assert!(o.status.success(), "start: {}", stderr(&o));
    assert_eq!(b.state(&id)["status"], "running");
    let o = b.run(&["kill", "--all", &id, "KILL"]);
    assert!(o.status.success(), "kill --all: {}", stderr(&o));
    assert_eq!(wait_exit(pid), 128 + libc::SIGKILL);
    let o = b.run(&["delete", &id]);
    assert!(o.status.success(), "delete: {}", stderr(&o));
    assert!(
        holder.0.try_wait().unwrap().is_none(),
        "the joined namespace's other process lives on"
    );
    let after = host_propagation();
    for (point, propagation) in &before {
        if let Some((_, now)) = after.iter().find(|(p, _)| p == point) {
            assert_eq!(now, propagation, "{point}'s propagation");
        }
    }
    let bundle = b.path().display().to_string();
    assert!(
        !after.iter().any(|(p, _)| p.starts_with(&bundle)),
        "no mount of the container in the caller's namespace: {after:?}"
    );

    let refused = [
        ("/proc/self/ns/mnt".to_string(), true, "the runtime's own"),
        // Where pid 1 is out of reach (a container's host), opening it
        // is what fails.
        (
            "/proc/1/ns/mnt".to_string(),
            true,
            if std::fs::File::open("/proc/1/ns/mnt").is_ok() {
                "pid 1's"
            } else {
                "cannot open"
            },
        ),
        (ns_path.clone(), false, "needs a pid namespace"),
    ];
    for (i, (path, pid_ns, why)) in refused.iter().enumerate() {
        // /proc/self is hutch-oci's: the caller's own mount namespace.
        config["linux"]["namespaces"] = with_mount(path, *pid_ns);
        b.write_config(&config);
        let id = format!("mnt-refused-{i}-{}", std::process::id());
        let (st, err, _) = b.create(&id);
        assert!(!st.success(), "{path} is refused");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("linux.namespaces[0].path") || err.contains("namespaces.join.mount"),
            "{err}"
        );
        assert!(err.contains(why), "{why}: {err}");
        assert!(!b.state_root.join(&id).exists(), "nothing left of {id}");
    }
    assert_eq!(host_propagation(), after, "refusals mount nothing");
}
