//! Images for containerd's store, built offline: one uncompressed layer
//! of the given entries, an image config, a manifest and an index that
//! names the image (`io.containerd.image.name`), as the OCI layout tar
//! `ctr images import` reads. No registry is involved.

use std::path::Path;

use serde_json::json;
use sha2::{Digest as _, Sha256};

/// One entry of the layer.
pub enum Entry {
    Dir(&'static str, u32),
    File(String, Vec<u8>, u32),
    Symlink(String, &'static str),
}

fn digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn header(path: &str, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_path(path).unwrap();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    h.set_size(size);
    h
}

fn layer(entries: &[Entry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        match e {
            Entry::Dir(path, mode) => {
                let mut h = header(path, tar::EntryType::Directory, *mode, 0);
                h.set_cksum();
                b.append(&h, std::io::empty()).unwrap();
            }
            Entry::File(path, data, mode) => {
                let mut h = header(path, tar::EntryType::Regular, *mode, data.len() as u64);
                h.set_cksum();
                b.append(&h, data.as_slice()).unwrap();
            }
            Entry::Symlink(path, target) => {
                let mut h = header(path, tar::EntryType::Symlink, 0o777, 0);
                h.set_link_name(target).unwrap();
                h.set_cksum();
                b.append(&h, std::io::empty()).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// The OCI layout tar of image `name` (a full reference,
/// `docker.io/library/x:tag`) with `entrypoint` and one layer of `entries`.
pub fn archive(name: &str, entrypoint: &[&str], entries: &[Entry]) -> Vec<u8> {
    let layer = layer(entries);
    let layer_digest = digest(&layer);
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": digest(&config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    }))
    .unwrap();
    let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(&manifest),
            "size": manifest.len(),
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))
    .unwrap();
    let mut out = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8]| {
        let mut h = header(path, tar::EntryType::Regular, 0o644, data.len() as u64);
        h.set_cksum();
        out.append(&h, data).unwrap();
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    add("index.json", &index);
    for blob in [&layer, &config, &manifest] {
        add(&format!("blobs/sha256/{}", &digest(blob)[7..]), blob);
    }
    out.into_inner().unwrap()
}

/// The pod's pause image: `/pause` from tests/cri/pause.c, built with
/// `gcc -static` in `work`.
pub fn pause(name: &str, work: &Path) -> Result<Vec<u8>, String> {
    let src = work.join("pause.c");
    std::fs::write(&src, include_str!("pause.c")).map_err(|e| format!("{e}"))?;
    let bin = work.join("pause");
    let o = std::process::Command::new("gcc")
        .args(["-static", "-Os", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .map_err(|e| format!("gcc: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "gcc -static pause.c: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let data = std::fs::read(&bin).map_err(|e| format!("{e}"))?;
    Ok(archive(
        name,
        &["/pause"],
        &[Entry::File("pause".into(), data, 0o755)],
    ))
}

/// A busybox image: the host's static busybox with `applets` linked to
/// it, a world-writable /tmp and the directories a root needs.
pub fn busybox(name: &str, applets: &[&str]) -> Result<Vec<u8>, String> {
    let data = std::fs::read("/bin/busybox").map_err(|e| format!("/bin/busybox: {e}"))?;
    let mut entries = vec![
        Entry::Dir("bin", 0o755),
        Entry::File("bin/busybox".into(), data, 0o755),
    ];
    for a in applets {
        entries.push(Entry::Symlink(format!("bin/{a}"), "busybox"));
    }
    for d in ["etc", "proc", "sys", "dev", "run"] {
        entries.push(Entry::Dir(d, 0o755));
    }
    entries.push(Entry::Dir("tmp", 0o1777));
    Ok(archive(name, &["/bin/sh"], &entries))
}
