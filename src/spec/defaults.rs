//! The embedded default profile: what a build needs and nothing else.

use std::path::Path;

use super::{ByteSize, Duration, FsOp, ImageRef, Limit, Spec};

/// `PATH` given to workloads by the default profile.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Host directories exposed read-only (when present). Those that are
/// symlinks on the host (merged /usr) are recreated as the same symlinks.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Default size of the private `/tmp`.
pub const TMP_SIZE: ByteSize = ByteSize(1 << 30);
/// Default memory cap (preferred: the run goes ahead where it cannot be
/// enforced).
pub const DEFAULT_MEMORY: ByteSize = ByteSize(2 << 30);
/// Default process cap (preferred): cgroup `pids.max` where the pids
/// controller is delegated, else RLIMIT_NPROC in the sandbox's user
/// namespace. Well above what builds use (`make -j` with a compiler per
/// job, test runners, language servers: hundreds), far below what takes a
/// host down (the kernel's default pid_max is 32768 for the whole
/// machine). See docs/limits.md.
pub const DEFAULT_PIDS: u64 = 4096;
/// Default inode cap of tmpfs mounts.
pub const TMP_INODES: u64 = 262_144;

/// The embedded default profile, without the workspace: system directories
/// read-only, fresh /proc, minimal /dev, private /tmp, a clean environment,
/// no network, 5 minutes wall clock, a *preferred* 2 GiB memory cap
/// (enforced where cgroup v2 allows, else reported unenforced) and a
/// *preferred* cap of [`DEFAULT_PIDS`] processes (cgroup `pids.max`, else
/// RLIMIT_NPROC in the sandbox's user namespace: enforced on every host
/// hutch runs on).
///
/// It inspects the host only to mirror `/bin → usr/bin`-style symlinks and
/// skip absent directories.
pub fn default_profile() -> Spec {
    let mut spec = Spec::default();
    for dir in SYSTEM_DIRS {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    spec.fs.push(FsOp::Symlink {
                        target,
                        dest: path.to_path_buf(),
                    });
                }
            }
            Ok(meta) if meta.is_dir() => spec.fs.push(FsOp::RoBind {
                src: path.to_path_buf(),
                dest: path.to_path_buf(),
                optional: true,
            }),
            _ => {}
        }
    }
    spec.fs.push(FsOp::Proc {
        dest: "/proc".into(),
    });
    spec.fs.push(FsOp::Dev {
        dest: "/dev".into(),
        layout: Default::default(),
    });
    spec.fs.push(FsOp::Tmpfs {
        dest: "/tmp".into(),
        size: Some(TMP_SIZE),
        nr_inodes: Some(TMP_INODES),
        mode: Some(0o1777),
    });
    spec.env.insert("PATH".into(), DEFAULT_PATH.into());
    spec.env.insert("HOME".into(), "/tmp".into());
    spec.env.insert("LANG".into(), "C.UTF-8".into());
    spec.identity.hostname = Some("hutch".into());
    spec.limits.memory = Some(Limit::preferred(DEFAULT_MEMORY));
    spec.limits.pids = Some(Limit::preferred(DEFAULT_PIDS));
    spec.limits.wall_clock = Some(Duration(std::time::Duration::from_secs(300)));
    spec
}

/// Use `image` as the system layer of `spec`: the default profile's host
/// system directories (the read-only binds and merged-/usr links of
/// `/usr`, `/etc`, `/opt`, `/bin`, `/lib*`...) and its environment (`PATH`,
/// `HOME`, `LANG` with their default values) are removed, so the image's
/// own directories and `Env` show; every other operation stays and applies
/// on top of the image. With an image the launcher starts from the
/// image's `Env` (`PATH` defaulting to [`DEFAULT_PATH`], `HOME` to `/tmp`)
/// and puts `spec.env` over it.
pub fn use_image(spec: &mut Spec, image: ImageRef) {
    spec.fs.retain(|op| !is_default_system_dir(op));
    for (key, default) in [
        ("PATH", DEFAULT_PATH),
        ("HOME", "/tmp"),
        ("LANG", "C.UTF-8"),
    ] {
        if spec.env.get(key).is_some_and(|v| v == default) {
            spec.env.remove(key);
        }
    }
    spec.image = Some(image);
}

/// One of the default profile's host system directories.
fn is_default_system_dir(op: &FsOp) -> bool {
    match op {
        FsOp::RoBind {
            src,
            dest,
            optional: true,
        } => src == dest && SYSTEM_DIRS.iter().any(|d| dest == Path::new(d)),
        FsOp::Symlink { dest, .. } => SYSTEM_DIRS.iter().any(|d| dest == Path::new(d)),
        _ => false,
    }
}

/// The workspace operation for `dir`: an overlay at the same path whose
/// upper is discarded, or kept in `changes/upper` (work in `changes/work`).
pub fn workspace_overlay(dir: &Path, changes: Option<&Path>) -> FsOp {
    match changes {
        None => FsOp::TmpOverlay {
            lowers: vec![dir.to_path_buf()],
            dest: dir.to_path_buf(),
            size: None,
        },
        Some(changes) => FsOp::Overlay {
            lowers: vec![dir.to_path_buf()],
            upper: changes.join("upper"),
            work: changes.join("work"),
            dest: dir.to_path_buf(),
        },
    }
}
