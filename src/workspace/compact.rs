//! Compaction: the oldest frozen layers of a session's stack merged into
//! one, so a chain of snapshots never outgrows overlayfs' (and hutch's)
//! lower-layer limit, and a command's lookups do not pay for a deep stack.
//!
//! **When**: after a snapshot or seal leaves more frozen layers than the
//! session's depth (`--compact-depth`, default [`DEFAULT_COMPACT_DEPTH`]),
//! the oldest are merged until half the depth remain; or on demand with
//! `session compact ID [--depth N]`. Never on a command's path.
//!
//! **Exact**: the merged layer over the layers below it shows what the
//! merged ones showed, resolved as overlayfs does (`stack.rs`): the first
//! layer holding a name decides it; whiteouts (char 0/0) are kept; a
//! directory whose lower part was cut off inside the range (an opaque
//! directory, a whiteout or a file below it) becomes opaque
//! (`user.overlay.opaque`, the form the `userxattr` overlay reads);
//! directories keep mode, owner, mtime and their other xattrs. Every
//! non-directory (file, symlink, whiteout, FIFO) is hard-linked from its
//! layer, never copied: the inode is the same, so content, mode, owner,
//! xattrs and the hard links between names of one layer are kept, and
//! the cost is O(entries), not O(bytes). (Where a link is refused, the
//! entry is copied, links between copies recreated.)
//!
//! **Which**: a run of the oldest layers in the shared store. A `seal`
//! ends a run (it is where the default diff starts, so it stays a layer
//! boundary); layers kept in the session (`RW/layers/N`) are not merged.
//! The merged entries of `session.json` stay (ids, names, manifests), the
//! lower ones marked `merged_into` the run's top: those can no longer be
//! rolled back to, forked from or diffed since.
//!
//! **Shared layers**: the merge writes a NEW layer in the store and swaps
//! the session's references to it; the old layers stay for any fork that
//! uses them and go with the sweep when none does.
//!
//! **Crash-safe**: the journal `STATE/ID/compacting` names the new layer
//! before it is made (the sweep counts it as used); the commit point is
//! `session.json` naming it. The next operation on the session removes an
//! uncommitted one (`compact-rolled-back`) or only the journal.
//! `HUTCH_FAULT=compact-built|compact-committed` kills a compaction there.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use serde::Serialize;
use serde_json::json;

use super::error::{Result, WorkspaceError};
use super::info::{LayerKind, SessionInfo};
use super::layers::lstat_opt;
use super::remove::remove_tree;
use super::seal_journal::fault_point;
use super::session::Session;
use super::shared::{COMPACT_JOURNAL, Store};
use super::stack::{Chains, members};
use crate::sys::{self, DirChain, Errno, Meta};
use crate::util::clock::now_ms;

/// Frozen layers a stack keeps before the oldest are compacted.
pub const DEFAULT_COMPACT_DEPTH: usize = 16;
/// The range of `--compact-depth` (hutch's stack holds 62 frozen layers;
/// a freeze may pass the depth by one before it compacts).
pub const COMPACT_DEPTH_RANGE: std::ops::RangeInclusive<usize> = 2..=60;

/// What one [`Session::compact`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompactReport {
    /// Frozen layers on disk before and after.
    pub layers_before: usize,
    pub layers_after: usize,
    /// Each merge: the first and last entry (snapshot id) merged.
    pub merged: Vec<(usize, usize)>,
    /// Entries (files, links, whiteouts, directories) written.
    pub entries: u64,
}

/// The next run of entries to merge (first, last; 1-based, inclusive) so
/// that the stack shrinks toward `target` layers; None when no run of two
/// or more layers can be merged.
fn plan(info: &SessionInfo, target: usize) -> Option<(usize, usize)> {
    let count = info.layer_count();
    if count <= target {
        return None;
    }
    let want = count - target + 1;
    let physical: Vec<_> = info.physical_layers().collect();
    let mut start = 0;
    while start < physical.len() {
        let mut end = start;
        let mut run = 0;
        while end < physical.len() && run < want {
            let l = physical[end];
            if l.layer.is_none() {
                break;
            }
            run += 1;
            end += 1;
            if l.kind == LayerKind::Seal {
                break;
            }
        }
        if run >= 2 {
            let first = if start == 0 { 1 } else { physical[start - 1].index + 1 };
            return Some((first, physical[end - 1].index));
        }
        start = end.max(start + 1);
    }
    None
}

