//! A failure record in words: what failed, the call with its arguments
//! (rebuilt from the plan: the child sends only the stage, the errno and
//! the index of the failing item), why, and what to do.

use crate::launch::prepare::LaunchPlan;
use crate::launch::wire::stage::{Failure, Stage};
use crate::spec::Spec;
use crate::sys::{self, Errno};

/// One line for a failed step: what, where, the call, why, what to do.
pub(crate) fn failure_line(f: &Failure, text: Option<&str>, p: &LaunchPlan, spec: &Spec) -> String {
    let errno = f.errno;
    let why = |call: &str| format!("{call} => {errno:?}: {}", errno.desc());
    if f.stage == Stage::Exec {
        return exec_line(f, p, spec);
    }
    match (f.stage, text) {
        // Build errors already say which operation, the call and a hint.
        (
            Stage::OpenHostSources
            | Stage::BuildRoot
            | Stage::BeforePivot
            | Stage::ClaimMounts
            | Stage::PerCommandMounts,
            Some(text),
        ) => {
            return text.to_string();
        }
        (stage, Some(text)) => return format!("{}: {text}", stage.what()),
        _ => {}
    }
    let c = &p.child;
    let q = |s: &std::ffi::CStr| format!("{:?}", s.to_string_lossy());
    let (what, call, hint): (String, String, Option<&str>) = match f.stage {
        Stage::SetGid => {
            let g = c.ids.init_ids.map_or(c.ids.inside_gid, |(_, g)| g);
            (
                f.stage.what().into(),
                format!("setresgid({g}, {g}, {g})"),
                None,
            )
        }
        Stage::SetUid => {
            let u = c.ids.init_ids.map_or(c.ids.inside_uid, |(u, _)| u);
            (
                f.stage.what().into(),
                format!("setresuid({u}, {u}, {u})"),
                None,
            )
        }
        Stage::SetGroups => (f.stage.what().into(), "setgroups(0, NULL)".into(), None),
        Stage::PerCommandInit => (
            f.stage.what().into(),
            format!("clone3(flags={:#x})", c.per_command_flags),
            None,
        ),
        Stage::LockUserNamespaces => (
            f.stage.what().into(),
            "write(\"/proc/sys/user/max_user_namespaces\", \"0\")".into(),
            Some("the sandbox's /proc/sys/user must be writable by its own root"),
        ),
        Stage::Hostname => (
            f.stage.what().into(),
            format!("sethostname({:?})", c.hostname.as_deref().unwrap_or("")),
            None,
        ),
        Stage::Loopback => (
            f.stage.what().into(),
            "ioctl(\"lo\", SIOCSIFFLAGS, IFF_UP)".into(),
            None,
        ),
        Stage::ProxyDoors => (
            f.stage.what().into(),
            format!(
                "listen(127.0.0.1:{}) and sendmsg(SCM_RIGHTS)",
                crate::net::PROXY_TCP_PORT
            ),
            None,
        ),
        // Init always sends its text (the call and the fix) for this one.
        Stage::TransparentEgress => (
            f.stage.what().into(),
            "rtnetlink RTM_NEWROUTE, bind(udp 127.0.0.1:53), listen(0.0.0.0:PORT)".into(),
            Some("or run with --egress-mode proxy"),
        ),
        Stage::Rlimits => {
            let i = f.index as usize;
            let call = match c.rlimits.get(i) {
                Some((r, v)) => format!("setrlimit({}, {v})", sys::rlimit_name(*r)),
                None => {
                    let (r, v) = c
                        .rlimits_soft
                        .get(i.saturating_sub(c.rlimits.len()))
                        .copied()
                        .unwrap_or((-1, 0));
                    format!("setrlimit({}, soft {v})", sys::rlimit_name(r))
                }
            };
            (f.stage.what().into(), call, None)
        }
        Stage::Sysctl => {
            let path = c
                .sysctls
                .get(f.index as usize)
                .map(|(p, _)| q(p))
                .unwrap_or_default();
            (
                f.stage.what().into(),
                format!("write({path})"),
                Some("the sysctl must exist and belong to the sandbox's own namespaces"),
            )
        }
        Stage::Terminal => (
            f.stage.what().into(),
            "open(\"/dev/ptmx\") and sendmsg(SCM_RIGHTS) to the console socket".into(),
            Some("the root needs a devpts at /dev/pts and /dev/ptmx pointing at pts/ptmx"),
        ),
        Stage::JoinMountNamespace => (
            f.stage.what().into(),
            "setns(CLONE_NEWNS)".into(),
            Some(
                "it must be a mount namespace (/proc/PID/ns/mnt) whose owning user namespace the runtime holds CAP_SYS_ADMIN in",
            ),
        ),
        Stage::UserNamespaceAfterSetup => (
            f.stage.what().into(),
            "setns(CLONE_NEWUSER)".into(),
            Some(
                "it must be a user namespace that descends from the one the sandbox was built in (bubblewrap's --userns2 needs --userns)",
            ),
        ),
        Stage::Hold => (
            f.stage.what().into(),
            "accept() on the start socket".into(),
            None,
        ),
        // Init sends its text (the call) when the move or detach failed.
        Stage::BeforePivot => (
            f.stage.what().into(),
            "sendmsg(the supervisor's socket)".into(),
            None,
        ),
        Stage::ControllingTerminal => (f.stage.what().into(), "ioctl(0, TIOCSCTTY)".into(), None),
        Stage::WorkloadIds => {
            let (u, g) = c
                .ids
                .workload_ids
                .as_ref()
                .map_or((0, 0), |w| (w.uid, w.gid));
            (
                f.stage.what().into(),
                format!("setgroups/setresgid({g})/setresuid({u})"),
                None,
            )
        }
        Stage::ParentDeathSignal | Stage::ParentDeathSignalAgain => (
            f.stage.what().into(),
            "prctl(PR_SET_PDEATHSIG, SIGKILL)".into(),
            None,
        ),
        Stage::NonDumpable => (
            f.stage.what().into(),
            "prctl(PR_SET_DUMPABLE, 0)".into(),
            None,
        ),
        Stage::BlockSignals => (f.stage.what().into(), "sigprocmask(SIG_BLOCK)".into(), None),
        Stage::StartWorkload => (
            f.stage.what().into(),
            "clone(CLONE_VM|CLONE_VFORK)".into(),
            None,
        ),
        Stage::CloseInheritedFds | Stage::CloseInitFds | Stage::CloseFds => {
            (f.stage.what().into(), "close_range()".into(), None)
        }
        Stage::InitSeccomp => (
            f.stage.what().into(),
            "seccomp(SECCOMP_SET_MODE_FILTER, <seccomp/init.json>)".into(),
            None,
        ),
        Stage::InitSession | Stage::WorkloadSession => {
            (f.stage.what().into(), "setsid()".into(), None)
        }
        Stage::Stdio => (f.stage.what().into(), "dup2()".into(), None),
        Stage::WorkingDirectory => {
            let cwd = &c.command.cwd;
            let hint = match errno {
                Errno::ELOOP | Errno::EXDEV => Some(
                    "the working directory must be a directory inside the sandbox; a path \
                     through a /proc magic link such as /proc/self/fd/N is refused",
                ),
                Errno::ENOENT => Some("no such directory inside the sandbox; fix --chdir"),
                Errno::ENOTDIR => Some("not a directory inside the sandbox; fix --chdir"),
                _ => None,
            };
            (
                format!("{} {}", f.stage.what(), q(cwd)),
                format!(
                    "openat2(\"/\", {}, O_PATH|O_DIRECTORY, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) and fchdir",
                    q(cwd)
                ),
                hint,
            )
        }
        Stage::NoNewPrivs => (
            f.stage.what().into(),
            "prctl(PR_SET_NO_NEW_PRIVS, 1)".into(),
            None,
        ),
        Stage::BoundingSet => (
            f.stage.what().into(),
            format!("prctl(PR_CAPBSET_DROP, {})", f.index),
            None,
        ),
        Stage::Capabilities => (
            f.stage.what().into(),
            format!(
                "capset(effective {:#x}, permitted {:#x}, inheritable {:#x})",
                c.caps.effective, c.caps.permitted, c.caps.inheritable
            ),
            None,
        ),
        Stage::AmbientCapabilities => (f.stage.what().into(), "prctl(PR_CAP_AMBIENT)".into(), None),
        Stage::LandlockRuleset => (
            f.stage.what().into(),
            "landlock_create_ruleset()".into(),
            None,
        ),
        Stage::LandlockPathRule => {
            let path = c
                .confinement
                .landlock_plan()
                .and_then(|l| l.paths.get(f.index as usize))
                .map(|r| q(&r.path))
                .unwrap_or_default();
            (
                f.stage.what().into(),
                format!("landlock_add_rule(PATH_BENEATH, {path})"),
                None,
            )
        }
        Stage::LandlockPortRule => (
            f.stage.what().into(),
            "landlock_add_rule(NET_PORT)".into(),
            None,
        ),
        Stage::LandlockRestrict => (
            f.stage.what().into(),
            "landlock_restrict_self(0)".into(),
            None,
        ),
        Stage::Seccomp => {
            let n = c
                .confinement
                .workload_filter()
                .map_or(0, |f| f.program.len());
            (
                f.stage.what().into(),
                format!("seccomp(SECCOMP_SET_MODE_FILTER, 0, <{n} instructions>)"),
                None,
            )
        }
        Stage::Claim => (
            f.stage.what().into(),
            "recvmsg(the supervisor's socket)".into(),
            None,
        ),
        Stage::MountPropagation
        | Stage::OpenHostSources
        | Stage::BuildRoot
        | Stage::ClaimMounts
        | Stage::PerCommandMounts
        | Stage::Exec => (f.stage.what().into(), "?".into(), None),
    };
    let mut line = format!("{what}: {}", why(&call));
    if let Some(h) = hint {
        line.push_str(&format!(" ({h})"));
    }
    // A fork of init's refused by a process limit: say which counts what.
    if errno == Errno::EAGAIN && matches!(f.stage, Stage::StartWorkload) {
        let limit = crate::launch::ProcessLimit::of_caller(c.nproc_cap());
        line.push_str(&format!("; {limit}"));
    }
    line
}

