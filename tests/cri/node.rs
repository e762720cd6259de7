//! A node as the kubelet sees it: a containerd started here with its CRI
//! plugin, its own root, state, socket and CNI configuration under one
//! temporary directory, in a network namespace of its own (`unshare
//! --net`: the CNI bridge, the pods' addresses and the streaming server
//! never touch the host's network). Runtime handlers `hutch` (the runc
//! shim with hutch-oci as its binary) and `runc`, each with its own state
//! root. Dropping it ends every pod, the daemon, the shims it started and
//! the mounts left under its directory, whatever state a failed test left.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::client::Cri;
use k8s_cri::v1::{ListPodSandboxRequest, RemovePodSandboxRequest, StopPodSandboxRequest};

/// The pause image every pod's sandbox runs (imported, never pulled).
pub const PAUSE_IMAGE: &str = "docker.io/hutch-test/pause:1";
/// The workload image of the tests.
pub const BUSYBOX_IMAGE: &str = "docker.io/hutch-test/busybox:1";
/// Pod annotations containerd hands to the `hutch` handler's runtime:
/// these keys only (containerd's `pod_annotations`).
pub const POD_ANNOTATIONS: &[&str] = &["run.hutch.egress.allow", "run.hutch.egress.allow-address"];
/// The pods' subnet, inside the node's own network namespace.
const POD_SUBNET: &str = "10.213.0.0/24";

pub struct Node {
    dir: PathBuf,
    daemon: Option<Child>,
    pub cri: Cri,
}

/// Where the CNI plugins are (Debian's containernetworking-plugins).
pub const CNI_BIN: &str = "/usr/lib/cni";

fn run(cmd: &mut Command) -> Result<String, String> {
    let o = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd:?}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

impl Node {
    /// Start containerd under `dir` (made here, removed on drop) with
    /// `hutch_oci` as the `hutch` handler's binary, wait until its CRI
    /// service answers, and import the pause and busybox images.
    pub fn start(dir: PathBuf, hutch_oci: &Path) -> Result<Node, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let d = dir.clone();
        let cni_conf = d.join("cni");
        std::fs::create_dir_all(&cni_conf).map_err(|e| e.to_string())?;
        let conflist = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": "hutch-test-pods",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni-hutch0",
                    "isGateway": true,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET}]],
                        "dataDir": d.join("cni-ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        });
        std::fs::write(
            cni_conf.join("10-hutch-test.conflist"),
            serde_json::to_vec_pretty(&conflist).unwrap(),
        )
        .map_err(|e| e.to_string())?;
        let pod_annotations = POD_ANNOTATIONS
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = {restrict_oom}
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.hutch]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = [{pod_annotations}]
      [{cri}.containerd.runtimes.hutch.options]
        BinaryName = "{hutch_oci}"
        Root = "{hutch_root}"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "{runc_root}"
