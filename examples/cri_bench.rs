//! benches/oci.sh's CRI row: a pod's life through containerd's CRI plugin,
//! as the kubelet asks for it, with the `hutch` runtime handler (the runc
//! shim running hutch-oci) against the `runc` handler, interleaved in one
//! run on one containerd (tests/cri/: its own root, state, CNI and network
//! namespace). One round is RunPodSandbox + CreateContainer +
//! StartContainer of one container (busybox `sleep`, the kubelet's
//! resources and security settings) + StopPodSandbox + RemovePodSandbox.
//! Prints the median and mean per handler and their ratio.
//!
//!   cri_bench HUTCH_OCI ROUNDS
//!
//! As root; the node's directory is under $TMPDIR and removed at the end.

#[path = "../tests/cri/mod.rs"]
mod cri;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cri::node::{BUSYBOX_IMAGE, Node};
use cri::pod::{PodCgroup, container_config, sandbox_config};
use k8s_cri::v1::{
    CreateContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest,
    StopPodSandboxRequest,
};

fn round(node: &Node, pod_cg: &PodCgroup, handler: &str, n: usize) -> anyhow::Result<Duration> {
    let uid = format!("bench-{handler}-{n}-{}", std::process::id());
    let log_dir = node.path().join("pods").join(&uid);
    std::fs::create_dir_all(&log_dir)?;
    let etc_hosts = node.path().join("etc-hosts");
    let pod = sandbox_config(
        &format!("bench-{n}"),
        &uid,
        1000,
        &log_dir,
        &pod_cg.parent(),
        &[],
    );
    let container = container_config(
        "job",
        BUSYBOX_IMAGE,
        "exec sleep 1000",
        1000,
        64 << 20,
        true,
        &etc_hosts,
    );
    let e = |e: String| anyhow::anyhow!("{handler}: {e}\ncontainerd: {}", node.log_tail());
    let start = Instant::now();
    let req = RunPodSandboxRequest {
        config: Some(pod.clone()),
        runtime_handler: handler.into(),
    };
    let pod_id = node
        .cri
        .runtime("RunPodSandbox", |mut c| async move {
            c.run_pod_sandbox(req).await
        })
        .map_err(e)?
        .pod_sandbox_id;
    let req = CreateContainerRequest {
        pod_sandbox_id: pod_id.clone(),
        config: Some(container),
        sandbox_config: Some(pod),
    };
    let id = node
        .cri
        .runtime("CreateContainer", |mut c| async move {
            c.create_container(req).await
        })
        .map_err(e)?
        .container_id;
    node.cri
        .runtime("StartContainer", |mut c| async move {
            c.start_container(StartContainerRequest { container_id: id })
                .await
        })
        .map_err(e)?;
    let p = pod_id.clone();
    node.cri
        .runtime("StopPodSandbox", |mut c| async move {
            c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: p })
                .await
        })
        .map_err(e)?;
    node.cri
        .runtime("RemovePodSandbox", |mut c| async move {
            c.remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: pod_id,
            })
            .await
        })
        .map_err(e)?;
    Ok(start.elapsed())
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let hutch_oci = PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: cri_bench HUTCH_OCI ROUNDS"))?,
    );
    // The shim runs it from the bundle's directory: an absolute path.
    let hutch_oci = hutch_oci
        .canonicalize()
        .map_err(|e| anyhow::anyhow!("{}: {e}", hutch_oci.display()))?;
    let rounds: usize = args.next().unwrap_or_else(|| "10".into()).parse()?;
    let tag = std::process::id();
    let pod_cg = PodCgroup::create(&format!("hutch-cri-bench-{tag}"), 1024)
        .map_err(|e| anyhow::anyhow!("the pod cgroup: {e}"))?;
    let node = Node::start(
        std::env::temp_dir().join(format!("hutch-cri-bench-{tag}")),
        &hutch_oci,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::write(node.path().join("etc-hosts"), "127.0.0.1\tlocalhost\n")?;
    let handlers = ["hutch", "runc"];
    // One warm-up round each (images' snapshots, shim binaries in cache).
    for h in handlers {
        round(&node, &pod_cg, h, 0)?;
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); handlers.len()];
    for n in 1..=rounds {
        for (i, h) in handlers.iter().enumerate() {
            times[i].push(round(&node, &pod_cg, h, n)?);
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut medians = Vec::new();
    for (i, h) in handlers.iter().enumerate() {
        let t = &mut times[i];
        t.sort();
        let median = t[t.len() / 2];
        let mean = t.iter().sum::<Duration>() / t.len() as u32;
        medians.push(median);
        println!(
            "CRI pod (RunPodSandbox + Create/Start + StopPodSandbox + RemovePodSandbox), handler {h}: median {:.1} ms, mean {:.1} ms, min {:.1} ms, max {:.1} ms ({} rounds)",
            ms(median),
            ms(mean),
            ms(t[0]),
            ms(t[t.len() - 1]),
            t.len()
        );
    }
    println!(
        "median hutch / runc: {:.2}x",
        medians[0].as_secs_f64() / medians[1].as_secs_f64()
    );
    Ok(())
}
