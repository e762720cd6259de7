//! The library API: a std-like [`Command`] → [`Child`] → [`ExitReport`].
//!
//! Spawning never forks the calling process: it runs the `hutch` binary as
//! the supervisor (`hutch __supervise`), hands it the [`Spec`] over fd 3 and
//! reads the exit report from fd 4. That makes it safe from any thread of
//! any process (tokio apps, the Rust test harness).
//!
//! # Finding the `hutch` binary
//!
//! In order: [`Command::hutch_binary`]; the `HUTCH_BIN` environment
//! variable; a `hutch` file next to the current executable or in its parent
//! directory (how `cargo test` lays out a profile directory such as
//! `target/x86_64-unknown-linux-gnu/debug/`: test binaries in `deps/`,
//! `hutch` beside it); `hutch` on `PATH`.
//!
//! # Example
//!
//! ```no_run
//! let report = hutch::Command::new("sh")
//!     .args(["-c", "echo hello > out.txt"])
//!     .workspace("/srv/checkout")
//!     .timeout(std::time::Duration::from_secs(60))
//!     .status()?;
//! assert!(report.success());
//! # Ok::<(), hutch::SpawnError>(())
//! ```

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::cli::supervise_protocol::{REPORT_FD, REQUEST_FD, Request, Response, SUBCOMMAND};
use crate::spec::{self, ByteSize, Duration, FsOp, Network, Spec};

pub use crate::launch::{ExitReport, Outcome};

/// Why a sandbox could not be spawned or awaited.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot find the hutch binary (set HUTCH_BIN, or call Command::hutch_binary)")]
    BinaryNotFound,
    #[error("cannot start the hutch supervisor {}: {err}", binary.display())]
    Start {
        binary: PathBuf,
        err: std::io::Error,
    },
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    #[error("hutch: {0}")]
    Launch(String),
    #[error("the hutch supervisor ended without a report ({0})")]
    NoReport(std::process::ExitStatus),
    #[error("talking to the hutch supervisor: {0}")]
    Io(#[from] std::io::Error),
}

/// A sandboxed command, built like [`std::process::Command`].
pub struct Command {
    spec: Spec,
    status_file: Option<PathBuf>,
    quiet: bool,
    binary: Option<PathBuf>,
    stdin: Option<Stdio>,
    stdout: Option<Stdio>,
    stderr: Option<Stdio>,
}

impl Command {
    /// `program` under the embedded default profile (no workspace until
    /// [`Command::workspace`]).
    pub fn new(program: impl AsRef<str>) -> Self {
        let mut spec = spec::default_profile();
        spec.command = vec![program.as_ref().to_string()];
        Self::from_spec(spec)
    }

    /// Run exactly this Spec.
    pub fn from_spec(spec: Spec) -> Self {
        Command {
            spec,
            status_file: None,
            quiet: true,
            binary: None,
            stdin: None,
            stdout: None,
            stderr: None,
        }
    }

    pub fn arg(&mut self, arg: impl AsRef<str>) -> &mut Self {
        self.spec.command.push(arg.as_ref().to_string());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<str>>(&mut self, args: I) -> &mut Self {
        for a in args {
            self.arg(a);
        }
        self
    }

    pub fn env(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.spec.env.insert(key.into(), value.into());
        self
    }

    pub fn env_remove(&mut self, key: &str) -> &mut Self {
        self.spec.env.remove(key);
        self
    }

    /// Overlay `dir` at the same path (writes are discarded unless
    /// [`Command::changes`]) and make it the working directory.
    pub fn workspace(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        let dir = dir.as_ref().to_path_buf();
        self.spec.fs.retain(|op| !is_workspace(op, &dir));
        self.spec.fs.push(spec::workspace_overlay(&dir, None));
        self.spec.cwd = Some(dir);
        self
    }

    /// Keep the workspace overlay's upper in `dir/upper`.
    pub fn changes(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        let keep = dir.as_ref();
        for op in &mut self.spec.fs {
            if let FsOp::TmpOverlay { lowers, dest, .. } = op {
                let (lower, dest) = (lowers[0].clone(), dest.clone());
                *op = FsOp::Overlay {
                    lowers: vec![lower],
                    upper: keep.join("upper"),
                    work: keep.join("work"),
                    dest,
                };
                break;
            }
        }
        self
    }

    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.spec.cwd = Some(dir.as_ref().to_path_buf());
        self
    }

    pub fn ro_bind(&mut self, src: impl AsRef<Path>, dest: impl AsRef<Path>) -> &mut Self {
        self.spec.fs.push(FsOp::RoBind {
            src: src.as_ref().into(),
            dest: dest.as_ref().into(),
            optional: false,
        });
        self
    }

    pub fn bind(&mut self, src: impl AsRef<Path>, dest: impl AsRef<Path>) -> &mut Self {
        self.spec.fs.push(FsOp::Bind {
            src: src.as_ref().into(),
            dest: dest.as_ref().into(),
            optional: false,
        });
        self
    }

    pub fn tmpfs(&mut self, dest: impl AsRef<Path>) -> &mut Self {
        self.spec.fs.push(FsOp::Tmpfs {
            dest: dest.as_ref().into(),
            size: None,
            nr_inodes: None,
            mode: Some(0o755),
        });
        self
    }

    /// Use the host's network.
    pub fn share_net(&mut self) -> &mut Self {
        self.spec.network = Network::Host;
        self.spec.namespaces.net = false;
        self
    }

    /// Wall-clock limit (the whole tree is killed; status 124).
    pub fn timeout(&mut self, limit: std::time::Duration) -> &mut Self {
        self.spec.limits.wall_clock = Some(Duration(limit));
        self
    }

