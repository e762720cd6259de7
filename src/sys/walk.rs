//! fd-relative filesystem calls for walking directories an adversary wrote:
//! every lookup is one name below an open directory fd, with
//! `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS` and
//! `O_NOFOLLOW`, so no path string is ever re-walked and no link followed.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, XattrFlags};

use super::{Errno, SysError, openat2, q};
use super::{RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS};

/// Resolution flags of every fd-relative open: stay below the directory,
/// follow no symlink and no magic link.
pub const RESOLVE_STRICT: u64 = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

/// The metadata of one inode (the subset callers need).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// `st_mode`: file type and permission bits.
    pub mode: u32,
    pub size: u64,
    pub uid: u32,
    pub gid: u32,
    /// Device number of a device node (`st_rdev`).
    pub rdev: u64,
    pub dev: u64,
    pub ino: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// 512-byte blocks allocated (`st_blocks`).
    pub blocks: u64,
    /// Hard links (`st_nlink`).
    pub nlink: u64,
}

impl Meta {
    fn from_stat(st: &rustix::fs::Stat) -> Meta {
        Meta {
            mode: st.st_mode,
            size: st.st_size as u64,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev,
            dev: st.st_dev,
            ino: st.st_ino,
            mtime: st.st_mtime,
            blocks: st.st_blocks as u64,
            nlink: st.st_nlink,
        }
    }

    /// The file type bits (`S_IFMT`).
    pub fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }
    pub fn is_dir(&self) -> bool {
        self.kind() == libc::S_IFDIR
    }
    pub fn is_file(&self) -> bool {
        self.kind() == libc::S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.kind() == libc::S_IFLNK
    }
    /// An overlayfs whiteout: a character device 0/0.
    pub fn is_whiteout(&self) -> bool {
        self.kind() == libc::S_IFCHR && self.rdev == 0
    }
}

fn err(call: String, e: rustix::io::Errno) -> SysError {
    SysError::new(call, Errno::from_raw(e.raw_os_error()))
}

fn fdn(fd: BorrowedFd<'_>) -> String {
    use std::os::fd::AsRawFd;
    format!("fd {}", fd.as_raw_fd())
}

/// Open a trusted host directory by path (no final-component symlink).
pub fn open_dir_path(path: &Path) -> Result<OwnedFd, SysError> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err(format!("open({:?}, O_DIRECTORY|O_NOFOLLOW)", path), e))
}

/// Open the directory `name` directly below `dir` (readable, for listing and
/// xattrs). Fails with ELOOP on a symlink, ENOTDIR on anything else.
pub fn open_dir_beneath(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, SysError> {
    openat2(
        Some(dir),
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
        RESOLVE_STRICT,
    )
}

/// Open the directory `name` directly below `dir` with plain `openat`
/// (`O_NOFOLLOW|O_DIRECTORY`), for code under a seccomp filter without
/// `openat2` (the sandbox's init). Safe for one component only: `name`
/// must not contain `/` (refused with EINVAL), so nothing is traversed and
/// a symlink fails with ELOOP/ENOTDIR.
pub fn open_dir_child(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, SysError> {
    if name.to_bytes().contains(&b'/') || name.to_bytes() == b".." {
        return Err(SysError::new(
            format!("openat({}, {}): not a single name", fdn(dir), q(name)),
            Errno::EINVAL,
        ));
    }
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        err(
            format!("openat({}, {}, O_DIRECTORY|O_NOFOLLOW)", fdn(dir), q(name)),
            e,
        )
    })
}

/// Open `name` below `dir` with `flags` (O_NOFOLLOW is always added).
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> Result<OwnedFd, SysError> {
    // openat2 refuses O_NOCTTY next to O_PATH.
    let extra = if flags & libc::O_PATH != 0 {
        libc::O_NOFOLLOW
    } else {
        libc::O_NOFOLLOW | libc::O_NOCTTY
    };
    openat2(Some(dir), name, flags | extra, mode, RESOLVE_STRICT)
}

/// fstatat(dir, name, AT_SYMLINK_NOFOLLOW).
pub fn lstat_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Meta, SysError> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| Meta::from_stat(&st))
        .map_err(|e| {
            err(
                format!("fstatat({}, {}, AT_SYMLINK_NOFOLLOW)", fdn(dir), q(name)),
                e,
            )
        })
}

