//! The POSIX-platform hooks of the runtime spec (`config.md`, "POSIX-
//! platform Hooks"): each hook runs with exactly its own `env`, `args[0]`
//! as its argv0, the container's state JSON on stdin, and is killed after
//! `timeout` seconds.
//!
//! - `prestart` (deprecated) and `createRuntime`: in the runtime's
//!   namespaces, once the container's namespaces exist and before its
//!   root is built; a failure fails `create` (the container is ended);
//! - `createContainer`: in the container's namespaces (its user namespace
//!   first, its mount namespace last), after its root is built and BEFORE
//!   `pivot_root` (hutch init pauses there, [`crate::launch::create`]'s
//!   `before_pivot`): `/` in that mount namespace is still the host's, so
//!   the hook's file, its `#!` interpreter, its ELF loader and libraries
//!   are the host's, as under runc; the container's root (with its mounts)
//!   is at the config's `root.path`. With hutch init's credentials (the
//!   runtime's, inside the container's user namespace if it has one). A
//!   failure fails `create`;
//! - `startContainer`: the same namespaces, at `start` before the workload
//!   runs, in the pivoted root: PATH resolves in the container (the spec's
//!   "container namespace") and whatever runs is the image's, so the hook
//!   first becomes the container process ([`Credentials`]: its user,
//!   groups, capability sets, no-new-privs); a failure fails `start` (the
//!   container is killed);
//! - `poststart` (after `start`) and `poststop` (at `delete`, once the
//!   container's processes are gone): runtime namespaces; a failure is
//!   logged and the next hook runs.
//!
//! A hook in the container's namespaces is this executable again
//! (`hutch-oci __hook-exec PID CREDS PATH ARGV...`), non-dumpable before
//! it opens or joins anything (a process of the container can neither
//! ptrace it nor open its `/proc/PID/exe`, cf. CVE-2019-5736; execve
//! resets that for the hook itself). Without CREDS (`-`, createContainer)
//! it opens PATH in the runtime's mount namespace, joins the container's
//! and executes the open file; with CREDS (startContainer) it joins,
//! becomes the container process and executes PATH as resolved there.

use std::ffi::CString;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::OciError;
use super::config::{Hook, Hooks, State};

/// The hidden subcommand that runs a hook in a container's namespaces.
pub const EXEC_IN: &str = "__hook-exec";
/// Its CREDS argument for a hook that keeps the runtime's credentials
/// (createContainer, which runs before `pivot_root`).
const NO_CREDENTIALS: &str = "-";
/// The longest timeout accepted (a day), so that a typo never hangs an
/// engine for years.
pub const MAX_TIMEOUT: i64 = 86_400;

/// What a hook executed in the pivoted container runs as: the container
/// process's user, groups, capability sets, no-new-privs and seccomp
/// filters, from the translated config (so exactly what the workload
/// gets), computed at `create` and kept in the container's state
/// directory for `start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// Bounding, effective, permitted, inheritable, ambient (bit N for
    /// capability N).
    pub caps: [u64; 5],
    pub no_new_privs: bool,
    /// The workload's seccomp programs in installation order, each
    /// instruction as (code, jt, jf, k).
    pub seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
}

impl Credentials {
    /// The workload's credentials in `spec`, as `confine::prepare` (the
    /// launch's own) reads them; its seccomp profile must exist already.
    pub fn of(spec: &crate::spec::Spec) -> Result<Credentials, OciError> {
        let confinement = crate::confine::prepare(spec).map_err(|e| {
            err(
                "process".into(),
                format!("the container process's confinement: {e}"),
            )
        })?;
        let programs = confinement
            .workload_filter()
            .map(|f| f.program.as_slice())
            .into_iter()
            .chain(confinement.raw_filters().iter().map(Vec::as_slice));
        let seccomp = programs
            .map(|p| p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect())
            .collect();
        Ok(Credentials {
            uid: spec.identity.uid.unwrap_or(0),
            gid: spec.identity.gid.unwrap_or(0),
            groups: spec.identity.groups.clone().unwrap_or_default(),
            caps: confinement.cap_sets(),
            no_new_privs: confinement.no_new_privs(),
            seccomp,
        })
    }

