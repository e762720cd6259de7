//! The `hutch` binary: a thin shell over the CLI.

fn main() {
    // First: a setuid/setgid or file-capability install is refused before
    // argv, the environment or any file is read (125: hutch's setup failure).
    hutch::entry::refuse_elevated_start("hutch", "hutch", 125);
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(hutch::entry::hutch(args));
}