/// fstat(fd).
pub fn fstat(fd: BorrowedFd<'_>) -> Result<Meta, SysError> {
    rustix::fs::fstat(fd)
        .map(|st| Meta::from_stat(&st))
        .map_err(|e| err(format!("fstat({})", fdn(fd)), e))
}

/// readlinkat(dir, name): the link's target bytes, never followed.
pub fn readlink_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Vec<u8>, SysError> {
    rustix::fs::readlinkat(dir, name, Vec::new())
        .map(|c| c.into_bytes())
        .map_err(|e| err(format!("readlinkat({}, {})", fdn(dir), q(name)), e))
}

/// fgetxattr(fd, name): `None` when the attribute is absent or the
/// filesystem has no xattrs.
pub fn get_xattr(fd: BorrowedFd<'_>, name: &CStr) -> Result<Option<Vec<u8>>, SysError> {
    let mut buf = vec![0u8; 256];
    match rustix::fs::fgetxattr(fd, name, &mut buf[..]) {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(e)
            if e == rustix::io::Errno::NODATA
                || e == rustix::io::Errno::NOTSUP
                || e == rustix::io::Errno::PERM =>
        {
            // EPERM: trusted.* is invisible without CAP_SYS_ADMIN.
            Ok(None)
        }
        Err(e) => Err(err(format!("fgetxattr({}, {})", fdn(fd), q(name)), e)),
    }
}

/// fsetxattr(fd, name, value, 0).
pub fn set_xattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> Result<(), SysError> {
    rustix::fs::fsetxattr(fd, name, value, XattrFlags::empty())
        .map_err(|e| err(format!("fsetxattr({}, {})", fdn(fd), q(name)), e))
}

/// The names in directory `fd`, without `.` and `..`, in the order the
/// filesystem returns them.
pub fn list_dir(fd: BorrowedFd<'_>) -> Result<Vec<CString>, SysError> {
    let mut dir =
        rustix::fs::Dir::read_from(fd).map_err(|e| err(format!("opendir({})", fdn(fd)), e))?;
    let mut names = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(|e| err(format!("getdents64({})", fdn(fd)), e))?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// `unlinkat(dir, name, [AT_REMOVEDIR])`: removes a link itself, never its target.
pub fn unlink_at(dir: BorrowedFd<'_>, name: &CStr, is_dir: bool) -> Result<(), SysError> {
    let flags = if is_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(dir, name, flags)
        .map_err(|e| err(format!("unlinkat({}, {}, {flags:?})", fdn(dir), q(name)), e))
}

/// mknodat(dir, name, S_IFCHR, 0/0): an overlayfs whiteout.
pub fn mknod_whiteout(dir: BorrowedFd<'_>, name: &CStr) -> Result<(), SysError> {
    rustix::fs::mknodat(dir, name, FileType::CharacterDevice, Mode::empty(), 0).map_err(|e| {
        err(
            format!("mknodat({}, {}, S_IFCHR, 0:0)", fdn(dir), q(name)),
            e,
        )
    })
}

/// mknodat(dir, name, S_IFIFO, mode): the fuzzers build hostile trees with
/// it; compaction copies a FIFO with it where a link is refused.
pub fn mkfifo_at(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<(), SysError> {
    rustix::fs::mknodat(dir, name, FileType::Fifo, Mode::from_raw_mode(mode), 0)
        .map_err(|e| err(format!("mknodat({}, {}, S_IFIFO)", fdn(dir), q(name)), e))
}

/// fchmod(fd, mode).
pub fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> Result<(), SysError> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode))
        .map_err(|e| err(format!("fchmod({}, {mode:#o})", fdn(fd)), e))
}

/// fchown(fd, uid, gid).
pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<(), SysError> {
    let (u, g) = (
        rustix::fs::Uid::from_raw(uid),
        rustix::fs::Gid::from_raw(gid),
    );
    rustix::fs::fchown(fd, Some(u), Some(g))
        .map_err(|e| err(format!("fchown({}, {uid}, {gid})", fdn(fd)), e))
}

/// renameat(old_dir, old, new_dir, new).
pub fn rename_at(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
) -> Result<(), SysError> {
    rustix::fs::renameat(old_dir, old, new_dir, new).map_err(|e| {
        err(
            format!(
                "renameat({}, {}, {}, {})",
                fdn(old_dir),
                q(old),
                fdn(new_dir),
                q(new)
            ),
            e,
        )
    })
}

