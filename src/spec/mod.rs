//! The one schema that describes a sandbox: [`Spec`].
//!
//! Every front end (CLI flags, profile files, the library builder, sessions)
//! only builds a `Spec`; the launcher never looks at argv. Profiles load from
//! TOML or JSON strictly: unknown keys, duplicate keys, NUL bytes and
//! out-of-range values are errors that name the offending key path.
//!
//! The structs are `#[non_exhaustive]` so that new fields are not breaking
//! changes: outside this crate, start from `Default` (or
//! [`default_profile`], [`IoMax::new`], [`Limit::required`] /
//! [`Limit::preferred`]) and set the public fields.

mod data;
pub(crate) use data::base64_decode;
pub(crate) use data::base64_encode;
mod de;
mod defaults;
mod key_path;
mod load;
pub mod mount;
mod process;
mod registry_credential;
mod secret;
mod size;
mod toml_path;
mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use data::Encoding;
pub use defaults::{
    DEFAULT_MEMORY, DEFAULT_PATH, DEFAULT_PIDS, TMP_INODES, TMP_SIZE, default_profile, use_image,
    workspace_overlay,
};
pub use load::{load_profile, parse_json, parse_toml};
pub use process::MAX_INHERIT_FDS;
pub use registry_credential::RegistryCredential;
pub use secret::{Gateway, Injection, Intercept, Secret, SecretSource};
pub use size::{ByteSize, Duration};
pub use validate::{SpecError, validate, validate_where_nul_may_be};

/// The rlimits whose value is a number of bytes: they take size suffixes
/// (`as = "1G"`, `--rlimit fsize=10M`); the others are counts or seconds.
pub const SIZE_RLIMITS: &[&str] = &["as", "data", "fsize", "memlock", "msgqueue", "rss", "stack"];

/// The value of rlimit `name` written as text: a size with a suffix for
/// the [`SIZE_RLIMITS`], a plain number for the others.
pub fn parse_rlimit(name: &str, text: &str) -> Result<u64, String> {
    if SIZE_RLIMITS.contains(&name) {
        return ByteSize::parse(text).map(|b| b.0);
    }
    text.trim().parse().map_err(|_| {
        format!("{text:?} is not a number ({name} is a count or a number of seconds, not a size)")
    })
}

fn is_true(b: &bool) -> bool {
    *b
}

/// Current schema version. Files may omit `version`; if present it must match.
pub const SPEC_VERSION: u32 = 1;

