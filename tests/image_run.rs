//! `hutch run --image`: an image from the store as the sandbox's system
//! layer, as a root launch and as uid 65534. Images are built here from
//! the host's static busybox (no python3 in them), imported with `hutch
//! image import`, and run by digest.

mod common;
mod image_support;

use std::path::{Path, PathBuf};

use common::*;
use image_support::*;

/// A test image: `layers` in an OCI layout, imported into a fresh store
/// as `who` under `name`. Returns (store, manifest digest, workspace).
fn image(
    t: &TempDir,
    who: As,
    layers: &[(Vec<u8>, Comp)],
    spec: &ImageSpec,
    name: &str,
    import_flags: &[&str],
) -> (PathBuf, String, PathBuf) {
    let lay = t.path().join(format!("layout-{name}"));
    oci_layout(&lay, layers, spec);
    let ws = t.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("input"), "from the workspace\n").unwrap();
    give(t.path(), who);
    let store = t.path().join("store");
    let mut args = vec![lay.to_str().unwrap(), "--name", name];
    args.extend_from_slice(import_flags);
    let digest = import_ok(who, &store, &args);
    (store, digest, ws)
}

fn busybox() -> Vec<u8> {
    Tar::default()
        .busybox(TOOLS)
        .dir("etc")
        .file("etc/hello", "hello from the image\n")
        .finish()
}

fn ok(o: &std::process::Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: status {:?}: {}{}",
        o.status.code(),
        out(o),
        err(o)
    );
    out(o)
}

fn refused(o: &std::process::Output, expect: &str) -> String {
    let e = err(o);
    assert_eq!(o.status.code(), Some(125), "{}{e}", out(o));
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    assert!(e.contains(expect), "expected {expect:?} in: {e}");
    e
}

/// The second layer deletes a file and a file of a directory (whiteouts),
/// replaces a directory's contents (opaque) and a directory by a file:
/// inside the sandbox the system shows exactly the merged view.
#[test]
fn a_two_layer_image_shows_exactly_the_merged_view() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-merge", who);
        let bottom = Tar::default()
            .busybox(TOOLS)
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
        let (store, digest, ws) = image(
            &t,
            who,
            &[(bottom, Comp::Gzip), (top, Comp::Tar)],
            &ImageSpec::default(),
            "merged",
            &[],
        );
        let o = run_image(
            who,
            &store,
            &ws,
            &[
                "--image",
                &digest,
                "--",
                "sh",
                "-c",
                "find /a /d /r /added /stay /gone 2>/dev/null | sort | while read p; do \
                 if [ -d \"$p\" ]; then echo \"$p d\"; else echo \"$p f $(cat \"$p\")\"; fi; done",
            ],
        );
        assert_eq!(
            ok(&o, "merged view"),
            "/a d\n/a/keep f keep\n/a/sub d\n/a/sub/x f x\n/added f added\n/d d\n\
             /d/new f new\n/r f r is a file now\n/stay f stay\n",
            "{who:?}"
        );
    }
}

