//! The launcher: prepare (supervisor, before clone) → clone3 → the sandbox
//! builds itself ([`child`]) while the supervisor ([`supervise`]) writes id
//! maps, relays output, forwards signals and enforces the wall clock.
//!
//! [`launch`] is the one entry for every caller; [`Mode`] says where the
//! supervisor runs: in this process (only when it is single-threaded: the
//! sandbox is forked from it), or in the `hutch` helper (`hutch
//! __supervise`, see [`helper`]), which is how a multi-threaded program
//! launches. [`Mode::Auto`] picks. The library's [`crate::Command`] always
//! uses the helper, so that its [`crate::Child`] can be waited for, polled
//! and killed while the caller goes on.

mod child;
pub(crate) mod create;
mod error;
pub(crate) mod exec;
pub(crate) mod helper;
mod options;
mod plan;
mod prepare;
mod supervisor;
#[cfg(test)]
mod tests;
pub(crate) mod wire;

// The library's face: what a caller of `launch()` names.
pub use error::{
    FailureKind, LaunchError, LaunchFailure, PrepareError, ProcessLimit, ProxyDoorsError,
    StatusFileError,
};
pub use options::{
    FrontEndStatus, Mode, RunOptions, StatusProtocol, TerminalOptions, WorkloadStdio,
};
pub use prepare::image::ImageReport;
pub use prepare::range::IdRangeError;
pub use prepare::validate::validate;
pub use supervisor::Finished;
pub(crate) use supervisor::terminal::DEFAULT_SIZE as DEFAULT_TERMINAL_SIZE;
pub use supervisor::relay::Captured;
pub use supervisor::report::{ChangesReport, Enforcement, ExitReport, Outcome, SetupFailure};
pub use supervisor::usage::Usage;

// For hutch's own front ends (cli, oci, bwrap, the API).
pub(crate) use helper::pool;
pub(crate) use prepare::claim;
pub(crate) use prepare::range as prepare_range;
pub(crate) use prepare::subid as prepare_subid;
pub(crate) use prepare::network_name;

use crate::spec::Spec;

/// Launch a sandbox and wait for it: the one entry for every caller.
pub fn launch(spec: &Spec, opts: &RunOptions, mode: Mode) -> Result<Finished, LaunchError> {
    let mode = match mode {
        Mode::Auto if crate::sys::self_status().threads == 1 => Mode::InProcess,
        Mode::Auto => Mode::Helper(helper::find_binary().ok_or(LaunchError::HelperNotFound)?),
        m => m,
    };
    match mode {
        Mode::Helper(binary) => {
            let stdio = || match opts.stdio {
                WorkloadStdio::Inherit => std::process::Stdio::inherit(),
                WorkloadStdio::Null => std::process::Stdio::null(),
            };
            let mut child =
                helper::HelperChild::spawn(&binary, spec, opts, [stdio(), stdio(), stdio()])?;
            child.wait()
        }
        _ => supervisor::run(spec, opts, None),
    }
}

/// Launch in-process and wait for the report (single-threaded callers).
pub fn run(spec: &Spec, opts: &RunOptions) -> Result<ExitReport, LaunchError> {
    launch(spec, opts, Mode::InProcess).map(|f| f.report)
}
