//! Disk quotas of a session's writable layers (`--disk-max`, decision
//! 0004): the upper, its work directory and the sealed layers.
//!
//! - Root: a hard cap the kernel enforces. The layers live on an ext4
//!   filesystem in a sparse image file of exactly the quota's size
//!   (`STATE/ID/disk.img`), attached through a loop device and mounted at
//!   `STATE/ID/disk` on first use; it stays attached while the session
//!   exists (a reboot detaches it; the next operation attaches it again)
//!   and is unmounted by `close`. A write beyond it fails with ENOSPC
//!   inside the sandbox, and the image never takes more host disk than the
//!   quota.
//! - Unprivileged callers cannot mount a filesystem on the host: a
//!   required `--disk-max` fails closed. `--disk-max-preferred` is
//!   accounted instead: after each command the upper is measured
//!   (allocated blocks, each inode once), a command that took the session
//!   over the limit is reported `disk-limit-hit`, and later commands are
//!   refused until files are removed (`session rm`).
//!
//! Single attachment: the image's open file is `flock`ed before it is
//! handed to `LOOP_CONFIGURE`, and the loop device holds that open file
//! (and so the lock) until it is detached. A second attach of the same
//! image (two filesystems on one image would corrupt it) waits for the
//! lock instead.

use std::collections::HashSet;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::sys::{self, DirChain, Errno};

use super::error::{Result, WorkspaceError};

/// The image file in the session directory.
pub const IMAGE: &CStr = c"disk.img";
/// Its mount point in the session directory.
pub const MOUNT: &CStr = c"disk";
/// Smallest quota: ext4's own metadata (journal, inode tables) needs room.
pub const MIN_DISK_BYTES: u64 = 16 << 20;
/// Free space below which a command counts as having hit the limit (a
/// full ext4 keeps a few blocks that no file can take).
const FULL_MARGIN: u64 = 1 << 20;
/// How long an attach waits for a previous attachment of the image to be
/// torn down.
const ATTACH_WAIT: Duration = Duration::from_secs(10);
/// ext4's magic number (`f_type`).
const EXT4_MAGIC: i64 = 0xEF53;

/// `bytes` for people: `64M`, `1.5G`, `800K`, `12B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in UNITS {
        if bytes >= size {
            let whole = bytes / size;
            let tenth = (bytes % size) * 10 / size;
            return if tenth == 0 {
                format!("{whole}{unit}")
            } else {
                format!("{whole}.{tenth}{unit}")
            };
        }
    }
    format!("{bytes}B")
}

/// How a session's disk use is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskMechanism {
    /// An ext4 image of the quota's size on a loop device: the kernel
    /// refuses writes beyond it (ENOSPC).
    LoopExt4,
    /// Measured after each command; over the limit, commands are refused.
    Accounted,
}

/// The quota of a session (`session.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskPolicy {
    pub max_bytes: u64,
    /// Asked as `--disk-max` (fail closed) rather than `--disk-max-preferred`.
    pub required: bool,
    pub mechanism: DiskMechanism,
}

/// What the session uses, measured now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskUsage {
    /// Bytes used by the writable and sealed layers.
    pub used_bytes: u64,
    /// Bytes the layers may hold in all (the filesystem's capacity for an
    /// image; the quota for accounting).
    pub limit_bytes: u64,
    /// The quota reached: nothing more fits (image), or the accounted use
    /// is over it.
    pub limit_hit: bool,
}

/// The quota `bytes` as asked, and the mechanism this caller gets, or
/// the one-line refusal.
pub fn choose(bytes: u64, required: bool) -> Result<DiskPolicy> {
    if bytes < MIN_DISK_BYTES {
        return Err(WorkspaceError::Refused(
            format!(
                "a session disk quota must be at least {} MiB",
                MIN_DISK_BYTES >> 20
            ),
            "--disk-max SIZE",
        ));
    }
    let mechanism = if sys::geteuid() == 0 {
        DiskMechanism::LoopExt4
    } else if required {
        return Err(WorkspaceError::Refused(
            "--disk-max needs root: an unprivileged caller cannot mount the size-capped filesystem that enforces it; nothing was created".into(),
            "--disk-max-preferred SIZE for a quota that is accounted after each command",
        ));
    } else {
        DiskMechanism::Accounted
    };
    Ok(DiskPolicy {
        max_bytes: bytes,
        required,
        mechanism,
    })
}

/// The e2fsprogs `mkfs.ext4`, from the system directories (not `PATH`:
/// root's `PATH` may lack them, and a caller's should not choose it).
fn mkfs() -> Result<&'static Path> {
    [
        "/usr/sbin/mkfs.ext4",
        "/sbin/mkfs.ext4",
        "/usr/bin/mkfs.ext4",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.is_file())
    .ok_or(WorkspaceError::MkfsMissing)
}

