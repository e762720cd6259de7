//! The POSIX-platform hooks of the runtime spec (`config.md`, "POSIX-
//! platform Hooks"): each hook runs with exactly its own `env`, `args[0]`
//! as its argv0, the container's state JSON on stdin, and is killed after
//! `timeout` seconds.
//!
//! - `prestart` (deprecated) and `createRuntime`: in the runtime's
//!   namespaces, once the container's namespaces exist and before its
//!   root is built; a failure fails `create` (the container is ended);
//! - `createContainer`: in the container's namespaces (its user namespace
//!   first, its mount namespace last), after its root is built and before
//!   `create` returns; a failure fails `create`;
//! - `startContainer`: the same namespaces, at `start` before the workload
//!   runs; a failure fails `start` (the container is killed);
//! - `poststart` (after `start`) and `poststop` (at `delete`, once the
//!   container's processes are gone): runtime namespaces; a failure is
//!   logged and the next hook runs.
//!
//! A hook in the container's namespaces is this executable again
//! (`hutch-oci __hook-exec PID PATH ARGV...`): it opens PATH in the
//! runtime's mount namespace, joins the container's, and executes the open
//! file, so the path means what the spec says (the runtime namespace) and
//! the hook sees the container's filesystem.

use std::ffi::CString;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::OciError;
use super::config::{Hook, Hooks, State};

/// The hidden subcommand that runs a hook in a container's namespaces.
pub const EXEC_IN: &str = "__hook-exec";
/// The longest timeout accepted (a day), so that a typo never hangs an
/// engine for years.
pub const MAX_TIMEOUT: i64 = 86_400;

/// When a list of hooks runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Prestart,
    CreateRuntime,
    CreateContainer,
    StartContainer,
    Poststart,
    Poststop,
}

impl Phase {
    pub fn key(self) -> &'static str {
        match self {
            Phase::Prestart => "prestart",
            Phase::CreateRuntime => "createRuntime",
            Phase::CreateContainer => "createContainer",
            Phase::StartContainer => "startContainer",
            Phase::Poststart => "poststart",
            Phase::Poststop => "poststop",
        }
    }

    /// The hooks of this phase in `h`.
    pub fn of(self, h: &Hooks) -> &[Hook] {
        match self {
            Phase::Prestart => &h.prestart,
            Phase::CreateRuntime => &h.create_runtime,
            Phase::CreateContainer => &h.create_container,
            Phase::StartContainer => &h.start_container,
            Phase::Poststart => &h.poststart,
            Phase::Poststop => &h.poststop,
        }
    }

    /// Whether the hook runs in the container's namespaces.
    pub fn in_container(self) -> bool {
        matches!(self, Phase::CreateContainer | Phase::StartContainer)
    }

    /// Whether a failure is only logged (the lifecycle goes on).
    pub fn failure_is_logged(self) -> bool {
        matches!(self, Phase::Poststart | Phase::Poststop)
    }

    const ALL: [Phase; 6] = [
        Phase::Prestart,
        Phase::CreateRuntime,
        Phase::CreateContainer,
        Phase::StartContainer,
        Phase::Poststart,
        Phase::Poststop,
    ];
}

fn err(key: String, message: impl Into<String>) -> OciError {
    OciError::Config {
        key,
        message: message.into(),
    }
}

/// Check every hook of the config (at `create`, before anything runs).
pub fn validate(h: &Hooks) -> Result<(), OciError> {
    for phase in Phase::ALL {
        for (i, hook) in phase.of(h).iter().enumerate() {
            let at = format!("hooks.{}[{i}]", phase.key());
            let p = Path::new(&hook.path);
            if !p.is_absolute() || hook.path.len() > 4096 || hook.path.contains('\0') {
                return Err(err(format!("{at}.path"), "must be an absolute path"));
            }
            if let Some(t) = hook.timeout
                && !(1..=MAX_TIMEOUT).contains(&t)
            {
                return Err(err(
                    format!("{at}.timeout"),
                    format!("must be 1 to {MAX_TIMEOUT} seconds"),
                ));
            }
            for (j, kv) in hook.env.iter().enumerate() {
                if !kv.contains('=') || kv.starts_with('=') || kv.contains('\0') {
                    return Err(err(format!("{at}.env[{j}]"), "expected NAME=VALUE"));
                }
            }
            if hook.args.iter().any(|a| a.contains('\0')) {
                return Err(err(format!("{at}.args"), "an argument holds a NUL byte"));
            }
        }
    }
    Ok(())
}