/// A complete description of one sandbox.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Spec {
    /// Schema version (1).
    pub version: u32,
    /// Filesystem operations, applied in order inside the new root.
    pub fs: Vec<FsOp>,
    /// Remount the root tmpfs read-only once every operation is applied.
    pub root_readonly: bool,
    pub namespaces: Namespaces,
    pub identity: Identity,
    /// The workload's whole environment (nothing is inherited).
    #[serde(deserialize_with = "load::unique_map")]
    pub env: BTreeMap<String, String>,
    /// Variables the workload must not have, not even those hutch adds
    /// itself (the proxy variables of network mode `proxy`; `--unsetenv`).
    /// A name set in `env` or listed here wins over hutch's own value, in
    /// both cases for the proxy variables (docs/egress.md).
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub unset_env: BTreeSet<String>,
    /// Working directory inside the sandbox (default `/`).
    pub cwd: Option<PathBuf>,
    /// argv of the workload; `command[0]` is searched in the sandbox's `PATH`
    /// when it holds no `/`.
    pub command: Vec<String>,
    /// The `argv[0]` the workload sees when it is not `command[0]`
    /// (bubblewrap's `--argv0`); `command[0]` is still what is executed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv0: Option<String>,
    pub limits: Limits,
    pub security: Security,
    pub network: Network,
    /// Labels of the running sandbox, shown by `hutch ps` and matched by
    /// `hutch kill --label`: never seen by the workload. Keys under
    /// `hutch.` are set by hutch itself (`hutch.session`: the session a
    /// command belongs to).
    #[serde(deserialize_with = "load::unique_map")]
    pub labels: BTreeMap<String, String>,
    /// A host directory bound (recursively) as the new root instead of an
    /// empty tmpfs; `fs` operations then apply inside it (their mount
    /// points are created in it) and `root_readonly` makes it read-only
    /// at the end. The OCI runtime's `root.path`.
    pub root: Option<RootDir>,
    /// The workload's umask (default: the launcher's).
    pub umask: Option<u32>,
    /// Fds of the launching process (3 and above) the workload gets at
    /// the same numbers, kept open across its execve; every other fd is
    /// closed. Each must be open when the sandbox is launched (in the
    /// supervisor's process: in-process launches, or fds the helper
    /// inherited). bubblewrap passes fds this way (`--sync-fd`
    /// consumers, fds handed to the app).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inherit_fds: Vec<i32>,
    /// Also every fd the launching process has open without close-on-exec
    /// (3 and above), resolved when the sandbox is launched: bubblewrap's
    /// behaviour for whatever its caller left open.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub inherit_open_fds: bool,
    /// The workload gets a session of its own (setsid; default `true`).
    /// `false`: hutch init and the workload stay in the caller's session
    /// and process group, and the workload's stdio are the caller's fds
    /// as they are, a terminal included (not relayed): job control works
    /// as without a sandbox, and the workload can push input into that
    /// terminal (TIOCSTI), which is why `true` is the default
    /// (bubblewrap without `--new-session`).
    pub new_session: bool,
    /// The sandbox's first process: hutch init (default), which forks the
    /// command and stays its reaper, or `none`, where hutch init execs the
    /// command itself once the sandbox is built, so the command is pid 1
    /// of the sandbox's pid namespace (bubblewrap's `--as-pid-1`). See
    /// [`Init`] for what `none` takes away.
    #[serde(skip_serializing_if = "Init::is_hutch")]
    pub init: Init,
    /// Namespaced kernel parameters written in the sandbox's own
    /// namespaces before its root is built (`"net.ipv4.ip_forward" =
    /// "1"`): `kernel.msg*`, `kernel.sem`, `kernel.shm*`, `fs.mqueue.*`,
    /// `kernel.hostname`/`kernel.domainname` (with a UTS namespace) and
    /// `net.*` (with a network namespace of the sandbox's own).
    #[serde(deserialize_with = "load::unique_map")]
    pub sysctl: BTreeMap<String, String>,
    /// A container image as the system layer: its layers are stacked as
    /// the read-only bottom of the new root, under every `fs` operation
    /// (see `docs/images.md`). Its config supplies defaults for `env`,
    /// `cwd`, `identity` and `command`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageRef>,
    /// Credentials the sandbox never holds (`docs/secrets.md`): it sees
    /// placeholders; the proxy puts the values in requests to their hosts.
    /// Needs `network = "proxy"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<Secret>,
    /// Where a registry's pull credentials are read from, by host (never
    /// the value): used by `hutch image pull --profile` and `--pull
    /// missing`; the command line's credential flags win.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registry_credentials: Vec<RegistryCredential>,
}

/// The new root as a host directory (see [`Spec::root`]).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootDir {
    /// Host directory (absolute).
    pub path: PathBuf,
    /// Mount attributes set on the bound root and everything under it
    /// when it is bound: any of `nosuid`, `nodev`, `noexec`, and `ro`
    /// (read-only from the start, so that no `fs` operation can create a
    /// mount point in the host directory: bubblewrap's `--ro-bind SRC /`;
    /// default: none, the directory's own flags). `rshared`: once entered,
    /// the root and every mount under it are made shared, in peer groups
    /// of the sandbox's own (its mounts are slaves of the host's, so
    /// nothing propagates to the host; OCI `rootfsPropagation: shared`);
    /// `runbindable`: made unbindable, recursively, once entered.
    #[serde(default)]
    pub options: Vec<String>,
}

impl RootDir {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        RootDir {
            path: path.into(),
            options: Vec::new(),
        }
    }
}

/// Which image of the store a sandbox uses (`image = { digest = ... }`).
/// `digest` pins the manifest; a `name` alone is resolved only with
/// `allow_unpinned` (the exit report records the digest used).
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImageRef {
    /// `sha256:<64 hex>`: exactly this manifest.
    pub digest: Option<String>,
    /// A name in the store. With `digest` it is only informational.
    pub name: Option<String>,
    /// `os/arch[/variant]` the image must be for (default: the host's).
    pub platform: Option<String>,
    /// The image store (default: `$HUTCH_IMAGE_STORE`, else the caller's
    /// default store, see `docs/images.md`).
    pub store: Option<PathBuf>,
    /// Resolve a bare `name` (not a pin).
    pub allow_unpinned: bool,
    /// Checks to let pass (each refusal names its override).
    pub overrides: ImageOverrides,
    /// Only these images may run: manifest digests (`sha256:<64 hex>`, a
    /// pulled index's digest too) or `REPOSITORY@sha256:<64 hex>` pairs;
    /// any other is refused before launch, its digest named. `None`: no
    /// list (`hutch run --approved FILE`, docs/images.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved: Option<Vec<String>>,
    /// The image's `WorkingDir`, when its config names one, is the working
    /// directory even when `cwd` is set (`hutch run --image` sets this
    /// unless `--chdir` is given, so the workspace is the fallback).
    pub use_working_dir: bool,
}

