//! Sessions without the launcher: baselines, fingerprints, diff, export,
//! bounded read/write, close and gc, driven through `hutch session` the way
//! an agent platform does, on upper directories built directly.

mod common;
mod session_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail};
use session_support::*;

/// A repository with text, binary, executable and nested files; returns
/// (repo, commit).
fn repo(t: &Tmp) -> Result<(PathBuf, String)> {
    let r = t.path().join("repo");
    std::fs::create_dir(&r)?;
    git(&r, &["init", "-q"])?;
    std::fs::write(r.join("a.txt"), "one\ntwo\nthree\n")?;
    std::fs::write(r.join("b.bin"), b"\x00\x01binary\x00")?;
    std::fs::create_dir_all(r.join("d/e"))?;
    std::fs::write(r.join("d/x"), "x\n")?;
    std::fs::write(r.join("d/e/y"), "y\n")?;
    std::fs::write(r.join("run.sh"), "#!/bin/sh\necho hi\n")?;
    std::fs::set_permissions(r.join("run.sh"), std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(r.join("gone.txt"), "bye\n")?;
    git(&r, &["add", "-A"])?;
    git(&r, &["commit", "-qm", "init"])?;
    let rev = git(&r, &["rev-parse", "HEAD"])?;
    Ok((r, rev))
}

fn create_git(state: &Path, repo: &Path, rev: &str, extra: &[&str]) -> Output {
    let mut args = vec!["create", "--from-git", repo.to_str().unwrap(), "--rev", rev];
    args.extend_from_slice(extra);
    hutch(state, &args, false)
}

fn upper(state: &Path, id: &str) -> PathBuf {
    state.join(id).join("upper")
}

/// Check a unified diff with `git apply --check` on a fresh clone, apply
/// it, and return the clone.
fn apply_on_fresh(t: &Tmp, repo: &Path, rev: &str, patch: &[u8], name: &str) -> Result<PathBuf> {
    let fresh = t.path().join(name);
    git(
        t.path(),
        &[
            "clone",
            "-q",
            repo.to_str().unwrap(),
            fresh.to_str().unwrap(),
        ],
    )?;
    git(&fresh, &["checkout", "-q", rev])?;
    let pf = t.path().join(format!("{name}.patch"));
    std::fs::write(&pf, patch)?;
    git(&fresh, &["apply", "--check", pf.to_str().unwrap()]).context("git apply --check")?;
    git(&fresh, &["apply", pf.to_str().unwrap()])?;
    Ok(fresh)
}

#[test]
fn full_flow_from_git_ends_in_git_apply_check() -> Result<()> {
    let t = Tmp::new("flow");
    let (r, rev) = repo(&t)?;
    let state = t.path().join("state");
    let id = ok(&create_git(&state, &r, &rev, &[]))?.trim().to_string();
    assert_eq!(id.len(), 32);
    // The baseline is the commit's content with git's modes; the
    // manifest beside it is read-only.
    let base = state.join(&id).join("baseline/tree");
    assert_eq!(std::fs::read_to_string(base.join("d/e/y"))?, "y\n");
    assert!(!base.join(".git").exists());
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o7777);
    assert_eq!(mode(&base.join("a.txt"))?, 0o644);
    assert_eq!(mode(&base.join("run.sh"))?, 0o755);
    assert_eq!(mode(&state.join(&id).join("baseline/manifest"))?, 0o444);

    ok(&hutch_with_stdin(
        &state,
        &["write", &id, "a.txt"],
        false,
        b"one\nTWO\nthree\n",
    ))?;
    ok(&hutch_with_stdin(
        &state,
        &["write", &id, "new/dir/n.txt"],
        false,
        b"fresh\n",
    ))?;
    assert_eq!(
        ok(&hutch(
            &state,
            &["read", &id, "a.txt", "--max-bytes", "1K"],
            false
        ))?,
        "one\nTWO\nthree\n"
    );
    assert_eq!(
        ok(&hutch(&state, &["read", &id, "/workspace/d/x"], false))?,
        "x\n"
    );

    let stat = ok(&hutch(&state, &["diff", &id, "--format", "stat"], false))?;
    assert!(
        stat.contains(" a.txt ") && stat.contains("2 files changed"),
        "{stat}"
    );
    let patch = hutch(&state, &["diff", &id, "--format", "unified"], false);
    let fresh = apply_on_fresh(
        &t,
        &r,
        &rev,
        &ok(&patch).map(|_| patch.stdout.clone())?,
        "fresh",
    )?;
    assert_eq!(
        std::fs::read_to_string(fresh.join("a.txt"))?,
        "one\nTWO\nthree\n"
    );
    assert_eq!(
        std::fs::read_to_string(fresh.join("new/dir/n.txt"))?,
        "fresh\n"
    );

    let out = t.path().join("art.zip");
    let m = ok(&hutch(
        &state,
        &[
            "export",
            &id,
            "--out",
            out.to_str().unwrap(),
            "--patch",
            "new",
        ],
        false,
    ))?;
    let m: serde_json::Value = serde_json::from_str(&m)?;
    let file = m["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "new/dir/n.txt")
        .unwrap();
    assert_eq!(file["size"], 6);
    assert_eq!(
        file["sha256"],
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"fresh\n"))
    );
    let mut z = zip::ZipArchive::new(std::fs::File::open(&out)?)?;
    let mut p = String::new();
    std::io::Read::read_to_string(&mut z.by_name(".hutch/changes.patch")?, &mut p)?;
    assert_eq!(p.as_bytes(), &patch.stdout[..]);

    ok(&hutch(&state, &["close", &id], false))?;
    assert!(!state.join(&id).exists());
    ok(&hutch(&state, &["close", &id], false)).context("second close")?;
    Ok(())
}

