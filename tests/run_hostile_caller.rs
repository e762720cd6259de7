//! `hutch run` given a hostile working directory by its caller (the runc
//! CVE-2024-21626 class): a directory fd the caller leaked, or its stdin
//! being a host directory, named through `/proc/self/fd/N`. The workload
//! must never start with its cwd (or its program) on the host, with
//! Landlock on and off, as root and as uid 65534.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::*;

const SECRET: &str = "HOST-CANARY-5d1f";

/// A JSON profile: the default one, Landlock on or off.
fn profile(dir: &Path, landlock: bool, who: As) -> std::path::PathBuf {
    let mut spec = hutch::spec::default_profile();
    spec.security.landlock.enabled = landlock;
    let path = dir.join(format!("profile-landlock-{landlock}.json"));
    write_as(&path, &serde_json::to_string(&spec).unwrap(), who);
    path
}

/// `sh -c SCRIPT` as `who`: the script sets up the leak and execs hutch.
fn sh_as(who: As, cwd: &Path, script: &str) -> std::process::Output {
    let mut cmd = if who.drops_to_nobody() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh"]);
        c
    } else {
        Command::new("sh")
    };
    cmd.arg("-c").arg(script).current_dir(cwd);
    cmd.output().expect("spawn sh")
}

/// A host directory with a 0600 canary file the workload's uid owns.
fn host_dir(base: &TempDir, who: As) -> std::path::PathBuf {
    let host = base.path().join("host");
    std::fs::create_dir(&host).unwrap();
    let canary = host.join("canary");
    write_as(&canary, SECRET, who);
    std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600)).unwrap();
    own_as(&host, who);
    host
}

fn assert_host_untouched(
    host: &Path,
    before: &std::fs::Metadata,
    out: &std::process::Output,
    what: &str,
) {
    let after = std::fs::metadata(host.join("canary")).unwrap();
    assert_eq!(
        after.mode() & 0o7777,
        0o600,
        "{what}: the host canary's mode changed"
    );
    assert_eq!(
        after.mtime(),
        before.mtime(),
        "{what}: the host canary's mtime changed"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(SECRET)
            && !String::from_utf8_lossy(&out.stderr).contains(SECRET),
        "{what}: the host canary was read: {}",
        stdout(out)
    );
    assert!(
        !host.join("made-by-sandbox").exists(),
        "{what}: the sandbox wrote to the host"
    );
}

#[test]
fn a_working_directory_through_a_leaked_fd_never_reaches_the_host() {
    for who in identities() {
        for landlock in [true, false] {
            let base = TempDir::new("cwd-leak", who);
            let host = host_dir(&base, who);
            let ws = base.path().join("ws");
            std::fs::create_dir(&ws).unwrap();
            own_as(&ws, who);
            let profile = profile(base.path(), landlock, who);
            let before = std::fs::metadata(host.join("canary")).unwrap();
            let payload = "cat canary; chmod 777 canary; touch -d @0 canary; echo x > made-by-sandbox; ls .. ; pwd";
            // fd 7: leaked without close-on-exec; fd 0: the caller's stdin
            // is the host directory itself.
            for (what, redirect, dir) in [
                ("leaked fd 7", "exec 7< \"$HOST\"", "/proc/self/fd/7"),
                ("stdin dir", "exec 0< \"$HOST\"", "/proc/self/fd/0"),
                ("init's cwd link", "exec 7< \"$HOST\"", "/proc/1/cwd"),
            ] {
                let script = format!(
                    "HOST='{host}'; {redirect}; exec '{hutch}' run --quiet --profile '{profile}' \
                     --chdir {dir} -- sh -c '{payload}'",
                    host = host.display(),
                    hutch = hutch_bin().display(),
                    profile = profile.display(),
                );
                let out = sh_as(who, &ws, &script);
                let what = format!("{who:?}, landlock {landlock}, {what}");
                assert_eq!(
                    out.status.code(),
                    Some(125),
                    "{what}: {}{}",
                    stdout(&out),
                    stderr(&out)
                );
                let err = stderr(&out);
                assert!(
                    err.starts_with("hutch: entering the working directory")
                        && err.lines().count() == 1,
                    "{what}: {err}"
                );
                assert_host_untouched(&host, &before, &out, &what);
            }
            // The program itself named through the caller's stdin: refused
            // as not executable, never run from the host.
            let script_path = host.join("prog");
            write_as(
                &script_path,
                "#!/bin/sh\necho x > \"$(dirname \"$0\")/made-by-sandbox\"\ncat \"$(dirname \"$0\")/canary\"\n",
                who,
            );
            std::fs::set_permissions(&script_path, std::fs::Permissions::from_mode(0o755)).unwrap();
            let script = format!(
                "exec 0< '{host}'; exec '{hutch}' run --quiet --profile '{profile}' --chdir /tmp -- /proc/self/fd/0/prog",
                host = host.display(),
                hutch = hutch_bin().display(),
                profile = profile.display(),
            );
            let out = sh_as(who, &ws, &script);
            let what = format!("{who:?}, landlock {landlock}, program through stdin");
            assert_eq!(
                out.status.code(),
                Some(126),
                "{what}: {}{}",
                stdout(&out),
                stderr(&out)
            );
            assert!(stderr(&out).contains("ELOOP"), "{what}: {}", stderr(&out));
            assert_host_untouched(&host, &before, &out, &what);
        }
    }
}
