//! The host-side reader of a repository's metadata (`session create
//! --from-git`): an input builds a repository directory whose `.git` is a
//! directory or a file, with a `commondir` and `gitdir:` of arbitrary
//! content, symlinks (to a canary outside, to `/dev/zero`, inside), FIFOs
//! and large sparse files. Finding the git directory must never panic,
//! never block, never read more than its cap, never leave the repository,
//! and never put the canary's content in an error.
#![no_main]

use std::path::PathBuf;

use hutch::workspace::RepoDir;
use libfuzzer_sys::fuzz_target;

const CANARY: &str = "HUTCH-FUZZ-CANARY-7f3a";

fn scratch() -> PathBuf {
    let p = std::env::temp_dir().join(format!("hutch-fuzz-git-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(p.join("repo")).unwrap();
    std::fs::write(p.join("canary"), CANARY).unwrap();
    p
}

/// Names the input may use for what it creates.
const NAMES: &[&str] = &[
    ".git",
    ".git/commondir",
    ".git/objects",
    ".git/HEAD",
    ".git/worktrees",
    ".git/worktrees/w",
    ".git/worktrees/w/commondir",
    "objects",
    "HEAD",
    "commondir",
    "sub",
    "sub/.git",
];

fuzz_target!(|data: &[u8]| {
    let root = scratch();
    let repo = root.join("repo");
    let mut rest = data;
    while rest.len() >= 2 {
        let (op, name) = (rest[0] % 7, NAMES[rest[1] as usize % NAMES.len()]);
        let len = rest.get(2).copied().unwrap_or(0) as usize;
        let body = rest.get(3..(3 + len).min(rest.len())).unwrap_or_default();
        rest = &rest[(3 + len).min(rest.len())..];
        let p = repo.join(name);
        if let Some(parent) = p.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        // Replace what is there (never write through a FIFO or a link).
        let _ = std::fs::remove_file(&p);
        let _ = match op {
            0 => std::fs::create_dir_all(&p),
            // gitdir:/commondir content, possibly pointing anywhere.
            1 => std::fs::write(&p, body),
            2 => {
                let mut text = b"gitdir: ".to_vec();
                text.extend_from_slice(body);
                std::fs::write(&p, text)
            }
            3 => std::os::unix::fs::symlink(root.join("canary"), &p),
            4 => std::os::unix::fs::symlink("/dev/zero", &p),
            5 => mkfifo(&p),
            _ => std::fs::File::create(&p).and_then(|f| f.set_len(1 << 30)),
        };
    }
    let Ok(r) = RepoDir::open(&repo) else {
        return;
    };
    match r.git_dir() {
        Ok(gd) => {
            // Always beneath the repository, a directory, opened as named.
            let canon = std::fs::canonicalize(&repo).unwrap();
            assert!(gd.path.starts_with(&canon), "{:?}", gd.path);
            assert!(gd.meta.is_dir());
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains(CANARY), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }
    let _ = std::fs::remove_dir_all(&root);
});

fn mkfifo(p: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;
    let err = |e: hutch::internals::sys::SysError| std::io::Error::from_raw_os_error(e.errno as i32);
    let dir = hutch::internals::sys::open_dir_path(p.parent().unwrap()).map_err(err)?;
    let name = std::ffi::CString::new(p.file_name().unwrap_or_default().as_bytes())?;
    hutch::internals::sys::mkfifo_at(dir.as_fd(), &name, 0o644).map_err(err)
}
