//! `--rootfs DIR|TAR`: a plain root filesystem as a one-layer image. A
//! tar (plain, gzip or zstd) is the layer as it is; a directory is walked
//! (fd-relative, no link followed, names sorted so the same tree gives the
//! same digest) into a tar stream on a pipe that the layer import reads,
//! so the tree is read once and never copied whole.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::thread::JoinHandle;

use super::error::{ImageError, Result};
use super::layer::LayerInput;
use super::oci::{Config, Platform, RootFs, RunConfig};
use super::plan::Plan;
use super::source::open_input;
use super::tar::write::{Header, header, padding};
use crate::sys::{self, Errno};

/// The Env a rootfs image gets (no host variable ever).
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub(crate) fn plan(src: &Path, want: &Platform) -> Result<Plan> {
    let (file, is_dir) = open_input(src)?;
    let reader: Box<dyn Read + Send> = if is_dir {
        let dir = OwnedFd::from(file);
        Box::new(DirTar::spawn(dir, src.display().to_string())?)
    } else {
        Box::new(file)
    };
    let config = Config {
        architecture: want.architecture.clone(),
        os: want.os.clone(),
        variant: want.variant.clone(),
        config: RunConfig {
            env: vec![DEFAULT_PATH.to_string()],
            ..RunConfig::default()
        },
        rootfs: RootFs {
            kind: "layers".into(),
            diff_ids: Vec::new(),
        },
    };
    Ok(Plan {
        format: "rootfs",
        manifest: None,
        config_bytes: Vec::new(),
        config,
        layers: vec![LayerInput {
            expected: None,
            compression: None,
            diff_id: None,
            reader,
            media_type: None,
        }],
        default_name: None,
    })
}

/// The read end of the pipe a walker thread writes the tar into; at the
/// end of the stream the walker's result is collected, so a failed walk
/// is an error, never a short layer.
struct DirTar {
    pipe: io::PipeReader,
    walker: Option<JoinHandle<std::result::Result<(), String>>>,
}

impl DirTar {
    fn spawn(dir: OwnedFd, shown: String) -> Result<DirTar> {
        let (r, w) = io::pipe().map_err(|e| ImageError::Input {
            path: shown.clone(),
            why: format!("pipe: {e}"),
        })?;
        let walker = std::thread::Builder::new()
            .name("rootfs-walk".into())
            .spawn(move || {
                let mut out = io::BufWriter::with_capacity(256 * 1024, w);
                walk(dir.as_fd(), &mut out).map_err(|e| format!("{shown}: {e}"))?;
                out.write_all(&[0u8; 1024]).map_err(|e| e.to_string())?;
                out.flush().map_err(|e| e.to_string())
            })
            .map_err(|e| ImageError::Input {
                path: String::new(),
                why: format!("cannot start the directory walk: {e}"),
            })?;
        Ok(DirTar {
            pipe: r,
            walker: Some(walker),
        })
    }
}

impl Read for DirTar {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.pipe.read(buf)?;
        if n == 0
            && !buf.is_empty()
            && let Some(w) = self.walker.take()
        {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(io::Error::other(e)),
                Err(_) => return Err(io::Error::other("the directory walk panicked")),
            }
        }
        Ok(n)
    }
}

fn sys_io(e: sys::SysError) -> io::Error {
    io::Error::other(e.to_string())
}

/// One directory being walked: its fd, its path in the archive, and the
/// names left to emit (sorted, reversed so `pop` gives the next).
struct Level {
    fd: OwnedFd,
    path: Vec<u8>,
    names: Vec<CString>,
}

