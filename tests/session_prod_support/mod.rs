//! Helpers of the production-session tests (seal, quota, reaper,
//! defaults): one test's own state directory and runtime directory (so
//! `hutch ps` and `hutch kill --all` see only that test's sandboxes), as
//! root or as the unprivileged user. Test binaries using it also declare
//! `mod common;` and `mod session_support;`.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Result, bail};

#[allow(unused_imports)] // not every test binary uses all of them
pub use crate::common::{As, is_root, wait_for_event, wait_until};
#[allow(unused_imports)]
pub use crate::session_support::{Tmp, can_sandbox, git};

/// Readiness waits: sandboxes start within this on a loaded machine.
pub const READY: Duration = Duration::from_secs(60);

/// One test's world: a temp dir with `state/` and `runtime/` owned by the
/// identity that runs hutch.
pub struct World {
    pub t: Tmp,
    pub state: PathBuf,
    pub runtime: PathBuf,
    pub who: As,
}

impl World {
    pub fn new(tag: &str, who: As) -> World {
        let t = Tmp::new(tag);
        let state = t.0.join("state");
        let runtime = t.0.join("runtime");
        for d in [&state, &runtime] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        if who.drops_to_nobody() {
            chown_nobody(&t.0);
        }
        World {
            t,
            state,
            runtime,
            who,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.t.0.join(rel)
    }

    /// `hutch ARGS` as the world's identity, with its runtime directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = if self.who.drops_to_nobody() {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(env!("CARGO_BIN_EXE_hutch"))
                .env("HOME", "/nonexistent");
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_hutch"))
        };
        c.args(args)
            .env("HUTCH_RUNTIME_DIR", &self.runtime)
            .current_dir(&self.t.0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// `hutch session --state-dir STATE ARGS`.
    pub fn session_command(&self, args: &[&str]) -> Command {
        let state = self.state.to_str().unwrap().to_string();
        let mut full = vec!["session", "--state-dir", &state];
        full.extend_from_slice(args);
        self.command(&full)
    }

    pub fn session(&self, args: &[&str]) -> Output {
        self.session_command(args).output().unwrap()
    }

    pub fn hutch(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// A session command started in the background (its status file
    /// gets the start event once the sandbox runs).
    pub fn spawn_session(&self, args: &[&str]) -> Bg {
        Bg(Some(self.session_command(args).spawn().unwrap()))
    }

    /// `hutch ARGS` in the background.
    pub fn spawn(&self, args: &[&str]) -> Bg {
        Bg(Some(self.command(args).spawn().unwrap()))
    }

    /// Create a session; its id.
    pub fn create(&self, args: &[&str]) -> Result<String> {
        let mut full = vec!["create"];
        full.extend_from_slice(args);
        Ok(ok(&self.session(&full))?.trim().to_string())
    }

    /// `hutch ps --json`'s sandboxes.
    pub fn ps(&self) -> Result<Vec<serde_json::Value>> {
        let v: serde_json::Value = serde_json::from_str(&ok(&self.hutch(&["ps", "--json"]))?)?;
        assert_eq!(v["hutch"], 1);
        assert_eq!(v["verb"], "ps");
        Ok(v["result"]["sandboxes"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The session's audit lines.
    pub fn audit(&self, id: &str) -> Result<Vec<serde_json::Value>> {
        lines(&ok(&self.session(&["audit", id]))?)
    }
}

/// A background process, killed and reaped when dropped (a failing test
/// leaves no process behind).
pub struct Bg(pub Option<Child>);

impl Bg {
    /// Wait for it and collect its output.
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0.take().expect("running").wait_with_output()
    }

    /// SIGKILL it and reap it.
    pub fn kill(&mut self) -> std::io::Result<()> {
        if let Some(mut c) = self.0.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// JSON lines.
pub fn lines(text: &str) -> Result<Vec<serde_json::Value>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
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

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn chown_nobody(p: &Path) {
    let st = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Whether a process whose command line contains `needle` runs.
pub fn running(needle: &str) -> bool {
    Command::new("pgrep")
        .args(["-f", needle])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A number no other test uses (for unique `sleep N` markers).
pub fn unique() -> u64 {
    let mut b = [0u8; 4];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut b).unwrap();
    700_000 + u64::from(u32::from_le_bytes(b) % 200_000)
}

/// A git repository at `dir` with `files` committed; the commit id. The
/// tree belongs to the world's identity.
pub fn repo(w: &World, dir: &Path, files: &[(&str, &str)]) -> Result<String> {
    std::fs::create_dir_all(dir)?;
    git(dir, &["init", "-q"])?;
    for (path, content) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap())?;
        std::fs::write(p, content)?;
    }
    git(dir, &["add", "-A"])?;
    git(dir, &["commit", "-qm", "base"])?;
    let rev = git(dir, &["rev-parse", "HEAD"])?;
    if w.who.drops_to_nobody() {
        chown_nobody(dir);
    }
    Ok(rev)
}

/// Two tests of `body` (a `fn(As) -> Result<()>`): as root, and as the
/// unprivileged user (uid 65534), each skipped (a failure in CI) where
/// hutch cannot launch so.
#[macro_export]
macro_rules! as_root_and_unprivileged {
    ($body:ident: $root:ident, $nobody:ident) => {
        #[test]
        fn $root() -> anyhow::Result<()> {
            $crate::require!(
                $crate::common::can_launch_as($crate::common::As::Root).is_ok()
                    && $crate::session_support::can_sandbox(),
                "needs root and a launcher"
            );
            $body($crate::common::As::Root)
        }

        #[test]
        fn $nobody() -> anyhow::Result<()> {
            $crate::require!(
                $crate::common::can_launch_as($crate::common::As::Nobody).is_ok()
                    && $crate::session_support::can_sandbox(),
                "needs a launcher"
            );
            $body($crate::common::As::Nobody)
        }
    };
}

impl World {
    /// A host directory `rel` holding `files` (path, content; parents
    /// made), owned by the world's identity.
    pub fn tree(&self, rel: &str, files: &[(&str, &str)]) -> Result<PathBuf> {
        let dir = self.path(rel);
        std::fs::create_dir_all(&dir)?;
        for (path, content) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap())?;
            std::fs::write(p, content)?;
        }
        Ok(dir)
    }

    /// Hand `dir` (made with [`World::tree`] and more) to the world's
    /// identity.
    pub fn own(&self, dir: &Path) {
        if self.who.drops_to_nobody() {
            chown_nobody(dir);
        }
    }

    /// The `--json` result of a session verb.
    pub fn json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let v: serde_json::Value = serde_json::from_str(&ok(&self.session(&full))?)?;
        Ok(v["result"].clone())
    }

    /// `session write ID PATH` with `data` on stdin.
    pub fn write(&self, id: &str, path: &str, data: &str) -> Result<()> {
        let src = self.path("write.in");
        std::fs::write(&src, data)?;
        let o = self
            .session_command(&["write", id, path])
            .stdin(std::fs::File::open(&src)?)
            .output()?;
        ok(&o)?;
        Ok(())
    }

    /// The state directory holds nothing (no session, no shared layer,
    /// no leftover of any kind).
    pub fn state_is_empty(&self) -> Result<()> {
        let left: Vec<_> = std::fs::read_dir(&self.state)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()?;
        anyhow::ensure!(left.is_empty(), "left in the state directory: {left:?}");
        Ok(())
    }

    /// `git apply --check` of `patch` on a fresh export of commit `rev`
    /// of `repo` (what a platform does before it opens a pull request).
    pub fn applies_to_fresh_checkout(&self, repo: &Path, rev: &str, patch: &str) -> Result<()> {
        let fresh = self.path("fresh");
        let _ = std::fs::remove_dir_all(&fresh);
        std::fs::create_dir(&fresh)?;
        let tar = self.path("fresh.tar");
        git(repo, &["archive", "-o", tar.to_str().unwrap(), rev])?;
        let st = Command::new("tar")
            .arg("-xf")
            .arg(&tar)
            .arg("-C")
            .arg(&fresh)
            .status()?;
        anyhow::ensure!(st.success(), "tar -x");
        std::fs::write(self.path("change.patch"), patch)?;
        git(
            &fresh,
            &[
                "apply",
                "--check",
                self.path("change.patch").to_str().unwrap(),
            ],
        )?;
        Ok(())
    }
}
