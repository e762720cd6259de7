//! `hutch session ...`: persistent workspaces over a sealed baseline.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::json;

use super::machine::{self, ErrorKind, MachineError};
use super::run::WorkspaceFrom;

mod snap;

use crate::spec::{ByteSize, Duration};
use crate::workspace::{
    CloseOptions, CreateOptions, DiffFormat, DiffOptions, ExportOptions, GitPolicy, ImportLimits,
    Lock, Since, Source, StateDir,
};

const USAGE: &str = "usage: hutch session [--state-dir DIR] [--wait] [--json] COMMAND ...
  create --from DIR | --from-git REPO --rev COMMIT [options]   prints the session id
  run ID [hutch run options] -- CMD...
  warm ID N [--warm-idle DUR]                                  keep N sandboxes ready
  read ID PATH [--max-bytes N]
  write ID PATH [--max-bytes N] < DATA
  rm ID PATH...
  glob ID PATTERN [--path P] [--exclude G] [--max-matches N]
  grep ID REGEX [--path P] [--glob G] [--exclude G] [-i] [-F] [-l] [--max-matches N]
  diff ID [--format unified|json|stat] [--since baseline|N] [--exclude GLOB] [--include-ignored] [--max-bytes N]
  export ID --out FILE.zip|FILE.tar [--patch] [caps] PATH...
  seal ID [--network none]
  snapshot ID [--name NAME]                                    prints the snapshot id
  snapshots ID
  fork ID [--from SNAP] [--count N] [--warm N]                 prints the new ids
  rollback ID SNAP
  compact ID [--depth N]                                       merge the oldest layers
  show ID [--json]
  audit ID [--audit-dir DIR]
  close ID [--keep-audit DIR]
  list
  gc --older-than DUR
--json prints one JSON document per command (docs/machine.md); for `run` it
ends the --status-fd/--status-file lines instead, stdout being the command's.
`hutch session COMMAND --help` describes one command.";

