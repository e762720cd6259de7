//! The library API: a std-like [`Command`] → [`Child`] → [`ExitReport`]
//! (or [`Output`]).
//!
//! Spawning never forks the calling process: it runs the `hutch` binary as
//! the supervisor (`hutch __supervise`, the [`crate::launch`] helper mode)
//! and talks to it over a control socket. That makes it safe from any
//! thread of any process (tokio apps, the Rust test harness), and lets
//! [`Child::kill`] end the sandbox through its supervisor, which cleans up
//! and reports as for any other ending.
//!
//! # Finding the `hutch` binary
//!
//! In order: [`Command::hutch_binary`]; the `HUTCH_BIN` environment
//! variable; a `hutch` file next to the current executable or in its parent
//! directory (how `cargo test` lays out a profile directory such as
//! `target/x86_64-unknown-linux-gnu/debug/`: test binaries in `deps/`,
//! `hutch` beside it); `hutch` on `PATH`. A program can also be its own
//! helper: call [`crate::supervisor_main`] first thing in `main` and name
//! its own executable with [`Command::hutch_binary`].
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

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use std::os::fd::OwnedFd;

use crate::launch::ExitReport;
use crate::launch::claim::ClaimCommand;
use crate::launch::helper::HelperChild;
use crate::launch::pool::InFlight;
use crate::launch::{LaunchError, LaunchFailure, RunOptions};
use crate::spec::{self, ByteSize, Duration, FsOp, Network, Spec};

mod options;
use options::{CommandOptions, shared_setters};

/// Why a sandbox could not be spawned or awaited.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot find the hutch binary (set HUTCH_BIN, or call Command::hutch_binary)")]
    BinaryNotFound,
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    /// The sandbox could not be launched: what failed, where, the errno and
    /// a hint, typed ([`LaunchFailure::kind`]).
    #[error("hutch: {0}")]
    Launch(LaunchFailure),
    #[error("talking to the hutch supervisor: {0}")]
    Io(#[from] std::io::Error),
}

impl From<LaunchError> for SpawnError {
    fn from(e: LaunchError) -> SpawnError {
        match e {
            LaunchError::Spec(e) => SpawnError::Spec(e),
            LaunchError::HelperNotFound => SpawnError::BinaryNotFound,
            e => SpawnError::Launch(e.failure()),
        }
    }
}

/// A sandboxed command, built like [`std::process::Command`].
pub struct Command {
    spec: Spec,
    options: CommandOptions,
    binary: Option<PathBuf>,
    /// `changes()` called before there was a workspace overlay to keep.
    changes: Option<PathBuf>,
    stdin: Option<Stdio>,
    stdout: Option<Stdio>,
    stderr: Option<Stdio>,
}

