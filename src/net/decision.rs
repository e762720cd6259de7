//! One request's decision: where it wants to go, whether the policy lets
//! it, then the tunnel or the forwarded request. The audit record that
//! says so is [`super::record`]'s.

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use tokio::io::{AsyncRead, AsyncWrite};

use super::answer::{Body, answer};
use super::broker::route::gateway_route;
use super::broker::serve::serve_gateway;
use super::dial::dial;
use super::doors::Door;
use super::forward::{forward, tunnel};
use super::host::{canonicalize, split_host_port};
use super::intercept::serve;
use super::policy::Verdict;
use super::record::{Decision, Outcome};
use super::state::State;
use super::tunnel::SpliceIo;

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
    if let Some(route) = gateway_route(&state.policy.gateways, door, &req) {
        return serve_gateway(dec, route, req).await;
    }
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
    if matches!(target, Target::Tunnel) && state.intercepts(&host, port) {
        // Its TLS ends here; the request pipeline dials the host.
        return intercepted(dec, door, req, host, port, permit);
    }
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

/// Answer a CONNECT to an intercepted host with 200, then terminate its
/// TLS on the upgraded connection ([`super::intercept::serve`]).
fn intercepted(
    dec: Arc<Decision>,
    door: Door,
    mut req: Request<Incoming>,
    host: super::host::CanonicalHost,
    port: u16,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Response<Body> {
    let on_upgrade = hyper::upgrade::on(&mut req);
    dec.with(|f| {
        f.verdict = Some(Outcome::Allow);
        f.status = 200;
    });
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(up) => serve::connect(dec, door, up, host, port, permit).await,
            Err(e) => dec.with(|f| f.error = Some(format!("upgrade failed: {e}"))),
        }
    });
    Response::new(
        Full::new(Bytes::new())
            .map_err(|n| match n {})
            .boxed_unsync(),
    )
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
