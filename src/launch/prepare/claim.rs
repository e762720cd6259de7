//! Claiming a warm sandbox: what a command brings to a sandbox that was
//! built before the command was known, and what it must not change.
//!
//! A Spec splits in two. Its **shape** ([`shape`]) is everything that makes
//! the sandbox what it is: the mount plan, namespaces, ids, confinement,
//! the resource limits of the cgroup leaf and the rlimits, the network and
//! the egress policy. A warm sandbox is built from a shape and serves only
//! a command of that exact shape ([`shape_digest`] is compared by whoever
//! hands sandboxes out and again by the sandbox's supervisor). The
//! **command** ([`ClaimCommand`]) is what may differ between commands
//! served by one pool, because it does not change the sandbox: argv, the
//! environment, the working directory, the wall clock and the output cap
//! (enforced by the supervisor), where the egress proxy's audit goes, and
//! the labels (the command's record in the runtime registry).
//! A command whose shape differs (an extra bind, another limit, other
//! egress) is served by a pool of its own shape or launched cold, never
//! by a sandbox built for something else.
//!
//! When a sandbox is claimed, its supervisor turns the command into a
//! [`WireCommand`] (execve candidates found in the supervisor, as for a
//! cold launch) and sends it to hutch init with the workload's stdio fds;
//! init mounts the staged writable overlays (`fs::claim`) and starts the
//! workload exactly as a cold launch does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::spec::{ByteSize, Duration, FsOp, Network, Spec, SpecError};

/// What a command brings when it claims a warm sandbox: the parts of a
/// Spec that do not change the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimCommand {
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// The Spec's `unset_env`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub unset_env: BTreeSet<String>,
    pub cwd: Option<PathBuf>,
    /// The command's wall-clock limit (from the claim on).
    pub wall_clock: Option<Duration>,
    /// The command's output cap.
    pub output_bytes: Option<ByteSize>,
    /// Network mode `proxy`: the egress proxy's audit log for this command.
    pub proxy_audit: Option<PathBuf>,
    /// The command's labels (its record in the runtime registry).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl ClaimCommand {
    /// The command part of `spec`.
    pub fn of(spec: &Spec) -> ClaimCommand {
        ClaimCommand {
            command: spec.command.clone(),
            env: spec.env.clone(),
            unset_env: spec.unset_env.clone(),
            cwd: spec.cwd.clone(),
            wall_clock: spec.limits.wall_clock,
            output_bytes: spec.limits.output_bytes,
            proxy_audit: match &spec.network {
                Network::Proxy(p) => p.audit.clone(),
                _ => None,
            },
            labels: spec.labels.clone(),
        }
    }

    /// The whole Spec: `shape` (as [`shape`] made it) with this command.
    pub fn apply(&self, shape: &Spec) -> Spec {
        let mut spec = shape.clone();
        spec.command = self.command.clone();
        spec.env = self.env.clone();
        spec.unset_env = self.unset_env.clone();
        spec.cwd = self.cwd.clone();
        spec.limits.wall_clock = self.wall_clock;
        spec.limits.output_bytes = self.output_bytes;
        spec.labels = self.labels.clone();
        if let Network::Proxy(p) = &mut spec.network {
            p.audit = self.proxy_audit.clone();
        }
        spec
    }
}

/// `spec` without its command part: what a warm sandbox is built from.
pub fn shape(spec: &Spec) -> Spec {
    ClaimCommand::default().apply(spec)
}

/// The sha256 (hex) of [`shape`]'s JSON: equal for two Specs exactly when
/// one's warm sandbox may serve the other's command.
pub fn shape_digest(spec: &Spec) -> String {
    let json = serde_json::to_vec(&shape(spec)).expect("a Spec serializes");
    hex::encode(Sha256::digest(&json))
}

/// The fs operations a warm sandbox mounts at claim time: every writable
/// overlay (its upper may be shared with other sandboxes of the pool, and
/// its lowers may change until the command starts).
pub fn claim_overlays(spec: &Spec) -> Vec<usize> {
    spec.fs
        .iter()
        .enumerate()
        .filter(|(_, op)| matches!(op, FsOp::Overlay { .. } | FsOp::TmpOverlay { .. }))
        .map(|(i, _)| i)
        .collect()
}