/// The help of each subcommand (`hutch session COMMAND --help`).
const HELP: &[(&str, &str)] = &[
    (
        "create",
        "usage: hutch session create (--from DIR | --from-git REPO --rev COMMIT) [options]
Import a baseline and print the new session's id.
  --from DIR                  copy a host directory (a top-level .git is skipped)
  --from-git REPO --rev ID    export a full commit id of a git repository
  --allow-submodules          keep submodules (as empty directories)
  --allow-symlinks            keep tracked symlinks (as links)
  --allow-export-attributes   accept export-ignore/export-subst attributes
  --expect-fingerprint HEX    refuse any other baseline
  --deadline DUR              no command runs past this (e.g. 2h)
  --max-commands N            number of commands the session may run
  --warm N                    keep N sandboxes ready for `session run`
                              (a server of the session's own, docs/warm.md)
  --warm-idle DUR             stop that server after DUR without a command
                              (default 10m)
  --workspace-path PATH       where commands see the workspace (default /workspace)
  --disk-max SIZE             hard cap of what the session writes (root: an
                              ext4 image of that size; unprivileged: refused)
  --disk-max-preferred SIZE   the same where it can be enforced, else accounted
                              after each command (over it, commands are refused
                              until files are removed with `session rm`)
  --audit-dir DIR             keep the audit there (ID.audit.jsonl) when closed
  --compact-depth N           frozen layers kept before a snapshot or seal merges
                              the oldest (2 to 60, default 16)
  --lock egress|binds|env|limits|confinement|all
                              commands may narrow the defaults below, never widen
                              what is locked (repeatable)
Defaults of every command: the `hutch run` options of binds, environment
(--setenv, --pass-env), egress (--allow-host, --egress-policy/--egress-profile,
...), limits (--memory, --pids, --cpus, --rlimit, --timeout), confinement
(--seccomp, --cap-add, --profile) may be given here; `session run` starts
from them.
  --image REF                 every command runs on this image (sha256:DIGEST or
                              NAME@sha256:DIGEST; resolved now, recorded pinned)
  --image-store DIR  --platform OS/ARCH  --allow-unpinned  --allow-platform-mismatch
  --allow-volumes  --allow-secret-env  --allow-devices  --approved FILE
                              as for `hutch run` (the approved list stays the
                              session's default: each command is checked)
  --pull missing|never  --insecure-registry H  --registry-auth FILE
  --registry-credential SOURCE
                              as for `hutch run`: pull REF now when the store lacks it
Import caps (exceeding one refuses the import whole, nothing is kept; a git
commit is checked on its listing before anything is written):
  --max-files N               entries: files, links, directories (default 250000)
  --max-bytes SIZE            all file contents (default 4G)
  --max-file-bytes SIZE       the largest file (default 4G)
  --max-depth N               path components (default 512)
  --max-path-bytes N          bytes of the longest path (default 4096)",
    ),
    (
        "run",
        "usage: hutch session run ID [hutch run options] -- CMD...
Run CMD in a fresh sandbox whose workspace path (and cwd) is the session's
workspace, starting from the options given at create. Takes the options of
`hutch run` (e.g. --timeout, --status-file, --allow-host, --pass-env), except
--workspace, --changes and --bare; a relative --chdir is inside the
workspace. Exits with CMD's status. With --pty, CMD runs on a terminal of
its sandbox (as `hutch run --pty`; never in a warm sandbox).
  --use-secret NAME   give this command the secret NAME that `session create
                      --secret name=NAME,...` declared (repeatable); a secret
                      declared at create reaches no command that does not
                      name it (docs/secrets.md)",
    ),
    (
        "warm",
        "usage: hutch session warm ID N [--warm-idle DUR]
Start the session's warm server: N sandboxes kept ready, built before the
commands that use them; `session run` takes one when its options do not
change the sandbox, and launches cold otherwise (the report says which:
`warm`). The server stops with `session close`, at the session deadline,
after --warm-idle without a command (default 10m), or when killed, and
every sandbox goes with it (docs/warm.md). Prints nothing.
       hutch session warm ID --ready [--timeout DUR]
Wait until the session's warm server has all its sandboxes ready and none
handed out (the refill after the last command done; default timeout 30s);
print its status as JSON (size, ready, warming, claimed). Exit 125 when
the session has no warm server or the timeout passes.",
    ),
    (
        "read",
        "usage: hutch session read ID PATH [--max-bytes N]
Print the regular file PATH of the workspace (links are not followed).
  --max-bytes N   fail when the file is larger (default 1M)",
    ),
    (
        "write",
        "usage: hutch session write ID PATH [--max-bytes N] < DATA
Replace (or create) the file PATH of the workspace with stdin, creating its
parent directories.
  --max-bytes N   fail, writing nothing, when stdin is longer (default 16M)",
    ),
    (
        "glob",
        "usage: hutch session glob ID [options] [--] PATTERN
List the workspace's files (not directories) matching PATTERN, searched
inside the session's sandbox. `*` `?` `[...]` match within a name, `**` any
number of directories, `{a,b}` either; wildcards match a leading `.` too.
  --path P            search below P (default: the whole workspace)
  --exclude G         leave out paths matching G, directories with all below
                      (gitignore's shape: `.deps` anywhere, `build/**` from
                      the root; repeatable; default: nothing left out)
  --max-matches N     stop after N files (default 1000)
  --max-bytes SIZE    stop before the output exceeds SIZE (default 1M)
  --timeout DUR       stop after DUR with what was found (default 1m)
Paths print quoted as git quotes them; --json lists them with their kind.",
    ),
    (
        "grep",
        "usage: hutch session grep ID [options] [--] REGEX
Print `path:line:text` for each line of the workspace's files matching
REGEX, searched inside the session's sandbox: with rg when the sandbox has
one, else hutch's built-in engine. Binary files are skipped, links are not
followed, hidden and ignored files are searched.
  --path P              search below P, or the file P (default: everything)
  --glob G              only files matching G (a name pattern without `/`)
  --exclude G           leave out paths matching G, as for glob (repeatable)
  -i, --ignore-case     -F, --fixed-strings    -l, --files-with-matches
  --max-matches N       stop after N matching lines (default 1000)
  --max-bytes SIZE      stop before the output exceeds SIZE (default 1M)
  --max-line-bytes SIZE cut each line's text (default 1024)
  --engine E            auto (default), rg or builtin
  --timeout DUR         stop after DUR with what was found (default 1m)",
    ),
    (
        "diff",
        "usage: hutch session diff ID [options]
Print the changes of the workspace since the last seal (the baseline when
there is none). Untracked paths the baseline's .gitignore files (and a git
import's .git/info/exclude) ignore are left out, as `git add -A` would;
--format json lists them.
  --format F          unified (default, applies with git apply), json or stat
  --since baseline|N  changes since the baseline, or since seal N
  --exclude GLOB      also leave out GLOB (gitignore syntax; repeatable)
  --include-ignored   leave out nothing the ignore files name
  --max-bytes N       fail, printing nothing, when the output would be longer",
    ),
    (
        "export",
        "usage: hutch session export ID --out FILE.zip|FILE.tar [options] PATH...
Write the named workspace paths (directories recursively) and a manifest
into an archive; print the manifest.
  --patch                also add the unified diff as .hutch/changes.patch
                         (as `session diff`: --since, --exclude, --include-ignored)
  --max-bytes SIZE       all contents and names (default 1G)
  --max-file-bytes SIZE  one file (default 256M)
  --max-entries N        entries (default 100000)",
    ),
    (
        "close",
        "usage: hutch session close ID [--keep-audit DIR] [--json]
Kill the session's live commands, remove the session and everything in it,
then verify that no process, mount, cgroup or runtime record of it is left:
exit 0 only then (else 125, naming what remains). Closing a closed session
succeeds.
  --keep-audit DIR   keep the audit as DIR/ID.audit.jsonl (mode 0600)",
    ),
    (
        "rm",
        "usage: hutch session rm ID PATH...
Remove workspace paths (directories with their content), as rm -rf in a
command would; frees what a disk quota counts.",
    ),
    (
        "seal",
        "usage: hutch session seal ID [--network none] [--json]
Freeze the changes so far as a read-only layer (fingerprinted; `show` lists
seals) and start a fresh upper: `diff` then shows what came after.
  --network none   from now on no command of the session may have network",
    ),
    (
        "snapshot",
        "usage: hutch session snapshot ID [--name NAME] [--json]
Freeze the changes so far into a read-only layer and go on over it with an
empty upper; print the snapshot's id. Unlike `seal`, the network and the
start of `diff` stay as they were. Cost O(changes).
  --name NAME   1 to 64 of A-Z a-z 0-9 . _ - (not a number)",
    ),
    (
        "snapshots",
        "usage: hutch session snapshots ID [--json]
List the session's layers, lowest first: id, name, kind (snapshot or
seal), time, files and bytes changed, parent.",
    ),
    (
        "fork",
        "usage: hutch session fork ID [--from SNAP] [--count N] [--deadline DUR]
                        [--max-commands N] [--warm N [--warm-idle DUR]]
Make N (default 1) new sessions over the session's layers up to SNAP (id
or name; default: a snapshot of now), sharing them read-only: nothing is
copied. Each has its own empty upper, lock, audit, budget and deadline
(the parent's unless given) and a `parent`; its diff is against the same
baseline, `diff --since SNAP` gives only its own changes. Waits for a
command running in the parent. Prints the new ids, one a line.",
    ),
    (
        "rollback",
        "usage: hutch session rollback ID SNAP [--json]
Discard every change after snapshot SNAP (id or name): the upper and the
later layers (a layer a fork uses stays for it). Stops the session's warm
sandboxes.",
    ),
    (
        "compact",
        "usage: hutch session compact ID [--depth N] [--json]
Merge the session's oldest frozen layers into one (a new shared layer;
forks keep the old ones) until at most N remain (default 1), exactly as
the overlay shows them. A `seal` stays a layer boundary; the snapshots
merged below the top of a run can no longer be rolled back to, forked
from or diffed since. Snapshots and seals do this by themselves past the
session's --compact-depth.",
    ),
    (
        "show",
        "usage: hutch session show ID [--json]
Describe the session: source, fingerprint, seals, disk use, commands used
and budget, deadline, workspace path, live commands.",
    ),
    (
        "audit",
        "usage: hutch session audit ID [--audit-dir DIR]
Print the session's audit (JSON lines); of a closed session, the copy kept
in DIR.",
    ),
    (
        "list",
        "usage: hutch session list
Print one JSON line per session.",
    ),
    (
        "gc",
        "usage: hutch session gc --older-than DUR
Remove sessions unused for DUR (e.g. 1d) and leftovers of interrupted
creates and closes; print the removed ids. An entry that cannot be removed
is reported on stderr (exit 125) after all others were tried.",
    ),
];

/// Exit code when hutch itself fails.
const EXIT_FAILURE: i32 = 125;

/// Exit status when the reader of stdout went away: what a shell reports
/// for a writer ended by SIGPIPE (128 + 13).
const EXIT_STDOUT_CLOSED: i32 = 141;

/// Stdout was closed by its reader (e.g. `hutch session diff | head`):
/// not a failure to report, the end of the output.
#[derive(Debug, thiserror::Error)]
#[error("stdout was closed")]
struct StdoutClosed;

/// Write all of `data` to stdout.
fn out(data: &[u8]) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(data).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("write to stdout")),
    }
}

/// Write `line` and a newline to stdout.
fn out_line(line: &str) -> Result<()> {
    out(format!("{line}\n").as_bytes())
}

/// Stdout for streaming writers: a closed pipe becomes [`StdoutClosed`]
/// in the error chain (see [`is_stdout_closed`]).
struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stdout().lock().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().lock().flush()
    }
}

fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<StdoutClosed>()
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<crate::workspace::WorkspaceError>()
                .is_some_and(|w| w.is_broken_pipe())
    })
}

/// `--json` was given: each verb prints its machine document
/// (docs/machine.md). Set by [`run`] before the verb runs.
static JSON: AtomicBool = AtomicBool::new(false);

/// The verb being run (`create`, ...), for the error document.
static VERB: Mutex<Option<String>> = Mutex::new(None);

/// The failure already went to the status stream (`run --json`), so
/// stdout, which carries the command's output, gets no document.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// Clear the flags above, for a process that runs [`main`] again
/// (`hutch serve`'s resident request process).
pub(crate) fn reset_process_flags() {
    JSON.store(false, Ordering::Relaxed);
    REPORTED.store(false, Ordering::Relaxed);
    if let Ok(mut verb) = VERB.lock() {
        *verb = None;
    }
}

