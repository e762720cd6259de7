//! Pod-wide egress under a CRI engine (docs/oci.md, "A pod's egress").
//!
//! containerd (and CRI-O) hand a pod's `run.hutch.egress.*` annotations to
//! every container of the pod, the pod sandbox (pause) container included.
//! The sandbox container holds the pod's network namespace: a new one with
//! only `lo`, plus hutch's egress proxy for the pod's allow-list (its
//! keeper, recorded in the sandbox's state directory, ends with it). The
//! pod's other containers join that namespace (the engine's config already
//! names it, `/proc/PID/ns/net` of the sandbox) and get the same doors: the
//! TCP door is on the shared loopback, the Unix door is bound from the
//! sandbox's root, and the proxy variables point at it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::OciError;
use super::record::Record;
use crate::spec::{FsOp, Spec};

/// The annotation holding the allow-list (host patterns).
pub(crate) const ALLOW: &str = "run.hutch.egress.allow";
/// The annotation holding the special addresses the proxy may dial.
pub(crate) const ALLOW_ADDRESS: &str = "run.hutch.egress.allow-address";

/// (container type key, sandbox id key) of each CRI engine.
const ENGINES: &[(&str, &str)] = &[
    ("io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-id"),
    (
        "io.kubernetes.cri-o.ContainerType",
        "io.kubernetes.cri-o.SandboxID",
    ),
];

/// Where the Unix door is in every container of the pod.
const DOOR: &str = "/run/hutch/proxy.sock";

/// What a container is in its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    /// Not a CRI container (podman, `ctr`, a bundle of one's own).
    Single,
    /// The pod sandbox (pause) container.
    Sandbox,
    /// Another container of the pod sandbox `sandbox_id`.
    Member { sandbox_id: String },
}

/// The role the engine's annotations give a container.
pub(crate) fn role(annotations: &std::collections::BTreeMap<String, String>) -> Role {
    for (kind, sandbox) in ENGINES {
        match annotations.get(*kind).map(String::as_str) {
            Some("sandbox") => return Role::Sandbox,
            Some("container") => {
                if let Some(id) = annotations.get(*sandbox).filter(|s| !s.is_empty()) {
                    return Role::Member {
                        sandbox_id: id.clone(),
                    };
                }
            }
            _ => {}
        }
    }
    Role::Single
}

/// A pod's egress as its annotations say it: the allow-list and the
/// special addresses allowed (each trimmed, empty entries dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Egress {
    pub allow: Vec<String>,
    pub allow_address: Vec<String>,
}

/// A comma-separated annotation value as its entries.
pub(crate) fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(String::from)
        .collect()
}

impl Egress {
    /// The egress the annotations ask for, if any.
    pub(crate) fn of(annotations: &std::collections::BTreeMap<String, String>) -> Option<Egress> {
        let allow = annotations.get(ALLOW)?;
        Some(Egress {
            allow: list(allow),
            allow_address: annotations
                .get(ALLOW_ADDRESS)
                .map(|v| list(v))
                .unwrap_or_default(),
        })
    }
}

/// A pod member's egress, checked against its sandbox at `create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub(crate) sandbox_id: String,
    pub(crate) egress: Option<Egress>,
}

fn refuse(message: String) -> OciError {
    OciError::Config {
        key: format!("annotations.{ALLOW}"),
        message,
    }
}

fn show(e: &Option<Egress>) -> String {
    match e {
        None => "none".into(),
        Some(e) if e.allow_address.is_empty() => format!("allow {:?}", e.allow.join(",")),
        Some(e) => format!(
            "allow {:?}, allow-address {:?}",
            e.allow.join(","),
            e.allow_address.join(",")
        ),
    }
}

/// Join member `m` to its sandbox's egress: `sandbox` is the sandbox's
/// record under the same root (None: not there), `sandbox_alive` whether
/// its hutch init and keeper still run. The container's egress must be
/// its sandbox's; with one, the container must join the sandbox's network
/// namespace, and gets the Unix door bound from the sandbox's root.
pub(crate) fn join(
    m: &Member,
    sandbox: Option<&Record>,
    sandbox_alive: bool,
    sandbox_root: Option<&Path>,
    spec: &mut Spec,
) -> Result<(), OciError> {
    let id = &m.sandbox_id;
    let Some(sandbox) = sandbox else {
        if m.egress.is_none() {
            // Nothing to share (and a sandbox of another runtime).
            return Ok(());
        }
        return Err(refuse(format!(
            "the pod's egress proxy is its sandbox container's, and sandbox {id:?} is not a container of this runtime root: run the pod sandbox with the same runtime handler"
        )));
    };
    let theirs = Egress::of(&sandbox.annotations);
    if theirs != m.egress {
        return Err(refuse(format!(
            "differs from its pod sandbox {id:?} ({} here, {} there): a pod has one egress allow-list, set as a pod annotation",
            show(&m.egress),
            show(&theirs)
        )));
    }
    if m.egress.is_none() {
        return Ok(());
    }
    if !sandbox_alive || sandbox.keeper.is_none() {
        return Err(refuse(format!(
            "the pod's egress proxy (sandbox {id:?}'s) is not running: the pod sandbox has stopped; the engine must recreate the pod"
        )));
    }
    let sandbox_net = PathBuf::from(format!("/proc/{}/ns/net", sandbox.pid));
    let joined = spec
        .namespaces
        .join
        .net
        .as_ref()
        .and_then(|r| r.path.clone());
    let same = joined.as_deref().is_some_and(|p| same_file(p, &sandbox_net));
    if !same {
        return Err(refuse(format!(
            "a container of a pod with an egress allow-list must join its sandbox {id:?}'s network namespace ({}), but linux.namespaces names {}",
            sandbox_net.display(),
            joined
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "a network namespace of its own".into())
        )));
    }
    // The door as the host sees it, in the sandbox's root directory (a
    // mount of another mount namespace cannot be bound here): the very
    // socket the sandbox's processes see, or no door at all.
    let theirs = PathBuf::from(format!("/proc/{}/root{DOOR}", sandbox.pid));
    let door = sandbox_root.map(|r| r.join(DOOR.trim_start_matches('/')));
    let Some(door) = door.filter(|d| same_file(d, &theirs)) else {
        return Err(refuse(format!(
            "the pod's Unix door {DOOR} is not in sandbox {id:?}'s root directory on the host (its root is not a directory of the host's?), so this container cannot share it"
        )));
    };
    spec.fs.push(FsOp::Bind {
        src: door,
        dest: PathBuf::from(DOOR),
        optional: false,
    });
    Ok(())
}

