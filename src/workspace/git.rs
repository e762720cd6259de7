//! Baselines from a git commit, without running anything the repository
//! controls.
//!
//! Choice: `git` itself, plumbing only (`cat-file -t`, `ls-tree -r -z
//! --full-tree`, `cat-file --batch`), never a checkout, run inside a hutch
//! sandbox. So no hook, filter, textconv or fsmonitor is ever involved,
//! and were git ever talked into running something anyway it would run
//! confined: default profile (system directories read-only, no network,
//! default seccomp filter, a wall clock), the repository's git directory
//! bound read-only at [`SANDBOX_GIT_DIR`], and one fresh, hutch-made
//! staging directory bound writable at [`SANDBOX_OUT`] per step, where git
//! writes its output (a file, not the capture pipe: `cat-file --batch`
//! output is as large as the tree). Its configuration is neutralised: a
//! fixed environment, no system/global config, `HOME` pointing nowhere,
//! hooks and fsmonitor off (`GIT_CONFIG_COUNT`, the environment form of
//! `-c`), replace refs and lazy fetches of partial clones disabled, and
//! every transport protocol forbidden.
//!
//! What hutch itself reads of the repository (finding the git directory)
//! is in `repo.rs`: beneath the repository, no symlink, non-blocking,
//! regular files only, capped, never echoed. The listing carries sizes
//! and the trees themselves (`ls-tree -r -t -l`), so every import cap
//! ([`ImportLimits`](crate::workspace::ImportLimits)), directories
//! included, is checked on the whole listing before anything is written to
//! the baseline or any blob is fetched; each step's output is cut (`head`)
//! to what the caps allow (reading stops at `max_files + 1` records), so a
//! tree bomb cannot fill the state directory.
//!
//! Policy (like the platform that asked for sessions): commits with
//! submodules (mode 160000), tracked symlinks (120000) or
//! `export-ignore`/`export-subst` attributes are refused unless allowed.
//! An allowed submodule becomes an empty directory (as `git archive` does).
//! Git LFS pointer files stay pointers: no filter ever runs.

use std::ffi::CStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::launch::{self, ExitReport, Outcome, RunOptions};
use crate::spec::{Duration, FsOp, Network, Spec};
use crate::sys;
use crate::util::quote::{display_name, git_quote};

use super::baseline::{BaselineWriter, Content, QUEUED_BYTES_MAX, split_components};
use super::error::{Result, WorkspaceError};
use super::repo::RepoDir;

/// Where the sandboxed git sees the repository's git directory.
pub const SANDBOX_GIT_DIR: &str = "/repo.git";
/// Where the sandboxed git writes its output.
pub const SANDBOX_OUT: &str = "/out";
/// Wall clock of one sandboxed git step.
pub const GIT_STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
/// Host id the sandboxed git runs as on root launches when the repository
/// belongs to root (else the repository's owner).
const ROOT_LAUNCH_ID: u32 = 65534;

/// Configuration given to every git command (as `-c key=value`).
const GIT_CONFIG: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.useReplaceRefs", "false"),
    ("protocol.allow", "never"),
    ("safe.directory", "*"),
];

/// Largest symlink target imported (PATH_MAX).
const LINK_TARGET_MAX_BYTES: u64 = 4096;
/// Largest `.gitattributes` file imported (it is read into memory).
const ATTRIBUTES_MAX_BYTES: u64 = 1 << 20;

/// Exit status of the listing step when the commit is not in the
/// repository.
const EXIT_MISSING: i32 = 4;
/// Bytes of an `ls-tree -l` record besides its path (mode, type, a
/// SHA-256 object id, the size column, separators), rounded up.
const RECORD_OVERHEAD: u64 = 128;