fn json_mode() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Print the success document of `verb` (`--json`).
fn emit<T: Serialize>(verb: &str, result: &T) -> Result<()> {
    out_line(&machine::ok_line(&format!("session.{verb}"), result))
}

/// Entry point of `hutch session`.
pub fn main(args: Vec<OsString>) -> i32 {
    match run(args) {
        Ok(code) => code,
        Err(e) if is_stdout_closed(&e) => EXIT_STDOUT_CLOSED,
        Err(e) => {
            eprintln!("hutch session: {e:#}");
            if json_mode() && !REPORTED.load(Ordering::Relaxed) {
                let verb = VERB
                    .lock()
                    .ok()
                    .and_then(|v| v.clone())
                    .map_or("session".to_string(), |v| format!("session.{v}"));
                // Untyped errors of this front end are about its arguments.
                let m = MachineError::classify_or(&e, ErrorKind::Usage);
                let _ = out_line(&machine::error_line(&verb, &m));
            }
            EXIT_FAILURE
        }
    }
}

/// A tiny argument cursor (options may come before or after positionals).
struct Args {
    items: Vec<OsString>,
    pos: usize,
}

impl Args {
    fn next(&mut self) -> Option<OsString> {
        let a = self.items.get(self.pos).cloned();
        self.pos += 1;
        a
    }
    fn value(&mut self, flag: &str) -> Result<OsString> {
        self.next().with_context(|| format!("{flag} needs a value"))
    }
    fn string(&mut self, flag: &str) -> Result<String> {
        self.value(flag)?
            .into_string()
            .map_err(|_| anyhow::anyhow!("{flag}: value is not UTF-8"))
    }
    fn size(&mut self, flag: &str) -> Result<u64> {
        let v = self.string(flag)?;
        ByteSize::parse(&v)
            .map(|b| b.0)
            .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
    }
    fn count(&mut self, flag: &str) -> Result<u64> {
        let n = self.string(flag)?;
        n.parse::<u64>()
            .with_context(|| format!("{flag}: {n:?} is not a count"))
    }
    fn duration(&mut self, flag: &str) -> Result<std::time::Duration> {
        let v = self.string(flag)?;
        Duration::parse(&v)
            .map(|d| d.0)
            .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
    }
    fn rest(&mut self) -> Vec<OsString> {
        let r = self.items[self.pos.min(self.items.len())..].to_vec();
        self.pos = self.items.len();
        r
    }
}

fn run(args: Vec<OsString>) -> Result<i32> {
    let mut a = Args {
        items: args,
        pos: 0,
    };
    let mut state_dir: Option<PathBuf> = None;
    let mut wait = false;
    let command = loop {
        let Some(arg) = a.next() else {
            bail!("missing command\n{USAGE}");
        };
        match arg.to_str() {
            Some("--state-dir") => state_dir = Some(a.value("--state-dir")?.into()),
            Some("--wait") => wait = true,
            Some("--json") => JSON.store(true, Ordering::Relaxed),
            Some("-h" | "--help") => {
                out_line(USAGE)?;
                return Ok(0);
            }
            Some(c) => break c.to_string(),
            None => bail!("unknown command {arg:?}\n{USAGE}"),
        }
    };
    if let Ok(mut verb) = VERB.lock() {
        *verb = Some(command.clone());
    }
    // Global options may also follow the command.
    let mut rest = Vec::new();
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--state-dir")
                if command != "run" || !rest.iter().any(|r: &OsString| r == "--") =>
            {
                state_dir = Some(a.value("--state-dir")?.into())
            }
            Some("--wait") if !rest.iter().any(|r: &OsString| r == "--") => wait = true,
            Some("--json") if !rest.iter().any(|r: &OsString| r == "--") => {
                JSON.store(true, Ordering::Relaxed)
            }
            Some("--") => {
                rest.push(arg);
                rest.extend(a.rest());
            }
            _ => rest.push(arg),
        }
    }
    // `COMMAND --help` (before any `--`) answers without a state directory.
    let before_dashes = rest.iter().take_while(|r| *r != "--");
    if before_dashes
        .into_iter()
        .any(|r| r == "--help" || r == "-h")
    {
        let Some((_, help)) = HELP.iter().find(|(c, _)| *c == command) else {
            bail!("unknown session command {command:?}\n{USAGE}");
        };
        out_line(help)?;
        return Ok(0);
    }
    let state_path = state_dir.unwrap_or_else(StateDir::default_path);
    let state_path = if state_path.is_relative() {
        std::env::current_dir()
            .context("current directory")?
            .join(state_path)
    } else {
        state_path
    };
    let state = StateDir::open(&state_path)?;
    let mut a = Args {
        items: rest,
        pos: 0,
    };
    match command.as_str() {
        "create" => create(&state, &mut a),
        "read" => read(&state, &mut a, wait),
        "write" => write(&state, &mut a, wait),
        "diff" => diff(&state, &mut a, wait),
        "export" => export(&state, &mut a, wait),
        "close" => close(&state, &mut a, wait),
        "rm" => rm(&state, &mut a, wait),
        "seal" => seal(&state, &mut a, wait),
        "snapshot" => snap::snapshot(&state, &mut a, wait),
        "snapshots" => snap::snapshots(&state, &mut a),
        "fork" => snap::fork(&state, &mut a),
        "rollback" => snap::rollback(&state, &mut a, wait),
        "compact" => snap::compact(&state, &mut a, wait),
        "show" => show(&state, &mut a),
        "audit" => audit(&state, &mut a),
        "list" => list(&state),
        "gc" => gc(&state, &mut a),
        "run" => run_command(&state, &mut a, wait),
        "warm" => warm(&state, &mut a),
        "glob" => search(&state, "glob", &mut a, wait),
        "grep" => search(&state, "grep", &mut a, wait),
        other => bail!("unknown session command {other:?}\n{USAGE}"),
    }
}

fn id_arg(a: &mut Args) -> Result<String> {
    a.next()
        .context("missing session ID")?
        .into_string()
        .map_err(|_| anyhow::anyhow!("session ID is not UTF-8"))
}

/// `hutch run` options that make no sense as session defaults (they are
/// per command, or the session provides them).
const NOT_A_DEFAULT: &[&str] = &[
    "--workspace",
    "--changes",
    "--changes-size",
    "--bare",
    "--status-file",
    "--audit",
    "--quiet",
    "--pty",
    "--pty-size",
];

