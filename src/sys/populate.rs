//! Filling a process's page tables for a range of its own mappings ahead
//! of use (`MADV_POPULATE_READ`, Linux 5.14+): a forked process maps the
//! pages of its binary's code only as it faults on them (fork copies no
//! page-table entries of file mappings), and a `hutch serve` request's
//! process that has them mapped before its request comes skips those
//! faults on the request's path.

/// `MADV_POPULATE_READ` (not in every libc crate version).
const MADV_POPULATE_READ: libc::c_int = 22;

/// Map the pages of `[start, start + len)` of this process (readable,
/// page-aligned, from `/proc/self/maps`) without touching their contents.
pub fn populate_read(start: usize, len: usize) -> Result<(), crate::sys::Errno> {
    // SAFETY: madvise with MADV_POPULATE_READ only maps pages of an
    // existing range (EFAULT/ENOMEM for a bad one); it changes no memory
    // this process can observe.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, len, MADV_POPULATE_READ) };
    if r == 0 {
        Ok(())
    } else {
        Err(crate::sys::Errno::last())
    }
}
