//! The bubblewrap front end: bubblewrap's command line with bubblewrap's
//! semantics, as a Spec for the one launcher (`hutch-bwrap`, installed as
//! `bwrap`, and `hutch bwrap ARGS`). See `docs/bwrap.md` for the option
//! table and every difference from bubblewrap.
//!
//! - [`args`]: the command line, parsed as bubblewrap parses it (`--args
//!   FD` in place), with its messages;
//! - [`translate`]: the parsed line → a [`crate::spec::Spec`] and the
//!   launch-time extras (status fds, locks);
//! - [`error`]: bubblewrap's error shapes (`bwrap: ...`, exit 1).

pub mod args;
pub mod error;
mod status;
pub mod translate;

use std::ffi::OsString;
use std::path::PathBuf;

use crate::launch::{self, FrontEndStatus, Outcome, RunOptions};
use crate::spec::{Network, Spec};
pub use error::BwrapError;
use status::StatusFds;

/// The bubblewrap release whose command line this speaks.
pub const BWRAP_VERSION: &str = "0.11.0";

/// `HUTCH_BWRAP_PROFILE`: a hutch profile whose limits, network (egress)
/// and security (seccomp, Landlock) are added to the bwrap argv's Spec.
pub const PROFILE_ENV: &str = "HUTCH_BWRAP_PROFILE";

/// The option list of `--help` (after `usage: PROGRAM ...`).
const USAGE: &str = "\
    --help                       Print this help
    --version                    Print version
    --args FD                    Parse NUL-separated args from FD
    --argv0 VALUE                Set argv[0] to the value VALUE before running the program
    --level-prefix               Prepend e.g. <3> to diagnostic messages
    --unshare-all                Unshare every namespace we support by default
    --share-net                  Retain the network namespace (can only combine with --unshare-all)
    --unshare-user               Create new user namespace (may be automatically implied if not setuid)
    --unshare-user-try           Create new user namespace if possible else continue by skipping it
    --unshare-ipc                Create new ipc namespace
    --unshare-pid                Create new pid namespace
    --unshare-net                Create new network namespace
    --unshare-uts                Create new uts namespace
    --unshare-cgroup             Create new cgroup namespace
    --unshare-cgroup-try         Create new cgroup namespace if possible else continue by skipping it
    --userns FD                  Use this user namespace (cannot combine with --unshare-user)
    --userns2 FD                 After setup switch to this user namespace, only useful with --userns
    --disable-userns             Disable further use of user namespaces inside sandbox
    --assert-userns-disabled     Fail unless further use of user namespace inside sandbox is disabled
    --pidns FD                   Use this pid namespace (as parent namespace if using --unshare-pid)
    --uid UID                    Custom uid in the sandbox (requires --unshare-user or --userns)
    --gid GID                    Custom gid in the sandbox (requires --unshare-user or --userns)
    --hostname NAME              Custom hostname in the sandbox (requires --unshare-uts)
    --chdir DIR                  Change directory to DIR
    --clearenv                   Unset all environment variables
    --setenv VAR VALUE           Set an environment variable
    --unsetenv VAR               Unset an environment variable
    --lock-file DEST             Take a lock on DEST while sandbox is running
    --sync-fd FD                 Keep this fd open while sandbox is running
    --bind SRC DEST              Bind mount the host path SRC on DEST
    --bind-try SRC DEST          Equal to --bind but ignores non-existent SRC
    --dev-bind SRC DEST          Bind mount the host path SRC on DEST, allowing device access
    --dev-bind-try SRC DEST      Equal to --dev-bind but ignores non-existent SRC
    --ro-bind SRC DEST           Bind mount the host path SRC readonly on DEST
    --ro-bind-try SRC DEST       Equal to --ro-bind but ignores non-existent SRC
    --bind-fd FD DEST            Bind open directory or path fd on DEST
    --ro-bind-fd FD DEST         Bind open directory or path fd read-only on DEST
    --remount-ro DEST            Remount DEST as readonly; does not recursively remount
    --overlay-src SRC            Read files from SRC in the following overlay
    --overlay RWSRC WORKDIR DEST Mount overlayfs on DEST, with RWSRC as the host path for writes and
                                 WORKDIR an empty directory on the same filesystem as RWSRC
    --tmp-overlay DEST           Mount overlayfs on DEST, with writes going to an invisible tmpfs
    --ro-overlay DEST            Mount overlayfs read-only on DEST
    --exec-label LABEL           Exec label for the sandbox
    --file-label LABEL           File label for temporary sandbox content
    --proc DEST                  Mount new procfs on DEST
    --dev DEST                   Mount new dev on DEST
    --tmpfs DEST                 Mount new tmpfs on DEST
    --mqueue DEST                Mount new mqueue on DEST
    --dir DEST                   Create dir at DEST
    --file FD DEST               Copy from FD to destination DEST
    --bind-data FD DEST          Copy from FD to file which is bind-mounted on DEST
    --ro-bind-data FD DEST       Copy from FD to file which is readonly bind-mounted on DEST
    --symlink SRC DEST           Create symlink at DEST with target SRC
    --seccomp FD                 Load and use seccomp rules from FD (not repeatable)
    --add-seccomp-fd FD          Load and use seccomp rules from FD (repeatable)
    --block-fd FD                Block on FD until some data to read is available
    --userns-block-fd FD         Block on FD until the user namespace is ready
    --info-fd FD                 Write information about the running container to FD
    --json-status-fd FD          Write container status to FD as multiple JSON documents
    --new-session                Create a new terminal session
    --die-with-parent            Kills with SIGKILL child process (COMMAND) when bwrap or bwrap's parent dies.
    --as-pid-1                   Do not install a reaper process with PID=1
    --cap-add CAP                Add cap CAP when running as privileged user
    --cap-drop CAP               Drop cap CAP when running as privileged user
    --perms OCTAL                Set permissions of next argument (--bind-data, --file, etc.)
    --size BYTES                 Set size of next argument (only for --tmpfs)
    --chmod OCTAL PATH           Change permissions of PATH (must already exist)
    --not-a-security-boundary    Accepted, no effect (hutch-bwrap stays fail-closed)