#[test]
fn risky_commits_are_refused_unless_allowed() -> Result<()> {
    let t = Tmp::new("refuse");
    let (r, _) = repo(&t)?;
    let state = t.path().join("state");
    type Setup<'a> = &'a dyn Fn(&Path) -> Result<()>;
    let cases: [(&str, Setup, &str); 4] = [
        (
            "submodule",
            &|r| {
                let head = git(r, &["rev-parse", "HEAD"])?;
                git(
                    r,
                    &[
                        "update-index",
                        "--add",
                        "--cacheinfo",
                        &format!("160000,{head},sub"),
                    ],
                )
                .map(drop)
            },
            "--allow-submodules",
        ),
        (
            "symlink",
            &|r| {
                std::os::unix::fs::symlink("/etc/passwd", r.join("ln"))?;
                git(r, &["add", "ln"]).map(drop)
            },
            "--allow-symlinks",
        ),
        (
            "export-ignore",
            &|r| {
                std::fs::write(r.join(".gitattributes"), "*.txt export-ignore\n")?;
                git(r, &["add", ".gitattributes"]).map(drop)
            },
            "--allow-export-attributes",
        ),
        (
            "export-subst",
            &|r| {
                std::fs::create_dir_all(r.join("sub2"))?;
                std::fs::write(r.join("sub2/.gitattributes"), "v.txt export-subst\n")?;
                git(r, &["add", "sub2/.gitattributes"]).map(drop)
            },
            "--allow-export-attributes",
        ),
    ];
    for (what, setup, flag) in cases {
        git(&r, &["checkout", "-q", "-B", what, "main"])?;
        setup(&r)?;
        git(&r, &["commit", "-qm", what])?;
        let rev = git(&r, &["rev-parse", "HEAD"])?;
        let before = ok(&hutch(&state, &["list"], false))?;
        let o = create_git(&state, &r, &rev, &[]);
        assert_eq!(o.status.code(), Some(125), "{what} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{what}: {err}");
        assert_eq!(
            ok(&hutch(&state, &["list"], false))?,
            before,
            "{what} left a session behind"
        );
        let id = ok(&create_git(&state, &r, &rev, &[flag]))
            .with_context(|| format!("{what} with {flag}"))?;
        let tree = state.join(id.trim()).join("baseline/tree");
        if what == "symlink" {
            assert_eq!(
                std::fs::read_link(tree.join("ln"))?,
                Path::new("/etc/passwd")
            );
        }
        if what == "submodule" {
            assert!(tree.join("sub").is_dir());
        }
    }
    // Not a full commit id, and not a commit.
    let o = create_git(&state, &r, "HEAD", &[]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("full commit id"));
    let tree = git(&r, &["rev-parse", "HEAD^{tree}"])?;
    let o = create_git(&state, &r, &tree, &[]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a commit"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(())
}

#[test]
fn lfs_pointers_stay_pointers_and_no_filter_runs() -> Result<()> {
    let t = Tmp::new("lfs");
    let (r, _) = repo(&t)?;
    let pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n";
    std::fs::write(
        r.join(".gitattributes"),
        "*.bin filter=evil\n*.dat filter=lfs diff=lfs merge=lfs -text\n",
    )?;
    std::fs::write(r.join("big.dat"), pointer)?;
    git(&r, &["add", "-A"])?;
    git(&r, &["commit", "-qm", "lfs"])?;
    // A filter and a hook configured in the repository must never run.
    let marker = t.path().join("ran");
    git(
        &r,
        &[
            "config",
            "filter.evil.smudge",
            &format!("touch {}", marker.display()),
        ],
    )?;
    git(
        &r,
        &[
            "config",
            "filter.lfs.smudge",
            &format!("touch {}", marker.display()),
        ],
    )?;
    git(
        &r,
        &[
            "config",
            "core.fsmonitor",
            &format!("touch {}", marker.display()),
        ],
    )?;
    let rev = git(&r, &["rev-parse", "HEAD"])?;
    let state = t.path().join("state");
    let id = ok(&create_git(&state, &r, &rev, &[]))?;
    let tree = state.join(id.trim()).join("baseline/tree");
    assert_eq!(std::fs::read_to_string(tree.join("big.dat"))?, pointer);
    assert_eq!(std::fs::read(tree.join("b.bin"))?, b"\x00\x01binary\x00");
    assert!(!marker.exists(), "a repository-configured program ran");
    Ok(())
}

#[test]
fn fingerprints_are_stable_and_checked() -> Result<()> {
    let t = Tmp::new("fp");
    let (r, rev) = repo(&t)?;
    let state = t.path().join("state");
    let a = ok(&create_git(&state, &r, &rev, &[]))?.trim().to_string();
    let b = ok(&hutch(
        &state,
        &["create", "--from", r.to_str().unwrap()],
        false,
    ))?
    .trim()
    .to_string();
    let info = |id: &str| -> Result<serde_json::Value> {
        Ok(serde_json::from_slice(&std::fs::read(
            state.join(id).join("session.json"),
        )?)?)
    };
    let fp = info(&a)?["fingerprint"].as_str().unwrap().to_string();
    // Same tree from git objects and from the checkout (its .git skipped).
    assert_eq!(fp, info(&b)?["fingerprint"].as_str().unwrap());
    let manifest = std::fs::read(state.join(&a).join("baseline/manifest"))?;
    assert_eq!(
        fp,
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&manifest))
    );
    let text = String::from_utf8(manifest)?;
    assert!(text.contains(&format!(
        "100755 {} ",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
            b"#!/bin/sh\necho hi\n"
        ))
    )));

    let ok_again = create_git(&state, &r, &rev, &["--expect-fingerprint", &fp]);
    ok(&ok_again)?;
    let wrong = "0".repeat(64);
    let o = create_git(&state, &r, &rev, &["--expect-fingerprint", &wrong]);
    assert_eq!(o.status.code(), Some(125));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("does not match") && err.contains(&fp), "{err}");
    assert_eq!(ok(&hutch(&state, &["list"], false))?.lines().count(), 3);
    Ok(())
}

