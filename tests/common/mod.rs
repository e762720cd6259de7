//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Skip a test (with the reason printed) when a kernel feature or
/// privilege is missing; with `HUTCH_REQUIRE=all` (CI) a skip is a failure.
#[macro_export]
macro_rules! require {
    ($cond:expr, $why:expr) => {
        if !$cond {
            if std::env::var("HUTCH_REQUIRE").as_deref() == Ok("all") {
                panic!(
                    "required for this test but missing (HUTCH_REQUIRE=all): {}",
                    $why
                );
            }
            eprintln!("SKIP {}: {}", module_path!(), $why);
            return;
        }
    };
}

/// Who launches hutch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum As {
    Root,
    /// uid/gid 65534 through `setpriv`, the unprivileged path.
    Nobody,
}

pub const NOBODY: u32 = 65534;

pub fn hutch_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hutch"))
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether `who` can launch hutch here (root for As::Root; setpriv and a
/// traversable binary path for As::Nobody).
pub fn can_launch_as(who: As) -> Result<(), String> {
    if !is_root() {
        return Err("these tests launch as root and as uid 65534; run them as root".into());
    }
    if who == As::Nobody && !have("setpriv") {
        return Err("setpriv (util-linux) is needed to drop to uid 65534".into());
    }
    Ok(())
}

/// A fresh directory owned by the launching identity, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str, who: As) -> Self {
        let mut rnd = [0u8; 6];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut rnd))
            .unwrap();
        let dir = std::env::temp_dir().join(format!("hutch-test-{tag}-{}", hex(&rnd)));
        std::fs::create_dir_all(&dir).unwrap();
        if who == As::Nobody {
            std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Write a file owned by `who`.
pub fn write_as(path: &Path, content: &str, who: As) {
    std::fs::write(path, content).unwrap();
    if who == As::Nobody {
        std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
}

/// `hutch ARGS` as `who`, in `cwd`.
pub fn hutch_as(who: As, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = match who {
        As::Root => Command::new(hutch_bin()),
        As::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(hutch_bin());
            c
        }
    };
    cmd.args(args)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null());
    cmd.output().expect("spawn hutch")
}

/// `hutch run -- sh -c SCRIPT` as `who` in `cwd`.
pub fn sandbox_sh(who: As, cwd: &Path, script: &str) -> Output {
    hutch_as(who, cwd, &["run", "--quiet", "--", "sh", "-c", script])
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A wrapper script that runs the hutch binary as uid 65534, for the
/// library's `hutch_binary` (fds 3 and 4 pass through exec).
pub fn nobody_wrapper(dir: &Path) -> PathBuf {
    let path = dir.join("hutch-as-nobody");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {} \"$@\"\n",
            hutch_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// The exit report: the last line of a `--status-file`.
pub fn exit_report(status_file: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(status_file).unwrap();
    serde_json::from_str(text.lines().last().expect("a status file with lines")).unwrap()
}
