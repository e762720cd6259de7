//! Per-session defaults: what `session create` was given for every
//! command (binds, environment, egress, limits, confinement), and what a
//! command may change of it.
//!
//! A command starts from the defaults ([`Session::base_spec`]) and may
//! change anything, except that it may not widen what the session locked
//! (`--lock egress|binds|env|limits|confinement`) and may have no network
//! at all once the session was sealed with `--network none`. Narrowing
//! (fewer hosts, lower limits, a stricter filter) is always allowed.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::spec::{FsOp, Limit, Network, Spec};

use super::session::{Lock, Session, SessionInfo};

impl Session {
    /// The Spec a command of this session starts from: the session's
    /// defaults (else the default profile), without network once the
    /// session was sealed with `--network none`, and without the secrets
    /// declared at create: a command names those it uses
    /// ([`Session::declared_secret`]).
    pub fn base_spec(&self) -> Spec {
        let mut spec = self
            .info
            .defaults
            .clone()
            .unwrap_or_else(crate::spec::default_profile);
        spec.secrets.clear();
        if self.info.network_sealed {
            spec.network = Network::None;
            spec.namespaces.net = true;
        }
        spec
    }

    /// The secret `name` declared at create (`session create --secret`),
    /// for a command that uses it (`session run --use-secret NAME`).
    pub fn declared_secret(&self, name: &str) -> Option<&crate::spec::Secret> {
        self.info
            .defaults
            .as_ref()?
            .secrets
            .iter()
            .find(|s| s.name == name)
    }

    /// The names of the secrets declared at create.
    pub fn declared_secret_names(&self) -> Vec<&str> {
        self.info
            .defaults
            .as_ref()
            .map(|d| d.secrets.iter().map(|s| s.name.as_str()).collect())
            .unwrap_or_default()
    }
}

fn egress_of(spec: &Spec) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    match &spec.network {
        Network::None => Some(Default::default()),
        Network::Host => None,
        Network::Proxy(p) => Some((
            p.allow.iter().cloned().collect(),
            p.allow_address.iter().cloned().collect(),
        )),
    }
}

/// Host paths the Spec shows, with whether writable.
fn host_paths(spec: &Spec) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    for op in &spec.fs {
        match op {
            FsOp::Bind { src, .. } | FsOp::DevBind { src, .. } => out.push((src.clone(), true)),
            FsOp::RoBind { src, .. } => out.push((src.clone(), false)),
            FsOp::Overlay { lowers, .. }
            | FsOp::TmpOverlay { lowers, .. }
            | FsOp::RoOverlay { lowers, .. } => {
                out.extend(lowers.iter().map(|l| (l.clone(), false)))
            }
            _ => {}
        }
    }
    out
}

fn limit_widens<T: PartialOrd + Copy>(base: Option<&Limit<T>>, run: Option<&Limit<T>>) -> bool {
    match (base, run) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(b), Some(r)) => r.value() > b.value(),
    }
}

/// What of `spec` widens the session's locked defaults, or egress after
/// `seal --network none`: the first such thing, as a phrase.
pub fn widening(info: &SessionInfo, spec: &Spec) -> Option<String> {
    // Before the network: a command with secrets would otherwise be told
    // about its network, not about what it really may not have.
    if info.network_sealed && !spec.secrets.is_empty() {
        return Some(format!(
            "it was sealed with --network none: no command of it may use secrets (this one names {:?})",
            spec.secrets[0].name
        ));
    }
    if info.network_sealed && !matches!(spec.network, Network::None) {
        return Some(format!(
            "it was sealed with --network none: no command of it may have network (this one asks for {})",
            crate::launch::network_name(&spec.network)
        ));
    }
    // Without a lock nothing is compared with the defaults (and the
    // default profile, which inspects the host, is not built per command).
    if info.locks.is_empty() {
        return None;
    }
    let base = info
        .defaults
        .clone()
        .unwrap_or_else(crate::spec::default_profile);
    let locked = |l: Lock| info.locks.contains(&l);
    let refuse = |l: Lock, what: String| {
        Some(format!(
            "{what} widens the session's {} defaults, which `session create --lock {}` fixed",
            l.name(),
            l.name()
        ))
    };
    if locked(Lock::Egress) {
        // A secret is egress with a credential: only those declared at
        // create, as declared; gateways and intercepted hosts as given.
        if let Some(s) = spec.secrets.iter().find(|s| !base.secrets.contains(s)) {
            return refuse(Lock::Egress, format!("the secret {:?}", s.name));
        }
        if let (Network::Proxy(b), Network::Proxy(r)) = (&base.network, &spec.network) {
            if let Some(g) = r.gateways.iter().find(|g| !b.gateways.contains(g)) {
                return refuse(Lock::Egress, format!("the gateway {:?}", g.name));
            }
            if let Some(x) = r.intercept.iter().find(|x| !b.intercept.contains(x)) {
                return refuse(Lock::Egress, format!("intercepting {:?}", x.host));
            }
        }
        match (egress_of(&base), egress_of(spec)) {
            (None, _) => {}
            (Some(_), None) => return refuse(Lock::Egress, "the host network".into()),
            (Some((ba, baddr)), Some((ra, raddr))) => {
                if let Some(h) = ra.difference(&ba).next() {
                    return refuse(Lock::Egress, format!("egress to {h:?}"));
                }
                if let Some(a) = raddr.difference(&baddr).next() {
                    return refuse(Lock::Egress, format!("the address {a:?}"));
                }
            }
        }
    }
    if locked(Lock::Binds) {
        let allowed = host_paths(&base);
        for (src, writable) in host_paths(spec) {
            if !allowed.iter().any(|(a, w)| *a == src && (*w || !writable)) {
                return refuse(
                    Lock::Binds,
                    format!(
                        "{} {}",
                        if writable {
                            "a writable bind of"
                        } else {
                            "a bind of"
                        },
                        src.display()
                    ),
                );
            }
        }
    }
    if locked(Lock::Env) {
        for (k, v) in &spec.env {
            if base.env.get(k) != Some(v) {
                return refuse(Lock::Env, format!("the variable {k}"));
            }
        }
    }
    if locked(Lock::Limits) {
        let (b, r) = (&base.limits, &spec.limits);
        if limit_widens(
            b.memory
                .as_ref()
                .map(|l| Limit::Required(l.value().0))
                .as_ref(),
            r.memory
                .as_ref()
                .map(|l| Limit::Required(l.value().0))
                .as_ref(),
        ) {
            return refuse(Lock::Limits, "the memory limit".into());
        }
        if limit_widens(b.pids.as_ref(), r.pids.as_ref()) {
            return refuse(Lock::Limits, "the process limit".into());
        }
        if limit_widens(b.cpus.as_ref(), r.cpus.as_ref()) {
            return refuse(Lock::Limits, "the CPU limit".into());
        }
        for (name, v) in &b.rlimits {
            if r.rlimits.get(name).is_none_or(|rv| rv > v) {
                return refuse(Lock::Limits, format!("the rlimit {name}"));
            }
        }
    }
    if locked(Lock::Confinement) {
        let (b, r) = (&base.security, &spec.security);
        if r.seccomp != b.seccomp && r.seccomp != "strict" {
            return refuse(Lock::Confinement, format!("seccomp {:?}", r.seccomp));
        }
        if b.landlock.enabled && !r.landlock.enabled {
            return refuse(Lock::Confinement, "disabling Landlock".into());
        }
        if let Some(c) = r.cap_add.iter().find(|c| !b.cap_add.contains(c)) {
            return refuse(Lock::Confinement, format!("the capability {c}"));
        }
    }
    None
}
