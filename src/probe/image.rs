//! `image_store`: the image store is writable, its filesystem holds the
//! layers' whiteouts and opaque xattrs, stacks them as overlay lowers the
//! way a run will (with `userxattr` in a user namespace when not root),
//! and, for root, can be idmapped. The probe layers live in the store's
//! `tmp/` and are removed afterwards; the mount exists only in the child's
//! private mount namespace.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::fork::{CBuf, Step, decimal, fork_userns_holder};
use crate::image::Store;
use crate::sys::Errno;
use crate::sys::raw;

use super::userns::{self, Maps, NEXT};
use super::{Feature, HostSettings, Status, in_child};

const NAME: &str = "image_store";

const OVERLAY_STEPS: [&str; 6] = [
    "unshare(CLONE_NEWNS)",
    "mount(NULL, \"/\", MS_REC|MS_PRIVATE)",
    "mount(\"overlay\", lowerdir=TOP:BOTTOM) of two probe layers in the store",
    "open a file of the bottom layer through the overlay",
    "a whiteout in the top layer hides a bottom file",
    "an opaque directory in the top layer hides a bottom directory's contents",
];

const IDMAP_STEPS: [&str; 6] = [
    "fork() a child with unshare(CLONE_NEWUSER)",
    "write /proc/PID/uid_map \"0 65534 1\"",
    "write /proc/PID/gid_map \"0 65534 1\"",
    "open /proc/PID/ns/user",
    "open_tree(probe layer, OPEN_TREE_CLONE)",
    "mount_setattr(MOUNT_ATTR_IDMAP)",
];

fn bad(status: Status, detail: String, fix: &str) -> Feature {
    Feature::bad(NAME, false, status, detail, fix)
}

/// Make the two probe layers: bottom/{keep, victim, d/hidden}; top with a
/// whiteout over `victim` and `d` opaque.
fn layers(dir: &Path, root: bool) -> Result<(), String> {
    let mk =
        |p: &Path| std::fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()));
    let (bottom, top) = (dir.join("bottom"), dir.join("top"));
    for d in [bottom.join("d"), top.join("d"), dir.join("m")] {
        mk(&d)?;
    }
    for f in [
        bottom.join("keep"),
        bottom.join("victim"),
        bottom.join("d/hidden"),
    ] {
        std::fs::write(&f, "x").map_err(|e| format!("write {}: {e}", f.display()))?;
    }
    let top_fd = crate::sys::open_dir_path(&top).map_err(|e| e.to_string())?;
    crate::sys::mknod_whiteout(top_fd.as_fd(), c"victim").map_err(|e| e.to_string())?;
    let d = crate::sys::open_dir_path(&top.join("d")).map_err(|e| e.to_string())?;
    let xattr = if root {
        crate::image::unpack::OpaqueXattr::Trusted
    } else {
        crate::image::unpack::OpaqueXattr::User
    };
    crate::sys::set_xattr(d.as_fd(), xattr.name(), b"y").map_err(|e| e.to_string())?;
    Ok(())
}

fn cpath(p: &Path) -> Option<CBuf> {
    let b = p.as_os_str().as_encoded_bytes();
    (b.len() < 200 && !b.contains(&0)).then(|| CBuf::new(&[b]))
}

pub(super) fn probe(host: &HostSettings) -> Feature {
    let store = match Store::open(None) {
        Ok(s) => s,
        Err(e) => {
            return bad(
                Status::Restricted,
                format!("cannot open the image store: {e}"),
                "set HUTCH_IMAGE_STORE (or pass --image-store to `hutch image`) to a directory you own",
            );
        }
    };
    let mut rnd = [0u8; 6];
    let _ = crate::sys::getrandom(&mut rnd);
    let dir: PathBuf =
        store
            .root()
            .join("tmp")
            .join(format!("check-{}-{}", std::process::id(), hex::encode(rnd)));
    let root = host.uid == 0;
    let shown = store.root().display().to_string();
    let made = layers(&dir, root);
    let res = made.clone().map(|()| run(&dir, root, host));
    if let Ok(fd) = crate::sys::open_dir_path(&store.root().join("tmp"))
        && let Some(n) = dir.file_name()
    {
        let _ = crate::image::store::remove_tree(
            fd.as_fd(),
            &std::ffi::CString::new(n.as_encoded_bytes()).unwrap_or_default(),
        );
    }
    match res {
        Err(why) => bad(
            Status::Restricted,
            format!("{shown}: cannot create whiteouts and opaque directories there: {why}"),
            "put the store (HUTCH_IMAGE_STORE) on a local filesystem with xattr support (ext4, xfs, btrfs)",
        ),
        Ok(f) => f,
    }
}

