//! What the kubelet sends: the pod sandbox and container configurations
//! of a pod as the kubelet builds them (namespaces, seccomp
//! `RuntimeDefault`, `runAsUser`, masked and read-only paths, resources,
//! the pod's cgroup parent, its /etc/hosts), and the pod cgroup the kubelet
//! makes before it asks for the sandbox.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, DnsConfig, ImageSpec, Int64Value, LinuxContainerConfig,
    LinuxContainerResources, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, Mount, NamespaceMode, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata, SecurityProfile, security_profile::ProfileType,
};

/// The kubelet's default masked paths (`securitycontext.defaultMaskedPaths`).
pub const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
/// The kubelet's default read-only paths.
pub const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The pod's namespaces as the kubelet asks for a v1 pod: network and IPC
/// of the pod, a pid namespace per container.
fn namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Pod as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

fn runtime_default() -> SecurityProfile {
    SecurityProfile {
        profile_type: ProfileType::RuntimeDefault as i32,
        localhost_ref: String::new(),
    }
}

/// A pod named `name` with uid `uid` whose processes run as `run_as`, its
/// logs under `log_dir`, in cgroup `cgroup_parent`.
pub fn sandbox_config(
    name: &str,
    uid: &str,
    run_as: i64,
    log_dir: &Path,
    cgroup_parent: &str,
    annotations: &[(&str, &str)],
) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: log_dir.display().to_string(),
        dns_config: Some(DnsConfig {
            servers: vec!["10.213.0.10".into()],
            searches: vec!["default.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        labels: [
            ("io.kubernetes.pod.name".to_string(), name.to_string()),
            ("io.kubernetes.pod.uid".to_string(), uid.to_string()),
        ]
        .into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces()),
                run_as_user: Some(Int64Value { value: run_as }),
                seccomp: Some(runtime_default()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Container `name` of the pod running `sh -c script` as `run_as`, with a
/// kubelet's resources for requests cpu 250m / limit 500m, memory limit
/// `memory`; `restricted` adds the restricted Pod Security profile's
/// settings (no privilege escalation, every capability dropped).
pub fn container_config(
    name: &str,
    image: &str,
    script: &str,
    run_as: i64,
    memory: i64,
    restricted: bool,
    etc_hosts: &Path,
) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        log_path: format!("{name}/0.log"),
        labels: [("io.kubernetes.container.name".to_string(), name.to_string())].into(),
        // The kubelet's own /etc/hosts for the pod (it knows the pod's IP).
        mounts: vec![Mount {
            container_path: "/etc/hosts".into(),
            host_path: etc_hosts.display().to_string(),
            ..Default::default()
        }],
        linux: Some(LinuxContainerConfig {
            resources: Some(LinuxContainerResources {
                cpu_period: 100_000,
                cpu_quota: 50_000,
                cpu_shares: 256,
                memory_limit_in_bytes: memory,
                oom_score_adj: 968,
                ..Default::default()
            }),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(namespaces()),
                run_as_user: Some(Int64Value { value: run_as }),
                masked_paths: MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
                readonly_paths: READONLY_PATHS.iter().map(|s| s.to_string()).collect(),
                seccomp: Some(runtime_default()),
                no_new_privs: restricted,
                capabilities: restricted.then(|| k8s_cri::v1::Capability {
                    drop_capabilities: vec!["ALL".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// The cgroup hierarchies (or the unified cgroup2 mount) a pod cgroup is
/// made in, as the kubelet's cgroupfs driver does.
fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    // Every hierarchy, as the kubelet's cgroupfs driver (and runc, which
    // makes the container's path in each): the named systemd one and the
    // hybrid layout's controller-less cgroup2 mount too.
    let mut out: Vec<PathBuf> = Vec::new();
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if let Ok(real) = e.path().canonicalize()
            && real.join("cgroup.procs").exists()
            && !out.contains(&real)
        {
            out.push(real);
        }
    }
    out
}

/// The pod's cgroup (`/NAME` in each hierarchy), made as the kubelet makes
/// it before RunPodSandbox, with its pod-level pids limit; removed on drop
/// (its processes killed first when a failed test left any).
pub struct PodCgroup {
    pub name: String,
    dirs: Vec<PathBuf>,
}

impl PodCgroup {
    pub fn create(name: &str, pids_max: u64) -> Result<PodCgroup, String> {
        let mut pod = PodCgroup {
            name: name.into(),
            dirs: Vec::new(),
        };
        for h in hierarchies() {
            let dir = h.join(name);
            std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            pod.dirs.push(dir.clone());
            // A new v1 cpuset group has no cpus or mems until given some.
            let v1 = !h.join("cgroup.controllers").exists();
            if v1 && dir.join("cpuset.cpus").exists() {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(h.join(f)).unwrap_or_default();
                    std::fs::write(dir.join(f), v.trim())
                        .map_err(|e| format!("{}/{f}: {e}", dir.display()))?;
                }
            }
            if dir.join("pids.max").exists() {
                std::fs::write(dir.join("pids.max"), pids_max.to_string())
                    .map_err(|e| format!("{}/pids.max: {e}", dir.display()))?;
            }
        }
        if pod.dirs.is_empty() {
            return Err("no cgroup hierarchy under /sys/fs/cgroup".into());
        }
        Ok(pod)
    }

    /// The cgroup parent the kubelet gives the CRI (cgroupfs syntax).
    pub fn parent(&self) -> String {
        format!("/{}", self.name)
    }

    /// The pod's group in the hierarchy mounted at `/sys/fs/cgroup/NAME`.
    pub fn dir(&self, hierarchy: &str) -> Option<PathBuf> {
        let real = Path::new("/sys/fs/cgroup")
            .join(hierarchy)
            .canonicalize()
            .ok()?;
        self.dirs
            .iter()
            .find(|d| d.parent() == Some(&real))
            .cloned()
    }

    /// Groups of the pod's name in hierarchies the pod was not made in
    /// (the kubelet never made them: a runtime did).
    pub fn strays(&self) -> Vec<PathBuf> {
        std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join(&self.name))
            .filter(|d| d.is_dir())
            .filter(|d| {
                let real = d.canonicalize().unwrap_or_else(|_| d.clone());
                !self.dirs.contains(&real)
            })
            .collect()
    }

    /// Groups left below the pod's (each a container's that was not
    /// removed) and processes left in any of them.
    pub fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        for d in &self.dirs {
            walk(d, &mut |p| {
                if p != d.as_path() {
                    out.push(format!("group {}", p.display()));
                }
                let procs = std::fs::read_to_string(p.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.split_whitespace() {
                    out.push(format!("process {pid} in {}", p.display()));
                }
            });
        }
        out
    }
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    f(dir);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&e.path(), f);
        }
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        for d in &self.dirs {
            let mut all = Vec::new();
            walk(d, &mut |p| all.push(p.to_path_buf()));
            // Deepest first: a group goes once its processes and children have.
            all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for g in all {
                while std::fs::remove_dir(&g).is_err() && g.exists() && Instant::now() < deadline {
                    let procs = std::fs::read_to_string(g.join("cgroup.procs")).unwrap_or_default();
                    for pid in procs
                        .split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok())
                    {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::SIGKILL,
                        );
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}
