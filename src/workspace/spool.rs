//! Output built whole before any of it is shown (so a failure or an
//! exceeded byte limit prints nothing), in bounded memory: the first MiB
//! stays in memory, the rest goes to an unnamed temporary file
//! (`O_TMPFILE`) in a directory of hutch's own. A byte limit is checked on
//! every write, so work stops as soon as the limit is certain to be
//! exceeded.

use std::fs::File;
use std::io::{Seek, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::sys;

use super::error::{Result, WorkspaceError};

/// Bytes kept in memory before spilling to the temporary file.
const MEMORY_MAX: usize = 1 << 20;

/// An append-only buffer: memory, then a temporary file.
#[derive(Debug)]
pub struct Spool {
    dir: OwnedFd,
    mem: Vec<u8>,
    file: Option<File>,
    len: u64,
}

impl Spool {
    /// A spool whose temporary file (if needed) lives in `dir`.
    pub fn new(dir: BorrowedFd<'_>) -> Result<Spool> {
        Ok(Spool {
            dir: dir
                .try_clone_to_owned()
                .map_err(|e| WorkspaceError::io("dup a directory fd", e))?,
            mem: Vec::new(),
            file: None,
            len: 0,
        })
    }

    /// The directory of the temporary file.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// A reader of everything written, from the start.
    pub fn reader(&mut self) -> std::io::Result<Box<dyn std::io::Read + '_>> {
        match &mut self.file {
            None => Ok(Box::new(&self.mem[..])),
            Some(f) => {
                f.flush()?;
                f.rewind()?;
                Ok(Box::new(f))
            }
        }
    }

    /// Copy everything written, in order, to `out`.
    pub fn copy_to(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        match &mut self.file {
            None => out.write_all(&self.mem),
            Some(f) => {
                f.flush()?;
                f.rewind()?;
                std::io::copy(f, out)?;
                Ok(())
            }
        }
    }
}

impl Write for Spool {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.file.is_none() && self.mem.len() + buf.len() > MEMORY_MAX {
            let fd = sys::tmpfile_in(self.dir.as_fd())
                .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))?;
            let mut f = File::from(fd);
            f.write_all(&self.mem)?;
            self.mem = Vec::new();
            self.file = Some(f);
        }
        match &mut self.file {
            None => self.mem.extend_from_slice(buf),
            Some(f) => f.write_all(buf)?,
        }
        self.len += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            None => Ok(()),
            Some(f) => f.flush(),
        }
    }
}

/// The io error a [`Limited`] writer fails with once past its limit.
#[derive(Debug, thiserror::Error)]
#[error("the output limit was exceeded")]
pub struct LimitExceeded;

/// Whether `e` is a [`LimitExceeded`].
pub fn is_limit(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<LimitExceeded>())
}

/// A writer that counts into a shared total and fails (with
/// [`LimitExceeded`]) as soon as the total passes `limit`.
pub struct Limited<'a, W: Write + ?Sized> {
    pub inner: &'a mut W,
    pub total: &'a mut u64,
    pub limit: u64,
}

impl<W: Write + ?Sized> Write for Limited<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        *self.total = self.total.saturating_add(buf.len() as u64);
        if *self.total > self.limit {
            return Err(std::io::Error::other(LimitExceeded));
        }
        self.inner.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