hutch-bwrap only (before every bwrap option; docs/bwrap.md):
    --hutch-profile FILE         Add this hutch profile's limits, network and security
                                 (also: HUTCH_BWRAP_PROFILE=FILE)
    --hutch-status-file FILE     Write hutch's start event and exit report to FILE";

/// `usage: PROGRAM [OPTIONS...] ...` and the option list, as bubblewrap
/// prints it (naming the program as it was invoked).
pub fn usage(program: &str) -> String {
    format!("usage: {program} [OPTIONS...] [--] COMMAND [ARGS...]\n\n{USAGE}")
}

/// Entry of `hutch-bwrap` and `hutch bwrap`: `program` is how it was
/// invoked (for the usage line), `args` what follows; returns the exit
/// status.
pub fn main(program: &str, args: Vec<OsString>) -> i32 {
    let mut level_prefix = args.iter().any(|a| a == "--level-prefix");
    match run(program, args, &mut level_prefix) {
        Ok(code) => code,
        Err(BwrapError::Usage) => {
            eprintln!("{}", usage(program));
            1
        }
        Err(e) => {
            eprintln!("{}", e.line(level_prefix));
            1
        }
    }
}

/// The hutch options that may precede the bwrap ones.
#[derive(Debug, Default)]
struct HutchOptions {
    profile: Option<PathBuf>,
    status_file: Option<PathBuf>,
}

