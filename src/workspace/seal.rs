//! `session seal`: the current upper becomes a read-only layer above the
//! baseline (and earlier seals), and a fresh upper starts.
//!
//! Cost O(changes): the layer's manifest hashes only what changed since
//! the last seal, and the upper is renamed into place, never copied.
//!
//! Atomic: the commit point is `session.json` naming the new seal. Before
//! it, `RW/layers/N` (N one past the recorded seals) is an uncommitted
//! seal, and the next operation on the session (under its lock) rolls it
//! back: the fresh upper, empty since no command can have run, is removed
//! and the layer renamed back to `upper`. A crash therefore leaves the
//! session as it was before the seal.

use std::ffi::{CStr, CString};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::sys::{self, Errno};
use crate::util::clock::now_ms;
use crate::util::quote::display_name;

use super::changes::{ChangeRef, SideRef, walk};
use super::disk::DiskMechanism;
use super::error::{Result, WorkspaceError};
use super::manifest::{Manifest, ManifestEntry, fingerprint, git_file_mode};
use super::remove::remove_tree;
use super::session::{ROOT_LAUNCH_UID, SealInfo, Session};
use super::stack::MAX_LAYERS;

/// Mode of a deletion line in a seal manifest.
pub const MODE_DELETED: u32 = 0;

/// Test hook: `HUTCH_FAULT=NAME` kills the process with SIGKILL at the
/// point `NAME` (to test what a crash there leaves behind).
pub(crate) fn fault_point(name: &str) {
    if std::env::var_os("HUTCH_FAULT").is_some_and(|v| v == name) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

/// sha256, size and git mode of one side of a change (read through the
/// fd the walk found, never following a link).
fn digest(side: &SideRef<'_>, path: &[u8]) -> Result<([u8; 32], u64, u32)> {
    if side.meta.is_symlink() {
        let target = sys::readlink_at(side.dir, side.name)?;
        return Ok((
            Sha256::digest(&target).into(),
            target.len() as u64,
            super::manifest::MODE_LINK,
        ));
    }
    let fd = sys::open_beneath(side.dir, side.name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
    let now = sys::fstat(fd.as_fd())?;
    if !now.is_file() || (now.dev, now.ino) != (side.meta.dev, side.meta.ino) {
        return Err(WorkspaceError::Unsupported {
            path: display_name(path),
            reason: "changed while being sealed".into(),
        });
    }
    let mut file = std::fs::File::from(fd);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| WorkspaceError::io(format!("read {}", display_name(path)), e))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    Ok((h.finalize().into(), size, git_file_mode(now.mode & 0o777)))
}

/// The manifest of the changes since the last seal: changed and added
/// files and links as the baseline's manifest lists them, deletions with
/// mode 0.
fn changes_manifest(c: &ChangeRef<'_>, out: &mut Manifest) -> Result<()> {
    let new = c.new.map(|s| digest(&s, c.path)).transpose()?;
    if let (Some(n), Some(o)) = (&new, &c.old)
        && n.1 == o.meta.size
        && digest(o, c.path)? == *n
    {
        // Copied up, unchanged.
        return Ok(());
    }
    out.entries.push(match new {
        Some((sha256, size, mode)) => ManifestEntry {
            path: c.path.to_vec(),
            mode,
            size,
            sha256,
        },
        None => ManifestEntry {
            path: c.path.to_vec(),
            mode: MODE_DELETED,
            size: 0,
            sha256: [0; 32],
        },
    });
    Ok(())
}

fn seal_name(n: usize) -> CString {
    CString::new(n.to_string()).expect("digits")
}

fn exists(dir: BorrowedFd<'_>, name: &CStr) -> Result<bool> {
    Ok(super::layers::lstat_opt(dir, name)?.is_some())
}

impl Session {
    /// Seal the session (see the module documentation). With
    /// `network_none`, no later command may have egress.
    pub fn seal(&mut self, network_none: bool) -> Result<SealInfo> {
        let _lock = self.lock()?;
        self.update_info(|_| {})?;
        let n = self.info.seals.len() + 1;
        if n + 2 > MAX_LAYERS {
            return Err(WorkspaceError::Budget {
                id: self.info.id.clone(),
                reason: format!("a session holds at most {} seals", MAX_LAYERS - 2),
            });
        }
        let layers = self.layers_since(super::session::Since::LastSeal)?;
        let mut manifest = Manifest::default();
        walk(&layers, &mut |c: &ChangeRef<'_>| {
            changes_manifest(c, &mut manifest)
        })?;
        drop(layers);
        let text = manifest.render();
        let fp = fingerprint(&text);
        let rw = self.rw()?;
        let seals = sys::open_dir_beneath(self.dir_fd(), c"seals")?;
        let name = seal_name(n);
        let _ = sys::unlink_at(seals.as_fd(), c".tmp", false);
        super::session::write_new(seals.as_fd(), c".tmp", &text, 0o400)?;
        sys::rename_at(seals.as_fd(), c".tmp", seals.as_fd(), &name)?;
        fault_point("seal-manifest");
        let layers_dir = sys::open_dir_beneath(rw.as_fd(), c"layers")?;
        sys::rename_at(rw.as_fd(), c"upper", layers_dir.as_fd(), &name)?;
        fault_point("seal-renamed");
        sys::mkdirat(rw.as_fd(), c"upper", 0o755)?;
        if sys::geteuid() == 0 {
            let fd = sys::open_dir_beneath(rw.as_fd(), c"upper")?;
            sys::fchown(fd.as_fd(), ROOT_LAUNCH_UID, ROOT_LAUNCH_UID)?;
        }
        fault_point("seal-fresh-upper");
        let disk_bytes = match self.info.disk.map(|d| d.mechanism) {
            Some(DiskMechanism::Accounted) => {
                let layer = sys::open_dir_beneath(layers_dir.as_fd(), &name)?;
                super::disk::allocated_bytes(layer.as_fd())?
            }
            _ => 0,
        };
        let seal = SealInfo {
            index: n,
            time_unix_ms: now_ms(),
            fingerprint: fp,
            changes: manifest.entries.len(),
            network_none,
            disk_bytes,
        };
        // The commit point.
        self.update_info(|i| {
            i.seals.push(seal.clone());
            i.network_sealed |= network_none;
            i.used_unix_ms = seal.time_unix_ms;
        })?;
        fault_point("seal-committed");
        self.audit(&json!({
            "event": "seal", "time_unix_ms": seal.time_unix_ms, "seal": n,
            "fingerprint": seal.fingerprint, "changes": seal.changes,
            "network_none": network_none, "network_sealed": self.info.network_sealed,
        }))?;
        Ok(seal)
    }

    /// The manifest text of seal `n`.
    pub fn seal_manifest(&self, n: usize) -> Result<Vec<u8>> {
        let seals = sys::open_dir_beneath(self.dir_fd(), c"seals")?;
        super::layers::read_regular(seals.as_fd(), &seal_name(n), 1 << 30, b"seal manifest")
    }
}

