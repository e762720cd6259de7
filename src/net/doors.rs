//! The two doors into the proxy and the environment that points at them.
//! Both are made by the sandbox's pid 1, inside the sandbox (the TCP one
//! in its network namespace, the Unix one in its root), and handed to the
//! supervisor: nothing of them exists on the host.

use std::ffi::{CStr, CString};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use super::names::{SYNTHETIC_NET, SYNTHETIC_PREFIX};
use super::policy::Policy;
use crate::sys::socket::UnixAddr;
use crate::sys::{Errno, SysError, raw};

/// Which door a connection came through; the only caller authentication
/// the proxy needs (each door belongs to exactly one sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// The Unix socket at `/run/hutch/proxy.sock`; also routes origin-form
    /// requests by their `Host` header.
    Unix,
    /// The TCP listener on `127.0.0.1:3128` inside the sandbox.
    Tcp,
    /// `transparent` egress: a listener that captured connections to the
    /// synthetic addresses arrive on.
    Transparent,
    /// `transparent` egress: the resolver's UDP socket on 127.0.0.1:53.
    /// Its decisions are audited as `transparent` too (method `DNS`).
    Resolver,
}

impl Door {
    pub fn name(self) -> &'static str {
        match self {
            Door::Unix => "unix",
            Door::Tcp => "tcp",
            Door::Transparent | Door::Resolver => "transparent",
        }
    }
}

/// Port of the TCP door on the sandbox's loopback.
pub const PROXY_TCP_PORT: u16 = 3128;

fn sys_err(call: String) -> impl FnOnce(Errno) -> SysError {
    move |e| SysError::new(call, e)
}

/// A listening Unix stream socket bound at `name` in the directory `dir`
/// (through its `/proc/self/fd` path, so nothing outside `dir` is
/// resolved), mode 0666 so the sandbox's uid can connect whatever the
/// umask.
pub fn unix_door(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, SysError> {
    let path = format!(
        "/proc/self/fd/{}/{}",
        dir.as_raw_fd(),
        name.to_string_lossy()
    );
    let fd = raw::socket(libc::AF_UNIX, libc::SOCK_STREAM)
        .map_err(sys_err("socket(AF_UNIX, SOCK_STREAM)".into()))?;
    let addr =
        UnixAddr::new(Path::new(&path)).map_err(sys_err(format!("sockaddr_un({path:?})")))?;
    raw::bind_unix(fd.as_fd(), &addr).map_err(sys_err(format!("bind({path:?})")))?;
    CString::new(path.as_str())
        .map_err(|_| Errno::EINVAL)
        .and_then(|c| raw::chmod(&c, 0o666))
        .map_err(sys_err(format!("chmod({path:?}, 0666)")))?;
    raw::listen(fd.as_fd(), 1024).map_err(sys_err(format!("listen({path:?})")))?;
    Ok(fd)
}

/// In the current (sandbox) network namespace, after `lo` is up: a TCP
/// socket listening on 127.0.0.1:3128, close-on-exec, for the supervisor.
pub fn tcp_door_in_current_netns() -> Result<OwnedFd, SysError> {
    let sys = sys_err;
    let fd = raw::socket(libc::AF_INET, libc::SOCK_STREAM)
        .map_err(sys("socket(AF_INET, SOCK_STREAM)".into()))?;
    raw::set_reuseaddr(fd.as_fd()).map_err(sys("setsockopt(SO_REUSEADDR)".into()))?;
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, PROXY_TCP_PORT));
    raw::bind(fd.as_fd(), &addr).map_err(sys(format!("bind(127.0.0.1:{PROXY_TCP_PORT})")))?;
    raw::listen(fd.as_fd(), 1024).map_err(sys(format!("listen(127.0.0.1:{PROXY_TCP_PORT})")))?;
    Ok(fd)
}

/// Port of the resolver on the sandbox's loopback (`transparent` egress).
pub const RESOLVER_PORT: u16 = 53;
/// The sandbox's `/etc/resolv.conf` in `transparent` egress: only the
/// in-sandbox resolver; `edns0`/`trust-ad` are left out (answers are tiny).
pub const RESOLV_CONF: &str = "# hutch: transparent egress (see docs/egress.md)\nnameserver 127.0.0.1\noptions timeout:2 attempts:2\n";

