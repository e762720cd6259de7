//! The async API (cargo feature `tokio`): [`Command`], [`Child`],
//! [`Pool`] and [`Session`], mirroring the sync [`crate::Command`],
//! [`crate::Child`], [`crate::Pool`] and [`crate::Session`].
//!
//! Nothing here blocks the executor while a sandbox runs: a sandbox is
//! supervised by its helper process (`hutch __supervise`), and a [`Child`]
//! waits on the helper's control socket and on a pidfd of the helper,
//! both registered with the runtime's reactor ([`::tokio::io::unix::AsyncFd`]);
//! the workload's piped stdin, stdout and stderr are tokio pipes. No
//! thread is started per sandbox. Starting one is a `posix_spawn` of the
//! helper (or, from a [`Pool`], one message to a ready sandbox).
//!
//! **Cancellation.** Dropping a [`Child`] that has not finished (or a
//! future that owns one: [`Command::status`], [`Command::output`],
//! [`PoolCommand::status`], [`PoolCommand::output`], e.g. under
//! [`::tokio::time::timeout`]) closes the helper's control socket; the
//! helper then kills the sandbox (SIGKILL to its pid 1, `cgroup.kill`),
//! removes its cgroup leaf and exits, and a task on the runtime reaps it.
//! Nothing is left behind: no process, mount, cgroup or socket.
//!
//! ```no_run
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! # rt.block_on(async {
//! let out = hutch::tokio::Command::new("echo")
//!     .arg("hello")
//!     .output()
//!     .await?;
//! assert!(out.report.success());
//! assert_eq!(out.stdout, b"hello\n");
//! # Ok::<(), hutch::SpawnError>(())
//! # }).unwrap();
//! ```

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{AsyncReadExt, Interest};
use ::tokio::net::unix::pipe;

use crate::api::{Output, Redirect, SpawnError};
use crate::launch::ExitReport;
use crate::spec::Spec;
use crate::sys::reactor::async_fd;

/// How long [`Child::kill`] waits for the helper to say it is killing the
/// sandbox before it kills the helper itself.
const KILL_ANSWER: Duration = Duration::from_secs(2);

/// A sandboxed command, built like [`crate::Command`]; [`Command::spawn`]
/// gives an async [`Child`].
pub struct Command {
    sync: crate::Command,
}

/// Builder methods that only pass through to the sync builder.
macro_rules! builder {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*); )*) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, $($arg: $ty),*) -> &mut Self {
                self.sync.$name($($arg),*);
                self
            }
        )*
    };
}

impl Command {
    /// `program` under the embedded default profile ([`crate::Command::new`]).
    pub fn new(program: impl AsRef<str>) -> Command {
        Command {
            sync: crate::Command::new(program),
        }
    }

    /// Run exactly this Spec.
    pub fn from_spec(spec: Spec) -> Command {
        Command {
            sync: crate::Command::from_spec(spec),
        }
    }

