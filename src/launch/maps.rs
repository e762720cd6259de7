//! What the supervisor does for the sandbox once it exists and before
//! `Go`: the id maps, and the idmapped workspace layers of root launches.
//!
//! The maps are one id (`inside host 1`) unless an image needs more
//! ([`Subordinate`], see `docs/images.md`): root then writes a range of
//! `/etc/subuid` itself; an unprivileged caller has `newuidmap` and
//! `newgidmap` write its own id and its range.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use super::LaunchError;
use super::prepare::LaunchPlan;
use crate::sys::{self, Errno, SysError};

/// One line of a uid or gid map: `inside host count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extent {
    pub inside: u32,
    pub host: u32,
    pub count: u32,
}

/// Maps with more than one id, from a subordinate range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subordinate {
    /// The extents of the uid and gid maps (`len` of each used).
    pub uid: [Extent; 2],
    pub gid: [Extent; 2],
    pub len: usize,
    /// Unprivileged: written by newuidmap/newgidmap, and the caller's own
    /// id is root inside (so hutch init keeps its capabilities when it
    /// switches to the workload's uid).
    pub helpers: bool,
}

impl Subordinate {
    /// The host id inside id `id` maps to, if any.
    pub fn host_of(extents: &[Extent], id: u32) -> Option<u32> {
        extents
            .iter()
            .find(|e| id >= e.inside && id - e.inside < e.count)
            .map(|e| e.host + (id - e.inside))
    }

    fn lines(extents: &[Extent]) -> String {
        extents
            .iter()
            .map(|e| format!("{} {} {}\n", e.inside, e.host, e.count))
            .collect()
    }
}

pub(super) fn write_id_maps(pid: libc::pid_t, p: &LaunchPlan) -> Result<(), SysError> {
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
        return super::image::write_maps_with_helpers(pid, uids, gids);
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

/// `oom_score_adj` of the sandbox (its children inherit it).
pub(super) fn write_oom_score_adj(pid: libc::pid_t, value: Option<i32>) -> Result<(), SysError> {
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
pub(super) fn idmapped_layers(
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
