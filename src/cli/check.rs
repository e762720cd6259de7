//! `hutch check [--json]`: which kernel features hutch needs work here.

use std::ffi::OsString;
use std::io::Write;

/// Run the probes and print the report. Exit code 0 when every feature
/// the default profile needs works, 1 when one does not, 2 on bad usage.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut json = false;
    for a in &args {
        match a.to_str() {
            Some("--json") => json = true,
            Some("-h" | "--help") => {
                println!(
                    "usage: hutch check [--json]\n\n\
                     Tries every kernel feature hutch uses (in short-lived child processes) and\n\
                     says whether it works here, and if not, why and how to fix it.\n\
                     Exit status: 0 when everything `hutch run` needs by default works, 1 otherwise."
                );
                return 0;
            }
            _ => {
                eprintln!(
                    "hutch check: unknown argument {:?}; usage: hutch check [--json]",
                    a
                );
                return 2;
            }
        }
    }
    let mut report = crate::probe::run_all();
    name_limit_flags(&mut report.cgroup);
    let text = if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => s + "\n",
            Err(e) => {
                eprintln!("hutch check: cannot encode the report as JSON: {e}");
                return 125;
            }
        }
    } else {
        crate::probe::human(&report)
    };
    // A closed stdout (e.g. `| head`) is not worth a panic; the exit code
    // still says whether hutch can run here.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    if report.ok { 0 } else { 1 }
}

/// The cgroup probe names each limit by its Spec key; `hutch check` speaks
/// to `hutch run` users, so each entry also gets the flag that sets it.
fn name_limit_flags(cgroup: &mut serde_json::Value) {
    let Some(limits) = cgroup.get_mut("limits").and_then(|l| l.as_object_mut()) else {
        return;
    };
    for entry in limits.values_mut() {
        let flag = entry
            .get("key")
            .and_then(|k| k.as_str())
            .and_then(super::flags::flag_for);
        if let (Some(flag), Some(obj)) = (flag, entry.as_object_mut()) {
            obj.insert("flag".into(), flag.into());
        }
    }
}
