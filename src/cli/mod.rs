//! Command line front end: every subcommand only builds a Spec (or calls
//! the module that owns the job) and turns the result into an exit code.

mod agent;
mod check;
mod flags;
mod image;
mod image_pull;
pub mod machine;
pub mod oci;
pub mod privileged;
mod proxy;
mod registry_credential;
mod ps;
mod pty;
mod run;
mod search;
mod secret_flags;
mod serve;
mod session;
mod supervise;

use std::ffi::OsString;


const USAGE: &str = "\
usage: hutch <command> [ARGS...]

commands:
  run [OPTIONS] -- CMD...   run a command in a sandbox (see `hutch run --help`)
  agent list|show|check     agent CLI profiles for `run --agent` (docs/agents.md)
  check [--json]            which kernel features hutch needs work here, and fixes
  proxy ...                 run the egress proxy alone
  session ...               persistent workspaces over a sealed baseline
  ps [--json]               the running sandboxes (root: every user's)
  kill SANDBOX|--session ID|--label K=V|--all   end sandboxes and all their processes
  image ...                 import, list, inspect, rm, gc container images
  serve                     one long-lived hutch speaking JSON lines on
                            stdin/stdout, for programs (docs/machine.md)
  bwrap ARGS...             bubblewrap's command line and semantics (docs/bwrap.md)
  version [--json]          print the version (with --json: also the machine
                            interface's version, docs/machine.md)";

/// Entry point of the `hutch` binary; returns the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut it = args.into_iter();
    let cmd = it.next();
    let rest: Vec<OsString> = it.collect();
    match cmd.as_ref().and_then(|c| c.to_str()) {
        Some("run") => run::main(rest),
        Some("agent") => agent::main(rest),
        Some("proxy") => proxy::main(rest),
        Some("check") => check::main(rest),
        Some("session") => session::main(rest),
        Some("ps") => ps::ps_main(rest),
        Some("kill") => ps::kill_main(rest),
        Some("image") => image::main(rest),
        Some("serve") => serve::main(rest),
        Some("bwrap") => crate::bwrap::main("hutch bwrap", rest),
        Some(supervise::SUBCOMMAND) => supervise::main(rest),
        Some(session::WARM_SERVER) => session::warm_server_main(rest),
        // Inside a session's sandbox only (`hutch session glob|grep`).
        Some("__glob") => search::helper::main("glob", rest),
        Some("__grep") => search::helper::main("grep", rest),
        Some("version" | "--version" | "-V") => version(&rest),
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

/// Clear the per-process flags the CLI's verbs set while they run, so that
/// [`main`] can run again in the same process (`hutch serve`'s resident
/// request process, which runs only `session` verbs).
pub(crate) fn reset_process_flags() {
    session::reset_process_flags();
}

/// `hutch version [--json]`.
fn version(args: &[OsString]) -> i32 {
    match args.first().and_then(|a| a.to_str()) {
        None => println!("hutch {}", env!("CARGO_PKG_VERSION")),
        Some("--json") if args.len() == 1 => {
            let result = serde_json::json!({
                "version": env!("CARGO_PKG_VERSION"),
                "machine": machine::VERSION,
            });
            println!("{}", machine::ok_line("version", &result));
        }
        Some(_) => {
            eprintln!(
                "hutch version: unexpected argument {:?}; usage: hutch version [--json]",
                args[0]
            );
            return 125;
        }
    }
    0
}
