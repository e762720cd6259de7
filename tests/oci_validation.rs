//! The OCI runtime validation suite (opencontainers/runtime-tools'
//! `validation/`, built by `tests/oci_validation/build` from `tests/setup`)
//! against `hutch-oci` as root: every program once, its TAP output read
//! (a file passes when it exits 0, prints its plan and no `not ok`). The
//! files of `tests/oci_validation/expected.txt` must pass; a file that
//! passes and is not listed is printed, so the list can grow. Why each
//! other file fails is a row of docs/oci.md.
//!
//! The programs that make cgroups all use the same paths (`/cgrouptest`,
//! `testdir`): they run one after another, beside the others, which run
//! in parallel. A failing file is run once more alone before it counts
//! (`killsig` signals a shell that may not have set its trap yet on a
//! loaded machine; runc and crun meet the same race).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;

/// Where `tests/oci_validation/build` puts the programs.
fn programs_dir() -> PathBuf {
    std::env::var_os("HUTCH_OCI_VALIDATION")
        .map_or_else(|| "/opt/hutch-test-oci-validation".into(), PathBuf::from)
        .join("bin")
}

/// Longest a program may take (the slowest, the hooks and cgroup ones,
/// take about 5 s on the 2-core CI machine).
const TIMEOUT: Duration = Duration::from_secs(120);

/// How a program ended.
#[derive(Debug, Clone)]
struct Outcome {
    passed: bool,
    /// Why not: its exit status, the first `not ok` lines, its stderr.
    detail: String,
}

/// Whether a program's TAP output and exit status are a pass.
fn passed(code: Option<i32>, tap: &str) -> bool {
    code == Some(0)
        && tap.lines().any(|l| l.starts_with("1.."))
        && !tap.lines().any(|l| l.starts_with("not ok"))
}

/// One program, in a working directory of its own holding what it reads
/// there (runtimetest and the rootfs tarball), with `RUNTIME` hutch-oci.
fn run_one(dir: &Path, name: &str, scratch: &Path, runtime: &Path) -> Outcome {
    let work = scratch.join(name);
    std::fs::create_dir_all(&work).unwrap();
    // A hard link (or a copy across filesystems): the programs copy
    // runtimetest into each bundle as a file, and a symbolic link would be
    // copied as one; the tarball is only read.
    let runtimetest = work.join("runtimetest");
    if std::fs::hard_link(dir.join("runtimetest"), &runtimetest).is_err() {
        std::fs::copy(dir.join("runtimetest"), &runtimetest).unwrap();
    }
    let tarball = work.join("rootfs-amd64.tar.gz");
    let _ = std::fs::remove_file(&tarball);
    std::os::unix::fs::symlink(dir.join("rootfs-amd64.tar.gz"), tarball).unwrap();
    let out = work.join("out");
    let err = work.join("err");
    let mut child = Command::new(dir.join(format!("{name}.t")))
        .current_dir(&work)
        .env("RUNTIME", runtime)
        .env("TMPDIR", &work)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let tap = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let code = status.and_then(|s| s.code());
    let not_ok: Vec<&str> = tap
        .lines()
        .filter(|l| l.starts_with("not ok"))
        .take(3)
        .collect();
    Outcome {
        passed: passed(code, &tap),
        detail: format!(
            "{} {not_ok:?} {}",
            match status {
                None => format!("timed out after {TIMEOUT:?}"),
                Some(s) => s.to_string(),
            },
            stderr.lines().take(3).collect::<Vec<_>>().join(" | ")
        ),
    }
}

/// The programs that make cgroups at runtime-tools' fixed paths.
fn uses_shared_cgroups(name: &str) -> bool {
    name.starts_with("linux_cgroups_") || name.starts_with("delete_")
}

#[test]
fn hutch_oci_passes_the_expected_oci_validation_files() {
    let dir = programs_dir();
    require!(is_root(), "runtime-tools' programs run the runtime as root");
    require!(
        dir.join("runtimetest").exists(),
        format!(
            "{} (tests/setup builds runtime-tools' validation programs)",
            dir.display()
        )
    );
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".t").map(str::to_string)
        })
        .collect();
    names.sort();
    let expected_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oci_validation/expected.txt");
    let expected: BTreeSet<String> = std::fs::read_to_string(&expected_file)
        .unwrap()
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    for name in &expected {
        assert!(
            names.contains(name),
            "{name} is in expected.txt but not among the programs in {}",
            dir.display()
        );
    }
    let scratch = TempDir::new("oci-validation", As::Root);
    // hutch-oci with a state root of this run's own, so that nothing of
    // it is seen by, or left for, other tests (`hutch ps`'s look at
    // /run/hutch-oci).
    let runtime = scratch.path().join("hutch-oci");
    std::fs::write(
        &runtime,
        format!(
            "#!/bin/sh\nexec {} --root {} \"$@\"\n",
            env!("CARGO_BIN_EXE_hutch-oci"),
            scratch.path().join("state").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let started = Instant::now();
    let (shared, parallel): (Vec<String>, Vec<String>) =
        names.iter().cloned().partition(|n| uses_shared_cgroups(n));
    let queue = Mutex::new(parallel);
    let results: Mutex<BTreeMap<String, Outcome>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            for name in &shared {
                let o = run_one(&dir, name, scratch.path(), &runtime);
                results.lock().unwrap().insert(name.clone(), o);
            }
        });
        for _ in 0..3 {
            s.spawn(|| {
                loop {
                    let Some(name) = queue.lock().unwrap().pop() else {
                        break;
                    };
                    let o = run_one(&dir, &name, scratch.path(), &runtime);
                    results.lock().unwrap().insert(name, o);
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    // A failure counts once it fails again alone.
    let mut retried = Vec::new();
    for (name, outcome) in results.iter_mut() {
        if !outcome.passed && expected.contains(name) {
            let _ = std::fs::remove_dir_all(scratch.path().join(name));
            *outcome = run_one(&dir, name, scratch.path(), &runtime);
            retried.push(name.clone());
        }
    }
    let passing: BTreeSet<&String> = results
        .iter()
        .filter(|(_, o)| o.passed)
        .map(|(n, _)| n)
        .collect();
    eprintln!(
        "hutch-oci passes {} of {} validation files in {:.1?} (retried: {retried:?})",
        passing.len(),
        names.len(),
        started.elapsed()
    );
    for (name, o) in &results {
        eprintln!("{} {name}", if o.passed { "pass" } else { "FAIL" });
    }
    let newly: Vec<&&String> = passing.iter().filter(|n| !expected.contains(**n)).collect();
    if !newly.is_empty() {
        eprintln!("passing and not in tests/oci_validation/expected.txt (add them): {newly:?}");
    }
    let broken: Vec<String> = expected
        .iter()
        .filter(|n| !results[*n].passed)
        .map(|n| format!("{n}: {}", results[n].detail))
        .collect();
    assert!(
        broken.is_empty(),
        "validation files that must pass fail:\n{}",
        broken.join("\n")
    );
}