fn walk(root: BorrowedFd<'_>, out: &mut dyn Write) -> io::Result<()> {
    let meta = sys::fstat(root).map_err(sys_io)?;
    emit(out, b'5', b"./", b"", &meta, 0)?;
    let root_dup =
        rustix::io::dup(root).map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))?;
    let mut stack = vec![Level {
        names: sorted(root_dup.as_fd())?,
        fd: root_dup,
        path: Vec::new(),
    }];
    // First path of each multiply-linked inode, for hard link entries.
    let mut links: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    while let Some(level) = stack.last_mut() {
        let Some(name) = level.names.pop() else {
            stack.pop();
            continue;
        };
        let mut path = level.path.clone();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name.as_bytes());
        let dir = level.fd.as_fd();
        let m = sys::lstat_at(dir, &name).map_err(sys_io)?;
        match m.kind() {
            libc::S_IFDIR => {
                let fd = sys::open_dir_beneath(dir, &name).map_err(sys_io)?;
                let mut p = path.clone();
                p.push(b'/');
                emit(out, b'5', &p, b"", &m, 0)?;
                let names = sorted(fd.as_fd())?;
                stack.push(Level { fd, path, names });
            }
            libc::S_IFREG => {
                let nlink = rustix::fs::statat(dir, &name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map(|s| s.st_nlink)
                    .unwrap_or(1);
                if nlink > 1 {
                    if let Some(first) = links.get(&(m.dev, m.ino)) {
                        emit(out, b'1', &path, &first.clone(), &m, 0)?;
                        continue;
                    }
                    links.insert((m.dev, m.ino), path.clone());
                }
                copy_file(out, dir, &name, &path, &m)?;
            }
            libc::S_IFLNK => {
                let target = sys::readlink_at(dir, &name).map_err(sys_io)?;
                emit(out, b'2', &path, &target, &m, 0)?;
            }
            libc::S_IFCHR => emit(out, b'3', &path, b"", &m, 0)?,
            libc::S_IFBLK => emit(out, b'4', &path, b"", &m, 0)?,
            libc::S_IFIFO => emit(out, b'6', &path, b"", &m, 0)?,
            // Sockets cannot be archived; they mean nothing in an image.
            _ => {}
        }
    }
    Ok(())
}

fn sorted(fd: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let mut names = sys::list_dir(fd).map_err(sys_io)?;
    names.sort();
    names.reverse();
    Ok(names)
}

fn emit(
    out: &mut dyn Write,
    typeflag: u8,
    path: &[u8],
    link: &[u8],
    m: &sys::Meta,
    size: u64,
) -> io::Result<()> {
    let rdev = m.rdev;
    let h = header(&Header {
        typeflag,
        path,
        link,
        mode: m.mode & 0o7777,
        uid: m.uid,
        gid: m.gid,
        size,
        mtime: m.mtime,
        dev_major: if typeflag == b'3' || typeflag == b'4' {
            rustix::fs::major(rdev)
        } else {
            0
        },
        dev_minor: if typeflag == b'3' || typeflag == b'4' {
            rustix::fs::minor(rdev)
        } else {
            0
        },
    });
    out.write_all(&h)
}

fn copy_file(
    out: &mut dyn Write,
    dir: BorrowedFd<'_>,
    name: &CStr,
    path: &[u8],
    m: &sys::Meta,
) -> io::Result<()> {
    let fd = sys::open_beneath(dir, name, libc::O_RDONLY | libc::O_NONBLOCK, 0).map_err(sys_io)?;
    let now = sys::fstat(fd.as_fd()).map_err(sys_io)?;
    if (now.dev, now.ino) != (m.dev, m.ino) || !now.is_file() {
        return Err(io::Error::other(
            "a file changed while the directory was read",
        ));
    }
    emit(out, b'0', path, b"", &now, now.size)?;
    let mut f = std::fs::File::from(fd);
    let mut left = now.size;
    let mut buf = vec![0u8; 128 * 1024];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = match f.read(&mut buf[..want]) {
            Ok(0) => {
                return Err(io::Error::other(
                    "a file shrank while the directory was read",
                ));
            }
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(Errno::EINTR as i32) => continue,
            Err(e) => return Err(e),
        };
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    out.write_all(&vec![0u8; padding(now.size)])
}
