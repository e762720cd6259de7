//! The pipeline every brokered request goes through, whether it came to a
//! gateway or on an intercepted connection: the path is checked, the
//! rules admit it, the secrets are contained and injected, the upstream
//! is reached over TLS, and the response streams back metered and
//! scrubbed, with one audit line.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::body::Metered;
use super::body::UpBody;
use super::route::GatewayRequest;
use super::rules::{RuleRefusal, RulesRef, check_path_is_plain};
use super::scrub::Scrubber;
use super::upstream::{check, connect};
use crate::net::answer::{Body, answer};
use crate::net::doors::Door;
use crate::net::forward::strip_hop_by_hop;
use crate::net::host::CanonicalHost;
use crate::net::record::{Decision, Outcome};
use crate::net::state::State;

/// Where an intercepted connection was going: the host and port its
/// CONNECT (or captured SNI) named, and the door it came through (for the
/// audit line).
#[derive(Debug, Clone)]
pub(crate) struct InterceptTarget {
    pub(crate) host: CanonicalHost,
    pub(crate) port: u16,
    pub(crate) door: Door,
}

/// Serve a request routed to a gateway.
pub(crate) async fn serve_gateway(
    dec: Arc<Decision>,
    route: Result<GatewayRequest, String>,
    req: Request<Incoming>,
) -> Response<Body> {
    dec.with(|f| f.via = Some("gateway"));
    let route = match route {
        Ok(r) => r,
        Err(msg) => {
            dec.finish_with(Outcome::Invalid, 404, msg.clone());
            return answer(StatusCode::NOT_FOUND, "gateway", &msg);
        }
    };
    let state = dec.state.clone();
    let g = &state.policy.gateways[route.index];
    dec.with(|f| f.gateway = Some(g.name.clone()));
    let target = format!("{}{}", g.base, route.rest);
    pipeline(
        dec,
        g.host.clone(),
        g.port,
        target,
        RulesRef::Gateway(route.index),
        req,
    )
    .await
}

/// Serve every request arriving on an already-decrypted connection to an
/// intercepted host (HTTP/2 when `h2`, else HTTP/1.1 with keep-alive)
/// through the same pipeline as a gateway's; each request gets its own
/// decision and audit line. Returns when the connection ends.
pub(crate) async fn serve_connection<IO>(
    io: IO,
    target: InterceptTarget,
    h2: bool,
    state: Arc<State>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = state.policy.limits().clone();
    let rules = state
        .policy
        .intercepts
        .iter()
        .position(|x| x.host == target.host && x.port == target.port)
        .map_or(RulesRef::None, RulesRef::Intercept);
    let st = state.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let dec = Decision::new(st.clone(), target.door, req.method().as_str().to_string());
        dec.with(|f| f.via = Some("intercept"));
        let (host, port) = (target.host.clone(), target.port);
        async move {
            let path = req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            Ok::<_, Infallible>(pipeline(dec, host, port, path, rules, req).await)
        }
    });
    let io = TokioIo::new(io);
    let served = async {
        if h2 {
            let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            b.timer(TokioTimer::new())
                .max_header_list_size(limits.max_header_bytes as u32);
            let _ = b.serve_connection(io, service).await;
        } else {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(limits.idle_timeout)
                .max_buf_size(limits.max_header_bytes.max(8192) + 8192)
                .max_headers(100);
            let _ = b.serve_connection(io, service).await;
        }
    };
    let _ = tokio::time::timeout(limits.total_timeout, served).await;
}