/// What [`Command::output`] and [`Child::wait_with_output`] return.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub report: ExitReport,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
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
            options: CommandOptions::default(),
            binary: None,
            changes: None,
            stdin: None,
            stdout: None,
            stderr: None,
        }
    }

    shared_setters! {
        spec;
        /// Wall-clock limit (the whole tree is killed; status 124).
        fn timeout;
        /// No wall-clock limit.
        fn no_timeout;
    }

    /// Overlay `dir` at the same path (writes are discarded unless
    /// [`Command::changes`]) and make it the working directory.
    pub fn workspace(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        let dir = dir.as_ref().to_path_buf();
        self.spec.fs.retain(|op| !is_workspace(op, &dir));
        self.spec.fs.push(spec::workspace_overlay(&dir, None));
        self.spec.cwd = Some(dir);
        if let Some(keep) = self.changes.take() {
            self.changes(keep);
        }
        self
    }

    /// Keep the workspace overlay's upper in `dir/upper` (work in
    /// `dir/work`). Order-independent: called before
    /// [`Command::workspace`], it applies to the workspace named later;
    /// with no workspace overlay at all, [`Command::spawn`] refuses.
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
                return self;
            }
        }
        self.changes = Some(keep.to_path_buf());
        self
    }

    /// Run on a container image from the store instead of the host's
    /// system directories ([`spec::use_image`]): `reference` is
    /// `sha256:<hex>` or `NAME@sha256:<hex>`; set the Spec's `image` table
    /// (through [`Command::from_spec`]) for a store, platform or override.
    /// The image's Env and User are defaults under [`Command::env`] and the
    /// Spec's identity; its WorkingDir applies when no working directory is
    /// set ([`Command::workspace`] and [`Command::current_dir`] set one).
    pub fn image(&mut self, reference: &str) -> &mut Self {
        spec::use_image(&mut self.spec, spec::ImageRef::new(reference));
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

    /// The egress policy, switching the network to the allow-list proxy
    /// first (an empty allow-list: nothing allowed yet).
    fn proxy_policy(&mut self) -> &mut spec::ProxyPolicy {
        if !matches!(self.spec.network, Network::Proxy(_)) {
            self.spec.network = Network::Proxy(spec::ProxyPolicy::default());
        }
        self.spec.namespaces.net = true;
        match &mut self.spec.network {
            Network::Proxy(p) => p,
            _ => unreachable!("set to proxy above"),
        }
    }

    /// Network through the egress proxy; allow `pattern` (`host`, `*.x`,
    /// `**.x`, `[:port]`), as `hutch run --allow-host`.
    pub fn allow_host(&mut self, pattern: impl Into<String>) -> &mut Self {
        self.proxy_policy().allow.push(pattern.into());
        self
    }

    /// Let allowed names reach this special or private address or CIDR
    /// (`--allow-address`).
    pub fn allow_address(&mut self, address: impl Into<String>) -> &mut Self {
        self.proxy_policy().allow_address.push(address.into());
        self
    }

    /// Resolve `name` to `address` instead of asking DNS (`--resolve`).
    pub fn resolve(&mut self, name: impl Into<String>, address: impl Into<String>) -> &mut Self {
        self.proxy_policy()
            .resolve
            .insert(name.into(), address.into());
        self
    }

    /// A credential the sandbox never holds (`docs/secrets.md`): it is read
    /// from its source when the sandbox is spawned (in this process: its
    /// environment, a file, or one of its fds, which stays open), and the
    /// sandbox's `env` variable holds a placeholder that the proxy swaps
    /// for the value on requests to the secret's hosts.
    pub fn secret(&mut self, secret: spec::Secret) -> &mut Self {
        self.spec.secrets.push(secret);
        self
    }

    /// A plain-HTTP endpoint inside the sandbox mapped to one HTTPS
    /// upstream (`--gateway`); its host must be allowed.
    pub fn gateway(&mut self, gateway: spec::Gateway) -> &mut Self {
        self.proxy_policy().gateways.push(gateway);
        self
    }

    /// Terminate an allowed host's TLS with the sandbox's own CA
    /// (`--intercept`).
    pub fn intercept(&mut self, intercept: spec::Intercept) -> &mut Self {
        self.proxy_policy().intercept.push(intercept);
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

    /// The binary that supervises the sandbox: `hutch`, or a program that
    /// calls [`crate::supervisor_main`].
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
        if self.changes.is_some() {
            return Err(spec::SpecError::new(
                "fs",
                "changes() keeps a workspace overlay's upper, and there is none: call workspace() as well",
            )
            .into());
        }
        crate::launch::validate(&self.spec)?;
        if self.spec.command.is_empty() {
            return Err(spec::SpecError::new("command", "no command to run").into());
        }
        let binary = match &self.binary {
            Some(b) => b.clone(),
            None => crate::launch::helper::find_binary().ok_or(SpawnError::BinaryNotFound)?,
        };
        let options = RunOptions {
            status_file: self.options.status_file.clone(),
            quiet: self.options.quiet,
            ..Default::default()
        };
        let stdio = [
            self.stdin.take().unwrap_or_else(Stdio::inherit),
            self.stdout.take().unwrap_or_else(Stdio::inherit),
            self.stderr.take().unwrap_or_else(Stdio::inherit),
        ];
        let inner = HelperChild::spawn(&binary, &self.spec, &options, stdio)?;
        Ok(Child {
            inner,
            pipes: Pipes::default(),
            claim: None,
        })
    }

    /// Spawn and wait.
    pub fn status(&mut self) -> Result<ExitReport, SpawnError> {
        self.spawn()?.wait()
    }

    /// Spawn with stdout and stderr piped (unless set) and stdin from
    /// /dev/null (unless set), and collect them.
    pub fn output(&mut self) -> Result<Output, SpawnError> {
        self.set_output_stdio();
        self.spawn()?.wait_with_output()
    }

    /// What [`Command::output`] does with stdio left unset.
    pub(crate) fn set_output_stdio(&mut self) {
        self.stdin.get_or_insert_with(Stdio::null);
        self.stdout.get_or_insert_with(Stdio::piped);
        self.stderr.get_or_insert_with(Stdio::piped);
    }
}

