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

use std::io::Read;
use std::os::fd::AsFd;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::sys;
use crate::util::clock::now_ms;
use crate::util::quote::display_name;

use super::changes::{ChangeRef, SideRef, walk};
use super::disk::DiskMechanism;
use super::error::{Result, WorkspaceError};
use super::info::{LayerKind, ROOT_LAUNCH_UID, SealInfo};
use super::shared::{FREEZE_JOURNAL, Store};
use super::manifest::{Manifest, ManifestEntry, fingerprint, git_file_mode};
pub(crate) use super::seal_journal::fault_point;
use super::seal_journal::seal_name;
use super::session::Session;
use super::stack::MAX_LAYERS;

/// Mode of a deletion line in a seal manifest.
pub const MODE_DELETED: u32 = 0;

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

/// What a freeze records beside the layer.
#[derive(Debug, Clone, Default)]
pub(crate) struct FreezeKind {
    pub kind: LayerKind,
    pub name: Option<String>,
    pub network_none: bool,
}

impl Session {
    /// Seal the session (see the module documentation). With
    /// `network_none`, no later command may have egress.
    pub fn seal(&mut self, network_none: bool) -> Result<SealInfo> {
        let _lock = self.lock()?;
        self.freeze(&FreezeKind {
            kind: LayerKind::Seal,
            name: None,
            network_none,
        })
    }

    /// Freeze the upper into a new read-only layer (a seal or a
    /// snapshot) and start a fresh upper. The caller holds the lock.
    ///
    /// Where the session's writable layers share the state directory's
    /// filesystem (no disk image), the layer goes to the shared store
    /// (`shared.rs`), so forks can use it: the freeze journal names it
    /// before the upper is renamed there, and `snapshot_journal::recover`
    /// undoes a freeze whose commit point (`session.json`) was not reached.
    pub(crate) fn freeze(&mut self, what: &FreezeKind) -> Result<SealInfo> {
        self.update_info(|_| {})?;
        let n = self.info.seals.len() + 1;
        if self.info.layer_count() + 3 > MAX_LAYERS {
            return Err(WorkspaceError::Budget {
                id: self.info.id.clone(),
                reason: format!(
                    "a session holds at most {} seals and snapshots (overlayfs' layer limit); \
                     compact it (`hutch session compact`), roll back to an earlier snapshot \
                     or fork from one",
                    MAX_LAYERS - 2
                ),
            });
        }
        if let Some(name) = &what.name {
            check_name(name)?;
            if self.info.seals.iter().any(|s| s.name.as_deref() == Some(name)) {
                return Err(WorkspaceError::BadPath {
                    path: format!("--name {name}"),
                    reason: "names another snapshot of the session already".into(),
                });
            }
        }
        // What rollbacks set aside (their removal was deferred to here).
        super::snapshot_journal::remove_discarded(self.rw()?.as_fd())?;
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
        let shared = self.info.disk.map(|d| d.mechanism) != Some(DiskMechanism::LoopExt4);
        let mut store = None;
        let layer_id = if shared {
            let id = super::snapshot::random_layer_id()?;
            let lock = Store::lock(self.state_fd())?;
            let _ = sys::unlink_at(self.dir_fd(), FREEZE_JOURNAL, false);
            super::session::write_new(self.dir_fd(), FREEZE_JOURNAL, id.as_bytes(), 0o600)?;
            let cid = std::ffi::CString::new(id.as_str()).expect("hex");
            sys::rename_at(rw.as_fd(), c"upper", lock.fd(), &cid)?;
            store = Some(lock);
            Some(id)
        } else {
            let layers_dir = sys::open_dir_beneath(rw.as_fd(), c"layers")?;
            sys::rename_at(rw.as_fd(), c"upper", layers_dir.as_fd(), &name)?;
            None
        };
        fault_point("seal-renamed");
        sys::mkdirat(rw.as_fd(), c"upper", 0o755)?;
        if sys::geteuid() == 0 {
            let fd = sys::open_dir_beneath(rw.as_fd(), c"upper")?;
            sys::fchown(fd.as_fd(), ROOT_LAUNCH_UID, ROOT_LAUNCH_UID)?;
        }
        fault_point("seal-fresh-upper");
        let disk_bytes = match self.info.disk.map(|d| d.mechanism) {
            Some(DiskMechanism::Accounted) => {
                let layer = match (&layer_id, &store) {
                    (Some(id), Some(st)) => sys::open_dir_beneath(
                        st.fd(),
                        &std::ffi::CString::new(id.as_str()).expect("hex"),
                    )?,
                    _ => {
                        let layers_dir = sys::open_dir_beneath(rw.as_fd(), c"layers")?;
                        sys::open_dir_beneath(layers_dir.as_fd(), &name)?
                    }
                };
                super::disk::allocated_bytes(layer.as_fd())?
            }
            _ => 0,
        };
        let seal = SealInfo {
            index: n,
            time_unix_ms: now_ms(),
            fingerprint: fp,
            changes: manifest.entries.len(),
            network_none: what.network_none,
            disk_bytes,
            kind: what.kind,
            name: what.name.clone(),
            layer: layer_id,
            bytes: manifest.entries.iter().map(|e| e.size).sum(),
            session: Some(self.info.id.clone()),
            merged_into: None,
        };
        // The commit point.
        self.update_info(|i| {
            i.seals.push(seal.clone());
            i.network_sealed |= what.network_none;
            i.used_unix_ms = seal.time_unix_ms;
        })?;
        fault_point("seal-committed");
        if store.is_some() {
            sys::unlink_at(self.dir_fd(), FREEZE_JOURNAL, false)?;
        }
        drop(store);
        let mut event = json!({
            "event": match what.kind { LayerKind::Seal => "seal", LayerKind::Snapshot => "snapshot" },
            "time_unix_ms": seal.time_unix_ms, "seal": n,
            "fingerprint": seal.fingerprint, "changes": seal.changes, "bytes": seal.bytes,
        });
        match what.kind {
            LayerKind::Seal => {
                event["network_none"] = what.network_none.into();
                event["network_sealed"] = self.info.network_sealed.into();
            }
            LayerKind::Snapshot => {
                event["snapshot"] = n.into();
                event["name"] = what.name.clone().into();
            }
        }
        self.audit(&event)?;
        self.compact_after_freeze()?;
        Ok(seal)
    }

    /// The manifest text of seal `n`.
    pub fn seal_manifest(&self, n: usize) -> Result<Vec<u8>> {
        let seals = sys::open_dir_beneath(self.dir_fd(), c"seals")?;
        super::layers::read_regular(seals.as_fd(), &seal_name(n), 1 << 30, b"seal manifest")
    }
}

/// A snapshot's name: 1 to 64 of `A-Za-z0-9._-`, not all digits (a number
/// is a snapshot's id).
pub(crate) fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !name.bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(WorkspaceError::BadPath {
            path: format!("--name {}", display_name(name.as_bytes())),
            reason: "a snapshot name is 1 to 64 of A-Z a-z 0-9 . _ - and not a number".into(),
        })
    }
}
