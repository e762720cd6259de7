//! The `hutch-oci` binary: an OCI runtime with runc's command line.

fn main() {
    // First: a setuid/setgid or file-capability install is refused before
    // argv, the environment or any file is read (1, runc's failure code).
    hutch::entry::refuse_elevated_start("hutch-oci", "hutch-oci", 1);
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(hutch::entry::hutch_oci(args));
}