fn is_workspace(op: &FsOp, dir: &Path) -> bool {
    matches!(op, FsOp::TmpOverlay { dest, .. } | FsOp::Overlay { dest, .. } if dest == dir)
}

/// A running sandbox.
pub struct Child {
    pub(crate) inner: HelperChild,
    /// Pipes of a pooled command ([`PoolCommand`]), whose helper was
    /// started before the command existed.
    pipes: Pipes,
    /// A pooled command: counted by its pool until it ends, and its
    /// helper reaped by the pool, so that the report does not wait for
    /// the helper's exit.
    pub(crate) claim: Option<InFlight>,
}

impl Drop for Child {
    fn drop(&mut self) {
        // A pooled helper not reaped yet: the pool reaps it (dropping the
        // link closes its control socket, which ends a sandbox that runs).
        if let Some(claim) = self.claim.take() {
            claim.release(Some(self.inner.process.id() as libc::pid_t));
        }
    }
}

#[derive(Default)]
struct Pipes {
    stdin: Option<std::process::ChildStdin>,
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
}

impl Child {
    /// The supervisor's pid.
    pub fn id(&self) -> u32 {
        self.inner.process.id()
    }

    /// The workload's stdout when it was piped.
    pub fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.pipes
            .stdout
            .take()
            .or_else(|| self.inner.process.stdout.take())
    }

    pub fn stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.pipes
            .stderr
            .take()
            .or_else(|| self.inner.process.stderr.take())
    }

    pub fn stdin(&mut self) -> Option<std::process::ChildStdin> {
        self.pipes
            .stdin
            .take()
            .or_else(|| self.inner.process.stdin.take())
    }

    /// End the sandbox: its supervisor kills every process in it, removes
    /// its cgroup leaf and reports ([`crate::Outcome::Killed`]). The supervisor
    /// itself is killed only if it does not answer.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.inner.kill()
    }

    /// Wait for the sandbox and return its exit report.
    pub fn wait(&mut self) -> Result<ExitReport, SpawnError> {
        if self.claim.is_some() {
            self.inner.link.wait_answer();
            return self.pooled_result();
        }
        Ok(self.inner.wait()?.report)
    }

    /// A pooled command answered: its result, the helper left to the pool
    /// (everything of the sandbox is gone once its helper answers; the
    /// helper itself only exits then).
    pub(crate) fn pooled_result(&mut self) -> Result<ExitReport, SpawnError> {
        let result = self
            .inner
            .link
            .take_result(|| "ended without a report".into());
        if let Some(claim) = self.claim.take() {
            let pid = match self.inner.process.try_wait() {
                Ok(Some(_)) => None,
                _ => Some(self.inner.process.id() as libc::pid_t),
            };
            claim.release(pid);
        }
        Ok(result?.report)
    }

    /// The exit report if the sandbox has ended, without waiting.
    pub fn try_wait(&mut self) -> Result<Option<ExitReport>, SpawnError> {
        if self.claim.is_some() {
            return match self.inner.link.try_answer() {
                true => self.pooled_result().map(Some),
                false => Ok(None),
            };
        }
        Ok(self.inner.try_wait()?.map(|f| f.report))
    }

    /// Read piped stdout and stderr to their end, then wait.
    pub fn wait_with_output(mut self) -> Result<Output, SpawnError> {
        let mut out = self.stdout();
        let mut err = self.stderr();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        // Both at once, so neither pipe fills while the other is read.
        while out.is_some() || err.is_some() {
            let mut fds = Vec::with_capacity(2);
            if let Some(o) = &out {
                fds.push(nix::poll::PollFd::new(
                    o.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                ));
            }
            if let Some(e) = &err {
                fds.push(nix::poll::PollFd::new(
                    e.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                ));
            }
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            drop(fds);
            let mut i = 0;
            let mut chunk = [0u8; 64 * 1024];
            if let Some(o) = &mut out {
                if ready[i] {
                    match o.read(&mut chunk)? {
                        0 => out = None,
                        n => stdout.extend_from_slice(&chunk[..n]),
                    }
                }
                i += 1;
            }
            if let Some(e) = &mut err
                && ready[i]
            {
                match e.read(&mut chunk)? {
                    0 => err = None,
                    n => stderr.extend_from_slice(&chunk[..n]),
                }
            }
        }
        let report = self.wait()?;
        Ok(Output {
            report,
            stdout,
            stderr,
        })
    }
}

