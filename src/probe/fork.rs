//! The probes' fork framework: try a feature in a forked child that exits,
//! and bring back what happened.
//!
//! The caller may be multi-threaded (the test harness, a tokio app), so
//! after fork the child only makes [`crate::sys::raw`] calls (no
//! allocation, no locks); each step is numbered so that the parent can
//! turn the failing one into words. A child that hangs anyway is killed.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::sys::{Errno, SysError, raw};

/// What a probe child returned: a value, or the number of the step that
/// failed and its errno.
pub type ProbeResult = Result<i64, (u32, Errno)>;

/// Number a raw call's failure as probe step `n`.
pub trait Step<T> {
    fn step(self, n: u32) -> Result<T, (u32, Errno)>;
}

impl<T> Step<T> for Result<T, Errno> {
    fn step(self, n: u32) -> Result<T, (u32, Errno)> {
        self.map_err(|e| (n, e))
    }
}

/// How a probe child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildOutcome {
    /// The child reported a result.
    Done(ProbeResult),
    /// The child died without reporting (raw wait status).
    Died(libc::c_int),
    /// The child did not report within the time limit and was killed.
    TimedOut,
}

/// Run `f` in a forked child and bring back its result.
///
/// `f` must only make [`crate::sys::raw`] calls: no allocation, no locks
/// (another thread of the parent may have held them at fork time). A child
/// that hangs anyway is killed after `limit`. The child dies with the
/// parent (PR_SET_PDEATHSIG) and is always reaped.
pub fn in_child<F: FnOnce() -> ProbeResult>(
    f: F,
    limit: Duration,
) -> Result<ChildOutcome, SysError> {
    let (rd, wr) = raw::pipe(0).map_err(|e| SysError::new("pipe2(O_CLOEXEC)", e))?;
    let pid = raw::fork_then(|| {
        let _ = raw::set_pdeathsig(libc::SIGKILL);
        // A panic must not unwind into the parent's code path in the child.
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or(Err((u32::MAX, Errno::EFAULT)));
        let _ = raw::write(wr.as_fd(), &encode(res));
        0
    })
    .map_err(|e| SysError::new("fork()", e))?;
    drop(wr);
    let outcome = read_outcome(rd, limit);
    if outcome.is_none() {
        let _ = raw::kill(pid, libc::SIGKILL);
    }
    let status = wait_child(pid);
    Ok(match outcome {
        Some(res) => ChildOutcome::Done(res),
        None if status == Some(-1) => ChildOutcome::TimedOut,
        None => ChildOutcome::Died(status.unwrap_or(0)),
    })
}

const MSG_LEN: usize = 16;

fn encode(res: ProbeResult) -> [u8; MSG_LEN] {
    let (tag, a, b): (u32, u32, i64) = match res {
        Ok(v) => (0, 0, v),
        Err((step, errno)) => (1, step, errno as i64),
    };
    let mut m = [0u8; MSG_LEN];
    m[..4].copy_from_slice(&tag.to_ne_bytes());
    m[4..8].copy_from_slice(&a.to_ne_bytes());
    m[8..].copy_from_slice(&b.to_ne_bytes());
    m
}

fn decode(m: &[u8; MSG_LEN]) -> ProbeResult {
    let word = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&m[r]);
        u32::from_ne_bytes(b)
    };
    let mut v = [0u8; 8];
    v.copy_from_slice(&m[8..]);
    let v = i64::from_ne_bytes(v);
    if word(0..4) == 0 {
        Ok(v)
    } else {
        Err((word(4..8), Errno::from_raw(v as i32)))
    }
}

/// Read one message within `limit`; None on timeout or EOF.
fn read_outcome(fd: OwnedFd, limit: Duration) -> Option<ProbeResult> {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; MSG_LEN];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        match raw::poll_one(fd.as_fd(), libc::POLLIN, ms) {
            Err(Errno::EINTR) => continue,
            Err(_) | Ok(0) => return None,
            Ok(_) => {}
        }
        return match raw::read(fd.as_fd(), &mut buf) {
            Ok(MSG_LEN) => Some(decode(&buf)),
            _ => None,
        };
    }
}

/// Reap `pid`; Some(status), or Some(-1) when it was killed by SIGKILL.
fn wait_child(pid: libc::pid_t) -> Option<libc::c_int> {
    match raw::waitpid(pid, libc::__WALL) {
        Ok(Some((_, status))) => {
            if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL {
                Some(-1)
            } else {
                Some(status)
            }
        }
        _ => None,
    }
}

/// A NUL-terminated path or string built without allocating.
#[derive(Clone, Copy)]
pub struct CBuf([u8; 256]);

impl CBuf {
    /// Copy `parts` into a NUL-terminated buffer (truncated to fit).
    pub fn new(parts: &[&[u8]]) -> CBuf {
        let mut b = [0u8; 256];
        let mut i = 0;
        for p in parts {
            for &c in *p {
                if i < b.len() - 1 && c != 0 {
                    b[i] = c;
                    i += 1;
                }
            }
        }
        CBuf(b)
    }

    pub fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.0).unwrap_or(c"")
    }
}

/// Decimal digits of `n` without allocating.
pub fn decimal(n: u32, out: &mut [u8; 10]) -> &[u8] {
    let mut i = out.len();
    let mut n = n;
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &out[i..];
        }
    }
}

