//! Which requests on the doors are gateway requests: origin-form
//! `/<name>/...` on the TCP door (and on the Unix door when its `Host` is
//! the sandbox's loopback), and absolute-form
//! `http://127.0.0.1:3128/<name>/...` from a client that sends everything
//! to its `HTTP_PROXY`.

use hyper::header;
use hyper::{Method, Request};

use super::rules::GatewayRoute;
use crate::net::doors::{Door, PROXY_TCP_PORT};

/// A request for a gateway: its index, and the path and query after
/// `/<name>` (at least `/`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GatewayRequest {
    pub(crate) index: usize,
    pub(crate) rest: String,
}

/// `None`: not a gateway request (the proxy handles it as before).
/// `Some(Err)`: addressed to the gateways, but no gateway has that name.
pub(crate) fn gateway_route<B>(
    gateways: &[GatewayRoute],
    door: Door,
    req: &Request<B>,
) -> Option<Result<GatewayRequest, String>> {
    if gateways.is_empty() || req.method() == Method::CONNECT {
        return None;
    }
    let uri = req.uri();
    match (uri.scheme_str(), uri.authority()) {
        (Some(scheme), Some(auth)) => {
            let to_door = scheme.eq_ignore_ascii_case("http")
                && is_loopback_name(auth.host())
                && auth.port_u16() == Some(PROXY_TCP_PORT);
            if !to_door {
                return None;
            }
        }
        (Some(_), None) | (None, Some(_)) => return None,
        (None, None) => match door {
            Door::Tcp => {}
            Door::Unix => {
                // The Unix door routes origin-form requests by Host; only
                // a loopback Host (curl --unix-socket ... http://localhost/
                // <name>/...) with a gateway's name is a gateway request.
                let host = req.headers().get(header::HOST)?.to_str().ok()?;
                let name = match host.rsplit_once(':') {
                    Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
                    _ => host,
                };
                if !is_loopback_name(name) {
                    return None;
                }
                let first = first_segment(uri.path());
                if !gateways.iter().any(|g| g.name == first) {
                    return None;
                }
            }
            Door::Transparent | Door::Resolver | Door::Refusals => return None,
        },
    }
    let path = uri.path();
    let first = first_segment(path);
    let Some(index) = gateways.iter().position(|g| g.name == first) else {
        return Some(Err(format!(
            "no gateway named {first:?} (gateways: {}); a gateway's URL is \
             http://127.0.0.1:{PROXY_TCP_PORT}/<name>/...",
            gateways
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let after = &path[1 + first.len()..];
    let mut rest = if after.is_empty() {
        "/".to_string()
    } else {
        after.to_string()
    };
    if let Some(q) = uri.query() {
        rest.push('?');
        rest.push_str(q);
    }
    Some(Ok(GatewayRequest { index, rest }))
}

fn first_segment(path: &str) -> &str {
    let p = path.strip_prefix('/').unwrap_or(path);
    p.split('/').next().unwrap_or("")
}

fn is_loopback_name(h: &str) -> bool {
    matches!(
        h.to_ascii_lowercase().as_str(),
        "127.0.0.1" | "localhost" | "[::1]" | "::1"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::broker::rules::compile_gateways;
    use crate::spec::Gateway;

    fn gateways() -> Vec<GatewayRoute> {
        let g = |name: &str| Gateway {
            name: name.into(),
            upstream: "https://api.example".into(),
            env: vec![],
            methods: vec![],
            paths: vec![],
            max_requests: None,
            max_bytes: None,
        };
        compile_gateways(&[g("anthropic"), g("openai")]).unwrap()
    }

    fn req(method: &str, uri: &str, host: Option<&str>) -> Request<()> {
        let mut b = Request::builder().method(method).uri(uri);
        if let Some(h) = host {
            b = b.header("host", h);
        }
        b.body(()).unwrap()
    }

    fn ok(index: usize, rest: &str) -> Option<Result<GatewayRequest, String>> {
        Some(Ok(GatewayRequest {
            index,
            rest: rest.into(),
        }))
    }

    #[test]
    fn origin_and_absolute_forms_reach_the_gateway() {
        let g = gateways();
        let r = |m, u, h, d| gateway_route(&g, d, &req(m, u, h));
        assert_eq!(
            r("POST", "/anthropic/v1/messages?beta=true", None, Door::Tcp),
            ok(0, "/v1/messages?beta=true")
        );
        assert_eq!(r("GET", "/openai", None, Door::Tcp), ok(1, "/"));
        assert_eq!(r("GET", "/openai/", None, Door::Tcp), ok(1, "/"));
        assert_eq!(
            r(
                "POST",
                "http://127.0.0.1:3128/anthropic/v1/messages",
                None,
                Door::Tcp
            ),
            ok(0, "/v1/messages")
        );
        assert_eq!(
            r(
                "POST",
                "http://localhost:3128/openai/v1/responses",
                None,
                Door::Unix
            ),
            ok(1, "/v1/responses")
        );
        assert_eq!(
            r(
                "POST",
                "/anthropic/v1/messages",
                Some("localhost"),
                Door::Unix
            ),
            ok(0, "/v1/messages")
        );
        // Not a gateway's: unchanged behaviour.
        assert_eq!(
            r("GET", "http://example.com/anthropic/x", None, Door::Tcp),
            None
        );
        assert_eq!(
            r("GET", "http://127.0.0.1:8080/anthropic/x", None, Door::Tcp),
            None
        );
        assert_eq!(
            r("GET", "/anthropic/x", Some("example.com"), Door::Unix),
            None
        );
        assert_eq!(r("GET", "/nope/x", Some("localhost"), Door::Unix), None);
        assert_eq!(r("CONNECT", "api.example:443", None, Door::Tcp), None);
        // Addressed to the gateways, unknown name: a clear error.
        let e = r("GET", "/anthropicx/v1", None, Door::Tcp)
            .unwrap()
            .unwrap_err();
        assert!(
            e.contains("\"anthropicx\"") && e.contains("anthropic, openai"),
            "{e}"
        );
        // No gateways: nothing is routed.
        assert_eq!(
            gateway_route(&[], Door::Tcp, &req("GET", "/anthropic/x", None)),
            None
        );
    }
}
