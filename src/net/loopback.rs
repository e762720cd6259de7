//! Bring `lo` up inside a fresh network namespace.

use crate::sys::{self, SysError};

/// Set IFF_UP on `lo` with SIOCSIFFLAGS.
pub fn bring_up_lo() -> Result<(), SysError> {
    sys::set_interface_up(c"lo")
}
