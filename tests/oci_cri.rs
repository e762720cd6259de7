//! Kubernetes' way to hutch-oci: containerd's CRI plugin driven as the
//! kubelet drives it (tests/cri/: a containerd node of the test's own, in
//! a network namespace of its own, with a `hutch` runtime handler whose
//! binary is hutch-oci, CNI bridge networking, a pause image built
//! offline). One pod: RunPodSandbox with `runtime_handler: hutch`, two
//! containers sharing the pod's network and IPC namespaces that talk over
//! its loopback, ExecSync into one, ContainerStatus, the CRI log files,
//! the resources and security settings the kubelet always sends (checked
//! inside the containers and in their cgroups), then StopPodSandbox and
//! RemovePodSandbox, after which nothing of the pod is left: no mount
//! under the node's directory, no process, no cgroup below the pod's, no
//! hutch-oci state. A pod with an egress allow-list shares one proxy (the
//! sandbox's) between its containers.

mod common;
mod cri;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use cri::node::{BUSYBOX_IMAGE, CNI_BIN, Node};
use cri::pod::{PodCgroup, container_config, sandbox_config};
use cri::upstream::Upstream;
use k8s_cri::v1::{
    ContainerState, ContainerStatusRequest, CreateContainerRequest, ExecSyncRequest,
    ListContainersRequest, ListPodSandboxRequest, PodSandboxStatusRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StopContainerRequest, StopPodSandboxRequest,
};
use std::os::unix::fs::MetadataExt;

fn requirements() -> Result<(), String> {
    if !is_root() {
        return Err("containerd runs as root".into());
    }
    for tool in [
        "containerd",
        "ctr",
        "containerd-shim-runc-v2",
        "unshare",
        "ip",
        "gcc",
    ] {
        if !have(tool) {
            return Err(format!("{tool} is needed (tests/setup installs it)"));
        }
    }
    for plugin in ["bridge", "host-local", "loopback"] {
        if !Path::new(CNI_BIN).join(plugin).exists() {
            return Err(format!(
                "{CNI_BIN}/{plugin} is needed (apt: containernetworking-plugins)"
            ));
        }
    }
    if !Path::new("/bin/busybox").exists() {
        return Err("/bin/busybox (busybox-static) builds the image".into());
    }
    Ok(())
}

/// A random hex tag, unique per run.
fn tag() -> String {
    let mut rnd = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut rnd))
        .unwrap();
    rnd.iter().map(|b| format!("{b:02x}")).collect()
}

/// The lines a container wrote, from its CRI log file (`TIME STREAM
/// TAG LINE`, the format the kubelet reads).
fn log_lines(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, ' ');
            let (_time, stream, _tag) = (f.next()?, f.next()?, f.next()?);
            Some((stream.to_string(), f.next().unwrap_or("").to_string()))
        })
        .collect()
}

fn status(node: &Node, id: &str) -> k8s_cri::v1::ContainerStatusResponse {
    let id = id.to_string();
    node.cri
        .runtime("ContainerStatus", |mut c| async move {
            c.container_status(ContainerStatusRequest {
                container_id: id,
                verbose: true,
            })
            .await
        })
        .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()))
}

/// CreateContainer then StartContainer in `pod_id`, as the kubelet does;
/// the container's id.
fn create_and_start(
    node: &Node,
    pod_id: &str,
    pod: &k8s_cri::v1::PodSandboxConfig,
    config: k8s_cri::v1::ContainerConfig,
) -> String {
    let name = config.metadata.as_ref().unwrap().name.clone();
    let req = CreateContainerRequest {
        pod_sandbox_id: pod_id.to_string(),
        config: Some(config),
        sandbox_config: Some(pod.clone()),
    };
    let id = node
        .cri
        .runtime("CreateContainer", |mut c| async move {
            c.create_container(req).await
        })
        .unwrap_or_else(|e| panic!("{name}: {e}\ncontainerd: {}", node.log_tail()))
        .container_id;
    let cid = id.clone();
    node.cri
        .runtime("StartContainer", |mut c| async move {
            c.start_container(StartContainerRequest { container_id: cid })
                .await
        })
        .unwrap_or_else(|e| panic!("{name}: {e}\ncontainerd: {}", node.log_tail()));
    id
}

