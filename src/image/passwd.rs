//! The image config's `User` as numeric ids: `uid`, `uid:gid`, `name`,
//! `name:group` (names looked up in the image's own `/etc/passwd` and
//! `/etc/group`, never the host's).
//!
//! The files are found in the merged view of the layers the way overlayfs
//! shows them (top layer first; a whiteout ends the lookup; an opaque
//! directory hides the layers below it), each component opened
//! fd-relative below its layer with no symlink followed: a `/etc` or
//! `/etc/passwd` that is a symlink is refused, not resolved. The files are
//! read bounded (1 MiB) and never quoted in errors.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use super::error::{ImageError, Result};
use super::unpack::OpaqueXattr;
use crate::sys::{self, Errno};

/// The largest `/etc/passwd` or `/etc/group` read.
const MAX_DB: u64 = 1 << 20;

/// The ids of `user` (the config's `User`; empty means root) in the image
/// whose layer trees are `layers` (bottom to top, with their xattr kind).
pub fn resolve_user(user: &str, layers: &[(&Path, OpaqueXattr)]) -> Result<(u32, u32)> {
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    if u.is_empty() && g.is_none() {
        return Ok((0, 0));
    }
    let bad = |why: &str| {
        ImageError::Invalid(format!(
            "the image config's User {}: {why}",
            crate::util::quote::display_name(user.as_bytes())
        ))
    };
    let mut passwd: Option<Option<Vec<u8>>> = None;
    let mut read_passwd = || -> Result<Option<Vec<u8>>> {
        if passwd.is_none() {
            passwd = Some(merged_file(layers, "etc/passwd")?);
        }
        Ok(passwd.clone().flatten())
    };
    let (uid, primary_gid) = match number(u) {
        Some(uid) => {
            // A numeric user takes its primary group from passwd when it
            // is listed there, else group 0 (as runc does).
            let gid = read_passwd()?
                .and_then(|db| find(&db, |f| number(&f[2]) == Some(uid)).map(|f| f[3].clone()))
                .and_then(|g| number(&g))
                .unwrap_or(0);
            (uid, gid)
        }
        None if u.is_empty() => (0, 0),
        None => {
            let db =
                read_passwd()?.ok_or_else(|| bad("is a name, but the image has no /etc/passwd"))?;
            let f = find(&db, |f| f[0] == u)
                .ok_or_else(|| bad("is not listed in the image's /etc/passwd"))?;
            match (number(&f[2]), number(&f[3])) {
                (Some(uid), Some(gid)) => (uid, gid),
                _ => return Err(bad("has a malformed entry in the image's /etc/passwd")),
            }
        }
    };
    let gid = match g {
        None => primary_gid,
        Some(g) => match number(g) {
            Some(n) => n,
            None => {
                let db = merged_file(layers, "etc/group")?
                    .ok_or_else(|| bad("names a group, but the image has no /etc/group"))?;
                let f = find(&db, |f| f[0] == g)
                    .ok_or_else(|| bad("names a group not listed in the image's /etc/group"))?;
                number(&f[2])
                    .ok_or_else(|| bad("has a malformed entry in the image's /etc/group"))?
            }
        },
    };
    Ok((uid, gid))
}

/// A decimal id (not the `-1` that means "unchanged" to the kernel).
fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u32>().ok().filter(|n| *n != u32::MAX)
}

/// The first line of a colon-separated database (at least 4 fields) that
/// `pick` accepts.
fn find(db: &[u8], pick: impl Fn(&[String]) -> bool) -> Option<Vec<String>> {
    db.split(|b| *b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split(':').map(str::to_string).collect::<Vec<_>>())
        .filter(|f| f.len() >= 4)
        .find(|f| pick(f))
}

