//! `hutch image import/list/inspect/rm/gc` through the binary, as root and
//! as uid 65534: OCI layouts made by umoci, OCI tars, docker-archives,
//! `--rootfs`, digest verification and the checks.

mod common;
mod image_support;

use std::path::Path;

use common::*;
use image_support::*;

fn file_in_layers(store: &Path, rel: &str) -> Option<Vec<u8>> {
    layer_roots(store)
        .into_iter()
        .find_map(|r| std::fs::read(r.join(rel)).ok())
}

#[test]
fn imports_an_oci_layout_made_by_umoci_and_its_tar() {
    require!(have("umoci"), "umoci (Debian package umoci) is needed");
    require!(have_busybox(), "/bin/busybox (busybox-static) is needed");
    for who in identities() {
        let t = TempDir::new("img-umoci", who);
        let rootfs = t.path().join("rootfs");
        busybox_rootfs(&rootfs);
        let layout = t.path().join("layout");
        umoci_layout(&layout, "base", &rootfs);
        run_ok(
            "tar",
            &[
                "-C",
                &layout.display().to_string(),
                "-cf",
                &t.path().join("layout.tar").display().to_string(),
                ".",
            ],
        );
        give(t.path(), who);
        let store = t.path().join("store");

        let d1 = import_ok(who, &store, &[layout.to_str().unwrap()]);
        let images = list(who, &store);
        assert_eq!(images.len(), 1);
        assert_eq!(images[0]["manifest"], d1.as_str());
        assert_eq!(
            images[0]["names"][0], "base",
            "umoci's ref name becomes the name"
        );
        assert_eq!(images[0]["platform"]["architecture"], "amd64");
        // The same image from a tar of the layout: same digest, no new layer.
        let o = image(
            who,
            &store,
            &[
                "import",
                t.path().join("layout.tar").to_str().unwrap(),
                "--name",
                "again",
            ],
        );
        assert!(o.status.success(), "{}", err(&o));
        assert!(out(&o).starts_with(&d1), "{}", out(&o));
        assert!(out(&o).contains("(0 new)"), "{}", out(&o));

        let busybox = file_in_layers(&store, "bin/busybox").expect("busybox unpacked");
        assert_eq!(busybox, std::fs::read("/bin/busybox").unwrap());
        let root = &layer_roots(&store)[0];
        assert_eq!(
            std::fs::read_link(root.join("bin/sh")).unwrap(),
            Path::new("busybox")
        );
        let meta = std::fs::metadata(root.join("bin/busybox")).unwrap();
        let uid = std::os::unix::fs::MetadataExt::uid(&meta);
        assert_eq!(
            uid,
            who.uid(),
            "owners: kept by root, the caller's otherwise"
        );
        // The archive's owners are recorded either way: umoci wrote the
        // owners of the rootfs, i.e. the user running the tests (root in CI).
        let maker = nix::unistd::geteuid().as_raw();
        let entries = std::fs::read_to_string(root.parent().unwrap().join("entries")).unwrap();
        assert!(
            entries
                .lines()
                .any(|l| l == format!("f 755 {maker} {maker} bin/busybox")),
            "{entries}"
        );

        let o = image(who, &store, &["inspect", "base"]);
        assert!(o.status.success(), "{}", err(&o));
        let text = out(&o);
        for want in [
            "platform    pass",
            "volumes     pass",
            "secret_env  pass",
            "devices     pass",
            &d1,
        ] {
            assert!(text.contains(want), "{want:?} in {text}");
        }
        // Every import (root's too) marks opaque directories the way the
        // overlays of a run, in a user namespace with userxattr, read them.
        assert!(text.contains("opaque xattr user.overlay.opaque"), "{text}");
    }
}