fn create(state: &StateDir, a: &mut Args) -> Result<i32> {
    let mut from: Option<PathBuf> = None;
    let mut git: Option<PathBuf> = None;
    let mut rev: Option<String> = None;
    let mut policy = GitPolicy::default();
    let mut expect = None;
    let mut deadline = None;
    let mut max_commands = None;
    let mut limits = ImportLimits::default();
    let mut warm_size = None;
    let mut idle = crate::workspace::warm::DEFAULT_IDLE;
    let mut workspace_path = PathBuf::from(crate::workspace::WORKSPACE_DIR);
    let mut disk = None;
    let mut compact_depth = None;
    let mut audit_dir = None;
    let mut locks = Vec::new();
    let mut run_options: Vec<OsString> = Vec::new();
    let mut image = SessionImage::default();
    while let Some(arg) = a.next() {
        if image.flag(&arg, a)? {
            continue;
        }
        match arg.to_str() {
            Some("--warm") => warm_size = Some(a.count("--warm")? as usize),
            Some("--warm-idle") => idle = a.duration("--warm-idle")?,
            Some("--from") => from = Some(a.value("--from")?.into()),
            Some("--from-git") => git = Some(a.value("--from-git")?.into()),
            Some("--rev") => rev = Some(a.string("--rev")?),
            Some("--allow-submodules") => policy.allow_submodules = true,
            Some("--allow-symlinks") => policy.allow_symlinks = true,
            Some("--allow-export-attributes") => policy.allow_export_attributes = true,
            Some("--expect-fingerprint") => expect = Some(a.string("--expect-fingerprint")?),
            Some("--deadline") => deadline = Some(a.duration("--deadline")?),
            Some("--max-commands") => max_commands = Some(a.count("--max-commands")?),
            Some("--max-files") => limits.max_files = a.count("--max-files")?,
            Some("--max-bytes") => limits.max_bytes = a.size("--max-bytes")?,
            Some("--max-file-bytes") => limits.max_file_bytes = a.size("--max-file-bytes")?,
            Some("--max-depth") => limits.max_depth = a.count("--max-depth")? as usize,
            Some("--max-path-bytes") => {
                limits.max_path_bytes = a.count("--max-path-bytes")? as usize
            }
            Some("--workspace-path") => workspace_path = a.value("--workspace-path")?.into(),
            Some("--disk-max") => disk = Some((a.size("--disk-max")?, true)),
            Some("--disk-max-preferred") => disk = Some((a.size("--disk-max-preferred")?, false)),
            Some("--compact-depth") => {
                let n = a.count("--compact-depth")? as usize;
                if !crate::workspace::COMPACT_DEPTH_RANGE.contains(&n) {
                    bail!("--compact-depth: {n} is not between 2 and 60 (frozen layers a session keeps)");
                }
                compact_depth = Some(n);
            }
            Some("--audit-dir") => {
                let d: PathBuf = a.value("--audit-dir")?.into();
                audit_dir = Some(std::path::absolute(&d).context("--audit-dir")?);
            }
            Some("--lock") => {
                let v = a.string("--lock")?;
                if v == "all" {
                    locks.extend(Lock::ALL);
                } else {
                    locks.push(Lock::parse(&v).with_context(|| {
                        format!(
                            "--lock: {v:?} is not egress, binds, env, limits, confinement or all"
                        )
                    })?);
                }
            }
            Some(flag) if super::run::value_count(flag).is_some() => {
                if NOT_A_DEFAULT.contains(&flag) {
                    bail!("create: {flag} is not a session default (give it to `session run`)");
                }
                run_options.push(arg.clone());
                for _ in 0..super::run::value_count(flag).unwrap_or(0) {
                    run_options.push(a.value(flag)?);
                }
            }
            _ => bail!("create: unexpected argument {arg:?}"),
        }
    }
    let source = match (from, git, rev) {
        (Some(dir), None, None) => Source::Dir {
            path: std::path::absolute(&dir).context("--from")?,
        },
        // A bad argument, refused before anything is made.
        (None, Some(_), Some(rev)) if !crate::workspace::is_full_rev(&rev) => bail!(
            "--rev must be a full commit id (40 or 64 hex digits), not {rev:?}: resolve it on the host first (`git rev-parse REV`)"
        ),
        (None, Some(repo), Some(rev)) => Source::Git {
            repo: std::path::absolute(&repo).context("--from-git")?,
            rev,
        },
        (None, Some(_), None) => bail!("--from-git needs --rev COMMIT (a full commit id)"),
        _ => bail!("create needs exactly one of --from DIR or --from-git REPO --rev COMMIT"),
    };
    let defaults = if run_options.is_empty() {
        None
    } else {
        Some(session_defaults(run_options)?)
    };
    locks.sort_by_key(|l| l.name());
    locks.dedup();
    let opts = CreateOptions {
        source,
        git_policy: policy,
        expect_fingerprint: expect,
        deadline,
        max_commands,
        limits,
        workspace_path,
        disk,
        defaults,
        locks,
        audit_dir,
        image: image.finish()?,
        compact_depth,
    };
    let session = state.create(&opts)?;
    if let Some(n) = warm_size.filter(|n| *n > 0)
        && let Err(e) = start_warm_server(state, session.id(), n, idle)
    {
        // No half-made session: the caller gets an error and no id.
        let _ = state.close(session.id(), true);
        return Err(e);
    }
    if json_mode() {
        emit("create", &session.info)?;
    } else {
        out_line(session.id())?;
    }
    Ok(0)
}

/// `hutch session warm ID N [--warm-idle DUR]` or `... ID --ready`.
fn warm(state: &StateDir, a: &mut Args) -> Result<i32> {
    let id = id_arg(a)?;
    if a.items.get(a.pos).is_some_and(|x| x == "--ready") {
        a.next();
        let mut timeout = std::time::Duration::from_secs(30);
        while let Some(arg) = a.next() {
            match arg.to_str() {
                Some("--timeout") => timeout = a.duration("--timeout")?,
                _ => bail!("warm --ready: unexpected argument {arg:?}"),
            }
        }
        return warm_ready(state, &id, timeout);
    }
    let n = a
        .next()
        .and_then(|n| n.to_str()?.parse::<usize>().ok())
        .context("warm: N (the number of ready sandboxes) is missing or not a number")?;
    let mut idle = crate::workspace::warm::DEFAULT_IDLE;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--warm-idle") => idle = a.duration("--warm-idle")?,
            _ => bail!("warm: unexpected argument {arg:?}"),
        }
    }
    // The session must exist and its plain command be warmable.
    state.open_session(&id)?;
    start_warm_server(state, &id, n, idle)?;
    if json_mode() {
        // Started, not yet ready (`warm ID --ready` waits for that).
        emit(
            "warm",
            &json!({"id": id, "size": n, "idle_ms": idle.as_millis() as u64}),
        )?;
    }
    Ok(0)
}

/// `session warm ID --ready [--timeout D]`: wait until the session's
/// warm server has every sandbox ready and none handed out; print its
/// status (JSON). Fails without a server or when the timeout passes.
fn warm_ready(state: &StateDir, id: &str, timeout: std::time::Duration) -> Result<i32> {
    let session = state.open_session(id)?;
    let Some(s) = crate::workspace::warm::wait_settled(&session, timeout) else {
        bail!(
            "warm --ready: session {id} has no warm server (start one with `hutch session warm {id} N`)"
        );
    };
    if !s.settled() {
        bail!(
            "warm --ready: the warm server of session {id} was not settled within {timeout:?} ({} of {} ready, {} handed out)",
            s.ready,
            s.size,
            s.claimed
        );
    }
    if json_mode() {
        emit("warm", &s)?;
    } else {
        out_line(&serde_json::to_string(&s)?)?;
    }
    Ok(0)
}

