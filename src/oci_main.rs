//! The `hutch-oci` binary: an OCI runtime with runc's command line.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(hutch::internals::cli::oci::main(args));
}