impl ImageRef {
    /// A reference as a person writes it: `sha256:<hex>`, `NAME@sha256:<hex>`
    /// or `NAME` (checked when the Spec is validated).
    pub fn new(reference: &str) -> ImageRef {
        let (name, digest) = match reference.split_once('@') {
            Some((n, d)) => (Some(n.to_string()), Some(d.to_string())),
            None if reference.starts_with("sha256:") => (None, Some(reference.to_string())),
            None => (Some(reference.to_string()), None),
        };
        ImageRef {
            digest,
            name,
            ..ImageRef::default()
        }
    }
}

/// The image checks a Spec lets pass (`--allow-...` of `hutch run`).
/// What a `dev` operation makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DevLayout {
    /// hutch's: a `noexec` tmpfs with the six nodes (each a `nosuid,noexec`
    /// bind of the host's), the `fd`/`stdin`/`stdout`/`stderr`/`ptmx`
    /// links, a new-instance `pts`, and `shm` a tmpfs of its own (1777).
    #[default]
    Hutch,
    /// bubblewrap's `--dev` (bubblewrap.c, `SETUP_MOUNT_DEV`): the same
    /// nodes and links plus `core -> /proc/kcore`, on a `nosuid,nodev`
    /// tmpfs (exec allowed), the nodes `nosuid` binds, and `shm` a plain
    /// directory (0755) of that tmpfs. (Its `console`, a bind of the
    /// caller's terminal, is a `dev-bind` operation of the front end.)
    Bubblewrap,
}

impl DevLayout {
    pub fn is_hutch(&self) -> bool {
        *self == DevLayout::Hutch
    }
}

/// Who is the sandbox's first process (`Spec::init`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// hutch init: builds the root, forks the command, reaps every orphan,
    /// forwards signals, counts the changes of discarded overlay uppers
    /// and reports the command's status.
    #[default]
    Hutch,
    /// hutch init builds the root and then execs the command in its place:
    /// the command is pid 1 of the sandbox's own pid namespace (required:
    /// `namespaces.pid = true`), reaps its orphans itself, gets forwarded
    /// signals only for those it handles (the kernel drops the others
    /// for a namespace's init), and its status is the sandbox's pid 1's,
    /// read by the supervisor. Refused where hutch init is needed after
    /// the exec: discarded overlay uppers (their changes are counted by
    /// init after the command), warm sandboxes, created containers.
    None,
}

impl Init {
    pub fn is_hutch(&self) -> bool {
        *self == Init::Hutch
    }
}

#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImageOverrides {
    /// An OS/architecture other than `platform`.
    pub allow_platform_mismatch: bool,
    /// A config that declares `Volumes` (hutch provides none).
    pub allow_volumes: bool,
    /// Secret-like `Env` keys in the config.
    pub allow_secret_env: bool,
    /// Device nodes other than whiteouts in the layers (mounted `nodev`).
    pub allow_devices: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            version: SPEC_VERSION,
            fs: Vec::new(),
            root_readonly: true,
            namespaces: Namespaces::default(),
            identity: Identity::default(),
            env: BTreeMap::new(),
            unset_env: BTreeSet::new(),
            cwd: None,
            command: Vec::new(),
            argv0: None,
            limits: Limits::default(),
            security: Security::default(),
            network: Network::None,
            labels: BTreeMap::new(),
            root: None,
            umask: None,
            inherit_fds: Vec::new(),
            inherit_open_fds: false,
            new_session: true,
            init: Init::Hutch,
            sysctl: BTreeMap::new(),
            image: None,
            secrets: Vec::new(),
            registry_credentials: Vec::new(),
        }
    }
}

