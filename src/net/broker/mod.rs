//! Credential brokering (issue 31, `docs/egress.md`, `docs/secrets.md`):
//! the requests the proxy reads instead of tunnelling, a gateway's
//! (plain HTTP inside the sandbox, `http://127.0.0.1:3128/<name>/...`,
//! sent on to one HTTPS upstream) and an intercepted host's (TLS
//! terminated by the proxy, `intercept`), all through one pipeline.
//!
//! One file per concern: [`route`] (which door requests are a gateway's),
//! [`rules`] (methods, path prefixes, budgets), [`inject`] (secrets:
//! containment and injection), [`upstream`] (TLS client), [`body`]
//! (metering both ways), [`scrub`] (an echoed value back to its
//! placeholder) and [`serve`] (the pipeline, and `serve_connection` for
//! intercepted connections). The audit line is the request's
//! [`super::record::Decision`], with its path, gateway and secrets.

pub(crate) mod body;
pub(crate) mod inject;
pub(crate) mod route;
pub(crate) mod rules;
pub(crate) mod scrub;
pub(crate) mod serve;
pub(crate) mod upstream;

use crate::secret::{ArmedSecret, SecretValue};

use std::sync::Arc;

use super::error::NetError;
use super::intercept::Interception;
use inject::Secrets;

/// What the proxy brokers beyond the policy: the armed secrets (values
/// read on the host by the launcher) and the hosts whose TLS it
/// terminates, with the sandbox's CA. `Brokering::default()`: none.
#[derive(Debug, Default)]
pub struct Brokering {
    pub(crate) secrets: Vec<ArmedSecret>,
    /// Made before the sandbox is cloned (its certificate is in the
    /// sandbox's trust bundle); `None`: no host is intercepted.
    pub(crate) interception: Option<Arc<Interception>>,
}

/// The brokering state of one sandbox's proxy.
#[derive(Debug, Default)]
pub(crate) struct Broker {
    pub(crate) secrets: Secrets,
    /// `(value, placeholder)` of each secret, for [`scrub`].
    pub(crate) scrub_pairs: Vec<(SecretValue, Vec<u8>)>,
    /// Upstream connections kept for the next request.
    pub(crate) pool: std::sync::Arc<upstream::Pool>,
    /// The intercepted hosts' CA and leaves.
    pub(crate) interception: Option<Arc<Interception>>,
}

impl Broker {
    pub(crate) fn new(b: Brokering) -> Result<Broker, NetError> {
        let secrets = Secrets::arm(b.secrets)?;
        let scrub_pairs = secrets.scrub_pairs();
        Ok(Broker {
            secrets,
            scrub_pairs,
            pool: Default::default(),
            interception: b.interception,
        })
    }
}
