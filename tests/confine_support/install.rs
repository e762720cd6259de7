//! Installing a compiled seccomp program for real, in a forked child, so
//! that the test process stays unconfined.

/// Nanoseconds one `seccomp(SECCOMP_SET_MODE_FILTER)` of `prog` takes, in a
/// forked child (the kernel checks, converts and JITs the program and
/// builds its action cache).
pub fn install_ns(prog: &[hutch::internals::sys::sock_filter]) -> u64 {
    let mut fds = [0; 2];
    // SAFETY: creating a pipe into a local array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child makes raw syscalls only and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: raw prctl/clock_gettime/seccomp/write/_exit in the child.
        unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            let mut t0: libc::timespec = std::mem::zeroed();
            let mut t1: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t0);
            let r = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog,
            );
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t1);
            let ns: u64 = if r == 0 {
                ((t1.tv_sec - t0.tv_sec) * 1_000_000_000 + (t1.tv_nsec - t0.tv_nsec)) as u64
            } else {
                u64::MAX
            };
            libc::write(fds[1], &ns as *const u64 as *const libc::c_void, 8);
            libc::_exit(0);
        }
    }
    let mut ns = 0u64;
    // SAFETY: reading 8 bytes into a local; waiting for our own child.
    unsafe {
        libc::close(fds[1]);
        assert_eq!(
            libc::read(fds[0], &mut ns as *mut u64 as *mut libc::c_void, 8),
            8
        );
        libc::close(fds[0]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    assert_ne!(ns, u64::MAX, "the kernel refused the program");
    ns
}