/// One filesystem operation. Destinations are absolute paths inside the new
/// root and are resolved inside it (symlinks made by earlier operations are
/// followed as if the new root were `/`). Written as a table tagged by `op`
/// (read by `de.rs`, which keeps the key path of every field).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum FsOp {
    /// Read-write bind of a host path (`nosuid,nodev` on every submount).
    Bind {
        src: PathBuf,
        dest: PathBuf,
        /// Skip silently when `src` does not exist (bwrap's `--bind-try`).
        optional: bool,
    },
    /// Read-only bind (`ro,nosuid,nodev` on every submount).
    RoBind {
        src: PathBuf,
        dest: PathBuf,
        optional: bool,
    },
    /// Bind that keeps device nodes usable (`nosuid` only).
    DevBind {
        src: PathBuf,
        dest: PathBuf,
        optional: bool,
    },
    /// Overlay with a persistent upper directory on the host.
    Overlay {
        lowers: Vec<PathBuf>,
        upper: PathBuf,
        work: PathBuf,
        dest: PathBuf,
    },
    /// Overlay whose upper lives on a private tmpfs and is discarded.
    TmpOverlay {
        lowers: Vec<PathBuf>,
        dest: PathBuf,
        /// Size cap of the tmpfs holding the upper directory.
        size: Option<ByteSize>,
    },
    /// Read-only overlay of several lowers.
    RoOverlay {
        lowers: Vec<PathBuf>,
        dest: PathBuf,
    },
    /// A fresh tmpfs.
    Tmpfs {
        dest: PathBuf,
        size: Option<ByteSize>,
        nr_inodes: Option<u64>,
        mode: Option<u32>,
    },
    /// A fresh procfs for the sandbox's pid namespace, with host-leaking
    /// entries masked.
    Proc {
        dest: PathBuf,
    },
    /// A minimal /dev: null zero full random urandom tty, fd links, shm, pts.
    Dev {
        dest: PathBuf,
        /// `bubblewrap`: bubblewrap's `--dev` as it is (see [`DevLayout`]).
        #[serde(skip_serializing_if = "DevLayout::is_hutch")]
        layout: DevLayout,
    },
    /// A POSIX message queue filesystem.
    Mqueue {
        dest: PathBuf,
    },
    /// A directory: made with `mode` (default 0755) when missing; one
    /// already there (a host directory under a bind, perhaps) is left as
    /// it is, mode included. Missing parents of this and of `file` are
    /// made 0755, less the group's or others' bits when `mode` gives them
    /// nothing (bubblewrap's rule); a file mount point is made 0444.
    Dir {
        dest: PathBuf,
        mode: Option<u32>,
    },
    /// A writable file with the given content, made in the new root.
    File {
        dest: PathBuf,
        content: String,
        /// `base64`: `content` is base64 of any bytes (default: text).
        #[serde(skip_serializing_if = "Encoding::is_text")]
        encoding: Encoding,
        mode: Option<u32>,
    },
    /// A file with the given content, kept outside the new root and bound
    /// at `dest` as a mount of its own: read-only, or with `writable`
    /// read-write (writes go to that file, discarded with the sandbox;
    /// bubblewrap's `--bind-data`).
    BindData {
        dest: PathBuf,
        content: String,
        #[serde(skip_serializing_if = "Encoding::is_text")]
        encoding: Encoding,
        mode: Option<u32>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        writable: bool,
    },
    /// A symbolic link; the same link already at `dest` is accepted, a
    /// different one or anything else there is refused.
    Symlink {
        target: PathBuf,
        dest: PathBuf,
    },
    Chmod {
        dest: PathBuf,
        mode: u32,
    },
    /// Make an existing mount read-only: with `recursive` (the default)
    /// its submounts too; without, that mount only (bubblewrap's
    /// `--remount-ro`).
    RemountRo {
        dest: PathBuf,
        #[serde(skip_serializing_if = "is_true")]
        recursive: bool,
    },
    /// A mount in mount(8)'s terms, doing exactly what its options say
    /// (no flag of hutch's own): `fstype` is `bind` (of `src`; `rbind`
    /// in the options for its submounts too), `tmpfs`, `proc`, `sysfs`,
    /// `devpts` (always a new instance), `mqueue` or `cgroup2`; options
    /// are mount(8) words (`ro`, `nosuid`, `nodev`, `noexec`, `relatime`,
    /// `rprivate`, ...) and the filesystem's numeric ones (`size=`,
    /// `mode=`, `nr_inodes=`, `uid=`, `gid=`, `ptmxmode=`). See
    /// [`mount::parse_options`]. For a filesystem other than `bind`,
    /// `src` is only the name the mount shows as its source in
    /// `/proc/self/mountinfo` (an OCI config's `shm` for `/dev/shm`;
    /// default the type), never opened.
    Mount {
        fstype: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        src: Option<PathBuf>,
        dest: PathBuf,
        options: Vec<String>,
        /// bind: skip when `src` does not exist.
        optional: bool,
    },
    /// A device node at `dest`: made with mknod where the sandbox may
    /// (no user namespace of its own), else the host's node at the same
    /// path (it must be that device) is bound there. Either way the node
    /// is its own mount, so the directory holding it may be `nodev`.
    Device {
        dest: PathBuf,
        /// `char`, `block` or `fifo`.
        kind: String,
        major: u32,
        minor: u32,
        /// Permission bits (default 0o666).
        #[serde(skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        uid: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        gid: Option<u32>,
    },
    /// Hide what is at `dest`: a file is covered with a read-only
    /// `/dev/null`, a directory with an empty read-only tmpfs; nothing
    /// there, nothing to do.
    Mask {
        dest: PathBuf,
    },
    /// A read-only (`ro,nosuid,nodev,noexec`) view of the subtree at
    /// `dest`, whether or not it is a mount point; skipped when missing.
    ReadonlyPath {
        dest: PathBuf,
    },
}

