//! A privileged install of any of the three binaries (setuid root, setgid,
//! file capabilities), run by uid 65534 with a root-owned file as its
//! status file or log, must refuse to start with one line and leave the
//! file alone. Before the refusal, a setuid hutch-bwrap truncated the
//! file (`--hutch-status-file` opened with the effective uid), `hutch run
//! --status-file` rewrote it and `hutch-oci --log` appended to it.
//!
//! Also the status file's own open: a symbolic link or a FIFO planted at
//! the path the caller names is refused, not followed or waited on.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;

/// How the copy is made privileged.
#[derive(Debug, Clone, Copy)]
enum Install {
    /// chmod 4755, owned by root.
    Setuid,
    /// chmod 2755, group 0 (uid 65534 runs with --clear-groups).
    Setgid,
    /// setcap cap_dac_override+ep.
    FileCap,
}

const INSTALLS: [Install; 3] = [Install::Setuid, Install::Setgid, Install::FileCap];

/// A binary under test: its name, the prefix of its error lines, its
/// setup-failure exit code, and the argv that makes today's code write
/// `victim`.
struct Binary {
    name: &'static str,
    prefix: &'static str,
    exit_code: i32,
    args: fn(&Path, &Path) -> Vec<String>,
}

const HUTCH_BWRAP: Binary = Binary {
    name: "hutch-bwrap",
    prefix: "bwrap",
    exit_code: 1,
    args: |victim, _| {
        let v = victim.display().to_string();
        ["--hutch-status-file", &v, "--ro-bind", "/", "/", "true"]
            .map(String::from)
            .to_vec()
    },
};

const HUTCH: Binary = Binary {
    name: "hutch",
    prefix: "hutch",
    exit_code: 125,
    args: |victim, _| {
        let v = victim.display().to_string();
        ["run", "--bare", "--status-file", &v, "--", "true"]
            .map(String::from)
            .to_vec()
    },
};

const HUTCH_OCI: Binary = Binary {
    name: "hutch-oci",
    prefix: "hutch-oci",
    exit_code: 1,
    args: |victim, root| {
        let (v, r) = (victim.display().to_string(), root.display().to_string());
        ["--log", &v, "--root", &r, "state", "no-such-container"]
            .map(String::from)
            .to_vec()
    },
};

fn built(name: &str) -> PathBuf {
    match name {
        "hutch" => PathBuf::from(env!("CARGO_BIN_EXE_hutch")),
        "hutch-bwrap" => PathBuf::from(env!("CARGO_BIN_EXE_hutch-bwrap")),
        "hutch-oci" => PathBuf::from(env!("CARGO_BIN_EXE_hutch-oci")),
        _ => unreachable!("{name}"),
    }
}

/// A root-owned 0755 directory on a filesystem that honours setuid bits
/// (the temp dir unless it is mounted nosuid, else cargo's target tmp).
fn suid_capable_dir(tag: &str) -> Option<TempDir> {
    let candidates = [
        std::env::temp_dir(),
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    ];
    let base = candidates.into_iter().find(|base| {
        rustix::fs::statvfs(base)
            .is_ok_and(|st| !st.f_flag.contains(rustix::fs::StatVfsMountFlags::NOSUID))
    })?;
    // nextest runs each test in a process of its own.
    let dir = TempDir(base.join(format!("hutch-test-{tag}-{}", std::process::id())));
    std::fs::create_dir_all(dir.path()).unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    Some(dir)
}

fn ready() -> Result<(), String> {
    if !is_root() {
        return Err("making a setuid-root copy needs the tests to run as root".into());
    }
    for tool in ["setpriv", "setcap"] {
        if !have(tool) {
            return Err(format!(
                "{tool} is needed (util-linux, libcap2-bin; .ci/run installs them)"
            ));
        }
    }
    Ok(())
}

/// Copy `bin` into `dir/bin` and make it privileged the way `install` says.
fn install(bin: &Binary, how: Install, dir: &Path) -> PathBuf {
    let bindir = dir.join("bin");
    std::fs::create_dir_all(&bindir).unwrap();
    std::fs::set_permissions(&bindir, PermissionsExt::from_mode(0o755)).unwrap();
    let path = bindir.join(format!("{}-{how:?}", bin.name));
    std::fs::copy(built(bin.name), &path).unwrap();
    std::os::unix::fs::chown(&path, Some(0), Some(0)).unwrap();
    let mode = match how {
        Install::Setuid => 0o4755,
        Install::Setgid => 0o2755,
        Install::FileCap => 0o755,
    };
    std::fs::set_permissions(&path, PermissionsExt::from_mode(mode)).unwrap();
    if let Install::FileCap = how {
        let out = Command::new("setcap")
            .arg("cap_dac_override+ep")
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "setcap: {}", stderr(&out));
    }
    path
}

