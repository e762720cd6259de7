//! The upper-dir walk and path handling over arbitrary trees: an input is
//! a list of operations building an upper directory (files, directories,
//! hardlinks, sparse files, symlinks, FIFOs, opaque markers, whiteouts,
//! hostile names) over a small baseline. Diff (every format, with a byte
//! limit), export (with small caps) and a capped baseline import of the
//! same tree must never panic, never hang on a FIFO, never follow a link,
//! keep names quoted and escaped, and respect their caps.
#![no_main]

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use hutch::workspace::{
    BaselineWriter, DiffFormat, ExportOptions, ImportLimits, Layers, RelPath, diff, export_to,
    WorkspaceError, import_dir, is_unsafe_char,
};
use libfuzzer_sys::fuzz_target;

fn scratch() -> PathBuf {
    let p = std::env::temp_dir().join(format!("hutch-fuzz-upper-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(p.join("base/d")).unwrap();
    std::fs::create_dir_all(p.join("upper")).unwrap();
    std::fs::create_dir_all(p.join("spool")).unwrap();
    std::fs::create_dir_all(p.join("import")).unwrap();
    std::fs::write(p.join("base/f"), b"base\n").unwrap();
    std::fs::write(p.join("base/d/g"), b"g\n").unwrap();
    p
}

fn sys_err(e: hutch::internals::sys::SysError) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.errno as i32)
}

