//! The builder's state while it executes a plan: the new root, the host
//! sources, where the staging tmpfs is. Its steps are methods written in
//! `build.rs` (the root), `build/mounts.rs` and `claim.rs` (overlays
//! staged for a warm claim).

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::syscalls::FsSys;

/// Where the child stages the new root in its private copy of the host
/// tree. Host sources are opened before this is covered.
pub(super) const STAGING: &CStr = c"/tmp";
pub(super) const STAGING_ROOT: &CStr = c"/tmp/root";

pub(super) struct Builder<'a, S: FsSys> {
    pub(super) sys: &'a mut S,
    pub(super) root: OwnedFd,
    pub(super) source_fds: Vec<Option<OwnedFd>>,
    /// Warm sandboxes: (step, detached mount of a host upper's directory).
    pub(super) holders: Vec<(usize, OwnedFd)>,
    pub(super) host_dev: Option<OwnedFd>,
    pub(super) scratch: usize,
    /// The device tmpfs of `device` steps is mounted.
    pub(super) nodes_mounted: bool,
    /// Per source: where a recursive bind of it holds a copy of the
    /// staging tmpfs (relative to the bind; `/` → `tmp`, `/tmp` → ``),
    /// None for the sources that do not hold `/tmp`.
    pub(super) staging_in_source: Vec<Option<CString>>,
    /// Mode of the parent directories a step creates (bubblewrap's: 0755,
    /// less the group's or others' bits when the step's own mode gives
    /// them nothing).
    pub(super) parent_mode: u32,
}

/// Where a recursive bind of `source` (a host path) holds the staging
/// tmpfs, mounted at [`STAGING`] in this mount namespace: the path of
/// `/tmp` relative to `source` when `source` is `/tmp` or an ancestor.
pub(super) fn staging_under(source: &[u8]) -> Option<CString> {
    let staging = STAGING.to_bytes();
    let src = source.strip_suffix(b"/").unwrap_or(source);
    let rest = staging.strip_prefix(src)?;
    if !rest.is_empty() && !rest.starts_with(b"/") {
        return None;
    }
    let rel = rest.strip_prefix(b"/").unwrap_or(rest);
    Some(CString::new(rel).expect("no NUL"))
}

/// A directory found inside the new root: the root itself (borrowed from
/// the builder) or one the builder opened.
pub(super) enum Dir {
    Root,
    Opened(OwnedFd),
}

pub(super) fn dir_fd<'a>(root: &'a OwnedFd, d: &'a Dir) -> BorrowedFd<'a> {
    match d {
        Dir::Root => root.as_fd(),
        Dir::Opened(fd) => fd.as_fd(),
    }
}
