//! One request's process: a fork of the (single-threaded) server that puts
//! its pipes on stdin/stdout/stderr (and the report descriptor), takes the
//! client's cwd and environment, and runs the CLI's own entry point on the
//! request's argv, exactly as `hutch ARGV...` would, without an execve.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use crate::sys::raw;

/// What the forked process needs: the argv and where each descriptor goes.
pub(crate) struct ChildSetup {
    pub argv: Vec<String>,
    /// (descriptor, number it gets in the child): 0, 1, 2 and maybe the
    /// report descriptor.
    pub fds: Vec<(OwnedFd, RawFd)>,
    pub cwd: Option<String>,
    pub env: Vec<(String, Option<String>)>,
    pub server_pid: u32,
}

/// Run in the forked child; never returns.
pub(crate) fn run(setup: ChildSetup) -> ! {
    // The request dies with the server (its sandbox with it: hutch's own
    // parent-death chain), even if the server is SIGKILLed.
    if raw::set_pdeathsig(libc::SIGKILL).is_err()
        || std::os::unix::process::parent_id() != setup.server_pid
    {
        raw::exit_now(125);
    }
    if let Err(e) = place_fds(&setup.fds) {
        // stderr may not be the request's yet: say it on both.
        let _ = writeln!(
            std::io::stderr(),
            "hutch serve: could not set up the request's descriptors: dup2 => {e:?}"
        );
        raw::exit_now(125);
    }
    if take_env_and_cwd(&setup.env, setup.cwd.as_deref()).is_err() {
        raw::exit_now(125);
    }
    let args: Vec<OsString> = setup.argv.into_iter().map(OsString::from).collect();
    let code = crate::cli::main(args);
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// Take the request's environment changes and cwd, in the process that
/// runs it; on failure the request's stderr has the line saying why (and
/// the request exits 125).
pub(super) fn take_env_and_cwd(
    env: &[(String, Option<String>)],
    cwd: Option<&str>,
) -> Result<(), ()> {
    if let Err(e) = crate::sys::set_env_single_threaded(env) {
        eprintln!("hutch serve: the request's environment was refused: {e}");
        return Err(());
    }
    if let Some(dir) = cwd
        && let Err(e) = std::env::set_current_dir(dir)
    {
        eprintln!(
            "hutch serve: the request's cwd {dir:?} cannot be entered: {e} (send an existing directory as \"cwd\")"
        );
        return Err(());
    }
    Ok(())
}

fn place_fds(fds: &[(OwnedFd, RawFd)]) -> Result<(), crate::sys::Errno> {
    let pairs: Vec<(BorrowedFd<'_>, RawFd)> = fds.iter().map(|(fd, to)| (fd.as_fd(), *to)).collect();
    raw::place_fds(&pairs)
}
