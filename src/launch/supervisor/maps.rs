//! What the supervisor does for the sandbox once it exists and before
//! `Go`: the id maps, and the idmapped workspace layers of root launches.
//!
//! The maps are one id (`inside host 1`) unless an image needs more
//! ([`Subordinate`], see `docs/images.md`): root then writes a range of
//! `/etc/subuid` itself; an unprivileged caller has `newuidmap` and
//! `newgidmap` write its own id and its range.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use crate::launch::error::LaunchError;
use crate::launch::plan::{Extent, Subordinate};
use crate::launch::prepare::LaunchPlan;
use crate::sys::{self, Errno, SysError};

pub(crate) fn write_id_maps(pid: libc::pid_t, p: &LaunchPlan) -> Result<(), SysError> {
    let proc = format!("/proc/{pid}");
    let ids = &p.child.ids;
    let write = |file: &str, data: &str| {
        std::fs::write(format!("{proc}/{file}"), data.as_bytes())
            .map_err(|e| sys::io_err(format!("write(\"{proc}/{file}\", {data:?})"), e))
    };
    if let Some(s) = &ids.subordinate {
        let (uids, gids) = (&s.uid[..s.len], &s.gid[..s.len]);
        if !s.helpers {
            write("uid_map", &Subordinate::lines(uids))?;
            return write("gid_map", &Subordinate::lines(gids));
        }
        return write_maps_with_helpers(pid, uids, gids);
    }
    let Some(maps) = &ids.maps else {
        return Ok(());
    };
    if let Some(setgroups) = maps.setgroups {
        write("setgroups", setgroups)?;
    }
    write("uid_map", &maps.uid_map)?;
    write("gid_map", &maps.gid_map)
}

/// A private id range is held by the sandbox's pid 1 too, so it stays
/// allocated as long as the sandbox lives, whoever launched it.
pub(crate) fn hold_id_range(pid: libc::pid_t, p: &LaunchPlan) -> Result<(), LaunchError> {
    match &p.id_range {
        Some(a) => Ok(a.add_holder(pid)?),
        None => Ok(()),
    }
}

/// `oom_score_adj` of the sandbox (its children inherit it).
pub(crate) fn write_oom_score_adj(pid: libc::pid_t, value: Option<i32>) -> Result<(), SysError> {
    let Some(v) = value else {
        return Ok(());
    };
    let path = format!("/proc/{pid}/oom_score_adj");
    std::fs::write(&path, v.to_string())
        .map_err(|e| sys::io_err(format!("write(\"{path}\", {v})"), e))
}

/// Root launches: each overlay lower becomes an idmapped mount whose
/// on-disk owner is the workload's host id, so the workspace is fully the
/// workload's even when the host directory is root's and mode 0700.
///
/// A filesystem without idmapped mounts (the kernel answers EINVAL; ENOSYS
/// before Linux 5.12) gets the plain detached copy instead, and its path
/// is returned as the second list: the run works wherever the workload's
/// host id may read the workspace (a usual 0755 checkout), and the report
/// says that this layer was not idmapped.
#[allow(clippy::type_complexity)]
pub(crate) fn idmapped_layers(
    pid: libc::pid_t,
    p: &LaunchPlan,
) -> Result<(Vec<(usize, OwnedFd)>, Vec<PathBuf>), LaunchError> {
    let ids = &p.child.ids;
    let mut out = Vec::new();
    let mut without_idmap = Vec::new();
    for (index, path) in &p.idmap_sources {
        let fail = |e: SysError| LaunchError::Idmap {
            path: path.clone(),
            err: e,
        };
        let meta = std::fs::metadata(path)
            .map_err(|e| fail(sys::io_err(format!("stat({})", path.display()), e)))?;
        let (uid, gid) = (
            std::os::unix::fs::MetadataExt::uid(&meta),
            std::os::unix::fs::MetadataExt::gid(&meta),
        );
        let userns: OwnedFd = if uid == ids.inside_uid && gid == ids.inside_gid {
            std::fs::File::open(format!("/proc/{pid}/ns/user"))
                .map(OwnedFd::from)
                .map_err(|e| fail(sys::io_err(format!("open(/proc/{pid}/ns/user)"), e)))?
        } else {
            sys::userns_with_maps(
                &format!("{uid} {} 1", ids.host_uid),
                &format!("{gid} {} 1", ids.host_gid),
            )
            .map_err(fail)?
        };
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
            .expect("validated: no NUL");
        let dir = sys::openat2(None, &c, libc::O_PATH | libc::O_DIRECTORY, 0, 0).map_err(fail)?;
        let tree = sys::open_tree_clone(dir.as_fd(), false).map_err(fail)?;
        match sys::mount_setattr(
            tree.as_fd(),
            false,
            sys::MOUNT_ATTR_IDMAP,
            0,
            Some(userns.as_fd()),
        ) {
            Ok(()) => {}
            Err(e) if matches!(e.errno, Errno::EINVAL | Errno::ENOSYS) => {
                without_idmap.push(path.clone());
            }
            Err(e) => return Err(fail(e)),
        }
        out.push((*index, tree));
    }
    Ok((out, without_idmap))
}