/// `--image sha256:...` and `NAME@sha256:...` run exactly that manifest;
/// a bare name only with --allow-unpinned, reported unpinned with the
/// digest used. The host's system is not there: only the image's.
#[test]
fn images_run_by_digest_and_report_what_ran() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-pin", who);
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Gzip)],
            &ImageSpec::default(),
            "bb",
            &[],
        );
        let status = t.path().join("status.jsonl");
        write_as(&status, "", who);
        let o = run_image(
            who,
            &store,
            &ws,
            &[
                "--image",
                &digest,
                "--status-file",
                status.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "cat /etc/hello; cat input; id -u; test -e /usr/bin/python3 || echo no-python; \
                 test -e /usr || echo no-usr",
            ],
        );
        assert_eq!(
            ok(&o, "by digest"),
            "hello from the image\nfrom the workspace\n0\nno-python\nno-usr\n",
            "{who:?}"
        );
        let report = exit_report(&status);
        let img = &report["enforced"]["image"];
        assert_eq!(img["manifest_digest"], digest.as_str(), "{report}");
        assert_eq!(img["platform"], "linux/amd64");
        assert_eq!(img["pinned"], true);
        assert_eq!(img["id_map"], "single");
        assert_eq!(
            img["owners"],
            if who == As::Root { "kept" } else { "caller" }
        );

        let named = format!("bb@{digest}");
        let o = run_image(
            who,
            &store,
            &ws,
            &["--image", &named, "--", "cat", "/etc/hello"],
        );
        assert_eq!(ok(&o, "by name@digest"), "hello from the image\n");
        // Egress through the proxy works on an image root too (its door
        // is made in the overlay).
        let o = run_image(
            who,
            &store,
            &ws,
            &[
                "--image",
                &named,
                "--allow-host",
                "example.com",
                "--",
                "sh",
                "-c",
                "echo $HTTPS_PROXY; test -S /run/hutch/proxy.sock && echo door",
            ],
        );
        assert_eq!(ok(&o, "with egress"), "http://127.0.0.1:3128\ndoor\n");

        let o = run_image(who, &store, &ws, &["--image", "bb", "--", "true"]);
        refused(&o, "--allow-unpinned");
        let o = run_image(
            who,
            &store,
            &ws,
            &[
                "--image",
                "bb",
                "--allow-unpinned",
                "--status-file",
                status.to_str().unwrap(),
                "--",
                "true",
            ],
        );
        ok(&o, "unpinned");
        let img = exit_report(&status)["enforced"]["image"].clone();
        assert_eq!(img["pinned"], false);
        assert_eq!(img["manifest_digest"], digest.as_str());

        // A digest prefix is not a pin; an unknown digest is not found.
        let o = run_image(who, &store, &ws, &["--image", &digest[..20], "--", "true"]);
        refused(&o, "64 hex digits");
        let other = format!("sha256:{}", "0".repeat(64));
        let o = run_image(who, &store, &ws, &["--image", &other, "--", "true"]);
        refused(&o, "no image with manifest");
        // The machine interface types it.
        write_as(&status, "", who);
        let st = status.to_str().unwrap();
        let o = run_image(
            who,
            &store,
            &ws,
            &[
                "--json",
                "--status-file",
                st,
                "--image",
                &other,
                "--",
                "true",
            ],
        );
        refused(&o, "no image with manifest");
        let text = std::fs::read_to_string(&status).unwrap();
        let last: serde_json::Value =
            serde_json::from_str(text.lines().last().expect("an envelope")).unwrap();
        assert_eq!(last["ok"], false, "{last}");
        assert_eq!(last["error"]["kind"], "refused", "{last}");
    }
}

/// The checks apply at run time too: a wrong platform, declared volumes
/// and secret-like Env are refused, each naming its flag, and run with it.
#[test]
fn run_time_checks_refuse_and_their_overrides_accept() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-checks", who);
        let spec = ImageSpec {
            env: vec!["PATH=/bin".into(), "API_TOKEN=hunter2".into()],
            volumes: vec!["/data".into()],
            ..ImageSpec::default()
        };
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Tar)],
            &spec,
            "risky",
            &["--allow-volumes", "--allow-secret-env"],
        );
        let run = |extra: &[&str]| {
            let mut a = vec!["--image", digest.as_str()];
            a.extend_from_slice(extra);
            a.extend_from_slice(&["--", "sh", "-c", "echo ran"]);
            run_image(who, &store, &ws, &a)
        };
        refused(&run(&["--allow-secret-env"]), "--allow-volumes");
        let e = refused(&run(&["--allow-volumes"]), "--allow-secret-env");
        assert!(e.contains("API_TOKEN") && !e.contains("hunter2"), "{e}");
        let both_flags = ["--allow-volumes", "--allow-secret-env"];
        assert_eq!(ok(&run(&both_flags), "overridden"), "ran\n");
        let mut arm = vec!["--platform", "linux/arm64"];
        arm.extend_from_slice(&both_flags);
        refused(&run(&arm), "--allow-platform-mismatch");
        arm.push("--allow-platform-mismatch");
        assert_eq!(ok(&run(&arm), "platform overridden"), "ran\n");
    }
}

