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
//! The walk is iterative over two [`sys::DirChain`]s (upper and baseline):
//! stack and open fds are bounded whatever the depth, and memory is the
//! names of the directories on the current path. Each candidate change is
//! handed to a visitor while its directories are open; nothing of a file's
//! content is kept by the walk.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd};

use crate::sys::{self, DirChain, Meta};

use super::error::Result;
use super::layers::{Layers, is_opaque, lstat_opt};
use super::relpath::child_path;

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
}

/// What git tracks: regular files and symlinks.
fn tracked(m: &Meta) -> bool {
    m.is_file() || m.is_symlink()
}

/// One entry of a directory being walked, in path order.
#[derive(Debug)]
enum Item {
    /// A non-directory on either side (old from the baseline, new from
    /// the upper; `special` when the upper holds a FIFO, socket or device).
    Leaf {
        name: CString,
        old: Option<Meta>,
        new: Option<Meta>,
        special: Option<Meta>,
    },
    /// A directory on either side: `upper` to walk in the upper, `base`
    /// to walk (as kept or deleted) in the baseline.
    Dir {
        name: CString,
        upper: bool,
        base: bool,
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
    /// Whether it has a part in the upper / in the baseline (each on its
    /// chain); `opaque`: the upper hides the baseline, whose entries not in
    /// the upper are deletions.
    upper: bool,
    base: bool,
    opaque: bool,
    /// Entries left, reverse-sorted (`pop` gives the next).
    items: Vec<Item>,
}

/// The entries of the directory whose parts are the chains' current
/// directories.
fn items(
    upper: Option<BorrowedFd<'_>>,
    base: Option<BorrowedFd<'_>>,
    opaque: bool,
) -> Result<Vec<Item>> {
    let mut names = std::collections::BTreeSet::new();
    if let Some(u) = upper {
        names.extend(sys::list_dir(u)?);
    }
    // Baseline entries matter only where the upper hides them all (or
    // where there is no upper: a deleted directory).
    if let Some(b) = base
        && (opaque || upper.is_none())
    {
        names.extend(sys::list_dir(b)?);
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let mut um = match upper {
            Some(u) => lstat_opt(u, &name)?,
            None => None,
        };
        if um.is_some_and(|m| m.is_whiteout()) {
            um = None;
        }
        let bm = match base {
            Some(b) => lstat_opt(b, &name)?,
            None => None,
        };
        let new_leaf = um.filter(tracked);
        let special = um.filter(|m| !m.is_dir() && !tracked(m));
        let old_leaf = bm.filter(tracked);
        let new_dir = um.is_some_and(|m| m.is_dir());
        let old_dir = bm.is_some_and(|m| m.is_dir());
        if new_leaf.is_some() || old_leaf.is_some() || special.is_some() {
            out.push(Item::Leaf {
                name: name.clone(),
                old: old_leaf,
                new: new_leaf,
                special,
            });
        }
        if new_dir || old_dir {
            out.push(Item::Dir {
                name,
                upper: new_dir,
                base: old_dir,
            });
        }
    }
    out.sort_unstable_by_key(|i| std::cmp::Reverse(i.key()));
    Ok(out)
}

/// Walk the workspace `layers`, handing every candidate change to `visit`
/// in bytewise path order. Returns the entries git cannot represent.
pub fn walk(
    layers: &Layers,
    visit: &mut dyn FnMut(&ChangeRef<'_>) -> Result<()>,
) -> Result<Vec<Skipped>> {
    let mut upper = DirChain::new(sys::open_dir_beneath(layers.upper.as_fd(), c".")?)?;
    let mut base = DirChain::new(sys::open_dir_beneath(layers.base.as_fd(), c".")?)?;
    let opaque = is_opaque(upper.current())?;
    let mut skipped = Vec::new();
    let mut stack = vec![Frame {
        parent_len: 0,
        upper: true,
        base: true,
        opaque,
        items: items(Some(upper.current()), Some(base.current()), opaque)?,
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
            if done.upper {
                upper.pop()?;
            }
            if done.base {
                base.pop()?;
            }
            continue;
        };
        match item {
            Item::Leaf {
                name,
                old,
                new,
                special,
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
                    old: old.map(|meta| SideRef {
                        dir: base.current(),
                        name: &name,
                        meta,
                    }),
                    new: new.map(|meta| SideRef {
                        dir: upper.current(),
                        name: &name,
                        meta,
                    }),
                };
                visit(&change)?;
            }
            Item::Dir {
                name,
                upper: in_upper,
                base: in_base,
            } => {
                let parent_len = dir_path.len();
                let parent_opaque = frame.opaque;
                let mut opaque = parent_opaque;
                if in_upper {
                    upper.push(&name)?;
                    opaque = opaque || is_opaque(upper.current())?;
                }
                if in_base {
                    base.push(&name)?;
                }
                let entries = items(
                    in_upper.then(|| upper.current()),
                    in_base.then(|| base.current()),
                    opaque,
                )?;
                if !dir_path.is_empty() {
                    dir_path.push(b'/');
                }
                dir_path.extend_from_slice(name.as_bytes());
                stack.push(Frame {
                    parent_len,
                    upper: in_upper,
                    base: in_base,
                    opaque,
                    items: entries,
                });
            }
        }
    }
    Ok(skipped)
}