impl FsOp {
    /// The destination inside the sandbox.
    pub fn dest(&self) -> &std::path::Path {
        match self {
            FsOp::Bind { dest, .. }
            | FsOp::RoBind { dest, .. }
            | FsOp::DevBind { dest, .. }
            | FsOp::Overlay { dest, .. }
            | FsOp::TmpOverlay { dest, .. }
            | FsOp::RoOverlay { dest, .. }
            | FsOp::Tmpfs { dest, .. }
            | FsOp::Proc { dest }
            | FsOp::Dev { dest, .. }
            | FsOp::Mqueue { dest }
            | FsOp::Dir { dest, .. }
            | FsOp::File { dest, .. }
            | FsOp::BindData { dest, .. }
            | FsOp::Symlink { dest, .. }
            | FsOp::Chmod { dest, .. }
            | FsOp::RemountRo { dest, .. }
            | FsOp::Mount { dest, .. }
            | FsOp::Device { dest, .. }
            | FsOp::Mask { dest }
            | FsOp::ReadonlyPath { dest } => dest,
        }
    }

    /// The operation's name as written in profiles.
    pub fn name(&self) -> &'static str {
        match self {
            FsOp::Bind { .. } => "bind",
            FsOp::RoBind { .. } => "ro-bind",
            FsOp::DevBind { .. } => "dev-bind",
            FsOp::Overlay { .. } => "overlay",
            FsOp::TmpOverlay { .. } => "tmp-overlay",
            FsOp::RoOverlay { .. } => "ro-overlay",
            FsOp::Tmpfs { .. } => "tmpfs",
            FsOp::Proc { .. } => "proc",
            FsOp::Dev { .. } => "dev",
            FsOp::Mqueue { .. } => "mqueue",
            FsOp::Dir { .. } => "dir",
            FsOp::File { .. } => "file",
            FsOp::BindData { .. } => "bind-data",
            FsOp::Symlink { .. } => "symlink",
            FsOp::Chmod { .. } => "chmod",
            FsOp::RemountRo { .. } => "remount-ro",
            FsOp::Mount { .. } => "mount",
            FsOp::Device { .. } => "device",
            FsOp::Mask { .. } => "mask",
            FsOp::ReadonlyPath { .. } => "readonly-path",
        }
    }
}

/// Which namespaces to create (`true`) and which the sandbox shares with
/// the launcher (`false`) or joins (`join`). A mount namespace is always
/// created, unless one is joined (`join.mount`, with `mount = false`). Without a user namespace of its own the sandbox keeps the
/// launcher's credentials (root stays host root, with the capabilities
/// `security` keeps); without a pid namespace of its own hutch init is not
/// pid 1 and leaves the workload's stray processes alone.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Namespaces {
    pub user: bool,
    pub mount: bool,
    pub pid: bool,
    pub ipc: bool,
    pub uts: bool,
    pub net: bool,
    pub cgroup: bool,
    /// Existing namespaces to join (setns, before the sandbox's own ones
    /// are created); each needs its flag above `false`, but `pid`: with
    /// `pid = true` the sandbox's own pid namespace is created inside the
    /// joined one (nested; an intermediate process in the joined one
    /// clones hutch init).
    pub join: NamespaceJoins,
}

/// Existing namespaces to join, by kind.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NamespaceJoins {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<NamespaceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<NamespaceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipc: Option<NamespaceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uts: Option<NamespaceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net: Option<NamespaceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<NamespaceRef>,
    /// A mount namespace hutch init enters instead of creating one (the
    /// OCI `namespaces[].path` of type `mount`): the root is built, and
    /// `pivot_root` done, in it, under the other processes that live
    /// there. Never the launcher's own mount namespace nor that of pid 1
    /// (refused when the launch prepares), and not with a user namespace
    /// of the sandbox's own (which could not mount in it). Not part of
    /// [`NamespaceJoins::iter`]: hutch init joins it, not the launcher.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount: Option<NamespaceRef>,
    /// A user namespace hutch init enters once the sandbox is built (its
    /// root, hostname, network), right before the workload starts, so the
    /// command runs in it (bubblewrap's `--userns2`). It must be a
    /// descendant of the user namespace the sandbox was built in (the
    /// joined `user`, typically); the workload's capabilities are then
    /// dropped in it as usual. Not part of [`NamespaceJoins::iter`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_after_setup: Option<NamespaceRef>,
}

