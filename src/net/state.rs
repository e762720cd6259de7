//! What the connections of one sandbox share: its policy, audit sink,
//! caps (connections, tunnels, handshakes, resolutions), byte count and,
//! in `transparent` egress, the names its resolver handed out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Semaphore;

use super::broker::Broker;
use super::names::Names;
use super::policy::Policy;
use crate::audit::AuditSink;

/// Concurrent name resolutions (each holds a blocking thread).
pub(crate) const MAX_RESOLVERS: usize = 16;

/// Everything shared by the connections of one sandbox.
pub(crate) struct State {
    pub(super) policy: Policy,
    pub(super) sandbox_id: String,
    pub(super) audit: Option<AuditSink>,
    pub(super) connections: Arc<Semaphore>,
    pub(super) tunnels: Arc<Semaphore>,
    /// `transparent` egress: captured connections not yet classified.
    pub(super) pending_handshakes: Arc<Semaphore>,
    pub(super) resolvers: Semaphore,
    pub(super) bytes_total: AtomicU64,
    /// `transparent` egress: the names the resolver handed out.
    pub(super) names: Names,
    /// Secrets the proxy puts into requests (gateways, interception).
    pub(crate) broker: Broker,
}

impl State {
    pub(crate) fn new(
        policy: Policy,
        sandbox_id: String,
        audit: Option<AuditSink>,
        broker: Broker,
    ) -> Arc<State> {
        let l = policy.limits().clone();
        Arc::new(State {
            connections: Arc::new(Semaphore::new(
                l.max_connections.min(Semaphore::MAX_PERMITS),
            )),
            tunnels: Arc::new(Semaphore::new(l.max_tunnels.min(Semaphore::MAX_PERMITS))),
            pending_handshakes: Arc::new(Semaphore::new(
                l.max_pending_handshakes.min(Semaphore::MAX_PERMITS),
            )),
            resolvers: Semaphore::new(MAX_RESOLVERS),
            bytes_total: AtomicU64::new(0),
            names: Default::default(),
            broker,
            policy,
            sandbox_id,
            audit,
        })
    }

    /// Whether `host:port`'s TLS is terminated here.
    pub(super) fn intercepts(&self, host: &super::host::CanonicalHost, port: u16) -> bool {
        self.broker
            .interception
            .as_ref()
            .is_some_and(|i| i.rule_for(host, port).is_some())
    }

    pub(super) fn budget_left(&self) -> bool {
        match self.policy.limits().max_bytes {
            Some(max) => self.bytes_total.load(Ordering::Relaxed) < max,
            None => true,
        }
    }
}
