//! The container lifecycle of the OCI runtime spec (`runtime.md`) over
//! hutch's create mode ([`crate::launch::create`]):
//!
//! - `create` builds the sandbox; hutch init waits on a hold socket in the
//!   container's state directory; its pid goes to the pid file and to
//!   `state.json` (with its start time, so that a reused pid is never
//!   taken for the container);
//! - `start` connects to the hold socket: hutch init starts the workload
//!   and answers `Started` (or the workload's exec failure record);
//! - `state` reads the record and looks at the process: alive and started
//!   is `running`, alive is `created`, gone is `stopped`;
//! - `kill` signals hutch init (which forwards to the workload), `kill
//!   --all` every process of the container ([`super::procs`]);
//! - `delete` kills what is left (every process of the container, its
//!   keeper) and removes the state directory.
//!
//! State lives under a root directory (default `/run/hutch-oci`), one
//! directory per container, so it survives hutch-oci's own restarts.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::OciError;
use super::config::{Config, State};
use super::procs::start_time;
use super::record::Record;
use crate::launch::create::{CreateOptions, create as launch_create};
use crate::launch::wire::message::{self, Incoming, Message};
use crate::sys;
use crate::sys::socket::UnixAddr;

/// The default state root.
pub const DEFAULT_ROOT: &str = "/run/hutch-oci";
/// The largest config.json hutch-oci reads.
pub const MAX_CONFIG: u64 = 4 << 20;
const STATE_FILE: &str = "state.json";
const HOLD_SOCKET: &str = "hold.sock";
const STARTED_MARK: &str = "started";
/// Written once `create` is complete (before it: `creating`).
const CREATED_MARK: &str = "created";
/// The config's hooks, kept for `start` and `delete`.
const HOOKS_FILE: &str = "hooks.json";
/// The container process's credentials, for its startContainer hooks.
const HOOK_CREDENTIALS_FILE: &str = "hook-credentials.json";
/// The `status` the prestart, createRuntime and createContainer hooks
/// read: runtime.md's lifecycle runs them (steps 3 to 5) after the
/// environment is created (step 2, `creating`), and `created` is "after
/// step 2". crun passes the same; runc passes `creating`.
const HOOK_STATUS_AT_CREATE: &str = "created";

/// A container's status (`runtime.md`, "State").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Creating,
    Created,
    Running,
    Stopped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Created => "created",
            Status::Running => "running",
            Status::Stopped => "stopped",
        }
    }
}

/// What `create` needs besides the id.
pub struct CreateRequest<'a> {
    pub bundle: &'a Path,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
    /// `--systemd-cgroup`: `cgroupsPath` is `slice:prefix:name`.
    pub systemd_cgroup: bool,
}

/// The state root.
#[derive(Debug, Clone)]
pub struct Root(PathBuf);

/// A container id usable as a directory name.
pub fn check_id(id: &str) -> Result<(), OciError> {
    let ok = !id.is_empty()
        && id.len() <= 1024
        && !id.starts_with('.')
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(OciError::BadId(id.chars().take(64).collect()))
    }
}

fn alive(pid: i32, start: u64) -> bool {
    pid > 0 && start_time(pid) == Some(start)
}

/// Write `data` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, data: &[u8]) -> Result<(), OciError> {
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        std::io::Write::write_all(&mut f, data)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(OciError::io(format!("writing {}", path.display())))
}