/// Unprivileged subordinate maps: newuidmap/newgidmap write them (they
/// check /etc/subuid and /etc/subgid again, as root).
pub(crate) fn write_maps_with_helpers(
    pid: libc::pid_t,
    uids: &[Extent],
    gids: &[Extent],
) -> Result<(), SysError> {
    for (name, extents) in [("newuidmap", uids), ("newgidmap", gids)] {
        let triples: Vec<(u32, u32, u32)> = extents
            .iter()
            .map(|e| (e.inside, e.host, e.count))
            .collect();
        let call = format!(
            "{name} {pid} {}",
            triples
                .iter()
                .map(|(a, b, c)| format!("{a} {b} {c}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let helper = crate::launch::prepare::subid::helper(name).ok_or_else(|| {
            SysError::new(
                format!("{call} (not found: install package uidmap)"),
                sys::Errno::ENOENT,
            )
        })?;
        crate::launch::prepare::subid::run_helper(&helper, pid, &triples)
            .map_err(|why| SysError::new(format!("{call}: {why}"), sys::Errno::EPERM))?;
    }
    Ok(())
}

/// Root launches: each image layer as a detached, idmapped, read-only,
/// nosuid, nodev mount. The idmapping is the sandbox's own user namespace,
/// so a file the archive gave uid N shows as uid N inside.
pub(crate) fn layer_mounts(
    pid: libc::pid_t,
    p: &LaunchPlan,
) -> Result<Vec<(usize, OwnedFd)>, LaunchError> {
    let plan = &p.child.fs;
    let handed: Vec<usize> = plan
        .image_lowers
        .iter()
        .copied()
        .filter(|i| plan.sources[*i].handed_over)
        .collect();
    if handed.is_empty() {
        return Ok(Vec::new());
    }
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))
        .map(OwnedFd::from)
        .map_err(|e| LaunchError::Sys(sys::io_err(format!("open(/proc/{pid}/ns/user)"), e)))?;
    let attrs = sys::MOUNT_ATTR_IDMAP
        | sys::MOUNT_ATTR_RDONLY
        | sys::MOUNT_ATTR_NOSUID
        | sys::MOUNT_ATTR_NODEV;
    let mut out = Vec::with_capacity(handed.len());
    for i in handed {
        let path = &plan.sources[i].path;
        let fail = |e: SysError| {
            LaunchError::Image(format!(
                "idmapping image layer {}: {e} (the image store's filesystem must support \
                 idmapped mounts, Linux 5.12+: ext4, xfs, btrfs; see `hutch check`)",
                String::from_utf8_lossy(path.as_bytes())
            ))
        };
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let dir = sys::openat2(None, path, flags, 0, 0).map_err(fail)?;
        let tree = sys::open_tree_clone(dir.as_fd(), false).map_err(fail)?;
        sys::mount_setattr(tree.as_fd(), false, attrs, 0, Some(ns.as_fd())).map_err(fail)?;
        out.push((i, tree));
    }
    Ok(out)
}
