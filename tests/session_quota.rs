//! Disk quotas of a session's writable layers (issue 13 §2, decision
//! 0004): as root a hard cap the kernel enforces (ENOSPC inside, the
//! report names the limit); unprivileged a required quota fails closed
//! and a preferred one is accounted, refusing commands once over it until
//! files are removed.

mod common;
mod session_prod_support;
mod session_support;

use anyhow::Result;
use session_prod_support::*;

use crate::common::{can_launch_as, exit_report, have};

fn src_dir(w: &World) -> Result<std::path::PathBuf> {
    let src = w.path("src");
    std::fs::create_dir(&src)?;
    std::fs::write(src.join("a.txt"), "a\n")?;
    if w.who.drops_to_nobody() {
        chown_nobody(&src);
    }
    Ok(src)
}

/// `--disk-max 64M` as root: writing 100 MB fails with ENOSPC inside the
/// sandbox, the exit report says `disk-limit-hit` naming the limit, the
/// image takes no more host disk than the quota, `show` reports the use,
/// and removing the file frees it. `close` unmounts and detaches it.
#[test]
fn disk_max_is_a_hard_cap_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    require!(
        std::path::Path::new("/dev/loop-control").exists() && have("mkfs.ext4"),
        "needs loop devices and mkfs.ext4 (e2fsprogs)"
    );
    let w = World::new("quota-root", As::Root);
    let src = src_dir(&w)?;
    let id = w.create(&["--from", src.to_str().unwrap(), "--disk-max", "64M"])?;
    let status = w.path("status.jsonl");
    let o = w.session(&[
        "run",
        &id,
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "dd if=/dev/zero of=big bs=1M count=100 2>&1; echo dd=$?",
    ]);
    let out = stdout(&o);
    assert!(out.contains("No space left on device"), "{out}");
    assert!(out.contains("dd=1"), "{out}");
    let report = exit_report(&status);
    assert_eq!(report["reason"], "disk-limit-hit", "{report}");
    let error = report["error"].as_str().unwrap_or("");
    assert!(error.contains("64M") && error.contains("ENOSPC"), "{error}");
    assert!(stderr(&o).contains("disk limit (64M)"), "{}", stderr(&o));
    let image = std::fs::metadata(w.state.join(&id).join("disk.img"))?;
    assert_eq!(image.len(), 64 << 20);
    assert!(std::os::unix::fs::MetadataExt::blocks(&image) * 512 <= 64 << 20);
    let show: serde_json::Value = serde_json::from_str(&ok(&w.session(&["show", &id, "--json"]))?)?;
    let usage = &show["result"]["disk_usage"];
    assert_eq!(usage["limit_hit"], true, "{usage}");
    assert!(usage["used_bytes"].as_u64().unwrap() > 40 << 20, "{usage}");
    assert_eq!(show["result"]["disk"]["mechanism"], "loop-ext4");
    // Inside the cap, commands still run (the kernel enforces it): one
    // frees the space.
    ok(&w.session(&["run", &id, "--", "rm", "big"]))?;
    let show: serde_json::Value = serde_json::from_str(&ok(&w.session(&["show", &id, "--json"]))?)?;
    assert_eq!(show["result"]["disk_usage"]["limit_hit"], false);
    let audit = w.audit(&id)?;
    assert!(
        audit
            .iter()
            .filter(|l| l["event"] == "command")
            .all(|l| l["disk"]["used_bytes"].is_u64()),
        "every command records the disk use"
    );
    let mount_point = w.state.join(&id).join("disk");
    ok(&w.session(&["close", &id]))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    assert!(!mounts.contains(mount_point.to_str().unwrap()), "unmounted");
    Ok(())
}

/// Unprivileged, a required `--disk-max` cannot be enforced: refused with
/// one line naming the alternative, nothing created.
#[test]
fn disk_max_unprivileged_fails_closed() -> Result<()> {
    require!(can_launch_as(As::Nobody).is_ok(), "needs setpriv");
    let w = World::new("quota-req", As::Nobody);
    let src = src_dir(&w)?;
    let o = w.session(&[
        "create",
        "--from",
        src.to_str().unwrap(),
        "--disk-max",
        "64M",
    ]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--disk-max needs root") && err.contains("--disk-max-preferred"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&w.state)?.count(), 0);
    Ok(())
}

/// Unprivileged `--disk-max-preferred`: the command that goes over is
/// reported `disk-limit-hit`, the next one is refused (and audited) until
/// `session rm` frees the space.
#[test]
fn disk_max_preferred_refuses_the_next_command_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    let w = World::new("quota-pref", As::Nobody);
    let src = src_dir(&w)?;
    let id = w.create(&[
        "--from",
        src.to_str().unwrap(),
        "--disk-max-preferred",
        "20M",
    ])?;
    let status = w.path("status.jsonl");
    let o = w.session(&[
        "run",
        &id,
        "--status-file",
        status.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "mkdir -p out && dd if=/dev/zero of=out/big bs=1M count=30 2>/dev/null",
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report = exit_report(&status);
    assert_eq!(report["reason"], "disk-limit-hit", "{report}");
    assert!(
        report["error"].as_str().unwrap().contains("20M"),
        "{report}"
    );
    let o = w.session(&["run", &id, "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("disk limit") && err.contains("session rm"),
        "{err}"
    );
    assert!(w.audit(&id)?.iter().any(|l| l["event"] == "refused"));
    ok(&w.session(&["rm", &id, "out"]))?;
    ok(&w.session(&["run", &id, "--", "true"]))?;
    let show: serde_json::Value = serde_json::from_str(&ok(&w.session(&["show", &id, "--json"]))?)?;
    assert_eq!(show["result"]["disk"]["mechanism"], "accounted");
    assert_eq!(show["result"]["disk_usage"]["limit_hit"], false);
    ok(&w.session(&["close", &id]))?;
    Ok(())
}
