//! TLS interception, opt-in per host (issue 31, `docs/egress.md`): for a
//! host in the policy's `intercept` list, the proxy terminates the
//! sandbox's TLS itself, with a leaf of the sandbox's own ephemeral CA
//! ([`ca`]), minted on first use and cached ([`leaf`]), and serves the
//! decrypted requests through the request pipeline; the sandbox trusts
//! that CA through a bundle bound into its root ([`bundle`]). Every other
//! allowed host stays an opaque tunnel.
//!
//! The CA is made when the sandbox is prepared, before it is cloned (its
//! certificate goes into the root); its key stays in the supervisor's
//! memory. hutch init, cloned from the supervisor, holds a copy of that
//! memory, but it is not dumpable, so no process of the sandbox can read
//! it (`docs/security-model.md`).

mod bundle;
mod ca;
mod leaf;
pub(crate) mod serve;
mod tls;

use std::sync::Arc;

use rustls::ServerConfig;

pub use bundle::{CA_BUNDLE_PATH, CA_ENV};
pub(crate) use leaf::LeafUse;

use super::host::{CanonicalHost, canonicalize, split_host_port};
use crate::spec::Intercept;

/// Why interception could not be set up, or one connection not
/// intercepted.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    /// An `intercept` entry that is not `host[:port]`.
    #[error("network.intercept[{index}]: {why}")]
    Entry { index: usize, why: String },
    #[error("cannot make the sandbox's TLS certificate authority: {0}")]
    Ca(rcgen::Error),
    #[error("cannot read the system's random source")]
    Random,
    #[error("TLS configuration: {0}")]
    Tls(rustls::Error),
    #[error("TLS handshake with the sandbox failed: {0}")]
    Handshake(std::io::Error),
    #[error("TLS handshake with the sandbox not complete within {0:?}")]
    HandshakeTimeout(std::time::Duration),
    #[error(
        "TLS server name {asked:?} is not {host}, the intercepted host this connection was allowed for"
    )]
    ServerName { asked: String, host: String },
}

/// One sandbox's interception: its CA, its leaves, and the hosts (with
/// their rules) whose TLS the proxy terminates.
pub struct Interception {
    ca: ca::EphemeralCa,
    leaves: leaf::LeafCache,
    hosts: Vec<(CanonicalHost, u16, Intercept)>,
}

impl std::fmt::Debug for Interception {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The CA's key is never printed.
        f.debug_struct("Interception")
            .field(
                "hosts",
                &self
                    .hosts
                    .iter()
                    .map(|(h, p, _)| format!("{h}:{p}"))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Interception {
    /// The interception of a sandbox whose policy lists `rules` (none when
    /// it lists nothing): a new CA whose name constraints permit only
    /// those hosts. `sandbox_id` names the CA.
    pub fn new(sandbox_id: &str, rules: &[Intercept]) -> Result<Option<Arc<Self>>, InterceptError> {
        if rules.is_empty() {
            return Ok(None);
        }
        let hosts = parse_hosts(rules)?;
        let names: Vec<CanonicalHost> = hosts.iter().map(|(h, _, _)| h.clone()).collect();
        Ok(Some(Arc::new(Interception {
            ca: ca::EphemeralCa::new(sandbox_id, &names)?,
            leaves: Default::default(),
            hosts,
        })))
    }

    /// The rule of `host:port` when its TLS is intercepted.
    pub(crate) fn rule_for(&self, host: &CanonicalHost, port: u16) -> Option<&Intercept> {
        self.hosts
            .iter()
            .find(|(h, p, _)| h == host && *p == port)
            .map(|(_, _, r)| r)
    }

    /// The CA's certificate, PEM.
    #[cfg(test)]
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// The sandbox's trust bundle: the host's trust store and the CA.
    pub fn trust_bundle(&self) -> String {
        bundle::trust_bundle(self.ca.cert_pem())
    }

    /// Leaves minted so far (one per intercepted host at most).
    #[cfg(test)]
    pub fn leaves_minted(&self) -> u64 {
        self.leaves.minted()
    }

    fn server_config(
        &self,
        host: &CanonicalHost,
    ) -> Result<(Arc<ServerConfig>, LeafUse), InterceptError> {
        self.leaves.config_for(&self.ca, host)
    }
}

/// The crypto of every TLS configuration here: ring (no C toolchain
/// beyond `cc`; the workspace's test CA uses it too). Its key exchange has
/// no post-quantum group, hence rustls's deprecation; the sandbox's side
/// of an intercepted connection never leaves the machine.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static PROVIDER: std::sync::OnceLock<Arc<rustls::crypto::CryptoProvider>> =
        std::sync::OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

fn parse_hosts(
    rules: &[Intercept],
) -> Result<Vec<(CanonicalHost, u16, Intercept)>, InterceptError> {
    let mut out: Vec<(CanonicalHost, u16, Intercept)> = Vec::with_capacity(rules.len());
    for (index, r) in rules.iter().enumerate() {
        let bad = |why: String| InterceptError::Entry { index, why };
        if r.host.contains('*') {
            return Err(bad(format!(
                "{:?}: an intercepted host is one name, not a pattern",
                r.host
            )));
        }
        let (h, port) = split_host_port(&r.host).map_err(|e| bad(format!("{:?}: {e}", r.host)))?;
        let host = canonicalize(h).map_err(|e| bad(format!("{:?}: {e}", r.host)))?;
        let port = port.unwrap_or(443);
        if port == 0 {
            return Err(bad(format!("{:?}: port 0", r.host)));
        }
        if out.iter().any(|(oh, op, _)| *oh == host && *op == port) {
            return Err(bad(format!("{host}:{port} is listed twice")));
        }
        out.push((host, port, r.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
