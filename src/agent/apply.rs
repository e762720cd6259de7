//! An agent profile onto a Spec.

use std::path::Path;

use super::AgentProfile;
use crate::spec::{ByteSize, FsOp, Limit, Network, ProxyPolicy, Spec};

/// The size cap of the agent's HOME tmpfs: a CLI's settings, session logs
/// and caches, not the workspace.
const HOME_SIZE: ByteSize = ByteSize(1 << 30);

impl AgentProfile {
    /// Apply the profile to `spec`: before the caller's flags, which then
    /// override any of it (a later `--setenv`, `--timeout`, `--uid`, ...).
    pub fn apply_to(&self, spec: &mut Spec) {
        if let Some(uid) = self.uid {
            spec.identity.uid = Some(uid);
        }
        if let Some(gid) = self.gid {
            spec.identity.gid = Some(gid);
        }
        if let Some(home) = &self.home {
            // A fresh HOME per invocation, writable by the agent's uid (the
            // sandbox has one user: the sticky, world-writable mode of
            // /tmp, since hutch builds it as the sandbox's root).
            spec.fs.push(FsOp::Tmpfs {
                dest: home.clone(),
                size: Some(HOME_SIZE),
                nr_inodes: None,
                mode: Some(0o1777),
            });
            let mut made = std::collections::BTreeSet::new();
            for (rel, content) in &self.files {
                // The CLI writes next to its configuration (Codex's
                // sessions in ~/.codex, Claude Code's state in ~/.claude):
                // the directories are made writable for it too.
                let rel = Path::new(rel);
                let mut dirs: Vec<&Path> = rel
                    .ancestors()
                    .skip(1)
                    .filter(|d| !d.as_os_str().is_empty())
                    .collect();
                dirs.reverse();
                for dir in dirs {
                    if made.insert(dir.to_path_buf()) {
                        spec.fs.push(FsOp::Dir {
                            dest: home.join(dir),
                            mode: Some(0o1777),
                        });
                    }
                }
                spec.fs.push(FsOp::File {
                    dest: home.join(rel),
                    content: content.clone(),
                    encoding: Default::default(),
                    mode: Some(0o644),
                });
            }
            spec.env
                .insert("HOME".to_string(), home.display().to_string());
        }
        if let Some(t) = self.timeout {
            spec.limits.wall_clock = Some(t);
        }
        if let Some(m) = self.memory {
            spec.limits.memory = Some(Limit::preferred(m));
        }
        for (k, v) in &self.env {
            spec.env.insert(k.clone(), v.clone());
        }
        if !self.allow_hosts.is_empty() || !self.gateways.is_empty() {
            if !matches!(spec.network, Network::Proxy(_)) {
                // The caller's --share-net, applied after, replaces this.
                spec.network = Network::Proxy(ProxyPolicy::default());
                spec.namespaces.net = true;
            }
            if let Network::Proxy(p) = &mut spec.network {
                p.allow.extend(self.allow_hosts.iter().cloned());
                p.gateways.extend(self.gateways.iter().cloned());
            }
        }
        spec.secrets.extend(self.secrets.iter().cloned());
    }
}

impl AgentProfile {
    /// Drop the profile's gateways and secrets that the caller's flags
    /// replaced by name (`--gateway name=anthropic,...` after `--agent
    /// claude-code`: another model host). Called once every flag is in
    /// `spec`; the profile's come first, so of two of one name the first
    /// is the profile's. Two of one name from the caller stay, for the
    /// validator to refuse.
    pub(crate) fn yield_to_caller(&self, spec: &mut Spec) {
        for name in self.secrets.iter().map(|s| &s.name) {
            if spec.secrets.iter().filter(|s| &s.name == name).count() > 1
                && let Some(i) = spec.secrets.iter().position(|s| &s.name == name)
            {
                spec.secrets.remove(i);
            }
        }
        if let Network::Proxy(p) = &mut spec.network {
            for name in self.gateways.iter().map(|g| &g.name) {
                if p.gateways.iter().filter(|g| &g.name == name).count() > 1
                    && let Some(i) = p.gateways.iter().position(|g| &g.name == name)
                {
                    p.gateways.remove(i);
                }
            }
        }
    }
}