fn run(dir: &Path, root: bool, host: &HostSettings) -> Feature {
    let shown = dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(dir)
        .display()
        .to_string();
    let (Some(bottom), Some(m)) = (cpath(&dir.join("bottom")), cpath(&dir.join("m"))) else {
        return bad(
            Status::Skipped,
            format!("{shown}: path too long for the probe"),
            "",
        );
    };
    let t = dir.join("top").into_os_string().into_encoded_bytes();
    let b = dir.join("bottom").into_os_string().into_encoded_bytes();
    if t.iter().chain(&b).any(|c| b",:\\".contains(c)) {
        return bad(
            Status::Skipped,
            format!(
                "{shown}: the path contains ',' ':' or '\\\\'; the probe passes paths in overlay options"
            ),
            "",
        );
    }
    let userxattr: &[u8] = if root { b"" } else { b",userxattr" };
    let data = CBuf::new(&[b"lowerdir=", &t, b":", &b, userxattr]);
    let mdir = dir.join("m");
    let keep = cpath(&mdir.join("keep")).unwrap_or(m);
    let victim = cpath(&mdir.join("victim")).unwrap_or(m);
    let hidden = cpath(&mdir.join("d/hidden")).unwrap_or(m);
    let maps = Maps::new(host);
    let base = if root { 0 } else { NEXT };
    let res = in_child(|| {
        if !root {
            userns::enter(&maps)?;
        }
        raw::unshare(libc::CLONE_NEWNS).step(base)?;
        raw::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None).step(base + 1)?;
        raw::mount(
            Some(c"overlay"),
            m.as_cstr(),
            Some(c"overlay"),
            libc::MS_RDONLY,
            Some(data.as_cstr()),
        )
        .step(base + 2)?;
        drop(raw::open(keep.as_cstr(), libc::O_PATH | libc::O_NOFOLLOW).step(base + 3)?);
        for (p, n) in [(&victim, base + 4), (&hidden, base + 5)] {
            match raw::open(p.as_cstr(), libc::O_PATH | libc::O_NOFOLLOW) {
                Ok(_) => return Err((n, Errno::EEXIST)),
                Err(Errno::ENOENT) => {}
                Err(e) => return Err((n, e)),
            }
        }
        if !root {
            return Ok(0);
        }
        let n = base + 6;
        let holder = fork_userns_holder(n)?;
        let mut digits = [0u8; 10];
        let pid_s = decimal(holder.pid as u32, &mut digits);
        let uid_map = CBuf::new(&[b"/proc/", pid_s, b"/uid_map"]);
        let gid_map = CBuf::new(&[b"/proc/", pid_s, b"/gid_map"]);
        let ns = CBuf::new(&[b"/proc/", pid_s, b"/ns/user"]);
        raw::write_file(uid_map.as_cstr(), b"0 65534 1\n").step(n + 1)?;
        raw::write_file(gid_map.as_cstr(), b"0 65534 1\n").step(n + 2)?;
        let nsfd = raw::open(ns.as_cstr(), libc::O_RDONLY).step(n + 3)?;
        let tree = raw::open_tree_clone(None, bottom.as_cstr(), 0).step(n + 4)?;
        raw::mount_setattr(
            tree.as_fd(),
            false,
            crate::sys::MOUNT_ATTR_IDMAP,
            0,
            Some(nsfd.as_fd()),
        )
        .step(n + 5)?;
        Ok(0)
    });
    let mut steps: Vec<&'static str> = if root {
        Vec::new()
    } else {
        userns::STEPS.to_vec()
    };
    steps.extend(OVERLAY_STEPS);
    if root {
        steps.extend(IDMAP_STEPS);
    }
    let how = if root {
        "overlay lowers with trusted.overlay.* whiteouts/opaque dirs, idmapped"
    } else {
        "overlay lowers with userxattr (user.overlay.opaque) in a user namespace"
    };
    userns::verdict(
        NAME,
        false,
        &steps,
        res,
        host,
        &format!("{shown}: writable; {how}"),
        &|n, errno| {
            let n = n.wrapping_sub(base);
            match (n, errno) {
                (4 | 5, Errno::EEXIST) => Some((
                    Status::Missing,
                    format!("{shown}: the overlay ignores the layers' whiteouts or opaque xattrs"),
                    "put the store on ext4, xfs or btrfs (user xattrs on tmpfs need Linux 6.6+)".into(),
                )),
                (2, Errno::EINVAL) => Some((
                    Status::Missing,
                    format!("{shown}: its filesystem cannot be an overlay lower"),
                    "put the store (HUTCH_IMAGE_STORE) on a local filesystem such as ext4, xfs or btrfs".into(),
                )),
                (10 | 11, Errno::EINVAL | Errno::EOPNOTSUPP) if root => Some((
                    Status::Missing,
                    format!("{shown}: its filesystem does not support idmapped mounts"),
                    "put the store on ext4, xfs, btrfs or tmpfs (6.3+)".into(),
                )),
                _ => None,
            }
        },
    )
}