impl NamespaceJoins {
    /// (kind, reference) of every namespace to join, user first (the
    /// order setns needs).
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &NamespaceRef)> {
        [
            ("user", &self.user),
            ("pid", &self.pid),
            ("ipc", &self.ipc),
            ("uts", &self.uts),
            ("net", &self.net),
            ("cgroup", &self.cgroup),
        ]
        .into_iter()
        .filter_map(|(k, r)| r.as_ref().map(|r| (k, r)))
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// An existing namespace: a path (`/proc/PID/ns/net`, `/run/netns/NAME`)
/// or an fd of the launching process (front ends that run in-process
/// only); exactly one of the two.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NamespaceRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fd: Option<i32>,
}

impl NamespaceRef {
    pub fn path(path: impl Into<PathBuf>) -> Self {
        NamespaceRef {
            path: Some(path.into()),
            fd: None,
        }
    }
    pub fn fd(fd: i32) -> Self {
        NamespaceRef {
            path: None,
            fd: Some(fd),
        }
    }
}

impl Default for Namespaces {
    fn default() -> Self {
        Namespaces {
            user: true,
            mount: true,
            pid: true,
            ipc: true,
            uts: true,
            net: true,
            cgroup: true,
            join: NamespaceJoins::default(),
        }
    }
}

/// Who the workload is.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Identity {
    /// uid inside the sandbox (default: the caller's uid).
    pub uid: Option<u32>,
    /// gid inside the sandbox (default: the caller's gid).
    pub gid: Option<u32>,
    /// Hostname inside the sandbox's UTS namespace (default `hutch`); with
    /// `namespaces.join.uts`, set in the joined namespace (as runc does).
    pub hostname: Option<String>,
    /// Host uid the workload runs as when root launches (default 65534).
    pub host_uid: Option<u32>,
    /// Host gid the workload runs as when root launches (default 65534).
    pub host_gid: Option<u32>,
    /// The user namespace's uid map (root launches; default: the one id
    /// `uid` → `host_uid`). With a map, hutch init works as the
    /// namespace's root (uid 0 must be mapped) and the workload switches
    /// to `uid`/`gid` itself.
    pub uid_map: Vec<IdMapping>,
    /// The gid map, like `uid_map` (both or neither).
    pub gid_map: Vec<IdMapping>,
    /// The workload's supplementary groups (ids inside; default: none).
    pub groups: Option<Vec<u32>>,
    /// The range of 65 536 host ids the sandbox maps (`docs/images.md`,
    /// "Id ranges"). An image run that needs more than one id gets one
    /// without asking (a session's commands: the session's, `session`);
    /// `private` asks for one also without an image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_range: Option<IdRange>,
}

/// Which range of host ids a root launch maps (`Identity::id_range`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum IdRange {
    /// A range for this sandbox alone (ids 0..65535 inside), also without
    /// an image: for a workload that changes ids. Root: its /etc/subuid
    /// range, else one hutch allocates; unprivileged: the caller's
    /// /etc/subuid range through newuidmap/newgidmap.
    Private,
    /// The range a session holds (hutch sets it for a session's
    /// commands): `start` is its first host id, `session` the session's
    /// directory, which the range's record must name.
    Session { start: u32, session: PathBuf },
}

/// One line of a user namespace's id map.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdMapping {
    /// First id inside the namespace.
    pub inside: u32,
    /// First id on the host.
    pub host: u32,
    /// How many consecutive ids.
    pub count: u32,
}

impl IdMapping {
    pub fn new(inside: u32, host: u32, count: u32) -> Self {
        IdMapping {
            inside,
            host,
            count,
        }
    }
}

/// A limit value and whether the host must enforce it (read by `de.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Limit<T> {
    /// A bare value is *required*: fail closed when it cannot be enforced.
    Required(T),
    /// `{ value = ..., preferred = true }`: enforced when possible, else
    /// reported unenforced.
    Detailed(DetailedLimit<T>),
}

#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetailedLimit<T> {
    pub value: T,
    #[serde(default)]
    pub preferred: bool,
}

impl<T: Copy> Limit<T> {
    pub fn value(&self) -> T {
        *self.get()
    }
}