    /// Become them (this process, about to execve), in the order of the
    /// workload's own steps (`launch::child`): with no-new-privs, it and
    /// the capability drop come first and seccomp last; without, seccomp
    /// is installed while CAP_SYS_ADMIN is still held, then the drop.
    fn assume(&self) -> Result<(), String> {
        use crate::sys::raw;
        if self.no_new_privs {
            raw::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS => {e}"))?;
            self.drop_capabilities()?;
        }
        for (i, program) in self.seccomp.iter().enumerate() {
            let program: Vec<libc::sock_filter> = program
                .iter()
                .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
                .collect();
            raw::seccomp_set_mode_filter(&program, 0)
                .map_err(|e| format!("seccomp(SET_MODE_FILTER) of filter {i} => {e}"))?;
        }
        if !self.no_new_privs {
            self.drop_capabilities()?;
        }
        Ok(())
    }

    /// The bounding set first (that needs CAP_SETPCAP), then groups, gid
    /// and uid (keeping the permitted set across), then the effective,
    /// permitted and inheritable sets, then the ambient set.
    fn drop_capabilities(&self) -> Result<(), String> {
        use crate::sys::raw;
        let [bounding, effective, permitted, inheritable, ambient] = self.caps;
        let last = crate::sys::cap_last_cap();
        let has = |set: u64, cap: u32| cap < 64 && set & (1u64 << cap) != 0;
        for cap in (0..=last).filter(|c| !has(bounding, *c)) {
            raw::capbset_drop(cap).map_err(|e| format!("PR_CAPBSET_DROP({cap}) => {e}"))?;
        }
        raw::setgroups(&self.groups).map_err(|e| format!("setgroups({:?}) => {e}", self.groups))?;
        raw::set_keepcaps().map_err(|e| format!("PR_SET_KEEPCAPS => {e}"))?;
        raw::setresgid(self.gid).map_err(|e| format!("setresgid({}) => {e}", self.gid))?;
        raw::setresuid(self.uid).map_err(|e| format!("setresuid({}) => {e}", self.uid))?;
        raw::capset(effective, permitted, inheritable).map_err(|e| {
            format!("capset({effective:#x}, {permitted:#x}, {inheritable:#x}) => {e}")
        })?;
        raw::ambient_clear().map_err(|e| format!("PR_CAP_AMBIENT_CLEAR_ALL => {e}"))?;
        for cap in (0..=last).filter(|c| has(ambient, *c)) {
            raw::ambient_raise(cap).map_err(|e| format!("PR_CAP_AMBIENT_RAISE({cap}) => {e}"))?;
        }
        // The uid change may have set it from fs.suid_dumpable.
        raw::set_dumpable(false).map_err(|e| format!("PR_SET_DUMPABLE => {e}"))
    }
}

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
/// is hutch init's pid (whose namespaces in-container hooks join);
/// `creds`, the container process's (startContainer hooks run as it).
/// The first failure of a fatal phase is the error; in a logged phase
/// every failure is written to stderr and the next hook runs.
pub fn run(
    phase: Phase,
    hooks: &Hooks,
    state: &State,
    container: Option<i32>,
    creds: Option<&Credentials>,
) -> Result<(), OciError> {
    let json = serde_json::to_vec(state).expect("state serializes");
    for (i, hook) in phase.of(hooks).iter().enumerate() {
        let at = format!("hooks.{}[{i}]", phase.key());
        let result = run_one(phase, hook, &json, container, creds);
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

fn run_one(
    phase: Phase,
    hook: &Hook,
    state: &[u8],
    container: Option<i32>,
    creds: Option<&Credentials>,
) -> Result<(), String> {
    let argv0 = hook
        .args
        .first()
        .cloned()
        .unwrap_or_else(|| hook.path.clone());
    let rest = hook.args.iter().skip(1);
    let mut cmd = if phase.in_container() {
        let pid = container.ok_or("no container process to join")?;
        // In the pivoted root whatever runs is the image's: never without
        // the container process's credentials.
        let creds = match (phase, creds) {
            (Phase::StartContainer, None) => {
                return Err("no credentials of the container process to run it with".into());
            }
            (Phase::StartContainer, Some(c)) => {
                serde_json::to_string(c).expect("credentials serialize")
            }
            _ => NO_CREDENTIALS.into(),
        };
        // This very image (the read-only copy hutch-oci runs from, whose
        // path current_exe() cannot name), not the host's binary.
        let mut c = Command::new("/proc/self/exe");
        c.arg(EXEC_IN)
            .arg(pid.to_string())
            .arg(creds)
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

/// `hutch-oci __hook-exec PID CREDS PATH ARGV0 ARGS...`: join the
/// namespaces of PID that differ from ours and execute the hook there.
/// CREDS `-` (createContainer, hutch init paused before `pivot_root`):
/// PATH is opened here, in the runtime's mount namespace, and the open
/// file executed with this process's credentials. CREDS as JSON
/// ([`Credentials`], startContainer, in the pivoted root): the hook first
/// becomes the container process, then PATH is executed as resolved in
/// the container. Returns only on failure (the exit code).
pub fn exec_in(args: &[String]) -> i32 {
    let fail = |what: &str| -> i32 {
        eprintln!("hutch-oci: hook: {what}");
        127
    };
    // Before anything of the container is opened or joined: no process of
    // the container may ptrace this one or open its /proc/PID/exe (the
    // kernel makes the hook dumpable again at its execve, as it should).
    if let Err(e) = crate::sys::raw::set_dumpable(false) {
        return fail(&format!("prctl(PR_SET_DUMPABLE, 0) => {e}"));
    }
    let [pid, creds, path, argv0, rest @ ..] = args else {
        return fail("usage: __hook-exec PID CREDS PATH ARGV0 [ARGS...]");
    };
    let creds: Option<Credentials> = if creds == NO_CREDENTIALS {
        None
    } else {
        match serde_json::from_str(creds) {
            Ok(c) => Some(c),
            Err(e) => return fail(&format!("the container process's credentials: {e}")),
        }
    };
    let file = if creds.is_none() {
        // Not close-on-exec: a script's interpreter opens it as /dev/fd/N.
        let file = match std::fs::File::open(path) {
            Ok(f) => OwnedFd::from(f),
            Err(e) => return fail(&format!("open({path}) => {e}")),
        };
        if let Err(e) = rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty()) {
            return fail(&format!("fcntl({path}) => {e}"));
        }
        Some(file)
    } else {
        None
    };
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
    // The hook checks this process is alive once its credentials changed
    // (which clears the parent-death signal set first).
    let parent = match crate::sys::raw::pidfd_open(std::process::id() as i32) {
        Ok(fd) => fd,
        Err(e) => return fail(&format!("pidfd_open(self) => {e}")),
    };
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
            if let Some(c) = &creds {
                if let Err(e) = c.assume() {
                    return fail(&format!("becoming the container process: {e}"));
                }
                if crate::sys::set_pdeathsig(libc::SIGKILL).is_err() {
                    return fail("prctl(PR_SET_PDEATHSIG) failed");
                }
                if crate::sys::raw::poll_one(parent.as_fd(), libc::POLLIN, 0) != Ok(0) {
                    return fail("hutch-oci ended before its hook ran");
                }
            }
            drop(parent);
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
    let Err(e) = match &file {
        Some(file) => nix::unistd::fexecve(file.as_fd(), &argv, &env),
        None => nix::unistd::execve(&cstr(path), &argv, &env),
    };
    let _ = std::io::stderr().flush();
    let place = if file.is_some() {
        "in the container's namespaces"
    } else {
        "in the container, as its process"
    };
    fail(&format!("execve({path}) {place} => {e}"))
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
        run(Phase::CreateRuntime, &h, &state(), None, None).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        let (json, line) = text.split_once('}').unwrap();
        let got: State = serde_json::from_str(&format!("{json}}}")).unwrap();
        assert_eq!(got, state());
        assert_eq!(line.trim(), "myhook 1", "argv0 and exactly the hook's env");
        // poststart: logged, not fatal.
        run(Phase::Poststart, &h, &state(), None, None).unwrap();
        // A timeout kills the hook and fails the phase.
        let start = Instant::now();
        let e = run(Phase::Prestart, &h, &state(), None, None)
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