/// Where the `hutch` binary is (see the module docs for the order).
pub fn find_binary() -> Option<PathBuf> {
    crate::launch::helper::find_binary()
}

/// Where a pooled command's stdin, stdout or stderr goes ([`PoolCommand`]:
/// its sandbox exists before the command, so its stdio is passed as fds).
#[derive(Debug)]
pub enum Redirect {
    /// This process's own.
    Inherit,
    /// `/dev/null`.
    Null,
    /// A pipe to this process ([`Child::stdin`], [`Child::stdout`],
    /// [`Child::stderr`]).
    Piped,
    /// This file or fd.
    Fd(OwnedFd),
}

impl From<std::fs::File> for Redirect {
    fn from(f: std::fs::File) -> Redirect {
        Redirect::Fd(f.into())
    }
}

impl From<OwnedFd> for Redirect {
    fn from(fd: OwnedFd) -> Redirect {
        Redirect::Fd(fd)
    }
}

/// Warm sandboxes of one Spec, built before they are asked for: each
/// command claims one (a fresh sandbox, a fresh pid namespace, a fresh
/// execve), which then ends; the pool builds a replacement in the
/// background. Commands may differ from the Spec only in what does not
/// change the sandbox: argv, environment, working directory, wall clock,
/// output cap (`launch::claim`). Dropping the pool ends every
/// sandbox it holds; nothing outlives it.
///
/// ```no_run
/// let mut spec = hutch::spec::default_profile();
/// spec.command = vec!["true".into()];
/// let pool = hutch::Pool::new(spec, 4)?;
/// let report = pool.command(["make", "test"]).status()?;
/// assert!(report.warm);
/// # Ok::<(), hutch::SpawnError>(())
/// ```
pub struct Pool {
    inner: crate::launch::pool::Pool,
    binary: PathBuf,
}

impl Pool {
    /// Keep `size` warm sandboxes of `spec` (its `command`, if any, is
    /// only a default: each [`Pool::command`] brings its own).
    pub fn new(spec: Spec, size: usize) -> Result<Pool, SpawnError> {
        let binary = crate::launch::helper::find_binary().ok_or(SpawnError::BinaryNotFound)?;
        Pool::with_binary(spec, size, binary)
    }

    /// [`Pool::new`] with this `hutch` binary (or a program that calls
    /// [`crate::supervisor_main`]) as the sandboxes' supervisor.
    pub fn with_binary(
        spec: Spec,
        size: usize,
        binary: impl AsRef<Path>,
    ) -> Result<Pool, SpawnError> {
        let binary = binary.as_ref().to_path_buf();
        let inner = crate::launch::pool::Pool::new(&binary, &spec, size, None, false)?;
        Ok(Pool { inner, binary })
    }

    /// A command to run in one of the pool's sandboxes (the Spec's
    /// environment, working directory and limits unless changed).
    pub fn command<I: IntoIterator<Item = S>, S: AsRef<str>>(&self, argv: I) -> PoolCommand<'_> {
        let mut command = self.inner.defaults().clone();
        command.command = argv.into_iter().map(|a| a.as_ref().to_string()).collect();
        PoolCommand {
            pool: self,
            command,
            options: CommandOptions::default(),
            stdio: [None, None, None],
        }
    }

    /// Keep `size` warm sandboxes from now on.
    pub fn resize(&self, size: usize) {
        self.inner.resize(size);
    }

    /// How many sandboxes are ready, warming, taken.
    pub fn status(&self) -> crate::launch::pool::PoolStatus {
        self.inner.status()
    }

    /// Wait up to `timeout` until `n` sandboxes are ready; whether they are.
    pub fn wait_ready(&self, n: usize, timeout: std::time::Duration) -> bool {
        self.inner.wait_ready(n, timeout)
    }
}

/// A command for a [`Pool`], built like [`Command`].
pub struct PoolCommand<'a> {
    pool: &'a Pool,
    command: ClaimCommand,
    options: CommandOptions,
    stdio: [Option<Redirect>; 3],
}

