//! One cgroup directory and its interface files.
//!
//! Writes open with `O_CREAT` as well: harmless on cgroupfs (the kernel
//! creates every interface file itself, and a missing one fails with
//! EACCES), and it lets the same code drive a plain directory in tests.

use std::io::{ErrorKind, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A cgroup directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    pub dir: PathBuf,
}

impl Cgroup {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Cgroup { dir: dir.into() }
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn child(&self, name: &str) -> Cgroup {
        Cgroup::new(self.dir.join(name))
    }

    pub fn parent(&self) -> Option<Cgroup> {
        self.dir.parent().map(Cgroup::new)
    }

    pub fn name(&self) -> &str {
        self.dir.file_name().and_then(|n| n.to_str()).unwrap_or("")
    }

    pub fn read(&self, name: &str) -> std::io::Result<String> {
        crate::sys::read_proc(self.file(name))
    }

    /// Whitespace-separated words of a file (controller lists); a leading
    /// `+` is dropped. Unreadable files give an empty list.
    pub fn words(&self, name: &str) -> Vec<String> {
        self.read(name)
            .unwrap_or_default()
            .split_whitespace()
            .map(|w| w.trim_start_matches('+').to_string())
            .collect()
    }

    /// Controllers this cgroup may hand to its children.
    pub fn controllers(&self) -> Vec<String> {
        self.words("cgroup.controllers")
    }

    /// Controllers enabled for the children.
    pub fn subtree_control(&self) -> Vec<String> {
        self.words("cgroup.subtree_control")
    }

    /// Processes directly in this cgroup.
    pub fn procs(&self) -> Vec<i32> {
        self.read("cgroup.procs")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Write `value` to an interface file (one write call, as the kernel
    /// wants).
    pub fn write(&self, name: &str, value: &str) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.file(name))?;
        f.write_all(value.as_bytes())
    }

    /// Whether this process may write the file (access(2) with W_OK).
    pub fn writable(&self, name: &str) -> bool {
        rustix::fs::access(self.file(name), rustix::fs::Access::WRITE_OK).is_ok()
    }

    /// Whether this process may create and remove children here.
    pub fn dir_writable(&self) -> bool {
        rustix::fs::access(&self.dir, rustix::fs::Access::WRITE_OK).is_ok()
    }

    /// Read one `key value` line of a flat-keyed file such as memory.events.
    pub fn key(&self, file: &str, key: &str) -> Option<u64> {
        parse_key(&self.read(file).ok()?, key)
    }

    /// Open the directory for `CLONE_INTO_CGROUP`.
    pub fn open_dir(&self) -> std::io::Result<OwnedFd> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&self.dir)?;
        Ok(f.into())
    }

    /// Remove this cgroup and any child cgroups, retrying while the kernel
    /// still counts exiting tasks (EBUSY) until `deadline`.
    pub fn remove(&self, deadline: Instant) -> std::io::Result<()> {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    Cgroup::new(e.path()).remove(deadline)?;
                }
            }
        }
        let mut pause = Duration::from_micros(200);
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Wait until no process is left in this cgroup or below (cgroup.events
    /// `populated 0`; cgroup.procs when that file is absent).
    pub fn wait_empty(&self, deadline: Instant) -> bool {
        let mut pause = Duration::from_micros(100);
        loop {
            let empty = match self.key("cgroup.events", "populated") {
                Some(p) => p == 0,
                None => self.procs().is_empty(),
            };
            if empty {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }
}

/// Value of `key` in a flat-keyed file (`key value` per line).
pub fn parse_key(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        if k == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

/// Whether `p` is a sane cgroup directory name component.
pub fn valid_name(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 200
        && !p.starts_with('.')
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Deepest common ancestor directory of two paths.
pub fn common_ancestor(a: &Path, b: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for (x, y) in a.components().zip(b.components()) {
        if x != y {
            break;
        }
        out.push(x);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_keys() {
        let t = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n";
        assert_eq!(parse_key(t, "max"), Some(12));
        assert_eq!(parse_key(t, "oom_kill"), Some(1));
        assert_eq!(parse_key(t, "oom_group_kill"), None);
    }

    #[test]
    fn names_and_ancestors() {
        assert!(valid_name("hutch-1a2b"));
        assert!(!valid_name("../x"));
        assert!(!valid_name(".hidden"));
        assert!(!valid_name(""));
        assert_eq!(
            common_ancestor(Path::new("/c/a/b/x"), Path::new("/c/a/y")),
            PathBuf::from("/c/a")
        );
    }
}