/// The content of `path` (relative, `/`-separated) in the merged view of
/// `layers`, or None when no layer shows a regular file there.
pub fn merged_file(layers: &[(&Path, OpaqueXattr)], path: &str) -> Result<Option<Vec<u8>>> {
    let shown = || crate::util::quote::display_name(path.as_bytes());
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let Some((last, dirs)) = comps.split_last() else {
        return Ok(None);
    };
    let mut active: Vec<(OwnedFd, OpaqueXattr)> = Vec::with_capacity(layers.len());
    for (dir, x) in layers.iter().rev() {
        active.push((sys::open_dir_path(dir)?, *x));
    }
    for comp in dirs {
        let name = cstring(comp)?;
        let mut next = Vec::new();
        for (fd, x) in &active {
            let m = match sys::lstat_at(fd.as_fd(), &name) {
                Ok(m) => m,
                Err(e) if e.errno == Errno::ENOENT => continue,
                Err(e) => return Err(e.into()),
            };
            if m.is_whiteout() {
                break;
            }
            if m.is_symlink() {
                return Err(ImageError::Invalid(format!(
                    "the image's /{}: /{comp} is a symlink; hutch does not follow links in \
                     layers to find it",
                    shown()
                )));
            }
            if !m.is_dir() {
                break;
            }
            let d = sys::open_dir_beneath(fd.as_fd(), &name)?;
            let opaque = sys::get_xattr(d.as_fd(), x.name())?.as_deref() == Some(b"y");
            next.push((d, *x));
            if opaque {
                break;
            }
        }
        if next.is_empty() {
            return Ok(None);
        }
        active = next;
    }
    let name = cstring(last)?;
    for (fd, _) in &active {
        let m = match sys::lstat_at(fd.as_fd(), &name) {
            Ok(m) => m,
            Err(e) if e.errno == Errno::ENOENT => continue,
            Err(e) => return Err(e.into()),
        };
        if m.is_whiteout() {
            return Ok(None);
        }
        if !m.is_file() {
            return Err(ImageError::Invalid(format!(
                "the image's /{} is not a regular file (hutch does not follow links in layers)",
                shown()
            )));
        }
        if m.size > MAX_DB {
            return Err(ImageError::Invalid(format!(
                "the image's /{} is over {MAX_DB} bytes",
                shown()
            )));
        }
        let f = sys::open_beneath(fd.as_fd(), &name, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        let mut data = Vec::with_capacity(m.size as usize);
        std::fs::File::from(f)
            .take(MAX_DB + 1)
            .read_to_end(&mut data)
            .map_err(|e| ImageError::Invalid(format!("reading the image's /{}: {e}", shown())))?;
        if data.len() as u64 > MAX_DB {
            return Err(ImageError::Invalid(format!(
                "the image's /{} is over {MAX_DB} bytes",
                shown()
            )));
        }
        return Ok(Some(data));
    }
    Ok(None)
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| ImageError::Invalid("a NUL byte in a path".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(root: &Path, files: &[(&str, &str)]) {
        for (p, content) in files {
            let path = root.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    #[test]
    fn users_resolve_in_the_top_layer_that_shows_the_file() {
        let t = std::env::temp_dir().join(format!("hutch-passwd-{}", std::process::id()));
        let (low, up) = (t.join("low"), t.join("up"));
        layer(
            &low,
            &[
                (
                    "etc/passwd",
                    "root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n",
                ),
                ("etc/group", "root:x:0:\nstaff:x:50:\n"),
            ],
        );
        layer(
            &up,
            &[(
                "etc/passwd",
                "root:x:0:0::/root:/bin/sh\nsvc:x:100:101::/:/bin/false\n",
            )],
        );
        std::fs::create_dir_all(low.join("etc")).unwrap();
        let x = OpaqueXattr::User;
        let layers = [(low.as_path(), x), (up.as_path(), x)];
        assert_eq!(resolve_user("", &layers).unwrap(), (0, 0));
        assert_eq!(resolve_user("svc", &layers).unwrap(), (100, 101));
        assert_eq!(resolve_user("100", &layers).unwrap(), (100, 101));
        assert_eq!(resolve_user("7", &layers).unwrap(), (7, 0));
        assert_eq!(resolve_user("svc:staff", &layers).unwrap(), (100, 50));
        assert_eq!(resolve_user("5:6", &layers).unwrap(), (5, 6));
        // The upper passwd hides the lower one's `app`.
        let e = resolve_user("app", &layers).unwrap_err().to_string();
        assert!(e.contains("not listed"), "{e}");
        assert!(resolve_user("svc:nogroup", &layers).is_err());
        // A symlinked passwd is refused, not followed.
        std::fs::remove_file(up.join("etc/passwd")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", up.join("etc/passwd")).unwrap();
        let e = resolve_user("svc", &layers).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&t).unwrap();
    }
}
