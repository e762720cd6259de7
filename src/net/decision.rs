//! One request's decision: where it wants to go, whether the policy lets
//! it, and the audit record that says so. A [`Decision`] lives as long as
//! the request or tunnel it allowed and writes its audit line when the last
//! reference drops (cancelled ones included).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::Door;
use super::accept::State;
use super::dial::dial;
use super::forward::{forward, tunnel};
use super::host::{canonicalize, split_host_port};
use super::policy::Verdict;
use super::tunnel::{Meter, SpliceIo};

pub(super) type Body = UnsyncBoxBody<Bytes, hyper::Error>;

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
    pub(super) verdict: Option<Outcome>,
    pub(super) status: u16,
    pub(super) error: Option<String>,
    pub(super) connect_ms: Option<u64>,
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

/// A denial or failure answer that tells the client (often an agent) why.
pub(super) fn answer(status: StatusCode, code: &str, text: &str) -> Response<Body> {
    let clean: String = text
        .chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect();
    let body = format!("hutch egress proxy: {clean}\n");
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|n| match n {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if let Ok(v) = HeaderValue::from_str(&format!("{code}: {clean}")) {
        h.insert(HeaderName::from_static("x-hutch-error"), v);
    }
    r
}

/// The request's target as the client wrote it.
enum Target {
    Tunnel,
    Forward,
}

pub(super) async fn handle<S>(
    state: Arc<State>,
    door: Door,
    mut req: Request<Incoming>,
) -> Response<Body>
where
    S: SpliceIo + AsyncRead + AsyncWrite + Unpin,
{
    let dec = Decision::new(state.clone(), door, req.method().as_str().to_string());
    let (target, host_raw, port) = match parse_target(door, &req) {
        Ok(t) => t,
        Err(msg) => {
            dec.finish_with(Outcome::Invalid, 400, msg.clone());
            return answer(StatusCode::BAD_REQUEST, "invalid", &msg);
        }
    };
    dec.with(|f| f.port = Some(port));
    let host = match canonicalize(&host_raw) {
        Ok(h) => h,
        Err(e) => {
            let msg = format!("invalid host {host_raw:?}: {e}");
            dec.with(|f| f.host = Some(host_raw.escape_default().to_string()));
            dec.finish_with(Outcome::Invalid, 400, msg.clone());
            return answer(StatusCode::BAD_REQUEST, "invalid", &msg);
        }
    };
    dec.with(|f| f.host = Some(host.to_string()));
    let rule = match state.policy.check(&host, port) {
        Verdict::Allow(rule) => rule,
        Verdict::Deny(rule) => {
            let msg = format!("{host}:{port} is not allowed: {rule}");
            dec.with(|f| f.rule = Some(rule));
            dec.finish_with(Outcome::Deny, 403, msg.clone());
            return answer(StatusCode::FORBIDDEN, "denied", &msg);
        }
    };
    dec.with(|f| f.rule = Some(rule.clone()));
    if !state.budget_left() {
        let msg = "the sandbox's egress byte limit is used up".to_string();
        dec.finish_with(Outcome::Limit, 429, msg.clone());
        return answer(StatusCode::TOO_MANY_REQUESTS, "limit", &msg);
    }
    let Ok(permit) = state.tunnels.clone().try_acquire_owned() else {
        let msg = format!(
            "too many concurrent tunnels (limit {})",
            state.policy.limits().max_tunnels
        );
        dec.finish_with(Outcome::Limit, 429, msg.clone());
        return answer(StatusCode::TOO_MANY_REQUESTS, "limit", &msg);
    };
    let upstream = match dial(&state, &dec, &host, port, &rule).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    match target {
        Target::Tunnel => {
            let on_upgrade = hyper::upgrade::on(&mut req);
            dec.with(|f| {
                f.verdict = Some(Outcome::Allow);
                f.status = 200;
            });
            let d = dec.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match on_upgrade.await {
                    Ok(up) => tunnel::<S>(d, up, upstream).await,
                    Err(e) => d.with(|f| f.error = Some(format!("upgrade failed: {e}"))),
                }
            });
            Response::new(
                Full::new(Bytes::new())
                    .map_err(|n| match n {})
                    .boxed_unsync(),
            )
        }
        Target::Forward => forward(dec, req, host, port, upstream, permit).await,
    }
}

/// Work out the destination: CONNECT authority, absolute URI, or (on the
/// Unix door only) the Host header of an origin-form request.
fn parse_target(door: Door, req: &Request<Incoming>) -> Result<(Target, String, u16), String> {
    let uri: &Uri = req.uri();
    if req.method() == Method::CONNECT {
        let auth = uri.authority().ok_or("CONNECT needs a host:port target")?;
        let port = auth.port_u16().ok_or("CONNECT target has no port")?;
        if port == 0 {
            return Err("port 0".into());
        }
        return Ok((Target::Tunnel, auth.host().to_string(), port));
    }
    if let Some(scheme) = uri.scheme_str() {
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(format!(
                "absolute-form {scheme}:// is not proxied; use CONNECT for TLS"
            ));
        }
        let auth = uri.authority().ok_or("absolute URI without host")?;
        if auth.as_str().contains('@') {
            return Err("credentials in the URI are refused".into());
        }
        let port = auth.port_u16().unwrap_or(80);
        if port == 0 {
            return Err("port 0".into());
        }
        return Ok((Target::Forward, auth.host().to_string(), port));
    }
    if door != Door::Unix {
        return Err(
            "this is a proxy: send an absolute-form request (http://host/...) or CONNECT".into(),
        );
    }
    let hosts: Vec<&HeaderValue> = req.headers().get_all(header::HOST).iter().collect();
    if hosts.len() != 1 {
        return Err("an origin-form request needs exactly one Host header".into());
    }
    let value = hosts[0]
        .to_str()
        .map_err(|_| "Host header is not visible ASCII".to_string())?;
    let (h, port) = split_host_port(value)?;
    Ok((Target::Forward, h.to_string(), port.unwrap_or(80)))
}

#[cfg(test)]
mod tests {
    use super::super::fuzzing::answer_status;

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
                answer_status(head),
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
            assert!(matches!(answer_status(junk), None | Some(400)));
        }
    }
}
