//! What an import reads from: a directory (an OCI image layout, or an
//! unpacked docker-archive) or a tar file of one. Member names are looked
//! up below the directory with no symlink followed, or in an index of the
//! tar's members built by one pass over its headers (data is seeked past,
//! not read); members are then read in place with `pread`.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::error::ImageError;
use super::tar::{Kind, TarReader};
use super::unpack::normalize;
use crate::sys;

/// At most this many members in an image archive.
const MAX_MEMBERS: usize = 1 << 20;

/// One regular-file member of a tar archive.
#[derive(Debug, Clone, Copy)]
struct Member {
    offset: u64,
    size: u64,
}

enum Kind2 {
    Dir(OwnedFd),
    Tar {
        file: Arc<File>,
        members: HashMap<String, Member>,
        links: HashMap<String, String>,
    },
}

/// An opened image source.
pub struct Source {
    kind: Kind2,
    /// What the user named, for messages.
    pub shown: String,
}

/// A reader of one member's bytes, with its declared size.
pub struct Blob {
    pub reader: Box<dyn Read + Send>,
    pub size: u64,
}

/// `pread` over a byte range of a shared file.
struct Range {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for Range {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end - self.pos;
        if left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Open a path given by the caller: regular files and directories only,
/// opened non-blocking so a FIFO cannot hang the import.
pub fn open_input(path: &Path) -> Result<(File, bool), ImageError> {
    let shown = path.display().to_string();
    let file = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| ImageError::Input {
        path: shown.clone(),
        why: io::Error::from_raw_os_error(e.raw_os_error()).to_string(),
    })?;
    let meta = sys::fstat(file.as_fd())?;
    if !meta.is_dir() && !meta.is_file() {
        return Err(ImageError::Input {
            path: shown,
            why: "not a regular file or a directory".into(),
        });
    }
    Ok((File::from(file), meta.is_dir()))
}

impl Source {
    /// Open `path`: a directory, or an uncompressed tar file.
    pub fn open(path: &Path) -> Result<Source, ImageError> {
        let shown = path.display().to_string();
        let (file, is_dir) = open_input(path)?;
        if is_dir {
            return Ok(Source {
                kind: Kind2::Dir(OwnedFd::from(file)),
                shown,
            });
        }
        let mut head = [0u8; 4];
        let n = file.read_at(&mut head, 0).unwrap_or(0);
        if super::decompress::sniff(&head[..n]) != super::oci::Compression::None {
            return Err(ImageError::Input {
                path: shown,
                why:
                    "a compressed archive: decompress it first (image archives are plain tar files)"
                        .into(),
            });
        }
        let (members, links) = index_tar(&file).map_err(|why| ImageError::Input {
            path: shown.clone(),
            why,
        })?;
        Ok(Source {
            kind: Kind2::Tar {
                file: Arc::new(file),
                members,
                links,
            },
            shown,
        })
    }

    /// Whether `name` (a relative path) exists as a regular file.
    pub fn exists(&self, name: &str) -> bool {
        matches!(self.open_member(name), Ok(Some(_)))
    }

    /// The member `name`, or None when absent.
    pub fn open_member(&self, name: &str) -> Result<Option<Blob>, ImageError> {
        let key = clean(name).ok_or_else(|| {
            ImageError::Invalid(format!(
                "{}: a reference to a member outside the image ({})",
                self.shown,
                crate::util::quote::display_name(name.as_bytes())
            ))
        })?;
        match &self.kind {
            Kind2::Dir(dir) => {
                let c = CString::new(key.as_bytes())
                    .map_err(|_| ImageError::Invalid("NUL in a member name".into()))?;
                let fd = match sys::openat2(
                    Some(dir.as_fd()),
                    &c,
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
                    0,
                    sys::RESOLVE_STRICT,
                ) {
                    Ok(fd) => fd,
                    Err(e) if e.errno == sys::Errno::ENOENT => return Ok(None),
                    Err(e) => {
                        return Err(ImageError::Input {
                            path: format!("{}/{}", self.shown, key),
                            why: e.to_string(),
                        });
                    }
                };
                let meta = sys::fstat(fd.as_fd())?;
                if !meta.is_file() {
                    return Ok(None);
                }
                Ok(Some(Blob {
                    reader: Box::new(File::from(fd)),
                    size: meta.size,
                }))
            }
            Kind2::Tar {
                file,
                members,
                links,
            } => {
                let mut key = key;
                for _ in 0..8 {
                    if let Some(m) = members.get(&key) {
                        return Ok(Some(Blob {
                            reader: Box::new(Range {
                                file: file.clone(),
                                pos: m.offset,
                                end: m.offset + m.size,
                            }),
                            size: m.size,
                        }));
                    }
                    match links.get(&key) {
                        Some(target) => key = target.clone(),
                        None => return Ok(None),
                    }
                }
                Ok(None)
            }
        }
    }

