//! Network: loopback inside the sandbox, the egress proxy doors and policy.
//!
//! In `proxy` mode the sandbox keeps an empty network namespace; its only
//! way out is one host-side policy engine reached through two doors, both
//! created inside the sandbox (a Unix socket at `/run/hutch/proxy.sock` in its
//! root, a TCP listener on `127.0.0.1:3128` in its namespace) and served by
//! the supervisor. In `transparent` egress mode ([`transparent`]) the
//! sandbox also gets a resolver ([`dns`], [`names`]) and its TCP
//! connections to resolved names are captured and decided by the same
//! policy. See `docs/egress.md`.
//!
//! The proxy server is four steps, one module each, each calling only the
//! ones after it: [`accept`] (doors, connection caps, request heads; a
//! captured connection goes to [`transparent`]), [`decision`] (target,
//! policy), [`dial`] (resolve, vet, connect) and [`forward`] (tunnel or
//! forward, metered). Below them, what they share: [`state`] (one
//! sandbox's policy, caps and counters), [`record`] (a decision's audit
//! record and traffic), [`answer`] (the proxy's own responses) and
//! [`tunnel`] (the byte pumps).

mod accept;
pub mod addr;
mod answer;
mod broker;
mod decision;
mod dial;
pub mod dns;
mod doors;
mod error;
mod file;
mod forward;
pub mod host;
mod intercept;
pub mod names;
pub mod policy;
mod record;
pub mod sni;
mod state;
mod transparent;
mod tunnel;

use std::os::fd::OwnedFd;
use std::thread::JoinHandle;

pub use broker::Brokering;
pub use doors::{
    Door, PROXY_TCP_PORT, RESOLV_CONF, is_proxy_variable, proxy_env, tcp_door_in_current_netns,
    transparent_failure_hint, transparent_in_current_netns,
    transparent_ports, transparent_sockets_only, unix_door,
};
pub use error::NetError;
pub use file::{load_policy_file, load_policy_profile};
pub use intercept::InterceptError;
pub(crate) use intercept::{CA_BUNDLE_PATH, CA_ENV, Interception};
pub use policy::Policy;

use crate::audit::AuditSink;
use crate::spec::{Network, Spec, SpecError};

/// Check the `network` section of a Spec: in proxy mode every rule,
/// address and override must compile. Errors name the key (`network.allow[2]`).
pub fn validate_spec(spec: &Spec) -> Result<(), SpecError> {
    if let Network::Proxy(p) = &spec.network {
        if !spec.namespaces.net {
            return Err(SpecError::new(
                "network",
                "network mode \"proxy\" needs a network namespace (namespaces.net = true)",
            ));
        }
        Policy::from_spec(p).map_err(|e| match e {
            NetError::Policy { key, message } => SpecError::new(format!("network.{key}"), message),
            other => SpecError::new("network", other.to_string()),
        })?;
    }
    Ok(())
}

/// Entry points for the fuzz targets (not a stable API).
#[cfg(any(test, feature = "internals"))]
#[doc(hidden)]
pub mod fuzzing {
    use super::{Door, Policy};
    use crate::spec::ProxyPolicy;

    /// A policy that allows names but whose only resolvable name points at
    /// a refused TEST-NET address, so no request ever leaves the process.
    pub fn offline_policy() -> Policy {
        let p = ProxyPolicy {
            allow: vec![
                "fuzz.test".into(),
                "**.example".into(),
                "127.0.0.1:80".into(),
            ],
            deny: vec!["deny.example".into()],
            resolve: [("fuzz.test".to_string(), "192.0.2.1".to_string())].into(),
            plain_http: true,
            ..Default::default()
        };
        match Policy::from_spec(&p) {
            Ok(p) => p,
            Err(e) => panic!("fixed fuzz policy must compile: {e}"),
        }
    }

    /// One packet through the transparent-egress resolver (with
    /// [`offline_policy`]); the answer it sends, if any.
    #[cfg(feature = "internals")]
    pub fn resolver_answer(bytes: &[u8]) -> Option<Vec<u8>> {
        let state =
            super::state::State::new(offline_policy(), "fuzz".into(), None, Default::default());
        super::transparent::resolve_packet(&state, bytes)
    }

    /// One request head (and whatever follows) through a proxy connection
    /// on the Unix door (which also routes origin-form requests); returns
    /// the answer's status code, if any.
    pub fn answer_status(bytes: &[u8]) -> Option<u16> {
        let out = super::accept::answer_raw(offline_policy(), Door::Unix, bytes).ok()?;
        let text = std::str::from_utf8(out.get(..12)?).ok()?;
        text.strip_prefix("HTTP/1.1 ")?.parse().ok()
    }
}

