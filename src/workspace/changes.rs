//! What changed in a session: computed from the upper directory only, so
//! the cost grows with the change, not with the baseline.
//!
//! The upper is attacker-written data (SECURITY.md §8): it is walked through
//! fds (`openat2` beneath, no symlinks), symlinks are recorded as links and
//! never read through, FIFOs, sockets and device nodes are reported and
//! never opened. Whiteouts (char 0/0) and opaque directories become
//! deletions of what they hide in the baseline; other `*.overlay.*` xattrs
//! are ignored.
//!
//! The comparison is between two views of a layer stack (see `stack.rs`):
//! the *new* one (every layer) and the *old* one (the layers below the
//! point the diff starts from: the last seal by default, the baseline with
//! `--since baseline`). Only the directories of the layers above that
//! point are walked (plus, where those hide the old view, what they hide),
//! so the cost grows with the change since it.
//!
//! The walk is iterative over one [`sys::DirChain`] per layer: stack and
//! open fds are bounded whatever the depth, and memory is the names of
//! the directories on the current path. Each candidate change is
//! handed to a visitor while its directories are open; nothing of a file's
//! content is kept by the walk.

use std::ffi::{CStr, CString};
use std::os::fd::BorrowedFd;

use crate::sys::Meta;

use super::error::Result;
use super::layers::Layers;
use super::relpath::child_path;
use super::stack::{Chains, Resolved};

/// Default cap on the size of one file read for a diff.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;

/// An entry of the upper that git cannot represent (never opened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: Vec<u8>,
    /// `fifo`, `socket`, `char-device` or `block-device`.
    pub kind: &'static str,
}

/// The kind name of a special file.
pub fn special_kind(meta: &Meta) -> &'static str {
    match meta.kind() {
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "char-device",
        libc::S_IFBLK => "block-device",
        _ => "unknown",
    }
}

/// One side of a candidate change: a regular file or a symlink named
/// `name` in the open directory `dir`, with its metadata from the walk.
#[derive(Debug, Clone, Copy)]
pub struct SideRef<'a> {
    pub dir: BorrowedFd<'a>,
    pub name: &'a CStr,
    pub meta: Meta,
}

/// A path whose baseline side (`old`) and workspace side (`new`) may
/// differ: at least one is present; both may turn out equal (a copied-up
/// but unchanged file), which the visitor decides.
#[derive(Debug)]
pub struct ChangeRef<'a> {
    pub path: &'a [u8],
    pub old: Option<SideRef<'a>>,
    pub new: Option<SideRef<'a>>,
    /// The baseline has the path (git would track it).
    pub tracked: bool,
}

/// What git tracks: regular files and symlinks.
fn tracked(m: &Meta) -> bool {
    m.is_file() || m.is_symlink()
}

/// One entry of a directory being walked, in path order.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a directory's entries, short-lived
enum Item {
    /// A non-directory on either side (old from the old view, new from a
    /// layer above the starting point; `special` when that is a FIFO,
    /// socket or device). Each with the layer holding it.
    Leaf {
        name: CString,
        old: Option<(usize, Meta)>,
        new: Option<(usize, Meta)>,
        special: Option<Meta>,
        tracked: bool,
    },
    /// A directory on either side: `new` when a layer above the starting
    /// point has it (to walk), `old` when the old view has it (to walk as
    /// kept or deleted).
    Dir {
        name: CString,
        new: bool,
        old: bool,
        tracked: bool,
    },
}

impl Item {
    /// Sort key: a directory sorts as `name/`, so a depth-first walk
    /// yields full paths in bytewise order (as git sorts them).
    fn key(&self) -> Vec<u8> {
        match self {
            Item::Leaf { name, .. } => name.as_bytes().to_vec(),
            Item::Dir { name, .. } => {
                let mut k = name.as_bytes().to_vec();
                k.push(b'/');
                k
            }
        }
    }
}

/// A directory on the walk's stack.
struct Frame {
    /// Length of the walk's path buffer at this directory's parent (the
    /// buffer holds one path, so memory is linear in the depth).
    parent_len: usize,
    /// The layers above the starting point that hold it, and those of the
    /// old view (each entered on its chain).
    new: u64,
    old: u64,
    /// Whether the new view continues into the old layers here (else the
    /// new layers hide them: old entries not in the new layers are
    /// deletions).
    old_in_new: bool,
    /// Entries left, reverse-sorted (`pop` gives the next).
    items: Vec<Item>,
}