fn hutch_options(args: &mut Vec<OsString>) -> Result<HutchOptions, BwrapError> {
    let mut o = HutchOptions {
        profile: std::env::var_os(PROFILE_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        ..HutchOptions::default()
    };
    loop {
        let slot = match args.first().and_then(|a| a.to_str()) {
            Some("--hutch-profile") => &mut o.profile,
            Some("--hutch-status-file") => &mut o.status_file,
            _ => return Ok(o),
        };
        if args.len() < 2 {
            return Err(BwrapError::die(format!(
                "{} takes an argument",
                args[0].to_string_lossy()
            )));
        }
        *slot = Some(PathBuf::from(args[1].clone()));
        args.drain(..2);
    }
}

/// Add a hutch profile's limits, network and security to `spec`.
pub fn merge_profile(spec: &mut Spec, profile: &Spec) {
    spec.limits = profile.limits.clone();
    if let Network::Proxy(p) = &profile.network {
        spec.network = Network::Proxy(p.clone());
        spec.namespaces.net = true;
    }
    let (caps, nnp, bpf) = (
        spec.security.capabilities.take(),
        spec.security.no_new_privs,
        std::mem::take(&mut spec.security.seccomp_bpf),
    );
    spec.security = profile.security.clone();
    // The argv's own BPF programs come after the profile's.
    spec.security.seccomp_bpf.extend(bpf);
    // The capabilities stay bubblewrap's (the argv asked for them).
    spec.security.capabilities = caps;
    spec.security.cap_add = Vec::new();
    spec.security.no_new_privs = nnp;
}

fn run(program: &str, mut args: Vec<OsString>, level_prefix: &mut bool) -> Result<i32, BwrapError> {
    let hutch = hutch_options(&mut args)?;
    let parsed = args::parse(args, &mut args::ProcessFds)?;
    *level_prefix = parsed.level_prefix;
    match parsed.action {
        Some(args::Action::Help) => {
            println!("{}", usage(program));
            return Ok(0);
        }
        Some(args::Action::Version) => {
            println!(
                "bubblewrap {BWRAP_VERSION} (hutch-bwrap {})",
                env!("CARGO_PKG_VERSION")
            );
            return Ok(0);
        }
        _ => {}
    }
    for w in &parsed.warnings {
        eprintln!("{}bwrap: {w}", if parsed.level_prefix { "<4>" } else { "" });
    }
    let caller = translate::Caller::current();
    let mut parsed = parsed;
    if hutch.profile.is_some() {
        // A hutch profile's limits end the whole sandbox (the wall clock,
        // a kill): that needs a pid namespace of its own, in which hutch
        // init is pid 1 and takes every process with it.
        parsed.unshare_pid = true;
    }
    let (mut spec, extras) = translate::translate(&parsed, &caller, &mut args::ProcessFds)?;
    if let Some(path) = &hutch.profile {
        let profile = crate::spec::load_profile(path)
            .map_err(|e| BwrapError::die(format!("hutch profile: {e}")))?;
        merge_profile(&mut spec, &profile);
    }
    // What the caller left open reaches the command, as in bubblewrap
    // (read now: the fds the options consumed are closed by now).
    let open = crate::sys::inheritable_fds()
        .map_err(|e| BwrapError::io("Can't read /proc/self/fd", &e))?;
    spec.inherit_fds = translate::passed_fds(&parsed, &open);
    if extras.die_with_parent {
        crate::sys::die_with_parent().map_err(|e| BwrapError::io("prctl(PR_SET_PDEATHSIG)", &e))?;
    }
    let opts = RunOptions {
        status_file: hutch.status_file,
        quiet: true,
        status_protocol: Some(FrontEndStatus(std::sync::Arc::new(StatusFds {
            info: extras.info_fd,
            json_status: extras.json_status_fd,
            block: extras.block_fds.clone(),
        }))),
        ..RunOptions::default()
    };
    let result = launch::run(&spec, &opts);
    // Held (and the --sync-fd kept open) until the sandbox is over.
    drop(extras);
    match result {
        Ok(report) => match report.reason {
            Outcome::ExecFailed => {
                // The errno execve failed with (ELOOP, ENOEXEC, ...), as
                // bubblewrap's execvp message; else what the status says.
                let errno = report
                    .failure
                    .as_ref()
                    .and_then(|f| f.errno.as_deref())
                    .and_then(errno_named)
                    .unwrap_or(if report.status == 126 {
                        libc::EACCES
                    } else {
                        libc::ENOENT
                    });
                Err(BwrapError::errno(
                    format!("execvp {}", spec.command[0]),
                    errno,
                ))
            }
            Outcome::SetupFailed => {
                let line = report
                    .error
                    .unwrap_or_else(|| "the sandbox could not be set up".into());
                Err(symlink_conflict(&spec, &line).unwrap_or_else(|| BwrapError::die(line)))
            }
            _ => {
                if let Some(e) = &report.error {
                    eprintln!("{}bwrap: {e}", if *level_prefix { "<3>" } else { "" });
                }
                Ok(report.status)
            }
        },
        Err(e) => Err(BwrapError::die(e.to_string())),
    }
}

/// A `--symlink` whose destination is a link to another target, in
/// bubblewrap's words (its test suite matches them): `Can't make symlink
/// at DEST: existing destination is TARGET`.
fn symlink_conflict(spec: &crate::spec::Spec, line: &str) -> Option<BwrapError> {
    let existing = crate::fs::symlink_conflict_target(line)?;
    let names = crate::fs::op_names(spec);
    let i = names
        .iter()
        .position(|name| line.starts_with(&format!("{name}:")))?;
    let crate::spec::FsOp::Symlink { dest, .. } = spec.fs.get(i)? else {
        return None;
    };
    Some(BwrapError::die(format!(
        "Can't make symlink at {}: existing destination is {existing}",
        dest.to_string_lossy()
    )))
}

/// The errno a report names (`ELOOP`: `Errno`'s Debug form).
fn errno_named(name: &str) -> Option<i32> {
    (1..4096).find(|&n| format!("{:?}", crate::sys::Errno::from_raw(n)) == name)
}
