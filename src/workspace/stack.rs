//! Walking a stack of overlay layers (top first: the upper, sealed layers
//! newest first, the baseline) the way overlayfs merges them, through one
//! [`DirChain`] per layer: at most [`DirChain::WINDOW`] fds per layer and
//! one path in memory, whatever the depth.
//!
//! A directory of the merged view is a set of layers (a bitmask: layer
//! `i` is bit `i`) whose directory of that name is visible: the first
//! layer holding the name decides what it is; for a directory, lower
//! layers add their directory of the same name until one of them is
//! opaque or holds something else (a whiteout, a file), which hides the
//! rest, as overlayfs's lookup stops there.

use std::ffi::CStr;
use std::os::fd::BorrowedFd;

use crate::sys::{self, DirChain, Meta};

use super::error::{Result, WorkspaceError};
use super::layers::{is_opaque, lstat_opt};

/// Most layers a stack may have (the upper, the baseline and 62 seals):
/// a merged directory is a `u64` of layers.
pub const MAX_LAYERS: usize = 64;

/// The layers of `set`, top first.
pub fn members(set: u64) -> impl Iterator<Item = usize> {
    (0..MAX_LAYERS).filter(move |i| set & (1u64 << i) != 0)
}

/// What the first layer of a set holding `name` has there.
#[derive(Debug, Clone, Copy)]
pub enum Resolved {
    /// No layer of the set has the name.
    Missing,
    /// A whiteout: deleted in the merged view.
    Deleted,
    /// A non-directory (file, link, special file) in layer `.0`.
    Leaf(usize, Meta),
    /// A directory (its layers are collected when it is entered).
    Dir,
}

/// One chain per layer of a stack.
pub struct Chains {
    pub chains: Vec<DirChain>,
}