/// A running proxy. Dropping it (or [`ProxyHandle::shutdown`]) stops the
/// server, closes every tunnel (each still writes its audit line) and joins
/// the thread.
pub struct ProxyHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ProxyHandle {
    /// Stop serving and wait for the proxy thread to finish.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Serve `doors` (listening sockets) with `policy` on a new thread running
/// its own single-threaded tokio runtime. Every decision is written to
/// `audit` when given. `brokering` holds what the proxy puts into
/// requests it reads (gateways, intercepted hosts): the armed secrets.
pub fn spawn(
    policy: Policy,
    doors: Vec<(Door, OwnedFd)>,
    sandbox_id: String,
    audit: Option<AuditSink>,
    brokering: Brokering,
) -> Result<ProxyHandle, NetError> {
    let broker = broker::Broker::new(brokering)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(state::MAX_RESOLVERS + 2)
        .thread_name("hutch-proxy-resolver")
        .build()
        .map_err(|e| NetError::io("cannot start the proxy runtime", e))?;
    let listeners = {
        let _ctx = runtime.enter();
        doors
            .into_iter()
            .map(|(door, fd)| accept::Listener::from_fd(door, fd))
            .collect::<Result<Vec<_>, _>>()?
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let state = state::State::new(policy, sandbox_id, audit, broker);
    let thread = std::thread::Builder::new()
        .name("hutch-proxy".into())
        .spawn(move || {
            runtime.block_on(accept::serve(state, listeners, stop_rx));
            // Dropping the runtime cancels the remaining tunnels; their
            // audit records are written as they drop.
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
        })
        .map_err(|e| NetError::io("cannot start the proxy thread", e))?;
    Ok(ProxyHandle {
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ProxyPolicy;

    #[test]
    fn proxy_specs_are_checked_entry_by_entry() {
        let mut spec = Spec {
            network: Network::Proxy(ProxyPolicy {
                allow: vec!["ok.example".into(), "*.10.0.0.1".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = validate_spec(&spec).unwrap_err();
        assert_eq!(e.path, "network.allow[1]");
        spec.network = Network::Proxy(ProxyPolicy {
            allow: vec!["ok.example".into()],
            resolve: [("ok.example".into(), "not-an-ip".into())].into(),
            ..Default::default()
        });
        assert_eq!(
            validate_spec(&spec).unwrap_err().path,
            "network.resolve.ok.example"
        );
        spec.network = Network::Proxy(ProxyPolicy {
            allow: vec!["ok.example".into()],
            ..Default::default()
        });
        assert!(validate_spec(&spec).is_ok());
        spec.namespaces.net = false;
        assert!(validate_spec(&spec).is_err());
    }

    #[test]
    fn hostile_heads_get_clear_answers_and_nothing_is_dialled() {
        let table: &[(&[u8], u16)] = &[
            (b"CONNECT fuzz.test:443 HTTP/1.1\r\n\r\n", 403), // resolves to TEST-NET
            (b"CONNECT other.test:443 HTTP/1.1\r\n\r\n", 403),
            (b"CONNECT deny.example:443 HTTP/1.1\r\n\r\n", 403),
            (b"CONNECT a.example:22 HTTP/1.1\r\n\r\n", 403),
            (b"CONNECT [fe80::1%25lo]:443 HTTP/1.1\r\n\r\n", 400),
            (b"CONNECT a.example HTTP/1.1\r\n\r\n", 400),
            (b"CONNECT a.example:0 HTTP/1.1\r\n\r\n", 400),
            (
                b"GET https://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                400,
            ),
            (b"GET http://u:p@a.example/ HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 403),
            (b"GET / HTTP/1.1\r\nHost: 2130706433:80\r\n\r\n", 403),
            (b"GET / HTTP/1.1\r\nHost: fuzz.test\r\n\r\n", 403),
            (b"GET / HTTP/1.1\r\nHost: \xff\xfe\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a.example:99999\r\n\r\n", 400),
        ];
        for (head, want) in table {
            assert_eq!(
                fuzzing::answer_status(head),
                Some(*want),
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
        // Garbage gets a 400 from the parser or a closed connection.
        for junk in [
            &b"\0\0\0\0"[..],
            b"CONNECT\r\n\r\n",
            b"GET  HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(fuzzing::answer_status(junk), None | Some(400)));
        }
    }
}