#[test]
fn diff_covers_deletions_modes_links_binaries_and_type_changes() -> Result<()> {
    require!(
        is_root(),
        "whiteouts (mknod 0/0) and trusted.overlay.opaque need root"
    );
    let t = Tmp::new("diff");
    let (r, rev) = repo(&t)?;
    let state = t.path().join("state");
    let id = ok(&create_git(&state, &r, &rev, &[]))?.trim().to_string();
    let u = upper(&state, &id);
    let whiteout = |p: &Path| -> Result<()> {
        let s = Command::new("mknod")
            .arg(p)
            .args(["c", "0", "0"])
            .status()?;
        anyhow::ensure!(s.success());
        Ok(())
    };
    whiteout(&u.join("gone.txt"))?; // deletion
    std::fs::write(u.join("run.sh"), "#!/bin/sh\necho hi\n")?; // mode change only
    std::fs::set_permissions(u.join("run.sh"), std::fs::Permissions::from_mode(0o644))?;
    std::fs::write(u.join("b.bin"), b"\x00\x02other binary\x00\xff")?; // binary
    std::os::unix::fs::symlink("../../etc/shadow", u.join("ln"))?; // new symlink
    std::fs::create_dir(u.join("a.txt"))?; // file replaced by a directory
    std::fs::write(u.join("a.txt/inner"), "inside\n")?;
    std::fs::create_dir(u.join("d"))?; // opaque: d/x and d/e/y deleted, d/z new
    hutch::internals::sys::set_xattr(
        std::os::fd::AsFd::as_fd(&std::fs::File::open(u.join("d"))?),
        c"trusted.overlay.opaque",
        b"y",
    )?;
    std::fs::write(u.join("d/z"), "z\n")?;
    std::fs::write(u.join("same.txt"), "")?; // new empty file

    let o = hutch(&state, &["diff", &id], false);
    ok(&o)?;
    let p = String::from_utf8_lossy(&o.stdout);
    assert!(
        p.contains("deleted file mode 100644") && p.contains("a/gone.txt"),
        "{p}"
    );
    assert!(p.contains("old mode 100755\nnew mode 100644"), "{p}");
    assert!(p.contains("GIT binary patch"), "{p}");
    assert!(p.contains("new file mode 120000"), "{p}");
    let fresh = apply_on_fresh(&t, &r, &rev, &o.stdout, "fresh")?;
    assert!(!fresh.join("gone.txt").exists());
    assert_eq!(
        std::fs::metadata(fresh.join("run.sh"))?
            .permissions()
            .mode()
            & 0o111,
        0
    );
    assert_eq!(
        std::fs::read(fresh.join("b.bin"))?,
        b"\x00\x02other binary\x00\xff"
    );
    assert_eq!(
        std::fs::read_link(fresh.join("ln"))?,
        Path::new("../../etc/shadow")
    );
    assert_eq!(
        std::fs::read_to_string(fresh.join("a.txt/inner"))?,
        "inside\n"
    );
    assert!(!fresh.join("d/x").exists() && !fresh.join("d/e/y").exists());
    assert_eq!(std::fs::read_to_string(fresh.join("d/z"))?, "z\n");
    assert!(fresh.join("same.txt").is_file());

    let j: serde_json::Value =
        serde_json::from_slice(&hutch(&state, &["diff", &id, "--format", "json"], false).stdout)?;
    let status = |p: &str| {
        j["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == p)
            .map(|f| f["status"].clone())
    };
    assert_eq!(status("gone.txt"), Some("deleted".into()));
    assert_eq!(status("d/e/y"), Some("deleted".into()));
    assert_eq!(status("ln"), Some("added".into()));
    assert_eq!(status("run.sh"), Some("modified".into()));

    // --max-bytes: fails whole, prints nothing.
    let o = hutch(&state, &["diff", &id, "--max-bytes", "100"], false);
    assert_eq!(o.status.code(), Some(125));
    assert!(o.stdout.is_empty());
    assert!(String::from_utf8_lossy(&o.stderr).contains("limit of 100 bytes"));
    let o = hutch(
        &state,
        &["diff", &id, "--format", "stat", "--max-bytes", "20"],
        false,
    );
    assert!(o.stdout.is_empty() && o.status.code() == Some(125));
    Ok(())
}

#[test]
fn hostile_names_are_quoted_and_still_apply() -> Result<()> {
    let t = Tmp::new("names");
    let (r, rev) = repo(&t)?;
    let state = t.path().join("state");
    let id = ok(&create_git(&state, &r, &rev, &[]))?.trim().to_string();
    let u = upper(&state, &id);
    let names = [
        "new\nline",
        "esc\x1b[31mred",
        "tab\there",
        "-rf",
        "q\"uote",
        "sp ace",
        "é",
    ];
    for n in names {
        std::fs::write(u.join(n), format!("{n:?}\n"))?;
    }
    let o = hutch(&state, &["diff", &id], false);
    let p = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        p.contains("diff --git \"a/new\\nline\" \"b/new\\nline\""),
        "{p}"
    );
    assert!(p.contains("\"b/esc\\033[31mred\""), "{p}");
    assert!(!p.contains('\x1b'), "raw escape sequence in the diff");
    assert!(p.contains("\"b/\\303\\251\""));
    let fresh = apply_on_fresh(&t, &r, &rev, &o.stdout, "fresh")?;
    for n in names {
        assert_eq!(std::fs::read_to_string(fresh.join(n))?, format!("{n:?}\n"));
    }
    let stat = ok(&hutch(&state, &["diff", &id, "--format", "stat"], false))?;
    assert!(
        stat.contains("\"new\\nline\"") && !stat.contains('\x1b'),
        "{stat}"
    );
    Ok(())
}