/// The container's status once it exited (a poll with a 30 s deadline;
/// `log` is shown when it does not).
fn wait_exited(node: &Node, id: &str, log: &Path) -> k8s_cri::v1::ContainerStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = status(node, id).status.unwrap();
        if st.state == ContainerState::ContainerExited as i32 {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "{id} did not finish in 30 s: {st:?}\nlog: {:?}",
            log_lines(log)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid and OCI config containerd recorded for a container
/// (ContainerStatus' verbose `info`).
fn info(node: &Node, id: &str) -> (i32, serde_json::Value) {
    let st = status(node, id);
    let info: serde_json::Value =
        serde_json::from_str(st.info.get("info").expect("verbose info")).unwrap();
    (
        info["pid"].as_i64().unwrap_or(0) as i32,
        info["runtimeSpec"].clone(),
    )
}

/// StopPodSandbox and RemovePodSandbox as the kubelet ends a pod, then
/// check that nothing of it is left: no pod or container in the CRI, no
/// shim, no mount under the node's directory, no cgroup below the pod's
/// (nor one of its name in another hierarchy), no hutch-oci state.
fn end_pod(node: &Node, pod_cg: &PodCgroup, pod_id: &str) {
    let pod_id = pod_id.to_string();
    let id = pod_id.clone();
    node.cri
        .runtime("StopPodSandbox", |mut c| async move {
            c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: id })
                .await
        })
        .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()));
    let id = pod_id.clone();
    node.cri
        .runtime("RemovePodSandbox", |mut c| async move {
            c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
                .await
        })
        .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()));
    let pods = node
        .cri
        .runtime("ListPodSandbox", |mut c| async move {
            c.list_pod_sandbox(ListPodSandboxRequest { filter: None })
                .await
        })
        .unwrap();
    assert!(pods.items.is_empty(), "{:?}", pods.items);
    let containers = node
        .cri
        .runtime("ListContainers", |mut c| async move {
            c.list_containers(ListContainersRequest { filter: None })
                .await
        })
        .unwrap();
    assert!(
        containers.containers.is_empty(),
        "{:?}",
        containers.containers
    );

    // Nothing left: the shims end once their tasks are deleted.
    let daemon = node.pid().unwrap();
    wait_until(Duration::from_secs(10), "the pod's shims to exit", || {
        node.processes(&[daemon]).is_empty()
    });
    assert_eq!(
        node.mounts(),
        Vec::<std::path::PathBuf>::new(),
        "mounts left"
    );
    assert_eq!(pod_cg.leftovers(), Vec::<String>::new(), "cgroups left");
    assert_eq!(
        pod_cg.strays(),
        Vec::<std::path::PathBuf>::new(),
        "groups of the pod's name in other hierarchies"
    );
    let state: Vec<_> = std::fs::read_dir(node.state_root("hutch"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(state.is_empty(), "hutch-oci state left: {state:?}");
}

#[test]
fn cri_pod_of_two_containers_runs_through_hutch_oci_and_leaves_nothing() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let started = Instant::now();
    let t = tag();
    let pod_cg = PodCgroup::create(&format!("hutch-test-cri-{t}"), 1024)
        .unwrap_or_else(|e| panic!("the pod's cgroup: {e}"));
    let node = Node::start(
        std::env::temp_dir().join(format!("hutch-test-cri-{t}")),
        Path::new(env!("CARGO_BIN_EXE_hutch-oci")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let run_as = 1000;
    let uid = format!("0000{t}-cri0-4000-8000-000000000000");
    let log_dir = node
        .path()
        .join("pods")
        .join(format!("default_hutch-pod_{uid}"));
    std::fs::create_dir_all(&log_dir).unwrap();
    let pod = sandbox_config("hutch-pod", &uid, run_as, &log_dir, &pod_cg.parent(), &[]);

    // RunPodSandbox through the hutch handler, as a RuntimeClass selects it.
    let req = RunPodSandboxRequest {
        config: Some(pod.clone()),
        runtime_handler: "hutch".into(),
    };
    let pod_id = node
        .cri
        .runtime("RunPodSandbox", |mut c| async move {
            c.run_pod_sandbox(req).await
        })
        .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()))
        .pod_sandbox_id;
    let id = pod_id.clone();
    let pod_status = node
        .cri
        .runtime("PodSandboxStatus", |mut c| async move {
            c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id,
                verbose: true,
            })
            .await
        })
        .unwrap();
    let sandbox = pod_status.status.expect("a sandbox status");
    assert_eq!(sandbox.state, 0, "the sandbox is ready: {sandbox:?}");
    assert_eq!(sandbox.runtime_handler, "hutch");
    let pod_ip = sandbox
        .network
        .as_ref()
        .map(|n| n.ip.clone())
        .unwrap_or_default();
    assert!(pod_ip.starts_with("10.213.0."), "a CNI address: {pod_ip:?}");
    assert!(
        node.state_root("hutch")
            .join(&pod_id)
            .join("state.json")
            .exists(),
        "the pause container is hutch-oci's"
    );

    // The kubelet's /etc/hosts for the pod, with its address.
    let etc_hosts = node.path().join("etc-hosts");
    std::fs::write(
        &etc_hosts,
        format!("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n{pod_ip}\thutch-pod\n"),
    )
    .unwrap();

    // The server listens on the pod's loopback only, from a file in the
    // pod's /dev/shm; the client polls it (bounded) and reads that file.
    let server = container_config(
        "server",
        BUSYBOX_IMAGE,
        "mkdir -p /dev/shm/www && echo pong > /dev/shm/www/ping && echo serving && \
         exec httpd -f -p 127.0.0.1:8080 -h /dev/shm/www",
        run_as,
        64 << 20,
        true,
        &etc_hosts,
    );
    let client = container_config(
        "client",
        BUSYBOX_IMAGE,
        "readlink /proc/self/ns/net; readlink /proc/self/ns/ipc; i=0; \
         until wget -q -O - http://127.0.0.1:8080/ping; do \
           i=$((i+1)); [ $i -lt 1500 ] || { echo no answer >&2; exit 9; }; usleep 20000; \
         done; cat /dev/shm/www/ping",
        run_as,
        32 << 20,
        false,
        &etc_hosts,
    );
    let server_id = create_and_start(&node, &pod_id, &pod, server);
    let client_id = create_and_start(&node, &pod_id, &pod, client);

    // The client ends once it got its answer over the loopback.
    let client_status = wait_exited(&node, &client_id, &log_dir.join("client/0.log"));
    let client_log = log_lines(&log_dir.join("client/0.log"));
    assert_eq!(
        client_status.exit_code, 0,
        "client: {client_status:?}\nlog: {client_log:?}"
    );
    assert!(client_status.log_path.ends_with("client/0.log"));
    let stdout_lines: Vec<&str> = client_log
        .iter()
        .filter(|(s, _)| s == "stdout")
        .map(|(_, l)| l.as_str())
        .collect();
    assert_eq!(
        stdout_lines[2..],
        ["pong", "pong"],
        "answered over the loopback, and the pod's /dev/shm is shared: {client_log:?}"
    );
    let server_log = log_lines(&log_dir.join("server/0.log"));
    assert!(
        server_log.contains(&("stdout".into(), "serving".into())),
        "{server_log:?}"
    );

    // ExecSync into the server: what the kubelet's settings made of it.
    let cid = server_id.clone();
    let exec = node
        .cri
        .runtime("ExecSync", |mut c| async move {
            c.exec_sync(ExecSyncRequest {
                container_id: cid,
                cmd: vec![
                    "sh".into(),
                    "-c".into(),
                    "readlink /proc/self/ns/net; readlink /proc/self/ns/ipc; id -u; hostname; \
                     cat /etc/hosts /etc/resolv.conf; \
                     grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; \
                     test -s /proc/kcore || echo kcore-masked; \
                     grep -q ' /proc/sys ro,' /proc/self/mountinfo && echo proc-sys-ro; \
                     touch /dev/shm/exec && echo shm-writable; \
                     echo exec-stderr >&2; exit 7"
                        .into(),
                ],
                timeout: 20,
            })
            .await
        })
        .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()));
    let out = String::from_utf8_lossy(&exec.stdout).to_string();
    assert_eq!(
        exec.exit_code,
        7,
        "{out} / {:?}",
        String::from_utf8_lossy(&exec.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&exec.stderr), "exec-stderr\n");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..2],
        stdout_lines[..2],
        "both containers are in the pod's network and IPC namespaces: {out}"
    );
    let own_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(
        lines[0],
        own_net.to_string_lossy(),
        "not the host's network"
    );
    for want in [
        "1000",
        "hutch-pod",
        &format!("{pod_ip}\thutch-pod"),
        "nameserver 10.213.0.10",
        "search default.svc.cluster.local",
        "options ndots:5",
        "Seccomp:\t2",
        "NoNewPrivs:\t1",
        "CapEff:\t0000000000000000",
        "kcore-masked",
        "proc-sys-ro",
        "shm-writable",
    ] {
        assert!(
            lines.contains(&want),
            "{want:?} in the exec's output:\n{out}"
        );
    }

    // The limits are in the containers' cgroups, under the pod's.
    let (server_pid, spec) = info(&node, &server_id);
    assert!(server_pid > 0);
    assert_eq!(
        spec["linux"]["cgroupsPath"],
        format!("{}/{server_id}", pod_cg.parent()),
        "containerd asked for the pod's cgroup parent"
    );
    let cg = std::fs::read_to_string(format!("/proc/{server_pid}/cgroup")).unwrap();
    if let Some(memory) = pod_cg.dir("memory") {
        let leaf = memory.join(&server_id);
        assert!(
            cg.lines()
                .any(|l| l.ends_with(&format!(":memory:{}/{server_id}", pod_cg.parent()))),
            "{cg}"
        );
        let read = |d: &Path, f: &str| {
            std::fs::read_to_string(d.join(f))
                .unwrap()
                .trim()
                .to_string()
        };
        assert_eq!(
            read(&leaf, "memory.limit_in_bytes"),
            (64u64 << 20).to_string()
        );
        let cpu = pod_cg.dir("cpu").unwrap().join(&server_id);
        assert_eq!(read(&cpu, "cpu.shares"), "256");
        assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "50000");
        assert_eq!(read(&cpu, "cpu.cfs_period_us"), "100000");
        // The kubelet's pod-level pids limit holds over the containers.
        let pids = pod_cg.dir("pids").unwrap();
        assert_eq!(read(&pids, "pids.max"), "1024");
        assert!(pids.join(&server_id).join("cgroup.procs").exists());
    } else {
        let leaf = Path::new("/sys/fs/cgroup")
            .join(&pod_cg.name)
            .join(&server_id);
        let read = |f: &str| {
            std::fs::read_to_string(leaf.join(f))
                .unwrap()
                .trim()
                .to_string()
        };
        assert_eq!(read("memory.max"), (64u64 << 20).to_string());
        assert_eq!(read("cpu.max"), "50000 100000");
    }
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{server_pid}/oom_score_adj"))
            .unwrap()
            .trim(),
        "968"
    );

    // As the kubelet ends a pod: its containers, then the sandbox.
    for id in [&server_id, &client_id] {
        let cid = id.clone();
        node.cri
            .runtime("StopContainer", |mut c| async move {
                c.stop_container(StopContainerRequest {
                    container_id: cid,
                    timeout: 10,
                })
                .await
            })
            .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()));
        let st = status(&node, id).status.unwrap();
        assert_eq!(st.state, ContainerState::ContainerExited as i32, "{st:?}");
    }
    end_pod(&node, &pod_cg, &pod_id);
    assert!(
        !Path::new("/proc").join(server_pid.to_string()).exists(),
        "the server's hutch init is gone"
    );
    eprintln!("CRI pod flow: {:?}", started.elapsed());
}

