//! Building images for the image tests, offline: tar layers written entry
//! by entry (hostile ones too), OCI layouts and docker-archives around
//! them, busybox root filesystems, and `hutch image` as root or uid 65534.
#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hutch::internals::image::tar::write::{Header, header, padding, pax_record};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::common::{As, NOBODY, hutch_bin, hutch_command};

pub fn sha(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// A tar layer built entry by entry.
#[derive(Default, Clone)]
pub struct Tar(pub Vec<u8>);

impl Tar {
    fn entry(
        self,
        typeflag: u8,
        path: &[u8],
        link: &[u8],
        mode: u32,
        data: &[u8],
        dev: (u32, u32),
    ) -> Self {
        self.owned_entry(typeflag, path, link, mode, data, dev, (0, 0))
    }
    #[allow(clippy::too_many_arguments)]
    fn owned_entry(
        mut self,
        typeflag: u8,
        path: &[u8],
        link: &[u8],
        mode: u32,
        data: &[u8],
        dev: (u32, u32),
        owner: (u32, u32),
    ) -> Self {
        self.0.extend(header(&Header {
            typeflag,
            path,
            link,
            mode,
            uid: owner.0,
            gid: owner.1,
            size: data.len() as u64,
            mtime: 1_700_000_000,
            dev_major: dev.0,
            dev_minor: dev.1,
        }));
        self.0.extend_from_slice(data);
        self.0.resize(self.0.len() + padding(data.len() as u64), 0);
        self
    }
    /// A directory owned by `uid:gid` with `mode`.
    pub fn owned_dir(self, path: &str, mode: u32, uid: u32, gid: u32) -> Self {
        self.owned_entry(b'5', path.as_bytes(), b"", mode, b"", (0, 0), (uid, gid))
    }
    /// A file owned by `uid:gid` with `mode`.
    pub fn owned_file(self, path: &str, data: &str, mode: u32, uid: u32, gid: u32) -> Self {
        self.owned_entry(
            b'0',
            path.as_bytes(),
            b"",
            mode,
            data.as_bytes(),
            (0, 0),
            (uid, gid),
        )
    }
    /// The host's static busybox as /bin/busybox, with `tools` linked to it.
    pub fn busybox(self, tools: &[&str]) -> Self {
        let bb = std::fs::read("/bin/busybox").unwrap();
        let mut t = self.dir("bin").file_bytes(b"bin/busybox", &bb, 0o755);
        for tool in tools {
            t = t.symlink(&format!("bin/{tool}"), "busybox");
        }
        t
    }
    pub fn dir(self, path: &str) -> Self {
        self.entry(b'5', path.as_bytes(), b"", 0o755, b"", (0, 0))
    }
    pub fn file(self, path: &str, data: &str) -> Self {
        self.entry(b'0', path.as_bytes(), b"", 0o644, data.as_bytes(), (0, 0))
    }
    pub fn file_bytes(self, path: &[u8], data: &[u8], mode: u32) -> Self {
        self.entry(b'0', path, b"", mode, data, (0, 0))
    }
    pub fn symlink(self, path: &str, target: &str) -> Self {
        self.entry(b'2', path.as_bytes(), target.as_bytes(), 0o777, b"", (0, 0))
    }
    pub fn hardlink(self, path: &str, target: &str) -> Self {
        self.entry(b'1', path.as_bytes(), target.as_bytes(), 0o644, b"", (0, 0))
    }
    pub fn device(self, path: &str, kind: u8, major: u32, minor: u32) -> Self {
        self.entry(kind, path.as_bytes(), b"", 0o666, b"", (major, minor))
    }
    /// A header declaring `size` bytes of data, with none following.
    pub fn huge_header(mut self, path: &str, size: u64) -> Self {
        self.0.extend(header(&Header {
            typeflag: b'0',
            path: path.as_bytes(),
            link: b"",
            mode: 0o644,
            uid: 0,
            gid: 0,
            size,
            mtime: 0,
            dev_major: 0,
            dev_minor: 0,
        }));
        self
    }
    /// A PAX header with `records`, then a file entry.
    pub fn pax_file(mut self, records: &[(&[u8], &[u8])], path: &str, data: &str) -> Self {
        let mut body = Vec::new();
        for (k, v) in records {
            body.extend(pax_record(k, v));
        }
        self = self.entry(b'x', b"PaxHeaders/x", b"", 0o644, &body, (0, 0));
        self.file(path, data)
    }
    /// A raw typeflag (e.g. `S`, sparse) on an otherwise ordinary entry.
    pub fn typed(self, typeflag: u8, path: &str) -> Self {
        self.entry(typeflag, path.as_bytes(), b"", 0o644, b"", (0, 0))
    }
    pub fn finish(mut self) -> Vec<u8> {
        self.0.extend([0u8; 1024]);
        self.0
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// How a test layer is stored in a layout.
#[derive(Clone, Copy, PartialEq)]
pub enum Comp {
    Tar,
    Gzip,
}

/// Options of a test image's config.
#[derive(Clone)]
pub struct ImageSpec {
    pub arch: &'static str,
    pub env: Vec<String>,
    pub volumes: Vec<String>,
    pub cmd: Vec<String>,
    pub workdir: String,
    pub user: String,
}

impl Default for ImageSpec {
    fn default() -> Self {
        ImageSpec {
            arch: "amd64",
            env: vec!["PATH=/bin".into()],
            volumes: vec![],
            cmd: vec!["sh".into()],
            workdir: "/".into(),
            user: String::new(),
        }
    }
}

/// Write an OCI image layout at `dir` with `layers` (uncompressed tar
/// bytes), returning the manifest digest.
pub fn oci_layout(dir: &Path, layers: &[(Vec<u8>, Comp)], spec: &ImageSpec) -> String {
    let blobs: Vec<LayerBlob> = layers
        .iter()
        .map(|(tar, comp)| match comp {
            Comp::Tar => LayerBlob {
                blob: tar.clone(),
                media_type: "application/vnd.oci.image.layer.v1.tar",
                diff_id: sha(tar),
            },
            Comp::Gzip => LayerBlob {
                blob: gzip(tar),
                media_type: "application/vnd.oci.image.layer.v1.tar+gzip",
                diff_id: sha(tar),
            },
        })
        .collect();
    oci_layout_blobs(dir, &blobs, spec)
}

/// A layer as stored: its blob, media type and diff_id (the sha256 of
/// its uncompressed tar).
pub struct LayerBlob {
    pub blob: Vec<u8>,
    pub media_type: &'static str,
    pub diff_id: String,
}

/// A gzip layer holding one file `name` of `mib` MiB of zeros: a
/// decompression bomb (~1 000x) built as one gzip member per MiB (each
/// ~1 KiB), never holding the tar in memory; its diff_id comes from
/// `sha256sum` fed the tar as a stream.
pub fn gzip_zeros_layer(name: &str, mib: u64) -> LayerBlob {
    let size = mib << 20;
    let head = header(&Header {
        typeflag: b'0',
        path: name.as_bytes(),
        link: b"",
        mode: 0o644,
        uid: 0,
        gid: 0,
        size,
        mtime: 1_700_000_000,
        dev_major: 0,
        dev_minor: 0,
    });
    let chunk = vec![0u8; 1 << 20];
    let end = [0u8; 1024];
    let mut hasher = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    let mut stdin = hasher.stdin.take().unwrap();
    stdin.write_all(&head).unwrap();
    for _ in 0..mib {
        stdin.write_all(&chunk).unwrap();
    }
    stdin.write_all(&end).unwrap();
    drop(stdin);
    let out = hasher.wait_with_output().unwrap();
    assert!(out.status.success());
    let hex = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let zeros = gzip(&chunk);
    let mut blob = gzip(&head);
    for _ in 0..mib {
        blob.extend_from_slice(&zeros);
    }
    blob.extend(gzip(&end));
    LayerBlob {
        blob,
        media_type: "application/vnd.oci.image.layer.v1.tar+gzip",
        diff_id: format!("sha256:{hex}"),
    }
}

/// Write an OCI image layout at `dir` with `layers` as stored, returning
/// the manifest digest.
pub fn oci_layout_blobs(dir: &Path, layers: &[LayerBlob], spec: &ImageSpec) -> String {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| -> (String, u64) {
        let d = sha(data);
        std::fs::write(blobs.join(&d[7..]), data).unwrap();
        (d, data.len() as u64)
    };
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    for l in layers {
        diff_ids.push(l.diff_id.clone());
        let (d, n) = put(&l.blob);
        descs.push(json!({"mediaType": l.media_type, "digest": d, "size": n}));
    }
    let volumes: serde_json::Map<String, Value> = spec
        .volumes
        .iter()
        .map(|v| (v.clone(), json!({})))
        .collect();
    let config = json!({
        "architecture": spec.arch, "os": "linux",
        "config": {"Env": spec.env, "Cmd": spec.cmd, "WorkingDir": spec.workdir, "User": spec.user,
                   "Volumes": if volumes.is_empty() { Value::Null } else { Value::Object(volumes) }},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let config = serde_json::to_vec(&config).unwrap();
    let (cd, cn) = put(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
        "layers": descs,
    }))
    .unwrap();
    let (md, mn) = put(&manifest);
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    std::fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mn}
        ]}))
        .unwrap(),
    )
    .unwrap();
    md
}