/// Read a tar archive into (name, type, mode, link target, data).
/// (name, type, mode, link target, data) of one tar entry.
type TarEntry = (Vec<u8>, tar::EntryType, u32, Option<PathBuf>, Vec<u8>);

fn tar_entries(p: &Path) -> Result<Vec<TarEntry>> {
    let mut a = tar::Archive::new(std::fs::File::open(p)?);
    let mut out = Vec::new();
    for e in a.entries()? {
        let mut e = e?;
        let name = e.path_bytes().into_owned();
        let h = e.header().clone();
        let link = e.link_name()?.map(|l| l.into_owned());
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut data)?;
        out.push((name, h.entry_type(), h.mode()?, link, data));
    }
    Ok(out)
}

#[test]
fn export_records_links_strips_modes_and_skips_fifos() -> Result<()> {
    let t = Tmp::new("export");
    let (r, rev) = repo(&t)?;
    let state = t.path().join("state");
    let id = ok(&create_git(&state, &r, &rev, &[]))?.trim().to_string();
    let u = upper(&state, &id);
    std::fs::create_dir(u.join("out"))?;
    std::os::unix::fs::symlink("/etc/shadow", u.join("out/shadow"))?;
    std::fs::write(u.join("out/tool"), "#!/bin/sh\n")?;
    std::fs::set_permissions(u.join("out/tool"), std::fs::Permissions::from_mode(0o6755))?;
    let s = Command::new("mkfifo").arg(u.join("out/pipe")).status()?;
    assert!(s.success());
    std::fs::write(u.join("out/report.xml"), "<ok/>")?;

    // tar
    let tarf = t.path().join("a.tar");
    let o = run_with_timeout(
        &state,
        &[
            "export",
            &id,
            "--out",
            tarf.to_str().unwrap(),
            "out",
            "a.txt",
        ],
    )?;
    let m: serde_json::Value = serde_json::from_str(&ok(&o)?)?;
    let entries = tar_entries(&tarf)?;
    let find = |n: &str| entries.iter().find(|e| e.0 == n.as_bytes()).cloned();
    let link = find("out/shadow").context("link entry")?;
    assert_eq!(link.1, tar::EntryType::Symlink);
    assert_eq!(link.3.as_deref(), Some(Path::new("/etc/shadow")));
    assert!(link.4.is_empty());
    let tool = find("out/tool").context("tool entry")?;
    assert_eq!(tool.2 & 0o7777, 0o755, "setuid/setgid survived");
    assert!(find("out/pipe").is_none());
    assert_eq!(
        find("a.txt").context("baseline file")?.4,
        b"one\ntwo\nthree\n"
    );
    for e in &entries {
        assert!(!e.0.starts_with(b"/") && !e.0.split(|&b| b == b'/').any(|c| c == b".."));
    }
    let me = m["entries"].as_array().unwrap();
    let pipe = me
        .iter()
        .find(|e| e["path"] == "out/pipe")
        .context("fifo in manifest")?;
    assert_eq!(pipe["kind"], "fifo");
    assert_eq!(pipe["skipped"], true);
    let shadow = me.iter().find(|e| e["path"] == "out/shadow").unwrap();
    assert_eq!(shadow["kind"], "symlink");
    assert_eq!(shadow["target"], "/etc/shadow");
    assert!(find(".hutch/manifest.json").is_some());

    // zip
    let zipf = t.path().join("a.zip");
    ok(&run_with_timeout(
        &state,
        &["export", &id, "--out", zipf.to_str().unwrap(), "out"],
    )?)?;
    let mut z = zip::ZipArchive::new(std::fs::File::open(&zipf)?)?;
    {
        let e = z.by_name("out/shadow")?;
        assert!(e.is_symlink());
        assert_eq!(e.size(), "/etc/shadow".len() as u64);
    }
    assert_eq!(
        z.by_name("out/tool")?.unix_mode().map(|m| m & 0o7777),
        Some(0o755)
    );
    assert!(z.by_name("out/pipe").is_err());

    // The FIFO does not block the diff either.
    let o = run_with_timeout(&state, &["diff", &id, "--format", "stat"])?;
    ok(&o)?;
    assert!(String::from_utf8_lossy(&o.stderr).contains("out/pipe is a fifo"));

    // Size caps fail the export whole and leave no archive.
    let capped = t.path().join("cap.tar");
    let o = hutch(
        &state,
        &[
            "export",
            &id,
            "--out",
            capped.to_str().unwrap(),
            "--max-bytes",
            "8",
            "out",
        ],
        false,
    );
    assert_eq!(o.status.code(), Some(125));
    assert!(!capped.exists());
    // `..` and absolute paths outside /workspace are refused.
    let o = hutch(
        &state,
        &["export", &id, "--out", capped.to_str().unwrap(), "../x"],
        false,
    );
    assert_eq!(o.status.code(), Some(125));
    let o = hutch(
        &state,
        &[
            "export",
            &id,
            "--out",
            capped.to_str().unwrap(),
            "out/shadow/x",
        ],
        false,
    );
    assert_eq!(o.status.code(), Some(125));
    Ok(())
}

