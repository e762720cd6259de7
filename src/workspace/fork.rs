//! `session fork`: new sessions over a session's frozen layers.
//!
//! A child's lowers are its parent's layers up to a snapshot and the
//! parent's baseline, all read-only in the state directory's shared store
//! (`shared.rs`); nothing of the workspace is copied. The parent's
//! baseline moves into the store (`base-ID`, one rename) at its first
//! fork. Each child has its own empty upper, lock, audit, budget and
//! deadline, and records its `parent`. Its manifests of the inherited
//! layers (`seals/N`) are hard links to the parent's. A child appears atomically (built in `.creating-ID`, renamed)
//! while the store's lock is held, so a sweep never sees it half-made.

use std::ffi::CString;
use std::os::fd::AsFd;

use serde_json::json;

use super::disk::DiskMechanism;
use super::error::{Result, WorkspaceError};
use super::info::{LayerKind, ROOT_LAUNCH_UID};
use super::layers::lstat_opt;
use super::remove::remove_tree;
use super::seal::FreezeKind;
use super::seal_journal::seal_name;
use super::session::{Session, StateDir, write_new};
use super::shared::{Store, baseline_name};
use crate::sys;
use crate::util::clock::now_ms;

/// Most children one fork makes.
pub const MAX_FORK_COUNT: usize = 256;

/// Options of [`StateDir::fork`].
#[derive(Debug, Clone)]
pub struct ForkOptions {
    /// The snapshot to start from (number or name); None: a snapshot of
    /// now (the last layer when nothing changed since it).
    pub from: Option<String>,
    /// How many children.
    pub count: usize,
    /// The children's lifetime (default: the parent's deadline).
    pub deadline: Option<std::time::Duration>,
    /// The children's command budget each (default: the parent's cap).
    pub max_commands: Option<u64>,
}

impl Default for ForkOptions {
    fn default() -> Self {
        ForkOptions {
            from: None,
            count: 1,
            deadline: None,
            max_commands: None,
        }
    }
}

/// What [`StateDir::fork`] made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ForkReport {
    pub parent: String,
    /// The snapshot the children start from.
    pub snapshot: usize,
    /// The new sessions' ids.
    pub children: Vec<String>,
}

