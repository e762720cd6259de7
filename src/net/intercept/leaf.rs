//! One TLS server configuration per intercepted host, minted on the first
//! connection to it and reused for every later one. The cache holds at
//! most one entry per host of the `intercept` list: only those are minted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;

use super::InterceptError;
use super::ca::EphemeralCa;
use crate::net::host::CanonicalHost;

/// Whether a connection's leaf was made for it or found in the cache
/// (its audit line says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeafUse {
    Minted,
    Cached,
}

/// The protocols offered to the sandbox's client, by preference.
pub(crate) const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

#[derive(Default)]
pub(crate) struct LeafCache {
    configs: Mutex<HashMap<CanonicalHost, Arc<ServerConfig>>>,
    minted: AtomicU64,
}

impl LeafCache {
    /// The server configuration presenting `host`'s leaf. The proxy runs
    /// on one thread, so two first connections to a host do not race to
    /// mint: the second finds the first's entry.
    pub(crate) fn config_for(
        &self,
        ca: &EphemeralCa,
        host: &CanonicalHost,
    ) -> Result<(Arc<ServerConfig>, LeafUse), InterceptError> {
        let mut configs = self.configs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = configs.get(host) {
            return Ok((c.clone(), LeafUse::Cached));
        }
        let leaf = ca.mint(host)?;
        let mut config = ServerConfig::builder_with_provider(super::provider())
            .with_safe_default_protocol_versions()
            .map_err(InterceptError::Tls)?
            .with_no_client_auth()
            .with_single_cert(leaf.chain, leaf.key)
            .map_err(InterceptError::Tls)?;
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        let config = Arc::new(config);
        configs.insert(host.clone(), config.clone());
        self.minted.fetch_add(1, Ordering::Relaxed);
        Ok((config, LeafUse::Minted))
    }

    /// Leaves minted so far.
    #[cfg(test)]
    pub(crate) fn minted(&self) -> u64 {
        self.minted.load(Ordering::Relaxed)
    }
}