/// Run hutch, failing the test if it hangs (e.g. on a FIFO).
fn run_with_timeout(state: &Path, args: &[&str]) -> Result<Output> {
    let mut child = hutch_command(state, args, false).spawn()?;
    let start = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if start.elapsed() > std::time::Duration::from_secs(20) {
            child.kill()?;
            bail!("hutch session {args:?} hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(child.wait_with_output()?)
}

#[test]
fn read_and_write_are_bounded_and_confined() -> Result<()> {
    let t = Tmp::new("rw");
    let (r, rev) = repo(&t)?;
    let state = t.path().join("state");
    let id = ok(&create_git(&state, &r, &rev, &[]))?.trim().to_string();
    let u = upper(&state, &id);
    let o = hutch(&state, &["read", &id, "a.txt", "--max-bytes", "4"], false);
    assert_eq!(o.status.code(), Some(125));
    assert!(o.stdout.is_empty());
    let o = hutch_with_stdin(
        &state,
        &["write", &id, "big.txt", "--max-bytes", "4"],
        false,
        b"12345",
    );
    assert_eq!(o.status.code(), Some(125));
    assert!(!u.join("big.txt").exists());
    for bad in ["../../etc/passwd", "/etc/passwd"] {
        assert_eq!(
            hutch(&state, &["read", &id, bad], false).status.code(),
            Some(125),
            "{bad}"
        );
        assert_eq!(
            hutch_with_stdin(&state, &["write", &id, bad], false, b"x")
                .status
                .code(),
            Some(125),
            "{bad}"
        );
    }
    // Links in the workspace are never followed, not even inside it.
    std::os::unix::fs::symlink("/etc", u.join("etc"))?;
    std::os::unix::fs::symlink("/etc/passwd", u.join("pw"))?;
    assert_eq!(
        hutch(&state, &["read", &id, "etc/passwd"], false)
            .status
            .code(),
        Some(125)
    );
    assert_eq!(
        hutch(&state, &["read", &id, "pw"], false).status.code(),
        Some(125)
    );
    assert_eq!(
        hutch_with_stdin(&state, &["write", &id, "etc/evil"], false, b"x")
            .status
            .code(),
        Some(125)
    );
    assert_eq!(
        hutch_with_stdin(&state, &["write", &id, "pw"], false, b"x")
            .status
            .code(),
        Some(125)
    );
    assert!(!Path::new("/etc/evil").exists());
    // Writing over a baseline executable keeps its mode (like copy-up).
    ok(&hutch_with_stdin(
        &state,
        &["write", &id, "run.sh"],
        false,
        b"#!/bin/sh\necho new\n",
    ))?;
    assert_eq!(
        std::fs::metadata(u.join("run.sh"))?.permissions().mode() & 0o777,
        0o755
    );
    let diff = ok(&hutch(&state, &["diff", &id], false))?;
    assert!(
        diff.contains("+echo new") && !diff.contains("old mode"),
        "{diff}"
    );
    let audit = std::fs::read_to_string(state.join(&id).join("audit.jsonl"))?;
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"write\"") && l.contains("run.sh"))
    );
    Ok(())
}

