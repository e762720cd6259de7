//! Counting what a workload wrote into an overlay upper directory.
//!
//! The upper is attacker-written: the walk goes through directory fds with
//! `O_NOFOLLOW`, never follows a link, never opens anything but
//! directories, and stops at a depth and an entry bound.

use std::os::fd::{AsFd, BorrowedFd};

use nix::dir::{Dir, Type};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// Deepest directory level visited.
const MAX_DEPTH: usize = 256;
/// Counting stops here (the result is then a lower bound).
pub const MAX_COUNT: u64 = 10_000_000;

/// Paths changed under an upper directory: every non-directory entry
/// (files, links, whiteouts, special files) and every empty directory.
pub fn changed_paths(upper: BorrowedFd<'_>) -> u64 {
    let Ok(dir) = Dir::openat(
        upper,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let mut count = 0;
    walk(dir, 0, &mut count);
    count
}

fn walk(mut dir: Dir, depth: usize, count: &mut u64) -> bool {
    let mut entries = 0u64;
    let names: Vec<(std::ffi::CString, Option<Type>)> = dir
        .iter()
        .filter_map(Result::ok)
        .filter(|e| !matches!(e.file_name().to_bytes(), b"." | b".."))
        .map(|e| (e.file_name().to_owned(), e.file_type()))
        .collect();
    for (name, kind) in names {
        entries += 1;
        if *count >= MAX_COUNT {
            return true;
        }
        let is_dir = match kind {
            Some(Type::Directory) => true,
            Some(_) => false,
            None => nix::sys::stat::fstatat(
                dir.as_fd(),
                name.as_c_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .unwrap_or(false),
        };
        if !is_dir {
            *count += 1;
            continue;
        }
        if depth >= MAX_DEPTH {
            *count += 1;
            continue;
        }
        match Dir::openat(
            dir.as_fd(),
            name.as_c_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(child) => {
                if !walk(child, depth + 1, count) {
                    // An empty directory is a change of its own.
                    *count += 1;
                }
            }
            Err(_) => *count += 1,
        }
    }
    entries > 0
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
}