/// A blob changed in the store after the import is refused at run time,
/// naming it; nothing runs.
#[test]
fn a_tampered_config_blob_is_refused_at_run_time() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-tamper", who);
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Tar)],
            &ImageSpec::default(),
            "bb",
            &[],
        );
        let config = list(who, &store)[0]["config"].as_str().unwrap().to_string();
        let blob = store.join("blobs/sha256").join(&config[7..]);
        let mut data = std::fs::read(&blob).unwrap();
        data[0] ^= 0x20;
        std::fs::write(&blob, data).unwrap();
        let marker = ws.join("ran");
        let o = run_image(
            who,
            &store,
            &ws,
            &["--image", &digest, "--", "touch", "ran"],
        );
        refused(&o, &format!("blob {config}"));
        assert!(!marker.exists());
    }
}

/// The config's Env, WorkingDir and Cmd are defaults: --setenv, --chdir
/// and a command on the line win. Host variables never reach the image.
#[test]
fn config_env_workdir_and_cmd_apply_and_flags_override() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-config", who);
        let layer = Tar::default()
            .busybox(TOOLS)
            .dir("srv")
            .dir("srv/app")
            .finish();
        let spec = ImageSpec {
            env: vec!["PATH=/bin".into(), "GREETING=from-config".into()],
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "echo cmd $GREETING in $(pwd)".into(),
            ],
            workdir: "/srv/app".into(),
            ..ImageSpec::default()
        };
        let (store, digest, ws) = image(&t, who, &[(layer, Comp::Tar)], &spec, "cfg", &[]);
        let show = "echo $GREETING $PATH $HOME; pwd; env | grep -c HUTCH_TEST_HOST || true";
        let mut cmd = hutch_command(who);
        cmd.args(["run", "--quiet", "--image-store"])
            .arg(&store)
            .args(["--image", &digest, "--", "sh", "-c", show])
            .current_dir(&ws)
            .env("HUTCH_TEST_HOST", "leak")
            .env_remove("HUTCH_IMAGE_STORE");
        let o = cmd.output().unwrap();
        assert_eq!(
            ok(&o, "defaults"),
            "from-config /bin /tmp\n/srv/app\n0\n",
            "{who:?}"
        );
        let ws_s = ws.to_str().unwrap();
        let o = run_image(
            who,
            &store,
            &ws,
            &[
                "--image",
                &digest,
                "--setenv",
                "GREETING",
                "from-flag",
                "--chdir",
                ws_s,
                "--",
                "sh",
                "-c",
                "echo $GREETING; pwd; cat input",
            ],
        );
        assert_eq!(
            ok(&o, "overridden"),
            format!("from-flag\n{ws_s}\nfrom the workspace\n")
        );
        // No command: the image's Cmd, in its WorkingDir.
        let o = run_image(who, &store, &ws, &["--image", &digest]);
        assert_eq!(ok(&o, "image cmd"), "cmd from-config in /srv/app\n");
        // A command not found is reported with the PATH it was looked up in.
        let o = run_image(who, &store, &ws, &["--image", &digest, "--", "nosuch"]);
        assert_eq!(o.status.code(), Some(127), "{}", err(&o));
        assert!(
            err(&o).contains("\"nosuch\" not found in the sandbox's PATH (/bin)"),
            "{}",
            err(&o)
        );
    }
}