#[test]
fn imports_a_docker_archive_laid_out_like_docker_save() {
    require!(have_busybox(), "/bin/busybox (busybox-static) is needed");
    for who in identities() {
        let t = TempDir::new("img-docker", who);
        let rootfs = t.path().join("rootfs");
        busybox_rootfs(&rootfs);
        let arch = t.path().join("archive");
        let layer_id = "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef";
        std::fs::create_dir_all(arch.join(layer_id)).unwrap();
        let layer_path = arch.join(layer_id).join("layer.tar");
        // GNU tar writes the layer, as docker's own tar writer would.
        run_ok(
            "tar",
            &[
                "--numeric-owner",
                "-C",
                rootfs.to_str().unwrap(),
                "-cf",
                layer_path.to_str().unwrap(),
                ".",
            ],
        );
        let layer = std::fs::read(&layer_path).unwrap();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Cmd": ["sh"], "WorkingDir": "", "Volumes": null},
            "rootfs": {"type": "layers", "diff_ids": [sha(&layer)]},
        }))
        .unwrap();
        let config_name = format!("{}.json", &sha(&config)[7..]);
        std::fs::write(arch.join(&config_name), &config).unwrap();
        std::fs::write(
            arch.join("manifest.json"),
            serde_json::to_vec(&serde_json::json!([{
                "Config": config_name, "RepoTags": ["busybox:test"], "Layers": [format!("{layer_id}/layer.tar")]
            }]))
            .unwrap(),
        )
        .unwrap();
        std::fs::write(arch.join("repositories"), br#"{"busybox":{"test":"x"}}"#).unwrap();
        let tarball = t.path().join("busybox.docker.tar");
        run_ok(
            "tar",
            &[
                "-C",
                arch.to_str().unwrap(),
                "-cf",
                tarball.to_str().unwrap(),
                ".",
            ],
        );
        give(t.path(), who);
        let store = t.path().join("store");
        let d = import_ok(who, &store, &[tarball.to_str().unwrap()]);
        let images = list(who, &store);
        assert_eq!(images[0]["names"][0], "busybox:test");
        assert_eq!(images[0]["format"], "docker-archive");
        assert_eq!(
            images[0]["layers"][0],
            sha(&layer).as_str(),
            "an uncompressed layer's digest is its diff_id"
        );
        assert_eq!(
            file_in_layers(&store, "etc/hello").unwrap(),
            b"hello from the image\n"
        );
        // Deterministic: the synthesised manifest is the same next time.
        assert_eq!(import_ok(who, &store, &[tarball.to_str().unwrap()]), d);

        // A config that does not match its name is refused, naming it.
        std::fs::write(arch.join(&config_name), [&config[..], b" "].concat()).unwrap();
        let e = import_refused(
            who,
            &store,
            &[arch.to_str().unwrap()],
            "altered or corrupted",
        );
        assert!(e.contains(&sha(&config)), "{e}");
    }
}