impl<T> Limit<T> {
    /// The value, borrowed (for limits that are not `Copy`, such as `io`).
    pub fn get(&self) -> &T {
        match self {
            Limit::Required(v) => v,
            Limit::Detailed(d) => &d.value,
        }
    }
    pub fn is_required(&self) -> bool {
        match self {
            Limit::Required(_) => true,
            Limit::Detailed(d) => !d.preferred,
        }
    }
    /// A required limit: fail closed where it cannot be enforced.
    pub fn required(value: T) -> Self {
        Limit::Required(value)
    }
    /// A preferred limit: reported unenforced where it cannot be enforced.
    pub fn preferred(value: T) -> Self {
        Limit::Detailed(DetailedLimit {
            value,
            preferred: true,
        })
    }
}

/// Resource limits.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Memory cap (cgroup `memory.max`), swap always 0.
    pub memory: Option<Limit<ByteSize>>,
    /// Process cap (cgroup `pids.max`, RLIMIT_NPROC fallback).
    pub pids: Option<Limit<u64>>,
    /// CPU quota in CPUs (cgroup `cpu.max`).
    pub cpus: Option<Limit<f64>>,
    /// Block I/O caps per disk (cgroup `io.max`).
    pub io: Option<Limit<Vec<IoMax>>>,
    /// Wall-clock limit; the whole tree is killed and hutch exits 124.
    pub wall_clock: Option<Duration>,
    /// Bytes the workload may write to hutch's stdout and stderr together.
    pub output_bytes: Option<ByteSize>,
    /// Size cap of ephemeral overlay uppers (tmp-overlay without a size).
    pub upper_size: Option<ByteSize>,
    /// Extra rlimits: name (e.g. `nofile`, `fsize`) → value. Bytes for the
    /// names in [`SIZE_RLIMITS`] (a profile may write `"1G"`), counts or
    /// seconds for the others.
    #[serde(deserialize_with = "load::rlimit_map")]
    pub rlimits: BTreeMap<String, u64>,
    /// Delegated cgroup v2 directory under which the sandbox's leaf is
    /// created (default: hutch's own cgroup when it is delegated).
    pub cgroup_parent: Option<PathBuf>,
    /// Soft values of rlimits set in `rlimits` (same names), at most the
    /// hard value there; without one, soft = hard.
    #[serde(deserialize_with = "load::rlimit_map")]
    pub rlimits_soft: BTreeMap<String, u64>,
    /// `oom_score_adj` of the sandbox's processes (-1000..=1000).
    pub oom_score_adj: Option<i32>,
}

/// Bandwidth and IOPS caps on one block device (one `io.max` line). At
/// least one of the four is set; unset ones stay unlimited. Build one with
/// [`IoMax::new`] and set the caps.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IoMax {
    /// A whole-disk block device on the host, e.g. `/dev/vda`.
    pub device: PathBuf,
    /// Read bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbps: Option<ByteSize>,
    /// Write bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wbps: Option<ByteSize>,
    /// Read operations per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub riops: Option<u64>,
    /// Write operations per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wiops: Option<u64>,
}

impl IoMax {
    /// No cap yet on `device` (set at least one before validating).
    pub fn new(device: impl Into<PathBuf>) -> Self {
        IoMax {
            device: device.into(),
            rbps: None,
            wbps: None,
            riops: None,
            wiops: None,
        }
    }
}

/// Confinement of the workload.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Security {
    /// `default`, `strict`, `log`, `unconfined`, or a path to a profile.
    pub seccomp: String,
    pub landlock: LandlockPolicy,
    /// Capabilities kept by the workload (default none). `ALL` keeps all.
    pub cap_add: Vec<String>,
    /// The workload's five capability sets, each given whole (instead of
    /// `cap_add`, which keeps the same capabilities in all of them).
    pub capabilities: Option<CapabilitySets>,
    /// Raw classic-BPF seccomp programs (arrays of `struct sock_filter`,
    /// 8 bytes an instruction, native byte order) installed on the
    /// workload in order, after the `seccomp` profile's filter: what
    /// bubblewrap's `--seccomp FD` / `--add-seccomp-fd FD` load. hutch
    /// does not look inside them; the kernel checks them when installed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub seccomp_bpf: Vec<Vec<u8>>,
    /// Set no-new-privs on the workload (default true). With `false`,
    /// Landlock and seccomp are installed before capabilities are dropped
    /// (they then need CAP_SYS_ADMIN, which the workload still holds), and
    /// setuid programs keep working.
    pub no_new_privs: bool,
}

/// The capability sets of the workload (names like `CAP_NET_RAW`).
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapabilitySets {
    pub bounding: Vec<String>,
    pub effective: Vec<String>,
    pub permitted: Vec<String>,
    pub inheritable: Vec<String>,
    pub ambient: Vec<String>,
}