/// An image without a WorkingDir starts in the workspace, as a run
/// without an image does; one without a command is refused if none is given.
#[test]
fn without_workdir_the_workspace_is_the_working_directory() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-ws", who);
        let spec = ImageSpec {
            workdir: String::new(),
            cmd: vec![],
            ..ImageSpec::default()
        };
        let (store, digest, ws) = image(&t, who, &[(busybox(), Comp::Tar)], &spec, "nowd", &[]);
        let o = run_image(
            who,
            &store,
            &ws,
            &["--image", &digest, "--", "cat", "input"],
        );
        assert_eq!(ok(&o, "workspace cwd"), "from the workspace\n");
        let o = run_image(who, &store, &ws, &["--image", &digest]);
        refused(&o, "neither Entrypoint nor Cmd");
        // The image's own command, not found: 127, naming it. A
        // WorkingDir its layers lack is made, as container runtimes do.
        let spec = ImageSpec {
            cmd: vec!["nosuch".into()],
            workdir: "/srv/made".into(),
            ..ImageSpec::default()
        };
        let lay = t.path().join("layout-nosuch");
        oci_layout(&lay, &[(busybox(), Comp::Tar)], &spec);
        give(&lay, who);
        let d = import_ok(who, &store, &[lay.to_str().unwrap(), "--name", "nosuch"]);
        let o = run_image(who, &store, &ws, &["--image", &d]);
        assert_eq!(o.status.code(), Some(127), "{}", err(&o));
        assert!(err(&o).contains("\"nosuch\" not found"), "{}", err(&o));
        let o = run_image(who, &store, &ws, &["--image", &d, "--", "pwd"]);
        assert_eq!(ok(&o, "made WorkingDir"), "/srv/made\n");
    }
}

/// Writes inside the sandbox land in the workspace's upper or a discarded
/// upper, never in a layer directory: after 50 runs that write everywhere
/// they can (and a profile whose root is writable), every layer tree is
/// byte for byte what the import made, and the host workspace too.
#[test]
fn writes_never_reach_a_layer_directory() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-writes", who);
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Gzip)],
            &ImageSpec::default(),
            "bb",
            &[],
        );
        let before = layers_digest(&store);
        let script = "echo x > /tmp/t; echo y > input; mkdir -p newdir; echo z >> /etc/hello; \
                      rm -f /bin/cat; touch /etc/new; mkdir /made; cat /etc/hello input";
        for i in 0..50 {
            let o = run_image(
                who,
                &store,
                &ws,
                &["--image", &digest, "--", "sh", "-c", script],
            );
            assert_eq!(
                ok(&o, "writer"),
                "hello from the image\ny\n",
                "run {i} ({who:?}): the image root is read-only, the workspace writable"
            );
        }
        // A root left writable: writes go to its discarded upper.
        let mut spec = hutch::spec::default_profile();
        hutch::spec::use_image(&mut spec, hutch::spec::ImageRef::new(&digest));
        spec.root_readonly = false;
        spec.image.as_mut().unwrap().store = Some(store.clone());
        spec.command = [
            "sh",
            "-c",
            "echo changed > /etc/hello && rm /bin/ls && cat /etc/hello",
        ]
        .map(String::from)
        .to_vec();
        let profile = t.path().join("writable-root.json");
        write_as(&profile, &serde_json::to_string(&spec).unwrap(), who);
        let o = hutch_in(
            who,
            &ws,
            &["run", "--quiet", "--profile", profile.to_str().unwrap()],
        );
        assert_eq!(ok(&o, "writable root"), "changed\n");
        assert_eq!(layers_digest(&store), before, "{who:?}: a layer changed");
        assert_eq!(
            std::fs::read_to_string(ws.join("input")).unwrap(),
            "from the workspace\n"
        );
        assert!(!ws.join("newdir").exists());
    }
}