/// Whether a warm sandbox can be built from `spec`: an overlay mounted at
/// claim time comes after every other operation, so no later operation
/// may be inside it (a tmpfs at `/workspace/target` after the workspace)
/// or above it, and it cannot be the root.
pub fn warmable(spec: &Spec) -> Result<(), SpecError> {
    if spec.image.is_some() {
        return Err(SpecError::new(
            "image",
            "warm sandboxes of an image are not supported yet (its config fills the command part); launch it cold",
        ));
    }
    // A claim carries stdio only, and hutch init of a ready sandbox has
    // already closed every other fd and made its session: serving these
    // warm would silently drop the fds or the caller's terminal.
    if !spec.inherit_fds.is_empty() || spec.inherit_open_fds {
        return Err(SpecError::new(
            "inherit_fds",
            "a warm sandbox cannot pass the launcher's fds through (a claim carries stdio only); launch it cold",
        ));
    }
    if spec.init == crate::spec::Init::None {
        return Err(SpecError::new(
            "init",
            "a warm sandbox's hutch init waits for the claim and starts its command; init = \"none\" (the command as pid 1) needs a cold launch",
        ));
    }
    if spec.namespaces.join.user_after_setup.is_some() {
        return Err(SpecError::new(
            "namespaces.join.user_after_setup",
            "a warm sandbox is served from a pool of one user namespace; entering another after setup needs a cold launch",
        ));
    }
    if !spec.new_session {
        return Err(SpecError::new(
            "new_session",
            "a warm sandbox always runs its command in a session of its own; launch it cold to keep the caller's",
        ));
    }
    for i in claim_overlays(spec) {
        let dest = spec.fs[i].dest();
        if dest.parent().is_none() {
            return Err(SpecError::new(
                format!("fs[{i}]"),
                "a warm sandbox cannot mount a writable overlay at / (launch it cold)",
            ));
        }
        for (j, later) in spec.fs.iter().enumerate().skip(i + 1) {
            let other = later.dest();
            if other.starts_with(dest) || dest.starts_with(other) {
                return Err(SpecError::new(
                    format!("fs[{j}]"),
                    format!(
                        "a warm sandbox mounts the overlay fs[{i}] ({}) when a command claims it, \
                         after every other operation, so fs[{j}] ({} {}) cannot be inside or above it \
                         (move it before fs[{i}], or launch cold)",
                        dest.display(),
                        later.name(),
                        other.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Limit, default_profile, workspace_overlay};
    use std::path::Path;

    fn session_like() -> Spec {
        let mut s = default_profile();
        s.fs.push(FsOp::Overlay {
            lowers: vec!["/s/baseline/tree".into()],
            upper: "/s/upper".into(),
            work: "/s/work".into(),
            dest: "/workspace".into(),
        });
        s
    }

    /// The command part moves freely; anything that changes the sandbox
    /// changes the shape.
    #[test]
    fn the_shape_holds_what_changes_the_sandbox() {
        let base = session_like();
        let mut cmd = base.clone();
        cmd.command = vec!["make".into(), "test".into()];
        cmd.env.insert("X".into(), "1".into());
        cmd.cwd = Some("/workspace/sub".into());
        cmd.limits.wall_clock = Some(Duration(std::time::Duration::from_secs(7)));
        cmd.limits.output_bytes = Some(ByteSize(10));
        assert_eq!(shape_digest(&base), shape_digest(&cmd));
        assert_eq!(ClaimCommand::of(&cmd).apply(&shape(&cmd)), cmd);

        type Change = Box<dyn Fn(&mut Spec)>;
        let changed: Vec<Change> = vec![
            Box::new(|s| {
                s.fs.insert(
                    0,
                    FsOp::RoBind {
                        src: "/srv".into(),
                        dest: "/srv".into(),
                        optional: false,
                    },
                )
            }),
            Box::new(|s| s.limits.memory = Some(Limit::Required(ByteSize(1 << 28)))),
            Box::new(|s| {
                s.limits.rlimits.insert("nofile".into(), 64);
            }),
            Box::new(|s| s.network = Network::Host),
            Box::new(|s| s.security.seccomp = "unconfined".into()),
            Box::new(|s| s.identity.uid = Some(1000)),
            Box::new(|s| s.security.landlock.enabled = !s.security.landlock.enabled),
        ];
        for (i, change) in changed.iter().enumerate() {
            let mut other = base.clone();
            change(&mut other);
            assert_ne!(shape_digest(&base), shape_digest(&other), "change {i}");
        }
    }

    #[test]
    fn writable_overlays_mount_at_claim_and_must_come_last_in_their_subtree() {
        let s = session_like();
        assert_eq!(claim_overlays(&s), vec![s.fs.len() - 1]);
        assert_eq!(warmable(&s), Ok(()));
        let mut inside = s.clone();
        inside.fs.push(FsOp::Tmpfs {
            dest: "/workspace/target".into(),
            size: None,
            nr_inodes: None,
            mode: None,
        });
        let e = warmable(&inside).unwrap_err();
        assert_eq!(e.path, format!("fs[{}]", inside.fs.len() - 1));
        assert!(e.message.contains("inside or above"), "{e}");
        let mut above = default_profile();
        above.fs.push(workspace_overlay(Path::new("/w/x"), None));
        above.fs.push(FsOp::Dir {
            dest: "/w".into(),
            mode: None,
        });
        assert!(warmable(&above).is_err());
        let mut beside = default_profile();
        beside.fs.push(workspace_overlay(Path::new("/w/x"), None));
        beside.fs.push(FsOp::Dir {
            dest: "/w/xy".into(),
            mode: None,
        });
        assert_eq!(warmable(&beside), Ok(()));
        let mut root = Spec::default();
        root.fs.push(workspace_overlay(Path::new("/"), None));
        assert!(warmable(&root).is_err());
    }

    #[test]
    fn passed_fds_and_the_callers_session_are_not_served_warm() {
        let s = session_like();
        let mut fds = s.clone();
        fds.inherit_fds = vec![5];
        assert_eq!(warmable(&fds).unwrap_err().path, "inherit_fds");
        let mut open = s.clone();
        open.inherit_open_fds = true;
        assert_eq!(warmable(&open).unwrap_err().path, "inherit_fds");
        let mut pid1 = s.clone();
        pid1.init = crate::spec::Init::None;
        assert_eq!(warmable(&pid1).unwrap_err().path, "init");
        let mut session = s;
        session.new_session = false;
        let e = warmable(&session).unwrap_err();
        assert_eq!(e.path, "new_session");
        assert!(e.message.contains("launch it cold"), "{e}");
    }
}
