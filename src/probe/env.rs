//! What the host says about user namespaces, read before probing so a
//! failure can be explained.

use serde::Serialize;

/// Host settings that restrict user namespaces, and who is probing.
#[derive(Debug, Clone, Serialize)]
pub struct HostSettings {
    /// Effective uid / gid of the probing process.
    pub uid: u32,
    pub gid: u32,
    /// `kernel.unprivileged_userns_clone` (Debian/Ubuntu patch; absent upstream).
    pub unprivileged_userns_clone: Option<String>,
    /// `user.max_user_namespaces`.
    pub max_user_namespaces: Option<String>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+).
    pub apparmor_restrict_unprivileged_userns: Option<String>,
    /// This process is itself in a non-initial user namespace (a container).
    pub in_user_namespace: bool,
    /// This process already runs under a seccomp filter (a container
    /// runtime's, typically), which may block namespace syscalls.
    pub under_seccomp: bool,
}

impl HostSettings {
    /// Read the sysctls and /proc/self state. Changes nothing.
    pub fn read() -> HostSettings {
        let sysctl = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
        };
        let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        let initial =
            uid_map.split_whitespace().collect::<Vec<_>>().as_slice() == ["0", "0", "4294967295"];
        HostSettings {
            uid: crate::sys::raw::geteuid(),
            gid: crate::sys::raw::getegid(),
            unprivileged_userns_clone: sysctl("/proc/sys/kernel/unprivileged_userns_clone"),
            max_user_namespaces: sysctl("/proc/sys/user/max_user_namespaces"),
            apparmor_restrict_unprivileged_userns: sysctl(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            ),
            in_user_namespace: !uid_map.is_empty() && !initial,
            under_seccomp: crate::sys::raw::seccomp_mode().is_ok_and(|m| m == 2),
        }
    }

    /// Whether AppArmor restricts unprivileged user namespaces here.
    pub fn apparmor_restricts(&self) -> bool {
        self.uid != 0 && self.apparmor_restrict_unprivileged_userns.as_deref() == Some("1")
    }

    /// One sentence on the container situation, if any, for failure details.
    pub fn container_note(&self) -> Option<&'static str> {
        match (self.in_user_namespace, self.under_seccomp) {
            (true, true) => {
                Some("hutch runs inside a container (user namespace and seccomp filter)")
            }
            (true, false) => Some("hutch runs inside a user namespace (a container)"),
            (false, true) => Some("hutch runs under a seccomp filter (a container runtime's?)"),
            (false, false) => None,
        }
    }
}