/// Step 1: whether the object exists, its type, then (if a commit) the
/// recursive listing with sizes and with the trees (`-t`: directories are
/// entries too, counted before anything is written), cut after `$2`
/// records and `$3` bytes so a tree bomb cannot fill the state directory;
/// git's own status goes to `/out/status` (141 when the cut ended it).
const LIST_SCRIPT: &str = "git cat-file -e \"$1\" 2>/out/err
rc=$?
if [ $rc != 0 ]; then [ $rc = 1 ] && [ ! -s /out/err ] && exit 4; exit 3; fi
git cat-file -t \"$1\" >/out/type 2>/out/err || exit 3
[ \"$(cat /out/type)\" = commit ] || exit 0
{ git ls-tree -r -t -z -l --full-tree \"$1\" 2>/out/err; echo $? >/out/status; } | head -z -n \"$2\" | head -c \"$3\" >/out/out";
/// Step 2: the blobs named in `/out/in`, one per line, cut after `$1`
/// bytes (what the listing said they hold).
const BLOB_SCRIPT: &str = "{ git cat-file --batch </out/in 2>/out/err; echo $? >/out/status; } | head -c \"$1\" >/out/out";
/// git's status when `head` cut its output (128 + SIGPIPE).
const CUT_STATUS: &[u8] = b"141";

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

/// A hutch-made directory the sandboxed git may write its output into:
/// `dir` is an fd of the host directory `path`.
#[derive(Debug, Clone, Copy)]
pub struct GitStaging<'a> {
    pub dir: BorrowedFd<'a>,
    pub path: &'a Path,
}

/// `git` plumbing in a hutch sandbox, one step (one sandbox) at a time.
struct SandboxGit<'a> {
    git_dir: PathBuf,
    staging: GitStaging<'a>,
    /// Host uid/gid of the workload on root launches.
    root_ids: Option<(u32, u32)>,
    /// Root launch of a root-owned repository: shown through an idmapped
    /// overlay lower (owned by the workload, writes discarded), since the
    /// workload's unprivileged id may not be able to read it otherwise.
    root_owned: bool,
}

impl<'a> SandboxGit<'a> {
    /// `meta` is that of the git directory as opened (not re-resolved).
    fn new(git_dir: PathBuf, meta: &sys::Meta, staging: GitStaging<'a>) -> Self {
        // Root launches run the workload as an unprivileged host id: the
        // git directory's owner (who can read it) unless that is root.
        let ids = match (meta.uid, meta.gid) {
            (0, _) => (ROOT_LAUNCH_ID, ROOT_LAUNCH_ID),
            (u, g) => (u, g),
        };
        let root_ids = (sys::geteuid() == 0).then_some(ids);
        SandboxGit {
            git_dir,
            staging,
            root_ids,
            root_owned: meta.uid == 0 && sys::geteuid() == 0,
        }
    }

    /// The Spec of one step: the default profile without a workspace, the
    /// git dir read-only, the step's staging dir writable, no network.
    fn spec(&self, out: &Path, script: &str, args: &[&str]) -> Spec {
        let mut spec = crate::spec::default_profile();
        spec.fs.push(if self.root_owned {
            FsOp::TmpOverlay {
                lowers: vec![self.git_dir.clone()],
                dest: SANDBOX_GIT_DIR.into(),
                size: None,
            }
        } else {
            FsOp::RoBind {
                src: self.git_dir.clone(),
                dest: SANDBOX_GIT_DIR.into(),
                optional: false,
            }
        });
        spec.fs.push(FsOp::Bind {
            src: out.to_path_buf(),
            dest: SANDBOX_OUT.into(),
            optional: false,
        });
        spec.cwd = Some(SANDBOX_OUT.into());
        spec.network = Network::None;
        spec.limits.wall_clock = Some(Duration(GIT_STEP_TIMEOUT));
        if let Some((uid, gid)) = self.root_ids {
            spec.identity.host_uid = Some(uid);
            spec.identity.host_gid = Some(gid);
        }
        spec.env.clear();
        let env: &[(&str, &str)] = &[
            ("PATH", crate::spec::DEFAULT_PATH),
            ("HOME", "/nonexistent"),
            ("XDG_CONFIG_HOME", "/nonexistent"),
            ("LC_ALL", "C"),
            ("GIT_DIR", SANDBOX_GIT_DIR),
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("GIT_CONFIG_SYSTEM", "/dev/null"),
            ("GIT_CONFIG_GLOBAL", "/dev/null"),
            ("GIT_ATTR_NOSYSTEM", "1"),
            ("GIT_NO_REPLACE_OBJECTS", "1"),
            ("GIT_NO_LAZY_FETCH", "1"),
            ("GIT_ALLOW_PROTOCOL", ""),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("GIT_OPTIONAL_LOCKS", "0"),
            ("GIT_PAGER", "cat"),
        ];
        for (k, v) in env {
            spec.env.insert((*k).into(), (*v).into());
        }
        spec.env
            .insert("GIT_CONFIG_COUNT".into(), GIT_CONFIG.len().to_string());
        for (i, (k, v)) in GIT_CONFIG.iter().enumerate() {
            spec.env.insert(format!("GIT_CONFIG_KEY_{i}"), (*k).into());
            spec.env
                .insert(format!("GIT_CONFIG_VALUE_{i}"), (*v).into());
        }
        spec.command = ["/bin/sh", "-c", script, "sh"]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect();
        spec
    }