/// The Spec a plain `session run ID -- CMD` starts from (the session's
/// defaults, before the session adds its workspace): the shape of its warm
/// sandboxes.
fn plain_run_spec(session: &crate::workspace::Session) -> Result<crate::spec::Spec> {
    let args: Vec<OsString> = vec!["--".into(), "true".into()];
    let mut rep = super::run::Reporting::default();
    let (mut spec, _) = super::run::parse_reporting_onto(
        &args,
        Some(session.base_spec()),
        WorkspaceFrom::Caller,
        &mut rep,
    )?;
    spec.cwd = None;
    Ok(spec)
}

/// How long `create --warm` and `warm` wait for the server to listen.
const WARM_START: std::time::Duration = std::time::Duration::from_secs(30);

/// Start the session's warm server (`hutch __session-warm`, a process
/// group of its own, detached from this one) and wait until it listens.
fn start_warm_server(
    state: &StateDir,
    id: &str,
    n: usize,
    idle: std::time::Duration,
) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding the hutch binary")?;
    let mut child = std::process::Command::new(exe)
        .arg(WARM_SERVER)
        .arg(&state.path)
        .args([id.to_string(), n.to_string(), idle.as_millis().to_string()])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the warm server")?;
    let mut pipe = child.stdout.take().context("the warm server's stdout")?;
    let deadline = std::time::Instant::now() + WARM_START;
    let mut said = Vec::new();
    while !said.contains(&b'\n') && said.len() < 4096 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        if ms == 0
            || !matches!(crate::sys::raw::poll_one(pipe.as_fd(), libc::POLLIN, ms), Ok(n) if n > 0)
        {
            break;
        }
        let mut buf = [0u8; 512];
        match std::io::Read::read(&mut pipe, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => said.extend_from_slice(&buf[..k]),
        }
    }
    let said = String::from_utf8_lossy(&said).trim().to_string();
    if said == "ready" {
        return Ok(());
    }
    let _ = child.kill();
    let _ = child.wait();
    if said.is_empty() {
        bail!("the warm server of session {id} did not start within {WARM_START:?}");
    }
    bail!(
        "the warm server of session {id} failed: {}",
        said.trim_start_matches("error: ")
    );
}

/// The hidden subcommand running a session's warm server.
pub const WARM_SERVER: &str = "__session-warm";

/// `hutch __session-warm STATE_DIR ID N IDLE_MS`: the server itself. Says
/// `ready` (or `error: ...`) on stdout, then serves until it stops.
pub fn warm_server_main(args: Vec<OsString>) -> i32 {
    let fail = |e: anyhow::Error| {
        println!("error: {e:#}");
        EXIT_FAILURE
    };
    let [state, id, n, idle] = args.as_slice() else {
        return fail(anyhow::anyhow!(
            "usage: hutch {WARM_SERVER} STATE_DIR ID N IDLE_MS"
        ));
    };
    let parse = |s: &OsString| s.to_str().and_then(|s| s.parse::<u64>().ok());
    let (Some(n), Some(idle)) = (parse(n), parse(idle)) else {
        return fail(anyhow::anyhow!("N and IDLE_MS must be numbers"));
    };
    let run = || -> Result<()> {
        let state = StateDir::open(std::path::Path::new(state))?;
        let id = id.to_str().context("the session id is not UTF-8")?;
        let session = state.open_session(id)?;
        let (spec, _) = session.command_spec(plain_run_spec(&session)?)?;
        let opts = crate::workspace::warm::ServeOptions {
            size: n as usize,
            idle: std::time::Duration::from_millis(idle),
            binary: std::env::current_exe().context("finding the hutch binary")?,
        };
        crate::workspace::warm::serve(&session, &spec, &opts, || {
            println!("ready");
            // Nobody reads on: stdout becomes /dev/null.
            if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
                let _ = crate::sys::dup2(null.as_fd(), 1);
            }
        })?;
        Ok(())
    };
    match run() {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// The Spec of `hutch run` options given at create: every command's
/// defaults (no workspace, no command).
fn session_defaults(options: Vec<OsString>) -> Result<crate::spec::Spec> {
    let mut full = options;
    full.extend(["--".into(), "true".into()]);
    // A relative --chdir stays relative: inside the workspace, wherever
    // the session mounts it.
    let (mut spec, _) = super::run::parse_reporting_onto(
        &full,
        None,
        WorkspaceFrom::Caller,
        &mut super::run::Reporting::default(),
    )?;
    // Checked now, against a stand-in command, so a mistake fails create.
    crate::launch::validate(&spec)
        .map_err(|e| anyhow::anyhow!(super::flags::with_flags(&e.to_string())))?;
    // And the required limits against this host (a leaf made the way a
    // command's is, then removed), so that a cap the host cannot enforce
    // fails create, not the first command.
    let probe = format!(
        "create-{}-{}",
        std::process::id(),
        crate::util::clock::now_ms()
    );
    drop(crate::cgroup::prepare(&spec.limits, &probe)?);
    spec.command.clear();
    Ok(spec)
}

/// `session create`'s image flags: the same as `hutch run`'s.
#[derive(Default)]
struct SessionImage {
    reference: Option<String>,
    store: Option<PathBuf>,
    platform: Option<String>,
    allow_unpinned: bool,
    overrides: crate::spec::ImageOverrides,
    /// `--approved FILE`'s entries.
    approved: Option<Vec<String>>,
    /// `--pull missing`, `--insecure-registry`, `--registry-auth`, `--registry-credential`.
    pull: super::image_pull::PullFlags,
}

impl SessionImage {
    /// Take `arg` (and its value) if it is an image flag.
    fn flag(&mut self, arg: &OsString, a: &mut Args) -> Result<bool> {
        match arg.to_str() {
            Some("--image") => self.reference = Some(a.string("--image")?),
            Some("--image-store") => {
                self.store = Some(std::path::absolute(a.value("--image-store")?)?)
            }
            Some("--platform") => self.platform = Some(a.string("--platform")?),
            Some("--allow-unpinned") => self.allow_unpinned = true,
            Some("--approved") => {
                let file = std::path::absolute(a.value("--approved")?)?;
                self.approved = Some(
                    crate::image::approved::read_file(&file)
                        .with_context(|| "--approved".to_string())?,
                )
            }
            Some("--allow-platform-mismatch") => self.overrides.allow_platform_mismatch = true,
            Some("--allow-volumes") => self.overrides.allow_volumes = true,
            Some("--allow-secret-env") => self.overrides.allow_secret_env = true,
            Some("--allow-devices") => self.overrides.allow_devices = true,
            Some("--pull") => self.pull.set_policy(&a.string("--pull")?)?,
            Some("--insecure-registry") => {
                self.pull.insecure.push(a.string("--insecure-registry")?)
            }
            Some("--registry-auth") => {
                self.pull.auth_file = Some(std::path::absolute(a.value("--registry-auth")?)?)
            }
            Some("--registry-credential") => {
                let cwd = std::env::current_dir().context("the working directory")?;
                self.pull.credential = Some(super::registry_credential::RegistryCredential::parse(
                    &a.string("--registry-credential")?,
                    &cwd,
                )?)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn finish(self) -> Result<Option<crate::spec::ImageRef>> {
        let Some(reference) = self.reference else {
            if self.store.is_some()
                || self.platform.is_some()
                || self.allow_unpinned
                || self.approved.is_some()
                || self.pull.is_set()
                || self.overrides != crate::spec::ImageOverrides::default()
            {
                bail!("create: the image options need --image REF");
            }
            return Ok(None);
        };
        let mut r = crate::spec::ImageRef::new(&reference);
        r.store = self.store;
        r.platform = self.platform;
        r.allow_unpinned = self.allow_unpinned;
        r.approved = self.approved;
        r.overrides = self.overrides;
        self.pull.pull_missing(&r)?;
        Ok(Some(r))
    }
}

fn read(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let mut path: Option<PathBuf> = None;
    let mut max = 1 << 20;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--max-bytes") => max = a.size("--max-bytes")?,
            _ if path.is_none() => path = Some(arg.into()),
            _ => bail!("read: unexpected argument {arg:?}"),
        }
    }
    let path = path.context("read: missing PATH")?;
    let data = state.open_session(&id)?.with_wait(wait).read(&path, max)?;
    if json_mode() {
        let bytes = data.len();
        let c = machine::Content::new(data);
        emit(
            "read",
            &json!({
                "path": path.to_string_lossy(), "bytes": bytes,
                "encoding": c.encoding, "content": c.content,
            }),
        )?;
    } else {
        out(&data)?;
    }
    Ok(0)
}

fn write(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let mut path: Option<PathBuf> = None;
    let mut max = 16 << 20;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--max-bytes") => max = a.size("--max-bytes")?,
            _ if path.is_none() => path = Some(arg.into()),
            _ => bail!("write: unexpected argument {arg:?}"),
        }
    }
    let path = path.context("write: missing PATH")?;
    let mut s = state.open_session(&id)?.with_wait(wait);
    let bytes = s.write(&path, &mut std::io::stdin().lock(), max)?;
    if json_mode() {
        emit(
            "write",
            &json!({"path": path.to_string_lossy(), "bytes": bytes}),
        )?;
    }
    Ok(0)
}