/// The ports `transparent` egress captures: every port `policy` can
/// allow, except the TCP door's own (a connection to it is the proxy).
pub fn transparent_ports(policy: &Policy) -> Vec<u16> {
    let mut ports = policy.allowed_ports();
    ports.retain(|&p| p != PROXY_TCP_PORT);
    ports
}

/// In the current (sandbox) network namespace, after `lo` is up, for
/// `transparent` egress: the `local` route that makes every synthetic
/// address one of the sandbox's own, the resolver's UDP socket on
/// 127.0.0.1:53, and one capture listener on `0.0.0.0:PORT` for each port
/// in `ports`. The sockets are close-on-exec and go to the supervisor;
/// nothing of hutch's runs in the sandbox to serve them.
pub fn transparent_in_current_netns(ports: &[u16]) -> Result<Vec<OwnedFd>, SysError> {
    crate::sys::add_local_route_v4(SYNTHETIC_NET, SYNTHETIC_PREFIX, c"lo")?;
    transparent_sockets_only(ports)
}

/// The sockets of [`transparent_in_current_netns`] without the route.
pub fn transparent_sockets_only(ports: &[u16]) -> Result<Vec<OwnedFd>, SysError> {
    let sys = sys_err;
    let mut fds = Vec::with_capacity(1 + ports.len());
    let dns = raw::socket(libc::AF_INET, libc::SOCK_DGRAM)
        .map_err(sys("socket(AF_INET, SOCK_DGRAM)".into()))?;
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, RESOLVER_PORT));
    raw::bind(dns.as_fd(), &addr).map_err(sys(format!("bind(udp 127.0.0.1:{RESOLVER_PORT})")))?;
    fds.push(dns);
    for &port in ports {
        let fd = raw::socket(libc::AF_INET, libc::SOCK_STREAM)
            .map_err(sys("socket(AF_INET, SOCK_STREAM)".into()))?;
        raw::set_reuseaddr(fd.as_fd()).map_err(sys("setsockopt(SO_REUSEADDR)".into()))?;
        let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
        raw::bind(fd.as_fd(), &addr).map_err(sys(format!("bind(0.0.0.0:{port})")))?;
        raw::listen(fd.as_fd(), 1024).map_err(sys(format!("listen(0.0.0.0:{port})")))?;
        fds.push(fd);
    }
    Ok(fds)
}

/// The one line for a `transparent` setup step that failed: the call, and
/// the kernel feature it needs with what to do (`hutch check` says the
/// same before any sandbox is made).
pub fn transparent_failure_hint(e: &SysError) -> String {
    let need = if e.call.starts_with("rtnetlink") {
        "the kernel must accept a `local` route in an unprivileged network namespace \
         (rtnetlink, CONFIG_INET)"
    } else if e.call.contains(":53") {
        "hutch init must be able to bind port 53 in the sandbox's network namespace"
    } else {
        "a capture listener could not be bound (is that port taken by the TCP door?)"
    };
    format!("transparent egress: {e}; {need}; or run with --egress-mode proxy")
}

/// Environment for the workload: every proxy variable (both cases) points
/// at the TCP door; `NO_PROXY` only exempts the sandbox's own loopback,
/// which has nothing outside the sandbox behind it.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{PROXY_TCP_PORT}");
    let mut env = Vec::new();
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((key.to_string(), url.clone()));
        env.push((key.to_ascii_lowercase(), url.clone()));
    }
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    env.push(("NO_PROXY".into(), no_proxy.clone()));
    env.push(("no_proxy".into(), no_proxy));
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn unix_door_listens_in_its_directory() {
        let base = std::env::temp_dir().join(format!("hutch-door-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let dir = std::fs::File::open(&base).unwrap();
        let fd = unix_door(std::os::fd::AsFd::as_fd(&dir), c"proxy.sock").unwrap();
        let path = base.join("proxy.sock");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o666);
        let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        drop(fd);
        // An existing name is refused (no reuse of a planted path).
        assert!(unix_door(std::os::fd::AsFd::as_fd(&dir), c"proxy.sock").is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn env_points_every_variable_at_the_tcp_door() {
        let env = proxy_env();
        for k in ["HTTP_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
            let v = env.iter().find(|(n, _)| n == k).unwrap();
            assert_eq!(v.1, "http://127.0.0.1:3128");
        }
        let np = env.iter().find(|(n, _)| n == "NO_PROXY").unwrap();
        assert_eq!(np.1, "localhost,127.0.0.1,::1");
    }
}
