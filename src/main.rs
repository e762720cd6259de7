//! The `hutch` binary: a thin shell over the CLI.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(hutch::internals::cli::main(args));
}