    /// Run `script` in a sandbox whose `/out` is the fresh staging
    /// subdirectory `name`, holding `input` as `/out/in`. Returns the
    /// subdirectory and the exit report.
    fn step(
        &self,
        name: &CStr,
        script: &str,
        args: &[&str],
        input: &[u8],
    ) -> Result<(OwnedFd, ExitReport)> {
        sys::mkdirat(self.staging.dir, name, 0o700)?;
        let dir = sys::open_dir_beneath(self.staging.dir, name)?;
        let mut f = File::from(sys::open_beneath(
            dir.as_fd(),
            c"in",
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o644,
        )?);
        f.write_all(input)
            .map_err(|e| WorkspaceError::io("write the git request", e))?;
        drop(f);
        if let Some((uid, gid)) = self.root_ids {
            sys::fchown(dir.as_fd(), uid, gid)?;
        }
        let out = self
            .staging
            .path
            .join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let spec = self.spec(&out, script, args);
        let report = launch_quietly(&spec)?;
        if report.reason == Outcome::TimedOut {
            return Err(WorkspaceError::Git(format!(
                "the sandboxed git timed out after {}",
                Duration(GIT_STEP_TIMEOUT)
            )));
        }
        if let Some(e) = &report.error {
            return Err(WorkspaceError::Git(format!("the sandboxed git: {e}")));
        }
        Ok((dir, report))
    }
}

/// Launch in-process when the caller is single-threaded (the CLI), else
/// through the `hutch` helper ([`launch::Mode::Auto`]). Output goes to
/// files; the workload's stdio is /dev/null.
fn launch_quietly(spec: &Spec) -> Result<ExitReport> {
    let opts = RunOptions {
        quiet: true,
        stdio: launch::WorkloadStdio::Null,
        ..Default::default()
    };
    launch::launch(spec, &opts, launch::Mode::Auto)
        .map(|f| f.report)
        .map_err(|e| WorkspaceError::Git(format!("running git in a sandbox: {e}")))
}

/// Open the file `name` the sandbox wrote in `dir`: never a link, FIFO or
/// device (a regular file or an error).
fn open_output(dir: BorrowedFd<'_>, name: &CStr) -> Result<File> {
    let fd = sys::open_beneath(
        dir,
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        0,
    )?;
    let f = File::from(fd);
    let meta = f
        .metadata()
        .map_err(|e| WorkspaceError::io("stat git output", e))?;
    if !meta.is_file() {
        return Err(WorkspaceError::Git(format!(
            "git output {} is not a regular file",
            name.to_string_lossy()
        )));
    }
    Ok(f)
}