/// The 126/127 line: not found in PATH, not found, or not executable.
pub(crate) fn exec_line(f: &Failure, p: &LaunchPlan, spec: &Spec) -> String {
    let errno = f.errno;
    let code = crate::launch::wire::stage::exec_failure_status(errno, f.interpreter_missing);
    let program = spec.command[0].as_str();
    if code == 127 && !program.contains('/') {
        let path = spec
            .env
            .get("PATH")
            .map_or(crate::spec::DEFAULT_PATH, String::as_str);
        return format!("command {program:?} not found in the sandbox's PATH ({path})");
    }
    let what = if code == 127 {
        "command not found in the sandbox"
    } else {
        "command not executable in the sandbox"
    };
    let why = if f.interpreter_missing {
        " (the file exists; its ELF or #! interpreter is missing in the sandbox)".to_string()
    } else if errno == Errno::ELOOP {
        " (a path through a /proc magic link is refused)".to_string()
    } else if errno == Errno::EAGAIN {
        // execve's EAGAIN: the process limit was over when the ids changed
        // (PF_NPROC_EXCEEDED) and still is.
        let limit = crate::launch::ProcessLimit::of_caller(p.child.nproc_cap());
        format!("; {limit}")
    } else {
        String::new()
    };
    let candidate = p
        .child
        .command
        .exec
        .candidates
        .get(f.index as usize)
        .map(|c| format!("{:?}", c.to_string_lossy()))
        .unwrap_or_else(|| format!("{program:?}"));
    format!(
        "{what}: execve({candidate}) => {errno:?}: {}{why}",
        errno.desc()
    )
}
