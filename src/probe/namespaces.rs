//! pid (with a fresh /proc), net (with lo up), ipc, uts and cgroup
//! namespaces, each created inside a fresh user namespace as the launcher
//! does.

use super::fork::{Step, fork_wait};
use crate::sys::Errno;
use crate::sys::raw;

use super::userns::{self, Maps, NEXT};
use super::{Feature, HostSettings, Status, in_child};

fn steps(extra: &[&'static str]) -> Vec<&'static str> {
    let mut s = userns::STEPS.to_vec();
    s.extend(extra);
    s
}

/// pid_namespace, net_namespace, ipc_namespace, uts_namespace, cgroup_namespace.
pub(super) fn probe(host: &HostSettings) -> Vec<Feature> {
    let maps = Maps::new(host);
    let maps = &maps;
    let none: userns::Explain<'_> = &|_, _| None;
    let mut out = Vec::new();

    // pid: the first child in the new namespace must be pid 1 and able to
    // mount a procfs for it (container runtimes that mask parts of /proc
    // make this fail with EPERM).
    out.push(userns::verdict(
        "pid_namespace",
        true,
        &steps(&[
            "unshare(CLONE_NEWPID|CLONE_NEWNS)",
            "mount(NULL, \"/\", MS_REC|MS_PRIVATE)",
            "fork() into the namespace, getpid() == 1, mount(\"proc\", \"/proc\", \"proc\")",
        ]),
        in_child(|| {
            userns::enter(maps)?;
            raw::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS).step(NEXT)?;
            raw::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None).step(NEXT + 1)?;
            fork_wait(
                || {
                    if raw::getpid() != 1 {
                        return Err((0, Errno::ESRCH));
                    }
                    raw::mount(
                        Some(c"proc"),
                        c"/proc",
                        Some(c"proc"),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        None,
                    )
                    .step(0)?;
                    Ok(0)
                },
                NEXT + 2,
            )
        }),
        host,
        "new pid namespace (first child is pid 1) with a fresh procfs, inside a user namespace",
        &|n, errno| {
            (n == NEXT + 2 && errno == Errno::EPERM && !host.apparmor_restricts()).then(|| {
                (
                    Status::Restricted,
                    "procfs cannot be mounted: this /proc has masked or read-only parts \
                     (a container runtime's /proc masking)"
                        .into(),
                    "run the container with an unmasked /proc (Docker: --security-opt \
                     systempaths=unconfined; Kubernetes: procMount: Unmasked)"
                        .into(),
                )
            })
        },
    ));

    out.push(userns::verdict(
        "net_namespace",
        true,
        &steps(&[
            "unshare(CLONE_NEWNET)",
            "ioctl(\"lo\", SIOCSIFFLAGS, IFF_UP)",
        ]),
        in_child(|| {
            userns::enter(maps)?;
            raw::unshare(libc::CLONE_NEWNET).step(NEXT)?;
            raw::set_interface_up(c"lo").step(NEXT + 1)?;
            Ok(0)
        }),
        host,
        "new network namespace with lo up, inside a user namespace",
        none,
    ));

    // Transparent egress (not needed by the default profile): the `local`
    // route for the synthetic range, the resolver's port and a capture
    // listener, all in a new network namespace, as hutch init makes them.
    out.push(userns::verdict(
        "transparent_egress",
        false,
        &steps(&[
            "unshare(CLONE_NEWNET)",
            "ioctl(\"lo\", SIOCSIFFLAGS, IFF_UP)",
            "rtnetlink RTM_NEWROUTE(local 198.18.0.0/15 dev lo)",
            "bind(udp 127.0.0.1:53), listen(0.0.0.0:443)",
        ]),
        in_child(|| {
            userns::enter(maps)?;
            raw::unshare(libc::CLONE_NEWNET).step(NEXT)?;
            raw::set_interface_up(c"lo").step(NEXT + 1)?;
            crate::sys::add_local_route_v4(
                crate::net::names::SYNTHETIC_NET,
                crate::net::names::SYNTHETIC_PREFIX,
                c"lo",
            )
            .map_err(|e| e.errno)
            .step(NEXT + 2)?;
            crate::net::transparent_sockets_only(&[443])
                .map_err(|e| e.errno)
                .step(NEXT + 3)?;
            Ok(0)
        }),
        host,
        "transparent egress (--egress-mode transparent): a local route for the synthetic \
         range, the resolver's port and a capture listener in a new network namespace",
        &|n, errno| {
            (n == NEXT + 2).then(|| {
                (
                    Status::Missing,
                    format!("the kernel refuses a `local` route in a network namespace ({errno})"),
                    "use a kernel with IPv4 routing over rtnetlink (CONFIG_INET), or run with \
                     --egress-mode proxy"
                        .into(),
                )
            })
        },
    ));

    out.push(userns::verdict(
        "ipc_namespace",
        true,
        &steps(&["unshare(CLONE_NEWIPC)"]),
        in_child(|| {
            userns::enter(maps)?;
            raw::unshare(libc::CLONE_NEWIPC).step(NEXT)?;
            Ok(0)
        }),
        host,
        "new IPC namespace inside a user namespace",
        none,
    ));

    out.push(userns::verdict(
        "uts_namespace",
        true,
        &steps(&["unshare(CLONE_NEWUTS)", "sethostname(\"hutch-probe\")"]),
        in_child(|| {
            userns::enter(maps)?;
            raw::unshare(libc::CLONE_NEWUTS).step(NEXT)?;
            raw::sethostname(b"hutch-probe").step(NEXT + 1)?;
            Ok(0)
        }),
        host,
        "new UTS namespace with its own hostname, inside a user namespace",
        none,
    ));

    out.push(userns::verdict(
        "cgroup_namespace",
        true,
        &steps(&["unshare(CLONE_NEWCGROUP)"]),
        in_child(|| {
            userns::enter(maps)?;
            raw::unshare(libc::CLONE_NEWCGROUP).step(NEXT)?;
            Ok(0)
        }),
        host,
        "new cgroup namespace inside a user namespace",
        &|n, errno| {
            (n == NEXT && errno == Errno::EINVAL).then(|| {
                (
                    Status::Missing,
                    "the kernel was built without cgroup namespaces".into(),
                    "use a kernel with CONFIG_CGROUPS=y (cgroup namespaces are Linux 4.6+)".into(),
                )
            })
        },
    ));
    out
}