#[test]
fn rootfs_directories_and_tars_become_one_layer_images() {
    require!(have_busybox(), "/bin/busybox (busybox-static) is needed");
    require!(have("zstd"), "zstd (Debian package zstd) is needed");
    for who in identities() {
        let t = TempDir::new("img-rootfs", who);
        let rootfs = t.path().join("rootfs");
        busybox_rootfs(&rootfs);
        std::fs::write(rootfs.join("etc/linked"), "same inode\n").unwrap();
        std::fs::hard_link(rootfs.join("etc/linked"), rootfs.join("etc/linked2")).unwrap();
        let tarball = t.path().join("rootfs.tar");
        run_ok(
            "tar",
            &[
                "-C",
                rootfs.to_str().unwrap(),
                "-cf",
                tarball.to_str().unwrap(),
                ".",
            ],
        );
        run_ok(
            "zstd",
            &[
                "-q",
                "-19",
                tarball.to_str().unwrap(),
                "-o",
                t.path().join("rootfs.tar.zst").to_str().unwrap(),
            ],
        );
        give(t.path(), who);
        let store = t.path().join("store");

        let d = import_ok(
            who,
            &store,
            &["--rootfs", rootfs.to_str().unwrap(), "--name", "dir"],
        );
        assert_eq!(
            import_ok(who, &store, &["--rootfs", rootfs.to_str().unwrap()]),
            d,
            "same tree, same digest"
        );
        let zst = import_ok(
            who,
            &store,
            &[
                "--rootfs",
                t.path().join("rootfs.tar.zst").to_str().unwrap(),
                "--name",
                "zst",
            ],
        );
        let images = list(who, &store);
        assert_eq!(images.len(), 2);
        let o = image(who, &store, &["inspect", "zst", "--json"]);
        let ins = result(&o);
        assert_eq!(ins["image"]["manifest"], zst.as_str());
        assert_eq!(ins["layers"][0]["compression"], "zstd");
        assert_eq!(
            ins["config"]["Env"][0],
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
        assert_eq!(ins["layers"][0]["summary"]["hardlinks"], 1);
        for r in layer_roots(&store) {
            assert_eq!(
                std::fs::read(r.join("bin/busybox")).unwrap(),
                std::fs::read("/bin/busybox").unwrap()
            );
            let a = std::fs::metadata(r.join("etc/linked")).unwrap();
            let b = std::fs::metadata(r.join("etc/linked2")).unwrap();
            assert_eq!(
                std::os::unix::fs::MetadataExt::ino(&a),
                std::os::unix::fs::MetadataExt::ino(&b)
            );
        }
    }
}

#[test]
fn tampered_blobs_are_refused_naming_the_blob() {
    for who in identities() {
        let t = TempDir::new("img-tamper", who);
        let layer = Tar::default()
            .dir("etc")
            .file("etc/motd", "original content\n")
            .finish();
        let lay = t.path().join("lay");
        oci_layout(&lay, &[(layer.clone(), Comp::Tar)], &ImageSpec::default());
        let layer_digest = sha(&layer);
        let blob = lay.join("blobs/sha256").join(&layer_digest[7..]);
        let mut bytes = std::fs::read(&blob).unwrap();
        let at = bytes.windows(8).position(|w| w == b"original").unwrap();
        bytes[at] = b'O';
        std::fs::write(&blob, &bytes).unwrap();
        give(t.path(), who);
        let store = t.path().join("store");
        let e = import_refused(who, &store, &[lay.to_str().unwrap()], &layer_digest);
        assert!(e.contains("altered or corrupted"), "{e}");
        assert!(list(who, &store).is_empty());
        assert!(
            names_in(&store.join("layers")).is_empty(),
            "no layer placed"
        );
        assert!(names_in(&store.join("tmp")).is_empty(), "staging removed");

        // A gzip layer altered in its middle: still named.
        let t2 = TempDir::new("img-tamper-gz", who);
        let lay2 = t2.path().join("lay");
        let big: String = (0..4000).map(|i| format!("line {i}\n")).collect();
        let layer = Tar::default().file("data", &big).finish();
        oci_layout(&lay2, &[(layer.clone(), Comp::Gzip)], &ImageSpec::default());
        let gz = gzip(&layer);
        let blob = lay2.join("blobs/sha256").join(&sha(&gz)[7..]);
        let mut bytes = std::fs::read(&blob).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x55;
        std::fs::write(&blob, &bytes).unwrap();
        give(t2.path(), who);
        import_refused(who, &store, &[lay2.to_str().unwrap()], &sha(&gz));

        // A truncated blob (size differs from the descriptor).
        let t3 = TempDir::new("img-tamper-size", who);
        let lay3 = t3.path().join("lay");
        oci_layout(&lay3, &[(layer.clone(), Comp::Tar)], &ImageSpec::default());
        let blob = lay3.join("blobs/sha256").join(&sha(&layer)[7..]);
        let len = std::fs::metadata(&blob).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&blob)
            .unwrap()
            .set_len(len - 512)
            .unwrap();
        give(t3.path(), who);
        let e = import_refused(who, &store, &[lay3.to_str().unwrap()], &sha(&layer));
        assert!(e.contains("descriptor says"), "{e}");
        assert!(list(who, &store).is_empty());
    }
}