    /// No wall-clock limit.
    pub fn no_timeout(&mut self) -> &mut Self {
        self.spec.limits.wall_clock = None;
        self
    }

    pub fn output_limit(&mut self, bytes: u64) -> &mut Self {
        self.spec.limits.output_bytes = Some(ByteSize(bytes));
        self
    }

    pub fn uid(&mut self, uid: u32) -> &mut Self {
        self.spec.identity.uid = Some(uid);
        self
    }

    pub fn gid(&mut self, gid: u32) -> &mut Self {
        self.spec.identity.gid = Some(gid);
        self
    }

    /// Also write the status events (JSON lines) to this file.
    pub fn status_file(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.status_file = Some(path.as_ref().into());
        self
    }

    /// Print the changed-paths notice on stderr (off by default).
    pub fn notify_changes(&mut self, on: bool) -> &mut Self {
        self.quiet = !on;
        self
    }

    pub fn hutch_binary(&mut self, path: impl AsRef<Path>) -> &mut Self {
        self.binary = Some(path.as_ref().into());
        self
    }

    pub fn stdin(&mut self, s: impl Into<Stdio>) -> &mut Self {
        self.stdin = Some(s.into());
        self
    }

    pub fn stdout(&mut self, s: impl Into<Stdio>) -> &mut Self {
        self.stdout = Some(s.into());
        self
    }

    pub fn stderr(&mut self, s: impl Into<Stdio>) -> &mut Self {
        self.stderr = Some(s.into());
        self
    }

    /// The Spec this command runs.
    pub fn as_spec(&self) -> &Spec {
        &self.spec
    }

    /// Mutable access to the Spec, for anything the builder does not cover.
    pub fn spec_mut(&mut self) -> &mut Spec {
        &mut self.spec
    }

    /// Validate and start the sandbox.
    pub fn spawn(&mut self) -> Result<Child, SpawnError> {
        crate::launch::validate(&self.spec)?;
        if self.spec.command.is_empty() {
            return Err(spec::SpecError::new("command", "no command to run").into());
        }
        let binary = match &self.binary {
            Some(b) => b.clone(),
            None => find_binary().ok_or(SpawnError::BinaryNotFound)?,
        };
        let (req_r, req_w) = std::io::pipe()?;
        let (rep_r, rep_w) = std::io::pipe()?;
        let mut cmd = std::process::Command::new(&binary);
        cmd.arg(SUBCOMMAND).env_clear();
        // The helper registers the sandbox where `hutch ps` looks.
        for key in [crate::registry::RUNTIME_DIR_ENV, "XDG_RUNTIME_DIR"] {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        if let Some(s) = self.stdin.take() {
            cmd.stdin(s);
        }
        if let Some(s) = self.stdout.take() {
            cmd.stdout(s);
        }
        if let Some(s) = self.stderr.take() {
            cmd.stderr(s);
        }
        crate::sys::command_with_fds(
            &mut cmd,
            vec![
                (OwnedFd::from(req_r), REQUEST_FD),
                (OwnedFd::from(rep_w), REPORT_FD),
            ],
        )
        .map_err(|e| SpawnError::Io(std::io::Error::from_raw_os_error(e.errno as i32)))?;
        let process = cmd.spawn().map_err(|err| SpawnError::Start {
            binary: binary.clone(),
            err,
        })?;
        // Dropping the std Command closes our copies of the child's ends.
        drop(cmd);
        let request = Request {
            spec: self.spec.clone(),
            status_file: self.status_file.clone(),
            quiet: self.quiet,
        };
        let mut req_w = req_w;
        req_w.write_all(
            serde_json::to_string(&request)
                .expect("serializes")
                .as_bytes(),
        )?;
        drop(req_w);
        Ok(Child {
            process,
            report: rep_r,
        })
    }

    /// Spawn and wait.
    pub fn status(&mut self) -> Result<ExitReport, SpawnError> {
        self.spawn()?.wait()
    }
}

fn is_workspace(op: &FsOp, dir: &Path) -> bool {
    matches!(op, FsOp::TmpOverlay { dest, .. } | FsOp::Overlay { dest, .. } if dest == dir)
}

/// A running sandbox.
pub struct Child {
    process: std::process::Child,
    report: std::io::PipeReader,
}

impl Child {
    /// The supervisor's pid (killing it kills the whole sandbox).
    pub fn id(&self) -> u32 {
        self.process.id()
    }

    /// The supervisor's stdout when [`Command::stdout`] was piped.
    pub fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.process.stdout.take()
    }

    pub fn stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.process.stderr.take()
    }

    pub fn stdin(&mut self) -> Option<std::process::ChildStdin> {
        self.process.stdin.take()
    }

    /// Kill the sandbox (SIGKILL to the supervisor; the sandbox dies with it).
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.process.kill()
    }

    /// Wait for the sandbox and return its exit report.
    pub fn wait(mut self) -> Result<ExitReport, SpawnError> {
        let mut text = String::new();
        self.report.read_to_string(&mut text)?;
        let status = self.process.wait()?;
        match serde_json::from_str::<Response>(&text) {
            Ok(Response::Report(r)) => Ok(*r),
            Ok(Response::Error(e)) => Err(SpawnError::Launch(e)),
            Err(_) => Err(SpawnError::NoReport(status)),
        }
    }
}

/// Where the `hutch` binary is (see the module docs for the order).
pub fn find_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HUTCH_BIN") {
        return Some(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(2) {
            let candidate = dir.join("hutch");
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("hutch"))
            .find(|p| p.is_file())
    })
}
