//! containerd runs a container through `hutch-oci`: a containerd started
//! here with its own root, state and socket, `ctr run --runtime
//! io.containerd.runc.v2 --runc-binary hutch-oci` on a busybox rootfs
//! (`--rootfs`: no registry, no image store), its output and exit code;
//! a detached task killed with `ctr task kill` and removed with `ctr task
//! delete`, leaving no state behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::*;

const BUSYBOX: &str = "/bin/busybox";
struct Containerd {
    dir: TempDir,
    daemon: Child,
    /// containerd namespace of this test (the shim's state root is
    /// /run/containerd/runc/NAMESPACE).
    namespace: String,
}

impl Containerd {
    fn start(tag: &str) -> Containerd {
        let dir = TempDir::new(tag, As::Root);
        let d = dir.path();
        let config = format!(
            "version = 2\n\
             root = \"{root}\"\n\
             state = \"{state}\"\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{sock}\"\n\
             [ttrpc]\n  address = \"{sock}.ttrpc\"\n\
             [debug]\n  address = \"\"\n\
             [metrics]\n  address = \"\"\n",
            root = d.join("root").display(),
            state = d.join("state").display(),
            sock = d.join("containerd.sock").display(),
        );
        std::fs::write(d.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(d.join("containerd.log")).unwrap();
        let daemon = Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let namespace = format!("hutch-oci-{tag}-{}", std::process::id());
        let c = Containerd {
            dir,
            daemon,
            namespace,
        };
        wait_until(Duration::from_secs(30), "containerd's socket", || {
            c.ctr(&["version"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        c
    }

    fn ctr(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address")
            .arg(self.dir.path().join("containerd.sock"))
            .args(["--namespace", &self.namespace])
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    fn rootfs(&self) -> PathBuf {
        let rootfs = self.dir.path().join("rootfs");
        let bin = rootfs.join("bin");
        if !bin.exists() {
            std::fs::create_dir_all(&bin).unwrap();
            std::fs::copy(BUSYBOX, bin.join("busybox")).unwrap();
            for applet in ["sh", "echo", "sleep", "hostname", "cat"] {
                std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
            }
            for d in ["proc", "sys", "dev", "run", "tmp", "etc"] {
                std::fs::create_dir_all(rootfs.join(d)).unwrap();
            }
        }
        rootfs
    }

    /// `ctr run` through hutch-oci with the rootfs, then `args`.
    fn run(&self, flags: &[&str], id: &str, argv: &[&str]) -> Output {
        let rootfs = self.rootfs();
        self.ctr(&["run", "--runtime", "io.containerd.runc.v2", "--runc-binary"])
            .arg(env!("CARGO_BIN_EXE_hutch-oci"))
            .args(flags)
            .arg("--rootfs")
            .arg(&rootfs)
            .arg(id)
            .args(argv)
            .output()
            .unwrap()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The state root the runc shim gives hutch-oci (`--root`).
    fn state_root(&self) -> PathBuf {
        PathBuf::from("/run/containerd/runc").join(&self.namespace)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Whatever a failed assertion left, then the daemon.
        if let Ok(o) = self.ctr(&["task", "ls", "-q"]).output() {
            for id in stdout(&o).lines() {
                let _ = self.ctr(&["task", "delete", "--force", id]).output();
            }
        }
        if let Ok(o) = self.ctr(&["container", "ls", "-q"]).output() {
            for id in stdout(&o).lines() {
                let _ = self.ctr(&["container", "delete", id]).output();
            }
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.daemon.id() as i32),
            nix::sys::signal::SIGTERM,
        );
        let _ = self.daemon.wait();
        let _ = std::fs::remove_dir(self.state_root());
    }
}

fn requirements() -> Result<(), String> {
    if !is_root() {
        return Err("containerd runs as root".into());
    }
    for tool in ["containerd", "ctr", "containerd-shim-runc-v2"] {
        if !have(tool) {
            return Err(format!("{tool} is needed (apt: containerd)"));
        }
    }
    if !Path::new(BUSYBOX).exists() {
        return Err(format!("{BUSYBOX} (busybox-static) builds the rootfs"));
    }
    Ok(())
}

#[test]
fn ctr_run_through_the_runc_shim_passes_output_and_exit_code() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let c = Containerd::start("containerd-run");
    let id = format!("hutch-run-{}", std::process::id());
    let o = c.run(
        &["--rm"],
        &id,
        &["sh", "-c", "echo out; echo err >&2; exit 3"],
    );
    assert_eq!(
        o.status.code(),
        Some(3),
        "{} / containerd log: {}",
        stderr(&o),
        std::fs::read_to_string(c.path().join("containerd.log")).unwrap_or_default()
    );
    assert_eq!(stdout(&o), "out\n");
    assert!(stderr(&o).contains("err"), "{}", stderr(&o));
    assert!(
        !c.state_root().join(&id).exists(),
        "hutch-oci's state is gone"
    );
}

#[test]
fn ctr_task_kill_and_delete_clean_up() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let c = Containerd::start("containerd-kill");
    let id = format!("hutch-kill-{}", std::process::id());
    let o = c.run(&["-d"], &id, &["sleep", "1000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let status = || {
        let o = c.ctr(&["task", "ls"]).output().unwrap();
        stdout(&o)
            .lines()
            .find(|l| l.starts_with(&id))
            .map(|l| l.split_whitespace().last().unwrap_or("").to_string())
    };
    assert_eq!(status().as_deref(), Some("RUNNING"));
    assert!(c.state_root().join(&id).join("state.json").exists());
    let o = c
        .ctr(&["task", "kill", "--signal", "SIGKILL", &id])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    wait_until(Duration::from_secs(10), "the task to stop", || {
        status().as_deref() == Some("STOPPED")
    });
    let o = c.ctr(&["task", "delete", &id]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = c.ctr(&["container", "delete", &id]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !c.state_root().join(&id).exists(),
        "hutch-oci's state is gone"
    );
    let o = Command::new("pgrep").args(["-f", &id]).output().unwrap();
    assert_eq!(stdout(&o), "", "a process of {id} is left");
}