/// Create the image of a new session in `dir` (at `path` on the host),
/// `bytes` long, with an empty ext4 whose root belongs to `owner`, and the
/// mount point.
pub fn create_image(dir: BorrowedFd<'_>, path: &Path, bytes: u64, owner: u32) -> Result<()> {
    let fd = sys::open_beneath(
        dir,
        IMAGE,
        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
        0o600,
    )?;
    let file = std::fs::File::from(fd);
    file.set_len(bytes)
        .map_err(|e| WorkspaceError::io("size the session disk image", e))?;
    drop(file);
    let image = path.join("disk.img");
    let out = std::process::Command::new(mkfs()?)
        .args(["-q", "-F", "-m", "0", "-L", "hutch-session"])
        .arg("-E")
        .arg(format!("root_owner={owner}:{owner},nodiscard"))
        .arg(&image)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| WorkspaceError::io("run mkfs.ext4", e))?;
    if !out.status.success() {
        let first = String::from_utf8_lossy(&out.stderr);
        let first = first
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        return Err(WorkspaceError::MkfsFailed {
            status: out.status,
            first_line: first,
        });
    }
    sys::mkdirat(dir, MOUNT, 0o700)?;
    Ok(())
}

/// Whether the image is mounted at the session's mount point now.
pub fn mounted(dir: BorrowedFd<'_>) -> Result<bool> {
    let at = match sys::open_dir_beneath(dir, MOUNT) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ENOENT => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let (inner, outer) = (sys::fstat(at.as_fd())?, sys::fstat(dir)?);
    if inner.dev == outer.dev {
        return Ok(false);
    }
    Ok(sys::fs_usage(at.as_fd())?.fs_type == EXT4_MAGIC)
}

/// Attach and mount the image unless it is mounted already. The caller
/// holds the session lock.
pub fn attach(dir: BorrowedFd<'_>) -> Result<()> {
    if mounted(dir)? {
        return Ok(());
    }
    let image = sys::open_beneath(dir, IMAGE, libc::O_RDWR | libc::O_CLOEXEC, 0)?;
    if !sys::fstat(image.as_fd())?.is_file() {
        return Err(WorkspaceError::State {
            path: "disk.img".into(),
            reason: "is not a regular file".into(),
        });
    }
    // The lock travels with the open file into the loop device.
    let deadline = Instant::now() + ATTACH_WAIT;
    while !sys::flock_exclusive(image.as_fd(), false)? {
        if Instant::now() >= deadline {
            return Err(WorkspaceError::DiskAttached {
                seconds: ATTACH_WAIT.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let dev = sys::loop_attach(image.as_fd())?;
    drop(image);
    let at = sys::open_beneath(dir, MOUNT, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    let target = sys::fd_path(at.as_raw_fd());
    sys::mount(
        Some(&dev.path),
        &target,
        Some(c"ext4"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME,
        Some(c"errors=remount-ro"),
    )?;
    // The mounted filesystem keeps the device; closing ours lets it
    // detach itself once unmounted.
    drop(dev);
    Ok(())
}

/// Unmount the image (if mounted) of the session directory `dir` (at
/// `path` on the host), then wait for the loop device to release it.
/// Returns whether something still holds it.
pub fn detach(dir: BorrowedFd<'_>, path: &Path) -> Result<bool> {
    if mounted(dir)? {
        // By path (an fd of the mount would keep it busy); the session
        // directory is the caller's and nobody else's (0700).
        let target = std::ffi::CString::new(path.join("disk").as_os_str().as_encoded_bytes())
            .map_err(|_| WorkspaceError::BadPath {
                path: path.display().to_string(),
                reason: "contains NUL".into(),
            })?;
        sys::umount2(&target, libc::UMOUNT_NOFOLLOW)?;
    }
    still_attached(dir, Duration::from_secs(5))
}

/// Whether a loop device still holds the image after `wait`.
pub fn still_attached(dir: BorrowedFd<'_>, wait: Duration) -> Result<bool> {
    let image = match sys::open_beneath(dir, IMAGE, libc::O_RDONLY | libc::O_CLOEXEC, 0) {
        Ok(fd) => fd,
        Err(e) if e.errno == Errno::ENOENT => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let deadline = Instant::now() + wait;
    loop {
        if sys::flock_exclusive(image.as_fd(), false)? {
            return Ok(false);
        }
        if Instant::now() >= deadline {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Usage of the layers on a mounted image (`rw` is its root).
pub fn image_usage(rw: BorrowedFd<'_>) -> Result<DiskUsage> {
    let u = sys::fs_usage(rw)?;
    Ok(DiskUsage {
        used_bytes: u.used,
        limit_bytes: u.capacity,
        limit_hit: u.available < FULL_MARGIN.min(u.capacity / 50) || u.inodes_free == 0,
    })
}

/// Bytes allocated below the directory `root` (every inode once, the
/// directories included), walked iteratively with bounded fds.
pub fn allocated_bytes(root: BorrowedFd<'_>) -> Result<u64> {
    let mut chain = DirChain::new(sys::open_dir_beneath(root, c".")?)?;
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut total = sys::fstat(chain.current())?.blocks * 512;
    let mut pending = vec![sys::list_dir(chain.current())?];
    while let Some(names) = pending.last_mut() {
        let Some(name) = names.pop() else {
            pending.pop();
            if !pending.is_empty() {
                chain.pop()?;
            }
            continue;
        };
        let Some(m) = super::layers::lstat_opt(chain.current(), &name)? else {
            continue;
        };
        if m.nlink > 1 && !m.is_dir() && !seen.insert((m.dev, m.ino)) {
            continue;
        }
        total = total.saturating_add(m.blocks * 512);
        if m.is_dir() {
            chain.push(&name)?;
            pending.push(sys::list_dir(chain.current())?);
        }
    }
    Ok(total)
}