/// Roll back a seal that did not reach its commit point (see the module
/// documentation). `seals` is the number of committed seals; the caller
/// holds the session lock. Returns whether there was one.
pub(crate) fn recover(dir: BorrowedFd<'_>, rw: BorrowedFd<'_>, seals: usize) -> Result<bool> {
    let pending = seal_name(seals + 1);
    let layers_dir = sys::open_dir_beneath(rw, c"layers")?;
    let mut recovered = false;
    if exists(layers_dir.as_fd(), &pending)? {
        if exists(rw, c"upper")? {
            let upper = sys::open_dir_beneath(rw, c"upper")?;
            if !sys::list_dir(upper.as_fd())?.is_empty() {
                return Err(WorkspaceError::State {
                    path: "upper".into(),
                    reason: format!(
                        "an unfinished seal {} left a non-empty upper beside its layer",
                        seals + 1
                    ),
                });
            }
            drop(upper);
            remove_tree(rw, c"upper")?;
        }
        sys::rename_at(layers_dir.as_fd(), &pending, rw, c"upper")?;
        recovered = true;
    } else if !exists(rw, c"upper")? {
        return Err(WorkspaceError::State {
            path: "upper".into(),
            reason: "is missing".into(),
        });
    }
    let seals_dir = sys::open_dir_beneath(dir, c"seals")?;
    for name in [pending.as_c_str(), c".tmp"] {
        match sys::unlink_at(seals_dir.as_fd(), name, false) {
            Ok(()) => recovered = true,
            Err(e) if e.errno == Errno::ENOENT => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(recovered)
}