/// Whether `a` and `b` are the same file (a namespace: the same nsfs inode).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn annotations(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn roles_of_containerd_and_cri_o() {
        assert_eq!(role(&annotations(&[])), Role::Single);
        assert_eq!(
            role(&annotations(&[("io.kubernetes.cri.container-type", "sandbox")])),
            Role::Sandbox
        );
        assert_eq!(
            role(&annotations(&[
                ("io.kubernetes.cri.container-type", "container"),
                ("io.kubernetes.cri.sandbox-id", "abc"),
            ])),
            Role::Member {
                sandbox_id: "abc".into()
            }
        );
        assert_eq!(
            role(&annotations(&[
                ("io.kubernetes.cri-o.ContainerType", "container"),
                ("io.kubernetes.cri-o.SandboxID", "def"),
            ])),
            Role::Member {
                sandbox_id: "def".into()
            }
        );
        // A member without its sandbox's id is on its own.
        assert_eq!(
            role(&annotations(&[(
                "io.kubernetes.cri.container-type",
                "container"
            )])),
            Role::Single
        );
    }

    fn record(kv: &[(&str, &str)]) -> Record {
        Record {
            id: "pod".into(),
            pid: std::process::id() as i32,
            start_time: 0,
            bundle: "/b".into(),
            annotations: annotations(kv),
            keeper: Some((1, 0)),
            cgroup: None,
            cgroup_made: Vec::new(),
            cgroup_v1: Vec::new(),
            mnt_ns: None,
            mnt_ns_joined: false,
        }
    }

    fn member(e: Option<(&str, &str)>) -> Member {
        Member {
            sandbox_id: "pod".into(),
            egress: e.map(|(a, b)| Egress {
                allow: list(a),
                allow_address: list(b),
            }),
        }
    }

    #[test]
    fn a_member_has_its_sandboxs_egress_or_is_refused() {
        let sandbox = record(&[(ALLOW, "a.example, b.example"), (ALLOW_ADDRESS, "127.0.0.1")]);
        let mut spec = Spec::default();
        spec.namespaces.net = false;
        spec.namespaces.join.net = Some(crate::spec::NamespaceRef::path(format!(
            "/proc/{}/ns/net",
            std::process::id()
        )));
        let m = member(Some(("a.example,b.example", "127.0.0.1")));
        let one_line = |e: OciError| {
            let s = e.to_string();
            assert!(!s.contains('\n') && s.contains("annotations.run.hutch.egress.allow"), "{s}");
            s
        };
        // Another allow-list, another address list, or none at all.
        for other in [
            Some(("a.example", "127.0.0.1")),
            Some(("a.example,b.example", "")),
            None,
        ] {
            let e = join(&member(other), Some(&sandbox), true, None, &mut spec.clone()).unwrap_err();
            assert!(one_line(e).contains("differs from its pod sandbox \"pod\""));
        }
        // The same egress, but the sandbox's door is not found on the host
        // (the door itself is tests/oci_cri.rs').
        let tmp = std::env::temp_dir();
        let e = join(&m, Some(&sandbox), true, Some(&tmp), &mut spec.clone()).unwrap_err();
        assert!(one_line(e).contains("Unix door"));
        // The sandbox has stopped, or is not this root's.
        let e = join(&m, Some(&sandbox), false, None, &mut spec.clone()).unwrap_err();
        assert!(one_line(e).contains("not running"));
        let e = join(&m, None, true, None, &mut spec.clone()).unwrap_err();
        assert!(one_line(e).contains("not a container of this runtime root"));
        // A network namespace other than the sandbox's.
        let mut own = spec.clone();
        own.namespaces.join.net = Some(crate::spec::NamespaceRef::path("/proc/1/ns/mnt"));
        let e = join(&m, Some(&sandbox), true, None, &mut own).unwrap_err();
        assert!(one_line(e).contains("must join its sandbox"));
        // No egress anywhere: nothing to do.
        let plain = record(&[]);
        let mut s = Spec::default();
        join(&member(None), Some(&plain), true, None, &mut s).unwrap();
        join(&member(None), None, true, None, &mut s).unwrap();
        assert_eq!(s, Spec::default());
    }
}