/// A root filesystem with the host's static busybox as /bin/sh.
pub fn busybox_rootfs(dir: &Path) {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", dir.join("bin/busybox")).unwrap();
    for tool in ["sh", "cat", "ls"] {
        std::os::unix::fs::symlink("busybox", dir.join("bin").join(tool)).unwrap();
    }
    std::fs::write(dir.join("etc/hello"), "hello from the image\n").unwrap();
}

pub fn have_busybox() -> bool {
    Path::new("/bin/busybox").exists()
}

/// `tool ARGS` must succeed.
pub fn run_ok(tool: &str, args: &[&str]) -> Output {
    let o = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(
        o.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// An OCI layout made by umoci from `rootfs`, tagged `tag`.
pub fn umoci_layout(layout: &Path, tag: &str, rootfs: &Path) {
    let l = layout.display().to_string();
    run_ok("umoci", &["init", "--layout", &l]);
    run_ok("umoci", &["new", "--image", &format!("{l}:{tag}")]);
    run_ok(
        "umoci",
        &[
            "insert",
            "--image",
            &format!("{l}:{tag}"),
            &rootfs.display().to_string(),
            "/",
        ],
    );
}

/// Give `path` and everything below it to `who` (readable by uid 65534).
pub fn give(path: &Path, who: As) {
    if who.drops_to_nobody() {
        run_ok(
            "chown",
            &[
                "-R",
                &format!("{NOBODY}:{NOBODY}"),
                &path.display().to_string(),
            ],
        );
    }
}

/// `hutch image --image-store STORE ARGS` as `who`.
pub fn image(who: As, store: &Path, args: &[&str]) -> Output {
    image_limited(who, store, args, &[])
}

/// [`image`] under resource limits: `prlimit LIMITS -- ...` (e.g.
/// `--fsize=N`), applied before the switch to uid 65534 so they hold for
/// hutch itself.
pub fn image_limited(who: As, store: &Path, args: &[&str], limits: &[&str]) -> Output {
    let mut cmd = if limits.is_empty() {
        Command::new(hutch_bin())
    } else {
        let mut c = Command::new("prlimit");
        c.args(limits).arg("--").arg(hutch_bin());
        c
    };
    if who.drops_to_nobody() {
        let program = cmd.get_program().to_owned();
        let inner: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
        cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(program)
            .args(inner);
    }
    cmd.arg("image").arg("--image-store").arg(store).args(args);
    cmd.env_remove("HUTCH_IMAGE_STORE")
        .stdin(std::process::Stdio::null());
    cmd.output().expect("spawn hutch")
}

pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `import` that must succeed; returns the manifest digest (first line).
pub fn import_ok(who: As, store: &Path, args: &[&str]) -> String {
    let mut a = vec!["import"];
    a.extend_from_slice(args);
    let o = image(who, store, &a);
    assert!(
        o.status.success(),
        "import {args:?} as {who:?}: {}",
        err(&o)
    );
    let digest = out(&o).lines().next().unwrap_or("").to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{}",
        out(&o)
    );
    digest
}

/// `import` that must fail with exit 125 and one line naming `expect`.
pub fn import_refused(who: As, store: &Path, args: &[&str], expect: &str) -> String {
    let mut a = vec!["import"];
    a.extend_from_slice(args);
    let o = image(who, store, &a);
    let e = err(&o);
    assert_eq!(
        o.status.code(),
        Some(125),
        "import {args:?} as {who:?} should fail: {}{e}",
        out(&o)
    );
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert!(e.contains(expect), "expected {expect:?} in: {e}");
    e
}

/// `image list --json`.
pub fn list(who: As, store: &Path) -> Vec<Value> {
    let o = image(who, store, &["list", "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    result(&o).as_array().unwrap().clone()
}

/// The `result` of a successful `--json` envelope (docs/machine.md).
pub fn result(o: &Output) -> Value {
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", out(o)));
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["verb"].as_str().unwrap().starts_with("image."), "{v}");
    v["result"].clone()
}

/// Names in a store directory (`layers`, `blobs/sha256`, `tmp`).
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// The layer trees of a store.
pub fn layer_roots(store: &Path) -> Vec<PathBuf> {
    names_in(&store.join("layers"))
        .into_iter()
        .map(|n| store.join("layers").join(n).join("root"))
        .collect()
}

/// A directory everyone may read (for sources imported as uid 65534).
pub fn open_up(path: &Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The busybox tools image tests use.
pub const TOOLS: &[&str] = &[
    "sh", "cat", "ls", "id", "pwd", "env", "find", "sort", "touch", "echo", "mkdir", "rm", "test",
    "[", "stat", "sleep", "head", "grep", "true", "false",
];

/// `hutch ARGS` as `who` in `cwd`, with no store from the environment.
pub fn hutch_in(who: As, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = hutch_command(who);
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("HUTCH_IMAGE_STORE")
        .stdin(std::process::Stdio::null());
    cmd.output().expect("spawn hutch")
}

/// `hutch run --quiet --image-store STORE ARGS` as `who` in `cwd`.
pub fn run_image(who: As, store: &Path, cwd: &Path, args: &[&str]) -> Output {
    let store = store.display().to_string();
    let mut a = vec!["run", "--quiet", "--image-store", &store];
    a.extend_from_slice(args);
    hutch_in(who, cwd, &a)
}

/// `argv` run in a private mount namespace (root only) whose /etc is an
/// overlay of the host's with `/etc/subuid` and `/etc/subgid` holding
/// `ranges` (e.g. `nobody:200000:65536`): the host's files are never
/// touched. `scratch` holds the overlay's upper and work directories.
pub fn with_subids(scratch: &Path, ranges: &str, argv: &[&str]) -> Command {
    let (u, w) = (scratch.join("etc-upper"), scratch.join("etc-work"));
    std::fs::create_dir_all(&u).unwrap();
    std::fs::create_dir_all(&w).unwrap();
    let script = format!(
        "set -e; mount -t overlay overlay -o lowerdir=/etc,upperdir={},workdir={} /etc; \
         printf '%s' \"$1\" > /etc/subuid; printf '%s' \"$1\" > /etc/subgid; \
         chmod 644 /etc/subuid /etc/subgid; shift; exec \"$@\"",
        u.display(),
        w.display()
    );
    let mut c = Command::new("unshare");
    c.args([
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
        ranges,
    ])
    .args(argv)
    .env_remove("HUTCH_IMAGE_STORE")
    .stdin(std::process::Stdio::null());
    c
}

/// A digest of every entry of the store's layer trees: path, type, mode,
/// owner, size, content, link target and xattrs.
pub fn layers_digest(store: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    fn walk(dir: &Path, h: &mut Sha256) {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let m = std::fs::symlink_metadata(&p).unwrap();
            h.update(p.as_os_str().as_encoded_bytes());
            h.update(
                format!(
                    " {:o} {} {} {} {}\n",
                    m.mode(),
                    m.uid(),
                    m.gid(),
                    m.size(),
                    m.rdev()
                )
                .as_bytes(),
            );
            let mut names = [0u8; 1024];
            if let Ok(n) = rustix::fs::llistxattr(&p, &mut names[..]) {
                h.update(&names[..n]);
            }
            if m.file_type().is_symlink() {
                h.update(
                    std::fs::read_link(&p)
                        .unwrap()
                        .as_os_str()
                        .as_encoded_bytes(),
                );
            } else if m.is_file() {
                h.update(std::fs::read(&p).unwrap());
            } else if m.is_dir() {
                walk(&p, h);
            }
        }
    }
    let mut h = Sha256::new();
    for root in layer_roots(store) {
        walk(&root, &mut h);
    }
    hex::encode(h.finalize())
}
