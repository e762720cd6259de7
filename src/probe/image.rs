//! `image_store`: the image store is writable, its filesystem holds the
//! layers' whiteouts and `user.overlay.opaque` marks, and stacks them as
//! overlay lowers the way a run does: in a user namespace with
//! `userxattr`, and for root over layers idmapped through another user
//! namespace (as the supervisor hands them to the sandbox). The probe
//! layers live in the store's `tmp/` and are removed afterwards; the
//! mounts exist only in the child's private mount namespace.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::fork::{CBuf, Step, decimal, fork_userns_holder};
use crate::image::Store;
use crate::sys::Errno;
use crate::sys::raw;

use super::userns::{self, Maps};
use super::{Feature, HostSettings, Status, in_child};

const NAME: &str = "image_store";

/// Root only, first: the layers become idmapped detached mounts.
const IDMAP_STEPS: [&str; 8] = [
    "open_tree(top probe layer, OPEN_TREE_CLONE)",
    "open_tree(bottom probe layer, OPEN_TREE_CLONE)",
    "fork() a child with unshare(CLONE_NEWUSER)",
    "write /proc/PID/uid_map \"0 65534 1\"",
    "write /proc/PID/gid_map \"0 65534 1\"",
    "open /proc/PID/ns/user",
    "mount_setattr(top layer, MOUNT_ATTR_IDMAP)",
    "mount_setattr(bottom layer, MOUNT_ATTR_IDMAP)",
];

/// After the user namespace is entered.
const OVERLAY_STEPS: [&str; 7] = [
    "unshare(CLONE_NEWNS)",
    "mount(NULL, \"/\", MS_REC|MS_PRIVATE)",
    "move_mount(idmapped layers) onto mount points in the store",
    "mount(\"overlay\", lowerdir=TOP:BOTTOM,userxattr) of two probe layers in the store",
    "open a file of the bottom layer through the overlay",
    "a whiteout in the top layer hides a bottom file",
    "an opaque directory in the top layer hides a bottom directory's contents",
];

fn bad(status: Status, detail: String, fix: &str) -> Feature {
    Feature::bad(NAME, false, status, detail, fix)
}

