//! Shared helpers for the `hutch session` integration tests: skipping,
//! temporary directories, running `hutch session` (optionally as uid 65534)
//! and host git.

#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Result, bail};

/// Skip (or fail under HUTCH_REQUIRE=all) when `cond` is false.
pub fn require(cond: bool, reason: &str) -> bool {
    if !cond {
        if std::env::var("HUTCH_REQUIRE").as_deref() == Ok("all") {
            panic!("required feature missing: {reason}");
        }
        eprintln!("skipped: {reason}");
    }
    cond
}

pub fn is_root() -> bool {
    hutch::internals::sys::geteuid() == 0
}

/// `hutch run -- /bin/true` works (default sandbox).
pub fn can_sandbox() -> bool {
    Command::new(env!("CARGO_BIN_EXE_hutch"))
        .args(["run", "--", "/bin/true"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `hutch run --bare` with only /usr bound works.
pub fn can_sandbox_bare() -> bool {
    Command::new(env!("CARGO_BIN_EXE_hutch"))
        .args([
            "run",
            "--bare",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--",
            "/bin/true",
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A fresh 0755 directory under the temp dir, removed (made writable
/// first) on drop.
pub struct Tmp(pub PathBuf);

impl Tmp {
    pub fn new(tag: &str) -> Tmp {
        let mut b = [0u8; 8];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
            .unwrap();
        let p = std::env::temp_dir().join(format!("hutch-test-{tag}-{}", hex::encode(b)));
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        Tmp(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+rwx")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `hutch session --state-dir STATE ARGS`, optionally as uid 65534 (via
/// setpriv, HOME=/nonexistent); stdin is null, stdout and stderr piped.
pub fn hutch_command(state: &Path, args: &[&str], unprivileged: bool) -> Command {
    let mut c = if unprivileged {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_hutch"))
            .env("HOME", "/nonexistent");
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_hutch"))
    };
    c.arg("session").arg("--state-dir").arg(state).args(args);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Run [`hutch_command`] to completion.
pub fn hutch(state: &Path, args: &[&str], unprivileged: bool) -> Output {
    hutch_command(state, args, unprivileged).output().unwrap()
}

/// Run [`hutch_command`] to completion with `stdin` as its input.
pub fn hutch_with_stdin(state: &Path, args: &[&str], unprivileged: bool, stdin: &[u8]) -> Output {
    let mut child = hutch_command(state, args, unprivileged)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut i = child.stdin.take().unwrap();
    let _ = i.write_all(stdin);
    drop(i);
    child.wait_with_output().unwrap()
}

/// Stdout of a successful run, else an error with its stderr.
pub fn ok(o: &Output) -> Result<String> {
    if !o.status.success() {
        bail!(
            "hutch failed ({:?}): {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A state directory `t/state`; with `owner_65534` all of `t` is chowned
/// to uid/gid 65534.
pub fn state_dir(t: &Tmp, owner_65534: bool) -> Result<PathBuf> {
    let state = t.0.join("state");
    std::fs::create_dir(&state)?;
    if owner_65534 {
        Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&t.0)
            .status()?;
    }
    Ok(state)
}

/// Host git in `dir`, ignoring the user's and system configuration;
/// returns trimmed stdout.
pub fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let o = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "safe.directory=*",
        ])
        .args(args)
        .output()?;
    if !o.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}