    builder! {
        fn arg(arg: impl AsRef<str>);
        fn env(key: impl Into<String>, value: impl Into<String>);
        fn env_remove(key: &str);
        /// [`crate::Command::workspace`].
        fn workspace(dir: impl AsRef<Path>);
        /// [`crate::Command::changes`].
        fn changes(dir: impl AsRef<Path>);
        fn current_dir(dir: impl AsRef<Path>);
        fn ro_bind(src: impl AsRef<Path>, dest: impl AsRef<Path>);
        fn bind(src: impl AsRef<Path>, dest: impl AsRef<Path>);
        fn tmpfs(dest: impl AsRef<Path>);
        fn share_net();
        /// Wall-clock limit (the whole tree is killed; status 124).
        fn timeout(limit: Duration);
        fn no_timeout();
        fn output_limit(bytes: u64);
        fn uid(uid: u32);
        fn gid(gid: u32);
        fn status_file(path: impl AsRef<Path>);
        fn notify_changes(on: bool);
        /// [`crate::Command::hutch_binary`].
        fn hutch_binary(path: impl AsRef<Path>);
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<str>>(&mut self, args: I) -> &mut Self {
        self.sync.args(args);
        self
    }

    pub fn stdin(&mut self, s: impl Into<Stdio>) -> &mut Self {
        self.sync.stdin(s);
        self
    }

    pub fn stdout(&mut self, s: impl Into<Stdio>) -> &mut Self {
        self.sync.stdout(s);
        self
    }

    pub fn stderr(&mut self, s: impl Into<Stdio>) -> &mut Self {
        self.sync.stderr(s);
        self
    }

    /// The Spec this command runs.
    pub fn as_spec(&self) -> &Spec {
        self.sync.as_spec()
    }

    /// Mutable access to the Spec.
    pub fn spec_mut(&mut self) -> &mut Spec {
        self.sync.spec_mut()
    }

    /// Validate and start the sandbox (from within a tokio runtime).
    pub fn spawn(&mut self) -> Result<Child, SpawnError> {
        Child::from_sync(self.sync.spawn()?)
    }

    /// Spawn and wait; dropping the future kills the sandbox.
    pub async fn status(&mut self) -> Result<ExitReport, SpawnError> {
        self.spawn()?.wait().await
    }

    /// Spawn with stdout and stderr piped (unless set) and stdin from
    /// /dev/null (unless set), and collect them; dropping the future kills
    /// the sandbox.
    pub async fn output(&mut self) -> Result<Output, SpawnError> {
        self.sync.set_output_stdio();
        self.spawn()?.wait_with_output().await
    }
}

impl From<crate::Command> for Command {
    fn from(sync: crate::Command) -> Command {
        Command { sync }
    }
}

/// A running sandbox, awaited without blocking the executor. Dropping it
/// before it finished kills the sandbox (see the module docs).
pub struct Child {
    /// The sync child (its helper and its link); None once its result is
    /// taken and its helper reaped (or left to its pool to reap).
    sync: Option<crate::Child>,
    /// The helper's control socket (a dup of the link's), for readiness.
    control: Option<AsyncFd<OwnedFd>>,
    /// A pidfd of the helper: readable once it has exited.
    pidfd: Option<AsyncFd<OwnedFd>>,
    report: Option<ExitReport>,
    /// The workload's stdin, when piped.
    pub stdin: Option<pipe::Sender>,
    /// The workload's stdout, when piped.
    pub stdout: Option<pipe::Receiver>,
    /// The workload's stderr, when piped.
    pub stderr: Option<pipe::Receiver>,
}

fn control_of(c: &Option<AsyncFd<OwnedFd>>) -> io::Result<&AsyncFd<OwnedFd>> {
    c.as_ref()
        .ok_or_else(|| io::Error::other("the sandbox's control socket is closed"))
}

fn io_err(e: crate::sys::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Child {
    fn from_sync(mut sync: crate::Child) -> Result<Child, SpawnError> {
        let stdin = sync.stdin().map(|p| pipe::Sender::from_owned_fd(p.into()));
        let stdout = sync
            .stdout()
            .map(|p| pipe::Receiver::from_owned_fd(p.into()));
        let stderr = sync
            .stderr()
            .map(|p| pipe::Receiver::from_owned_fd(p.into()));
        let pid = sync.inner.process.id() as libc::pid_t;
        let pidfd = crate::sys::raw::pidfd_open(pid).map_err(io_err)?;
        let control = sync.inner.link.socket().try_clone()?;
        control.set_nonblocking(true)?;
        Ok(Child {
            control: Some(async_fd(OwnedFd::from(control), Interest::READABLE)?),
            pidfd: Some(async_fd(pidfd, Interest::READABLE)?),
            sync: Some(sync),
            report: None,
            stdin: stdin.transpose()?,
            stdout: stdout.transpose()?,
            stderr: stderr.transpose()?,
        })
    }

    /// The supervisor's pid (the helper process), until it is reaped.
    pub fn id(&self) -> Option<u32> {
        self.sync.as_ref().map(|c| c.id())
    }

    /// Read the control socket until `done` (or the helper answered: its
    /// report, a failure, or its end closed).
    async fn read_until(
        &mut self,
        done: impl Fn(&crate::launch::helper::Link) -> bool,
    ) -> io::Result<()> {
        loop {
            let Some(c) = self.sync.as_mut() else {
                return Ok(());
            };
            let link = &mut c.inner.link;
            if link.answered() || done(link) {
                return Ok(());
            }
            let mut ready = control_of(&self.control)?.readable().await?;
            if link.pump_nonblocking() {
                ready.clear_ready();
            }
        }
    }

    /// The helper answered: its result. A pooled helper is left to its
    /// pool to reap; any other is awaited (its pidfd) and reaped here.
    async fn collect(&mut self) -> Result<(), SpawnError> {
        let Some(mut c) = self.sync.take() else {
            return Ok(());
        };
        let result = if c.claim.is_some() {
            c.pooled_result()
        } else {
            let exited = match &self.pidfd {
                Some(p) => p.readable().await.map(drop),
                None => Ok(()),
            };
            let status = exited.and_then(|()| c.inner.process.wait());
            c.inner
                .link
                .take_result(|| match status {
                    Ok(s) => format!("ended without a report ({s})"),
                    Err(e) => format!("cannot be waited for: {e}"),
                })
                .map(|f| f.report)
                .map_err(SpawnError::from)
        };
        self.control = None;
        self.pidfd = None;
        self.report = Some(result?);
        Ok(())
    }

    fn taken_report(&self) -> Result<ExitReport, SpawnError> {
        self.report.clone().ok_or_else(|| {
            SpawnError::Io(io::Error::other(
                "the sandbox ended without a report (an earlier wait failed)",
            ))
        })
    }

    /// Wait for the sandbox to end and return its exit report.
    pub async fn wait(&mut self) -> Result<ExitReport, SpawnError> {
        // Like std: the workload's stdin is closed so it cannot wait on us.
        drop(self.stdin.take());
        self.read_until(|_| false).await?;
        self.collect().await?;
        self.taken_report()
    }

    /// The exit report if the sandbox has ended (and, unless pooled, its
    /// supervisor has exited), without waiting.
    pub fn try_wait(&mut self) -> Result<Option<ExitReport>, SpawnError> {
        let Some(c) = self.sync.as_mut() else {
            return self.taken_report().map(Some);
        };
        if !c.inner.link.try_answer() {
            return Ok(None);
        }
        if c.claim.is_none() && c.inner.process.try_wait()?.is_none() {
            return Ok(None);
        }
        let mut c = self.sync.take().expect("checked above");
        let report = if c.claim.is_some() {
            c.pooled_result()?
        } else {
            c.inner
                .link
                .take_result(|| "ended without a report".into())?
                .report
        };
        self.control = None;
        self.pidfd = None;
        self.report = Some(report);
        self.taken_report().map(Some)
    }

    /// Ask the supervisor to kill the sandbox, without waiting.
    pub fn start_kill(&mut self) -> io::Result<()> {
        match self.sync.as_mut() {
            Some(c) => c.inner.link.start_kill(),
            None => Ok(()),
        }
    }

    /// End the sandbox through its supervisor (every process in it killed,
    /// its cgroup leaf removed; the report says
    /// [`crate::Outcome::Killed`]) and wait until it said so; the
    /// supervisor itself is killed only if it does not answer in time.
    pub async fn kill(&mut self) -> io::Result<()> {
        if self.sync.is_none() {
            return Ok(());
        }
        self.start_kill()?;
        let said = ::tokio::time::timeout(KILL_ANSWER, self.read_until(|l| l.killing())).await;
        match said {
            Ok(r) => r,
            Err(_) => match self.sync.as_mut() {
                Some(c) => c.inner.process.kill(),
                None => Ok(()),
            },
        }
    }

    /// Read piped stdout and stderr to their end (both at once), then wait.
    pub async fn wait_with_output(mut self) -> Result<Output, SpawnError> {
        drop(self.stdin.take());
        let read = |p: Option<pipe::Receiver>| async move {
            let mut buf = Vec::new();
            if let Some(mut p) = p {
                p.read_to_end(&mut buf).await?;
            }
            Ok::<Vec<u8>, io::Error>(buf)
        };
        let (out, err) = (self.stdout.take(), self.stderr.take());
        let (stdout, stderr) = ::tokio::try_join!(read(out), read(err))?;
        let report = self.wait().await?;
        Ok(Output {
            report,
            stdout,
            stderr,
        })
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let Some(c) = self.sync.take() else {
            return;
        };
        self.control = None;
        // The helper sees its control socket end (EOF) and takes it that
        // nobody waits for the sandbox: it kills it, cleans up and exits.
        let _ = c.inner.link.socket().shutdown(std::net::Shutdown::Both);
        if c.claim.is_some() {
            // Its pool reaps the helper (crate::Child's drop).
            return;
        }
        // Close our end now (the sync child's drop closes the link; std's
        // Child neither kills nor waits) and reap the helper by its pid
        // once it is gone, without blocking this thread.
        let pid = c.inner.process.id() as libc::pid_t;
        drop(c);
        let reap = move || {
            let _ = crate::sys::raw::waitpid(pid, 0);
        };
        match (::tokio::runtime::Handle::try_current(), self.pidfd.take()) {
            (Ok(rt), Some(pidfd)) => {
                rt.spawn(async move {
                    let _ = pidfd.readable().await;
                    reap();
                });
            }
            _ => {
                let _ = std::thread::Builder::new()
                    .name("hutch-reap".into())
                    .spawn(reap);
            }
        }
    }
}

/// Warm sandboxes of one Spec ([`crate::Pool`]), from async code.
///
/// ```no_run
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # rt.block_on(async {
/// let pool = hutch::tokio::Pool::new(hutch::spec::default_profile(), 2)?;
/// let report = pool.command(["true"]).status().await?;
/// assert!(report.success());
/// # Ok::<(), hutch::SpawnError>(())
/// # }).unwrap();
/// ```
pub struct Pool {
    sync: crate::Pool,
}

impl Pool {
    /// [`crate::Pool::new`].
    pub fn new(spec: Spec, size: usize) -> Result<Pool, SpawnError> {
        Ok(Pool {
            sync: crate::Pool::new(spec, size)?,
        })
    }

    /// [`crate::Pool::with_binary`].
    pub fn with_binary(
        spec: Spec,
        size: usize,
        binary: impl AsRef<Path>,
    ) -> Result<Pool, SpawnError> {
        Ok(Pool {
            sync: crate::Pool::with_binary(spec, size, binary)?,
        })
    }

    /// A command to run in one of the pool's sandboxes.
    pub fn command<I: IntoIterator<Item = S>, S: AsRef<str>>(&self, argv: I) -> PoolCommand<'_> {
        PoolCommand {
            sync: self.sync.command(argv),
        }
    }

    pub fn resize(&self, size: usize) {
        self.sync.resize(size);
    }

    pub fn status(&self) -> crate::launch::pool::PoolStatus {
        self.sync.status()
    }

    /// Wait (up to `timeout`) until `n` sandboxes are ready; whether they
    /// are.
    pub async fn wait_ready(&self, n: usize, timeout: Duration) -> bool {
        let deadline = ::tokio::time::Instant::now() + timeout;
        loop {
            if self.sync.status().ready >= n {
                return true;
            }
            if ::tokio::time::Instant::now() >= deadline {
                return false;
            }
            ::tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The sync pool.
    pub fn as_sync(&self) -> &crate::Pool {
        &self.sync
    }
}

/// A command for a [`Pool`], built like [`crate::PoolCommand`].
pub struct PoolCommand<'a> {
    sync: crate::PoolCommand<'a>,
}

impl PoolCommand<'_> {
    builder! {
        fn arg(arg: impl AsRef<str>);
        fn env(key: impl Into<String>, value: impl Into<String>);
        fn env_remove(key: &str);
        fn current_dir(dir: impl AsRef<Path>);
        fn timeout(limit: Duration);
        fn no_timeout();
        fn output_limit(bytes: u64);
        fn status_file(path: impl AsRef<Path>);
        fn notify_changes(on: bool);
        fn stdin(r: impl Into<Redirect>);
        fn stdout(r: impl Into<Redirect>);
        fn stderr(r: impl Into<Redirect>);
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<str>>(&mut self, args: I) -> &mut Self {
        self.sync.args(args);
        self
    }

    /// Claim a warm sandbox and start the command in it (cold when the
    /// pool has none; the report says which).
    pub fn spawn(&mut self) -> Result<Child, SpawnError> {
        Child::from_sync(self.sync.spawn()?)
    }

    /// Spawn and wait; dropping the future kills the sandbox.
    pub async fn status(&mut self) -> Result<ExitReport, SpawnError> {
        self.spawn()?.wait().await
    }

    /// [`crate::PoolCommand::output`], async; dropping the future kills the
    /// sandbox.
    pub async fn output(&mut self) -> Result<Output, SpawnError> {
        self.sync.set_output_stdio();
        self.spawn()?.wait_with_output().await
    }
}

/// A session ([`crate::Session`]) whose commands are awaited.
///
/// A session command holds the session's lock and writes its records
/// (`session.json`, the audit) around the sandbox, so [`Session::run`]
/// runs [`crate::Session::run`] on tokio's blocking pool (one thread per
/// running command; a session runs one command at a time). Dropping the
/// future kills the command's sandbox, found in the runtime registry by
/// the session's label, as `hutch kill` would; the command then ends with
/// a report saying `killed` in the session's audit, and the lock is free.
///
/// ```no_run
/// # async fn f(state: &hutch::StateDir) -> Result<(), Box<dyn std::error::Error>> {
/// let session = hutch::tokio::Session::new(state.open_session("0123abcd")?);
/// let mut spec = session.base_spec();
/// spec.command = vec!["make".into(), "test".into()];
/// let record = session.run(spec).await?;
/// assert!(record.report.success());
/// # Ok(()) }
/// ```
pub struct Session {
    inner: std::sync::Arc<std::sync::Mutex<crate::Session>>,
    id: String,
    /// The session's defaults when it was opened (read without waiting
    /// for a running command).
    base: Spec,
}

impl Session {
    pub fn new(session: crate::Session) -> Session {
        Session {
            id: session.id().to_string(),
            base: session.base_spec(),
            inner: std::sync::Arc::new(std::sync::Mutex::new(session)),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// [`crate::Session::base_spec`] when the session was opened: its
    /// defaults (never waits for a running command).
    pub fn base_spec(&self) -> Spec {
        self.base.clone()
    }

    /// [`crate::Session::run`], awaited; dropping the future kills the
    /// command's sandbox.
    pub async fn run(
        &self,
        base: Spec,
    ) -> Result<crate::workspace::RunRecord, crate::workspace::WorkspaceError> {
        let inner = std::sync::Arc::clone(&self.inner);
        let task = ::tokio::task::spawn_blocking(move || {
            inner.lock().unwrap_or_else(|p| p.into_inner()).run(base)
        });
        let mut guard = KillOnDrop {
            session: self.id.clone(),
            task: Some(task),
        };
        let task = guard.task.as_mut().expect("just set");
        let result = task.await;
        guard.task = None;
        result.map_err(|e| crate::workspace::WorkspaceError::CommandThread(Box::new(e)))?
    }

    /// [`crate::Session::snapshot`], awaited (on a blocking thread; waits
    /// for a command of this handle to end).
    pub async fn snapshot(
        &self,
        name: Option<String>,
    ) -> Result<crate::workspace::SnapshotInfo, crate::workspace::WorkspaceError> {
        let inner = std::sync::Arc::clone(&self.inner);
        ::tokio::task::spawn_blocking(move || {
            inner
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .snapshot(name.as_deref())
        })
        .await
        .map_err(|e| crate::workspace::WorkspaceError::CommandThread(Box::new(e)))?
    }

    /// [`crate::Session::rollback`], awaited (on a blocking thread).
    pub async fn rollback(
        &self,
        snapshot: String,
    ) -> Result<crate::workspace::SnapshotInfo, crate::workspace::WorkspaceError> {
        let inner = std::sync::Arc::clone(&self.inner);
        ::tokio::task::spawn_blocking(move || {
            inner
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .rollback(&snapshot)
        })
        .await
        .map_err(|e| crate::workspace::WorkspaceError::CommandThread(Box::new(e)))?
    }

    /// The sync session back, once no command runs.
    pub fn into_sync(self) -> Option<crate::Session> {
        std::sync::Arc::into_inner(self.inner)
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Kills the sandbox of a session command whose future was dropped.
struct KillOnDrop {
    session: String,
    /// The command's thread, while it runs.
    task: Option<
        ::tokio::task::JoinHandle<
            Result<crate::workspace::RunRecord, crate::workspace::WorkspaceError>,
        >,
    >,
}

/// The session's running sandboxes, killed; whether any was found.
fn kill_session_sandboxes(session: &str) -> bool {
    let Ok(entries) = crate::registry::list() else {
        return false;
    };
    let mut found = false;
    for e in entries
        .iter()
        .filter(|e| e.record.session() == Some(session))
    {
        found = true;
        let _ = crate::registry::kill(e, "hutch::tokio (the command's future was dropped)");
    }
    found
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let session = self.session.clone();
        // The sandbox may not be registered yet: look until the command's
        // thread has returned.
        let until_done = async move {
            while !task.is_finished() {
                kill_session_sandboxes(&session);
                ::tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        match ::tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(until_done)),
            Err(_) => {
                kill_session_sandboxes(&self.session);
            }
        }
    }
}
