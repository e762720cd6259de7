//! Baselines from a git commit, without running anything the repository
//! controls.
//!
//! Choice: the host `git`, plumbing only (`cat-file -t`, `ls-tree -r -z
//! --full-tree`, `cat-file --batch`), never a checkout, so no hook, filter,
//! textconv or fsmonitor is ever involved. Its configuration is neutralised:
//! empty environment, no system/global config, `HOME` pointing nowhere,
//! hooks and fsmonitor off on the command line, replace refs and lazy
//! fetches of partial clones disabled, and every transport protocol
//! forbidden, so repository config cannot make git start a program or reach
//! the network. The repository's git directory is named explicitly (no
//! discovery walking up the tree).
//!
//! Policy (like the platform that asked for sessions): commits with
//! submodules (mode 160000), tracked symlinks (120000) or
//! `export-ignore`/`export-subst` attributes are refused unless allowed.
//! An allowed submodule becomes an empty directory (as `git archive` does).
//! Git LFS pointer files stay pointers: no filter ever runs.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::baseline::{BaselineWriter, split_components};
use super::error::{Result, WorkspaceError};
use super::quote::display_name;

/// What a commit may contain beyond plain files and directories.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GitPolicy {
    pub allow_submodules: bool,
    pub allow_symlinks: bool,
    pub allow_export_attributes: bool,
}

/// Whether `rev` is a full object id (40 hex for SHA-1, 64 for SHA-256).
pub fn is_full_rev(rev: &str) -> bool {
    (rev.len() == 40 || rev.len() == 64) && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The git directory of `repo`: `repo/.git` (a directory, or a `gitdir:`
/// file), or `repo` itself when it is bare.
pub fn git_dir(repo: &Path) -> Result<PathBuf> {
    let dotgit = repo.join(".git");
    match std::fs::symlink_metadata(&dotgit) {
        Ok(m) if m.is_dir() => return Ok(dotgit),
        Ok(m) if m.is_file() => {
            let text = std::fs::read_to_string(&dotgit)
                .map_err(|e| WorkspaceError::io(format!("read {}", dotgit.display()), e))?;
            let target = text
                .strip_prefix("gitdir: ")
                .map(str::trim_end)
                .ok_or_else(|| {
                    WorkspaceError::Git(format!("{}: not a gitdir file", dotgit.display()))
                })?;
            let p = Path::new(target);
            return Ok(if p.is_absolute() {
                p.into()
            } else {
                repo.join(p)
            });
        }
        _ => {}
    }
    if repo.join("objects").is_dir() && repo.join("HEAD").is_file() {
        return Ok(repo.to_path_buf());
    }
    Err(WorkspaceError::Git(format!(
        "{} is not a git repository (no .git, not bare)",
        repo.display()
    )))
}

/// A `git` command with neutralised configuration for `git_dir`.
fn git(git_dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .env("LC_ALL", "C")
        .env("GIT_DIR", git_dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_SYSTEM", "/dev/null")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_ALLOW_PROTOCOL", "")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_PAGER", "cat")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.useReplaceRefs=false",
            "-c",
            "protocol.allow=never",
            "-c",
            "safe.directory=*",
        ])
        .stdin(Stdio::null());
    cmd
}

fn run_git(git_dir: &Path, args: &[&OsStr]) -> Result<Vec<u8>> {
    let out = git(git_dir)
        .args(args)
        .output()
        .map_err(|e| WorkspaceError::io("run git", e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(WorkspaceError::Git(format!(
            "git {} failed: {}",
            args.first().map_or("".into(), |a| a.to_string_lossy()),
            err.lines().next().unwrap_or("(no message)")
        )));
    }
    Ok(out.stdout)
}

struct TreeEntry {
    mode: u32,
    oid: String,
    path: Vec<u8>,
}

/// Export commit `rev` of `repo` into `writer`.
pub fn import_git(
    repo: &Path,
    rev: &str,
    policy: GitPolicy,
    writer: &mut BaselineWriter,
) -> Result<()> {
    if !is_full_rev(rev) {
        return Err(WorkspaceError::Git(format!(
            "--rev must be a full commit id (40 or 64 hex digits), not {rev:?}"
        )));
    }
    let rev = rev.to_ascii_lowercase();
    let gd = git_dir(repo)?;
    let kind = run_git(&gd, &["cat-file".as_ref(), "-t".as_ref(), rev.as_ref()])?;
    if kind.trim_ascii() != b"commit" {
        return Err(WorkspaceError::Git(format!(
            "{rev} is a {}, not a commit",
            String::from_utf8_lossy(kind.trim_ascii())
        )));
    }
    let listing = run_git(
        &gd,
        &[
            "ls-tree".as_ref(),
            "-r".as_ref(),
            "-z".as_ref(),
            "--full-tree".as_ref(),
            rev.as_ref(),
        ],
    )?;
    let mut blobs = Vec::new();
    for record in listing.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let bad =
            || WorkspaceError::Git(format!("unexpected ls-tree line {}", display_name(record)));
        let tab = record.iter().position(|&b| b == b'\t').ok_or_else(bad)?;
        let (head, path) = (&record[..tab], &record[tab + 1..]);
        let mut fields = head.split(|&b| b == b' ');
        let mode = fields
            .next()
            .and_then(|m| std::str::from_utf8(m).ok())
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .ok_or_else(bad)?;
        let _type = fields.next().ok_or_else(bad)?;
        let oid = fields
            .next()
            .and_then(|o| std::str::from_utf8(o).ok())
            .filter(|o| is_full_rev(o))
            .ok_or_else(bad)?
            .to_string();
        let shown = display_name(path);
        match mode {
            0o160000 if !policy.allow_submodules => {
                return Err(WorkspaceError::Refused(
                    format!("commit {rev} contains a submodule at {shown}"),
                    "--allow-submodules",
                ));
            }
            0o160000 => {
                writer.add_dir(&split_components(path)?)?;
                continue;
            }
            0o120000 if !policy.allow_symlinks => {
                return Err(WorkspaceError::Refused(
                    format!("commit {rev} tracks a symlink at {shown}"),
                    "--allow-symlinks",
                ));
            }
            0o100644 | 0o100755 | 0o120000 | 0o100664 => {}
            other => {
                return Err(WorkspaceError::Git(format!(
                    "{shown}: unsupported tree entry mode {other:o}"
                )));
            }
        }
        blobs.push(TreeEntry {
            mode,
            oid,
            path: path.to_vec(),
        });
    }
    fetch_blobs(&gd, &blobs, policy, writer)
}

