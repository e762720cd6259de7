//! Command line front end: every subcommand only builds a Spec.

use std::ffi::OsString;

mod session;
mod session_run;

/// Entry point of the `hutch` binary; returns the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut args = args.into_iter();
    let first = args.next();
    let rest: Vec<OsString> = args.collect();
    match first.as_ref().and_then(|a| a.to_str()) {
        Some("session") => session::main(rest),
        _ => {
            eprintln!("hutch: under construction");
            125
        }
    }
}
