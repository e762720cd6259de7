//! Where the sandbox's leaf would go and which controllers it can have.
//! Reads only; [`super::prepare`] acts on the answer and `hutch check`
//! prints it.

use std::path::Path;

use super::host::{HostCgroups, Layout};
use super::tree::{Cgroup, common_ancestor};

/// Child cgroup that takes hutch's own processes out of a delegated cgroup
/// so controllers can be enabled there (the "no internal processes" rule).
pub const SUPERVISOR: &str = "hutch-supervisor";

/// The controllers hutch uses.
pub const CONTROLLERS: &[&str] = &["memory", "pids", "cpu", "io"];

/// A usable parent for sandbox leaves.
#[derive(Debug, Clone)]
pub struct Place {
    pub parent: Cgroup,
    /// The parent holds processes (hutch's own cgroup): move them into
    /// `parent/hutch-supervisor` before enabling controllers.
    pub evacuate: bool,
    pub root: bool,
}

/// Why there is no usable parent.
#[derive(Debug, Clone)]
pub struct NoPlace {
    /// What hutch found.
    pub found: String,
    /// How to fix it.
    pub fix: String,
    /// The user named the parent (`--cgroup-parent`): always an error.
    pub explicit: bool,
}

fn fix_text(layout: Layout) -> String {
    let mut s = String::from(
        "run under a delegated cgroup v2 tree, e.g. `systemd-run --user --scope -p Delegate=yes hutch ...`",
    );
    if matches!(layout, Layout::Hybrid | Layout::Legacy) {
        s.push_str(", or boot with systemd.unified_cgroup_hierarchy=1");
    } else {
        s.push_str(", or set limits.cgroup_parent to a cgroup v2 directory you may write");
    }
    s
}

/// `offers only hugetlb` / `offers no controllers`.
pub fn offers(cg: &Cgroup) -> String {
    let c = cg.controllers();
    if c.is_empty() {
        format!("{} offers no controllers", cg.dir.display())
    } else {
        format!("{} offers only {}", cg.dir.display(), c.join(" "))
    }
}

/// Find where leaves go: `explicit` (`--cgroup-parent`), else this
/// process's own cgroup when it is delegated to us.
pub fn find_place(host: &HostCgroups, explicit: Option<&Path>) -> Result<Place, NoPlace> {
    let Some(mount) = host.v2_mount.as_deref() else {
        return Err(NoPlace {
            found: format!(
                "{} layout, no cgroup2 filesystem mounted",
                host.layout.name()
            ),
            fix: fix_text(host.layout),
            explicit: explicit.is_some(),
        });
    };
    if let Some(dir) = explicit {
        return explicit_place(host, mount, dir);
    }
    let Some(own) = host.own.as_deref() else {
        return Err(NoPlace {
            found: "/proc/self/cgroup names no cgroup v2 path".into(),
            fix: fix_text(host.layout),
            explicit: false,
        });
    };
    if host.layout != Layout::Unified {
        return Err(NoPlace {
            found: format!(
                "{} layout, {}",
                host.layout.name(),
                offers(&Cgroup::new(mount))
            ),
            fix: fix_text(host.layout),
            explicit: false,
        });
    }
    let mut cand = Cgroup::new(own);
    // A previous run already moved us into the supervisor child: its
    // parent is the delegated cgroup.
    if cand.name() == SUPERVISOR
        && let Some(p) = cand.parent()
        && p.dir.starts_with(mount)
    {
        cand = p;
    }
    let root = host.is_root(&cand.dir);
    delegated(host, &cand, root).map_err(|found| NoPlace {
        found,
        fix: fix_text(host.layout),
        explicit: false,
    })?;
    let evacuate = !root && !cand.procs().is_empty();
    Ok(Place {
        parent: cand,
        evacuate,
        root,
    })
}

fn explicit_place(host: &HostCgroups, mount: &Path, dir: &Path) -> Result<Place, NoPlace> {
    let fix = "pass a directory inside the cgroup2 mount that you may write (a delegated subtree)";
    let bad = |found: String| NoPlace {
        found,
        fix: fix.into(),
        explicit: true,
    };
    if !dir.starts_with(mount) {
        return Err(bad(format!(
            "not inside the cgroup2 mount {}",
            mount.display()
        )));
    }
    if !dir.is_dir() {
        return Err(bad("no such cgroup directory".into()));
    }
    let cg = Cgroup::new(dir);
    let root = host.is_root(dir);
    if host.uid != 0 {
        for f in ["cgroup.procs", "cgroup.subtree_control"] {
            if !cg.writable(f) {
                return Err(bad(format!("{f} is not writable by uid {}", host.uid)));
            }
        }
        if !cg.dir_writable() {
            return Err(bad(format!("not writable by uid {}", host.uid)));
        }
        // CLONE_INTO_CGROUP moves the child from our cgroup into the leaf:
        // the kernel wants write access to the common ancestor's procs.
        if let Some(own) = host.own.as_deref() {
            let anc = Cgroup::new(common_ancestor(own, dir));
            if !anc.writable("cgroup.procs") {
                return Err(NoPlace {
                    found: format!(
                        "hutch runs in {} and the nearest common ancestor {} is not writable by uid {}, so the kernel refuses to move the sandbox into it",
                        own.display(),
                        anc.dir.display(),
                        host.uid
                    ),
                    fix: "start hutch from inside the delegated tree, e.g. `systemd-run --user --scope -p Delegate=yes hutch ...`".into(),
                    explicit: true,
                });
            }
        }
    }
    let evacuate = !root && host.own.as_deref() == Some(dir) && !cg.procs().is_empty();
    Ok(Place {
        parent: cg,
        evacuate,
        root,
    })
}

/// Is `cg` ours to manage? For an unprivileged user: writable. For root
/// (who can write anything): the root of the mount (a container's or VM's
/// own tree) or marked delegated by systemd.
fn delegated(host: &HostCgroups, cg: &Cgroup, root: bool) -> Result<(), String> {
    if host.uid != 0 {
        let ok = cg.dir_writable()
            && cg.writable("cgroup.procs")
            && cg.writable("cgroup.subtree_control");
        return if ok {
            Ok(())
        } else {
            Err(format!(
                "{} is not delegated to uid {} (not writable)",
                cg.dir.display(),
                host.uid
            ))
        };
    }
    if root {
        return Ok(());
    }
    for attr in ["trusted.delegate", "user.delegate"] {
        if crate::sys::has_xattr(&cg.dir, attr).unwrap_or(false) {
            return Ok(());
        }
    }
    Err(format!(
        "{} is managed by systemd and not delegated (no trusted.delegate xattr)",
        cg.dir.display()
    ))
}

/// Can a leaf under `place` get `controller`? Err says what hutch found.
pub fn controller_status(
    host: &HostCgroups,
    place: &Place,
    controller: &str,
) -> Result<(), String> {
    let p = &place.parent;
    if !p.controllers().iter().any(|c| c == controller) {
        return Err(format!("{} layout, {}", host.layout.name(), offers(p)));
    }
    if p.subtree_control().iter().any(|c| c == controller) {
        return Ok(());
    }
    if !place.root && !place.evacuate && !p.procs().is_empty() {
        return Err(format!(
            "{} holds processes, and the no-internal-processes rule forbids enabling controllers for its children",
            p.dir.display()
        ));
    }
    Ok(())
}