impl Default for Security {
    fn default() -> Self {
        Security {
            seccomp: "default".into(),
            landlock: LandlockPolicy::default(),
            cap_add: Vec::new(),
            capabilities: None,
            seccomp_bpf: Vec::new(),
            no_new_privs: true,
        }
    }
}

#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LandlockPolicy {
    pub enabled: bool,
    /// Refuse to run when the kernel's Landlock ABI is below this.
    pub min_abi: Option<u32>,
    /// TCP rules from the network mode (none: no TCP; proxy: only the
    /// proxy's port). `false` leaves TCP to the network namespace.
    pub network: bool,
    /// Scope abstract Unix sockets and signals to the sandbox's Landlock
    /// domain (ABI 6). `false` lets processes started into the sandbox
    /// later (each its own domain) talk to and signal each other.
    pub scope: bool,
}

impl Default for LandlockPolicy {
    fn default() -> Self {
        LandlockPolicy {
            enabled: true,
            min_abi: None,
            network: true,
            scope: true,
        }
    }
}

/// Network of the sandbox, tagged by `mode` (read by `de.rs`).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
#[allow(clippy::large_enum_variant)] // one per sandbox; boxing buys nothing
pub enum Network {
    /// Empty network namespace with `lo` up.
    #[default]
    None,
    /// The host's network namespace (`--share-net`).
    Host,
    /// Empty namespace plus the allow-list proxy doors.
    Proxy(ProxyPolicy),
}

/// Egress policy of the proxy mode.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyPolicy {
    /// Host patterns (`host`, `*.x`, `**.x`, optionally `:port`).
    pub allow: Vec<String>,
    /// Host patterns that are refused even when allowed.
    pub deny: Vec<String>,
    /// Addresses or CIDRs that may be dialled although special or private.
    pub allow_address: Vec<String>,
    /// Resolution overrides: name → address.
    #[serde(deserialize_with = "load::unique_map")]
    pub resolve: BTreeMap<String, String>,
    /// Audit log file (JSON lines), if any.
    pub audit: Option<PathBuf>,
    /// Also allow port 80 (plain HTTP) for entries without an explicit port.
    pub plain_http: bool,
    /// `proxy` (the doors only) or `transparent` (the doors, plus a
    /// resolver in the sandbox and every TCP connection to a resolved
    /// name captured and decided by the same policy).
    pub egress_mode: EgressMode,
    /// Resource limits of the proxy serving this sandbox.
    pub limits: ProxyLimits,
    /// Plain-HTTP endpoints inside the sandbox mapped to HTTPS upstreams.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<Gateway>,
    /// Allowed hosts whose TLS the proxy terminates (opt-in, per host).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intercept: Vec<Intercept>,
}

/// How programs in a `proxy`-network sandbox reach the policy engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EgressMode {
    /// Only through the proxy doors (programs must honour `HTTPS_PROXY`).
    #[default]
    Proxy,
    /// Also for programs that ignore proxy settings: names resolve inside
    /// the sandbox and connections to them are captured (docs/egress.md).
    Transparent,
}

impl EgressMode {
    /// Parse the CLI / key value.
    pub fn parse(s: &str) -> Option<EgressMode> {
        match s {
            "proxy" => Some(EgressMode::Proxy),
            "transparent" => Some(EgressMode::Transparent),
            _ => None,
        }
    }
}

/// Limits of the egress proxy for one sandbox. `None` means the built-in
/// default (see `docs/egress.md`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyLimits {
    /// Largest request head (request line plus headers).
    pub max_header_bytes: Option<ByteSize>,
    /// Time a client has to send a complete request head.
    pub handshake_timeout: Option<Duration>,
    /// Time to resolve a name and to connect upstream.
    pub connect_timeout: Option<Duration>,
    /// A tunnel or request with no traffic for this long is closed.
    pub idle_timeout: Option<Duration>,
    /// Longest life of one tunnel or request.
    pub total_timeout: Option<Duration>,
    /// Concurrent tunnels and forwarded requests.
    pub max_tunnels: Option<u64>,
    /// Concurrent client connections (including ones still sending a head).
    pub max_connections: Option<u64>,
    /// `transparent` egress: captured connections not yet classified (their
    /// upstream being dialled, or their first bytes, a TLS ClientHello
    /// perhaps, still awaited) at once; over it a connection is reset.
    pub max_pending_handshakes: Option<u64>,
    /// Bytes transferred in both directions over the sandbox's life.
    pub max_bytes: Option<ByteSize>,
    /// Bytes of audit log the sandbox's proxy may write (one sandbox can
    /// otherwise fill the host's disk with decisions); past it decisions
    /// are counted, not written.
    pub max_audit_bytes: Option<ByteSize>,
}

#[cfg(test)]
mod tests;
