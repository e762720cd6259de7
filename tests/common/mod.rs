//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Skip a test (with the reason printed) when a kernel feature or
/// privilege is missing; with `HUTCH_REQUIRE=all` (CI) a skip is a failure.
/// Works in tests returning `()` and `Result<(), E>`; the reason is only
/// evaluated when the test skips.
///
/// The one skip of the integration tests: every test binary declares
/// `mod common;`, and helper modules (`tests/session_support`,
/// `tests/proxy_support`) use `crate::require!`.
#[macro_export]
macro_rules! require {
    ($cond:expr, $why:expr) => {
        if !$cond {
            $crate::common::skip(module_path!(), &$why);
            return $crate::common::Skipped::skipped();
        }
    };
}

/// Report a skip, or fail under `HUTCH_REQUIRE=all`. Use [`require!`].
pub fn skip(module: &str, why: &dyn std::fmt::Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or(module);
    if std::env::var("HUTCH_REQUIRE").as_deref() == Ok("all") {
        panic!("{test}: required for this test but missing (HUTCH_REQUIRE=all): {why}");
    }
    eprintln!("SKIP {test}: {why}");
}

/// What a skipped test returns.
pub trait Skipped {
    fn skipped() -> Self;
}

impl Skipped for () {
    fn skipped() {}
}

impl<E> Skipped for Result<(), E> {
    fn skipped() -> Self {
        Ok(())
    }
}

/// Who launches hutch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum As {
    /// Root: the root launch. Skipped when the tests do not run as root.
    Root,
    /// The unprivileged path: uid/gid 65534 through `setpriv` when the
    /// tests run as root, else the (non-root) user running the tests.
    Nobody,
}

/// The identity running the tests, for tests that need no particular one:
/// a root launch when the tests run as root (CI), else the unprivileged path.
pub fn caller() -> As {
    if is_root() { As::Root } else { As::Nobody }
}

impl As {
    /// Whether launching as `self` means dropping from root to uid 65534.
    pub fn drops_to_nobody(self) -> bool {
        self == As::Nobody && is_root()
    }

    /// The host uid hutch runs as when launched as `self`: 0, 65534 when
    /// root drops to it, else the (non-root) caller's.
    pub fn uid(self) -> u32 {
        match self {
            As::Root => 0,
            As::Nobody if is_root() => NOBODY,
            As::Nobody => nix::unistd::geteuid().as_raw(),
        }
    }
}

/// The identities a test that covers both launches runs as: the
/// unprivileged path first, then the root launch, each one that cannot
/// launch here ([`can_launch_as`]) reported through [`skip`] on its own.
/// A per-identity `require!` inside the loop would return from the whole
/// test, so a non-root run would lose the unprivileged half too.
///
/// ```ignore
/// for who in identities() { ... }
/// ```
pub fn identities() -> impl Iterator<Item = As> {
    identities_ready(can_launch_as)
}

/// [`identities`] with the test's own per-identity readiness check (which
/// should include [`can_launch_as`]).
pub fn identities_ready<E: std::fmt::Display>(
    ready: impl Fn(As) -> Result<(), E>,
) -> impl Iterator<Item = As> {
    [As::Nobody, As::Root]
        .into_iter()
        .filter(move |&who| match ready(who) {
            Ok(()) => true,
            Err(why) => {
                skip(module_path!(), &format_args!("the {who:?} half: {why}"));
                false
            }
        })
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

/// Whether `who` can launch hutch here: As::Root needs the tests to run as
/// root; As::Nobody needs setpriv when they do (to drop to uid 65534) and
/// nothing otherwise (the current user is the unprivileged path).
pub fn can_launch_as(who: As) -> Result<(), String> {
    match who {
        As::Root if !is_root() => Err(
            "a root launch needs the tests to run as root (a non-root run covers the unprivileged path)"
                .into(),
        ),
        As::Nobody if is_root() && !have("setpriv") => {
            Err("setpriv (util-linux) is needed to drop to uid 65534".into())
        }
        _ => Ok(()),
    }
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
        own_as(&dir, who);
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

/// Make `path` owned by `who` (chown to 65534 when root drops to it;
/// otherwise the creator already owns it).
pub fn own_as(path: &Path, who: As) {
    if who.drops_to_nobody() {
        std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
}

/// Write a file owned by `who`.
pub fn write_as(path: &Path, content: &str, who: As) {
    std::fs::write(path, content).unwrap();
    own_as(path, who);
}

/// The `hutch` binary as `who` (through setpriv when root drops to 65534).
pub fn hutch_command(who: As) -> Command {
    if who.drops_to_nobody() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(hutch_bin());
        c
    } else {
        Command::new(hutch_bin())
    }
}

/// `hutch ARGS` as `who`, in `cwd`.
pub fn hutch_as(who: As, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = hutch_command(who);
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

/// A wrapper script that runs the hutch binary on the unprivileged path
/// (as uid 65534 when the tests run as root), for the library's
/// `hutch_binary` (fds 3 and 4 pass through exec).
pub fn nobody_wrapper(dir: &Path) -> PathBuf {
    let path = dir.join("hutch-as-nobody");
    let drop = if As::Nobody.drops_to_nobody() {
        "setpriv --reuid=65534 --regid=65534 --clear-groups "
    } else {
        ""
    };
    std::fs::write(
        &path,
        format!("#!/bin/sh\nexec {drop}{} \"$@\"\n", hutch_bin().display()),
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

/// Poll `ready` (every 20 ms) until it holds; fail naming `what` after
/// `timeout`. Waiting on readiness, never on a fixed sleep.
pub fn wait_until(timeout: std::time::Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The first `event` line of a `--status-file` (e.g. `start`, written once
/// the sandbox runs), waiting up to `timeout` for it to appear.
pub fn wait_for_event(
    status_file: &Path,
    event: &str,
    timeout: std::time::Duration,
) -> serde_json::Value {
    let mut found = None;
    wait_until(
        timeout,
        &format!("a {event:?} event in {}", status_file.display()),
        || {
            let text = std::fs::read_to_string(status_file).unwrap_or_default();
            // Only complete lines: the writer may be mid-line.
            found = text
                .split_inclusive('\n')
                .filter(|l| l.ends_with('\n'))
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|v| v["event"] == event);
            found.is_some()
        },
    );
    found.unwrap()
}

/// The flocks on `path` in `/proc/locks`: (held, waiting). The file is
/// named by its inode (and device) there.
pub fn flocks_on(path: &Path) -> (usize, usize) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return (0, 0);
    };
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut counts = (0, 0);
    for line in locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let waiting = fields.get(1) == Some(&"->");
        let rest = if waiting { &fields[2..] } else { &fields[1..] };
        // FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END
        if rest.first() == Some(&"FLOCK") && rest.get(4) == Some(&id.as_str()) {
            if waiting {
                counts.1 += 1;
            } else {
                counts.0 += 1;
            }
        }
    }
    counts
}

/// The live processes (zombies are not) whose argv is exactly `sleep N`,
/// anywhere on the host.
pub fn live_sleeps(n: &str) -> Vec<i32> {
    let want = format!("sleep\0{n}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok() == Some(want.clone().into()))
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next());
            !matches!(state, None | Some(Some('Z' | 'X')))
        })
        .collect()
}
