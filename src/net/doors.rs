//! The two doors into the proxy and the environment that points at them.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};

use super::NetError;
use crate::sys::SysError;

/// Where the Unix door appears inside the sandbox.
pub const PROXY_SOCKET_PATH: &str = "/run/hutch/proxy.sock";
/// Port of the TCP door on the sandbox's loopback.
pub const PROXY_TCP_PORT: u16 = 3128;

/// Create `private_dir` (mode 0700; it must not exist yet) and a listening
/// Unix socket `proxy.sock` in it. The socket itself is 0666 so the
/// sandbox's uid can connect once it is bind-mounted; the 0700 directory
/// keeps every other host user out.
pub fn unix_door(private_dir: &Path) -> Result<(PathBuf, OwnedFd), NetError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(private_dir)
        .map_err(|e| NetError::io(format!("mkdir {}", private_dir.display()), e))?;
    let path = private_dir.join("proxy.sock");
    let listener = UnixListener::bind(&path)
        .map_err(|e| NetError::io(format!("bind unix socket {}", path.display()), e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| NetError::io(format!("chmod {}", path.display()), e))?;
    Ok((path, OwnedFd::from(listener)))
}

/// In the current (sandbox) network namespace, after `lo` is up: a TCP
/// socket listening on 127.0.0.1:3128, close-on-exec, for the supervisor.
pub fn tcp_door_in_current_netns() -> Result<OwnedFd, SysError> {
    let sys = |call: String| {
        move |e: rustix::io::Errno| {
            SysError::new(call, crate::sys::Errno::from_raw(e.raw_os_error()))
        }
    };
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(sys("socket(AF_INET, SOCK_STREAM)".into()))?;
    sockopt::set_socket_reuseaddr(&fd, true).map_err(sys("setsockopt(SO_REUSEADDR)".into()))?;
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, PROXY_TCP_PORT);
    rustix::net::bind(&fd, &addr).map_err(sys(format!("bind(127.0.0.1:{PROXY_TCP_PORT})")))?;
    rustix::net::listen(&fd, 1024).map_err(sys(format!("listen(127.0.0.1:{PROXY_TCP_PORT})")))?;
    Ok(fd)
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
    fn unix_door_is_private_and_listening() {
        let base = std::env::temp_dir().join(format!("hutch-door-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let dir = base.join("p");
        let (path, fd) = unix_door(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(path, dir.join("proxy.sock"));
        let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        drop(fd);
        // An existing directory is refused (no reuse of a planted path).
        assert!(unix_door(&dir).is_err());
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
