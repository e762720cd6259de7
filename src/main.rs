//! The `hutch` binary: a thin shell over [`hutch::cli`].

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(hutch::cli::main(args));
}
