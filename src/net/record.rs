//! One decision's record: how it ended, what its audit line says, and the
//! traffic it let through. A [`Decision`] lives as long as the request or
//! tunnel it allowed and writes its audit line when the last reference
//! drops (cancelled ones included).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::doors::Door;
use super::state::State;
use super::tunnel::Meter;

/// How a decision ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Outcome {
    Allow,
    Deny,
    Invalid,
    Limit,
    Error,
}

#[derive(Debug, Default, Serialize)]
pub(super) struct Fields {
    pub(super) method: String,
    pub(super) host: Option<String>,
    pub(super) port: Option<u16>,
    pub(super) address: Option<String>,
    /// `transparent` egress: the address the sandbox connected to (or,
    /// for the resolver, the synthetic address a name was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) destination: Option<String>,
    pub(super) rule: Option<String>,
    /// A request the proxy read (gateway, interception): `gateway` or
    /// `intercept`, its path (no query), the gateway's name and the names
    /// of the secrets put into it (never a value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) via: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) gateway: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) secrets: Vec<String>,
    pub(super) verdict: Option<Outcome>,
    pub(super) status: u16,
    pub(super) error: Option<String>,
    pub(super) connect_ms: Option<u64>,
    /// An intercepted host's connection: `leaf-minted` (its first) or
    /// `leaf-cached`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) intercept: Option<&'static str>,
    /// An intercepted connection: the protocol the sandbox's client chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) alpn: Option<&'static str>,
}

#[derive(Serialize)]
struct Event<'a> {
    sandbox: &'a str,
    door: &'static str,
    #[serde(flatten)]
    fields: &'a Fields,
    bytes_up: u64,
    bytes_down: u64,
    duration_ms: u64,
}

/// One decision and its traffic; the audit line is written when the last
/// reference drops (at the end of the tunnel or forwarded request, also
/// when it is cancelled).
pub(super) struct Decision {
    pub(super) state: Arc<State>,
    door: Door,
    start: Instant,
    fields: Mutex<Fields>,
    up: AtomicU64,
    down: AtomicU64,
    /// Milliseconds since `start` of the last byte moved.
    last_activity: AtomicU64,
}

impl Decision {
    pub(super) fn new(state: Arc<State>, door: Door, method: String) -> Arc<Decision> {
        Arc::new(Decision {
            state,
            door,
            start: Instant::now(),
            fields: Mutex::new(Fields {
                method,
                ..Default::default()
            }),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            last_activity: AtomicU64::new(0),
        })
    }

    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Fields) -> R) -> R {
        let mut g = self.fields.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    pub(super) fn finish_with(&self, verdict: Outcome, status: u16, error: String) {
        self.with(|f| {
            f.verdict = Some(verdict);
            f.status = status;
            f.error = Some(error);
        });
    }

    /// When the decision began (a request's total timeout counts from it).
    pub(super) fn started(&self) -> Instant {
        self.start
    }

    /// Count `n` bytes of this decision's traffic (`up`: from the
    /// sandbox) without charging the sandbox's byte budget: an
    /// intercepted connection's TLS bytes, whose requests the request
    /// pipeline charges.
    pub(super) fn count(&self, n: usize, up: bool) {
        let counter = if up { &self.up } else { &self.down };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        self.touch();
    }

    pub(super) fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_activity.store(ms, Ordering::Relaxed);
    }

    /// Resolves when the decision's traffic has been idle for `idle`, or
    /// its total time is up; returns which.
    pub(super) async fn watchdog(&self, idle: Duration, total: Duration) -> &'static str {
        let deadline = self.start + total;
        loop {
            let last =
                self.start + Duration::from_millis(self.last_activity.load(Ordering::Relaxed));
            let idle_deadline = last + idle;
            let now = Instant::now();
            if now >= deadline {
                return "total timeout";
            }
            if now >= idle_deadline {
                return "idle timeout";
            }
            tokio::time::sleep_until(idle_deadline.min(deadline)).await;
        }
    }
}

impl Drop for Decision {
    fn drop(&mut self) {
        let Some(audit) = &self.state.audit else {
            return;
        };
        let fields = self.fields.lock().unwrap_or_else(|p| p.into_inner());
        let ev = Event {
            sandbox: &self.state.sandbox_id,
            door: self.door.name(),
            fields: &fields,
            bytes_up: self.up.load(Ordering::Relaxed),
            bytes_down: self.down.load(Ordering::Relaxed),
            duration_ms: self.start.elapsed().as_millis() as u64,
        };
        if let Err(e) = audit.record("egress", &ev) {
            eprintln!("hutch proxy: {e}");
        }
    }
}

/// Counts one direction of a decision's traffic against the sandbox's
/// byte budget.
pub(super) struct DirMeter<'a> {
    pub(super) dec: &'a Decision,
    pub(super) up: bool,
}

impl Meter for DirMeter<'_> {
    fn account(&self, n: usize) -> io::Result<()> {
        let n = n as u64;
        if self.up {
            self.dec.up.fetch_add(n, Ordering::Relaxed);
        } else {
            self.dec.down.fetch_add(n, Ordering::Relaxed);
        }
        self.dec.touch();
        let st = &self.dec.state;
        let total = st.bytes_total.fetch_add(n, Ordering::Relaxed) + n;
        match st.policy.limits().max_bytes {
            Some(max) if total > max => Err(io::Error::other("sandbox byte limit reached")),
            _ => Ok(()),
        }
    }
}
