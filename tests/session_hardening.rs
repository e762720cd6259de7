//! Host-side hardening of sessions (issue 11 §2–§6, §9; issue 10 §11):
//! hostile repository metadata, import caps, bounded memory of diff and
//! export, deep trees under a 1024-fd limit, writes that never follow a
//! hardlink, escaped names, and the CLI's edges. Each scenario runs as root
//! and as uid 65534 where both apply.

mod common;
mod session_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, Result, bail};
use session_support::*;

/// A fresh test directory and state directory; with `unprivileged`, both
/// belong to uid 65534 (call [`own`] again after adding files).
fn setup(tag: &str, unprivileged: bool) -> Result<(Tmp, PathBuf)> {
    let t = Tmp::new(tag);
    let state = state_dir(&t, unprivileged)?;
    Ok((t, state))
}

fn own(t: &Tmp, unprivileged: bool) {
    if unprivileged {
        chown_nobody(t.path());
    }
}

/// The one skip (`common::skip`) in a form that returns whether to go on,
/// for the helpers shared by a root and an unprivileged test.
fn require(ok: bool, why: &str) -> bool {
    if !ok {
        common::skip(module_path!(), &why);
    }
    ok
}

fn needs_root_for(unprivileged: bool) -> bool {
    require(
        !unprivileged || (is_root() && Command::new("setpriv").arg("--version").output().is_ok()),
        "needs root and setpriv to run as uid 65534",
    )
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A session over a small directory baseline (`keep.txt`, `a/base.txt`).
fn dir_session(t: &Tmp, state: &Path, unprivileged: bool) -> Result<String> {
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("a"))?;
    std::fs::write(src.join("keep.txt"), "keep\n")?;
    std::fs::write(src.join("a/base.txt"), "base\n")?;
    own(t, unprivileged);
    Ok(ok(&hutch(
        state,
        &["create", "--from", src.to_str().unwrap()],
        unprivileged,
    ))?
    .trim()
    .to_string())
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

// ---------------------------------------------------------------- §2

/// Hostile `.git` shapes: a `commondir` symlinked to a canary (whose
/// content must never appear), a FIFO (must not hang), `/dev/zero` (as a
/// link and, for root, as a device node), a 1 GiB `.git` file (must not be
/// read whole: hutch runs under a 256 MiB address-space limit), and a
/// gitdir outside the repository. Each fails fast with one line.
fn hostile_git_metadata(unprivileged: bool) -> Result<()> {
    if !needs_root_for(unprivileged) {
        return Ok(());
    }
    let (t, state) = setup("hostile-git", unprivileged)?;
    let secret = format!(
        "HUTCH-CANARY-{}",
        hex::encode(t.path().as_os_str().as_encoded_bytes())
    );
    let canary = t.path().join("canary");
    std::fs::write(&canary, format!("{secret}\n"))?;
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere)?;
    git(&elsewhere, &["init", "-q"])?;
    type Plant = Box<dyn Fn(&Path) -> Result<()>>;
    let mut cases: Vec<(&str, Plant)> = vec![
        (
            "commondir symlinked to a canary",
            Box::new({
                let canary = canary.clone();
                move |g: &Path| Ok(std::os::unix::fs::symlink(&canary, g.join("commondir"))?)
            }),
        ),
        (
            "commondir a FIFO",
            Box::new(|g: &Path| {
                let st = Command::new("mkfifo").arg(g.join("commondir")).status()?;
                anyhow::ensure!(st.success());
                Ok(())
            }),
        ),
        (
            "commondir a link to /dev/zero",
            Box::new(|g: &Path| {
                Ok(std::os::unix::fs::symlink(
                    "/dev/zero",
                    g.join("commondir"),
                )?)
            }),
        ),
        (
            ".git a 1 GiB file",
            Box::new(|g: &Path| {
                std::fs::remove_dir_all(g)?;
                let f = std::fs::File::create(g)?;
                f.set_len(1 << 30)?;
                Ok(())
            }),
        ),
        (
            ".git naming a git directory elsewhere",
            Box::new({
                let elsewhere = elsewhere.clone();
                move |g: &Path| {
                    std::fs::remove_dir_all(g)?;
                    std::fs::write(g, format!("gitdir: {}/.git\n", elsewhere.display()))?;
                    Ok(())
                }
            }),
        ),
    ];
    if is_root() && !unprivileged {
        cases.push((
            "commondir the /dev/zero device",
            Box::new(|g: &Path| {
                let st = Command::new("mknod")
                    .arg(g.join("commondir"))
                    .args(["c", "1", "5"])
                    .status()?;
                anyhow::ensure!(st.success());
                Ok(())
            }),
        ));
    }
    if unprivileged {
        // uid 65534 can read its own canary: the point is that hutch never
        // prints what it reads there.
        std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o644))?;
    } else {
        std::fs::set_permissions(&canary, std::fs::Permissions::from_mode(0o600))?;
    }
    for (i, (what, plant)) in cases.iter().enumerate() {
        let repo = t.path().join(format!("repo{i}"));
        std::fs::create_dir(&repo)?;
        git(&repo, &["init", "-q"])?;
        plant(&repo.join(".git"))?;
        own(&t, unprivileged);
        let rev = "1".repeat(40);
        let cmd = hutch_limited(
            &state,
            &[
                "create",
                "--from-git",
                repo.to_str().unwrap(),
                "--rev",
                &rev,
            ],
            unprivileged,
            &["--as=268435456"],
        );
        let o = output_within(cmd, 30).with_context(|| what.to_string())?;
        let err = stderr_of(&o);
        assert_eq!(o.status.code(), Some(125), "{what}: {o:?}");
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert!(err.starts_with("hutch session: "), "{what}: {err}");
        assert!(o.stdout.is_empty(), "{what}");
        assert!(
            !err.contains(&secret) && !String::from_utf8_lossy(&o.stdout).contains(&secret),
            "{what}: the canary leaked: {err}"
        );
        assert!(entries(&state).is_empty(), "{what}: {:?}", entries(&state));
    }
    Ok(())
}

