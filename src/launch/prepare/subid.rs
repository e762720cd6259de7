//! Subordinate id ranges (`/etc/subuid`, `/etc/subgid`) and the setuid
//! helpers that write them into a user namespace for an unprivileged
//! caller (`newuidmap`/`newgidmap`, package uidmap), as rootless podman
//! does. hutch only reads the files to learn the range; the helpers check
//! it again themselves, as root.

use std::io::Read;
use std::path::Path;

/// The largest `/etc/subuid`, `/etc/subgid` or `/etc/passwd` read.
const MAX_FILE: u64 = 1 << 20;

/// Where the helpers are looked for (never `PATH`).
const HELPER_DIRS: &[&str] = &["/usr/bin", "/usr/sbin", "/bin", "/sbin"];

/// One range of a subordinate id file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub start: u32,
    pub count: u32,
}

/// The first range `/etc/subuid` (`uid = true`) or `/etc/subgid` gives the
/// user `name` or numeric `id`.
pub(crate) fn range_for(file: &Path, name: Option<&str>, id: u32) -> Option<Range> {
    let text = read_small(file)?;
    let id = id.to_string();
    text.lines().find_map(|line| {
        let mut f = line.trim().split(':');
        let (owner, start, count) = (f.next()?, f.next()?, f.next()?);
        if f.next().is_some() || !(Some(owner) == name || owner == id) {
            return None;
        }
        let (start, count): (u32, u32) = (start.parse().ok()?, count.parse().ok()?);
        (count > 0 && start.checked_add(count - 1).is_some()).then_some(Range { start, count })
    })
}

/// Every well-formed range of `/etc/subuid` or `/etc/subgid`, anyone's.
pub(crate) fn all_ranges(file: &Path) -> Vec<Range> {
    let Some(text) = read_small(file) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut f = line.trim().split(':');
            let (_, start, count) = (f.next()?, f.next()?, f.next()?);
            let (start, count): (u32, u32) = (start.parse().ok()?, count.parse().ok()?);
            (count > 0).then_some(Range { start, count })
        })
        .collect()
}

/// The name of host user `uid` in `/etc/passwd` (the helpers match ranges
/// by name or number).
pub(crate) fn user_name(uid: u32) -> Option<String> {
    let text = read_small(Path::new("/etc/passwd"))?;
    let id = uid.to_string();
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 3 && f[2] == id).then(|| f[0].to_string())
    })
}

pub(crate) fn read_small(path: &Path) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(MAX_FILE).read_to_string(&mut text).ok()?;
    Some(text)
}

/// `newuidmap` or `newgidmap`, by absolute path.
pub(crate) fn helper(name: &str) -> Option<std::path::PathBuf> {
    HELPER_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Run `helper PID inside host count ...` with an empty environment;
/// its first stderr line on failure.
pub(crate) fn run_helper(
    helper: &Path,
    pid: libc::pid_t,
    extents: &[(u32, u32, u32)],
) -> Result<(), String> {
    let mut cmd = std::process::Command::new(helper);
    cmd.arg(pid.to_string());
    for (inside, host, count) in extents {
        cmd.args([inside.to_string(), host.to_string(), count.to_string()]);
    }
    let out = cmd
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| format!("{}: {e}", helper.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let first = String::from_utf8_lossy(&out.stderr);
    let first: String = first
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    Err(format!(
        "{} failed ({}): {first}",
        helper.display(),
        out.status
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_match_by_name_or_number() {
        let f = std::env::temp_dir().join(format!("hutch-subid-{}", std::process::id()));
        std::fs::write(
            &f,
            "alice:100000:65536\n65534:200000:1000\nbad:1:0\nodd:x:5\n",
        )
        .unwrap();
        assert_eq!(
            range_for(&f, Some("alice"), 1000),
            Some(Range {
                start: 100000,
                count: 65536
            })
        );
        assert_eq!(
            range_for(&f, Some("nobody"), 65534),
            Some(Range {
                start: 200000,
                count: 1000
            })
        );
        assert_eq!(range_for(&f, Some("bad"), 1), None);
        assert_eq!(range_for(&f, Some("odd"), 2), None);
        assert_eq!(range_for(&f.with_extension("none"), Some("alice"), 1), None);
        std::fs::remove_file(&f).unwrap();
    }
}