/// Run the hooks of `phase` in order with `state` on stdin; `container`
/// is hutch init's pid (whose namespaces in-container hooks join). The
/// first failure of a fatal phase is the error; in a logged phase every
/// failure is written to stderr and the next hook runs.
pub fn run(
    phase: Phase,
    hooks: &Hooks,
    state: &State,
    container: Option<i32>,
) -> Result<(), OciError> {
    let json = serde_json::to_vec(state).expect("state serializes");
    for (i, hook) in phase.of(hooks).iter().enumerate() {
        let at = format!("hooks.{}[{i}]", phase.key());
        let result = run_one(phase, hook, &json, container);
        match result {
            Ok(()) => {}
            Err(why) if phase.failure_is_logged() => {
                eprintln!("hutch-oci: warning: {at} ({}): {why}", hook.path);
            }
            Err(why) => {
                return Err(OciError::Hook {
                    key: at,
                    path: hook.path.clone(),
                    why,
                });
            }
        }
    }
    Ok(())
}

fn run_one(phase: Phase, hook: &Hook, state: &[u8], container: Option<i32>) -> Result<(), String> {
    let argv0 = hook
        .args
        .first()
        .cloned()
        .unwrap_or_else(|| hook.path.clone());
    let rest = hook.args.iter().skip(1);
    let mut cmd = if phase.in_container() {
        let pid = container.ok_or("no container process to join")?;
        let exe = std::env::current_exe().map_err(|e| format!("finding hutch-oci itself: {e}"))?;
        let mut c = Command::new(exe);
        c.arg(EXEC_IN)
            .arg(pid.to_string())
            .arg(&hook.path)
            .arg(&argv0)
            .args(rest);
        c
    } else {
        let mut c = Command::new(&hook.path);
        c.arg0(&argv0).args(rest);
        c
    };
    cmd.env_clear();
    for kv in &hook.env {
        if let Some((k, v)) = kv.split_once('=') {
            cmd.env(k, v);
        }
    }
    // Its output goes where hutch-oci's errors go (the engine's log).
    let stderr = || {
        std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null())
    };
    cmd.stdin(Stdio::piped()).stdout(stderr()).stderr(stderr());
    let mut child = cmd.spawn().map_err(|e| format!("cannot execute: {e}"))?;
    let pidfd = crate::sys::raw::pidfd_open(child.id() as i32)
        .map_err(|e| format!("pidfd_open: {}", e.desc()));
    let stdin: Option<OwnedFd> = child.stdin.take().map(OwnedFd::from);
    let timeout = hook.timeout.map(|t| Duration::from_secs(t as u64));
    let outcome = pidfd.and_then(|pidfd| feed_and_wait(&pidfd, stdin, state, timeout));
    if outcome.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| format!("waitpid: {e}"))?;
    outcome?;
    if status.success() {
        return Ok(());
    }
    Err(
        match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(c), _) => format!("exited with status {c}"),
            (_, Some(s)) => format!("killed by signal {s}"),
            _ => "failed".into(),
        },
    )
}

/// Write the state to the hook's stdin (never blocking on a hook that does
/// not read it) and wait for the hook to exit, at most `timeout`.
fn feed_and_wait(
    pidfd: &OwnedFd,
    stdin: Option<OwnedFd>,
    state: &[u8],
    timeout: Option<Duration>,
) -> Result<(), String> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut stdin = stdin;
    if let Some(fd) = &stdin {
        let fl = rustix::fs::fcntl_getfl(fd).map_err(|e| format!("fcntl: {e}"))?;
        rustix::fs::fcntl_setfl(fd, fl | rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| format!("fcntl: {e}"))?;
    }
    let mut written = 0;
    loop {
        let mut fds = vec![PollFd::new(pidfd, PollFlags::IN)];
        if let Some(fd) = &stdin {
            fds.push(PollFd::new(fd, PollFlags::OUT));
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Err(format!(
                "timed out after {}s (killed)",
                timeout.unwrap_or_default().as_secs()
            ));
        }
        let ts = left.map(|l| Timespec {
            tv_sec: l.as_secs() as _,
            tv_nsec: l.subsec_nanos() as _,
        });
        match poll(&mut fds, ts.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("poll: {e}")),
        }
        if fds[0].revents().contains(PollFlags::IN) {
            return Ok(());
        }
        let ready = fds.get(1).map(|f| !f.revents().is_empty()).unwrap_or(false);
        if ready && let Some(fd) = &stdin {
            match rustix::io::write(fd, &state[written..]) {
                Ok(n) => written += n,
                Err(rustix::io::Errno::AGAIN) => {}
                // The hook closed its stdin: it does not want the state.
                Err(_) => written = state.len(),
            }
            if written >= state.len() {
                // EOF for the hook.
                stdin = None;
            }
        }
    }
}

