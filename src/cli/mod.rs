//! Command line front end: every subcommand only builds a Spec.

mod check;

use std::ffi::OsString;

/// Entry point of the `hutch` binary; returns the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut args = args.into_iter();
    let cmd = args.next();
    let rest: Vec<OsString> = args.collect();
    match cmd.as_ref().and_then(|c| c.to_str()) {
        Some("check") => check::main(rest),
        _ => {
            eprintln!("hutch: under construction");
            125
        }
    }
}
