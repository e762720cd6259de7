//! Joining existing namespaces (`namespaces.join`): every reference is
//! opened first (paths, or a dup of the launcher's fd), then the launching
//! process itself enters them with setns, user namespace first, right
//! before clone3, so that the sandbox's own namespaces are created inside
//! (and owned by) the joined ones, and the sandbox lands in a joined pid
//! namespace. Only a single-threaded process may do this (setns of a user
//! namespace requires it); the launcher checks that right before.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::launch::error::{LaunchError, PrepareError};
use crate::spec::{NamespaceRef, Spec, SpecError};
use crate::sys;

/// Namespaces to enter, opened.
#[derive(Default)]
pub(crate) struct Joins(Vec<(&'static str, libc::c_int, OwnedFd)>);

fn nstype(kind: &str) -> libc::c_int {
    match kind {
        "user" => libc::CLONE_NEWUSER,
        "pid" => libc::CLONE_NEWPID,
        "ipc" => libc::CLONE_NEWIPC,
        "uts" => libc::CLONE_NEWUTS,
        "net" => libc::CLONE_NEWNET,
        _ => libc::CLONE_NEWCGROUP,
    }
}

pub(crate) fn open(kind: &str, r: &NamespaceRef) -> Result<OwnedFd, LaunchError> {
    let at = format!("namespaces.join.{kind}");
    if let Some(path) = &r.path {
        return std::fs::File::open(path).map(OwnedFd::from).map_err(|e| {
            LaunchError::Spec(SpecError::new(
                format!("{at}.path"),
                format!("cannot open {}: {e}", path.display()),
            ))
        });
    }
    let fd = r.fd.unwrap_or(-1);
    if !sys::fd_is_open(fd) {
        return Err(LaunchError::Spec(SpecError::new(
            format!("{at}.fd"),
            format!("fd {fd} is not open in the launching process"),
        )));
    }
    // SAFETY: the fd is open (checked just above) and stays open while
    // borrowed for the duplication.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    borrowed
        .try_clone_to_owned()
        .map_err(|e| LaunchError::Sys(sys::io_err(format!("fcntl({fd}, F_DUPFD_CLOEXEC)"), e)))
}

/// Open every namespace the Spec joins, user first.
pub(crate) fn open_joins(spec: &Spec) -> Result<Joins, LaunchError> {
    let mut joins = Joins::default();
    for (kind, r) in spec.namespaces.join.iter() {
        joins.0.push((kind, nstype(kind), open(kind, r)?));
    }
    Ok(joins)
}

impl Joins {
    /// Enter them (this process; must be single-threaded).
    pub(crate) fn enter(self) -> Result<(), LaunchError> {
        for (kind, ty, fd) in self.0 {
            sys::setns(fd.as_fd(), ty, kind)
                .map_err(|err| PrepareError::JoinNamespace { kind, err })?;
        }
        Ok(())
    }
}

/// Open `namespaces.join.mount` for hutch init to enter. Refused when it
/// is the launcher's own mount namespace or pid 1's (the host's, as a
/// rule): hutch init makes `/` a slave, stacks its staging tmpfs, pivots
/// and detaches the old root there, which would change the caller's own
/// tree under it.
pub(crate) fn open_mount(r: &NamespaceRef) -> Result<OwnedFd, LaunchError> {
    use std::os::unix::fs::MetadataExt;
    let fd = open("mount", r)?;
    let at = if r.path.is_some() {
        "namespaces.join.mount.path"
    } else {
        "namespaces.join.mount.fd"
    };
    let refuse = |why: String| LaunchError::Spec(SpecError::new(at, why));
    // fstat through a duplicate (the File closes it, `fd` stays).
    let joined = fd
        .try_clone()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata())
        .map_err(|e| refuse(format!("cannot stat it: {e}")))?;
    if joined.dev() != nsfs_dev()? {
        return Err(refuse(
            "not a namespace file (a /proc/PID/ns/mnt, or a bind mount of one)".into(),
        ));
    }
    for (whose, path) in [
        ("the runtime's own", "/proc/self/ns/mnt"),
        ("pid 1's (the host's)", "/proc/1/ns/mnt"),
    ] {
        let Ok(m) = std::fs::metadata(path) else {
            continue;
        };
        if (m.dev(), m.ino()) == (joined.dev(), joined.ino()) {
            return Err(refuse(format!(
                "it is {whose} mount namespace: the root would be built and pivoted into in it, under the caller's own mounts; give a mount namespace made for the container (docs/oci.md, \"Joining a mount namespace\")"
            )));
        }
    }
    Ok(fd)
}

/// The device of the nsfs filesystem (where every namespace file lives).
fn nsfs_dev() -> Result<u64, LaunchError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/mnt")
        .map(|m| m.dev())
        .map_err(|e| LaunchError::Sys(sys::io_err("stat(/proc/self/ns/mnt)".into(), e)))
}