/// `image gc` waits for a sandbox that runs an image of the store: the
/// layers it uses stay while it runs, even after `image rm`, and go once
/// it has ended.
#[test]
fn gc_waits_for_a_running_sandbox() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-gc", who);
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Tar)],
            &ImageSpec::default(),
            "bb",
            &[],
        );
        let status = t.path().join("status.jsonl");
        write_as(&status, "", who);
        let mut sandbox = hutch_command(who);
        sandbox
            .args(["run", "--quiet", "--image-store"])
            .arg(&store)
            .args(["--image", &digest, "--timeout", "60s", "--status-file"])
            .arg(&status)
            .args(["--", "sh", "-c", "read go; cat /etc/hello"])
            .current_dir(&ws)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .env_remove("HUTCH_IMAGE_STORE");
        let mut sandbox = sandbox.spawn().unwrap();
        wait_for_event(&status, "start", std::time::Duration::from_secs(30));
        let o = image_cmd(who, &store, &["rm", &digest]);
        assert!(o.status.success(), "{}", err(&o));
        let gc = image_spawn(who, &store, &["gc"]);
        // gc is blocked on the store lock the sandbox holds.
        let lock = store.join("lock");
        wait_until(
            std::time::Duration::from_secs(30),
            "gc waiting for the store lock",
            || blocked_on(&lock),
        );
        assert_eq!(names_in(&store.join("layers")).len(), 1);
        // The sandbox still reads its image, then ends; then gc runs.
        {
            use std::io::Write;
            let mut stdin = sandbox.stdin.take().unwrap();
            stdin.write_all(b"go\n").unwrap();
        }
        let o = sandbox.wait_with_output().unwrap();
        assert!(o.status.success());
        assert_eq!(out(&o), "hello from the image\n");
        let g = gc.wait_with_output().unwrap();
        assert!(g.status.success(), "{}", err(&g));
        assert!(names_in(&store.join("layers")).is_empty(), "{}", out(&g));
    }
}

fn image_cmd(who: As, store: &Path, args: &[&str]) -> std::process::Output {
    image_support::image(who, store, args)
}

fn image_spawn(who: As, store: &Path, args: &[&str]) -> std::process::Child {
    let mut cmd = hutch_command(who);
    cmd.arg("image")
        .arg("--image-store")
        .arg(store)
        .args(args)
        .env_remove("HUTCH_IMAGE_STORE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.spawn().unwrap()
}

/// Whether some process waits for a flock on `path` (a `->` line of
/// /proc/locks with its inode).
fn blocked_on(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(path).unwrap().ino();
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|l| l.contains("->") && l.contains("FLOCK"))
        .any(|l| {
            l.split_whitespace()
                .find(|w| w.matches(':').count() == 2)
                .and_then(|w| w.rsplit(':').next())
                .and_then(|i| i.parse::<u64>().ok())
                == Some(ino)
        })
}

/// The library: `hutch::Command::image` runs a program on the image, and
/// the report carries the digest.
#[test]
fn the_library_runs_a_command_on_an_image() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-lib", who);
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Tar)],
            &ImageSpec::default(),
            "bb",
            &[],
        );
        let mut spec = hutch::spec::default_profile();
        spec.command = vec!["cat".into()];
        let mut c = hutch::Command::from_spec(spec);
        c.image(&digest).arg("/etc/hello").workspace(&ws);
        c.spec_mut().image.as_mut().unwrap().store = Some(store.clone());
        if who == As::Nobody {
            c.hutch_binary(nobody_wrapper(t.path()));
        }
        let output = c.output().unwrap();
        assert!(output.report.success(), "{:?}", output.report);
        assert_eq!(output.stdout, b"hello from the image\n");
        let img = output.report.enforced.image.expect("image in the report");
        assert_eq!(img.manifest_digest, digest);
        assert!(img.pinned);
    }
}