/// One request to `host:port` for `target` (the path and query on the
/// upstream): see the module's doc.
async fn pipeline(
    dec: Arc<Decision>,
    host: CanonicalHost,
    port: u16,
    target: String,
    rules: RulesRef,
    req: Request<Incoming>,
) -> Response<Body> {
    let state = dec.state.clone();
    let path = target.split('?').next().unwrap_or("/").to_string();
    dec.with(|f| {
        f.host = Some(host.to_string());
        f.port = Some(port);
        f.path = Some(path.escape_default().to_string());
    });
    let refuse = |outcome, status: StatusCode, code: &str, msg: String| {
        dec.finish_with(outcome, status.as_u16(), msg.clone());
        answer(status, code, &msg)
    };
    if let Err(why) = check_path_is_plain(&path) {
        return refuse(Outcome::Invalid, StatusCode::BAD_REQUEST, "invalid", why);
    }
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    if let Some(r) = rules.get(&state.policy.gateways, &state.policy.intercepts) {
        match r.admit(&method, &path) {
            Ok(()) => {}
            Err(RuleRefusal::Denied(why)) => {
                let msg = format!("{method} {host}{path}: {why}");
                return refuse(Outcome::Deny, StatusCode::FORBIDDEN, "denied", msg);
            }
            Err(RuleRefusal::Budget(why)) => {
                let msg = format!("{host}: {why}");
                return refuse(Outcome::Limit, StatusCode::TOO_MANY_REQUESTS, "limit", msg);
            }
        }
    }
    if !state.budget_left() {
        let msg = "the sandbox's egress byte limit is used up".to_string();
        return refuse(Outcome::Limit, StatusCode::TOO_MANY_REQUESTS, "limit", msg);
    }
    let mut headers = strip_hop_by_hop(&parts.headers);
    let applied =
        match state
            .broker
            .secrets
            .apply(&host, port, &method, &path, &target, &mut headers)
        {
            Ok(a) => a,
            Err(why) => return refuse(Outcome::Deny, StatusCode::FORBIDDEN, "secret", why),
        };
    if !applied.names.is_empty() {
        // An echoed value must come back readable to be scrubbed.
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        dec.with(|f| f.secrets = applied.names);
    }
    let Ok(_permit) = state.tunnels.clone().try_acquire_owned() else {
        let msg = format!(
            "too many concurrent upstream requests (limit {})",
            state.policy.limits().max_tunnels
        );
        return refuse(Outcome::Limit, StatusCode::TOO_MANY_REQUESTS, "limit", msg);
    };
    let rule = match check(&dec, &host, port) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let pool = state.broker.pool.clone();
    // The upstream protocol follows the sandbox's (upstream.rs's doc).
    let offer_h2 = parts.version == hyper::Version::HTTP_2;
    let (mut sender, mut reused) = match pool.take(&host, port, offer_h2) {
        Some((s, address)) => {
            dec.with(|f| f.address = address);
            (s, true)
        }
        None => match connect(&dec, &host, port, &rule, offer_h2).await {
            Ok(s) => (s, false),
            Err(resp) => return resp,
        },
    };
    let authority = if port == 443 {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    let mut out = Request::new(Metered::up(body, dec.clone(), rules).boxed_unsync());
    *out.method_mut() = method.clone();
    *out.headers_mut() = headers;
    let limits = state.policy.limits().clone();
    let resp = loop {
        if fit(&mut out, sender.is_h2(), &authority, &target).is_err() {
            let msg = "invalid request path".to_string();
            return refuse(Outcome::Invalid, StatusCode::BAD_REQUEST, "invalid", msg);
        }
        let sent = tokio::time::timeout(limits.idle_timeout, sender.send(out)).await;
        match sent {
            Ok(Ok(r)) => break r,
            // A kept connection the upstream had closed: the request
            // never left; once more on a new connection.
            Ok(Err((_, Some(req)))) if reused => {
                out = req;
                reused = false;
                sender = match connect(&dec, &host, port, &rule, offer_h2).await {
                    Ok(s) => s,
                    Err(resp) => return resp,
                };
            }
            Ok(Err((e, _))) => {
                let msg = format!("upstream {host}:{port}: {e}");
                return refuse(Outcome::Error, StatusCode::BAD_GATEWAY, "upstream", msg);
            }
            Err(_) => {
                let msg = format!(
                    "upstream {host}:{port} sent no answer within the idle timeout ({} s)",
                    limits.idle_timeout.as_secs()
                );
                return refuse(Outcome::Error, StatusCode::GATEWAY_TIMEOUT, "timeout", msg);
            }
        }
    };
    let address = dec.with(|f| f.address.clone());
    pool.put(host.clone(), port, offer_h2, address, sender);
    let status = resp.status();
    dec.with(|f| {
        f.verdict = Some(Outcome::Allow);
        f.status = status.as_u16();
    });
    let (mut rparts, rbody) = resp.into_parts();
    rparts.headers = strip_hop_by_hop(&rparts.headers);
    let scrub = Scrubber::new(&state.broker.scrub_pairs);
    if !scrub.is_empty() {
        scrub.headers(&mut rparts.headers);
        let body_may_change = method != Method::HEAD
            && status != StatusCode::NO_CONTENT
            && status != StatusCode::NOT_MODIFIED;
        if body_may_change {
            // A scrubbed body may change length: it goes chunked.
            rparts.headers.remove(header::CONTENT_LENGTH);
        }
    }
    let body = Metered::down(rbody, dec, rules, Some(scrub));
    Response::from_parts(rparts, body.boxed_unsync())
}

/// The request's target and authority in the form the connection speaks:
/// HTTP/2 an absolute URI (its `:authority`) and no `Host`, HTTP/1.1 the
/// origin form and `Host`.
fn fit(req: &mut Request<UpBody>, h2: bool, authority: &str, target: &str) -> Result<(), ()> {
    let uri: Uri = if h2 {
        format!("https://{authority}{target}")
            .parse()
            .map_err(drop)?
    } else {
        target.parse().map_err(drop)?
    };
    *req.uri_mut() = uri;
    if h2 {
        req.headers_mut().remove(header::HOST);
    } else {
        let v = HeaderValue::from_str(authority).map_err(drop)?;
        req.headers_mut().insert(header::HOST, v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::host::canonicalize;
    use crate::net::policy::Policy;
    use crate::secret::{ArmedSecret, Placeholder, SecretValue};
    use crate::spec::{Injection, Intercept, ProxyPolicy, Secret, SecretSource};
    use http_body_util::Empty;
    use hyper::body::Bytes;

    /// An intercepted host allowing only `GET /v1/`, a secret bound to
    /// another host; no request here needs the network.
    fn state() -> Arc<State> {
        let policy = Policy::from_spec(&ProxyPolicy {
            allow: vec!["api.example".into(), "bound.example".into()],
            intercept: vec![Intercept {
                host: "api.example".into(),
                methods: vec!["GET".into()],
                paths: vec!["/v1/".into()],
                max_requests: None,
                max_bytes: None,
            }],
            ..Default::default()
        })
        .unwrap();
        let secret = ArmedSecret {
            rule: Secret {
                name: "key".into(),
                env: Some("KEY".into()),
                from: SecretSource::Env("KEY".into()),
                hosts: vec!["bound.example".into()],
                methods: vec![],
                paths: vec![],
                inject: Injection::Replace,
            },
            placeholder: Placeholder("hutch-placeholder-key-0123".into()),
            value: SecretValue::new(b"real-value".to_vec()),
        };
        let broker = crate::net::broker::Broker::new(crate::net::Brokering {
            secrets: vec![secret],
            interception: None,
        })
        .unwrap();
        State::new(policy, "t".into(), None, broker)
    }

    fn connection(h2: bool, state: &Arc<State>) -> TokioIo<tokio::io::DuplexStream> {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let target = InterceptTarget {
            host: canonicalize("api.example").unwrap(),
            port: 443,
            door: Door::Tcp,
        };
        tokio::spawn(serve_connection(server, target, h2, state.clone()));
        TokioIo::new(client)
    }

    /// HTTP/2: all on one connection. HTTP/1.1: a refusal closes its
    /// connection (`Connection: close`), so one connection each.
    async fn ask(h2: bool, reqs: Vec<Request<Empty<Bytes>>>) -> Vec<(u16, String)> {
        let state = state();
        let mut out = Vec::new();
        if h2 {
            let io = connection(true, &state);
            let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            for r in reqs {
                let resp = send.send_request(r).await.unwrap();
                out.push(status_and_reason(resp));
            }
        } else {
            for r in reqs {
                let io = connection(false, &state);
                let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
                tokio::spawn(conn);
                let resp = send.send_request(r).await.unwrap();
                out.push(status_and_reason(resp));
            }
        }
        out
    }

    fn status_and_reason(resp: Response<Incoming>) -> (u16, String) {
        let why = resp
            .headers()
            .get("x-hutch-error")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (resp.status().as_u16(), why)
    }

    fn req(method: &str, uri: &str, key: Option<&str>) -> Request<Empty<Bytes>> {
        let mut b = Request::builder().method(method).uri(uri);
        if let Some(k) = key {
            b = b.header("x-api-key", k);
        }
        b.body(Empty::new()).unwrap()
    }

    /// Every request on an intercepted connection (HTTP/1.1 with
    /// keep-alive, and HTTP/2) meets the host's rules and containment.
    #[test]
    fn requests_on_an_intercepted_connection_meet_the_rules() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for h2 in [false, true] {
            let base = if h2 { "https://api.example" } else { "" };
            let got = rt.block_on(ask(
                h2,
                vec![
                    req("POST", &format!("{base}/v1/x"), None),
                    req("GET", &format!("{base}/v2/x"), None),
                    req("GET", &format!("{base}/v1/%2e%2e/admin"), None),
                    req(
                        "GET",
                        &format!("{base}/v1/x"),
                        Some("hutch-placeholder-key-0123"),
                    ),
                ],
            ));
            assert_eq!(got[0].0, 403, "{got:?}");
            assert!(got[0].1.contains("method POST is not allowed"), "{got:?}");
            assert_eq!(got[1].0, 403, "{got:?}");
            assert!(got[1].1.contains("not under an allowed prefix"), "{got:?}");
            assert_eq!(got[2].0, 400, "{got:?}");
            assert_eq!(got[3].0, 403, "{got:?}");
            assert!(
                got[3].1.starts_with(
                    "secret: the placeholder of secret key may not be sent to api.example:443"
                ),
                "{got:?}"
            );
            assert!(!got[3].1.contains("real-value") && !got[3].1.contains("0123"));
        }
    }
}
