//! Command line front end: every subcommand only builds a Spec.

use std::ffi::OsString;

/// Entry point of the `hutch` binary; returns the process exit code.
pub fn main(_args: Vec<OsString>) -> i32 {
    eprintln!("hutch: under construction");
    125
}