#[test]
fn hostile_git_metadata_fails_fast_as_root() -> Result<()> {
    hostile_git_metadata(false)
}

#[test]
fn hostile_git_metadata_fails_fast_unprivileged() -> Result<()> {
    hostile_git_metadata(true)
}

/// A commit missing from the repository is named, with the repository.
#[test]
fn a_missing_commit_is_named() -> Result<()> {
    if !require(can_sandbox(), "needs a working launcher") {
        return Ok(());
    }
    let (t, state) = setup("missing-commit", false)?;
    let repo = t.path().join("repo");
    std::fs::create_dir(&repo)?;
    git(&repo, &["init", "-q"])?;
    std::fs::write(repo.join("f"), "f\n")?;
    git(&repo, &["add", "f"])?;
    git(&repo, &["commit", "-qm", "one"])?;
    let rev = "a".repeat(40);
    let o = hutch(
        &state,
        &[
            "create",
            "--from-git",
            repo.to_str().unwrap(),
            "--rev",
            &rev,
        ],
        false,
    );
    assert_eq!(o.status.code(), Some(125));
    let err = stderr_of(&o);
    let want = format!(
        "commit {rev} is not in the repository {}",
        std::fs::canonicalize(&repo)?.display()
    );
    assert!(err.contains(&want) && err.lines().count() == 1, "{err}");
    assert!(entries(&state).is_empty());
    Ok(())
}

// ---------------------------------------------------------------- §3