/// A profile names the image as the issue writes it, `image = { digest,
/// platform }` (TOML): its system is the image's; a platform the image is
/// not for is refused in one line.
#[test]
fn a_profile_pins_the_image_by_digest_and_platform() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-profile", who);
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Tar)],
            &ImageSpec::default(),
            "bb",
            &[],
        );
        let status = t.path().join("status.jsonl");
        write_as(&status, "", who);
        let profile = |platform: &str| {
            let p = t
                .path()
                .join(format!("{}.toml", platform.replace('/', "-")));
            let text = format!(
                "command = [\"sh\", \"-c\", \"cat /etc/hello; pwd; test -e /usr || echo no-usr\"]\n\
                 image = {{ digest = \"{digest}\", platform = \"{platform}\", store = \"{}\" }}\n\
                 [[fs]]\nop = \"proc\"\ndest = \"/proc\"\n",
                store.display()
            );
            write_as(&p, &text, who);
            p.display().to_string()
        };
        let amd64 = profile("linux/amd64");
        let o = hutch_in(
            who,
            &ws,
            &[
                "run",
                "--quiet",
                "--profile",
                &amd64,
                "--status-file",
                status.to_str().unwrap(),
            ],
        );
        assert_eq!(
            ok(&o, "profile"),
            "hello from the image\n/\nno-usr\n",
            "{who:?}"
        );
        let img = exit_report(&status)["enforced"]["image"].clone();
        assert_eq!(img["manifest_digest"], digest.as_str());
        assert_eq!(img["platform"], "linux/amd64");
        let arm = profile("linux/arm64");
        let o = hutch_in(who, &ws, &["run", "--quiet", "--profile", &arm]);
        let e = refused(&o, "linux/arm64");
        assert!(e.contains(&digest), "{e}");
        // --image-store on the line applies to the profile's image.
        let o = hutch_in(
            who,
            &ws,
            &[
                "run",
                "--quiet",
                "--profile",
                &amd64,
                "--image-store",
                "/nonexistent/hutch-store",
            ],
        );
        refused(&o, "/nonexistent/hutch-store: does not exist");
    }
}

/// A store that is missing or damaged fails closed, in one line naming
/// what is wrong, before anything runs: no store is created by a run, a
/// layer whose metadata or tree is gone or replaced by a link is refused.
#[test]
fn a_missing_or_damaged_store_fails_closed() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-damaged", who);
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Tar)],
            &ImageSpec::default(),
            "bb",
            &[],
        );
        let marker = ws.join("ran");
        let run =
            |store: &Path| run_image(who, store, &ws, &["--image", &digest, "--", "touch", "ran"]);
        let missing = t.path().join("no-store");
        refused(&run(&missing), "does not exist");
        assert!(!missing.exists(), "a run created the store");

        let layer = store
            .join("layers")
            .join(&names_in(&store.join("layers"))[0]);
        let hex = layer.file_name().unwrap().to_str().unwrap().to_string();
        let meta = layer.join("meta.json");
        let saved = std::fs::read(&meta).unwrap();
        std::fs::write(&meta, "{\"digest\":").unwrap();
        refused(&run(&store), "meta.json");
        std::fs::write(&meta, &saved).unwrap();

        let root = layer.join("root");
        let aside = layer.join("root.aside");
        std::fs::rename(&root, &aside).unwrap();
        refused(
            &run(&store),
            &format!("layer sha256:{hex} has no unpacked tree"),
        );
        // A link in its place (to a tree that would run) is not followed.
        std::os::unix::fs::symlink(&aside, &root).unwrap();
        refused(
            &run(&store),
            &format!("layer sha256:{hex} has no unpacked tree"),
        );
        std::fs::remove_file(&root).unwrap();
        std::fs::rename(&aside, &root).unwrap();

        std::fs::remove_dir_all(&layer).unwrap();
        refused(
            &run(&store),
            &format!("layer sha256:{hex} of {digest} is missing"),
        );
        assert!(!marker.exists());
    }
}