/// The pod's record in hutch-oci's state root: hutch init's pid and the
/// keeper's (its egress proxy).
fn hutch_record(node: &Node, id: &str) -> (i32, Option<i32>) {
    let path = node.state_root("hutch").join(id).join("state.json");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
            .unwrap();
    (
        r["pid"].as_i64().unwrap() as i32,
        r["keeper"][0].as_i64().map(|k| k as i32),
    )
}

/// A pod's `run.hutch.egress.allow` (and `allow-address`) reach hutch-oci
/// through containerd's `pod_annotations` (only the keys listed there:
/// another `run.hutch.*` key of the pod never reaches it), and the egress
/// is the pod's: the sandbox holds a network namespace with only `lo` and
/// one proxy, both containers join it (they talk over its loopback), find
/// the same doors, and reach an upstream on the node's loopback that the
/// allow-list names (name and address) while another port is refused
/// without being dialled. A container whose allow-list differs from its
/// sandbox's is refused. After RemovePodSandbox nothing is left: no proxy,
/// process, mount, cgroup or state.
#[test]
fn cri_pod_egress_is_the_pods_one_proxy_for_every_container() {
    require!(requirements().is_ok(), requirements().unwrap_err());
    let started = Instant::now();
    let t = tag();
    let pod_cg = PodCgroup::create(&format!("hutch-test-cri-{t}"), 1024)
        .unwrap_or_else(|e| panic!("the pod's cgroup: {e}"));
    let node = Node::start(
        std::env::temp_dir().join(format!("hutch-test-cri-{t}")),
        Path::new(env!("CARGO_BIN_EXE_hutch-oci")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Two upstreams on the node's loopback: one allowed, one not.
    let node_pid = node.pid().unwrap();
    let allowed = Upstream::start(node_pid, "upstream-ok").unwrap_or_else(|e| panic!("{e}"));
    let other = Upstream::start(node_pid, "not-for-the-pod").unwrap_or_else(|e| panic!("{e}"));
    let uid = format!("0000{t}-cri1-4000-8000-000000000000");
    let log_dir = node
        .path()
        .join("pods")
        .join(format!("default_egress-pod_{uid}"));
    std::fs::create_dir_all(&log_dir).unwrap();
    let allow = format!("localhost:{}", allowed.port);
    let pod = sandbox_config(
        "egress-pod",
        &uid,
        1000,
        &log_dir,
        &pod_cg.parent(),
        &[
            ("run.hutch.egress.allow", &allow),
            ("run.hutch.egress.allow-address", "127.0.0.1,::1"),
            // Not in pod_annotations: containerd must not pass it on.
            ("run.hutch.landlock", "off"),
        ],
    );
    let req = RunPodSandboxRequest {
        config: Some(pod.clone()),
        runtime_handler: "hutch".into(),
    };
    let pod_id = node
        .cri
        .runtime("RunPodSandbox", |mut c| async move {
            c.run_pod_sandbox(req).await
        })
        .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()))
        .pod_sandbox_id;
    let (pause_pid, keeper) = hutch_record(&node, &pod_id);
    let keeper = keeper.expect("the pod's egress proxy is the sandbox container's keeper");
    let pod_net = std::fs::read_link(format!("/proc/{pause_pid}/ns/net")).unwrap();
    let door = std::fs::metadata(format!("/proc/{pause_pid}/root/run/hutch/proxy.sock"))
        .expect("the sandbox's Unix door");
    let etc_hosts = node.path().join("etc-hosts");
    std::fs::write(&etc_hosts, "127.0.0.1\tlocalhost\n").unwrap();

    // What each container sees of the pod's egress, then its own part.
    let probe = format!(
        "readlink /proc/self/ns/net; ls /sys/class/net; stat -c %i /run/hutch/proxy.sock; \
         echo \"$HTTP_PROXY\"; wget -q -O - http://localhost:{}/; echo; \
         wget -q -O - http://localhost:{}/ 2>&1",
        allowed.port, other.port
    );
    let server = container_config(
        "server",
        BUSYBOX_IMAGE,
        &format!(
            "{probe}; mkdir -p /dev/shm/www && echo pong > /dev/shm/www/ping && echo serving && \
             exec httpd -f -p 127.0.0.1:8080 -h /dev/shm/www"
        ),
        1000,
        64 << 20,
        true,
        &etc_hosts,
    );
    let client = container_config(
        "client",
        BUSYBOX_IMAGE,
        &format!(
            "{probe}; i=0; until wget -Y off -q -O - http://127.0.0.1:8080/ping 2>/dev/null; do \
               i=$((i+1)); [ $i -lt 1500 ] || {{ echo no answer >&2; exit 9; }}; usleep 20000; \
             done"
        ),
        1000,
        32 << 20,
        false,
        &etc_hosts,
    );
    let server_id = create_and_start(&node, &pod_id, &pod, server);
    let client_id = create_and_start(&node, &pod_id, &pod, client);
    let (_, spec) = info(&node, &client_id);
    assert_eq!(
        spec["annotations"]["run.hutch.egress.allow"],
        allow.as_str()
    );
    assert!(
        spec["annotations"].get("run.hutch.landlock").is_none(),
        "a key outside pod_annotations reached the runtime: {}",
        spec["annotations"]
    );
    let st = wait_exited(&node, &client_id, &log_dir.join("client/0.log"));
    let client_log = log_lines(&log_dir.join("client/0.log"));
    assert_eq!(st.exit_code, 0, "{st:?}\n{client_log:?}");
    // The server wrote its probe before it served the client's answer
    // (the shim copies it to the log file: a bounded wait).
    let server_log = log_dir.join("server/0.log");
    wait_until(Duration::from_secs(10), "the server's log", || {
        log_lines(&server_log).iter().any(|(_, l)| l == "serving")
    });
    let want_probe = [
        pod_net.to_string_lossy().to_string(),
        "lo".into(),
        door.ino().to_string(),
        "http://127.0.0.1:3128".into(),
        "upstream-ok".into(),
    ];
    for (who, log) in [("client", client_log), ("server", log_lines(&server_log))] {
        let out: Vec<&str> = log.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            out[..5],
            want_probe,
            "{who}: the pod's namespace (only lo), the sandbox's Unix door, the TCP door, the allowed upstream: {out:?}"
        );
        assert!(
            out[5].contains("403"),
            "{who}: another port of the node's loopback is refused: {out:?}"
        );
        let own = if who == "client" { "pong" } else { "serving" };
        assert_eq!(out[6..], [own], "{who}: {out:?}");
    }
    // A process exec'd into a container has the same egress.
    let cid = server_id.clone();
    let url = format!("http://localhost:{}/", allowed.port);
    let exec = node
        .cri
        .runtime("ExecSync", |mut c| async move {
            c.exec_sync(ExecSyncRequest {
                container_id: cid,
                cmd: vec!["wget".into(), "-q".into(), "-O".into(), "-".into(), url],
                timeout: 20,
            })
            .await
        })
        .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()));
    assert_eq!(
        (exec.exit_code, String::from_utf8_lossy(&exec.stdout)),
        (0, "upstream-ok".into()),
        "{:?}",
        String::from_utf8_lossy(&exec.stderr)
    );
    assert_eq!(
        allowed.requests(),
        3,
        "the proxy dialled the allowed upstream once per request"
    );
    assert_eq!(
        other.requests(),
        0,
        "the refused upstream was never dialled"
    );

    // A container whose allow-list is not its sandbox's is refused.
    let mut widened = pod.clone();
    widened.annotations.insert(
        "run.hutch.egress.allow".into(),
        format!("{allow},localhost:{}", other.port),
    );
    let stray = container_config(
        "stray",
        BUSYBOX_IMAGE,
        "true",
        1000,
        32 << 20,
        false,
        &etc_hosts,
    );
    // (containerd runs the runtime's `create` at StartContainer.)
    let req = CreateContainerRequest {
        pod_sandbox_id: pod_id.clone(),
        config: Some(stray),
        sandbox_config: Some(widened),
    };
    let stray_id = node
        .cri
        .runtime("CreateContainer", |mut c| async move {
            c.create_container(req).await
        })
        .unwrap_or_else(|e| panic!("{e}\ncontainerd: {}", node.log_tail()))
        .container_id;
    let refused = node
        .cri
        .runtime("StartContainer", |mut c| async move {
            c.start_container(StartContainerRequest {
                container_id: stray_id,
            })
            .await
        })
        .expect_err("a container with another allow-list than its pod's");
    assert!(
        refused.contains("annotations.run.hutch.egress.allow: differs from its pod sandbox"),
        "one clear line: {refused}"
    );

    end_pod(&node, &pod_cg, &pod_id);
    assert!(
        !Path::new("/proc").join(keeper.to_string()).exists(),
        "the pod's proxy is gone"
    );
    assert_eq!(other.requests(), 0);
    eprintln!("CRI pod egress: {:?}", started.elapsed());
}