/// The entries of the merged directory (`new`, `old`, `old_in_new`);
/// `base` is the baseline's layer.
fn items(chains: &Chains, new: u64, old: u64, old_in_new: bool, base: usize) -> Result<Vec<Item>> {
    let mut names = chains.names(new)?;
    // Old entries matter only where the new layers hide them all (or where
    // no new layer has the directory: a deleted directory).
    if !old_in_new || new == 0 {
        names.extend(chains.names(old)?);
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let n = chains.resolve(new, &name)?;
        if matches!(n, Resolved::Missing) && old_in_new {
            // Not in any new layer: the new view shows the old entry.
            continue;
        }
        let o = chains.resolve(old, &name)?;
        let leaf = |r: &Resolved| match r {
            Resolved::Leaf(i, m) => Some((*i, *m)),
            _ => None,
        };
        let new_leaf = leaf(&n).filter(|(_, m)| tracked(m));
        let special = leaf(&n).filter(|(_, m)| !tracked(m)).map(|(_, m)| m);
        let old_leaf = leaf(&o).filter(|(_, m)| tracked(m));
        let new_dir = matches!(n, Resolved::Dir);
        let old_dir = matches!(o, Resolved::Dir);
        // What the baseline itself has there (when it shows here).
        let in_base = match o {
            Resolved::Leaf(i, m) if i == base => Some(m),
            _ if old & (1 << base) != 0 => {
                super::layers::lstat_opt(chains.dir(base), &name)?.filter(|m| !m.is_whiteout())
            }
            _ => None,
        };
        if new_leaf.is_some() || old_leaf.is_some() || special.is_some() {
            out.push(Item::Leaf {
                name: name.clone(),
                old: old_leaf,
                new: new_leaf,
                special,
                tracked: in_base.is_some_and(|m| tracked(&m)),
            });
        }
        if new_dir || old_dir {
            out.push(Item::Dir {
                name,
                new: new_dir,
                old: old_dir,
                tracked: in_base.is_some_and(|m| m.is_dir()),
            });
        }
    }
    out.sort_unstable_by_key(|i| std::cmp::Reverse(i.key()));
    Ok(out)
}

/// What a walk asks of its caller.
pub trait Visitor {
    /// A candidate change.
    fn change(&mut self, c: &ChangeRef<'_>) -> Result<()>;
    /// Whether to walk into the directory `path`; `tracked`: the baseline
    /// has it. A directory not walked contributes nothing.
    fn enter(&mut self, _path: &[u8], _tracked: bool) -> Result<bool> {
        Ok(true)
    }
}

impl<F: FnMut(&ChangeRef<'_>) -> Result<()>> Visitor for F {
    fn change(&mut self, c: &ChangeRef<'_>) -> Result<()> {
        self(c)
    }
}

/// Walk the workspace `layers` from their diff starting point
/// ([`Layers::diff_from`]), handing every candidate change to `visit` in
/// bytewise path order. Returns the entries git cannot represent.
pub fn walk(layers: &Layers, visit: &mut dyn Visitor) -> Result<Vec<Skipped>> {
    let roots = layers.stack();
    let split = 1 + layers.diff_from.min(layers.lowers.len());
    let mut chains = Chains::new(&roots)?;
    // The new view continues below the starting point unless a root above
    // it is opaque.
    let (new, cut) = chains.root_set(0, split)?;
    let (old, _) = chains.root_set(split, roots.len())?;
    let old_in_new = !cut;
    let base = roots.len() - 1;
    let mut skipped = Vec::new();
    let mut stack = vec![Frame {
        parent_len: 0,
        new,
        old,
        old_in_new,
        items: items(&chains, new, old, old_in_new, base)?,
    }];
    // The path of the directory on top of the stack.
    let mut dir_path: Vec<u8> = Vec::new();
    while let Some(frame) = stack.last_mut() {
        let Some(item) = frame.items.pop() else {
            let done = stack.pop().expect("a frame");
            if stack.is_empty() {
                break;
            }
            dir_path.truncate(done.parent_len);
            chains.leave(done.new)?;
            chains.leave(done.old)?;
            continue;
        };
        match item {
            Item::Leaf {
                name,
                old,
                new,
                special,
                tracked,
            } => {
                let path = child_path(&dir_path, name.as_bytes());
                if let Some(m) = special {
                    skipped.push(Skipped {
                        path: path.clone(),
                        kind: special_kind(&m),
                    });
                }
                if old.is_none() && new.is_none() {
                    continue;
                }
                let change = ChangeRef {
                    path: &path,
                    old: old.map(|(i, meta)| SideRef {
                        dir: chains.dir(i),
                        name: &name,
                        meta,
                    }),
                    new: new.map(|(i, meta)| SideRef {
                        dir: chains.dir(i),
                        name: &name,
                        meta,
                    }),
                    tracked,
                };
                visit.change(&change)?;
            }
            Item::Dir {
                name,
                new: in_new,
                old: in_old,
                tracked,
            } => {
                let path = child_path(&dir_path, name.as_bytes());
                if !visit.enter(&path, tracked)? {
                    continue;
                }
                let (parent_new, parent_old, parent_old_in_new) =
                    (frame.new, frame.old, frame.old_in_new);
                let (new, cut) = if in_new {
                    chains.enter(parent_new, &name)?
                } else {
                    (0, true)
                };
                let old = if in_old {
                    chains.enter(parent_old, &name)?.0
                } else {
                    0
                };
                let old_in_new = parent_old_in_new && in_new && !cut;
                let entries = items(&chains, new, old, old_in_new, base)?;
                let parent_len = dir_path.len();
                dir_path = path;
                stack.push(Frame {
                    parent_len,
                    new,
                    old,
                    old_in_new,
                    items: entries,
                });
            }
        }
    }
    Ok(skipped)
}
