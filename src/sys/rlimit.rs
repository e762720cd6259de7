//! Resource limits: getrlimit (setrlimit lives in process.rs).

use super::{SysError, check};

/// The name of an RLIMIT_* resource as written in error messages.
pub fn rlimit_name(resource: libc::c_int) -> &'static str {
    match resource as u32 {
        libc::RLIMIT_AS => "RLIMIT_AS",
        libc::RLIMIT_CORE => "RLIMIT_CORE",
        libc::RLIMIT_CPU => "RLIMIT_CPU",
        libc::RLIMIT_DATA => "RLIMIT_DATA",
        libc::RLIMIT_FSIZE => "RLIMIT_FSIZE",
        libc::RLIMIT_LOCKS => "RLIMIT_LOCKS",
        libc::RLIMIT_MEMLOCK => "RLIMIT_MEMLOCK",
        libc::RLIMIT_MSGQUEUE => "RLIMIT_MSGQUEUE",
        libc::RLIMIT_NICE => "RLIMIT_NICE",
        libc::RLIMIT_NOFILE => "RLIMIT_NOFILE",
        libc::RLIMIT_NPROC => "RLIMIT_NPROC",
        libc::RLIMIT_RSS => "RLIMIT_RSS",
        libc::RLIMIT_RTPRIO => "RLIMIT_RTPRIO",
        libc::RLIMIT_RTTIME => "RLIMIT_RTTIME",
        libc::RLIMIT_SIGPENDING => "RLIMIT_SIGPENDING",
        libc::RLIMIT_STACK => "RLIMIT_STACK",
        _ => "RLIMIT_?",
    }
}

/// Current (soft, hard) limits of `resource`.
pub fn getrlimit(resource: libc::c_int) -> Result<(u64, u64), SysError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid, writable rlimit.
    let r = unsafe { libc::getrlimit(resource as _, &mut lim) };
    check(r as libc::c_long, || {
        format!("getrlimit({})", rlimit_name(resource))
    })?;
    Ok((lim.rlim_cur, lim.rlim_max))
}
