//! The `hutch-bwrap` binary: bubblewrap's command line (install it as
//! `bwrap` first in PATH; docs/bwrap.md).

fn main() {
    // First: a setuid/setgid or file-capability install (the way bubblewrap
    // was shipped until 0.12) is refused before argv, the environment or any
    // file is read; 1 is bubblewrap's failure code.
    hutch::entry::refuse_elevated_start("bwrap", "hutch-bwrap", 1);
    let mut args = std::env::args_os();
    let program = args
        .next()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bwrap".into());
    std::process::exit(hutch::entry::hutch_bwrap(&program, args.collect()));
}
