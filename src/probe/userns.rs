//! User namespaces, and the shared way every userns-based probe enters one
//! and explains a failure.

use super::fork::{ProbeResult, Step};
use crate::sys::Errno;
use crate::sys::raw;

use super::{Feature, HostSettings, Status, failed, in_child, step_name};

/// The first steps of every probe that runs inside a user namespace.
pub(super) const STEPS: [&str; 4] = [
    "unshare(CLONE_NEWUSER)",
    "write /proc/self/setgroups \"deny\"",
    "write /proc/self/uid_map",
    "write /proc/self/gid_map",
];

/// Number of the first step after [`enter`].
pub(super) const NEXT: u32 = STEPS.len() as u32;

/// The single-id maps the unprivileged path uses (inside 0 = our euid),
/// formatted before fork so the child does not allocate.
pub(super) struct Maps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

impl Maps {
    pub(super) fn new(host: &HostSettings) -> Maps {
        Maps {
            uid: format!("0 {} 1\n", host.uid).into_bytes(),
            gid: format!("0 {} 1\n", host.gid).into_bytes(),
        }
    }
}

/// In a probe child: enter a new user namespace with single-id maps.
pub(super) fn enter(maps: &Maps) -> ProbeResult {
    raw::unshare(libc::CLONE_NEWUSER).step(0)?;
    raw::write_file(c"/proc/self/setgroups", b"deny").step(1)?;
    raw::write_file(c"/proc/self/uid_map", &maps.uid).step(2)?;
    raw::write_file(c"/proc/self/gid_map", &maps.gid).step(3)?;
    Ok(0)
}

/// A feature-specific explanation of a failed step: (status, detail, fix).
pub(super) type Explain<'a> = &'a dyn Fn(u32, Errno) -> Option<(Status, String, String)>;