    /// Read a small member whole (JSON documents), refusing one over `cap`.
    pub fn read_small(&self, name: &str, cap: u64) -> Result<Option<Vec<u8>>, ImageError> {
        let Some(mut blob) = self.open_member(name)? else {
            return Ok(None);
        };
        if blob.size > cap {
            return Err(ImageError::Invalid(format!(
                "{}: {} is {} bytes, over the {cap}-byte limit for metadata",
                self.shown,
                crate::util::quote::display_name(name.as_bytes()),
                blob.size
            )));
        }
        let mut v = Vec::with_capacity(blob.size as usize);
        (&mut blob.reader)
            .take(cap + 1)
            .read_to_end(&mut v)
            .map_err(|e| ImageError::Input {
                path: format!("{}/{name}", self.shown),
                why: e.to_string(),
            })?;
        Ok(Some(v))
    }
}

/// A member name normalised (`./` dropped); None for `..` or absolute ones.
fn clean(name: &str) -> Option<String> {
    let comps = normalize(name.as_bytes()).ok()?;
    if comps.is_empty() {
        return None;
    }
    String::from_utf8(comps.join(&b'/')).ok()
}

type TarIndex = (HashMap<String, Member>, HashMap<String, String>);

fn index_tar(file: &File) -> Result<TarIndex, String> {
    let mut r = TarReader::new(io::BufReader::with_capacity(512, file));
    let mut members = HashMap::new();
    let mut links = HashMap::new();
    loop {
        let e = match r.next_entry() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) => return Err(format!("not a readable tar archive: {e}")),
        };
        if members.len() + links.len() >= MAX_MEMBERS {
            return Err(format!("more than {MAX_MEMBERS} members"));
        }
        let name = String::from_utf8(e.path.clone())
            .ok()
            .and_then(|n| clean(&n));
        if let Some(name) = name {
            match e.kind {
                Kind::File => {
                    if members.contains_key(&name) || links.contains_key(&name) {
                        return Err(format!(
                            "two members named {}",
                            crate::util::quote::display_name(name.as_bytes())
                        ));
                    }
                    members.insert(
                        name,
                        Member {
                            offset: r.position(),
                            size: e.size,
                        },
                    );
                }
                // Older `docker save` links layers shared by two images.
                Kind::Symlink | Kind::Hardlink => {
                    let target = String::from_utf8(e.link.clone()).ok();
                    let base = if e.kind == Kind::Symlink {
                        name.rsplit_once('/')
                            .map(|(d, _)| format!("{d}/"))
                            .unwrap_or_default()
                    } else {
                        String::new()
                    };
                    if let Some(t) = target.and_then(|t| lexical(&format!("{base}{t}"))) {
                        links.insert(name, t);
                    }
                }
                _ => {}
            }
        }
        r.seek_past_data()
            .map_err(|e| format!("not a readable tar archive: {e}"))?;
    }
    Ok((members, links))
}

/// Resolve `..` lexically inside the archive's namespace; None if it leaves it.
fn lexical(p: &str) -> Option<String> {
    if p.starts_with('/') {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            c => out.push(c),
        }
    }
    (!out.is_empty()).then(|| out.join("/"))
}
