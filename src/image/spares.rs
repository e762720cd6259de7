//! Empty files created ahead by a second thread, for the unpacker to
//! rename into place where it would create a regular file.
//!
//! Allocating an inode can be the slowest step of an unpack: on ext4
//! without a journal, each allocation scans past every inode of its block
//! group removed in the last minute (up to 5), so within minutes of a
//! large removal a create costs 80-160 us instead of ~10 (docs/images.md,
//! "the slow phase"). Made here, the allocations run on the other core
//! while the unpacker reads, decompresses and writes; a rename into the
//! layer allocates nothing. A spare is made with `O_CREAT|O_EXCL|O_NOFOLLOW`
//! in a private directory of the layer's staging, its descriptor kept, and
//! moved with `RENAME_NOREPLACE`: nothing that existed before is written.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::sys;
use crate::sys::image as fsx;

/// Spares made ahead of the unpacker at the most.
const AHEAD: usize = 64;

/// The unpacker's end: a spare's name in [`Spares::dir`] and its open
/// descriptor (write-only).
pub struct Spares {
    dir: OwnedFd,
    rx: Receiver<(CString, OwnedFd)>,
}

impl Spares {
    /// The directory the spares are made in (to rename from).
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The next spare; None once the maker stopped (a failed create: the
    /// caller then creates the file itself).
    pub fn take(&self) -> Option<(CString, OwnedFd)> {
        self.rx.recv().ok()
    }
}

/// The maker's end: run [`Maker::run`] on a thread of its own.
pub struct Maker {
    dir: OwnedFd,
    tx: SyncSender<(CString, OwnedFd)>,
}

impl Maker {
    /// Make spares until the unpacker's end is dropped or a create fails.
    pub fn run(self) {
        for i in 0u64.. {
            let Ok(name) = CString::new(i.to_string()) else {
                return;
            };
            let Ok(fd) = fsx::create_file_at(self.dir.as_fd(), &name, 0o600) else {
                return;
            };
            if self.tx.send((name, fd)).is_err() {
                return;
            }
        }
    }
}

/// A maker and its unpacker's end over the (new, empty, private)
/// directory `dir`, on the layer's file system.
pub fn spares(dir: OwnedFd) -> Result<(Maker, Spares), sys::SysError> {
    let (tx, rx) = sync_channel(AHEAD);
    let maker_dir = rustix::io::dup(&dir)
        .map_err(|e| sys::SysError::new("dup(spare dir)", sys::Errno::from_raw(e.raw_os_error())))?;
    Ok((Maker { dir: maker_dir, tx }, Spares { dir, rx }))
}