/// `git` with stdin, returning trimmed stdout.
fn git_in(dir: &Path, args: &[&str], input: &str) -> Result<String> {
    let mut c = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(c.stdin.as_mut().unwrap(), input.as_bytes())?;
    drop(c.stdin.take());
    let o = c.wait_with_output()?;
    if !o.status.success() {
        bail!("git {args:?} failed");
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// A repository of a few KiB whose commit expands to 10^7 paths: seven
/// levels of trees with ten entries each over one blob.
fn tree_bomb(dir: &Path) -> Result<String> {
    git(dir, &["init", "-q"])?;
    let blob = git_in(dir, &["hash-object", "-w", "--stdin"], "boom\n")?;
    let mut listing: String = (0..10)
        .map(|i| format!("100644 blob {blob}\tf{i}\n"))
        .collect();
    let mut tree = git_in(dir, &["mktree"], &listing)?;
    for _ in 0..6 {
        listing = (0..10)
            .map(|i| format!("040000 tree {tree}\td{i}\n"))
            .collect();
        tree = git_in(dir, &["mktree"], &listing)?;
    }
    git_in(dir, &["commit-tree", &tree, "-m", "bomb"], "")
}

fn tree_bomb_is_refused(unprivileged: bool) -> Result<()> {
    if !needs_root_for(unprivileged) || !require(can_sandbox(), "needs a working launcher") {
        return Ok(());
    }
    let (t, state) = setup("tree-bomb", unprivileged)?;
    let repo = t.path().join("bomb");
    std::fs::create_dir(&repo)?;
    let rev = tree_bomb(&repo)?;
    own(&t, unprivileged);
    let args = [
        "create",
        "--from-git",
        repo.to_str().unwrap(),
        "--rev",
        &rev,
    ];
    let o = output_within(hutch_command(&state, &args, unprivileged), 300)?;
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = stderr_of(&o);
    assert!(
        err.contains("more than 250000 entries") && err.contains("--max-files"),
        "{err}"
    );
    assert!(entries(&state).is_empty(), "{:?}", entries(&state));
    // A lower cap refuses it as well; nothing is left either.
    let mut capped = args.to_vec();
    capped.extend(["--max-files", "50"]);
    let o = output_within(hutch_command(&state, &capped, unprivileged), 120)?;
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(entries(&state).is_empty());
    Ok(())
}

#[test]
fn tree_bomb_is_refused_as_root() -> Result<()> {
    tree_bomb_is_refused(false)
}

#[test]
fn tree_bomb_is_refused_unprivileged() -> Result<()> {
    tree_bomb_is_refused(true)
}

/// A tmpfs mounted over a test's state directory with room for only
/// `inodes` inodes: an import that materialised more entries than that
/// before refusing would fail with ENOSPC instead of naming the cap.
/// Unmounted when dropped (declare it after the [`Tmp`] it lives in).
struct InodeCappedState(PathBuf);

impl InodeCappedState {
    fn mount(state: &Path, inodes: u32, unprivileged: bool) -> Result<Self> {
        let owner = if unprivileged { 65534 } else { 0 };
        let opts = format!("size=256m,nr_inodes={inodes},mode=0700,uid={owner},gid={owner}");
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opts, "hutch-test-state"])
            .arg(state)
            .output()?;
        if !o.status.success() {
            bail!("mount a tmpfs on {}: {}", state.display(), stderr_of(&o));
        }
        Ok(InodeCappedState(state.to_path_buf()))
    }

    fn remount(&self, inodes: u32) -> Result<()> {
        let o = Command::new("mount")
            .args(["-o", &format!("remount,nr_inodes={inodes}")])
            .arg(&self.0)
            .output()?;
        if !o.status.success() {
            bail!("remount {}: {}", self.0.display(), stderr_of(&o));
        }
        Ok(())
    }
}

impl Drop for InodeCappedState {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A repository whose one commit lists `n` paths `fNNNNNN` in one tree,
/// all the same empty blob: tiny on disk (the tree object compresses to
/// a few hundred KiB at 300 000 entries) however many files it names.
fn wide_tree(dir: &Path, n: usize) -> Result<String> {
    git(dir, &["init", "-q"])?;
    let blob = git_in(dir, &["hash-object", "-w", "--stdin"], "")?;
    let listing: String = (0..n)
        .map(|i| format!("100644 blob {blob}\tf{i:06}\n"))
        .collect();
    let tree = git_in(dir, &["mktree"], &listing)?;
    git_in(dir, &["commit-tree", &tree, "-m", "wide"], "")
}

/// A repository whose commit holds `n` directories `dNNNN`, each with one
/// file: `2n` entries, of which `ls-tree -r` alone lists only the `n`
/// files.
fn dirs_tree(dir: &Path, n: usize) -> Result<String> {
    git(dir, &["init", "-q"])?;
    let blob = git_in(dir, &["hash-object", "-w", "--stdin"], "x\n")?;
    let inner = git_in(dir, &["mktree"], &format!("100644 blob {blob}\tfile\n"))?;
    let listing: String = (0..n)
        .map(|i| format!("040000 tree {inner}\td{i:04}\n"))
        .collect();
    let tree = git_in(dir, &["mktree"], &listing)?;
    git_in(dir, &["commit-tree", &tree, "-m", "dirs"], "")
}

/// Issue 29 item 7: the default entry cap is sized to real repositories,
/// and a commit over a cap (directories counted) is refused on its
/// listing, before the baseline holds a single file. The state directory
/// is a tmpfs of 512 inodes: the code before the fix wrote the entries
/// first (a 300 000-path commit was under its 1 000 000 default; the
/// directories of a commit were counted only while being written), so it
/// failed here with ENOSPC instead of the cap.
fn over_cap_commit_is_refused_before_writing(unprivileged: bool) -> Result<()> {
    if !needs_root_for(unprivileged)
        || !require(is_root(), "needs root to mount an inode-capped tmpfs")
        || !require(can_sandbox(), "needs a working launcher")
    {
        return Ok(());
    }
    let (t, state) = setup("over-cap", unprivileged)?;
    let wide = t.path().join("wide");
    let dirs = t.path().join("dirs");
    std::fs::create_dir(&wide)?;
    std::fs::create_dir(&dirs)?;
    let wide_rev = wide_tree(&wide, 300_000)?;
    let dirs_rev = dirs_tree(&dirs, 600)?;
    own(&t, unprivileged);
    let capped = InodeCappedState::mount(&state, 512, unprivileged)?;
    let create = |repo: &Path, rev: &str, extra: &[&str]| -> Result<Output> {
        let mut args = vec!["create", "--from-git", repo.to_str().unwrap(), "--rev", rev];
        args.extend_from_slice(extra);
        output_within(hutch_command(&state, &args, unprivileged), 300)
    };

    // 300 000 paths: over the default cap, refused from the listing.
    let o = create(&wide, &wide_rev, &[])?;
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!("commit {wide_rev} has more than 250000 entries"))
            && err.contains("--max-files N")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
    assert!(entries(&state).is_empty(), "{:?}", entries(&state));