impl Session {
    /// The session's compaction depth.
    pub fn compact_depth(&self) -> usize {
        self.info.compact_depth.unwrap_or(DEFAULT_COMPACT_DEPTH)
    }

    /// `session compact`: merge the oldest frozen layers until at most
    /// `depth` remain (or no more can be merged: see the module
    /// documentation). Takes the session's lock.
    pub fn compact(&mut self, depth: usize) -> Result<CompactReport> {
        let _lock = self.lock()?;
        self.reload_info()?;
        self.compact_locked(depth.max(1))
    }

    /// Compact to at most `target` layers; the caller holds the lock.
    pub(crate) fn compact_locked(&mut self, target: usize) -> Result<CompactReport> {
        let mut report = CompactReport {
            layers_before: self.info.layer_count(),
            ..CompactReport::default()
        };
        while let Some((first, last)) = plan(&self.info, target) {
            report.entries += self.merge(first, last)?;
            report.merged.push((first, last));
        }
        report.layers_after = self.info.layer_count();
        if !report.merged.is_empty() {
            let _ = super::shared::sweep(self.state_fd());
        }
        Ok(report)
    }

    /// After a freeze (lock held): compact when the stack passed the
    /// session's depth, down to half of it. The freeze is committed
    /// already, so a failure is recorded in the audit, not returned.
    pub(crate) fn compact_after_freeze(&mut self) -> Result<()> {
        let depth = self.compact_depth();
        if self.info.layer_count() <= depth {
            return Ok(());
        }
        if let Err(e) = self.compact_locked(depth.div_ceil(2)) {
            self.audit(&json!({
                "event": "compact", "time_unix_ms": now_ms(), "error": e.to_string(),
            }))?;
        }
        Ok(())
    }

    /// Merge entries `first..=last` (whole groups, all in the store) into
    /// one new layer and commit it. Returns the entries written.
    fn merge(&mut self, first: usize, last: usize) -> Result<u64> {
        let id = super::snapshot::random_layer_id()?;
        let cid = CString::new(id.as_str()).expect("hex");
        let sources = self
            .info
            .physical_layers()
            .filter(|s| (first..=last).contains(&s.index))
            .map(|s| s.index)
            .collect::<Vec<_>>();
        {
            let store = Store::lock(self.state_fd())?;
            let _ = sys::unlink_at(self.dir_fd(), COMPACT_JOURNAL, false);
            super::session::write_new(self.dir_fd(), COMPACT_JOURNAL, id.as_bytes(), 0o600)?;
            sys::mkdirat(store.fd(), &cid, 0o700)?;
        }
        let built = (|| {
            // Top first, as overlayfs stacks them.
            let fds = sources
                .iter()
                .rev()
                .map(|n| self.layer_dir(*n))
                .collect::<Result<Vec<OwnedFd>>>()?;
            let store = sys::open_dir_beneath(self.state_fd(), super::shared::STORE)?;
            let dst = sys::open_dir_beneath(store.as_fd(), &cid)?;
            merge_layers(&fds, dst)
        })();
        let entries = match built {
            Ok(n) => n,
            Err(e) => {
                let store = Store::lock(self.state_fd())?;
                let _ = remove_tree(store.fd(), &cid);
                let _ = sys::unlink_at(self.dir_fd(), COMPACT_JOURNAL, false);
                return Err(e);
            }
        };
        fault_point("compact-built");
        // The commit point: the entries name the new layer.
        {
            let _store = Store::lock(self.state_fd())?;
            self.update_info(|i| {
                for s in &mut i.seals {
                    if (first..=last).contains(&s.index) {
                        s.layer = Some(id.clone());
                        s.merged_into = (s.index != last).then_some(last);
                    }
                }
            })?;
            fault_point("compact-committed");
            sys::unlink_at(self.dir_fd(), COMPACT_JOURNAL, false)?;
        }
        self.audit(&json!({
            "event": "compact", "time_unix_ms": now_ms(), "first": first, "last": last,
            "layers_merged": sources.len(), "entries": entries, "layer": id,
        }))?;
        Ok(entries)
    }
}