#[test]
fn platform_volumes_and_secret_env_are_refused_unless_overridden() {
    for who in identities() {
        let t = TempDir::new("img-checks", who);
        let layer = Tar::default().file("f", "x\n").finish();
        let arm = t.path().join("arm");
        oci_layout(
            &arm,
            &[(layer.clone(), Comp::Gzip)],
            &ImageSpec {
                arch: "arm64",
                ..Default::default()
            },
        );
        let vols = t.path().join("vols");
        oci_layout(
            &vols,
            &[(layer.clone(), Comp::Gzip)],
            &ImageSpec {
                volumes: vec!["/data".into()],
                ..Default::default()
            },
        );
        let secret = t.path().join("secret");
        oci_layout(
            &secret,
            &[(layer.clone(), Comp::Gzip)],
            &ImageSpec {
                env: vec![
                    "PATH=/bin".into(),
                    "GITHUB_TOKEN=ghp_supersecretvalue".into(),
                ],
                ..Default::default()
            },
        );
        let plain = t.path().join("plain");
        oci_layout(&plain, &[(layer, Comp::Gzip)], &ImageSpec::default());
        give(t.path(), who);
        let store = t.path().join("store");
        let s = |p: &Path| p.to_str().unwrap().to_string();

        let e = import_refused(who, &store, &[&s(&arm)], "--allow-platform-mismatch");
        assert!(
            e.contains("linux/arm64") && e.contains("linux/amd64"),
            "{e}"
        );
        import_refused(
            who,
            &store,
            &[&s(&plain), "--platform", "linux/arm64"],
            "--allow-platform-mismatch",
        );
        import_refused(who, &store, &[&s(&vols)], "--allow-volumes");
        let e = import_refused(who, &store, &[&s(&secret)], "--allow-secret-env");
        assert!(
            e.contains("GITHUB_TOKEN") && !e.contains("supersecret"),
            "names the key, never the value: {e}"
        );
        assert!(
            list(who, &store).is_empty(),
            "refused images are not stored"
        );
        assert!(
            names_in(&store.join("layers")).is_empty(),
            "config checks run before any layer is unpacked"
        );

        import_ok(
            who,
            &store,
            &[&s(&arm), "--allow-platform-mismatch", "--name", "arm"],
        );
        import_ok(
            who,
            &store,
            &[
                &s(&plain),
                "--platform",
                "linux/arm64",
                "--allow-platform-mismatch",
            ],
        );
        import_ok(
            who,
            &store,
            &[&s(&vols), "--allow-volumes", "--name", "vols"],
        );
        import_ok(
            who,
            &store,
            &[&s(&secret), "--allow-secret-env", "--name", "secret"],
        );
        assert_eq!(list(who, &store).len(), 4);
        let text = out(&image(who, &store, &["inspect", "secret"]));
        assert!(
            text.contains("GITHUB_TOKEN=<redacted>") && !text.contains("supersecret"),
            "{text}"
        );
        assert!(
            text.contains("secret_env  refused") && text.contains("--allow-secret-env"),
            "{text}"
        );
        let text = out(&image(who, &store, &["inspect", "vols"]));
        assert!(text.contains("volumes     refused"), "{text}");
        let text = out(&image(
            who,
            &store,
            &["inspect", "arm", "--platform", "linux/arm64"],
        ));
        assert!(text.contains("platform    pass"), "{text}");
    }
}

