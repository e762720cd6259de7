//! hutch locks nested user namespaces in a sandbox's own user namespace
//! (`user.max_user_namespaces = 0` there; bwrap's `--disable-userns`
//! promises the same). A workload holding CAP_SYS_RESOURCE in that
//! namespace could write the sysctl back through any procfs it reaches
//! (with CAP_SYS_ADMIN, after unmounting a read-only cover) and create
//! nested user namespaces again (issue 33, item 15). Every front end is
//! tried with the capabilities that would do it: hutch-bwrap, `hutch run`
//! and hutch-oci. Either the launch is refused, naming CAP_SYS_RESOURCE, or
//! the sandbox runs and its nested user namespace still fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{As, TempDir, identities, own_as, stderr, stdout};

/// Unmount a read-only cover of /proc/sys (CAP_SYS_ADMIN), raise the
/// limit (CAP_SYS_RESOURCE), then try a nested user namespace.
const ESCAPE_PY: &str = r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.umount2(b"/proc/sys", 2)
try:
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("100")
    print("raised")
except OSError as e:
    print("write:", e.strerror)
if libc.unshare(0x10000000) == 0:
    print("ESCAPED")
else:
    print("unshare failed:", ctypes.get_errno())
"#;

/// Either refused with a line naming CAP_SYS_RESOURCE, or run with the
/// nested user namespace still refused.
fn assert_lock_held(what: &str, out: &Output) {
    let (o, e) = (stdout(out), stderr(out));
    assert!(
        !o.contains("ESCAPED"),
        "{what}: the workload undid the lock on nested user namespaces:\n{o}{e}"
    );
    let ran = o.contains("unshare failed");
    let refused = !out.status.success() && e.contains("CAP_SYS_RESOURCE");
    assert!(
        ran || refused,
        "{what}: neither ran nor refused clearly: {:?}\n{o}{e}",
        out.status
    );
}

fn as_who(program: &Path, who: As) -> Command {
    if who.drops_to_nobody() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(program);
        c
    } else {
        Command::new(program)
    }
}

#[test]
fn bwrap_cap_sys_resource_cannot_undo_the_userns_lock() {
    let bwrap = PathBuf::from(env!("CARGO_BIN_EXE_hutch-bwrap"));
    for who in identities() {
        for args in [
            // The host's /proc (no pid namespace), writable to the sandbox.
            &[
                "--unshare-user",
                "--disable-userns",
                "--cap-add",
                "CAP_SYS_RESOURCE",
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
            ][..],
            // A procfs of its own, /proc/sys covered read-only.
            &[
                "--unshare-user",
                "--unshare-pid",
                "--cap-add",
                "ALL",
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
            ],
            // The host's /proc through a writable bind of /.
            &["--unshare-user", "--cap-add", "ALL", "--bind", "/", "/"],
        ] {
            let out = as_who(&bwrap, who)
                .args(args)
                .args(["--", "python3", "-c", ESCAPE_PY])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert_lock_held(&format!("hutch-bwrap {args:?} as {who:?}"), &out);
        }
    }
}

#[test]
fn hutch_run_cap_sys_resource_cannot_undo_the_userns_lock() {
    for who in identities() {
        let dir = TempDir::new("userns-lock-run", who);
        // Without Landlock (which forbids unmounting) and seccomp.
        let mut spec = hutch::spec::default_profile();
        spec.security.landlock.enabled = false;
        spec.security.seccomp = "unconfined".into();
        let profile = dir.path().join("profile.json");
        common::write_as(&profile, &serde_json::to_string(&spec).unwrap(), who);
        for caps in [
            &["--cap-add", "ALL"][..],
            &["--cap-add", "CAP_SYS_RESOURCE"],
        ] {
            let out = common::hutch_command(who)
                .current_dir(dir.path())
                .args(["run", "--quiet", "--profile"])
                .arg(&profile)
                .args(caps)
                .args(["--", "python3", "-c", ESCAPE_PY])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let what = format!("hutch run {caps:?} as {who:?}");
            assert_lock_held(&what, &out);
            if !out.status.success() {
                assert_eq!(out.status.code(), Some(125), "{what}: {}", stderr(&out));
            }
        }
    }
}

#[test]
fn oci_cap_sys_resource_cannot_undo_the_userns_lock() {
    let who = As::Root;
    require!(
        common::can_launch_as(who).is_ok(),
        common::can_launch_as(who).unwrap_err()
    );
    require!(
        Path::new("/bin/busybox").exists(),
        "busybox-static builds the rootfs"
    );
    let dir = TempDir::new("userns-lock-oci", who);
    let bin = dir.path().join("rootfs/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(dir.path().join("rootfs/proc")).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
    for applet in ["sh", "echo", "unshare", "umount"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    own_as(dir.path(), who);
    let caps = serde_json::json!(["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"]);
    let map = serde_json::json!([{"containerID": 0, "hostID": 0, "size": 1}]);
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "args": ["sh", "-c",
                "umount /proc/sys 2>/dev/null; echo 100 > /proc/sys/user/max_user_namespaces; \
                 if unshare -U true; then echo ESCAPED; else echo unshare failed; fi"],
            "env": ["PATH=/bin"],
            "cwd": "/",
            "user": {"uid": 0, "gid": 0},
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "user"}],
            "uidMappings": map,
            "gidMappings": map,
            // An engine's permissive profile (hutch's default one would
            // refuse the unshare on its own).
            "seccomp": {
                "defaultAction": "SCMP_ACT_ALLOW",
                "architectures": ["SCMP_ARCH_X86_64"],
                "syscalls": [{"names": ["kexec_load"], "action": "SCMP_ACT_ERRNO"}]
            }
        }
    });
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();
    let id = format!("userns-lock-{}", std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_hutch-oci"))
        .arg("--root")
        .arg(dir.path().join("state"))
        .args(["run", "--bundle"])
        .arg(dir.path())
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = Command::new(env!("CARGO_BIN_EXE_hutch-oci"))
        .arg("--root")
        .arg(dir.path().join("state"))
        .args(["delete", "--force", &id])
        .output();
    assert_lock_held("hutch-oci run", &out);
}