#[test]
fn close_and_gc_never_follow_links_out() -> Result<()> {
    let t = Tmp::new("gc");
    let (r, rev) = repo(&t)?;
    let state = t.path().join("state");
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside)?;
    std::fs::write(outside.join("precious"), "keep")?;
    let a = ok(&create_git(&state, &r, &rev, &[]))?.trim().to_string();
    let b = ok(&create_git(&state, &r, &rev, &[]))?.trim().to_string();
    std::os::unix::fs::symlink(&outside, upper(&state, &a).join("escape"))?;
    std::os::unix::fs::symlink(&outside, state.join(&a).join("work/escape"))?;
    // Make `a` look unused for two days.
    let info_path = state.join(&a).join("session.json");
    let mut info: serde_json::Value = serde_json::from_slice(&std::fs::read(&info_path)?)?;
    info["used_unix_ms"] = (hutch::internals::clock::now_ms() - 2 * 86_400_000).into();
    std::fs::write(&info_path, serde_json::to_vec(&info)?)?;
    let removed = ok(&hutch(&state, &["gc", "--older-than", "1d"], false))?;
    assert_eq!(removed.trim(), a);
    assert!(!state.join(&a).exists());
    assert!(state.join(&b).exists());
    assert_eq!(std::fs::read_to_string(outside.join("precious"))?, "keep");
    // close is idempotent; ids that could name paths are refused.
    ok(&hutch(&state, &["close", &b], false))?;
    ok(&hutch(&state, &["close", &b], false))?;
    assert_eq!(
        hutch(&state, &["close", "../outside"], false).status.code(),
        Some(125)
    );
    assert!(outside.join("precious").exists());
    assert_eq!(ok(&hutch(&state, &["list"], false))?, "");
    // A state directory others can write to is refused.
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared)?;
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777))?;
    let o = hutch(&shared, &["list"], false);
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("writable by others"));
    Ok(())
}