/// fork(2) from a probe child (single-threaded there) and wait: `f` runs
/// in the grandchild. Ok from `f` comes back as Ok(0); Err((_, errno))
/// comes back as Err((n, errno)) (the grandchild's step number is lost, so
/// `f` should be a single step).
pub fn fork_wait(f: impl FnOnce() -> ProbeResult, n: u32) -> ProbeResult {
    let pid = raw::fork_then(|| match f() {
        Ok(_) => 0,
        Err((_, errno)) => (1 + errno as libc::c_int).min(255),
    })
    .step(n)?;
    let (_, status) = raw::waitpid(pid, 0).step(n)?.ok_or((n, Errno::ECHILD))?;
    if !libc::WIFEXITED(status) {
        return Err((n, Errno::ECHILD));
    }
    match libc::WEXITSTATUS(status) {
        0 => Ok(0),
        code => Err((n, Errno::from_raw(code - 1))),
    }
}

/// A child holding a fresh user namespace open until dropped (then reaped).
pub struct UsernsHolder {
    pub pid: libc::pid_t,
    hold: Option<OwnedFd>,
}

impl Drop for UsernsHolder {
    fn drop(&mut self) {
        self.hold.take();
        let _ = raw::waitpid(self.pid, 0);
    }
}

/// Fork a child that unshares a user namespace and then blocks until the
/// holder is dropped. The caller writes its maps and uses
/// /proc/PID/ns/user meanwhile.
pub fn fork_userns_holder(n: u32) -> Result<UsernsHolder, (u32, Errno)> {
    let (ready_r, ready_w) = raw::pipe(0).step(n)?;
    let (hold_r, hold_w) = raw::pipe(0).step(n)?;
    let (hold_w_fd, ready_r_fd) = (hold_w.as_raw_fd(), ready_r.as_raw_fd());
    let pid = raw::fork_then(|| {
        // The child's copies of the parent's ends: closed, or the hold
        // pipe would never see its writer go.
        raw::close(hold_w_fd);
        raw::close(ready_r_fd);
        // 0 for success, else the errno (all errnos fit in a byte).
        let byte = match raw::unshare(libc::CLONE_NEWUSER) {
            Ok(()) => 0,
            Err(e) => e as u8,
        };
        let _ = raw::write(ready_w.as_fd(), &[byte]);
        let _ = raw::read(hold_r.as_fd(), &mut [0u8; 1]);
        0
    })
    .step(n)?;
    drop((hold_r, ready_w));
    let holder = UsernsHolder {
        pid,
        hold: Some(hold_w),
    };
    let mut byte = [0u8; 1];
    match raw::read(ready_r.as_fd(), &mut byte) {
        Ok(1) if byte[0] == 0 => Ok(holder),
        Ok(1) => Err((n, Errno::from_raw(byte[0] as i32))),
        _ => Err((n, Errno::ECHILD)),
    }
}

/// clone3 with CLONE_PIDFD whose child `_exit`s at once; reaps it and
/// returns the pidfd number the kernel handed out (then closed).
pub fn clone3_pidfd_exit(n: u32) -> ProbeResult {
    let (pid, pidfd) = raw::clone3_exit_at_once(0).step(n)?;
    let _ = raw::waitpid(pid, 0);
    Ok(std::os::fd::AsRawFd::as_raw_fd(&pidfd) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_survive_the_pipe_encoding() {
        for r in [
            Ok(0),
            Ok(-5),
            Ok(i64::MAX),
            Err((0, Errno::EPERM)),
            Err((17, Errno::ENOSPC)),
        ] {
            assert_eq!(decode(&encode(r)), r);
        }
    }

    #[test]
    fn cbuf_and_decimal_build_nul_terminated_paths() {
        let mut d = [0u8; 10];
        assert_eq!(decimal(0, &mut d), b"0");
        assert_eq!(decimal(4_294_967_295, &mut d), b"4294967295");
        let b = CBuf::new(&[b"/proc/", decimal(1234, &mut [0u8; 10]), b"/uid_map"]);
        assert_eq!(b.as_cstr(), c"/proc/1234/uid_map");
        // Too long: truncated but still NUL-terminated.
        let long = [b'a'; 400];
        assert_eq!(CBuf::new(&[&long]).as_cstr().to_bytes().len(), 255);
    }

    #[test]
    fn child_results_and_failures_come_back() {
        let limit = Duration::from_secs(5);
        assert_eq!(in_child(|| Ok(42), limit), Ok(ChildOutcome::Done(Ok(42))));
        assert_eq!(
            in_child(|| raw::unshare(-1).step(3).map(|_| 0), limit),
            Ok(ChildOutcome::Done(Err((3, Errno::EINVAL))))
        );
        // A child that dies without reporting is not mistaken for success.
        assert!(matches!(
            in_child(|| std::process::abort(), limit),
            Ok(ChildOutcome::Died(_))
        ));
    }

    #[test]
    fn a_hanging_child_is_killed_and_reaped() {
        let start = Instant::now();
        let out = in_child(
            || loop {
                std::hint::spin_loop();
            },
            Duration::from_millis(200),
        );
        assert_eq!(out, Ok(ChildOutcome::TimedOut));
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