/// Read `bundle/config.json`: a regular file (no symlink followed), at
/// most [`MAX_CONFIG`] bytes, JSON of the runtime spec.
pub fn read_config(bundle: &Path) -> Result<Config, OciError> {
    let bad = |message: String| OciError::Bundle {
        bundle: bundle.display().to_string(),
        message,
    };
    let path = bundle.join("config.json");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| bad(format!("cannot open config.json: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| bad(format!("config.json: {e}")))?;
    if !meta.is_file() {
        return Err(bad("config.json is not a regular file".into()));
    }
    if meta.len() > MAX_CONFIG {
        return Err(bad(format!(
            "config.json is larger than {MAX_CONFIG} bytes"
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(format!("reading config.json: {e}")))?;
    // The message names the place, never echoes the content.
    serde_json::from_slice(&bytes).map_err(|e| {
        bad(format!(
            "config.json is not a runtime-spec config (line {}, column {}: {})",
            e.line(),
            e.column(),
            match e.classify() {
                serde_json::error::Category::Data => "a value of the wrong type",
                serde_json::error::Category::Syntax => "malformed JSON",
                serde_json::error::Category::Eof => "unexpected end",
                serde_json::error::Category::Io => "read error",
            }
        ))
    })
}

/// A connection to the engine's console socket.
fn connect_console(path: &Path) -> Result<OwnedFd, OciError> {
    let fd = sys::raw::socket(libc::AF_UNIX, libc::SOCK_STREAM)
        .map_err(|e| OciError::io("socket(AF_UNIX, SOCK_STREAM)")(e.into()))?;
    sys::raw::connect_unix(fd.as_fd(), &unix_addr(path)?).map_err(|e| {
        OciError::io(format!(
            "connecting to the console socket {}",
            path.display()
        ))(e.into())
    })?;
    Ok(fd)
}

fn seqpacket() -> Result<OwnedFd, OciError> {
    sys::raw::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET)
        .map_err(|e| OciError::io("socket(AF_UNIX, SOCK_SEQPACKET)")(e.into()))
}

fn unix_addr(path: &Path) -> Result<UnixAddr, OciError> {
    UnixAddr::new(path).map_err(|e| {
        OciError::io(format!("socket address {} (too long?)", path.display()))(e.into())
    })
}

/// The hold socket of a state directory, addressed through an fd of the
/// directory (`/proc/self/fd/N/hold.sock`), so that a long state root
/// never exceeds sun_path's 108 bytes. Returns the fd with the address.
fn hold_addr(dir: &Path) -> Result<(OwnedFd, UnixAddr), OciError> {
    let fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .map_err(OciError::io(format!("opening {}", dir.display())))?
        .into();
    let path = format!(
        "/proc/self/fd/{}/{HOLD_SOCKET}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    );
    let addr = unix_addr(Path::new(&path))?;
    Ok((fd, addr))
}

impl Root {
    pub fn new(path: impl Into<PathBuf>) -> Root {
        Root(path.into())
    }

    fn dir(&self, id: &str) -> Result<PathBuf, OciError> {
        check_id(id)?;
        Ok(self.0.join(id))
    }

    /// The record of container `id`.
    pub fn load(&self, id: &str) -> Result<Record, OciError> {
        let dir = self.dir(id)?;
        let path = dir.join(STATE_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(OciError::NotExist(id.into()));
            }
            Err(e) => return Err(OciError::io(format!("reading {}", path.display()))(e)),
        };
        serde_json::from_slice(&bytes).map_err(|e| OciError::Io {
            what: format!("reading {}", path.display()),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    /// The status of a loaded container.
    pub fn status(&self, r: &Record) -> Status {
        if !alive(r.pid, r.start_time) {
            return Status::Stopped;
        }
        match self.dir(&r.id) {
            Ok(dir) if dir.join(STARTED_MARK).exists() => Status::Running,
            Ok(dir) if dir.join(CREATED_MARK).exists() => Status::Created,
            _ => Status::Creating,
        }
    }

    /// The OCI state of container `id`.
    pub fn state(&self, id: &str) -> Result<State, OciError> {
        let r = self.load(id)?;
        let status = self.status(&r);
        Ok(State {
            oci_version: super::config::OCI_VERSION_MAX.into(),
            id: r.id.clone(),
            status: status.as_str().into(),
            pid: (status != Status::Stopped).then_some(r.pid),
            bundle: r.bundle.clone(),
            annotations: r.annotations.clone(),
        })
    }

    /// Create container `id` from its bundle: the sandbox is built and
    /// waits for [`Root::start`]. The process must be single-threaded.
    pub fn create(&self, id: &str, req: &CreateRequest<'_>) -> Result<Record, OciError> {
        let dir = self.dir(id)?;
        let bundle = std::path::absolute(req.bundle)
            .map_err(OciError::io(format!("bundle {}", req.bundle.display())))?;
        let config = read_config(&bundle)?;
        let mut t = super::translate::translate(&config, &bundle)?;
        if let Some(member) = &t.pod_member {
            self.join_pod(member, &mut t.spec)?;
        }
        if let Some(h) = &config.hooks {
            super::hooks::validate(h)?;
        }
        let host = crate::cgroup::host::HostCgroups::detect();
        let linux = config.linux.clone().unwrap_or_default();
        let cgroup_plan = super::resources::plan_for(
            &linux,
            id,
            req.systemd_cgroup,
            super::resources::v1::used(&host),
        )?;
        let cgroup_plan = super::resources::devices::add_v1(
            cgroup_plan,
            &linux,
            id,
            req.systemd_cgroup,
            &host,
        )?;
        if t.terminal != req.console_socket.is_some() {
            return Err(OciError::Config {
                key: "process.terminal".into(),
                message: if t.terminal {
                    "a terminal needs --console-socket".into()
                } else {
                    "--console-socket is given but the process has no terminal".into()
                },
            });
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.0)
            .map_err(OciError::io(format!("creating {}", self.0.display())))?;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(OciError::Exists(id.into()));
            }
            Err(e) => return Err(OciError::io(format!("creating {}", dir.display()))(e)),
        }
        let result = self.create_with_cgroup(id, &dir, &bundle, &config, t, req, cgroup_plan);
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        // runtime.md: a failing prestart, createRuntime or createContainer
        // hook stops the container and the lifecycle goes on at its
        // poststop hooks.
        if let (Err(OciError::Hook { .. }), Some(hooks)) = (&result, &config.hooks) {
            let state = State {
                oci_version: super::config::OCI_VERSION_MAX.into(),
                id: id.into(),
                status: "stopped".into(),
                pid: None,
                bundle: bundle.display().to_string(),
                annotations: config.annotations.clone(),
            };
            let _ = super::hooks::run(super::hooks::Phase::Poststop, hooks, &state, None, None);
        }
        result
    }

    /// The container's cgroup first (when the config asks for limits), so
    /// that a limit this host cannot enforce fails before anything runs;
    /// it goes again when the rest fails.
    #[allow(clippy::too_many_arguments)]
    fn create_with_cgroup(
        &self,
        id: &str,
        dir: &Path,
        bundle: &Path,
        config: &Config,
        t: super::translate::Translated,
        req: &CreateRequest<'_>,
        plan: Option<super::resources::CgroupPlan>,
    ) -> Result<Record, OciError> {
        let Some(plan) = plan else {
            return self.create_in(id, dir, bundle, config, t, req, None);
        };
        let host = crate::cgroup::host::HostCgroups::detect();
        // The plan holds runc's v1 files on such a host (`create`).
        let (applied, v1) = if super::resources::v1::used(&host) {
            super::resources::v1::apply(&host, &plan)?
        } else {
            (super::resources::apply(&host, &plan)?, Vec::new())
        };
        let leaves: Vec<PathBuf> = if v1.is_empty() {
            vec![applied.dir.clone()]
        } else {
            super::resources::v1::leaves(&v1)
                .into_iter()
                .map(PathBuf::from)
                .collect()
        };
        let cg = (leaves, applied.made.clone());
        let enforced = plan
            .writes
            .iter()
            .map(|w| crate::cgroup::Enforced {
                limit: w.key.clone(),
                value: serde_json::Value::String(w.value.clone()),
                by: format!("cgroup {}", w.file),
            })
            .collect();
        let engine = crate::launch::create::EngineCgroup {
            dir: applied.dir,
            fd: applied.fd,
            v1,
            enforced,
        };
        let result = self.create_in(
            id,
            dir,
            bundle,
            config,
            t,
            req,
            Some((engine, cg.1.clone())),
        );
        if result.is_err() {
            let leaves: Vec<&Path> = cg.0.iter().map(PathBuf::as_path).collect();
            let _ = super::resources::remove(&leaves, &cg.1);
        }
        result
    }

    /// A CRI pod's container joins its sandbox's egress (the sandbox's
    /// record is in this root: the same runtime handler ran it).
    fn join_pod(&self, m: &super::pod::Member, spec: &mut crate::Spec) -> Result<(), OciError> {
        let sandbox = match self.load(&m.sandbox_id) {
            Ok(r) => Some(r),
            Err(OciError::NotExist(_) | OciError::BadId(_)) => None,
            Err(e) => return Err(e),
        };
        let alive = sandbox.as_ref().is_some_and(|r| {
            alive(r.pid, r.start_time) && r.keeper.is_some_and(|(k, start)| alive(k, start))
        });
        // The sandbox's root directory on the host (its config's root.path).
        let root = sandbox.as_ref().and_then(|r| {
            let bundle = Path::new(&r.bundle);
            let path = read_config(bundle).ok()?.root?.path;
            Some(bundle.join(path))
        });
        super::pod::join(m, sandbox.as_ref(), alive, root.as_deref(), spec)
    }

    /// The state a hook reads on stdin.
    fn hook_state(&self, r: &Record, status: &str, pid: Option<i32>) -> State {
        State {
            oci_version: super::config::OCI_VERSION_MAX.into(),
            id: r.id.clone(),
            status: status.into(),
            pid,
            bundle: r.bundle.clone(),
            annotations: r.annotations.clone(),
        }
    }

    /// The hooks saved at `create` (none when the file is absent).
    fn hooks(&self, id: &str) -> Result<super::config::Hooks, OciError> {
        let path = self.dir(id)?.join(HOOKS_FILE);
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| OciError::Io {
                what: format!("reading {}", path.display()),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Default::default()),
            Err(e) => Err(OciError::io(format!("reading {}", path.display()))(e)),
        }
    }

    /// The container process's credentials saved at `create` (its
    /// startContainer hooks run as it).
    fn hook_credentials(&self, id: &str) -> Result<super::hooks::Credentials, OciError> {
        let path = self.dir(id)?.join(HOOK_CREDENTIALS_FILE);
        let bytes = std::fs::read(&path).map_err(OciError::io(format!(
            "reading {} (the startContainer hooks run as the container process)",
            path.display()
        )))?;
        serde_json::from_slice(&bytes).map_err(|e| OciError::Io {
            what: format!("reading {}", path.display()),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn create_in(
        &self,
        id: &str,
        dir: &Path,
        bundle: &Path,
        config: &Config,
        mut t: super::translate::Translated,
        req: &CreateRequest<'_>,
        cgroup: Option<(crate::launch::create::EngineCgroup, Vec<PathBuf>)>,
    ) -> Result<Record, OciError> {
        use super::hooks::{self, Phase};
        let hooks = config.hooks.clone().unwrap_or_default();
        let (cgroup_dir, cgroup_made, cgroup_v1) = match &cgroup {
            Some((e, made)) => (
                Some(e.dir.clone()),
                made.clone(),
                super::resources::v1::recorded(&e.v1),
            ),
            None => (None, Vec::new(), Vec::new()),
        };
        let base = Record {
            id: id.into(),
            pid: 0,
            start_time: 0,
            bundle: bundle.display().to_string(),
            annotations: config.annotations.clone(),
            keeper: None,
            cgroup: cgroup_dir,
            cgroup_made,
            cgroup_v1,
            mnt_ns: None,
            mnt_ns_joined: t.spec.namespaces.join.mount.is_some(),
        };
        // A record from the start: `delete` finds the cgroup even if this
        // process is killed before hutch init exists.
        write_atomic(
            &dir.join(STATE_FILE),
            &serde_json::to_vec(&base).expect("record serializes"),
        )?;
        if hooks != Default::default() {
            write_atomic(
                &dir.join(HOOKS_FILE),
                &serde_json::to_vec(&hooks).expect("hooks serialize"),
            )?;
        }
        if let Some(json) = &t.seccomp_profile {
            let path = dir.join("seccomp.json");
            write_atomic(&path, json.as_bytes())?;
            t.spec.security.seccomp = path.display().to_string();
        }
        // After the seccomp profile is written: the hooks get its filter.
        if !hooks.start_container.is_empty() {
            let creds = hooks::Credentials::of(&t.spec)?;
            write_atomic(
                &dir.join(HOOK_CREDENTIALS_FILE),
                &serde_json::to_vec(&creds).expect("credentials serialize"),
            )?;
        }
        let hold_path = dir.join(HOLD_SOCKET);
        let hold = seqpacket()?;
        let (_dir_fd, addr) = hold_addr(dir)?;
        sys::raw::bind_unix(hold.as_fd(), &addr)
            .map_err(|e| OciError::io(format!("bind({})", hold_path.display()))(e.into()))?;
        sys::raw::listen(hold.as_fd(), 1)
            .map_err(|e| OciError::io(format!("listen({})", hold_path.display()))(e.into()))?;
        let console = req.console_socket.map(connect_console).transpose()?;
        // A hook's failure in before_go or before_pivot, kept to be the
        // error (with its key).
        let hook_failed: std::cell::RefCell<Option<OciError>> = Default::default();
        let fail_with = |e: OciError| {
            let line = e.to_string();
            *hook_failed.borrow_mut() = Some(e);
            line
        };
        // createContainer: hutch init pauses with the root built and shown
        // at root.path, before pivot_root; the hooks join its namespaces
        // and find the host's `/` there (runtime-spec, as runc does).
        let mut before_pivot = |pid| {
            let state = self.hook_state(
                &Record {
                    pid,
                    ..base.clone()
                },
                HOOK_STATUS_AT_CREATE,
                Some(pid),
            );
            hooks::run(Phase::CreateContainer, &hooks, &state, Some(pid), None).map_err(fail_with)
        };
        // Read while hutch init waits for `Go`, still dumpable: a rootless
        // hutch-oci cannot inspect it once it is not.
        let mut mnt_ns = None;
        let created = launch_create(
            &t.spec,
            CreateOptions {
                cgroup: cgroup.map(|(e, _)| e),
                hold,
                console,
                status_file: t.status_file.clone(),
            },
            // The record exists from the moment hutch init does (before it
            // builds the root): a `delete` finds it even if this process
            // is killed now.
            &mut |pid| {
                if !base.mnt_ns_joined {
                    mnt_ns = super::procs::container_mnt_ns_id(pid);
                }
                let early = Record {
                    pid,
                    start_time: start_time(pid).unwrap_or(0),
                    mnt_ns,
                    ..base.clone()
                };
                let json = serde_json::to_vec(&early).expect("record serializes");
                write_atomic(&dir.join(STATE_FILE), &json).map_err(|e| e.to_string())?;
                // The runtime's namespaces, the container's exist, its
                // root is not built yet.
                let state = self.hook_state(&early, HOOK_STATUS_AT_CREATE, Some(pid));
                for phase in [Phase::Prestart, Phase::CreateRuntime] {
                    hooks::run(phase, &hooks, &state, Some(pid), None).map_err(fail_with)?;
                }
                Ok(())
            },
            (!hooks.create_container.is_empty())
                .then_some(&mut before_pivot as crate::launch::create::AtPoint<'_>),
        );
        let created = match (created, hook_failed.into_inner()) {
            (Ok(c), _) => c,
            (Err(_), Some(hook)) => return Err(hook),
            (Err(e), None) => return Err(e.into()),
        };
        let stamp = |pid| start_time(pid).unwrap_or(0);
        let record = Record {
            pid: created.pid,
            start_time: stamp(created.pid),
            keeper: created.keeper.map(|k| (k, stamp(k))),
            mnt_ns,
            ..base.clone()
        };
        let kill = || {
            let _ = sys::raw::kill(created.pid, libc::SIGKILL);
            if let Some(k) = created.keeper {
                let _ = sys::raw::kill(k, libc::SIGKILL);
            }
        };
        let json = serde_json::to_vec(&record).expect("record serializes");
        if let Err(e) = write_atomic(&dir.join(STATE_FILE), &json) {
            kill();
            return Err(e);
        }
        if let Some(pid_file) = req.pid_file
            && let Err(e) = write_atomic(pid_file, created.pid.to_string().as_bytes())
        {
            kill();
            return Err(e);
        }
        if let Err(e) = write_atomic(&dir.join(CREATED_MARK), b"") {
            kill();
            return Err(e);
        }
        Ok(record)
    }

    /// Start a created container: its workload runs once this returns.
    pub fn start(&self, id: &str) -> Result<(), OciError> {
        let r = self.load(id)?;
        match self.status(&r) {
            Status::Created => {}
            s => {
                return Err(OciError::WrongState {
                    id: id.into(),
                    status: s.as_str(),
                    message: "only a created container can be started",
                });
            }
        }
        let dir = self.dir(id)?;
        let hooks = self.hooks(id)?;
        let state = self.hook_state(&r, "created", Some(r.pid));
        let creds = if hooks.start_container.is_empty() {
            None
        } else {
            Some(self.hook_credentials(id)?)
        };
        if let Err(e) = super::hooks::run(
            super::hooks::Phase::StartContainer,
            &hooks,
            &state,
            Some(r.pid),
            creds.as_ref(),
        ) {
            // The spec: a failing startContainer hook stops the container.
            let _ = end_process(r.pid, r.start_time);
            return Err(e);
        }
        let sock = seqpacket()?;
        let hold_path = dir.join(HOLD_SOCKET);
        let (_dir_fd, addr) = hold_addr(&dir)?;
        sys::raw::connect_unix(sock.as_fd(), &addr).map_err(|e| {
            OciError::io(format!("connecting to {}", hold_path.display()))(e.into())
        })?;
        sys::socket::send(sock.as_fd(), b"start", &[]).map_err(|e| OciError::Io {
            what: "sending the start request".into(),
            source: std::io::Error::from_raw_os_error(e.errno as i32),
        })?;
        // Mark it first: `state` says running from the moment the
        // workload may run.
        write_atomic(&dir.join(STARTED_MARK), b"")?;
        let mut started = false;
        loop {
            match message::recv(&sock) {
                Ok(Some(Incoming::Message(Message::Started { .. }, _))) => started = true,
                Ok(Some(Incoming::Message(..))) => {}
                Ok(Some(Incoming::Failure(f, _))) => {
                    return Err(OciError::Start {
                        id: id.into(),
                        line: format!("{} failed: {}", f.stage.what(), f.errno.desc()),
                    });
                }
                // Closed: hutch init dropped its end, the workload's copy
                // closed on execve.
                Ok(None) => break,
                Err(e) => {
                    return Err(OciError::Start {
                        id: id.into(),
                        line: e.to_string(),
                    });
                }
            }
        }
        if !started {
            return Err(OciError::Start {
                id: id.into(),
                line: "the container ended before its workload started".into(),
            });
        }
        let state = self.hook_state(&r, "running", Some(r.pid));
        // Logged, never fatal (runtime-spec).
        let _ = super::hooks::run(super::hooks::Phase::Poststart, &hooks, &state, None, None);
        Ok(())
    }

    /// Run `process` in running container `id` (the OCI `exec`), with the
    /// container's confinement: its pid once it runs. With `wait`, this
    /// process becomes a subreaper, waits for it and returns its exit code
    /// (128+N for signal N); otherwise the process goes to the caller's
    /// subreaper.
    pub fn exec(
        &self,
        id: &str,
        process: super::config::Process,
        pid_file: Option<&Path>,
        console_socket: Option<&Path>,
        wait: bool,
    ) -> Result<i32, OciError> {
        let r = self.load(id)?;
        let status = self.status(&r);
        if status != Status::Running {
            return Err(OciError::WrongState {
                id: id.into(),
                status: status.as_str(),
                message: "container not running",
            });
        }
        let bundle = Path::new(&r.bundle);
        let mut config = read_config(bundle)?;
        if process.terminal != console_socket.is_some() {
            return Err(OciError::Config {
                key: "process.terminal".into(),
                message: "a terminal needs --console-socket, and --console-socket a terminal"
                    .into(),
            });
        }
        config.process = Some(process);
        let mut t = super::translate::translate(&config, bundle)?;
        if t.seccomp_profile.is_some() {
            t.spec.security.seccomp = self.dir(id)?.join("seccomp.json").display().to_string();
        }
        // The egress doors are the container's: the process joins its
        // network namespace and needs no proxy of its own.
        if matches!(t.spec.network, crate::spec::Network::Proxy(_)) {
            t.spec.network = crate::spec::Network::None;
        }
        let console = console_socket.map(connect_console).transpose()?;
        // The container's limits bind the new process too.
        let cgroup_v1 = super::resources::v1::dirs_of(&r.cgroup_v1);
        let cgroup = match &r.cgroup {
            Some(_) if !cgroup_v1.is_empty() => None,
            Some(dir) => Some(
                crate::cgroup::tree::Cgroup::new(dir)
                    .open_dir()
                    .map_err(OciError::io(format!("open({})", dir.display())))?,
            ),
            None => None,
        };
        if wait {
            sys::set_child_subreaper().map_err(|e| OciError::Io {
                what: "becoming a subreaper".into(),
                source: std::io::Error::from_raw_os_error(e.errno as i32),
            })?;
        }
        let pid = crate::launch::exec::exec(
            &t.spec,
            r.pid,
            crate::launch::exec::ExecOptions {
                console,
                cgroup,
                cgroup_v1,
            },
        )?;
        if let Some(pid_file) = pid_file {
            write_atomic(pid_file, pid.to_string().as_bytes())?;
        }
        if !wait {
            return Ok(0);
        }
        match sys::raw::waitpid(pid, 0) {
            Ok(Some((_, s))) if libc::WIFEXITED(s) => Ok(libc::WEXITSTATUS(s)),
            Ok(Some((_, s))) if libc::WIFSIGNALED(s) => Ok(128 + libc::WTERMSIG(s)),
            _ => Ok(1),
        }
    }

    /// The record of container `id`, which must not have stopped
    /// (containerd recognises the error by "container not running").
    fn load_not_stopped(&self, id: &str) -> Result<Record, OciError> {
        let r = self.load(id)?;
        let status = self.status(&r);
        if status == Status::Stopped {
            return Err(OciError::WrongState {
                id: id.into(),
                status: status.as_str(),
                message: "container not running",
            });
        }
        Ok(r)
    }

    /// The host pids of container `id`'s processes (`ps`): hutch init
    /// and every process [`super::procs`] identifies as the container's
    /// (its pid namespace, mount namespace, cgroup).
    pub fn processes(&self, id: &str) -> Result<Vec<i32>, OciError> {
        let r = self.load_not_stopped(id)?;
        super::procs::Members::of(&r).pids()
    }

    /// Send `signal` to the container's hutch init (forwarded to the
    /// workload; SIGKILL ends the whole container), or with `all` to every
    /// process of the container ([`super::procs::Members::signal_all`]),
    /// also when it has stopped but processes of it are left.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), OciError> {
        if all {
            // As runc: a stopped container whose processes are left (the
            // orphans of one without a pid namespace) still gets it.
            let r = self.load(id)?;
            let members = super::procs::Members::of(&r);
            if self.status(&r) == Status::Stopped && members.find()?.is_empty() {
                return Err(OciError::WrongState {
                    id: id.into(),
                    status: "stopped",
                    message: "container not running",
                });
            }
            return members.signal_all(id, signal);
        }
        let r = self.load_not_stopped(id)?;
        let pidfd = sys::raw::pidfd_open(r.pid).map_err(|e| OciError::Io {
            what: format!("pidfd_open({})", r.pid),
            source: std::io::Error::from_raw_os_error(e as i32),
        })?;
        // The pidfd pins the process: check it is still the container's.
        if !alive(r.pid, r.start_time) {
            return Err(OciError::WrongState {
                id: id.into(),
                status: "stopped",
                message: "container not running",
            });
        }
        sys::raw::pidfd_send_signal(pidfd.as_fd(), signal).map_err(|e| OciError::Io {
            what: format!("sending signal {signal} to {}", r.pid),
            source: std::io::Error::from_raw_os_error(e as i32),
        })
    }

    /// Remove container `id`: a running one only with `force`; its
    /// processes are killed and waited for, its state directory removed.
    /// A missing container with `force` is not an error.
    pub fn delete(&self, id: &str, force: bool) -> Result<(), OciError> {
        let dir = self.dir(id)?;
        let r = match self.load(id) {
            Ok(r) => r,
            Err(OciError::NotExist(_)) if force => {
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(());
            }
            Err(OciError::NotExist(_)) if dir.exists() => {
                // An aborted create: nothing runs, the directory goes.
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let status = self.status(&r);
        if status == Status::Running && !force {
            return Err(OciError::WrongState {
                id: id.into(),
                status: status.as_str(),
                message: "stop it first or delete --force",
            });
        }
        let hooks = self.hooks(id).unwrap_or_default();
        // Every process of the container, hutch init first among them;
        // without a pid namespace its workload and their children outlive
        // it (orphans of a stopped container too).
        let members = super::procs::Members::of(&r);
        end_process(r.pid, r.start_time)?;
        members.kill_all(id)?;
        if let Some((pid, start)) = r.keeper {
            end_process(pid, start)?;
        }
        if let Some(cg) = &r.cgroup {
            let v1 = super::resources::v1::dirs_of(&r.cgroup_v1);
            let leaves = if v1.is_empty() {
                vec![cg.as_path()]
            } else {
                super::resources::v1::leaves(&v1)
            };
            super::resources::remove(&leaves, &r.cgroup_made)?;
        }
        // After the container is gone, before delete returns; logged only.
        let state = self.hook_state(&r, "stopped", None);
        let _ = super::hooks::run(super::hooks::Phase::Poststop, &hooks, &state, None, None);
        std::fs::remove_dir_all(&dir).map_err(OciError::io(format!("removing {}", dir.display())))
    }

    /// The OCI `update`: write `resources` into the cgroup of container
    /// `id`. Only a container created with a limit has a cgroup of
    /// hutch-oci's; only the controllers it was created with can change.
    pub fn update(&self, id: &str, resources: &super::config::Resources) -> Result<(), OciError> {
        let r = self.load_not_stopped(id)?;
        let v1 = super::resources::v1::dirs_of(&r.cgroup_v1);
        let writes = if v1.is_empty() {
            super::resources::writes(resources)?
        } else {
            super::resources::v1::writes(resources)?
        };
        let Some(cg) = &r.cgroup else {
            if writes.is_empty() {
                return Ok(());
            }
            return Err(OciError::Config {
                key: writes[0].key.clone(),
                message: format!(
                    "container {id:?} was created without limits, so it has no cgroup of hutch-oci's to update: create it with the limit"
                ),
            });
        };
        if !v1.is_empty() {
            return super::resources::v1::update(&v1, &writes);
        }
        super::resources::update(cg, &writes)
    }

    /// The ids of every container under the root.
    pub fn list(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.0)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|id| check_id(id).is_ok())
            .collect();
        ids.sort();
        ids
    }
}

/// SIGKILL `pid` if it is still the process started at `start`, and wait
/// (up to 10 s) until it is gone.
fn end_process(pid: i32, start: u64) -> Result<(), OciError> {
    let Ok(pidfd) = sys::raw::pidfd_open(pid) else {
        return Ok(());
    };
    if !alive(pid, start) {
        return Ok(());
    }
    let _ = sys::raw::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A pidfd is readable once the process has exited.
        let left = deadline.saturating_duration_since(Instant::now());
        match sys::raw::poll_one(pidfd.as_fd(), libc::POLLIN, left.as_millis() as i32) {
            Ok(r) if r != 0 => return Ok(()),
            Err(sys::Errno::EINTR) => continue,
            _ if Instant::now() < deadline => continue,
            _ => {
                return Err(OciError::Io {
                    what: format!("waiting for process {pid} to end after SIGKILL"),
                    source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                });
            }
        }
    }
}
