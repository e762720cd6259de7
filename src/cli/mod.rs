//! Command line front end: every subcommand only builds a Spec.

use std::ffi::OsString;

pub mod proxy;

/// Entry point of the `hutch` binary; returns the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut args = args.into_iter();
    let sub = args.next();
    let rest: Vec<OsString> = args.collect();
    match sub.as_ref().and_then(|s| s.to_str()) {
        Some("proxy") => proxy::main(rest),
        _ => {
            eprintln!("hutch: under construction");
            125
        }
    }
}
