//! `hutch check` explains failures: run it inside environments that
//! restrict what it needs (built with bubblewrap, as container runtimes
//! do) and check the verdict, the cause and the fix it prints.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use serde_json::Value;

fn have_bwrap() -> bool {
    Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-user", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The binary in a fresh 0755 directory (reachable whatever the sandbox).
struct Reachable(PathBuf);

impl Reachable {
    fn new(tag: &str) -> Result<Reachable> {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("hutch-diag-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        std::fs::copy(env!("CARGO_BIN_EXE_hutch"), dir.join("hutch"))?;
        std::fs::set_permissions(dir.join("hutch"), std::fs::Permissions::from_mode(0o755))?;
        Ok(Reachable(dir))
    }
}

impl Drop for Reachable {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `hutch check --json` under `bwrap ARGS`; with `seccomp`, that BPF
/// file is installed by bwrap as the sandbox's seccomp filter.
fn check_in_bwrap(tag: &str, args: &[&str], seccomp: Option<&Path>) -> Result<(Value, i32)> {
    let bin = Reachable::new(tag)?;
    // bwrap reads the filter from an fd: let a shell open it as fd 3.
    let mut cmd = Command::new("sh");
    cmd.arg("-c");
    match seccomp {
        Some(_) => cmd.arg(r#"f=$1; shift; exec bwrap --seccomp 3 "$@" 3<"$f""#),
        None => cmd.arg(r#"shift; exec bwrap "$@""#),
    };
    cmd.arg("sh")
        .arg(seccomp.unwrap_or(Path::new("-")))
        .args(["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"])
        .args(args)
        .arg(bin.0.join("hutch"))
        .args(["check", "--json"])
        .current_dir(&bin.0);
    let out = cmd.output().context("running bwrap")?;
    let v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("no JSON; stderr: {}", String::from_utf8_lossy(&out.stderr)))?;
    Ok((v, out.status.code().unwrap_or(-1)))
}

fn feature<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["features"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["name"] == name))
        .unwrap_or(&Value::Null)
}

#[test]
fn nested_user_namespace_limit_is_explained() -> Result<()> {
    require!(
        have_bwrap(),
        "bubblewrap with user namespaces is not available"
    );
    // bwrap --disable-userns sets user.max_user_namespaces=1 in its own
    // user namespace: like a container that forbids nesting.
    let (v, code) = check_in_bwrap("nested", &["--unshare-user", "--disable-userns"], None)?;
    let userns = feature(&v, "user_namespace");
    assert_eq!(userns["status"], "restricted", "{userns}");
    let detail = userns["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("unshare(CLONE_NEWUSER) => ENOSPC"),
        "{detail}"
    );
    assert!(detail.contains("nested user namespaces"), "{detail}");
    assert!(userns["fix"].as_str().is_some_and(|f| !f.is_empty()));
    // Everything built on a user namespace points back to it.
    for name in [
        "mount_namespace",
        "overlay_userns",
        "pid_namespace",
        "net_namespace",
    ] {
        let f = feature(&v, name);
        assert_eq!(f["ok"], Value::Bool(false), "{f}");
        assert_eq!(f["fix"], "see user_namespace", "{f}");
    }
    // Features that need no namespace still work.
    assert_eq!(feature(&v, "seccomp")["ok"], Value::Bool(true));
    assert_eq!(feature(&v, "openat2")["ok"], Value::Bool(true));
    assert_eq!(v["host"]["in_user_namespace"], Value::Bool(true));
    assert_eq!(v["ok"], Value::Bool(false));
    assert_eq!(code, 1);
    Ok(())
}

/// A classic BPF program (x86-64 syscall numbers, no arch check: test
/// only) that answers EPERM for unshare and ENOSYS for clone3, as
/// container runtimes' default profiles do.
#[cfg(target_arch = "x86_64")]
fn container_like_filter(path: &Path) -> Result<()> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const ERRNO: u32 = 0x0005_0000;
    let prog: [(u16, u8, u8, u32); 6] = [
        (LD_W_ABS, 0, 0, 0),                        // A = seccomp_data.nr
        (JEQ_K, 0, 1, libc::SYS_unshare as u32),    // unshare?
        (RET_K, 0, 0, ERRNO | libc::EPERM as u32),  //   -> EPERM
        (JEQ_K, 0, 1, libc::SYS_clone3 as u32),     // clone3?
        (RET_K, 0, 0, ERRNO | libc::ENOSYS as u32), //   -> ENOSYS
        (RET_K, 0, 0, 0x7fff_0000),                 // allow
    ];
    let mut bytes = Vec::new();
    for (code, jt, jf, k) in prog {
        bytes.extend(code.to_ne_bytes());
        bytes.extend([jt, jf]);
        bytes.extend(k.to_ne_bytes());
    }
    std::fs::write(path, bytes)?;
    Ok(())
}

#[cfg(target_arch = "x86_64")]
#[test]
fn container_seccomp_profile_is_explained() -> Result<()> {
    require!(
        have_bwrap(),
        "bubblewrap with user namespaces is not available"
    );
    let bpf = std::env::temp_dir().join(format!("hutch-diag-{}.bpf", std::process::id()));
    container_like_filter(&bpf)?;
    let res = check_in_bwrap("seccomp", &["--unshare-user"], Some(&bpf));
    let _ = std::fs::remove_file(&bpf);
    let (v, code) = res?;
    assert_eq!(v["host"]["under_seccomp"], Value::Bool(true));
    let userns = feature(&v, "user_namespace");
    assert_eq!(userns["status"], "restricted", "{userns}");
    let detail = userns["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("unshare(CLONE_NEWUSER) => EPERM"),
        "{detail}"
    );
    assert!(detail.contains("seccomp"), "{detail}");
    assert!(
        userns["fix"]
            .as_str()
            .unwrap_or("")
            .contains("seccomp=unconfined"),
        "{userns}"
    );
    let clone3 = feature(&v, "clone3");
    assert_eq!(clone3["status"], "missing", "{clone3}");
    let detail = clone3["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("clone3(CLONE_PIDFD) => ENOSYS"),
        "{detail}"
    );
    assert!(detail.contains("seccomp filter"), "{detail}");
    // pidfd_open is not filtered and still works.
    assert_eq!(feature(&v, "pidfd")["ok"], Value::Bool(true));
    assert_eq!(code, 1);
    Ok(())
}
