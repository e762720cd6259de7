//! A two-layer image whose top layer deletes a file and replaces a
//! directory: the unpacked layers carry overlayfs whiteouts and opaque
//! xattrs, and stacked as overlay lowers they show exactly the merged
//! view. Every import marks opaque directories with user.overlay.opaque
//! (hutch's runs mount their overlays in a user namespace, with
//! `userxattr`): root's layers are stacked as root, uid 65534's in its own
//! user namespace, both with `userxattr`. (`tests/image_run.rs` shows the
//! same merged view through `hutch run --image`.)

mod common;
mod image_support;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::process::Command;

use common::*;
use image_support::*;

fn layers() -> (Vec<u8>, Vec<u8>) {
    let bottom = Tar::default()
        .dir("a")
        .file("a/keep", "keep\n")
        .file("a/old", "old\n")
        .dir("a/sub")
        .file("a/sub/x", "x\n")
        .file("gone", "gone\n")
        .file("stay", "stay\n")
        .dir("d")
        .file("d/old1", "1\n")
        .dir("d/olddir")
        .file("d/olddir/deep", "deep\n")
        .dir("r")
        .file("r/inner", "inner\n")
        .finish();
    let top = Tar::default()
        .file(".wh.gone", "")
        .dir("a")
        .file("a/.wh.old", "")
        .dir("d")
        .file("d/.wh..wh..opq", "")
        .file("d/new", "new\n")
        .file("r", "r is a file now\n")
        .file("added", "added\n")
        .finish();
    (bottom, top)
}

const MERGED: &str = "\
./a d
./a/keep f keep
./a/sub d
./a/sub/x f x
./added f added
./d d
./d/new f new
./r f r is a file now
./stay f stay
";

fn xattr(path: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = [0u8; 16];
    rustix::fs::lgetxattr(path, name, &mut buf[..])
        .ok()
        .map(|n| buf[..n].to_vec())
}

#[test]
fn whiteouts_and_opaque_dirs_stack_into_exactly_the_merged_view() {
    for who in identities() {
        require!(have("unshare"), "unshare (util-linux) is needed");
        let t = TempDir::new("img-overlay", who);
        let (bottom, top) = layers();
        let lay = t.path().join("lay");
        oci_layout(
            &lay,
            &[(bottom.clone(), Comp::Gzip), (top.clone(), Comp::Tar)],
            &ImageSpec::default(),
        );
        std::fs::create_dir(t.path().join("merged")).unwrap();
        give(t.path(), who);
        let store = t.path().join("store");
        import_ok(who, &store, &[lay.to_str().unwrap()]);

        let low = store
            .join("layers")
            .join(&sha(&gzip(&bottom))[7..])
            .join("root");
        let up = store.join("layers").join(&sha(&top)[7..]).join("root");
        // The markers themselves.
        for w in ["gone", "a/old"] {
            let m = std::fs::symlink_metadata(up.join(w)).unwrap();
            assert!(
                m.file_type().is_char_device() && m.rdev() == 0,
                "{w} is a whiteout"
            );
        }
        let (mine, other) = ("user.overlay.opaque", "trusted.overlay.opaque");
        assert_eq!(
            xattr(&up.join("d"), mine).as_deref(),
            Some(&b"y"[..]),
            "{mine} on d"
        );
        assert_eq!(xattr(&up.join("d"), other), None);
        assert_eq!(xattr(&up.join("a"), mine), None, "a merges");
        assert!(!up.join(".wh.gone").exists() && !up.join("d/.wh..wh..opq").exists());

        let script = format!(
            "set -e; mount -t overlay overlay -o lowerdir={}:{},userxattr {m}; cd {m}; \
             find . -mindepth 1 | sort | while read p; do \
               if [ -d \"$p\" ]; then echo \"$p d\"; else echo \"$p f $(cat \"$p\")\"; fi; done",
            up.display(),
            low.display(),
            m = t.path().join("merged").display()
        );
        let o = match who {
            As::Root => Command::new("unshare")
                .args(["-m", "sh", "-c", &script])
                .output()
                .unwrap(),
            As::Nobody => {
                let mut c = if who.drops_to_nobody() {
                    let mut c = Command::new("setpriv");
                    c.args([
                        "--reuid=65534",
                        "--regid=65534",
                        "--clear-groups",
                        "unshare",
                    ]);
                    c
                } else {
                    Command::new("unshare")
                };
                c.args(["-Urm", "sh", "-c", &script]).output().unwrap()
            }
        };
        assert!(o.status.success(), "{who:?}: {}", err(&o));
        assert_eq!(out(&o), MERGED, "{who:?}");
    }
}
