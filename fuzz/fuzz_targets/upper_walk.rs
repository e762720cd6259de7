//! The upper-dir walk and path handling over arbitrary trees: an input is
//! a list of operations building an upper directory (files, directories,
//! symlinks, FIFOs, opaque markers, hostile names) over a small baseline.
//! Diff (every format), export and path parsing must never panic, never
//! hang on a FIFO, never follow a link, and keep names quoted.
#![no_main]

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use hutch::workspace::{DiffFormat, ExportOptions, Layers, RelPath, compute, render};
use libfuzzer_sys::fuzz_target;

fn scratch() -> PathBuf {
    let p = std::env::temp_dir().join(format!("hutch-fuzz-upper-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(p.join("base/d")).unwrap();
    std::fs::create_dir_all(p.join("upper")).unwrap();
    std::fs::write(p.join("base/f"), b"base\n").unwrap();
    std::fs::write(p.join("base/d/g"), b"g\n").unwrap();
    p
}

fuzz_target!(|data: &[u8]| {
    let root = scratch();
    let upper = root.join("upper");
    let mut made: Vec<PathBuf> = vec![upper.clone()];
    for op in data.chunks(8) {
        let kind = op[0] % 6;
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
            0 => std::fs::write(&p, &name),
            1 => std::fs::create_dir(&p).map(|()| made.push(p.clone())),
            2 => std::os::unix::fs::symlink("/etc/shadow", &p),
            3 => std::os::unix::fs::symlink("..", &p),
            4 => nix_mkfifo(&p),
            _ => std::fs::File::open(&parent).and_then(|f| {
                hutch::internals::sys::set_xattr(f.as_fd(), c"user.overlay.opaque", b"y")
                    .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))
            }),
        };
    }
    let layers = Layers {
        base: hutch::internals::sys::open_dir_path(&root.join("base")).unwrap(),
        upper: hutch::internals::sys::open_dir_path(&upper).unwrap(),
    };
    if let Ok(changes) = compute(&layers, 1 << 20) {
        for c in &changes.changes {
            assert!(!c.path.starts_with(b"/"));
            assert!(!c.path.split(|&b| b == b'/').any(|s| s == b".." || s.is_empty()));
        }
        for f in [DiffFormat::Unified, DiffFormat::Json, DiffFormat::Stat] {
            if let Ok(out) = render(&changes, f, Some(1 << 20)) {
                if f == DiffFormat::Unified {
                    for line in out.split(|&b| b == b'\n') {
                        if line.starts_with(b"diff --git ") {
                            assert!(!line.iter().any(|&b| b < 0x20 && b != b'\t'));
                        }
                    }
                }
            }
        }
    }
    let paths: Vec<RelPath> = data
        .split(|&b| b == b'|')
        .filter_map(|p| RelPath::parse(Path::new(std::ffi::OsStr::from_bytes(p))).ok())
        .filter(|p| !p.is_root())
        .take(4)
        .collect();
    for p in &paths {
        assert!(!p.components().iter().any(|c| c.as_bytes() == b".." || c.as_bytes().contains(&b'/')));
    }
    let _ = hutch::workspace::export_to(&layers, &paths, None, &root.join("out.tar"), &ExportOptions::default());
    let _ = std::fs::remove_dir_all(&root);
});

fn nix_mkfifo(p: &Path) -> std::io::Result<()> {
    let parent = hutch::internals::sys::open_dir_path(p.parent().unwrap_or(Path::new("/")))
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))?;
    let name = std::ffi::CString::new(p.file_name().unwrap_or_default().as_bytes())?;
    hutch::internals::sys::mkfifo_at(parent.as_fd(), &name, 0o644)
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno as i32))
}