"#,
            root = d.join("root").display(),
            state = d.join("state").display(),
            sock = d.join("containerd.sock").display(),
            opt = d.join("opt").display(),
            cni_conf = cni_conf.display(),
            hutch_oci = hutch_oci.display(),
            hutch_root = d.join("hutch-state").display(),
            runc_root = d.join("runc-state").display(),
            restrict_oom = !has_sys_resource(),
        );
        std::fs::write(d.join("config.toml"), config).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(d.join("containerd.log")).map_err(|e| e.to_string())?;
        // unshare execs sh, which execs containerd: the child's pid is
        // containerd's. The loopback is up for the streaming server.
        let daemon = Command::new("unshare")
            .args(["--net", "--", "sh", "-c"])
            .arg("ip link set lo up && exec containerd --config \"$0\"")
            .arg(d.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("unshare --net containerd: {e}"))?;
        let mut node = Node {
            cri: Cri::new(&d.join("containerd.sock")),
            dir,
            daemon: Some(daemon),
        };
        node.wait_ready(Duration::from_secs(30))?;
        node.import("pause", &super::image::pause(PAUSE_IMAGE, &d)?)?;
        node.import(
            "busybox",
            &super::image::busybox(
                BUSYBOX_IMAGE,
                &[
                    "sh", "cat", "echo", "id", "hostname", "httpd", "wget", "readlink", "mkdir",
                    "usleep", "grep", "ls", "touch", "head", "test", "sleep", "nc", "stat",
                ],
            )?,
        )?;
        Ok(node)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self
                .daemon
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!("containerd exited ({st}): {}", self.log_tail()));
            }
            let ready = self.cri.runtime("Status", |mut c| async move {
                c.status(k8s_cri::v1::StatusRequest { verbose: false })
                    .await
            });
            if let Ok(st) = &ready {
                let ok = st
                    .status
                    .as_ref()
                    .map(|s| s.conditions.iter().all(|c| c.status))
                    .unwrap_or(false);
                if ok {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "containerd's CRI service not ready after {timeout:?} ({ready:?}): {}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `ctr -n k8s.io images import` of an OCI layout tar.
    fn import(&self, what: &str, archive: &[u8]) -> Result<(), String> {
        let file = self.dir.join(format!("{what}.tar"));
        std::fs::write(&file, archive).map_err(|e| e.to_string())?;
        run(self.ctr().args(["images", "import"]).arg(&file)).map(|_| ())
    }

    pub fn ctr(&self) -> Command {
        let mut c = Command::new("ctr");
        c.arg("--address")
            .arg(self.dir.join("containerd.sock"))
            .args(["--namespace", "k8s.io"]);
        c
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// containerd's pid (the network namespace the pods' bridge is in).
    pub fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// The state root a handler's shim gives its runtime (`--root`).
    pub fn state_root(&self, handler: &str) -> PathBuf {
        self.dir.join(format!("{handler}-state")).join("k8s.io")
    }

    /// The last lines of containerd's log, for a failure message.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Mount points under the node's directory (in this mount namespace).
    pub fn mounts(&self) -> Vec<PathBuf> {
        mounts_under(&self.dir)
    }

    /// Processes whose command line names the node's directory (the
    /// daemon, its shims and their runtimes' processes), but `except`.
    pub fn processes(&self, except: &[u32]) -> Vec<(u32, String)> {
        processes_naming(&self.dir.to_string_lossy())
            .into_iter()
            .filter(|(p, _)| !except.contains(p))
            .collect()
    }
}

/// Whether this process holds CAP_SYS_RESOURCE, which lowering an
/// `oom_score_adj` needs (the sandbox's -998): root lacks it in some VMs,
/// where no runtime can set it (runc fails the same way), and containerd's
/// `restrict_oom_score_adj` keeps the values at or above its own instead,
/// as a node there is configured.
pub fn has_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 24) != 0) // CAP_SYS_RESOURCE
}

pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect()
}

pub fn processes_naming(needle: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let me = std::process::id();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            out.push((pid, cmd));
        }
    }
    out
}

impl Drop for Node {
    fn drop(&mut self) {
        // What a failed test left: every pod stopped and removed, as the
        // kubelet would (its containers, shims, netns and mounts with it).
        let pods = match self.daemon {
            Some(_) => self
                .cri
                .runtime("ListPodSandbox", |mut c| async move {
                    c.list_pod_sandbox(ListPodSandboxRequest { filter: None })
                        .await
                })
                .map(|r| r.items)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        for p in pods {
            let id = p.id.clone();
            let _ = self.cri.runtime("StopPodSandbox", |mut c| async move {
                c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: id })
                    .await
            });
            let id = p.id;
            let _ = self.cri.runtime("RemovePodSandbox", |mut c| async move {
                c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
                    .await
            });
        }
        if let Some(mut daemon) = self.daemon.take() {
            let pid = nix::unistd::Pid::from_raw(daemon.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while daemon.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = daemon.kill();
                    let _ = daemon.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Shims (they outlive containerd by design) and whatever they ran.
        for (pid, _) in self.processes(&[]) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::SIGKILL,
            );
        }
        let mut left = self.mounts();
        left.sort();
        for m in left.iter().rev() {
            let _ = nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