impl PoolCommand<'_> {
    shared_setters! {
        command;
        /// Wall-clock limit from the claim on (the whole tree is killed;
        /// status 124).
        fn timeout;
        fn no_timeout;
    }

    pub fn stdin(&mut self, r: impl Into<Redirect>) -> &mut Self {
        self.stdio[0] = Some(r.into());
        self
    }

    pub fn stdout(&mut self, r: impl Into<Redirect>) -> &mut Self {
        self.stdio[1] = Some(r.into());
        self
    }

    pub fn stderr(&mut self, r: impl Into<Redirect>) -> &mut Self {
        self.stdio[2] = Some(r.into());
        self
    }

    /// The whole Spec this command runs (the pool's shape with this
    /// command).
    pub fn to_spec(&self) -> Spec {
        self.command.apply(self.pool.inner.shape())
    }

    /// Claim a warm sandbox and start the command in it; launched cold
    /// (the report then says `warm: false`) when the pool has none.
    pub fn spawn(&mut self) -> Result<Child, SpawnError> {
        let spec = self.to_spec();
        crate::launch::validate(&spec)?;
        if spec.command.is_empty() {
            return Err(spec::SpecError::new("command", "no command to run").into());
        }
        let options = RunOptions {
            status_file: match &self.options.status_file {
                // The supervisor runs elsewhere: name the file absolutely.
                Some(p) => Some(std::path::absolute(p)?),
                None => None,
            },
            quiet: self.options.quiet,
            ..Default::default()
        };
        let (fds, pipes) = pooled_stdio(std::mem::take(&mut self.stdio))?;
        // Counted before the take, so the refill never starts in between.
        let claim = self.pool.inner.in_flight();
        if let Some(mut helper) = self.pool.inner.take() {
            let claimed = helper.link.claim(
                self.pool.inner.digest(),
                self.command.clone(),
                &options,
                [fds[0].as_fd(), fds[1].as_fd(), fds[2].as_fd()],
                None,
            );
            if claimed.is_ok() {
                return Ok(Child {
                    inner: helper,
                    pipes,
                    claim: Some(claim),
                });
            }
            // The helper went away before its claim: launch cold.
        }
        let [a, b, c] = fds;
        let stdio = [Stdio::from(a), Stdio::from(b), Stdio::from(c)];
        // Cold, beside the pool's warm commands of the same uppers: it
        // waits for theirs as they wait for each other's.
        let options = RunOptions {
            lock_host_uppers: true,
            ..options
        };
        let inner = HelperChild::spawn(&self.pool.binary, &spec, &options, stdio)?;
        Ok(Child {
            inner,
            pipes,
            claim: None,
        })
    }

    /// Spawn and wait.
    pub fn status(&mut self) -> Result<ExitReport, SpawnError> {
        self.spawn()?.wait()
    }

    /// Spawn with stdout and stderr piped (unless set) and stdin from
    /// /dev/null (unless set), and collect them.
    pub fn output(&mut self) -> Result<Output, SpawnError> {
        self.set_output_stdio();
        self.spawn()?.wait_with_output()
    }

    /// What [`PoolCommand::output`] does with stdio left unset.
    pub(crate) fn set_output_stdio(&mut self) {
        self.stdio[0].get_or_insert(Redirect::Null);
        self.stdio[1].get_or_insert(Redirect::Piped);
        self.stdio[2].get_or_insert(Redirect::Piped);
    }
}

/// The workload's three stdio fds and this side's pipe ends.
fn pooled_stdio(stdio: [Option<Redirect>; 3]) -> Result<([OwnedFd; 3], Pipes), SpawnError> {
    let mut pipes = Pipes::default();
    let mut fds = Vec::with_capacity(3);
    for (i, r) in stdio.into_iter().enumerate() {
        let fd = match r.unwrap_or(Redirect::Inherit) {
            Redirect::Inherit => crate::sys::dup_fd(i as i32)
                .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))?,
            Redirect::Null => OwnedFd::from(
                std::fs::OpenOptions::new()
                    .read(i == 0)
                    .write(i != 0)
                    .open("/dev/null")?,
            ),
            Redirect::Piped => {
                let (r, w) = std::io::pipe()?;
                if i == 0 {
                    pipes.stdin = Some(OwnedFd::from(w).into());
                    OwnedFd::from(r)
                } else {
                    let ours = OwnedFd::from(r);
                    if i == 1 {
                        pipes.stdout = Some(ours.into());
                    } else {
                        pipes.stderr = Some(ours.into());
                    }
                    OwnedFd::from(w)
                }
            }
            Redirect::Fd(fd) => fd,
        };
        fds.push(fd);
    }
    let [a, b, c]: [OwnedFd; 3] = fds.try_into().expect("three stdio fds");
    Ok(([a, b, c], pipes))
}