    // 600 files in 600 directories: 1200 entries, over --max-files 1000
    // although the files alone are under it.
    let o = create(&dirs, &dirs_rev, &["--max-files", "1000"])?;
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains("has more than 1000 entries") && err.contains("--max-files N"),
        "{err}"
    );
    assert!(entries(&state).is_empty(), "{:?}", entries(&state));

    // Raised to what the commit holds, it imports (room for its inodes).
    capped.remount(4096)?;
    let o = create(&dirs, &dirs_rev, &["--max-files", "1200"])?;
    let id = ok(&o)?.trim().to_string();
    let show: serde_json::Value =
        serde_json::from_str(&ok(&hutch(&state, &["show", &id, "--json"], unprivileged))?)?;
    assert_eq!(show["result"]["files"], 600, "{show}");
    ok(&hutch(&state, &["close", &id], unprivileged))?;
    drop(capped);
    Ok(())
}

#[test]
fn over_cap_commit_is_refused_before_writing_as_root() -> Result<()> {
    over_cap_commit_is_refused_before_writing(false)
}

#[test]
fn over_cap_commit_is_refused_before_writing_unprivileged() -> Result<()> {
    over_cap_commit_is_refused_before_writing(true)
}

/// Each cap (depth, path length, file size, total size, entries) refuses
/// git and directory imports whole; without the caps they import.
fn import_caps(unprivileged: bool) -> Result<()> {
    if !needs_root_for(unprivileged) || !require(can_sandbox(), "needs a working launcher") {
        return Ok(());
    }
    let (t, state) = setup("import-caps", unprivileged)?;
    let repo = t.path().join("repo");
    std::fs::create_dir_all(repo.join("a/b/c"))?;
    git(&repo, &["init", "-q"])?;
    std::fs::write(repo.join("a/b/c/deep.txt"), "deep\n")?;
    std::fs::write(repo.join("big.bin"), vec![1u8; 4096])?;
    for i in 0..20 {
        std::fs::write(repo.join(format!("f{i}")), format!("{i}\n"))?;
    }
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-qm", "x"])?;
    let rev = git(&repo, &["rev-parse", "HEAD"])?;
    own(&t, unprivileged);
    let git_src = ["--from-git", repo.to_str().unwrap(), "--rev", &rev];
    let dir_src = ["--from", repo.to_str().unwrap()];
    for src in [&git_src[..], &dir_src[..]] {
        for (cap, value, says) in [
            ("--max-depth", "3", "deeper than 3 levels"),
            ("--max-path-bytes", "10", "longer than 10 bytes"),
            ("--max-file-bytes", "1K", "larger than 1024 bytes"),
            ("--max-bytes", "2K", "larger than 2048 bytes"),
            ("--max-files", "10", "more than 10 entries"),
        ] {
            let mut args = vec!["create"];
            args.extend_from_slice(src);
            args.extend([cap, value]);
            let o = hutch(&state, &args, unprivileged);
            let err = stderr_of(&o);
            assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
            assert!(err.contains(says) && err.contains(cap), "{args:?}: {err}");
            assert!(
                entries(&state).is_empty(),
                "{args:?}: {:?}",
                entries(&state)
            );
        }
        let mut args = vec!["create"];
        args.extend_from_slice(src);
        let id = ok(&hutch(&state, &args, unprivileged))?;
        ok(&hutch(&state, &["close", id.trim()], unprivileged))?;
    }
    Ok(())
}

