//! Shared helpers for the `hutch session` integration tests: temporary
//! directories, running `hutch session` (optionally on the unprivileged
//! path) and host git. Skips use `crate::require!` (tests/common), so a
//! test binary using this module declares `mod common;` too.

#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Result, bail};

#[allow(unused_imports)] // not every test binary uses them all
pub use crate::common::{As, can_launch_as, flocks_on, is_root};

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
        if std::fs::remove_dir_all(&self.0).is_err() {
            // Trees deeper than std's recursive removal copes with.
            let _ = Command::new("rm").arg("-rf").arg(&self.0).status();
        }
    }
}

/// `hutch session --state-dir STATE ARGS`, optionally on the unprivileged
/// path: as uid 65534 (via setpriv, HOME=/nonexistent) when the tests run
/// as root, else as the current user; stdin is null, stdout and stderr
/// piped.
pub fn hutch_command(state: &Path, args: &[&str], unprivileged: bool) -> Command {
    let mut c = if unprivileged && is_root() {
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
/// to uid/gid 65534 (when the tests run as root: else the current user,
/// the unprivileged path, owns it already).
pub fn state_dir(t: &Tmp, owner_65534: bool) -> Result<PathBuf> {
    let state = t.0.join("state");
    std::fs::create_dir(&state)?;
    if owner_65534 && is_root() {
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

/// [`hutch_command`] under resource limits: `prlimit LIMITS -- ...` (e.g.
/// `--nofile=1024`, `--as=536870912`), applied before the switch to uid
/// 65534 so they hold for hutch itself.
pub fn hutch_limited(state: &Path, args: &[&str], unprivileged: bool, limits: &[&str]) -> Command {
    let plain = hutch_command(state, args, unprivileged);
    let mut c = Command::new("prlimit");
    c.args(limits)
        .arg("--")
        .arg(plain.get_program())
        .args(plain.get_args());
    for (k, v) in plain.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Run `cmd` to completion, killing it (and failing) after `secs` seconds.
pub fn output_within(mut cmd: Command, secs: u64) -> Result<Output> {
    let mut child = cmd.spawn()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    // Drain the pipes on threads so a chatty child cannot block on them.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = std::io::Read::read_to_end(o, &mut v);
        }
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = std::io::Read::read_to_end(e, &mut v);
        }
        v
    });
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Output {
                status,
                stdout: t_out.join().unwrap_or_default(),
                stderr: t_err.join().unwrap_or_default(),
            });
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{:?} did not end within {secs}s",
                cmd.get_args().collect::<Vec<_>>()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `depth` nested directories named `d` below `top` (created through fds,
/// so any depth works), with `leaf` written as a file at the bottom.
/// Returns nothing; the tree belongs to the caller.
pub fn deep_tree(top: &Path, depth: usize, leaf: &[u8]) -> Result<()> {
    use std::os::fd::AsFd;
    let mut fd = hutch::internals::sys::open_dir_path(top)?;
    for _ in 0..depth {
        match hutch::internals::sys::mkdirat(fd.as_fd(), c"d", 0o755) {
            Ok(()) => {}
            Err(e) if e.errno == hutch::internals::sys::Errno::EEXIST => {}
            Err(e) => return Err(e.into()),
        }
        fd = hutch::internals::sys::open_dir_beneath(fd.as_fd(), c"d")?;
    }
    let f = hutch::internals::sys::open_beneath(
        fd.as_fd(),
        c"leaf",
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o644,
    )?;
    std::fs::File::from(f).write_all(leaf)?;
    Ok(())
}

/// Peak RSS (KiB) of the children this process waited for (getrusage).
pub fn children_max_rss_kib() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss())
        .unwrap_or(0)
}

/// chown -R to uid/gid 65534.
pub fn chown_nobody(p: &Path) {
    Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(p)
        .status()
        .unwrap();
}
