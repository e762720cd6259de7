//! Why a launch failed: [`LaunchError`], and its typed form
//! [`LaunchFailure`] that crosses the helper boundary.

use std::os::fd::RawFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::wire::stage::Stage;
use crate::spec::SpecError;
use crate::sys::SysError;

/// Why a sandbox could not be launched. Display is one line: what, where,
/// why, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(
        "the launching process has {0} threads; an in-process launch needs a single-threaded caller (use Mode::Auto or hutch::Command, which run the hutch helper)"
    )]
    MultiThreaded(usize),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error("{0}")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    #[error("{0}")]
    Sys(#[from] SysError),
    #[error(
        "creating the sandbox: {0} (user namespaces may be disabled or restricted here: run `hutch check`)"
    )]
    Clone(SysError),
    /// fork, clone or execve said EAGAIN: a process limit was reached
    /// (`what` is the step).
    #[error("{what}: {err}; {limit}")]
    ProcessLimit {
        what: &'static str,
        err: SysError,
        limit: ProcessLimit,
    },
    /// The Spec's image could not be used (resolution, a check, its
    /// config, the id maps it needs).
    #[error("{0}")]
    Image(String),
    /// A private id range could not be allocated or held.
    #[error(transparent)]
    IdRange(#[from] crate::launch::prepare::range::IdRangeError),
    #[error("idmapping workspace layer {}: {err} (idmapped mounts need Linux 5.12+ and a filesystem that supports them)", path.display())]
    Idmap { path: PathBuf, err: SysError },
    #[error(
        "cannot find the hutch binary to supervise the sandbox (set HUTCH_BIN, or name it with Mode::Helper / Command::hutch_binary)"
    )]
    HelperNotFound,
    #[error("the hutch helper {}: {why}", binary.display())]
    Helper { binary: PathBuf, why: String },
    /// The helper could not launch the sandbox; the failure it reported.
    #[error(transparent)]
    Failed(LaunchFailure),
    /// A step of the sandbox's own setup failed (a created sandbox reports
    /// it this way; `exit_status` is what the workload would have exited
    /// with: 125, or 126/127 when its command cannot be executed or found).
    #[error("{line}")]
    Setup {
        stage: Stage,
        errno: crate::sys::Errno,
        exit_status: i32,
        line: String,
    },
}

/// What kind of failure a [`LaunchFailure`] is, for programs (the Python
/// package maps these to exceptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The Spec is invalid (`where` is the key path).
    InvalidSpec,
    /// An in-process launch from a multi-threaded process.
    MultiThreaded,
    /// Preparing the sandbox failed (policy, status file, upper dir...).
    Prepare,
    /// A resource limit could not be set up as required.
    Limits,
    /// A system call on the host failed (`where` is the call).
    System,
    /// The sandbox's namespaces could not be created.
    Namespaces,
    /// A workspace layer could not be idmapped (`where` is its path).
    Idmap,
    /// The Spec's image was refused or could not be used.
    Image,
    /// The helper could not be found, started or understood.
    Helper,
}

/// A launch failure in a form that crosses the helper boundary: typed,
/// with what failed, where, the errno and a hint. Display is the one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct LaunchFailure {
    pub kind: FailureKind,
    /// The whole line: what, where, why, what to do.
    pub message: String,
    /// A key path, a host path or a call.
    #[serde(rename = "where")]
    pub location: Option<String>,
    /// `ENOENT`, ...
    pub errno: Option<String>,
    pub hint: Option<String>,
}

impl LaunchError {
    /// The sandbox's clone failed: EAGAIN is a process limit (what it
    /// counts said; the sandbox's own cap is not in force yet), anything
    /// else the namespaces.
    pub(crate) fn clone_failed(err: SysError) -> LaunchError {
        if err.errno == crate::sys::Errno::EAGAIN {
            LaunchError::ProcessLimit {
                what: "creating the sandbox",
                err,
                limit: ProcessLimit::of_caller(None),
            }
        } else {
            LaunchError::Clone(err)
        }
    }

