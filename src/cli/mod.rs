//! Command line front end: every subcommand only builds a Spec (or calls
//! the module that owns the job) and turns the result into an exit code.

mod check;
mod image;
pub mod machine;
pub mod oci;
mod proxy;
mod run;
mod session;
mod supervise;

use std::ffi::OsString;

pub use run::{USAGE as RUN_USAGE, parse as parse_run, run_spec};

const USAGE: &str = "\
usage: hutch <command> [ARGS...]

commands:
  run [OPTIONS] -- CMD...   run a command in a sandbox (see `hutch run --help`)
  check [--json]            which kernel features hutch needs work here, and fixes
  proxy ...                 run the egress proxy alone
  session ...               persistent workspaces over a sealed baseline
  image ...                 import, list, inspect, rm, gc container images
  version                   print the version";

/// Entry point of the `hutch` binary; returns the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut it = args.into_iter();
    let cmd = it.next();
    let rest: Vec<OsString> = it.collect();
    match cmd.as_ref().and_then(|c| c.to_str()) {
        Some("run") => run::main(rest),
        Some("proxy") => proxy::main(rest),
        Some("check") => check::main(rest),
        Some("session") => session::main(rest),
        Some("image") => image::main(rest),
        Some(supervise::SUBCOMMAND) => supervise::main(rest),
        Some("version" | "--version" | "-V") => {
            println!("hutch {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            0
        }
        Some(other) => {
            eprintln!("hutch: unknown command {other:?}\n{USAGE}");
            125
        }
        None => {
            eprintln!("{USAGE}");
            125
        }
    }
}