/// flock(fd, LOCK_EX[|LOCK_NB]). Returns `false` when `wait` is false and
/// another holder has the lock.
pub fn flock_exclusive(fd: BorrowedFd<'_>, wait: bool) -> Result<bool, SysError> {
    let op = if wait {
        FlockOperation::LockExclusive
    } else {
        FlockOperation::NonBlockingLockExclusive
    };
    match rustix::fs::flock(fd, op) {
        Ok(()) => Ok(true),
        Err(e) if !wait && e == rustix::io::Errno::WOULDBLOCK => Ok(false),
        Err(e) => Err(err(format!("flock({}, {op:?})", fdn(fd)), e)),
    }
}

/// The effective uid of this process.
pub fn geteuid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// chmod of the directory `name` below `dir` that cannot be opened for
/// reading (e.g. an overlay work dir of mode 0): opened `O_PATH` without
/// following links, then changed through its `/proc/self/fd` magic link,
/// which names exactly that inode.
pub fn chmod_dir_beneath(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<(), SysError> {
    use std::os::fd::AsRawFd;
    let fd = openat2(
        Some(dir),
        name,
        libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY,
        0,
        RESOLVE_STRICT,
    )?;
    let path = super::fd_path(fd.as_raw_fd());
    rustix::fs::chmod(path.as_c_str(), Mode::from_raw_mode(mode))
        .map_err(|e| err(format!("chmod({}, {mode:#o})", q(&path)), e))
}

/// openat(dir, "..", O_DIRECTORY|O_NOFOLLOW): the parent of an open
/// directory. Only [`DirChain`] uses it, and it checks that the parent is
/// the directory it came from (`..` is never a symlink, but a directory
/// can be moved).
fn open_parent(dir: BorrowedFd<'_>) -> Result<OwnedFd, SysError> {
    rustix::fs::openat(
        dir,
        c"..",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        err(
            format!("openat({}, \"..\", O_DIRECTORY|O_NOFOLLOW)", fdn(dir)),
            e,
        )
    })
}

/// One directory of a [`DirChain`]: its identity and, while held, its fd.
#[derive(Debug)]
struct ChainLevel {
    fd: Option<OwnedFd>,
    dev: u64,
    ino: u64,
}

/// The chain of open directories from a walk's root down to where it is,
/// for iterative tree walks whose depth the adversary chooses: at most
/// `window` fds are held (the deepest ones), whatever the depth. Going
/// back up past the held ones reopens the parent through `..` of the
/// directory being left and checks it is the directory first entered
/// (same device and inode), so a walk never continues somewhere else.
/// Memory is 24 bytes per level.
#[derive(Debug)]
pub struct DirChain {
    levels: Vec<ChainLevel>,
    /// Index of the shallowest level whose fd is held.
    first_held: usize,
    window: usize,
}

impl DirChain {
    /// Fds a chain holds by default.
    pub const WINDOW: usize = 16;

    /// A chain whose root (depth 0) is `root`.
    pub fn new(root: OwnedFd) -> Result<DirChain, SysError> {
        Self::with_window(root, Self::WINDOW)
    }

    /// A chain holding at most `window` (at least 1) fds.
    pub fn with_window(root: OwnedFd, window: usize) -> Result<DirChain, SysError> {
        let m = fstat(root.as_fd())?;
        Ok(DirChain {
            levels: vec![ChainLevel {
                fd: Some(root),
                dev: m.dev,
                ino: m.ino,
            }],
            first_held: 0,
            window: window.max(1),
        })
    }

    /// Levels below the root (0 at the root).
    pub fn depth(&self) -> usize {
        self.levels.len() - 1
    }

    /// The directory the chain is at (always held).
    pub fn current(&self) -> BorrowedFd<'_> {
        self.levels
            .last()
            .and_then(|l| l.fd.as_ref())
            .expect("the deepest level of a DirChain is always held")
            .as_fd()
    }

    /// Enter the directory `name` below the current one (opened beneath
    /// it, no symlink followed).
    pub fn push(&mut self, name: &CStr) -> Result<(), SysError> {
        let fd = open_dir_beneath(self.current(), name)?;
        self.push_fd(fd)
    }

    /// Enter a directory the caller opened below the current one.
    pub fn push_fd(&mut self, fd: OwnedFd) -> Result<(), SysError> {
        let m = fstat(fd.as_fd())?;
        self.levels.push(ChainLevel {
            fd: Some(fd),
            dev: m.dev,
            ino: m.ino,
        });
        if self.levels.len() - self.first_held > self.window {
            self.levels[self.first_held].fd = None;
            self.first_held += 1;
        }
        Ok(())
    }

    /// Leave the current directory for its parent. Leaving the root is a
    /// no-op.
    pub fn pop(&mut self) -> Result<(), SysError> {
        if self.levels.len() == 1 {
            return Ok(());
        }
        let left = self.levels.pop().expect("more than one level");
        let parent = self.levels.last_mut().expect("a parent level");
        if parent.fd.is_none() {
            let child = left.fd.as_ref().expect("the deepest level is held");
            let fd = open_parent(child.as_fd())?;
            let m = fstat(fd.as_fd())?;
            if (m.dev, m.ino) != (parent.dev, parent.ino) {
                return Err(SysError::new(
                    format!(
                        "openat({}, \"..\"): the directory moved during the walk",
                        fdn(child.as_fd())
                    ),
                    Errno::ESTALE,
                ));
            }
            parent.fd = Some(fd);
            self.first_held -= 1;
        }
        Ok(())
    }

}

