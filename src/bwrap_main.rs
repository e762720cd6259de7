//! The `hutch-bwrap` binary: bubblewrap's command line (install it as
//! `bwrap` first in PATH; docs/bwrap.md).

fn main() {
    let mut args = std::env::args_os();
    let program = args
        .next()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bwrap".into());
    std::process::exit(hutch::internals::bwrap::main(&program, args.collect()));
}