/// One directory of the merge being filled.
struct Frame {
    /// The source layers contributing to it (bits of `Chains`).
    set: u64,
    /// Names left to merge (popped from the end).
    names: Vec<CString>,
    /// The top contributor's mtime, set once its entries are in.
    mtime: i64,
    /// Its path's length in `path` before its name was pushed.
    path_len: usize,
}

/// Merge `layers` (top first) into the empty directory `dst`, as the
/// overlay shows them. Iterative, with bounded open fds per layer.
/// Returns the entries written.
fn merge_layers(layers: &[OwnedFd], dst: OwnedFd) -> Result<u64> {
    let roots: Vec<BorrowedFd<'_>> = layers.iter().map(|f| f.as_fd()).collect();
    let mut chains = Chains::new(&roots)?;
    let (root_set, root_cut) = chains.root_set(0, roots.len())?;
    let dst_root = dst
        .try_clone()
        .map_err(|e| WorkspaceError::io("dup a directory fd", e))?;
    let mut out = DirChain::new(dst)?;
    let root_meta = sys::fstat(chains.dir(0))?;
    copy_dir_meta(chains.dir(0), out.current(), &root_meta, root_cut)?;
    let mut copies = Copies::default();
    let mut path: Vec<u8> = Vec::new();
    let mut frames = vec![Frame {
        set: root_set,
        names: sorted_desc(chains.names(root_set)?),
        mtime: root_meta.mtime,
        path_len: 0,
    }];
    let mut entries = 0u64;
    while let Some(frame) = frames.last_mut() {
        let Some(name) = frame.names.pop() else {
            let done = frames.pop().expect("non-empty");
            sys::image::set_mtime(out.current(), done.mtime)?;
            if !frames.is_empty() {
                chains.leave(done.set)?;
                out.pop()?;
                path.truncate(done.path_len);
            }
            continue;
        };
        let set = frame.set;
        let mut found = None;
        for i in members(set) {
            if let Some(m) = lstat_opt(chains.dir(i), &name)? {
                found = Some((i, m));
                break;
            }
        }
        let Some((i, meta)) = found else { continue };
        entries += 1;
        let path_len = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name.as_bytes());
        if meta.is_dir() {
            let (child, cut) = chains.enter(set, &name)?;
            let top = members(child).next().expect("layer i holds a directory");
            sys::mkdirat(out.current(), &name, 0o700)?;
            out.push(&name)?;
            let dmeta = sys::fstat(chains.dir(top))?;
            copy_dir_meta(chains.dir(top), out.current(), &dmeta, cut)?;
            frames.push(Frame {
                set: child,
                names: sorted_desc(chains.names(child)?),
                mtime: dmeta.mtime,
                path_len,
            });
        } else {
            copies.place(chains.dir(i), &name, &meta, (dst_root.as_fd(), out.current()), &path)?;
            path.truncate(path_len);
        }
    }
    Ok(entries)
}

fn sorted_desc(names: std::collections::BTreeSet<CString>) -> Vec<CString> {
    names.into_iter().rev().collect()
}

/// Whether an xattr is overlayfs' own (never copied: the merge decides
/// opacity itself).
fn is_overlay_xattr(name: &CStr) -> bool {
    let n = name.to_bytes();
    n.starts_with(b"trusted.overlay.") || n.starts_with(b"user.overlay.")
}