impl StateDir {
    /// Fork session `id` into `opts.count` new sessions (see the module
    /// documentation). Waits for the parent's lock (a command running in
    /// it ends first).
    pub fn fork(&self, id: &str, opts: &ForkOptions) -> Result<ForkReport> {
        if opts.count == 0 || opts.count > MAX_FORK_COUNT {
            return Err(WorkspaceError::BadPath {
                path: format!("--count {}", opts.count),
                reason: format!("a fork makes 1 to {MAX_FORK_COUNT} sessions"),
            });
        }
        let mut parent = self.open_session(id)?.with_wait(true);
        if parent.info.disk.map(|d| d.mechanism) == Some(DiskMechanism::LoopExt4) {
            return Err(fork_refused(
                id,
                "its layers live on its own disk image (--disk-max as root); \
                 create it with --disk-max-preferred or without a quota to fork it",
            ));
        }
        let _lock = parent.lock()?;
        parent.reload_info()?;
        let snapshot = match &opts.from {
            Some(s) => {
                let n = parent.resolve_snapshot(s)?;
                super::compact_journal::check_whole(&parent.info, n, "fork --from")?;
                n
            }
            None => {
                let upper = sys::open_dir_beneath(parent.rw()?.as_fd(), c"upper")?;
                let unchanged = sys::list_dir(upper.as_fd())?.is_empty();
                match parent.info.seals.last() {
                    Some(last) if unchanged => last.index,
                    _ => {
                        parent
                            .freeze(&FreezeKind {
                                kind: LayerKind::Snapshot,
                                name: None,
                                network_none: false,
                            })?
                            .index
                    }
                }
            }
        };
        if let Some(s) = parent.info.seals[..snapshot]
            .iter()
            .find(|s| s.layer.is_none())
        {
            return Err(fork_refused(
                id,
                &format!(
                    "its layer {} is kept in the session, not in the shared store \
                     (made by an earlier hutch)",
                    s.index
                ),
            ));
        }
        let store = Store::lock(self.fd())?;
        // The parent's baseline into the store, once (one rename).
        let origin = parent
            .info
            .baseline_origin
            .clone()
            .unwrap_or_else(|| parent.info.id.clone());
        let base = baseline_name(&origin);
        if parent.info.baseline_origin.is_none()
            && lstat_opt(parent.dir_fd(), c"baseline")?.is_some()
        {
            // Moving a directory to another parent rewrites its `..`:
            // the (0555) baseline must be writable for that.
            let baseline = sys::open_dir_beneath(parent.dir_fd(), c"baseline")?;
            sys::fchmod(baseline.as_fd(), 0o755)?;
            sys::rename_at(parent.dir_fd(), c"baseline", store.fd(), &base)?;
            sys::fchmod(baseline.as_fd(), 0o555)?;
        }
        if lstat_opt(store.fd(), &base)?.is_none() {
            return Err(WorkspaceError::State {
                path: self.path.join(".layers").join(base.to_string_lossy().as_ref()),
                reason: "the parent's baseline is missing".into(),
            });
        }
        let mut children = Vec::with_capacity(opts.count);
        let mut result = Ok(());
        for _ in 0..opts.count {
            match self.make_child(&parent, snapshot, &origin, opts) {
                Ok(child) => children.push(child),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        drop(store);
        if let Err(e) = result {
            // All or none.
            for c in &children {
                let _ = self.close(c, true);
            }
            return Err(e);
        }
        parent.audit(&json!({
            "event": "fork", "time_unix_ms": now_ms(), "snapshot": snapshot,
            "children": children,
        }))?;
        Ok(ForkReport {
            parent: id.to_string(),
            snapshot,
            children,
        })
    }

    /// One child of `parent` over its layers 1..=`snapshot` (the store's
    /// lock held).
    fn make_child(
        &self,
        parent: &Session,
        snapshot: usize,
        origin: &str,
        opts: &ForkOptions,
    ) -> Result<String> {
        let id = super::snapshot::random_layer_id()?;
        let tmp = CString::new(format!(".creating-{id}")).expect("hex");
        sys::mkdirat(self.fd(), &tmp, 0o700)?;
        let built = (|| {
            let dir = sys::open_dir_beneath(self.fd(), &tmp)?;
            let now = now_ms();
            sys::mkdirat(dir.as_fd(), c"seals", 0o700)?;
            let seals = sys::open_dir_beneath(dir.as_fd(), c"seals")?;
            let parent_seals = sys::open_dir_beneath(parent.dir_fd(), c"seals")?;
            for n in 1..=snapshot {
                // A hard link: the manifest is never written again (a
                // rollback unlinks it), so sharing it costs no disk.
                let name = seal_name(n);
                match lstat_opt(parent_seals.as_fd(), &name)? {
                    Some(m) if m.is_file() => {}
                    _ => {
                        return Err(WorkspaceError::State {
                            path: parent.path.join("seals").join(name.to_string_lossy().as_ref()),
                            reason: "is missing or not a regular file".into(),
                        });
                    }
                }
                sys::image::link_at(parent_seals.as_fd(), &name, seals.as_fd(), &name)?;
            }
            for sub in [c"upper", c"work", c"layers"] {
                sys::mkdirat(dir.as_fd(), sub, 0o755)?;
            }
            if sys::geteuid() == 0 {
                for sub in [c"upper", c"work"] {
                    let fd = sys::open_dir_beneath(dir.as_fd(), sub)?;
                    sys::fchown(fd.as_fd(), ROOT_LAUNCH_UID, ROOT_LAUNCH_UID)?;
                }
            }
            let p = &parent.info;
            let mut info = p.clone();
            info.id = id.clone();
            info.created_unix_ms = now;
            info.used_unix_ms = now;
            info.commands_run = 0;
            info.running = None;
            info.seals.truncate(snapshot);
            info.disk_usage = None;
            info.parent = Some(p.id.clone());
            info.baseline_origin = Some(origin.to_string());
            if let Some(d) = opts.deadline {
                info.deadline_unix_ms = Some(now.saturating_add(d.as_millis() as u64));
            }
            if let Some(m) = opts.max_commands {
                info.max_commands = Some(m);
            }
            write_new(dir.as_fd(), c"audit.jsonl", b"", 0o600)?;
            let line = super::json::json_line(&json!({
                "event": "create", "time_unix_ms": now, "session": id,
                "parent": p.id, "snapshot": snapshot, "fingerprint": info.fingerprint,
                "workspace_path": info.workspace_path, "disk": info.disk,
                "deadline_unix_ms": info.deadline_unix_ms, "max_commands": info.max_commands,
                "image": info.image.as_ref().and_then(|m| m.digest.as_deref()),
            }))?;
            let audit = sys::open_beneath(
                dir.as_fd(),
                c"audit.jsonl",
                libc::O_WRONLY | libc::O_APPEND,
                0,
            )?;
            std::io::Write::write_all(&mut std::fs::File::from(audit), &line)
                .map_err(|e| WorkspaceError::io("write audit.jsonl", e))?;
            write_new(dir.as_fd(), c"lock", b"", 0o600)?;
            let text = serde_json::to_vec_pretty(&info)
                .map_err(|e| WorkspaceError::io("encode session.json", e.into()))?;
            write_new(dir.as_fd(), c"session.json", &text, 0o600)?;
            Ok(())
        })();
        if let Err(e) = built {
            let _ = remove_tree(self.fd(), &tmp);
            return Err(e);
        }
        let name = CString::new(id.as_str()).expect("hex");
        sys::rename_at(self.fd(), &tmp, self.fd(), &name)?;
        if let Some(image) = &parent.info.image
            && let Err(e) = crate::image::spec::hold_for(image, &self.path.join(&id))
        {
            let _ = self.trash(&name, &id);
            return Err(WorkspaceError::Image(e));
        }
        // The child's layers are the parent's, owned by its id range: the
        // child holds the same range (released when the last one closes).
        if let Some(start) = parent.info.id_range_start
            && let Err(e) = crate::launch::prepare_range::share_with_session(
                start,
                &parent.path,
                &self.path.join(&id),
            )
        {
            let _ = self.trash(&name, &id);
            return Err(e.into());
        }
        Ok(id)
    }
}

fn fork_refused(id: &str, why: &str) -> WorkspaceError {
    WorkspaceError::Unsupported {
        path: format!("session {id}"),
        reason: format!("cannot be forked: {why}"),
    }
}
