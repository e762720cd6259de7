//! Counting what a workload wrote into an overlay upper directory.
//!
//! The upper is attacker-written: the walk goes through directory fds, one
//! name at a time with `O_NOFOLLOW|O_DIRECTORY` (plain `openat`: it runs in
//! the sandbox's init, whose seccomp filter has no `openat2`), never
//! follows a link, never opens anything but directories, and stops at an
//! entry bound. It is iterative over a [`DirChain`], so stack and open fds stay
//! bounded whatever the depth.

use std::ffi::CString;
use std::os::fd::BorrowedFd;

use crate::sys::{self, DirChain};

/// Counting stops here (the result is then a lower bound).
pub const MAX_COUNT: u64 = 10_000_000;

/// Paths changed under an upper directory: every non-directory entry
/// (files, links, whiteouts, special files) and every empty directory.
/// A directory that cannot be read counts as one path.
pub fn changed_paths(upper: BorrowedFd<'_>) -> u64 {
    let Ok(root) = upper.try_clone_to_owned() else {
        return 0;
    };
    let Ok(mut chain) = DirChain::new(root) else {
        return 0;
    };
    let Ok(names) = sys::list_dir(chain.current()) else {
        return 0;
    };
    let mut count = 0u64;
    // Names left per level, and whether the level's directory had entries.
    let mut pending: Vec<(Vec<CString>, bool)> = vec![(names, false)];
    while let Some((names, _)) = pending.last_mut() {
        if count >= MAX_COUNT {
            break;
        }
        let Some(name) = names.pop() else {
            let (_, had_entries) = pending.pop().expect("a level");
            if pending.is_empty() {
                break;
            }
            if !had_entries {
                // An empty directory is a change of its own.
                count += 1;
            }
            if chain.pop().is_err() {
                break;
            }
            continue;
        };
        if let Some(level) = pending.last_mut() {
            level.1 = true;
        }
        let is_dir = sys::lstat_at(chain.current(), &name).is_ok_and(|m| m.is_dir());
        if !is_dir {
            count += 1;
            continue;
        }
        let entered = sys::open_dir_child(chain.current(), &name)
            .and_then(|fd| chain.push_fd(fd))
            .and_then(|()| sys::list_dir(chain.current()));
        match entered {
            Ok(names) => pending.push((names, false)),
            Err(_) => {
                // Entered but unreadable: leave it again.
                let entered_anyway = chain.depth() == pending.len();
                if entered_anyway && chain.pop().is_err() {
                    break;
                }
                count += 1;
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn counts_leaves_and_empty_dirs_without_following_links() {
        let tmp = std::env::temp_dir().join(format!("hutch-count-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("a/b")).unwrap();
        std::fs::create_dir_all(tmp.join("empty")).unwrap();
        std::fs::write(tmp.join("a/b/f"), b"x").unwrap();
        std::fs::write(tmp.join("top"), b"x").unwrap();
        std::os::unix::fs::symlink("/", tmp.join("link-to-root")).unwrap();
        let dir = std::fs::File::open(&tmp).unwrap();
        assert_eq!(changed_paths(dir.as_fd()), 4);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn deep_trees_are_counted_with_few_fds() {
        let tmp = std::env::temp_dir().join(format!("hutch-count-deep-{}", std::process::id()));
        let _ = std::process::Command::new("rm")
            .arg("-rf")
            .arg(&tmp)
            .status();
        std::fs::create_dir_all(&tmp).unwrap();
        let mut fd = sys::open_dir_path(&tmp).unwrap();
        for _ in 0..3000 {
            sys::mkdirat(fd.as_fd(), c"d", 0o755).unwrap();
            fd = sys::open_dir_beneath(fd.as_fd(), c"d").unwrap();
        }
        sys::mkdirat(fd.as_fd(), c"leaf", 0o755).unwrap();
        sys::mkfifo_at(fd.as_fd(), c"fifo", 0o644).unwrap();
        drop(fd);
        let dir = std::fs::File::open(&tmp).unwrap();
        // The changes are the empty directory and the FIFO at the bottom
        // (a depth bound would count the chain as one).
        assert_eq!(changed_paths(dir.as_fd()), 2);
        std::process::Command::new("rm")
            .arg("-rf")
            .arg(&tmp)
            .status()
            .unwrap();
    }
}