/// A session created with `--image` runs every command on that image (its
/// files persisting in the session's workspace), records the pinned digest
/// in session.json, refuses a command naming another image, and keeps the
/// image from `image rm` until it is closed.
#[test]
fn a_session_created_with_an_image_uses_it_for_every_command() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        let t = TempDir::new("img-run-session", who);
        let (store, digest, ws) = image(
            &t,
            who,
            &[(busybox(), Comp::Tar)],
            &ImageSpec::default(),
            "bb",
            &[],
        );
        let state = t.path().join("state");
        std::fs::create_dir(&state).unwrap();
        give(&state, who);
        let (st, sto) = (state.to_str().unwrap(), store.to_str().unwrap());
        let session = |args: &[&str]| {
            let mut a = vec!["session", "--state-dir", st];
            a.extend_from_slice(args);
            hutch_in(who, t.path(), &a)
        };
        let named = format!("bb@{digest}");
        let o = session(&[
            "create",
            "--from",
            ws.to_str().unwrap(),
            "--image",
            &named,
            "--image-store",
            sto,
        ]);
        let id = ok(&o, "create").trim().to_string();
        let info: serde_json::Value =
            serde_json::from_slice(&std::fs::read(state.join(&id).join("session.json")).unwrap())
                .unwrap();
        assert_eq!(info["image"]["digest"], digest.as_str(), "{info}");
        assert_eq!(info["image"]["store"], sto, "{info}");
        assert_eq!(info["image"]["platform"], "linux/amd64", "{info}");

        let o = session(&[
            "run",
            &id,
            "--",
            "sh",
            "-c",
            "cat /etc/hello; pwd; cat input; echo kept > made; test -e /usr || echo no-usr",
        ]);
        assert_eq!(
            ok(&o, "first command"),
            "hello from the image\n/workspace\nfrom the workspace\nno-usr\n",
            "{who:?}"
        );
        let status = t.path().join("session-status.jsonl");
        write_as(&status, "", who);
        let o = session(&[
            "run",
            &id,
            "--status-file",
            status.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "cat made /etc/hello",
        ]);
        assert_eq!(ok(&o, "second command"), "kept\nhello from the image\n");
        let img = exit_report(&status)["enforced"]["image"].clone();
        assert_eq!(img["manifest_digest"], digest.as_str(), "{img}");
        assert_eq!(img["pinned"], true);

        let other = format!("sha256:{}", "1".repeat(64));
        let o = session(&["run", &id, "--image", &other, "--", "true"]);
        refused(&o, "cannot name another");

        let o = image_cmd(who, &store, &["rm", &digest]);
        assert!(!o.status.success(), "rm of a session's image: {}", out(&o));
        let o = session(&["close", &id]);
        ok(&o, "close");
        let o = image_cmd(who, &store, &["rm", &digest]);
        assert!(o.status.success(), "{}", err(&o));
        let o = image_cmd(who, &store, &["gc"]);
        assert!(o.status.success(), "{}", err(&o));
        assert!(names_in(&store.join("layers")).is_empty());
    }
}