/// Give the new directory `to` the metadata of `from` (mode, owner,
/// xattrs but overlayfs' own) and mark it opaque when `opaque`.
fn copy_dir_meta(from: BorrowedFd<'_>, to: BorrowedFd<'_>, meta: &Meta, opaque: bool) -> Result<()> {
    for (name, value) in sys::list_xattrs(from)? {
        if !is_overlay_xattr(&name) {
            sys::set_xattr(to, &name, &value)?;
        }
    }
    if opaque {
        sys::set_xattr(to, c"user.overlay.opaque", b"y")?;
    }
    let now = sys::fstat(to)?;
    if (now.uid, now.gid) != (meta.uid, meta.gid) {
        sys::fchown(to, meta.uid, meta.gid)?;
    }
    sys::fchmod(to, meta.mode & 0o7777)?;
    Ok(())
}

/// Non-directories placed into the merged layer: hard links to the
/// source's inode; where the kernel refuses one, copies, with the copies
/// of one inode linked together again.
#[derive(Default)]
struct Copies {
    /// (dev, ino) of a copied source → its path in the merged layer.
    copied: HashMap<(u64, u64), Vec<u8>>,
    /// Never link (tests of the fallback).
    copy_only: bool,
}

impl Copies {
    fn place(
        &mut self,
        from: BorrowedFd<'_>,
        name: &CStr,
        meta: &Meta,
        (root, to): (BorrowedFd<'_>, BorrowedFd<'_>),
        path: &[u8],
    ) -> Result<()> {
        if !self.copy_only {
            match sys::image::link_at(from, name, to, name) {
                Ok(()) => return Ok(()),
                Err(e) if matches!(e.errno, Errno::EPERM | Errno::EXDEV | Errno::EMLINK) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(first) = self.copied.get(&(meta.dev, meta.ino)) {
            // Another name of an inode copied before: link the copy.
            let first = CString::new(first.clone()).expect("names have no NUL");
            sys::image::link_at(root, &first, to, name)?;
            return Ok(());
        }
        copy_entry(from, name, meta, to)?;
        if meta.nlink > 1 && !meta.is_dir() {
            self.copied.insert((meta.dev, meta.ino), path.to_vec());
        }
        Ok(())
    }
}

/// Copy one non-directory (file, symlink, whiteout, FIFO) with its mode,
/// owner, mtime and xattrs.
fn copy_entry(from: BorrowedFd<'_>, name: &CStr, meta: &Meta, to: BorrowedFd<'_>) -> Result<()> {
    let shown = || crate::util::quote::display_name(name.to_bytes());
    if meta.is_whiteout() {
        sys::mknod_whiteout(to, name)?;
    } else if meta.is_symlink() {
        let target = sys::readlink_at(from, name)?;
        let target = CString::new(target).map_err(|_| WorkspaceError::Unsupported {
            path: shown(),
            reason: "a link target with a NUL byte".into(),
        })?;
        sys::symlinkat(&target, to, name)?;
    } else if meta.kind() == libc::S_IFIFO {
        sys::mkfifo_at(to, name, meta.mode & 0o7777)?;
    } else if meta.is_file() {
        let src = sys::open_beneath(from, name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        let now = sys::fstat(src.as_fd())?;
        if !now.is_file() || (now.dev, now.ino) != (meta.dev, meta.ino) {
            return Err(WorkspaceError::Unsupported {
                path: shown(),
                reason: "changed while being compacted".into(),
            });
        }
        let dst = sys::image::create_file_at(to, name, 0o600)?;
        let mut reader = std::fs::File::from(src);
        let mut writer = std::fs::File::from(dst);
        std::io::copy(&mut reader, &mut writer)
            .and_then(|_| writer.flush())
            .map_err(|e| WorkspaceError::io(format!("copy {}", shown()), e))?;
        for (x, value) in sys::list_xattrs(reader.as_fd())? {
            sys::set_xattr(writer.as_fd(), &x, &value)?;
        }
        sys::fchown(writer.as_fd(), meta.uid, meta.gid)?;
        sys::fchmod(writer.as_fd(), meta.mode & 0o7777)?;
        sys::image::set_mtime(writer.as_fd(), meta.mtime)?;
        return Ok(());
    } else {
        return Err(WorkspaceError::Unsupported {
            path: shown(),
            reason: format!(
                "a {} cannot be copied into a compacted layer",
                super::changes::special_kind(meta)
            ),
        });
    }
    sys::image::lchown_at(to, name, meta.uid, meta.gid)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    use super::*;

    fn dir(p: &Path) -> OwnedFd {
        sys::open_dir_path(p).unwrap()
    }

    /// What a stack of layers (top first) shows, resolved as overlayfs
    /// does: one line per visible entry (path, kind, mode, content or
    /// target).
    fn view(layers: &[&Path]) -> Vec<String> {
        let fds: Vec<OwnedFd> = layers.iter().map(|p| dir(p)).collect();
        let mut out = Vec::new();
        let roots: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        let mut chains = Chains::new(&roots).unwrap();
        let (set, _) = chains.root_set(0, roots.len()).unwrap();
        walk_view(&mut chains, set, "", &mut out);
        out
    }

    fn walk_view(chains: &mut Chains, set: u64, prefix: &str, out: &mut Vec<String>) {
        for name in chains.names(set).unwrap() {
            let path = format!("{prefix}{}", name.to_str().unwrap());
            let mut found = None;
            for i in members(set) {
                if let Some(m) = lstat_opt(chains.dir(i), &name).unwrap() {
                    found = Some((i, m));
                    break;
                }
            }
            let Some((i, m)) = found else { continue };
            if m.is_whiteout() {
                continue;
            }
            if m.is_dir() {
                let (child, _) = chains.enter(set, &name).unwrap();
                let top = members(child).next().unwrap();
                let x = sys::list_xattrs(chains.dir(top)).unwrap();
                let x: Vec<_> = x.into_iter().filter(|(n, _)| !is_overlay_xattr(n)).collect();
                out.push(format!("{path}/ {:o} {x:?}", m.mode & 0o7777));
                walk_view(chains, child, &format!("{path}/"), out);
                chains.leave(child).unwrap();
            } else if m.is_symlink() {
                let t = sys::readlink_at(chains.dir(i), &name).unwrap();
                out.push(format!("{path} -> {}", String::from_utf8_lossy(&t)));
            } else {
                let data = super::super::layers::read_regular(chains.dir(i), &name, 1 << 20, b"f").unwrap();
                out.push(format!(
                    "{path} {:o} {}",
                    m.mode & 0o7777,
                    String::from_utf8_lossy(&data),
                ));
            }
        }
    }

    /// Three layers over a base: deletions (whiteouts), a directory
    /// replaced by an opaque one, a directory below a file, a file
    /// replaced by a directory, symlinks, modes, a dir xattr, hard links
    /// within a layer. The merged layer over the base shows what the
    /// three did, byte for byte.
    #[test]
    fn merged_layer_shows_what_the_layers_showed() {
        let root = std::env::temp_dir().join(format!("hutch-compact-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let p = |r: &str| root.join(r);
        for d in [
            "base/a", "base/b/deep", "base/c", "l1/a", "l1/newdir", "l2/b", "l2/c", "l3/a",
            "l3/newdir/sub", "merged",
        ] {
            std::fs::create_dir_all(p(d)).unwrap();
        }
        for (f, c) in [
            ("base/a/x", "x"),
            ("base/a/y", "y"),
            ("base/b/deep/z", "z"),
            ("base/c/keep", "keep"),
            ("base/f", "file-becomes-dir"),
            ("l1/a/x", "x1"),
            ("l1/newdir/n", "n1"),
            ("l1/h1", "hard"),
            ("l2/b/only", "b2"),
            ("l2/c/added", "c2"),
            ("l3/a/x", "x3"),
            ("l3/newdir/sub/s", "s3"),
        ] {
            std::fs::write(p(f), c).unwrap();
        }
        std::fs::hard_link(p("l1/h1"), p("l1/h2")).unwrap();
        std::fs::hard_link(p("l1/h1"), p("l1/h3")).unwrap();
        std::fs::set_permissions(p("l3/a/x"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("a/x", p("l2/link")).unwrap();
        // l1 deletes a/y and f; l2 makes b opaque; l3 deletes l1's h2,
        // turns f into a directory, re-adds y.
        sys::mknod_whiteout(dir(&p("l1/a")).as_fd(), c"y").unwrap();
        sys::mknod_whiteout(dir(&p("l1")).as_fd(), c"f").unwrap();
        sys::set_xattr(dir(&p("l2/b")).as_fd(), c"user.overlay.opaque", b"y").unwrap();
        sys::set_xattr(dir(&p("l2/c")).as_fd(), c"user.note", b"kept").unwrap();
        sys::mknod_whiteout(dir(&p("l3")).as_fd(), c"h2").unwrap();
        std::fs::create_dir(p("l3/f")).unwrap();
        std::fs::write(p("l3/f/inside"), "in").unwrap();
        std::fs::write(p("l3/a/y"), "y3").unwrap();
        std::fs::set_permissions(p("l3/newdir"), std::fs::Permissions::from_mode(0o750)).unwrap();
        let before = view(&[&p("l3"), &p("l2"), &p("l1"), &p("base")]);
        let layers = [dir(&p("l3")), dir(&p("l2")), dir(&p("l1"))];
        let n = merge_layers(&layers, dir(&p("merged"))).unwrap();
        assert!(n > 10, "{n} entries");
        let after = view(&[&p("merged"), &p("base")]);
        assert_eq!(after, before);
        // Nothing of what the layers deleted shows.
        let text = after.join("\n");
        assert!(!text.contains("b/deep") && !text.contains("h2"), "{text}");
        assert!(text.contains("c/ 755 [(\"user.note\""), "{text}");
        // b is opaque in the merged layer; f (a file below) too.
        for d in ["merged/b", "merged/f"] {
            let v = sys::get_xattr(dir(&p(d)).as_fd(), c"user.overlay.opaque").unwrap();
            assert_eq!(v.as_deref(), Some(&b"y"[..]), "{d}");
        }
        // Not opaque where the base must still show through.
        let v = sys::get_xattr(dir(&p("merged/a")).as_fd(), c"user.overlay.opaque").unwrap();
        assert_eq!(v, None);
        // Files are the layers' own inodes: never copied.
        let ino = |f: &str| std::fs::symlink_metadata(p(f)).unwrap().ino();
        assert_eq!(ino("merged/a/x"), ino("l3/a/x"));
        assert_eq!(ino("merged/h1"), ino("l1/h1"));
        assert_eq!(ino("merged/h1"), ino("merged/h3"));
        // Whiteouts stay (they hide the base).
        let m = sys::lstat_at(dir(&p("merged")).as_fd(), c"h2").unwrap();
        assert!(m.is_whiteout());
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Hard links between names of one layer survive the copy fallback.
    #[test]
    fn copies_keep_hard_links_between_names() {
        let root = std::env::temp_dir().join(format!("hutch-compact-copy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("src/d")).unwrap();
        std::fs::create_dir_all(root.join("dst/d")).unwrap();
        std::fs::write(root.join("src/d/a"), "same").unwrap();
        std::fs::hard_link(root.join("src/d/a"), root.join("src/d/b")).unwrap();
        let src = dir(&root.join("src/d"));
        let dst_root = dir(&root.join("dst"));
        let dst = dir(&root.join("dst/d"));
        let mut copies = Copies {
            copy_only: true,
            ..Copies::default()
        };
        for (name, path) in [(c"a", &b"d/a"[..]), (c"b", &b"d/b"[..])] {
            let meta = sys::lstat_at(src.as_fd(), name).unwrap();
            copies
                .place(src.as_fd(), name, &meta, (dst_root.as_fd(), dst.as_fd()), path)
                .unwrap();
        }
        let ino = |f: &str| std::fs::metadata(root.join(f)).unwrap().ino();
        assert_eq!(ino("dst/d/a"), ino("dst/d/b"));
        assert_ne!(ino("dst/d/a"), ino("src/d/a"));
        assert_eq!(std::fs::read(root.join("dst/d/b")).unwrap(), b"same");
        let _ = std::fs::remove_dir_all(&root);
    }
}