#[test]
fn rm_and_gc_remove_exactly_what_is_unreferenced() {
    for who in identities() {
        let t = TempDir::new("img-gc", who);
        let base = Tar::default()
            .dir("usr")
            .file("usr/base", "base\n")
            .finish();
        let top = Tar::default().file("top", "top\n").finish();
        let a = t.path().join("a");
        let b = t.path().join("b");
        let da = oci_layout(&a, &[(base.clone(), Comp::Gzip)], &ImageSpec::default());
        let db = oci_layout(
            &b,
            &[(base.clone(), Comp::Gzip), (top.clone(), Comp::Gzip)],
            &ImageSpec::default(),
        );
        give(t.path(), who);
        let store = t.path().join("store");
        import_ok(who, &store, &[a.to_str().unwrap(), "--name", "a"]);
        import_ok(who, &store, &[a.to_str().unwrap(), "--name", "a2"]);
        import_ok(who, &store, &[b.to_str().unwrap(), "--name", "b"]);
        assert_eq!(
            names_in(&store.join("layers")).len(),
            2,
            "the shared layer is stored once"
        );
        let gc = |who| -> serde_json::Value {
            let o = image(who, &store, &["gc", "--json"]);
            assert!(o.status.success(), "{}", err(&o));
            result(&o)
        };
        let r = gc(who);
        assert_eq!(r["layers"], serde_json::json!([]));
        assert_eq!(r["blobs"], serde_json::json!([]));

        // Removing one of two names keeps the image.
        let o = image(who, &store, &["rm", "a"]);
        assert!(out(&o).contains("removed name a"), "{}", out(&o));
        assert_eq!(list(who, &store).len(), 2);
        // By digest prefix: the image goes; its blobs go at gc, the shared layer stays.
        let o = image(who, &store, &["rm", &da[..19]]);
        assert!(o.status.success(), "{}", err(&o));
        let cfg_a: Vec<String> = names_in(&store.join("blobs/sha256"));
        assert_eq!(cfg_a.len(), 4, "two manifests and two configs before gc");
        let r = gc(who);
        assert_eq!(
            r["layers"],
            serde_json::json!([]),
            "the base layer is still b's"
        );
        let removed: Vec<String> = r["blobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(removed.len(), 2);
        assert!(removed.contains(&da));
        assert!(!removed.contains(&db));
        assert_eq!(names_in(&store.join("layers")).len(), 2);
        // inspect of a removed image fails cleanly.
        let o = image(who, &store, &["inspect", &da]);
        assert_eq!(o.status.code(), Some(125));
        assert!(err(&o).contains("no image"), "{}", err(&o));

        image(who, &store, &["rm", "b"]);
        let r = gc(who);
        let layers: Vec<String> = r["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(layers.len(), 2);
        assert!(layers.contains(&sha(&gzip(&base))) && layers.contains(&sha(&gzip(&top))));
        assert!(names_in(&store.join("layers")).is_empty());
        assert!(names_in(&store.join("blobs/sha256")).is_empty());
        assert!(list(who, &store).is_empty());
    }
}

#[test]
fn concurrent_imports_of_images_sharing_a_layer() {
    for who in identities() {
        let t = TempDir::new("img-concurrent", who);
        let big: String = (0..10_000).map(|i| format!("{i:08}\n")).collect();
        let mut base = Tar::default().dir("shared");
        for n in 0..50 {
            base = base.file(&format!("shared/f{n}"), &big[..(n + 1) * 1000]);
        }
        let base = base.finish();
        let mut layouts = Vec::new();
        for n in 0..4 {
            let top = Tar::default().file(&format!("top{n}"), "x\n").finish();
            let p = t.path().join(format!("img{n}"));
            oci_layout(
                &p,
                &[(base.clone(), Comp::Gzip), (top, Comp::Gzip)],
                &ImageSpec::default(),
            );
            layouts.push(p);
        }
        give(t.path(), who);
        let store = t.path().join("store");
        // Create the store first so the racers all find it.
        assert!(image(who, &store, &["list"]).status.success());
        let children: Vec<std::process::Child> = layouts
            .iter()
            .flat_map(|p| [p.clone(), p.clone()])
            .map(|p| {
                let mut cmd = hutch_command(who);
                cmd.arg("image")
                    .arg("--image-store")
                    .arg(&store)
                    .arg("import")
                    .arg(&p);
                cmd.stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                cmd.spawn().unwrap()
            })
            .collect();
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        assert_eq!(list(who, &store).len(), 4);
        assert_eq!(
            names_in(&store.join("layers")).len(),
            5,
            "one shared layer and four tops"
        );
        let shared = store
            .join("layers")
            .join(&sha(&gzip(&base))[7..])
            .join("root/shared");
        assert_eq!(names_in(&shared).len(), 50);
        for n in [0usize, 25, 49] {
            let got = std::fs::read_to_string(shared.join(format!("f{n}"))).unwrap();
            assert_eq!(got, big[..(n + 1) * 1000]);
        }
        assert!(
            names_in(&store.join("tmp")).is_empty(),
            "no staging left: {:?}",
            names_in(&store.join("tmp"))
        );
    }
}

#[test]
fn usage_errors_are_one_line_with_exit_125() {
    require!(
        can_launch_as(As::Root).is_ok(),
        can_launch_as(As::Root).unwrap_err()
    );
    let t = TempDir::new("img-usage", As::Root);
    let store = t.path().join("store");
    for (args, want) in [
        (&["import"][..], "SRC is needed"),
        (&["import", "/nonexistent/x"][..], "/nonexistent/x"),
        (&["import", "/etc", "--bogus"][..], "unknown option"),
        (&["import", "/etc"][..], "neither an OCI image layout"),
        (&["frobnicate"][..], "unknown command"),
        (
            &["import", "/etc/hostname", "--name", "bad name"][..],
            "--name",
        ),
    ] {
        let o = image(As::Root, &store, args);
        assert_eq!(o.status.code(), Some(125), "{args:?}");
        let e = err(&o);
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(e.contains(want), "{want:?} in {e}");
    }
    for cmd in ["import", "list", "inspect", "rm", "gc"] {
        let o = image(As::Root, &store, &[cmd, "--help"]);
        assert!(
            o.status.success() && out(&o).starts_with(&format!("usage: hutch image {cmd}")),
            "{cmd}: {}",
            out(&o)
        );
    }
}