#[test]
fn import_caps_refuse_whole_as_root() -> Result<()> {
    import_caps(false)
}

#[test]
fn import_caps_refuse_whole_unprivileged() -> Result<()> {
    import_caps(true)
}

// ---------------------------------------------------------------- §4

/// Peak RSS a diff or export may reach here, whatever the files.
const RSS_BOUND_KIB: i64 = 64 * 1024;

/// `n` hardlinks `prefix0..` in `dir` to one sparse file of `size` bytes.
fn sparse_links(dir: &Path, prefix: &str, n: usize, size: u64) -> Result<()> {
    let first = dir.join(format!("{prefix}0"));
    std::fs::File::create(&first)?.set_len(size)?;
    for i in 1..n {
        std::fs::hard_link(&first, dir.join(format!("{prefix}{i}")))?;
    }
    Ok(())
}

fn bounded_memory(unprivileged: bool) -> Result<()> {
    if !needs_root_for(unprivileged) {
        return Ok(());
    }
    let (t, state) = setup("memory", unprivileged)?;
    let id = dir_session(&t, &state, unprivileged)?;
    let upper = state.join(&id).join("upper");
    std::fs::create_dir(upper.join("big"))?;
    sparse_links(&upper.join("big"), "l", 49, 32 << 20)?;
    own(&t, unprivileged);
    let run = |args: &[&str]| -> Result<Output> {
        output_within(hutch_command(&state, args, unprivileged), 300)
    };
    // 49 links to one 32 MiB sparse file: 1.5 GiB if read whole.
    let o = run(&["diff", &id, "--format", "stat"])?;
    let stat = ok(&o)?;
    assert!(
        stat.contains("49 files changed") && stat.contains("Bin 0 -> 33554432 bytes"),
        "{stat}"
    );
    assert!(
        children_max_rss_kib() < RSS_BOUND_KIB,
        "stat: {} KiB",
        children_max_rss_kib()
    );

    // The other formats and export over 49 links to a 2 MiB file.
    let u2 = upper.join("mid");
    std::fs::remove_dir_all(upper.join("big"))?;
    std::fs::create_dir(&u2)?;
    sparse_links(&u2, "m", 49, 2 << 20)?;
    own(&t, unprivileged);
    let patch = ok(&run(&["diff", &id])?)?;
    assert_eq!(patch.matches("GIT binary patch").count(), 49);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&run(&["diff", &id, "--format", "json"])?)?)?;
    assert_eq!(json["files_changed"], 49);
    let archive = t.path().join("out.tar");
    let o = run(&["export", &id, "--out", archive.to_str().unwrap(), "mid"])?;
    let manifest: serde_json::Value = serde_json::from_str(&ok(&o)?)?;
    assert_eq!(manifest["total_bytes"], 49u64 * (2 << 20));
    assert!(std::fs::metadata(&archive)?.len() > 49 * (2 << 20));
    assert!(
        children_max_rss_kib() < RSS_BOUND_KIB,
        "diff/export: {} KiB",
        children_max_rss_kib()
    );

    // A byte limit stops the work once it is certain to be exceeded.
    std::fs::remove_dir_all(&u2)?;
    std::fs::create_dir(upper.join("many"))?;
    sparse_links(&upper.join("many"), "n", 1201, 1 << 20)?;
    own(&t, unprivileged);
    let o = run(&["diff", &id, "--max-bytes", "64K"])?;
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(o.stdout.is_empty());
    assert!(
        stderr_of(&o).contains("exceeds the limit of 65536 bytes"),
        "{}",
        stderr_of(&o)
    );
    let o = run(&[
        "export",
        &id,
        "--out",
        archive.to_str().unwrap(),
        "--max-bytes",
        "64M",
        "many",
    ])?;
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(
        children_max_rss_kib() < RSS_BOUND_KIB,
        "limits: {} KiB",
        children_max_rss_kib()
    );
    Ok(())
}

#[test]
fn diff_and_export_memory_is_bounded_as_root() -> Result<()> {
    bounded_memory(false)
}

#[test]
fn diff_and_export_memory_is_bounded_unprivileged() -> Result<()> {
    bounded_memory(true)
}

// ---------------------------------------------------------------- §5