fn diff(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let mut opts = DiffOptions::default();
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--format") => {
                opts.format = a
                    .string("--format")?
                    .parse()
                    .map_err(|e: String| anyhow::anyhow!(e))?
            }
            Some("--max-bytes") => opts.max_bytes = Some(a.size("--max-bytes")?),
            Some(o) if diff_option(o, a, &mut opts, (state, &id))? => {}
            _ => bail!("diff: unexpected argument {arg:?}"),
        }
    }
    if json_mode() {
        // The document holds the output: it is built in memory, so it is
        // bounded even when the caller names no bound.
        opts.max_bytes = Some(opts.max_bytes.unwrap_or(JSON_DIFF_MAX_BYTES));
        let mut data = Vec::new();
        let summary = state
            .open_session(&id)?
            .with_wait(wait)
            .diff_with(&opts, &mut data)?;
        let skipped: Vec<_> = summary
            .skipped
            .iter()
            .map(|s| {
                json!({
                    "path": String::from_utf8_lossy(&s.path),
                    "path_quoted": crate::util::quote::git_quote(&s.path),
                    "kind": s.kind,
                })
            })
            .collect();
        let ignored = json!({
            "count": summary.ignored.count,
            "paths": summary.ignored.paths.iter().map(|(p, dir)| json!({
                "path": String::from_utf8_lossy(p), "dir": dir,
            })).collect::<Vec<_>>(),
        });
        let bytes = data.len();
        let result = match opts.format {
            DiffFormat::Json => {
                let doc: serde_json::Value =
                    serde_json::from_slice(&data).context("session diff: the JSON diff")?;
                json!({
                    "format": "json", "bytes": bytes, "diff": doc, "skipped": skipped,
                    "ignored": ignored,
                })
            }
            DiffFormat::Unified | DiffFormat::Stat => {
                let c = machine::Content::new(data);
                let name = if opts.format == DiffFormat::Stat {
                    "stat"
                } else {
                    "unified"
                };
                json!({
                    "format": name, "bytes": bytes, "encoding": c.encoding,
                    "content": c.content, "skipped": skipped, "ignored": ignored,
                })
            }
        };
        emit("diff", &result)?;
        return Ok(0);
    }
    let summary = state
        .open_session(&id)?
        .with_wait(wait)
        .diff_with(&opts, &mut Stdout)?;
    for s in summary.skipped {
        eprintln!(
            "hutch session: {} is a {} and is not part of the diff",
            crate::util::quote::display_name(&s.path),
            s.kind
        );
    }
    if summary.ignored.count > 0 && opts.format != DiffFormat::Json {
        eprintln!(
            "hutch session: {} untracked path{} the baseline's ignore rules name left out (--format json lists them; --include-ignored keeps them)",
            summary.ignored.count,
            if summary.ignored.count == 1 { "" } else { "s" }
        );
    }
    Ok(0)
}

/// The diff options `session diff` and `export --patch` share
/// (`--since`, `--exclude`, `--include-ignored`); whether `flag` was one.
/// `session` names the session, for `--since SNAPSHOT-NAME`.
fn diff_option(
    flag: &str,
    a: &mut Args,
    opts: &mut DiffOptions,
    session: (&StateDir, &str),
) -> Result<bool> {
    match flag {
        "--since" => {
            let v = a.string("--since")?;
            opts.since = match v.parse::<Since>() {
                Ok(s) => s,
                // A snapshot's name (`session snapshot --name`).
                Err(e) => match session.0.open_session(session.1) {
                    Ok(s) if s.info.seals.iter().any(|l| l.name.as_deref() == Some(&v)) => {
                        Since::Seal(s.resolve_snapshot(&v)?)
                    }
                    _ => bail!("{e}"),
                },
            }
        }
        "--exclude" => opts.exclude.push(a.string("--exclude")?),
        "--include-ignored" => opts.include_ignored = true,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The bound of `diff --json` when `--max-bytes` names none.
const JSON_DIFF_MAX_BYTES: u64 = 256 << 20;

fn export(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let mut out: Option<PathBuf> = None;
    let mut patch = false;
    let mut diff_opts = DiffOptions::default();
    let mut opts = ExportOptions::default();
    let mut paths = Vec::new();
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--out") => out = Some(a.value("--out")?.into()),
            Some("--patch") => patch = true,
            Some(o) if diff_option(o, a, &mut diff_opts, (state, &id))? => {}
            Some("--max-bytes") => opts.max_total_bytes = a.size("--max-bytes")?,
            Some("--max-file-bytes") => opts.max_file_bytes = a.size("--max-file-bytes")?,
            Some("--max-entries") => opts.max_entries = a.count("--max-entries")? as usize,
            Some("--") => paths.extend(a.rest().into_iter().map(PathBuf::from)),
            _ => paths.push(PathBuf::from(arg)),
        }
    }
    let out = out.context("export needs --out FILE.zip|FILE.tar")?;
    if paths.is_empty() && !patch {
        bail!("export: name at least one PATH (or --patch)");
    }
    let patch_opts = patch.then_some(diff_opts);
    if json_mode() {
        let mut manifest = Vec::new();
        let summary = state.open_session(&id)?.with_wait(wait).export_with(
            &out,
            &paths,
            patch_opts,
            &opts,
            Some(&mut manifest),
        )?;
        let manifest: serde_json::Value =
            serde_json::from_slice(&manifest).context("session export: the manifest")?;
        emit(
            "export",
            &json!({
                "archive": summary.archive.to_string_lossy(), "entries": summary.entries,
                "skipped": summary.skipped, "total_bytes": summary.total_bytes,
                "patch_sha256": summary.patch_sha256, "manifest": manifest,
            }),
        )?;
        return Ok(0);
    }
    state.open_session(&id)?.with_wait(wait).export_with(
        &out,
        &paths,
        patch_opts,
        &opts,
        Some(&mut Stdout),
    )?;
    Ok(0)
}

