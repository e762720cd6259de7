//! The OCI runtime behind `hutch-oci`: `config.json` read as a schema of
//! its own ([`config`], importing nothing of the runtime), translated into
//! a [`crate::Spec`] ([`translate`]), and the container lifecycle
//! ([`lifecycle`]: state under a root directory, create with a held
//! hutch init, start, kill, delete). See docs/oci.md.

pub mod config;
pub mod hooks;
pub mod lifecycle;
pub(crate) mod pod;
pub mod procs;
pub mod record;
pub mod resources;
pub mod seccomp;
pub mod translate;

/// What went wrong, as one line (the key of the config, or the step).
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A property of config.json hutch refuses or cannot read.
    #[error("config.json: {key}: {message}")]
    Config { key: String, message: String },
    /// The bundle itself (no config.json, not JSON, too large...).
    #[error("bundle {bundle}: {message}")]
    Bundle { bundle: String, message: String },
    /// No container of that id under the state root.
    #[error("container {0:?} does not exist")]
    NotExist(String),
    #[error("container {0:?} already exists")]
    Exists(String),
    /// The operation needs a state the container is not in.
    #[error("container {id:?} is {status}: {message}")]
    WrongState {
        id: String,
        status: &'static str,
        message: &'static str,
    },
    /// A container id that cannot name a state directory.
    #[error(
        "invalid container id {0:?}: use 1-1024 of A-Z a-z 0-9 _ . - (not starting with . or -)"
    )]
    BadId(String),
    /// A filesystem or process step of hutch-oci itself.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
    /// A hook failed (createRuntime, createContainer, startContainer...).
    #[error("{key} ({path}) failed: {why}")]
    Hook {
        key: String,
        path: String,
        why: String,
    },
    /// Processes of a container that outlived SIGKILL, or kept appearing,
    /// until the deadline.
    #[error(
        "container {id:?}: processes still alive {secs} s after {what} (pids {pids:?}): one in uninterruptible sleep (D state) or forking as fast as it is killed; run the command again, and look at them with `hutch-oci ps {id}`"
    )]
    Survivors {
        id: String,
        what: String,
        pids: Vec<i32>,
        secs: u64,
    },
    /// The container's start failed (its command could not be executed).
    #[error("starting container {id:?}: {line}")]
    Start { id: String, line: String },
}

impl OciError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OciError {
        let what = what.into();
        move |source| OciError::Io { what, source }
    }
}
