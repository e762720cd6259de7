//! The `hutch-bwrap` binary: bubblewrap's command line (install it as
//! `bwrap` first in PATH; docs/bwrap.md).

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(hutch::internals::bwrap::main(args));
}