/// `depth` nested `d` directories under `top` with `leaf` at the bottom,
/// made by the test's user for the scenario (python's relative chdir
/// works at any depth).
/// The system python (a per-user shim would not run as uid 65534).
const PYTHON: &str = "/usr/bin/python3";

fn make_deep(top: &Path, depth: usize, unprivileged: bool) -> Result<()> {
    let script = "import os,sys\nos.chdir(sys.argv[1])\nfor _ in range(int(sys.argv[2])):\n    os.mkdir('d')\n    os.chdir('d')\nopen('leaf','w').write('bottom\\n')\n";
    let mut c = if unprivileged {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            PYTHON,
        ]);
        c
    } else {
        Command::new(PYTHON)
    };
    let st = c
        .args(["-c", script])
        .arg(top)
        .arg(depth.to_string())
        .status()?;
    anyhow::ensure!(st.success(), "making a {depth}-deep tree");
    Ok(())
}

fn deep_trees(unprivileged: bool, depth: usize) -> Result<()> {
    if !needs_root_for(unprivileged)
        || !require(
            Command::new("python3").arg("-V").output().is_ok(),
            "needs python3",
        )
    {
        return Ok(());
    }
    let (t, state) = setup("deep", unprivileged)?;
    let id = dir_session(&t, &state, unprivileged)?;
    make_deep(&state.join(&id).join("upper"), depth, unprivileged)?;
    let limited = |args: &[&str]| -> Result<Output> {
        output_within(
            hutch_limited(&state, args, unprivileged, &["--nofile=1024"]),
            300,
        )
    };
    let leaf = format!("{}leaf", "d/".repeat(depth));
    let patch = ok(&limited(&["diff", &id])?)?;
    assert!(patch.contains(&format!("+++ b/{leaf}")) && patch.contains("+bottom"));
    let json: serde_json::Value =
        serde_json::from_str(&ok(&limited(&["diff", &id, "--format", "json"])?)?)?;
    assert_eq!(json["files"][0]["path"], leaf);
    let archive = t.path().join("deep.tar");
    let o = limited(&["export", &id, "--out", archive.to_str().unwrap(), "d"])?;
    if 2 * depth + 4 <= hutch::workspace::MAX_ENTRY_NAME {
        ok(&o)?;
        assert!(archive.exists());
    } else {
        // Deeper than any extractor copes with: refused, cleanly.
        assert_eq!(o.status.code(), Some(125), "{o:?}");
        assert!(
            stderr_of(&o).contains("too long to export"),
            "{}",
            stderr_of(&o)
        );
        assert!(!archive.exists());
        assert_eq!(
            entries(t.path())
                .iter()
                .filter(|e| e.contains(".tmp-"))
                .count(),
            0
        );
    }
    ok(&limited(&["close", &id])?)?;
    assert!(!state.join(&id).exists());
    assert!(entries(&state).is_empty(), "{:?}", entries(&state));

    // gc: an old session and leftovers of a close, all deep.
    let old = dir_session(&t, &state, unprivileged)?;
    make_deep(&state.join(&old).join("upper"), depth, unprivileged)?;
    let info_path = state.join(&old).join("session.json");
    let mut info: serde_json::Value = serde_json::from_slice(&std::fs::read(&info_path)?)?;
    info["used_unix_ms"] = (hutch::internals::clock::now_ms() - 2 * 86_400_000).into();
    std::fs::write(&info_path, serde_json::to_vec(&info)?)?;
    let trash = state.join(format!(".trash-{}-leftover", "0".repeat(32)));
    std::fs::create_dir(&trash)?;
    if unprivileged {
        std::os::unix::fs::chown(&trash, Some(65534), Some(65534))?;
    }
    make_deep(&trash, depth, unprivileged)?;
    let o = limited(&["gc", "--older-than", "1d"])?;
    assert_eq!(ok(&o)?.trim(), old);
    assert!(entries(&state).is_empty(), "{:?}", entries(&state));
    // Memory stays linear in the depth (one path, not one per level).
    assert!(
        children_max_rss_kib() < RSS_BOUND_KIB,
        "{} KiB",
        children_max_rss_kib()
    );
    Ok(())
}

#[test]
fn deep_trees_1500_as_root() -> Result<()> {
    deep_trees(false, 1500)
}

#[test]
fn deep_trees_1500_unprivileged() -> Result<()> {
    deep_trees(true, 1500)
}

#[test]
fn deep_trees_30000_as_root() -> Result<()> {
    deep_trees(false, 30_000)
}