impl Chains {
    /// Chains rooted at each of `roots` (top first).
    pub fn new(roots: &[BorrowedFd<'_>]) -> Result<Chains> {
        if roots.len() > MAX_LAYERS {
            return Err(WorkspaceError::Unsupported {
                path: "the session".into(),
                reason: format!("has more than {MAX_LAYERS} layers"),
            });
        }
        let chains = roots
            .iter()
            .map(|fd| Ok(DirChain::new(sys::open_dir_beneath(*fd, c".")?)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Chains { chains })
    }

    /// The current directory of layer `i`'s chain.
    pub fn dir(&self, i: usize) -> BorrowedFd<'_> {
        self.chains[i].current()
    }

    /// The root's merged set over the layers `from..to`: each root in
    /// turn until one is opaque; and whether one was (it hides what is
    /// below `to` too).
    pub fn root_set(&self, from: usize, to: usize) -> Result<(u64, bool)> {
        let mut set = 0;
        for i in from..to {
            set |= 1 << i;
            if is_opaque(self.dir(i))? {
                return Ok((set, true));
            }
        }
        Ok((set, false))
    }

    /// Resolve `name` in the merged directory `set`.
    pub fn resolve(&self, set: u64, name: &CStr) -> Result<Resolved> {
        for i in members(set) {
            match lstat_opt(self.dir(i), name)? {
                None => continue,
                Some(m) if m.is_whiteout() => return Ok(Resolved::Deleted),
                Some(m) if m.is_dir() => return Ok(Resolved::Dir),
                Some(m) => return Ok(Resolved::Leaf(i, m)),
            }
        }
        Ok(Resolved::Missing)
    }

    /// Enter the directory `name` of the merged directory `set`: push the
    /// chain of every layer contributing to it. Returns the child's set
    /// and whether the walk stopped at an opaque directory or at something
    /// that hides the layers below (then nothing below `set` shows).
    pub fn enter(&mut self, set: u64, name: &CStr) -> Result<(u64, bool)> {
        let mut child = 0;
        let mut cut = false;
        for i in members(set) {
            let Some(m) = lstat_opt(self.dir(i), name)? else {
                continue;
            };
            if !m.is_dir() {
                // A whiteout or a file hides the lower layers' directory.
                cut = true;
                break;
            }
            self.chains[i].push(name)?;
            child |= 1 << i;
            if is_opaque(self.dir(i))? {
                cut = true;
                break;
            }
        }
        Ok((child, cut))
    }

    /// Leave the directories entered with `set` (the set [`Chains::enter`]
    /// returned).
    pub fn leave(&mut self, set: u64) -> Result<()> {
        for i in members(set) {
            self.chains[i].pop()?;
        }
        Ok(())
    }

    /// The names of the directories of `set` (sorted, deduplicated).
    pub fn names(&self, set: u64) -> Result<std::collections::BTreeSet<std::ffi::CString>> {
        let mut names = std::collections::BTreeSet::new();
        for i in members(set) {
            names.extend(sys::list_dir(self.dir(i))?);
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::path::Path;

    use crate::workspace::{DiffFormat, ExportOptions, Layers, RelPath, diff, export_to};

    fn dir(p: &Path) -> std::os::fd::OwnedFd {
        crate::sys::open_dir_path(p).unwrap()
    }

    /// Baseline `a/x b/y keep`; seal 1 deletes `a/x` (whiteout), replaces
    /// `b` by an opaque directory holding `b/z`, adds `s`; the upper adds
    /// `c` and deletes `s`. Each view resolves the stack as overlayfs does.
    #[test]
    fn whiteouts_and_opaque_dirs_of_sealed_layers_keep_their_meaning() {
        let root = std::env::temp_dir().join(format!("hutch-stack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["base/a", "base/b", "seal/a", "seal/b", "upper", "spool"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("base/a/x"), "x\n").unwrap();
        std::fs::write(root.join("base/b/y"), "y\n").unwrap();
        std::fs::write(root.join("base/keep"), "k\n").unwrap();
        std::fs::write(root.join("seal/b/z"), "z\n").unwrap();
        std::fs::write(root.join("seal/s"), "s\n").unwrap();
        std::fs::write(root.join("upper/c"), "c\n").unwrap();
        let seal_a = dir(&root.join("seal/a"));
        crate::sys::mknod_whiteout(seal_a.as_fd(), c"x").unwrap();
        let seal_b = dir(&root.join("seal/b"));
        crate::sys::set_xattr(seal_b.as_fd(), c"user.overlay.opaque", b"y").unwrap();
        let upper = dir(&root.join("upper"));
        crate::sys::mknod_whiteout(upper.as_fd(), c"s").unwrap();
        let layers = |diff_from| Layers {
            upper: dir(&root.join("upper")),
            lowers: vec![dir(&root.join("seal")), dir(&root.join("base"))],
            diff_from,
        };
        let spool = dir(&root.join("spool"));
        let stat = |l: &Layers| {
            let mut out = Vec::new();
            diff(l, DiffFormat::Json, None, spool.as_fd(), &mut out).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            v["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    format!(
                        "{} {}",
                        f["status"].as_str().unwrap(),
                        f["path"].as_str().unwrap()
                    )
                })
                .collect::<Vec<_>>()
        };
        // Since the seal: the upper's changes against seal-over-baseline.
        assert_eq!(stat(&layers(0)), ["added c", "deleted s"]);
        // Since the baseline: everything, `s` never existed there.
        assert_eq!(
            stat(&layers(1)),
            ["deleted a/x", "deleted b/y", "added b/z", "added c"]
        );
        // The merged view an export sees.
        let l = layers(0);
        let merged = l.root().unwrap();
        let names: Vec<String> = merged
            .names()
            .unwrap()
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a", "b", "c", "keep"]);
        assert!(
            l.lookup(&RelPath::parse(Path::new("a/x")).unwrap())
                .unwrap()
                .is_none()
        );
        assert!(
            l.lookup(&RelPath::parse(Path::new("b/y")).unwrap())
                .unwrap()
                .is_none()
        );
        assert!(
            l.lookup(&RelPath::parse(Path::new("b/z")).unwrap())
                .unwrap()
                .is_some()
        );
        let archive = root.join("out.tar");
        let mut manifest = Vec::new();
        export_to(
            &l,
            &[
                RelPath::parse(Path::new("b")).unwrap(),
                RelPath::parse(Path::new("a")).unwrap(),
            ],
            None,
            &archive,
            &ExportOptions::default(),
            spool.as_fd(),
            Some(&mut manifest),
        )
        .unwrap();
        let m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
        let paths: Vec<&str> = m["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["a", "b", "b/z"]);
        let _ = std::fs::remove_dir_all(&root);
    }
}