/// Stream the blobs through one `git cat-file --batch` into the writer.
fn fetch_blobs(
    gd: &Path,
    blobs: &[TreeEntry],
    policy: GitPolicy,
    writer: &mut BaselineWriter,
) -> Result<()> {
    let mut child = git(gd)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| WorkspaceError::io("run git cat-file --batch", e))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(WorkspaceError::Git("git cat-file: no pipes".into()));
    };
    // Feed the object ids from a thread: git writes while it reads, and
    // both pipes must keep moving.
    let request: Vec<u8> = blobs
        .iter()
        .flat_map(|b| format!("{}\n", b.oid).into_bytes())
        .collect();
    let feeder = std::thread::spawn(move || {
        let r = stdin.write_all(&request);
        drop(stdin);
        r
    });
    let mut reader = BufReader::with_capacity(256 * 1024, stdout);
    let result = (|| -> Result<()> {
        let mut header = Vec::new();
        for blob in blobs {
            header.clear();
            reader
                .read_until(b'\n', &mut header)
                .map_err(|e| WorkspaceError::io("read git cat-file output", e))?;
            let text = String::from_utf8_lossy(&header);
            let mut f = text.split_ascii_whitespace();
            let (oid, kind, size) = (
                f.next(),
                f.next(),
                f.next().and_then(|s| s.parse::<u64>().ok()),
            );
            let (Some(oid), Some("blob"), Some(size)) = (oid, kind, size) else {
                return Err(WorkspaceError::Git(format!(
                    "object {} of {}: {}",
                    blob.oid,
                    display_name(&blob.path),
                    text.trim_end()
                )));
            };
            if oid != blob.oid {
                return Err(WorkspaceError::Git(format!(
                    "cat-file answered {oid} for {}",
                    blob.oid
                )));
            }
            let path = split_components(&blob.path)?;
            let mut body = (&mut reader).take(size);
            let is_attr = path
                .last()
                .is_some_and(|n| n.as_bytes() == b".gitattributes");
            if blob.mode == 0o120000 || is_attr {
                let mut data = Vec::with_capacity(size as usize);
                body.read_to_end(&mut data)
                    .map_err(|e| WorkspaceError::io("read git cat-file output", e))?;
                if blob.mode == 0o120000 {
                    writer.add_symlink(&path, &data)?;
                } else {
                    if !policy.allow_export_attributes
                        && let Some(attr) = export_attribute(&data)
                    {
                        return Err(WorkspaceError::Refused(
                            format!("{} sets {attr}", display_name(&blob.path)),
                            "--allow-export-attributes",
                        ));
                    }
                    writer.add_file(&path, blob.mode == 0o100755, &mut &data[..])?;
                }
            } else {
                writer.add_file(&path, blob.mode == 0o100755, &mut body)?;
            }
            let mut nl = [0u8; 1];
            reader
                .read_exact(&mut nl)
                .map_err(|e| WorkspaceError::io("read git cat-file output", e))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = child.kill();
    }
    drop(reader);
    let _ = feeder.join();
    let status = child
        .wait()
        .map_err(|e| WorkspaceError::io("wait for git", e))?;
    result?;
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        return Err(WorkspaceError::Git(format!(
            "git cat-file --batch failed: {}",
            err.lines().next().unwrap_or("(no message)")
        )));
    }
    Ok(())
}

/// The first `export-ignore`/`export-subst` attribute a `.gitattributes`
/// text sets (macros included), if any. Unset (`-x`) and unspecified
/// (`!x`) forms do not count.
pub fn export_attribute(text: &[u8]) -> Option<&'static str> {
    for line in text.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        for token in line.split(|b| b.is_ascii_whitespace()).skip(1) {
            let name = token.split(|&b| b == b'=').next().unwrap_or(token);
            for attr in ["export-ignore", "export-subst"] {
                if name == attr.as_bytes() {
                    return Some(attr);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_attributes_are_found() {
        assert_eq!(
            export_attribute(b"*.txt export-ignore\n"),
            Some("export-ignore")
        );
        assert_eq!(
            export_attribute(b"# x export-subst\n*.c -export-subst !export-ignore\n"),
            None
        );
        assert_eq!(
            export_attribute(b"[attr]bin export-subst\n"),
            Some("export-subst")
        );
        assert_eq!(export_attribute(b"*.bin filter=lfs diff=lfs\n"), None);
    }

    #[test]
    fn revisions_must_be_full() {
        assert!(is_full_rev(&"a".repeat(40)));
        assert!(!is_full_rev("HEAD"));
        assert!(!is_full_rev(&"g".repeat(40)));
    }
}