#[test]
fn deep_trees_30000_unprivileged() -> Result<()> {
    deep_trees(true, 30_000)
}

/// gc goes on past an entry it cannot remove (an immutable file, as root)
/// and reports it; the other entries are collected.
#[test]
fn gc_continues_past_a_failing_entry() -> Result<()> {
    if !require(is_root(), "needs root for chattr +i") {
        return Ok(());
    }
    let (t, state) = setup("gc-fail", false)?;
    let stuck = state.join(format!(".trash-{}-stuck", "1".repeat(32)));
    std::fs::create_dir(&stuck)?;
    std::fs::write(stuck.join("pinned"), "x")?;
    let chattr = |flag: &str| {
        Command::new("chattr")
            .arg(flag)
            .arg(stuck.join("pinned"))
            .status()
    };
    if !require(
        chattr("+i").is_ok_and(|s| s.success()),
        "needs chattr on an ext4-like /tmp",
    ) {
        return Ok(());
    }
    let old = dir_session(&t, &state, false)?;
    let info_path = state.join(&old).join("session.json");
    let mut info: serde_json::Value = serde_json::from_slice(&std::fs::read(&info_path)?)?;
    info["used_unix_ms"] = (hutch::internals::clock::now_ms() - 2 * 86_400_000).into();
    std::fs::write(&info_path, serde_json::to_vec(&info)?)?;
    let o = hutch(&state, &["gc", "--older-than", "1d"], false);
    let _ = chattr("-i");
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), old);
    let err = stderr_of(&o);
    assert!(
        err.contains("could not remove .trash-") && err.lines().count() == 1,
        "{err}"
    );
    assert!(!state.join(&old).exists());
    Ok(())
}

// ---------------------------------------------------------------- §6, §11

fn write_semantics(unprivileged: bool) -> Result<()> {
    if !needs_root_for(unprivileged) {
        return Ok(());
    }
    let (t, state) = setup("write", unprivileged)?;
    let id = dir_session(&t, &state, unprivileged)?;
    let upper = state.join(&id).join("upper");
    // What a command could leave: a workspace path hardlinked to another
    // file of the upper.
    std::fs::create_dir_all(upper.join(".git/hooks"))?;
    std::fs::write(upper.join(".git/hooks/pre-commit"), "#!/bin/sh\ntrue\n")?;
    std::fs::hard_link(upper.join(".git/hooks/pre-commit"), upper.join("notes.txt"))?;
    own(&t, unprivileged);
    ok(&hutch_with_stdin(
        &state,
        &["write", &id, "notes.txt"],
        unprivileged,
        b"my notes\n",
    ))?;
    assert_eq!(
        std::fs::read_to_string(upper.join("notes.txt"))?,
        "my notes\n"
    );
    assert_eq!(
        std::fs::read_to_string(upper.join(".git/hooks/pre-commit"))?,
        "#!/bin/sh\ntrue\n"
    );
    // A new directory below one that exists only in the baseline.
    ok(&hutch_with_stdin(
        &state,
        &["write", &id, "a/NEW/b.txt"],
        unprivileged,
        b"new\n",
    ))?;
    assert_eq!(
        ok(&hutch(&state, &["read", &id, "a/NEW/b.txt"], unprivileged))?,
        "new\n"
    );
    assert_eq!(
        ok(&hutch(&state, &["read", &id, "a/base.txt"], unprivileged))?,
        "base\n"
    );
    // A write that fails leaves no directory it created, nor a temp file.
    let long = format!("a/GONE/x/{}", "n".repeat(300));
    let o = hutch_with_stdin(&state, &["write", &id, &long], unprivileged, b"x");
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(!upper.join("a/GONE").exists());
    assert_eq!(entries(&upper.join("a")), ["NEW"]);
    assert!(
        !entries(&upper)
            .iter()
            .any(|e| e.starts_with(".hutch-write"))
    );
    Ok(())
}

#[test]
fn write_replaces_files_and_creates_parents_as_root() -> Result<()> {
    write_semantics(false)
}

#[test]
fn write_replaces_files_and_creates_parents_unprivileged() -> Result<()> {
    write_semantics(true)
}