/// Make the two probe layers: bottom/{keep, victim, d/hidden}; top with a
/// whiteout over `victim` and `d` opaque.
fn layers(dir: &Path) -> Result<(), String> {
    let mk =
        |p: &Path| std::fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()));
    let (bottom, top) = (dir.join("bottom"), dir.join("top"));
    for d in [
        bottom.join("d"),
        top.join("d"),
        dir.join("m"),
        dir.join("mt"),
        dir.join("mb"),
    ] {
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
    // What every import writes: runs mount with `userxattr`.
    let xattr = crate::image::unpack::OpaqueXattr::User;
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
    let made = layers(&dir);
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
    let paths = ["top", "bottom", "m", "mt", "mb"].map(|n| cpath(&dir.join(n)));
    let [Some(top), Some(bottom), Some(m), Some(mt), Some(mb)] = paths else {
        return bad(
            Status::Skipped,
            format!("{shown}: path too long for the probe"),
            "",
        );
    };
    // Root stacks the idmapped mounts; the unprivileged path the layers.
    let (t, b) = if root {
        (dir.join("mt"), dir.join("mb"))
    } else {
        (dir.join("top"), dir.join("bottom"))
    };
    let (t, b) = (
        t.into_os_string().into_encoded_bytes(),
        b.into_os_string().into_encoded_bytes(),
    );
    if t.iter().chain(&b).any(|c| b",:\\".contains(c)) {
        return bad(
            Status::Skipped,
            format!(
                "{shown}: the path contains ',' ':' or '\\\\'; the probe passes paths in overlay options"
            ),
            "",
        );
    }
    let data = CBuf::new(&[b"lowerdir=", &t, b":", &b, b",userxattr"]);
    let mdir = dir.join("m");
    let keep = cpath(&mdir.join("keep")).unwrap_or(CBuf::new(&[]));
    let victim = cpath(&mdir.join("victim")).unwrap_or(CBuf::new(&[]));
    let hidden = cpath(&mdir.join("d/hidden")).unwrap_or(CBuf::new(&[]));
    let maps = Maps::new(host);
    let idmap_steps = if root { IDMAP_STEPS.len() as u32 } else { 0 };
    let base = idmap_steps + userns::NEXT;
    let res = in_child(|| {
        let mut trees = None;
        if root {
            let ttree = raw::open_tree_clone(None, top.as_cstr(), 0).step(0)?;
            let btree = raw::open_tree_clone(None, bottom.as_cstr(), 0).step(1)?;
            let holder = fork_userns_holder(2)?;
            let mut digits = [0u8; 10];
            let pid_s = decimal(holder.pid as u32, &mut digits);
            let uid_map = CBuf::new(&[b"/proc/", pid_s, b"/uid_map"]);
            let gid_map = CBuf::new(&[b"/proc/", pid_s, b"/gid_map"]);
            let ns = CBuf::new(&[b"/proc/", pid_s, b"/ns/user"]);
            raw::write_file(uid_map.as_cstr(), b"0 65534 1\n").step(3)?;
            raw::write_file(gid_map.as_cstr(), b"0 65534 1\n").step(4)?;
            let nsfd = raw::open(ns.as_cstr(), libc::O_RDONLY).step(5)?;
            for (tree, n) in [(&ttree, 6), (&btree, 7)] {
                raw::mount_setattr(
                    tree.as_fd(),
                    false,
                    crate::sys::MOUNT_ATTR_IDMAP,
                    0,
                    Some(nsfd.as_fd()),
                )
                .step(n)?;
            }
            trees = Some((ttree, btree));
        }
        userns::enter(&maps).map_err(|(n, e)| (n + idmap_steps, e))?;
        raw::unshare(libc::CLONE_NEWNS).step(base)?;
        raw::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None).step(base + 1)?;
        if let Some((ttree, btree)) = &trees {
            raw::move_mount(ttree.as_fd(), None, mt.as_cstr()).step(base + 2)?;
            raw::move_mount(btree.as_fd(), None, mb.as_cstr()).step(base + 2)?;
        }
        raw::mount(
            Some(c"overlay"),
            m.as_cstr(),
            Some(c"overlay"),
            libc::MS_RDONLY,
            Some(data.as_cstr()),
        )
        .step(base + 3)?;
        drop(raw::open(keep.as_cstr(), libc::O_PATH | libc::O_NOFOLLOW).step(base + 4)?);
        for (p, n) in [(&victim, base + 5), (&hidden, base + 6)] {
            match raw::open(p.as_cstr(), libc::O_PATH | libc::O_NOFOLLOW) {
                Ok(_) => return Err((n, Errno::EEXIST)),
                Err(Errno::ENOENT) => {}
                Err(e) => return Err((n, e)),
            }
        }
        Ok(0)
    });
    let mut steps: Vec<&'static str> = Vec::new();
    if root {
        steps.extend(IDMAP_STEPS);
    }
    steps.extend(userns::STEPS);
    steps.extend(OVERLAY_STEPS);
    let how = if root {
        "idmapped layers stack as overlay lowers in a user namespace (userxattr, user.overlay.opaque)"
    } else {
        "layers stack as overlay lowers in a user namespace (userxattr, user.overlay.opaque)"
    };
    userns::verdict(
        NAME,
        false,
        &steps,
        res,
        host,
        &format!("{shown}: writable; {how}"),
        &|n, errno| {
            if root && n < idmap_steps {
                return match (n, errno) {
                    (6 | 7, Errno::EINVAL | Errno::EOPNOTSUPP) => Some((
                        Status::Missing,
                        format!("{shown}: its filesystem does not support idmapped mounts"),
                        "put the store on ext4, xfs, btrfs or tmpfs (6.3+)".into(),
                    )),
                    _ => None,
                };
            }
            match (n.wrapping_sub(base), errno) {
                (5 | 6, Errno::EEXIST) => Some((
                    Status::Missing,
                    format!("{shown}: the overlay ignores the layers' whiteouts or opaque xattrs"),
                    "put the store on ext4, xfs or btrfs (user xattrs on tmpfs need Linux 6.6+)"
                        .into(),
                )),
                (3, Errno::EINVAL) => Some((
                    Status::Missing,
                    format!(
                        "{shown}: its filesystem cannot be an overlay lower{}",
                        if root { " (idmapped)" } else { "" }
                    ),
                    "put the store (HUTCH_IMAGE_STORE) on a local filesystem such as ext4, xfs or btrfs (Linux 5.19+ for idmapped lowers)".into(),
                )),
                _ => None,
            }
        },
    )
}