    /// The typed form of this error.
    pub fn failure(&self) -> LaunchFailure {
        let errno = |e: &SysError| Some(format!("{:?}", e.errno));
        let (kind, location, errno, hint) = match self {
            LaunchError::Spec(e) => (
                FailureKind::InvalidSpec,
                (!e.path.is_empty()).then(|| e.path.clone()),
                None,
                None,
            ),
            LaunchError::MultiThreaded(_) => (
                FailureKind::MultiThreaded,
                None,
                None,
                Some("use Mode::Auto or hutch::Command".into()),
            ),
            LaunchError::Prepare(_) => (FailureKind::Prepare, None, None, None),
            LaunchError::Image(_) => (FailureKind::Image, None, None, None),
            LaunchError::IdRange(_) => (FailureKind::Prepare, None, None, None),
            LaunchError::Cgroup(_) => (FailureKind::Limits, None, None, None),
            LaunchError::Sys(e) => (FailureKind::System, Some(e.call.clone()), errno(e), None),
            LaunchError::Clone(e) => (
                FailureKind::Namespaces,
                Some(e.call.clone()),
                errno(e),
                Some(
                    "user namespaces may be disabled or restricted here: run `hutch check`".into(),
                ),
            ),
            LaunchError::ProcessLimit { err, .. } => (
                FailureKind::Limits,
                Some(err.call.clone()),
                errno(err),
                None,
            ),
            LaunchError::Idmap { path, err } => (
                FailureKind::Idmap,
                Some(path.display().to_string()),
                errno(err),
                Some("idmapped mounts need Linux 5.12+ and a filesystem that supports them".into()),
            ),
            LaunchError::HelperNotFound => (
                FailureKind::Helper,
                None,
                None,
                Some("set HUTCH_BIN, or name the binary".into()),
            ),
            LaunchError::Helper { binary, .. } => (
                FailureKind::Helper,
                Some(binary.display().to_string()),
                None,
                None,
            ),
            LaunchError::Failed(f) => return f.clone(),
            LaunchError::Setup { stage, errno, .. } => (
                FailureKind::System,
                Some(stage.what().to_string()),
                Some(format!("{errno:?}")),
                None,
            ),
        };
        LaunchFailure {
            kind,
            message: self.to_string(),
            location,
            errno,
            hint,
        }
    }
}