/// The first `limit` bytes of an output file (empty when absent).
fn read_small(dir: BorrowedFd<'_>, name: &CStr, limit: u64) -> Result<Vec<u8>> {
    match open_output(dir, name) {
        Ok(f) => {
            let mut data = Vec::new();
            f.take(limit)
                .read_to_end(&mut data)
                .map_err(|e| WorkspaceError::io("read git output", e))?;
            Ok(data)
        }
        Err(WorkspaceError::Sys(e)) if e.errno == sys::Errno::ENOENT => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// At most this much of git's first stderr line appears in an error.
const GIT_MESSAGE_MAX: usize = 200;

/// The error of a failed step: git's first stderr line, cut short and
/// quoted (it may carry repository-chosen names).
fn step_failure(dir: BorrowedFd<'_>, what: &str, status: &str) -> WorkspaceError {
    let err = read_small(dir, c"err", 4096).unwrap_or_default();
    let line = err.split(|&b| b == b'\n').next().unwrap_or_default();
    let message = if line.is_empty() {
        "(no message)".to_string()
    } else {
        git_quote(&line[..line.len().min(GIT_MESSAGE_MAX)])
    };
    WorkspaceError::Git(format!("git {what} failed (exit {status}): {message}"))
}

/// git's own exit status of a cut step (`/out/status`), trimmed.
fn git_status(dir: BorrowedFd<'_>) -> Result<Vec<u8>> {
    Ok(read_small(dir, c"status", 16)?.trim_ascii().to_vec())
}

struct TreeEntry {
    mode: u32,
    oid: String,
    /// The blob's size as the listing gave it.
    size: u64,
    path: Vec<u8>,
}

/// Export commit `rev` of `repo` into `writer`, running git in hutch
/// sandboxes whose output lands in subdirectories of `staging`. Returns
/// the repository's `info/exclude` (at most 1 MiB), if it has one.
pub fn import_git(
    repo: &Path,
    rev: &str,
    policy: GitPolicy,
    staging: GitStaging<'_>,
    writer: &mut BaselineWriter,
) -> Result<Option<Vec<u8>>> {
    if !is_full_rev(rev) {
        return Err(WorkspaceError::Git(format!(
            "--rev must be a full commit id (40 or 64 hex digits), not {rev:?}"
        )));
    }
    let rev = rev.to_ascii_lowercase();
    let repo_dir = RepoDir::open(repo)?;
    let gd = repo_dir.git_dir()?;
    let git = SandboxGit::new(gd.path.clone(), &gd.meta, staging);
    drop(gd.fd);
    // The repository's own ignore rules (for diffs), read like the other
    // metadata: beneath the repository, no link, regular, capped.
    let exclude = match gd.path.strip_prefix(repo_dir.path()) {
        Ok(rel) => {
            let mut rel = rel.as_os_str().as_bytes().to_vec();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(b"info/exclude");
            repo_dir
                .read_capped(&rel, super::ignore::IGNORE_FILE_MAX_BYTES)
                .ok()
                .flatten()
        }
        Err(_) => None,
    };
    let limits = *writer.limits();
    let max_records = limits.max_files.saturating_add(1);
    let max_listing = max_records.saturating_mul(limits.max_path_bytes as u64 + RECORD_OVERHEAD);
    let (list_dir, report) = git.step(
        c"list",
        LIST_SCRIPT,
        &[&rev, &max_records.to_string(), &max_listing.to_string()],
        b"",
    )?;
    let alternates = report.status != 0 && repo_dir.has_alternates(&git.git_dir);
    if report.status == EXIT_MISSING || alternates {
        let mut msg = format!(
            "commit {rev} is not in the repository {}",
            repo_dir.path().display()
        );
        if alternates {
            msg +=
                " (its objects/info/alternates, objects borrowed from elsewhere, is not followed)";
        }
        return Err(WorkspaceError::Git(msg));
    }
    if report.status != 0 {
        return Err(step_failure(
            list_dir.as_fd(),
            "cat-file",
            &report.status.to_string(),
        ));
    }
    let kind = read_small(list_dir.as_fd(), c"type", 64)?;
    if kind.trim_ascii() != b"commit" {
        return Err(WorkspaceError::Git(format!(
            "{rev} is a {}, not a commit",
            git_quote(&kind.trim_ascii()[..kind.trim_ascii().len().min(16)])
        )));
    }
    let status = git_status(list_dir.as_fd())?;
    if status != b"0" && status != CUT_STATUS {
        return Err(step_failure(
            list_dir.as_fd(),
            "ls-tree",
            &String::from_utf8_lossy(&status),
        ));
    }
    // The whole listing is checked before anything is written: the
    // baseline's directories come from the blobs' paths, submodules are
    // created after the loop.
    let mut listing = BufReader::with_capacity(256 * 1024, open_output(list_dir.as_fd(), c"out")?);
    let mut blobs = Vec::new();
    let mut submodules = Vec::new();
    let mut record = Vec::new();
    let (mut records, mut total) = (0u64, 0u64);
    loop {
        record.clear();
        let n = listing
            .by_ref()
            .take(limits.max_path_bytes as u64 + RECORD_OVERHEAD)
            .read_until(0, &mut record)
            .map_err(|e| WorkspaceError::io("read git ls-tree output", e))?;
        if n == 0 {
            break;
        }
        if record.last() != Some(&0) {
            // Cut: by the byte bound, or a path longer than any allowed.
            return Err(WorkspaceError::Refused(
                format!(
                    "commit {rev} has a path longer than {} bytes or more than {} entries",
                    limits.max_path_bytes, limits.max_files
                ),
                "--max-path-bytes N / --max-files N",
            ));
        }
        record.pop();
        if record.is_empty() {
            continue;
        }
        records += 1;
        if records > limits.max_files {
            return Err(WorkspaceError::Refused(
                format!(
                    "commit {rev} has more than {} entries (files, links and directories)",
                    limits.max_files
                ),
                "--max-files N",
            ));
        }
        let record = &record[..];
        let bad =
            || WorkspaceError::Git(format!("unexpected ls-tree line {}", display_name(record)));
        let tab = record.iter().position(|&b| b == b'\t').ok_or_else(bad)?;
        let (head, path) = (&record[..tab], &record[tab + 1..]);
        let mut fields = head.split(|&b| b == b' ').filter(|f| !f.is_empty());
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
        let size_field = fields.next().ok_or_else(bad)?;
        let shown = display_name(path);
        limits.check_path(path, path.split(|&b| b == b'/').count())?;
        match mode {
            // A directory: counted above, made by the writer on the way
            // to the files below it (an empty tree makes nothing).
            0o040000 => continue,
            0o160000 if !policy.allow_submodules => {
                return Err(WorkspaceError::Refused(
                    format!("commit {rev} contains a submodule at {shown}"),
                    "--allow-submodules",
                ));
            }
            0o160000 => {
                submodules.push(split_components(path)?);
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
        let size = std::str::from_utf8(size_field)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(bad)?;
        if size > limits.max_file_bytes {
            return Err(WorkspaceError::Refused(
                format!("{shown} is larger than {} bytes", limits.max_file_bytes),
                "--max-file-bytes N",
            ));
        }
        total = total.saturating_add(size);
        if total > limits.max_bytes {
            return Err(WorkspaceError::Refused(
                format!("commit {rev} is larger than {} bytes", limits.max_bytes),
                "--max-bytes N",
            ));
        }
        blobs.push(TreeEntry {
            mode,
            oid,
            size,
            path: path.to_vec(),
        });
    }
    drop(listing);
    if status == CUT_STATUS {
        // Cut although within the caps: the listing was not complete.
        return Err(WorkspaceError::Refused(
            format!("commit {rev} exceeds the import caps"),
            "--max-files N / --max-path-bytes N",
        ));
    }
    // The listing (up to max_files records) is not needed any more: its
    // disk goes before the blobs arrive.
    drop(list_dir);
    super::remove::remove_tree(staging.dir, c"list")?;
    for dir in &submodules {
        writer.add_dir(dir)?;
    }
    let request: Vec<u8> = blobs
        .iter()
        .flat_map(|b| format!("{}\n", b.oid).into_bytes())
        .collect();
    // What cat-file prints: per blob a header, the content and a newline.
    let expected = blobs.iter().fold(0u64, |acc, b| {
        acc.saturating_add(b.size)
            .saturating_add(b.oid.len() as u64 + 32)
    });
    let (blob_dir, report) = git.step(c"blobs", BLOB_SCRIPT, &[&expected.to_string()], &request)?;
    let status = git_status(blob_dir.as_fd())?;
    if report.status != 0 || status != b"0" {
        return Err(step_failure(
            blob_dir.as_fd(),
            "cat-file --batch",
            &String::from_utf8_lossy(&status),
        ));
    }
    let out = open_output(blob_dir.as_fd(), c"out")?;
    read_blobs(
        &mut BufReader::with_capacity(256 * 1024, out),
        &blobs,
        policy,
        writer,
    )?;
    Ok(exclude)
}

/// Parse `git cat-file --batch` output for `blobs` into the writer.
fn read_blobs(
    reader: &mut impl BufRead,
    blobs: &[TreeEntry],
    policy: GitPolicy,
    writer: &mut BaselineWriter,
) -> Result<()> {
    let mut header = Vec::new();
    for blob in blobs {
        header.clear();
        reader
            .by_ref()
            .take(4096)
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
                git_quote(&header.trim_ascii_end()[..header.len().min(GIT_MESSAGE_MAX)])
            )));
        };
        if size != blob.size {
            return Err(WorkspaceError::Git(format!(
                "cat-file gave {size} bytes for {} ({}), ls-tree {}",
                display_name(&blob.path),
                blob.oid,
                blob.size
            )));
        }
        if oid != blob.oid {
            return Err(WorkspaceError::Git(format!(
                "cat-file answered {oid} for {}",
                blob.oid
            )));
        }
        let path = split_components(&blob.path)?;
        let is_attr = path
            .last()
            .is_some_and(|n| n.as_bytes() == b".gitattributes");
        if blob.mode == 0o120000 || is_attr {
            // Read into memory: kept small.
            let cap = if is_attr {
                ATTRIBUTES_MAX_BYTES
            } else {
                LINK_TARGET_MAX_BYTES
            };
            if size > cap {
                return Err(WorkspaceError::Unsupported {
                    path: display_name(&blob.path),
                    reason: format!("is larger than {cap} bytes (as a symlink or .gitattributes)"),
                });
            }
            let mut data = Vec::new();
            reader
                .by_ref()
                .take(size)
                .read_to_end(&mut data)
                .map_err(|e| WorkspaceError::io("read git cat-file output", e))?;
            if data.len() as u64 != size {
                return Err(truncated(blob));
            }
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
        } else if size <= QUEUED_BYTES_MAX {
            // Small: read here, hashed and written by the writer threads.
            let mut data = Vec::with_capacity(size as usize);
            reader
                .by_ref()
                .take(size)
                .read_to_end(&mut data)
                .map_err(|e| WorkspaceError::io("read git cat-file output", e))?;
            if data.len() as u64 != size {
                return Err(truncated(blob));
            }
            writer.queue_file(&path, Some(blob.mode == 0o100755), Content::Bytes(data))?;
        } else {
            let mut body = CountingReader {
                inner: reader.by_ref().take(size),
                count: 0,
            };
            writer.add_file(&path, blob.mode == 0o100755, &mut body)?;
            if body.count != size {
                return Err(truncated(blob));
            }
        }
        let mut nl = [0u8; 1];
        reader
            .read_exact(&mut nl)
            .map_err(|e| WorkspaceError::io("read git cat-file output", e))?;
        if nl != *b"\n" {
            return Err(truncated(blob));
        }
    }
    Ok(())
}

fn truncated(blob: &TreeEntry) -> WorkspaceError {
    WorkspaceError::Git(format!(
        "git cat-file output ended inside {} ({})",
        display_name(&blob.path),
        blob.oid
    ))
}

/// A reader that counts what passed through it.
struct CountingReader<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
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