/// A root-owned file uid 65534 cannot write, but the privileged copy
/// could: 0600 for setuid root and the capability, 0660 group 0 for setgid.
fn victim(dir: &Path, how: Install) -> PathBuf {
    let victims = dir.join("victims");
    std::fs::create_dir_all(&victims).unwrap();
    std::fs::set_permissions(&victims, PermissionsExt::from_mode(0o755)).unwrap();
    let path = victims.join(format!("{how:?}"));
    std::fs::write(&path, "root's precious data\n").unwrap();
    let mode = match how {
        Install::Setgid => 0o660,
        _ => 0o600,
    };
    std::fs::set_permissions(&path, PermissionsExt::from_mode(mode)).unwrap();
    path
}

fn as_nobody(program: &Path, args: &[String], cwd: &Path) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("spawn setpriv")
}

fn refuses_every_privileged_install(bin: Binary) {
    let ready = ready();
    require!(ready.is_ok(), ready.unwrap_err());
    let dir = suid_capable_dir(bin.name);
    require!(
        dir.is_some(),
        "no directory on a filesystem without nosuid (temp dir, CARGO_TARGET_TMPDIR)"
    );
    let dir = dir.unwrap();
    let oci_root = dir.path().join("oci-root");
    std::fs::create_dir_all(&oci_root).unwrap();
    for how in INSTALLS {
        let program = install(&bin, how, dir.path());
        let victim = victim(dir.path(), how);
        let out = as_nobody(&program, &(bin.args)(&victim, &oci_root), dir.path());
        let err = stderr(&out);
        let what = format!("{how:?} {}", bin.name);
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "root's precious data\n",
            "{what}: the root-owned file was written; stderr: {err}"
        );
        assert_eq!(
            out.status.code(),
            Some(bin.exit_code),
            "{what}: exit status; stderr: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        let head = format!(
            "{}: refusing to run: {} is installed setuid/setgid or with file capabilities (",
            bin.prefix, bin.name
        );
        assert!(err.starts_with(&head), "{what}: {err}");
        let (why, fix) = match how {
            Install::Setuid => (
                "real uid 65534, effective uid 0, saved uid 0".to_string(),
                format!("chmod u-s,g-s {}", program.display()),
            ),
            Install::Setgid => (
                "real gid 65534, effective gid 0, saved gid 0".to_string(),
                format!("chmod u-s,g-s {}", program.display()),
            ),
            Install::FileCap => (
                "AT_SECURE is set".to_string(),
                format!("setcap -r {}", program.display()),
            ),
        };
        assert!(err.contains(&why), "{what}: names the ids: {err}");
        assert!(err.contains(&fix), "{what}: says what to do: {err}");
        assert!(
            err.contains("it would act on files with the owner's rights"),
            "{what}: says why: {err}"
        );
        assert!(
            err.contains("user namespaces"),
            "{what}: names the unprivileged path: {err}"
        );
    }
}

#[test]
fn a_privileged_hutch_bwrap_refuses_to_run() {
    refuses_every_privileged_install(HUTCH_BWRAP);
}

#[test]
fn a_privileged_hutch_refuses_to_run() {
    refuses_every_privileged_install(HUTCH);
}

#[test]
fn a_privileged_hutch_oci_refuses_to_run() {
    refuses_every_privileged_install(HUTCH_OCI);
}

/// `--hutch-status-file` may name a path in a directory someone else can
/// write to: a symbolic link planted there is not followed (its target,
/// a file the caller can write, stays as it was), a FIFO without a
/// reader fails at once instead of hanging the launch; a regular file is
/// still created and truncated. (The directory here is the caller's own,
/// so that the kernel's protected_symlinks/protected_fifos, which act in
/// sticky world-writable directories only, do not decide in hutch's place.)
#[test]
fn the_status_file_is_not_a_planted_link_or_fifo() {
    for who in identities() {
        let dir = TempDir::new("status-open", who);
        let target = dir.path().join("callers-file");
        write_as(&target, "the caller's data\n", who);
        let link = dir.path().join("status.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        own_as(&link, who);
        let fifo = dir.path().join("status.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        own_as(&fifo, who);
        let regular = dir.path().join("status-regular.json");
        write_as(&regular, "stale\n", who);
        let run = |status: &Path| {
            let mut c = if who.drops_to_nobody() {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(built("hutch-bwrap"));
                c
            } else {
                Command::new(built("hutch-bwrap"))
            };
            c.arg("--hutch-status-file")
                .arg(status)
                .args(["--ro-bind", "/", "/", "true"])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .output()
                .unwrap()
        };
        let out = run(&link);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{who:?} link: {err}");
        assert!(
            err.contains("it is a symbolic link, which is not followed there"),
            "{who:?} link: {err}"
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "the caller's data\n",
            "{who:?}: the link's target was written"
        );
        let out = run(&fifo);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{who:?} fifo: {err}");
        assert!(
            err.contains("it is not a regular file"),
            "{who:?} fifo: {err}"
        );
        let out = run(&regular);
        assert!(out.status.success(), "{who:?} regular: {}", stderr(&out));
        let report = exit_report(&regular);
        assert_eq!(report["event"], "exit", "{who:?}: {report}");
    }
}