/// Every subcommand answers `--help` on stdout with exit 0.
#[test]
fn every_subcommand_has_help() -> Result<()> {
    let (_t, state) = setup("help", false)?;
    for sub in [
        "create", "run", "read", "write", "diff", "export", "close", "list", "gc",
    ] {
        for flag in ["--help", "-h"] {
            let o = hutch(&state, &[sub, flag], false);
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(o.status.code(), Some(0), "{sub} {flag}: {o:?}");
            assert!(
                out.starts_with(&format!("usage: hutch session {sub}")),
                "{sub}: {out}"
            );
            assert!(o.stderr.is_empty(), "{sub}: {o:?}");
        }
        // Also after the session id.
        let o = hutch(&state, &[sub, &"0".repeat(32), "--help"], false);
        assert_eq!(o.status.code(), Some(0), "{sub}: {o:?}");
    }
    Ok(())
}

/// `hutch session diff ID | head`: a closed stdout ends quietly.
fn closed_stdout(unprivileged: bool) -> Result<()> {
    if !needs_root_for(unprivileged) {
        return Ok(());
    }
    let (t, state) = setup("epipe", unprivileged)?;
    let id = dir_session(&t, &state, unprivileged)?;
    let text: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(state.join(&id).join("upper/big.txt"), text)?;
    own(&t, unprivileged);
    let mut child = hutch_command(&state, &["diff", &id], unprivileged).spawn()?;
    let mut first = [0u8; 16];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first)?;
    drop(child.stdout.take());
    let o = child.wait_with_output()?;
    assert!(o.stderr.is_empty(), "{}", stderr_of(&o));
    assert_eq!(o.status.code(), Some(141), "{o:?}");
    Ok(())
}

#[test]
fn closed_stdout_ends_quietly_as_root() -> Result<()> {
    closed_stdout(false)
}

#[test]
fn closed_stdout_ends_quietly_unprivileged() -> Result<()> {
    closed_stdout(true)
}

// ---------------------------------------------------------------- §9

fn escaped_names(unprivileged: bool) -> Result<()> {
    if !needs_root_for(unprivileged) {
        return Ok(());
    }
    let (t, state) = setup("names", unprivileged)?;
    let id = dir_session(&t, &state, unprivileged)?;
    let upper = state.join(&id).join("upper");
    std::fs::create_dir(upper.join("w"))?;
    let csi = "x\u{9b}31mred";
    let rlo = "invoice\u{202e}fdp.exe";
    std::fs::write(upper.join("w").join(csi), "a\n")?;
    std::fs::write(upper.join("w").join(rlo), "b\n")?;
    own(&t, unprivileged);
    let raw_ok = |bytes: &[u8], what: &str| {
        let s = String::from_utf8_lossy(bytes);
        assert!(
            !s.contains('\u{9b}') && !s.contains('\u{202e}'),
            "{what}: {s}"
        );
        assert!(
            s.contains("\\u009b") && s.contains("\\u202e"),
            "{what}: {s}"
        );
    };
    let o = hutch(&state, &["diff", &id, "--format", "json"], unprivileged);
    raw_ok(&o.stdout, "diff json");
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    let paths: Vec<&str> = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [format!("w/{rlo}"), format!("w/{csi}")]);
    for fmt in ["stat", "unified"] {
        let o = hutch(&state, &["diff", &id, "--format", fmt], unprivileged);
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(
            !s.contains('\u{9b}') && !s.contains('\u{202e}'),
            "{fmt}: {s}"
        );
    }
    let archive = t.path().join("names.tar");
    let o = hutch(
        &state,
        &["export", &id, "--out", archive.to_str().unwrap(), "w"],
        unprivileged,
    );
    raw_ok(&o.stdout, "export manifest");
    serde_json::from_slice::<serde_json::Value>(&o.stdout)?;
    // A name a Windows extractor would walk out of the directory with.
    std::fs::write(upper.join("w").join("..\\..\\..\\evil.bat"), "@echo off\n")?;
    own(&t, unprivileged);
    std::fs::remove_file(&archive)?;
    let zip = t.path().join("names.zip");
    for out in [&archive, &zip] {
        let o = hutch(
            &state,
            &["export", &id, "--out", out.to_str().unwrap(), "w"],
            unprivileged,
        );
        assert_eq!(o.status.code(), Some(125), "{o:?}");
        assert!(stderr_of(&o).contains("backslash"), "{}", stderr_of(&o));
        assert!(!out.exists());
    }
    Ok(())
}

#[test]
fn names_with_controls_and_bidi_are_escaped_as_root() -> Result<()> {
    escaped_names(false)
}

#[test]
fn names_with_controls_and_bidi_are_escaped_unprivileged() -> Result<()> {
    escaped_names(true)
}