#[test]
fn unprivileged_user_runs_the_file_operations() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok(),
        can_launch_as(As::Nobody).unwrap_err()
    );
    let t = Tmp::new("unpriv");
    let (r, _) = repo(&t)?;
    let state = t.path().join("state");
    std::fs::create_dir(&state)?;
    Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&state)
        .status()?;
    let run = |args: &[&str], stdin: &[u8]| hutch_with_stdin(&state, args, true, stdin);
    let id = ok(&run(&["create", "--from", r.to_str().unwrap()], b""))?
        .trim()
        .to_string();
    ok(&run(&["write", &id, "a.txt"], b"changed\n"))?;
    let u = upper(&state, &id);
    // An unprivileged overlay (userxattr) marks opaque directories with user.*.
    std::fs::create_dir(u.join("d"))?;
    hutch::internals::sys::set_xattr(
        std::os::fd::AsFd::as_fd(&std::fs::File::open(u.join("d"))?),
        c"user.overlay.opaque",
        b"y",
    )?;
    Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&u)
        .status()?;
    let j: serde_json::Value =
        serde_json::from_slice(&run(&["diff", &id, "--format", "json"], b"").stdout)?;
    let paths: Vec<_> = j["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, ["a.txt", "d/e/y", "d/x"]);
    let out = t.path().join("state/x.tar");
    ok(&run(
        &["export", &id, "--out", out.to_str().unwrap(), "a.txt"],
        b"",
    ))?;
    ok(&run(&["close", &id], b""))?;
    assert!(!state.join(&id).exists());
    Ok(())
}