/// The config's User: numeric or a name from the image's own /etc/passwd
/// and /etc/group. One id more than the single map needs a subordinate
/// range: without one the run is refused saying what to configure; with
/// one (an /etc/subuid and /etc/subgid seen only by this test, newuidmap
/// for uid 65534) the workload runs as that user, files keep their owners
/// and only the owner reads its 0600 file; `--uid/--gid` override the config.
#[test]
fn the_config_user_runs_through_a_subordinate_range() {
    for who in identities() {
        require!(
            have_busybox(),
            "busybox-static is needed for the image's shell"
        );
        require!(
            is_root(),
            "a private /etc/subuid needs a mount namespace made by root"
        );
        require!(have("newuidmap") && have("newgidmap"), "package uidmap");
        let t = TempDir::new("img-run-user", who);
        let layer = Tar::default()
            .busybox(TOOLS)
            .dir("etc")
            .file(
                "etc/passwd",
                "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n",
            )
            .file("etc/group", "root:x:0:\napp:x:1000:\n")
            .file("etc/root-only", "root's\n")
            .owned_dir("home", 0o755, 0, 0)
            .owned_dir("home/app", 0o755, 1000, 1000)
            .owned_file("home/app/mine", "mine\n", 0o600, 1000, 1000)
            .finish();
        for user in ["app", "1000:1000"] {
            let spec = ImageSpec {
                user: user.into(),
                ..ImageSpec::default()
            };
            let (store, digest, ws) =
                image(&t, who, &[(layer.clone(), Comp::Tar)], &spec, "usr", &[]);
            // `mine` is 0600: only its owner reads it.
            let script = "id -u; id -g; cat /etc/root-only; cat /home/app/mine; \
                          stat -c %u:%g /home/app/mine /etc/root-only";
            // No range configured: an unprivileged caller is refused,
            // naming /etc/subuid; root gets a private range (or its own
            // /etc/subuid range: tests/image_ids.rs makes sure of which).
            let o = run_image(
                who,
                &store,
                &ws,
                &["--image", &digest, "--", "sh", "-c", script],
            );
            if who == As::Nobody {
                refused(&o, "/etc/subuid");
            } else {
                assert!(ok(&o, "root without a range").starts_with("1000\n1000\n"));
            }
            // Unprivileged, --uid/--gid 0 needs no range: the caller's
            // files and the workload are all root inside. (A root import
            // keeps the owners 0 and 1000: a range either way.)
            if who == As::Nobody {
                let o = run_image(
                    who,
                    &store,
                    &ws,
                    &[
                        "--image", &digest, "--uid", "0", "--gid", "0", "--", "id", "-u",
                    ],
                );
                assert_eq!(ok(&o, "uid override"), "0\n");
            }

            let owner = if who == As::Root { "root" } else { "nobody" };
            let ranges = format!("{owner}:200000:65536\n");
            let store_s = store.display().to_string();
            let with_range = |tail: &[&str], scratch: &str| {
                let mut argv: Vec<String> = Vec::new();
                if who == As::Nobody {
                    argv.extend(
                        [
                            "setpriv",
                            "--reuid=65534",
                            "--regid=65534",
                            "--clear-groups",
                        ]
                        .map(String::from),
                    );
                }
                argv.push(hutch_bin().display().to_string());
                argv.extend(
                    [
                        "run",
                        "--quiet",
                        "--image-store",
                        &store_s,
                        "--image",
                        &digest,
                    ]
                    .map(String::from),
                );
                argv.extend(tail.iter().map(|a| a.to_string()));
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                let scratch = t
                    .path()
                    .join(format!("{scratch}-{}", user.replace(':', "-")));
                with_subids(&scratch, &ranges, &argv)
                    .current_dir(&ws)
                    .output()
                    .unwrap()
            };
            let o = with_range(&["--uid", "0", "--gid", "0", "--", "id", "-u"], "over");
            assert_eq!(ok(&o, "uid override in a range"), "0\n");
            let o = with_range(&["--", "sh", "-c", script], "user");
            // Root imports keep the archive's owners; an unprivileged
            // import's files are the caller's (root inside).
            let owners = if who == As::Root {
                "1000:1000\n0:0\n"
            } else {
                "0:0\n0:0\n"
            };
            if who == As::Root {
                assert_eq!(
                    ok(&o, "as the image's user"),
                    format!("1000\n1000\nroot's\nmine\n{owners}"),
                    "{user}"
                );
            } else {
                // The caller's files show as root's: the user reads what
                // everyone may, not what was the archive's user's own.
                assert_eq!(
                    ok(&o, "as the image's user"),
                    format!("1000\n1000\nroot's\n{owners}"),
                    "{user}"
                );
                assert!(err(&o).contains("Permission denied"), "{}", err(&o));
            }
            std::fs::remove_dir_all(&store).unwrap();
            std::fs::remove_dir_all(t.path().join("layout-usr")).unwrap();
        }
    }
}