/// Why a launch failed around the sandbox (policy, status file, uppers,
/// fds, joined namespaces, the helper's warm sandbox, an OCI step): one
/// variant per failure, carrying its values. Display is the one line.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("egress policy: {0}")]
    EgressPolicy(crate::net::NetError),
    /// A secret's source could not be read (names the secret, never its
    /// value).
    #[error("{0}")]
    Secret(crate::secret::SecretError),
    #[error("egress policy: TLS interception: {0}")]
    Intercept(crate::net::InterceptError),
    #[error("{0}")]
    Audit(#[from] crate::audit::AuditError),
    #[error("{0}")]
    Confinement(#[from] crate::confine::ConfineError),
    #[error("{0}")]
    Registry(#[from] crate::registry::RegistryError),
    #[error("{0}")]
    Message(#[from] super::wire::message::MessageError),
    #[error("cannot write status file {}: {why}", path.display())]
    StatusFile { path: PathBuf, why: StatusFileError },
    #[error(
        "{} exists and is not a directory; point --changes at an empty or hutch-made directory",
        path.display()
    )]
    UpperNotDirectory { path: PathBuf },
    #[error("cannot create {}: {err}", path.display())]
    CreateUpper { path: PathBuf, err: std::io::Error },
    #[error("cannot hand {} to host uid {uid}: {err}", path.display())]
    ChownUpper {
        path: PathBuf,
        uid: u32,
        err: std::io::Error,
    },
    #[error("cannot open /dev/null: {0}")]
    DevNull(std::io::Error),
    #[error(
        "inherit_fds: fd {0} is not open in the launching process (open it before the launch, or leave it out of inherit_fds)"
    )]
    InheritedFdNotOpen(RawFd),
    #[error("inherit_open_fds: reading /proc/self/fd: {0} (is /proc mounted?)")]
    ReadOpenFds(std::io::Error),
    #[error(
        "the launching process has {count} fds to inherit; at most {max} can be passed (close the others or mark them close-on-exec)"
    )]
    TooManyInheritedFds { count: usize, max: usize },
    #[error(
        "joining the {kind} namespace (namespaces.join.{kind}): {err}{}",
        join_hint(err)
    )]
    JoinNamespace { kind: &'static str, err: SysError },
    #[error("{0}")]
    ProxyDoors(#[from] ProxyDoorsError),
    #[error("starting the pool's thread: {0}")]
    PoolThread(std::io::Error),
    /// hutch init of a warm sandbox reported this failure (as
    /// `supervisor::describe` words it) and ended.
    #[error("{0}")]
    SandboxFailed(String),
    #[error("the warm sandbox ended before it was ready")]
    WarmEndedBeforeReady,
    #[error("the warm sandbox ended while it waited for a command")]
    WarmEndedWaiting,
    #[error(
        "this warm sandbox was built for another sandbox shape (binds, limits, network, confinement); launch the command cold or from a pool of its shape"
    )]
    OtherShape,
    #[error("the warm sandbox did not hand over the egress proxy's doors")]
    NoProxyDoors,
    /// An OCI hook run by `create` at one of its points failed (its
    /// runner's line).
    #[error("{0}")]
    Hook(String),
    #[error("the sandbox paused before pivot_root unasked")]
    UnaskedPause,
    #[error("the sandbox ended while it was being created")]
    EndedWhileCreated,
    #[error("entering the namespaces of process {init_pid} failed (is the container running?)")]
    EnterNamespaces { init_pid: libc::pid_t },
}

fn join_hint(err: &SysError) -> &'static str {
    match err.errno {
        crate::sys::Errno::EINVAL => " (not a namespace of that kind)",
        crate::sys::Errno::EPERM => " (not allowed: the launcher lacks the capability over it)",
        _ => "",
    }
}

/// Why a status file cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum StatusFileError {
    #[error(
        "it is not a regular file (a FIFO, socket or device): name a regular file, or pass a descriptor (--status-fd)"
    )]
    NotRegular,
    #[error("it is a symbolic link, which is not followed there: name the file itself")]
    Symlink,
    #[error("{0}")]
    Open(std::io::Error),
    #[error("fstat: {0}")]
    Fstat(std::io::Error),
    #[error("truncate: {0}")]
    Truncate(std::io::Error),
}