/// Turn a probe child's result into a Feature. Failures in the userns
/// steps get the user namespace diagnosis; later ones `explain`, then a
/// generic errno-based one.
pub(super) fn verdict(
    name: &'static str,
    required: bool,
    steps: &[&'static str],
    result: Result<ProbeResult, String>,
    host: &HostSettings,
    ok_detail: &str,
    explain: Explain<'_>,
) -> Feature {
    let (n, errno) = match result {
        Ok(Ok(_)) => return Feature::ok(name, required, ok_detail),
        Ok(Err(e)) => e,
        Err(why) => {
            return Feature::bad(
                name,
                required,
                Status::Restricted,
                why,
                "run `hutch check` again; report a bug if it persists",
            );
        }
    };
    let call = failed(step_name(steps, n), errno);
    let userns_step = steps.first() == Some(&STEPS[0]) && n < NEXT;
    let (status, why, fix) = if userns_step && name != "user_namespace" {
        // Same cause as user_namespace's failure: say so briefly.
        let (status, _, _) = diagnose(n, errno, host);
        (
            status,
            "needs a user namespace".into(),
            "see user_namespace".into(),
        )
    } else if userns_step {
        diagnose(n, errno, host)
    } else if let Some(v) = explain(n, errno) {
        v
    } else {
        generic(errno, host)
    };
    let detail = if why.is_empty() {
        call
    } else {
        format!("{call}; {why}")
    };
    Feature::bad(name, required, status, detail, fix)
}

/// Why a user namespace step failed, from the errno and the host settings.
pub(super) fn diagnose(n: u32, errno: Errno, host: &HostSettings) -> (Status, String, String) {
    let container_fix = "allow nested user namespaces in the container (Docker/Podman: \
                         --security-opt seccomp=unconfined --security-opt apparmor=unconfined, \
                         or a seccomp profile allowing unshare/clone with CLONE_NEWUSER), \
                         or run hutch on the host";
    if n == 0 {
        match errno {
            Errno::EPERM | Errno::EACCES
                if host.uid != 0 && host.unprivileged_userns_clone.as_deref() == Some("0") =>
            {
                (
                    Status::Restricted,
                    "kernel.unprivileged_userns_clone = 0".into(),
                    "sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/)"
                        .into(),
                )
            }
            Errno::ENOSPC if host.in_user_namespace => (
                Status::Restricted,
                "the enclosing user namespace (a container or sandbox) limits nested user \
                 namespaces (user.max_user_namespaces set inside it, e.g. bwrap --disable-userns)"
                    .into(),
                "run hutch outside that sandbox, or let it allow nested user namespaces".into(),
            ),
            Errno::ENOSPC => (
                Status::Restricted,
                format!(
                    "user.max_user_namespaces = {} (limit reached)",
                    host.max_user_namespaces.as_deref().unwrap_or("?")
                ),
                "sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/)".into(),
            ),
            Errno::EUSERS => (
                Status::Restricted,
                "the user namespace nesting depth limit (32) is reached".into(),
                "run hutch from a less deeply nested container".into(),
            ),
            Errno::EINVAL => (
                Status::Missing,
                "the kernel was built without user namespaces".into(),
                "use a kernel with CONFIG_USER_NS=y".into(),
            ),
            Errno::EPERM | Errno::EACCES => match host.container_note() {
                Some(note) => (Status::Restricted, note.into(), container_fix.into()),
                None => (
                    Status::Restricted,
                    "denied by a security module or policy".into(),
                    "look for SELinux/AppArmor denials in `dmesg` or the audit log".into(),
                ),
            },
            _ => generic(errno, host),
        }
    } else if host.apparmor_restricts() {
        apparmor()
    } else {
        match host.container_note() {
            Some(note) => (Status::Restricted, note.into(), container_fix.into()),
            None => generic(errno, host),
        }
    }
}

/// The AppArmor user namespace restriction (Ubuntu 23.10+): unshare works
/// but the namespace gets no capabilities.
pub(super) fn apparmor() -> (Status, String, String) {
    (
        Status::Restricted,
        "kernel.apparmor_restrict_unprivileged_userns = 1: AppArmor denies capabilities \
         in unprivileged user namespaces"
            .into(),
        "install an AppArmor profile granting `userns,` to the hutch binary (see docs/check.md), \
         or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
            .into(),
    )
}

/// Errno-only explanation.
pub(super) fn generic(errno: Errno, host: &HostSettings) -> (Status, String, String) {
    match errno {
        Errno::ENOSYS => (
            Status::Missing,
            match host.container_note() {
                Some(note) => {
                    format!("the kernel is too old, or {note} whose seccomp profile returns ENOSYS")
                }
                None => "the kernel does not have this system call".into(),
            },
            "use a newer kernel (hutch targets Linux 6.1+), or allow the call in the \
             container's seccomp profile"
                .into(),
        ),
        Errno::EPERM | Errno::EACCES if host.apparmor_restricts() => apparmor(),
        Errno::EPERM | Errno::EACCES => (
            Status::Restricted,
            host.container_note()
                .unwrap_or("denied by a security module or policy")
                .into(),
            "look for SELinux/AppArmor/seccomp denials in `dmesg` or the audit log".into(),
        ),
        _ => (
            Status::Missing,
            String::new(),
            "use a kernel with this feature (hutch targets Linux 6.1+)".into(),
        ),
    }
}

/// `user_namespace`: unshare(CLONE_NEWUSER) and write single-id maps.
pub(super) fn probe(host: &HostSettings) -> Vec<Feature> {
    let maps = Maps::new(host);
    let res = in_child(|| {
        enter(&maps)?;
        // Inside, we must now be uid 0 of the new namespace.
        if raw::geteuid() != 0 {
            return Err((NEXT, Errno::EPERM));
        }
        Ok(0)
    });
    let mut steps = STEPS.to_vec();
    steps.push("geteuid() == 0 inside the namespace");
    vec![verdict(
        "user_namespace",
        true,
        &steps,
        res,
        host,
        &format!(
            "unshare(CLONE_NEWUSER), setgroups deny, uid_map \"0 {} 1\", gid_map \"0 {} 1\"",
            host.uid, host.gid
        ),
        &|_, _| None,
    )]
}