/// An unnamed temporary file (`O_TMPFILE`) in the directory `dir`, for
/// output spooled before it is shown; it vanishes with its last fd.
pub fn tmpfile_in(dir: BorrowedFd<'_>) -> Result<OwnedFd, SysError> {
    rustix::fs::openat(
        dir,
        c".",
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| err(format!("openat({}, \".\", O_TMPFILE|O_RDWR)", fdn(dir)), e))
}

/// What `getdents64` says of an entry's type (`d_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
    /// The filesystem did not say (`DT_UNKNOWN`): lstat it.
    Unknown,
}

/// The entries of directory `fd` with their `d_type` and `d_ino`, without
/// `.` and `..`: a walk needs no lstat for most entries.
pub fn list_dir_typed(fd: BorrowedFd<'_>) -> Result<Vec<(CString, EntryKind, u64)>, SysError> {
    let mut dir =
        rustix::fs::Dir::read_from(fd).map_err(|e| err(format!("opendir({})", fdn(fd)), e))?;
    let mut out = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(|e| err(format!("getdents64({})", fdn(fd)), e))?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            FileType::Unknown => EntryKind::Unknown,
            _ => EntryKind::Other,
        };
        out.push((name.to_owned(), kind, entry.ino()));
    }
    Ok(out)
}

/// ioctl(dst, FICLONE, src): share `src`'s extents (btrfs, XFS with
/// reflink, ...). Fails with EOPNOTSUPP/EXDEV/EINVAL where unsupported.
pub fn ficlone(dst: BorrowedFd<'_>, src: BorrowedFd<'_>) -> Result<(), SysError> {
    rustix::fs::ioctl_ficlone(dst, src)
        .map_err(|e| err(format!("ioctl({}, FICLONE, {})", fdn(dst), fdn(src)), e))
}

/// The process's umask, from `/proc/self/status` (0o022 when unreadable).
pub fn current_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// Every extended attribute of the open file `fd` that this process can
/// read (name, value), in the order the filesystem lists them; empty when
/// the filesystem has none. `trusted.*` without CAP_SYS_ADMIN is not
/// listed by the kernel.
pub fn list_xattrs(fd: BorrowedFd<'_>) -> Result<Vec<(CString, Vec<u8>)>, SysError> {
    let mut names = vec![0u8; 4096];
    let n = loop {
        match rustix::fs::flistxattr(fd, &mut names[..]) {
            Ok(n) => break n,
            Err(e) if e == rustix::io::Errno::RANGE && names.len() < (1 << 20) => {
                names.resize(names.len() * 4, 0);
            }
            Err(e) if e == rustix::io::Errno::NOTSUP => return Ok(Vec::new()),
            Err(e) => return Err(err(format!("flistxattr({})", fdn(fd)), e)),
        }
    };
    let mut out = Vec::new();
    for name in names[..n].split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let name = CString::new(name).expect("split at NUL");
        let mut value = vec![0u8; 256];
        loop {
            match rustix::fs::fgetxattr(fd, &name, &mut value[..]) {
                Ok(len) => {
                    value.truncate(len);
                    out.push((name, value));
                    break;
                }
                Err(e) if e == rustix::io::Errno::RANGE && value.len() < (1 << 17) => {
                    value.resize(value.len() * 8, 0);
                }
                // Removed meanwhile, or not readable by us.
                Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::PERM => break,
                Err(e) => return Err(err(format!("fgetxattr({}, {})", fdn(fd), q(&name)), e)),
            }
        }
    }
    Ok(out)
}
