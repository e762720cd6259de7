//! Git baselines are exported by `git` running inside a hutch sandbox: it
//! sees the repository's git directory and nothing else of the host, as
//! root and as an unprivileged user, from the CLI and from a threaded
//! library caller.

mod common;
mod session_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use anyhow::Result;
use session_support::*;

/// A repository with one commit at `dir`; returns the commit id.
fn repo(dir: &Path) -> Result<String> {
    std::fs::create_dir_all(dir.join("src"))?;
    git(dir, &["init", "-q"])?;
    std::fs::write(dir.join("README"), "hello\n")?;
    std::fs::write(dir.join("src/lib.rs"), "pub fn f() {}\n")?;
    std::fs::write(dir.join("big.bin"), vec![7u8; 3 << 20])?;
    git(dir, &["add", "-A"])?;
    git(dir, &["commit", "-qm", "init"])?;
    git(dir, &["rev-parse", "HEAD"])
}

/// An object reachable only through `objects/info/alternates` (a path
/// elsewhere on the host) is not found: the sandboxed git sees the
/// repository's git directory and nothing else. Host git would follow it.
#[test]
fn sandboxed_git_sees_only_the_repository() -> Result<()> {
    require!(can_sandbox(), "needs a working launcher");
    let t = Tmp::new("git-alt");
    let rev = repo(&t.0.join("origin"))?;
    let borrower = t.0.join("borrower");
    std::fs::create_dir(&borrower)?;
    git(&borrower, &["init", "-q"])?;
    std::fs::write(
        borrower.join(".git/objects/info/alternates"),
        format!("{}\n", t.0.join("origin/.git/objects").display()),
    )?;
    // Host git resolves the commit through the alternate.
    assert_eq!(git(&borrower, &["cat-file", "-t", &rev])?, "commit");
    let state = state_dir(&t, false)?;
    let o = hutch(
        &state,
        &[
            "create",
            "--from-git",
            borrower.to_str().unwrap(),
            "--rev",
            &rev,
        ],
        false,
    );
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("commit {rev} is not in the repository"))
            && err.contains("alternates")
            && err.lines().count() == 1,
        "{err}"
    );
    // Nothing of the attempt is left behind.
    assert_eq!(std::fs::read_dir(&state)?.count(), 0);
    // The origin itself imports fine.
    let id = ok(&hutch(
        &state,
        &[
            "create",
            "--from-git",
            t.0.join("origin").to_str().unwrap(),
            "--rev",
            &rev,
        ],
        false,
    ))?
    .trim()
    .to_string();
    let big = std::fs::read(state.join(&id).join("baseline/tree/big.bin"))?;
    assert_eq!(big, vec![7u8; 3 << 20]);
    // The staging directory of the sandboxed git is gone.
    assert!(!state.join(&id).join("git").exists());
    Ok(())
}

/// The same commit gives the same fingerprint as root (git runs as the
/// repository's owner, here uid 65534 with a private 0700 repository) and
/// as uid 65534 itself.
#[test]
fn git_import_as_root_and_as_an_unprivileged_user() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    require!(can_sandbox(), "needs a working launcher");
    let t = Tmp::new("git-users");
    let r = t.0.join("repo");
    let rev = repo(&r)?;
    let state = state_dir(&t, true)?;
    std::fs::set_permissions(&r, std::fs::Permissions::from_mode(0o700))?;
    std::fs::set_permissions(r.join(".git"), std::fs::Permissions::from_mode(0o700))?;
    let root_state = t.0.join("root-state");
    std::fs::create_dir(&root_state)?;
    let args = ["create", "--from-git", r.to_str().unwrap(), "--rev", &rev];
    let as_root = ok(&hutch(&root_state, &args, false))?.trim().to_string();
    let as_user = ok(&hutch(&state, &args, true))?.trim().to_string();
    let info = |state: &Path, id: &str| -> Result<serde_json::Value> {
        Ok(serde_json::from_slice(&std::fs::read(
            state.join(id).join("session.json"),
        )?)?)
    };
    let (a, b) = (info(&root_state, &as_root)?, info(&state, &as_user)?);
    assert_eq!(a["fingerprint"], b["fingerprint"]);
    assert_eq!(a["files"], 3);
    assert_eq!(
        std::fs::read_to_string(state.join(&as_user).join("baseline/tree/src/lib.rs"))?,
        "pub fn f() {}\n"
    );
    // A private repository of root's imports as root too.
    let private = t.0.join("root-repo");
    let rev2 = repo(&private)?;
    assert_eq!(rev2.len(), 40);
    Command::new("chmod")
        .args(["-R", "go-rwx"])
        .arg(&private)
        .status()?;
    let id = ok(&hutch(
        &root_state,
        &[
            "create",
            "--from-git",
            private.to_str().unwrap(),
            "--rev",
            &rev2,
        ],
        false,
    ))?
    .trim()
    .to_string();
    assert_eq!(
        std::fs::read_to_string(root_state.join(&id).join("baseline/tree/README"))?,
        "hello\n"
    );
    // ... and the sandboxed git could not change it.
    assert!(git(&private, &["status", "--porcelain"])?.is_empty());
    Ok(())
}

/// A multi-threaded library caller (this test) imports through the
/// `hutch` binary instead of launching in-process.
#[test]
fn library_git_import_from_a_threaded_process() -> Result<()> {
    require!(can_sandbox(), "needs a working launcher");
    let t = Tmp::new("git-lib");
    let r = t.0.join("repo");
    let rev = repo(&r)?;
    let state = state_dir(&t, false)?;
    // Make sure this process really is multi-threaded.
    let _thread = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(5)));
    let dir = hutch::workspace::StateDir::open(&state)?;
    let session = dir.create(&hutch::workspace::CreateOptions::new(
        hutch::workspace::Source::Git {
            repo: r.clone(),
            rev: rev.clone(),
        },
    ))?;
    let tree = state.join(session.id()).join("baseline/tree");
    assert_eq!(std::fs::read_to_string(tree.join("README"))?, "hello\n");
    // A blob id instead of a commit is refused by name.
    let blob = git(&r, &["rev-parse", "HEAD:README"])?;
    let err = dir
        .create(&hutch::workspace::CreateOptions::new(
            hutch::workspace::Source::Git { repo: r, rev: blob },
        ))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("is a blob, not a commit"), "{err}");
    Ok(())
}