fn close(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let mut opts = CloseOptions {
        wait,
        keep_audit: None,
        kill_live: true,
    };
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--keep-audit") => {
                let d: PathBuf = a.value("--keep-audit")?.into();
                opts.keep_audit = Some(std::path::absolute(&d).context("--keep-audit")?);
            }
            _ => bail!("close: unexpected argument {arg:?}"),
        }
    }
    let report = state.close_with(&id, &opts)?;
    if !report.existed {
        eprintln!("hutch session: {id} was already closed");
    }
    for k in &report.killed {
        eprintln!("hutch session: killed the live command in sandbox {k}");
    }
    if json_mode() {
        emit(
            "close",
            &json!({
                "id": id, "closed": report.existed, "killed": report.killed,
                "audit_kept": report.audit_kept, "remaining": report.remaining,
                "verified": report.remaining.is_empty(),
            }),
        )?;
    }
    if !report.remaining.is_empty() {
        eprintln!(
            "hutch session: close of {id}: still there after it: {} (quarantine this host until it is cleaned)",
            report.remaining.join("; ")
        );
        return Ok(EXIT_FAILURE);
    }
    Ok(0)
}

/// `session rm ID PATH...`.
fn rm(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let paths: Vec<PathBuf> = a.rest().into_iter().map(PathBuf::from).collect();
    if paths.is_empty() {
        bail!("rm: name at least one PATH");
    }
    state.open_session(&id)?.with_wait(wait).rm(&paths)?;
    if json_mode() {
        let removed: Vec<_> = paths.iter().map(|p| p.to_string_lossy()).collect();
        emit("rm", &json!({"removed": removed}))?;
    }
    Ok(0)
}

/// Print `result` as the `--json` envelope of `session.VERB`, or `human`.
fn print_result(verb: &str, result: &serde_json::Value, human: &str) -> Result<()> {
    if json_mode() {
        emit(verb, result)
    } else {
        out(human.as_bytes())
    }
}

/// `session seal ID [--network none] [--json]`.
fn seal(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let mut network_none = false;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--network") => match a.string("--network")?.as_str() {
                "none" => network_none = true,
                other => bail!("seal: --network takes `none`, not {other:?}"),
            },
            _ => bail!("seal: unexpected argument {arg:?}"),
        }
    }
    let seal = state
        .open_session(&id)?
        .with_wait(wait)
        .seal(network_none)?;
    let human = format!(
        "sealed layer {} ({} changes, fingerprint {}){}\n",
        seal.index,
        seal.changes,
        seal.fingerprint,
        if network_none {
            "; no command may have network from now on"
        } else {
            ""
        }
    );
    print_result("seal", &serde_json::to_value(&seal)?, &human)?;
    Ok(0)
}

/// `session show ID [--json]`.
fn show(state: &StateDir, a: &mut Args) -> Result<i32> {
    let id = id_arg(a)?;
    if let Some(arg) = a.next() {
        bail!("show: unexpected argument {arg:?}");
    }
    let session = state.open_session(&id)?;
    let doc = session.describe()?;
    let human = describe_human(&doc);
    print_result("show", &doc, &human)?;
    Ok(0)
}

fn describe_human(d: &serde_json::Value) -> String {
    let mut out = String::new();
    let field = |k: &str| d.get(k).cloned().unwrap_or(serde_json::Value::Null);
    out += &format!("session      {}\n", field("id").as_str().unwrap_or(""));
    out += &format!("source       {}\n", field("source"));
    out += &format!(
        "fingerprint  {}\n",
        field("fingerprint").as_str().unwrap_or("")
    );
    out += &format!(
        "workspace    {}\n",
        field("workspace_path").as_str().unwrap_or("")
    );
    if let Some(digest) = field("image")["digest"].as_str() {
        out += &format!("image        {digest}\n");
    }
    if let Some(seals) = field("seals").as_array() {
        for s in seals {
            out += &format!(
                "seal {}       {} changes, fingerprint {}{}\n",
                s["index"],
                s["changes"],
                s["fingerprint"].as_str().unwrap_or(""),
                if s["network_none"] == true {
                    ", --network none"
                } else {
                    ""
                }
            );
        }
    }
    out += &format!(
        "network      {}\n",
        if field("network_sealed") == true {
            "sealed (none)"
        } else {
            "as each command asks"
        }
    );
    let budget = match field("max_commands").as_u64() {
        Some(n) => format!("of {n}"),
        None => "(no budget)".into(),
    };
    out += &format!("commands     {} {budget}\n", field("commands_run"));
    let deadline = match field("deadline_unix_ms").as_u64() {
        Some(ms) => {
            let left = ms.saturating_sub(crate::util::clock::now_ms()) / 1000;
            format!("in {left} s (unix ms {ms})")
        }
        None => "none".into(),
    };
    out += &format!("deadline     {deadline}\n");
    let used = field("disk_usage")["used_bytes"].as_u64();
    let disk = field("disk");
    let limit = match disk["max_bytes"].as_u64() {
        Some(max) => format!(
            "limit {} ({}, {})",
            crate::workspace::human_bytes(max),
            disk["mechanism"].as_str().unwrap_or("?"),
            if disk["required"] == true {
                "required"
            } else {
                "preferred"
            }
        ),
        None => "no limit".into(),
    };
    let used = used.map_or("usage not measured".into(), |u| {
        format!("{} used", crate::workspace::human_bytes(u))
    });
    let hit = if field("disk_usage")["limit_hit"] == true {
        ", limit reached"
    } else {
        ""
    };
    out += &format!("disk         {used}, {limit}{hit}\n");
    if let Some(live) = field("live_commands").as_array() {
        for l in live {
            out += &format!(
                "live         sandbox {} pid {}\n",
                l["sandbox_id"].as_str().unwrap_or(""),
                l["pid"]
            );
        }
    }
    out
}

/// `session audit ID [--audit-dir DIR]`.
fn audit(state: &StateDir, a: &mut Args) -> Result<i32> {
    let id = id_arg(a)?;
    let mut dir: Option<PathBuf> = None;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--audit-dir") => dir = Some(a.value("--audit-dir")?.into()),
            _ => bail!("audit: unexpected argument {arg:?}"),
        }
    }
    let data = crate::workspace::read_audit(state, &id, dir.as_deref())?;
    if json_mode() {
        // One JSON object per line; a line that is not one (a torn last
        // line) is counted, not echoed.
        let mut events = Vec::new();
        let mut unreadable = 0u64;
        for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<serde_json::Value>(line) {
                Ok(v) => events.push(v),
                Err(_) => unreadable += 1,
            }
        }
        emit(
            "audit",
            &json!({"id": id, "events": events, "unreadable_lines": unreadable}),
        )?;
    } else {
        out(&data)?;
    }
    Ok(0)
}