/// `hutch-oci __hook-exec PID PATH ARGV0 ARGS...`: open PATH here, join
/// the namespaces of PID that differ from ours, and execute the open file.
/// Returns only on failure (the exit code).
pub fn exec_in(args: &[String]) -> i32 {
    let fail = |what: &str| -> i32 {
        eprintln!("hutch-oci: hook: {what}");
        127
    };
    let [pid, path, argv0, rest @ ..] = args else {
        return fail("usage: __hook-exec PID PATH ARGV0 [ARGS...]");
    };
    // Not close-on-exec: a script's interpreter opens it as /dev/fd/N.
    let file = match std::fs::File::open(path) {
        Ok(f) => OwnedFd::from(f),
        Err(e) => return fail(&format!("open({path}) => {e}")),
    };
    if let Err(e) = rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty()) {
        return fail(&format!("fcntl({path}) => {e}"));
    }
    // Every namespace of the container that is not ours: the user
    // namespace first (it owns the others), the mount namespace last (it
    // changes what /proc/PID means). Joining its pid namespace puts the
    // hook's children in it, as they would be under runc's init.
    let ino = |p: String| {
        std::fs::metadata(p)
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
    };
    let mut joins = Vec::new();
    for (kind, flag) in [
        ("user", nix::sched::CloneFlags::CLONE_NEWUSER),
        ("ipc", nix::sched::CloneFlags::CLONE_NEWIPC),
        ("uts", nix::sched::CloneFlags::CLONE_NEWUTS),
        ("net", nix::sched::CloneFlags::CLONE_NEWNET),
        ("pid", nix::sched::CloneFlags::CLONE_NEWPID),
        ("cgroup", nix::sched::CloneFlags::CLONE_NEWCGROUP),
        ("mnt", nix::sched::CloneFlags::CLONE_NEWNS),
    ] {
        let theirs = format!("/proc/{pid}/ns/{kind}");
        let their_ino = match std::fs::metadata(&theirs) {
            Ok(m) => std::os::unix::fs::MetadataExt::ino(&m),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // hutch init is not dumpable: only a privileged runtime may
                // enter its namespaces (as for `exec`).
                return fail(&format!(
                    "stat({theirs}) => EACCES: the container's namespaces are open only to a root hutch-oci (hutch init is not dumpable); an unprivileged runtime cannot run createContainer/startContainer hooks"
                ));
            }
            Err(e) => return fail(&format!("stat({theirs}) => {e}: is the container running?")),
        };
        if Some(their_ino) == ino(format!("/proc/self/ns/{kind}")) {
            continue;
        }
        match std::fs::File::open(&theirs) {
            Ok(f) => joins.push((theirs, flag, f)),
            Err(e) => return fail(&format!("open({theirs}) => {e}")),
        }
    }
    let join = |(path, flag, fd): &(String, nix::sched::CloneFlags, std::fs::File)| {
        nix::sched::setns(fd.as_fd(), *flag).map_err(|e| format!("setns({path}) => {e}"))
    };
    let (mnt, others): (Vec<_>, Vec<_>) = joins
        .iter()
        .partition(|(_, f, _)| *f == nix::sched::CloneFlags::CLONE_NEWNS);
    for j in others {
        if let Err(e) = join(j) {
            return fail(&e);
        }
    }
    // setns(pid) takes only our children into the container's pid
    // namespace: the hook runs as one (and then sees itself in the
    // container's /proc, which a script's /dev/fd/N needs). This process
    // waits and exits with its status; the hook dies with it.
    match crate::sys::fork_single_threaded() {
        Ok(crate::sys::Forked::Child) => {
            if crate::sys::set_pdeathsig(libc::SIGKILL).is_err() {
                return fail("prctl(PR_SET_PDEATHSIG) failed");
            }
            // The mount namespace last: it changes what /proc means.
            for j in mnt {
                if let Err(e) = join(j) {
                    return fail(&e);
                }
            }
            if let Err(e) = std::env::set_current_dir("/") {
                return fail(&format!("chdir(/) => {e}"));
            }
        }
        Ok(crate::sys::Forked::Parent { pid, .. }) => {
            return match crate::sys::raw::waitpid(pid, 0) {
                Ok(Some((_, s))) if libc::WIFEXITED(s) => libc::WEXITSTATUS(s),
                Ok(Some((_, s))) if libc::WIFSIGNALED(s) => 128 + libc::WTERMSIG(s),
                _ => fail("waitpid failed"),
            };
        }
        Err(e) => return fail(&e.to_string()),
    }
    let cstr = |s: &str| CString::new(s).unwrap_or_default();
    let argv: Vec<CString> = std::iter::once(argv0.as_str())
        .chain(rest.iter().map(String::as_str))
        .map(cstr)
        .collect();
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_string().ok()?;
            kv.push('=');
            kv.push_str(&v.into_string().ok()?);
            CString::new(kv).ok()
        })
        .collect();
    let Err(e) = nix::unistd::fexecve(file.as_fd(), &argv, &env);
    let _ = std::io::stderr().flush();
    fail(&format!("execve({path}) in the container => {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hooks(json: &str) -> Hooks {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn bad_hooks_are_refused_by_key() {
        for (json, key) in [
            (
                r#"{"prestart":[{"path":"rel/hook"}]}"#,
                "hooks.prestart[0].path",
            ),
            (
                r#"{"poststop":[{"path":"/bin/true"},{"path":"/x","timeout":0}]}"#,
                "hooks.poststop[1].timeout",
            ),
            (
                r#"{"createRuntime":[{"path":"/x","timeout":99999999}]}"#,
                "hooks.createRuntime[0].timeout",
            ),
            (
                r#"{"startContainer":[{"path":"/x","env":["NOEQ"]}]}"#,
                "hooks.startContainer[0].env[0]",
            ),
        ] {
            let e = validate(&hooks(json)).unwrap_err().to_string();
            assert!(e.contains(key), "{json}: {e}");
        }
        validate(&hooks(
            r#"{"createContainer":[{"path":"/bin/sh","args":["sh","-c","true"],"env":["A=b"],"timeout":5}]}"#,
        ))
        .unwrap();
    }

    fn state() -> State {
        State {
            oci_version: "1.2.0".into(),
            id: "c1".into(),
            status: "creating".into(),
            pid: Some(1),
            bundle: "/b".into(),
            annotations: Default::default(),
        }
    }

    #[test]
    fn a_runtime_hook_gets_its_env_args_and_the_state_and_failures_count() {
        let dir = std::env::temp_dir().join(format!("hutch-hook-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out");
        let h = hooks(&format!(
            r#"{{"createRuntime":[{{"path":"/bin/sh","args":["myhook","-c","cat > {o}; echo \"$0 $X $HOME\" >> {o}"],"env":["X=1"]}}],
                "poststart":[{{"path":"/bin/sh","args":["sh","-c","exit 3"]}}],
                "prestart":[{{"path":"/bin/sh","args":["sh","-c","exec sleep 5"],"timeout":1}}]}}"#,
            o = out.display()
        ));
        run(Phase::CreateRuntime, &h, &state(), None).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        let (json, line) = text.split_once('}').unwrap();
        let got: State = serde_json::from_str(&format!("{json}}}")).unwrap();
        assert_eq!(got, state());
        assert_eq!(line.trim(), "myhook 1", "argv0 and exactly the hook's env");
        // poststart: logged, not fatal.
        run(Phase::Poststart, &h, &state(), None).unwrap();
        // A timeout kills the hook and fails the phase.
        let start = Instant::now();
        let e = run(Phase::Prestart, &h, &state(), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("hooks.prestart[0]") && e.contains("timed out"),
            "{e}"
        );
        assert!(start.elapsed() < Duration::from_secs(4));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