/// Why the egress proxy could not be served on the doors a sandbox sent.
#[derive(Debug, thiserror::Error)]
pub enum ProxyDoorsError {
    #[error("the sandbox sent proxy doors it was not asked for")]
    NotAsked,
    #[error("the sandbox sent its proxy doors twice")]
    Twice,
    #[error("the proxy doors message carried the wrong fds")]
    WrongFds,
    #[error("the sandbox sent an unknown proxy door {0:?}")]
    Unknown(String),
    #[error("starting the egress proxy: {0}")]
    Start(crate::net::NetError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed failures print the lines the strings they replaced did
    /// (the CLI prints them, scripts match on them).
    #[test]
    fn prepare_errors_print_the_lines_they_always_did() {
        let io = || std::io::Error::from_raw_os_error(libc::EACCES);
        let cases: [(PrepareError, String); 7] = [
            (
                PrepareError::UpperNotDirectory { path: "/u".into() },
                "/u exists and is not a directory; point --changes at an empty or hutch-made directory".into(),
            ),
            (
                PrepareError::ChownUpper { path: "/u".into(), uid: 7, err: io() },
                format!("cannot hand /u to host uid 7: {}", io()),
            ),
            (
                PrepareError::InheritedFdNotOpen(9),
                "inherit_fds: fd 9 is not open in the launching process (open it before the launch, or leave it out of inherit_fds)".into(),
            ),
            (
                PrepareError::StatusFile { path: "/s".into(), why: StatusFileError::Truncate(io()) },
                format!("cannot write status file /s: truncate: {}", io()),
            ),
            (
                PrepareError::JoinNamespace {
                    kind: "net",
                    err: SysError::new("setns(3, CLONE_NEWNET)", crate::sys::Errno::EINVAL),
                },
                format!(
                    "joining the net namespace (namespaces.join.net): {} (not a namespace of that kind)",
                    SysError::new("setns(3, CLONE_NEWNET)", crate::sys::Errno::EINVAL)
                ),
            ),
            (
                PrepareError::ProxyDoors(ProxyDoorsError::Unknown("x".into())),
                "the sandbox sent an unknown proxy door \"x\"".into(),
            ),
            (
                PrepareError::EnterNamespaces { init_pid: 42 },
                "entering the namespaces of process 42 failed (is the container running?)".into(),
            ),
        ];
        for (e, line) in cases {
            assert_eq!(LaunchError::from(e).to_string(), line);
        }
    }
}

/// What RLIMIT_NPROC counted when a fork, clone or execve of a launch
/// said EAGAIN. The kernel counts a user's tasks (threads included) per
/// user namespace and checks every level up to the initial one: the
/// sandbox's level holds only the sandbox's processes, against the
/// sandbox's own cap; the level above holds every process of the
/// launching user on the host, each of its sandboxes included, against
/// the limit the launching process had when it made the sandbox's user
/// namespace (none for root of the initial user namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessLimit {
    /// The launching user (its uid where hutch runs).
    pub uid: u32,
    /// Its RLIMIT_NPROC (soft), when it counts: not unlimited, not root
    /// of the initial user namespace.
    pub user_limit: Option<u64>,
    /// The sandbox's own RLIMIT_NPROC (`limits.pids` where there is no
    /// pids cgroup, or `limits.rlimits.nproc`).
    pub sandbox_cap: Option<u64>,
}

impl ProcessLimit {
    /// The launching process's side, read now (it has not changed since
    /// the launch began).
    pub(crate) fn of_caller(sandbox_cap: Option<u64>) -> ProcessLimit {
        let uid = crate::sys::geteuid();
        let soft = crate::sys::getrlimit(libc::RLIMIT_NPROC as i32)
            .map(|(soft, _)| soft)
            .unwrap_or(libc::RLIM_INFINITY);
        // Root of the initial user namespace is exempt (its map is the
        // whole id range onto itself).
        let initial_root = uid == 0
            && std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| {
                m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]
            });
        let user_limit = (soft != libc::RLIM_INFINITY && !initial_root).then_some(soft);
        ProcessLimit {
            uid,
            user_limit,
            sandbox_cap: sandbox_cap.filter(|n| *n != libc::RLIM_INFINITY),
        }
    }
}

impl std::fmt::Display for ProcessLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a process limit (RLIMIT_NPROC) was reached")?;
        let uid = self.uid;
        match (self.sandbox_cap, self.user_limit) {
            (Some(cap), Some(limit)) => write!(
                f,
                ": the sandbox's cap of {cap} counts only the sandbox's own processes and threads, \
                 but uid {uid}'s own limit of {limit} (ulimit -u) counts every process and thread \
                 of uid {uid} on this host, each of its sandboxes included; raise --pids, run \
                 fewer sandboxes as uid {uid} at once, or raise its ulimit -u"
            ),
            (None, Some(limit)) => write!(
                f,
                ": uid {uid}'s limit of {limit} (ulimit -u) counts every process and thread of \
                 uid {uid} on this host, each of its sandboxes included; run fewer sandboxes as \
                 uid {uid} at once or raise its ulimit -u"
            ),
            (Some(cap), None) => write!(
                f,
                ": the sandbox's cap of {cap} counts only the sandbox's own processes and \
                 threads; raise --pids"
            ),
            (None, None) => write!(f, " (docs/limits.md)"),
        }
    }
}