fn list(state: &StateDir) -> Result<i32> {
    if json_mode() {
        emit("list", &json!({"sessions": state.list()?}))?;
        return Ok(0);
    }
    for info in state.list()? {
        out(&crate::workspace::json_line(&info)?)?;
    }
    Ok(0)
}

fn gc(state: &StateDir, a: &mut Args) -> Result<i32> {
    let mut older = None;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--older-than") => older = Some(a.duration("--older-than")?),
            _ => bail!("gc: unexpected argument {arg:?}"),
        }
    }
    let older = older.context("gc needs --older-than DUR (e.g. 1d)")?;
    let report = state.gc(older)?;
    if json_mode() {
        let failed: Vec<_> = report
            .failed
            .iter()
            .map(|(name, e)| json!({"name": name, "error": e.to_string()}))
            .collect();
        let result = json!({"removed": report.removed, "failed": failed});
        for (name, e) in &report.failed {
            eprintln!("hutch session: gc: could not remove {name}: {e}");
        }
        if let Some((name, e)) = report.failed.first() {
            let mut m = MachineError::new(
                ErrorKind::Io,
                format!(
                    "gc: could not remove {} entries (the first, {name}: {e})",
                    report.failed.len()
                ),
            );
            m.location = Some(name.clone());
            out_line(&machine::partial_line("session.gc", &result, &m))?;
            return Ok(EXIT_FAILURE);
        }
        emit("gc", &result)?;
        return Ok(0);
    }
    for id in &report.removed {
        out_line(id)?;
    }
    for (name, e) in &report.failed {
        eprintln!("hutch session: gc: could not remove {name}: {e}");
    }
    Ok(if report.failed.is_empty() {
        0
    } else {
        EXIT_FAILURE
    })
}

/// `glob` and `grep`: found inside the sandbox (src/cli/search/).
fn search(state: &StateDir, tool: &'static str, a: &mut Args, wait: bool) -> Result<i32> {
    let result = super::search::search(state, tool, a.rest(), wait)?;
    if json_mode() {
        emit(tool, &result)?;
        return Ok(0);
    }
    let mut text = String::new();
    for m in &result.matches {
        text.push_str(&super::search::human_line(m));
        text.push('\n');
    }
    out(text.as_bytes())?;
    if let Some(by) = &result.truncated_by {
        eprintln!(
            "hutch session: {tool}: stopped early ({by}) after {} matches",
            result.matches.len()
        );
    }
    Ok(0)
}

/// Options of `hutch run` that make no sense in a session (the session
/// provides the workspace).
const NOT_IN_SESSION: &[&str] = &["--workspace", "--changes", "--changes-size", "--bare"];

/// `--use-secret NAME` (before `--`): taken out of a `session run`'s
/// options, in order.
fn take_used_secrets(args: Vec<OsString>) -> Result<(Vec<OsString>, Vec<String>)> {
    let mut rest = Vec::with_capacity(args.len());
    let mut used = Vec::new();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        if arg == "--" {
            rest.push(arg);
            rest.extend(it);
            break;
        }
        if arg == "--use-secret" {
            let name = it
                .next()
                .ok_or_else(|| anyhow::anyhow!("--use-secret needs a secret's name"))?;
            used.push(
                name.into_string()
                    .map_err(|_| anyhow::anyhow!("--use-secret: the name is not UTF-8"))?,
            );
            continue;
        }
        rest.push(arg);
    }
    Ok((rest, used))
}

fn run_command(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let (args, used_secrets) = take_used_secrets(a.rest())?;
    for arg in args.iter().take_while(|x| *x != "--") {
        if let Some(bad) = NOT_IN_SESSION.iter().find(|b| arg == **b) {
            bail!("session run: {bad} does not apply (the session provides the workspace)");
        }
    }
    // With --json the status lines end with the `session.run` document.
    let mut rep = super::run::Reporting {
        json: json_mode(),
        ..Default::default()
    };
    // A command that never starts still ends the status lines with an
    // exit event (and with --json the error document), like `hutch run`.
    let fail = |rep: &super::run::Reporting, e: anyhow::Error| -> anyhow::Error {
        if rep.has_stream() {
            super::run::report_failure(
                rep,
                "session.run",
                &MachineError::classify_or(&e, ErrorKind::Usage),
            );
            REPORTED.store(rep.json || rep.result.is_some(), Ordering::Relaxed);
        }
        e
    };
    // The session's defaults are the base the run's options narrow.
    let mut session = match state.open_session(&id) {
        Ok(s) => s.with_wait(wait),
        Err(e) => {
            // Parsed only to learn where the status lines go.
            let _ = super::run::parse_reporting_onto(&args, None, WorkspaceFrom::Caller, &mut rep);
            return Err(fail(&rep, e.into()));
        }
    };
    let base = session.base_spec();
    let parsed =
        super::run::parse_reporting_onto(&args, Some(base), WorkspaceFrom::Caller, &mut rep);
    let (mut spec, opts) = match parsed {
        Ok(v) => v,
        Err(e) => return Err(fail(&rep, e)),
    };
    // A relative --chdir is inside the session's workspace.
    if let Some(c) = spec.cwd.take() {
        spec.cwd = Some(session.info.workspace_path.join(c));
    }
    // The secrets declared at create that this command uses, by name.
    for name in &used_secrets {
        match session.declared_secret(name) {
            Some(secret) => spec.secrets.push(secret.clone()),
            None => {
                let e = anyhow::anyhow!(
                    "session run: --use-secret {name}: the session declares no secret {name:?} (declared: {})",
                    session.declared_secret_names().join(", ")
                );
                return Err(fail(&rep, e));
            }
        }
    }
    // Checked here, so that a Spec error reaches the caller typed (the
    // session's launch reports launch errors as text). Secrets in a
    // session sealed with `--network none` are the session's refusal
    // (audited, and clearer than "secrets need a network"): left to it.
    let sealed_with_secrets = session.info.network_sealed && !spec.secrets.is_empty();
    if !sealed_with_secrets && let Err(e) = crate::launch::validate(&spec) {
        return Err(fail(&rep, anyhow::Error::new(e)));
    }
    let record = match session.run_on_terminal(spec, opts.status_file, opts.terminal) {
        Ok(r) => r,
        Err(e) => return Err(fail(&rep, e.into())),
    };
    let result = json!({
        "command_seq": session.info.commands_run,
        "deadline_hit": record.deadline_hit,
        "egress": record.egress,
        "report": record.report,
    });
    super::run::report_envelope(&rep, "session.run", &result, &record.report);
    let r = &record.report;
    if rep.ending_lines_off(opts.quiet) {
        return Ok(r.status);
    }
    if let Some(e) = &r.error {
        eprintln!("hutch: {e}");
    }
    if record.deadline_hit {
        eprintln!(
            "hutch session: the session deadline was reached; every process of the command was killed"
        );
    } else if r.reason == crate::launch::Outcome::TimedOut {
        eprintln!("hutch session: the command timed out; every process of it was killed");
    }
    Ok(r.status)
}