fuzz_target!(|data: &[u8]| {
    let root = scratch();
    let upper = root.join("upper");
    let mut made: Vec<PathBuf> = vec![upper.clone()];
    let mut files: Vec<PathBuf> = Vec::new();
    for op in data.chunks(8) {
        let kind = op[0] % 9;
        let name: Vec<u8> = op[1..]
            .iter()
            .copied()
            .filter(|&b| b != 0 && b != b'/')
            .collect();
        if name.is_empty() || name == b"." || name == b".." {
            continue;
        }
        let parent = made[op[0] as usize % made.len()].clone();
        let p = parent.join(std::ffi::OsStr::from_bytes(&name));
        let _ = match kind {
            0 => std::fs::write(&p, &name).map(|()| files.push(p.clone())),
            1 => std::fs::create_dir(&p).map(|()| made.push(p.clone())),
            2 => std::os::unix::fs::symlink("/etc/shadow", &p),
            3 => std::os::unix::fs::symlink("..", &p),
            4 => mkfifo(&p),
            5 => std::fs::File::open(&parent).and_then(|f| {
                hutch::internals::sys::set_xattr(f.as_fd(), c"user.overlay.opaque", b"y").map_err(sys_err)
            }),
            6 => whiteout(&p),
            7 => match files.get(op.get(1).copied().unwrap_or(0) as usize % files.len().max(1)) {
                Some(f) => std::fs::hard_link(f, &p),
                None => Ok(()),
            },
            // Sparse: large by size, no disk used.
            _ => std::fs::File::create(&p)
                .and_then(|f| f.set_len(u64::from(op.get(2).copied().unwrap_or(1)) << 16))
                .map(|()| files.push(p.clone())),
        };
    }
    let layers = Layers::new(
        hutch::internals::sys::open_dir_path(&root.join("base")).unwrap(),
        hutch::internals::sys::open_dir_path(&upper).unwrap(),
    );
    let spool = hutch::internals::sys::open_dir_path(&root.join("spool")).unwrap();
    let limit = 64 * 1024;
    for f in [DiffFormat::Unified, DiffFormat::Json, DiffFormat::Stat] {
        let mut out = Vec::new();
        match diff(&layers, f, Some(limit), spool.as_fd(), &mut out) {
            Ok(skipped) => {
                assert!(out.len() as u64 <= limit);
                for s in &skipped {
                    assert!(!s.path.starts_with(b"/"));
                }
                let text = String::from_utf8_lossy(&out);
                match f {
                    DiffFormat::Unified => {
                        for line in out.split(|&b| b == b'\n') {
                            if line.starts_with(b"diff --git ") {
                                assert!(!line.iter().any(|&b| b < 0x20 && b != b'\t'));
                            }
                        }
                    }
                    DiffFormat::Json => {
                        assert!(!text.chars().any(|c| c != '\n' && is_unsafe_char(c)));
                        serde_json::from_slice::<serde_json::Value>(&out).expect("valid JSON");
                    }
                    DiffFormat::Stat => {}
                }
            }
            // A failed diff writes nothing.
            Err(_) => assert!(out.is_empty()),
        }
    }
    let paths: Vec<RelPath> = data
        .split(|&b| b == b'|')
        .filter_map(|p| RelPath::parse(Path::new(std::ffi::OsStr::from_bytes(p))).ok())
        .filter(|p| !p.is_root())
        .take(4)
        .collect();
    for p in &paths {
        assert!(
            !p.components()
                .iter()
                .any(|c| c.as_bytes() == b".." || c.as_bytes().contains(&b'/'))
        );
    }
    let opts = ExportOptions {
        max_total_bytes: 1 << 20,
        max_file_bytes: 256 << 10,
        max_entries: 64,
        ..Default::default()
    };
    let mut manifest = Vec::new();
    let archive = root.join("out.tar");
    match export_to(
        &layers,
        &paths,
        None,
        &archive,
        &opts,
        spool.as_fd(),
        Some(&mut manifest),
    ) {
        Ok(summary) => {
            assert!(summary.entries <= 64 && summary.total_bytes <= 1 << 20);
            let text = String::from_utf8_lossy(&manifest);
            assert!(!text.chars().any(|c| c != '\n' && is_unsafe_char(c)));
            serde_json::from_slice::<serde_json::Value>(&manifest).expect("valid manifest");
        }
        Err(_) => assert!(!archive.exists()),
    }
    // The same tree as a baseline source, under small caps.
    let limits = ImportLimits {
        max_files: 32,
        max_bytes: 1 << 20,
        max_file_bytes: 64 << 10,
        max_depth: 6,
        max_path_bytes: 64,
    };
    let tree = hutch::internals::sys::open_dir_path(&root.join("import")).unwrap();
    let mut writer = BaselineWriter::with_limits(tree, limits).unwrap();
    if import_dir(&upper, &mut writer).is_ok() {
        // The writer threads read the files: a size cap they find refuses
        // the import at finish, whole; any other error is a bug.
        match writer.finish() {
            Ok(manifest) => {
                assert!(manifest.entries.len() <= 32);
                for e in &manifest.entries {
                    assert!(e.path.len() <= 64 && e.size <= 64 << 10);
                    assert!(e.path.split(|&b| b == b'/').count() <= 6);
                }
            }
            Err(WorkspaceError::Refused(..)) => {}
            Err(e) => panic!("baseline finish: {e}"),
        }
    }
    let _ = std::fs::remove_dir_all(&root);
});

fn at(p: &Path) -> std::io::Result<(std::os::fd::OwnedFd, std::ffi::CString)> {
    let parent =
        hutch::internals::sys::open_dir_path(p.parent().unwrap_or(Path::new("/"))).map_err(sys_err)?;
    let name = std::ffi::CString::new(p.file_name().unwrap_or_default().as_bytes())?;
    Ok((parent, name))
}

fn mkfifo(p: &Path) -> std::io::Result<()> {
    let (dir, name) = at(p)?;
    hutch::internals::sys::mkfifo_at(dir.as_fd(), &name, 0o644).map_err(sys_err)
}

/// An overlayfs whiteout (needs CAP_MKNOD; skipped without).
fn whiteout(p: &Path) -> std::io::Result<()> {
    let (dir, name) = at(p)?;
    hutch::internals::sys::mknod_whiteout(dir.as_fd(), &name).map_err(sys_err)
}
