//! Request rules of a gateway or an intercepted host, compiled: the
//! upstream, allowed methods and path prefixes, and the budgets with their
//! counters (per sandbox, i.e. per proxy).

use std::sync::atomic::{AtomicU64, Ordering};

use hyper::Method;

use crate::net::host::{CanonicalHost, canonicalize, split_host_port};
use crate::spec::{Gateway, Intercept};

/// Methods, path prefixes and budgets (one gateway's or intercepted host's).
#[derive(Debug)]
pub(crate) struct RequestRules {
    methods: Vec<Method>,
    paths: Vec<String>,
    max_requests: Option<u64>,
    max_bytes: Option<u64>,
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl Clone for RequestRules {
    /// A copy starts with fresh counters (a Policy is cloned before it is
    /// served; counting starts then).
    fn clone(&self) -> Self {
        RequestRules {
            methods: self.methods.clone(),
            paths: self.paths.clone(),
            max_requests: self.max_requests,
            max_bytes: self.max_bytes,
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }
}

/// Why a request was refused by its rules.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RuleRefusal {
    /// 403: method or path not allowed.
    Denied(String),
    /// 429: a budget is used up.
    Budget(String),
}

impl RequestRules {
    fn compile(
        key: &str,
        methods: &[String],
        paths: &[String],
        max_requests: Option<u64>,
        max_bytes: Option<u64>,
    ) -> Result<RequestRules, (String, String)> {
        // A budget of 0 would refuse everything: a mistake, not a rule.
        if max_requests == Some(0) {
            return Err((format!("{key}.max_requests"), "must be at least 1".into()));
        }
        if max_bytes == Some(0) {
            return Err((format!("{key}.max_bytes"), "must be at least 1".into()));
        }
        Ok(RequestRules {
            methods: compile_methods(key, methods)?,
            paths: compile_paths(key, paths)?,
            max_requests,
            max_bytes,
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        })
    }

    /// Admit one request: method and path allowed, budgets not used up;
    /// counts it. `path` is the path the client asked for (no query),
    /// already checked by [`check_path_is_plain`].
    pub(crate) fn admit(&self, method: &Method, path: &str) -> Result<(), RuleRefusal> {
        if !self.methods.is_empty() && !self.methods.contains(method) {
            return Err(RuleRefusal::Denied(format!(
                "method {method} is not allowed (allowed: {})",
                self.methods
                    .iter()
                    .map(Method::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if !self.paths.is_empty() && !self.paths.iter().any(|p| path_has_prefix(path, p)) {
            return Err(RuleRefusal::Denied(format!(
                "path {path} is not under an allowed prefix ({})",
                self.paths.join(", ")
            )));
        }
        if let Some(max) = self.max_bytes
            && self.bytes.load(Ordering::Relaxed) >= max
        {
            return Err(RuleRefusal::Budget(format!(
                "the byte budget ({max} bytes) is used up"
            )));
        }
        if let Some(max) = self.max_requests {
            let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
            if n > max {
                return Err(RuleRefusal::Budget(format!(
                    "the request budget ({max} requests) is used up"
                )));
            }
        }
        Ok(())
    }

    /// Count `n` bytes (either way); false once the byte budget is exceeded.
    pub(crate) fn account(&self, n: u64) -> bool {
        let total = self.bytes.fetch_add(n, Ordering::Relaxed) + n;
        self.max_bytes.is_none_or(|max| total <= max)
    }
}

pub(super) fn compile_methods(
    key: &str,
    methods: &[String],
) -> Result<Vec<Method>, (String, String)> {
    methods
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let up = m.trim().to_ascii_uppercase();
            if up.is_empty() || !up.bytes().all(|b| b.is_ascii_uppercase()) {
                return Err((
                    format!("{key}.methods[{i}]"),
                    format!("{m:?} is not an HTTP method"),
                ));
            }
            Method::from_bytes(up.as_bytes()).map_err(|_| {
                (
                    format!("{key}.methods[{i}]"),
                    format!("{m:?} is not an HTTP method"),
                )
            })
        })
        .collect()
}

pub(super) fn compile_paths(key: &str, paths: &[String]) -> Result<Vec<String>, (String, String)> {
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let err = |m: &str| (format!("{key}.paths[{i}]"), format!("{p:?}: {m}"));
            if !p.starts_with('/') {
                return Err(err("a path prefix starts with '/'"));
            }
            if p.contains(['?', '#']) || p.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
                return Err(err("a path prefix is visible ASCII without '?' or '#'"));
            }
            check_path_is_plain(p).map_err(|m| err(&m))?;
            Ok(p.clone())
        })
        .collect()
}

/// `path` equals `prefix` or continues it at a segment boundary:
/// `/v1/messages` covers `/v1/messages/count_tokens`, not `/v1/messagesX`.
pub(crate) fn path_has_prefix(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

/// Refuse a path that an upstream could read differently from a prefix
/// check: a `.` or `..` segment (also percent-encoded), an encoded `/` or
/// `\`, a backslash or a NUL.
pub(crate) fn check_path_is_plain(path: &str) -> Result<(), String> {
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f")
        || lower.contains("%5c")
        || lower.contains("%00")
        || path.contains('\\')
    {
        return Err("an encoded '/', '\\' or NUL in the path is refused".into());
    }
    for seg in lower.split('/') {
        let seg = seg.replace("%2e", ".");
        if seg == "." || seg == ".." {
            return Err("a '.' or '..' segment in the path is refused".into());
        }
    }
    Ok(())
}

/// Which rules a brokered request answers to (an index into the policy's
/// gateways or intercepted hosts), so that a body can count its bytes.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code))] // `None`, `Intercept`: interception (s3-intercept)
pub(crate) enum RulesRef {
    /// A secret-bound host that is intercepted without rules of its own.
    None,
    Gateway(usize),
    Intercept(usize),
}

impl RulesRef {
    /// (Given the lists, not the policy, which imports this file.)
    pub(crate) fn get<'a>(
        self,
        gateways: &'a [GatewayRoute],
        intercepts: &'a [InterceptRules],
    ) -> Option<&'a RequestRules> {
        match self {
            RulesRef::None => None,
            RulesRef::Gateway(i) => gateways.get(i).map(|g| &g.rules),
            RulesRef::Intercept(i) => intercepts.get(i).map(|x| &x.rules),
        }
    }
}

/// One gateway, compiled.
#[derive(Debug, Clone)]
pub(crate) struct GatewayRoute {
    pub(crate) name: String,
    pub(crate) host: CanonicalHost,
    pub(crate) port: u16,
    /// The upstream's base path without its trailing `/` (`""` for none).
    pub(crate) base: String,
    pub(crate) rules: RequestRules,
}

/// One intercepted host's rules, compiled.
#[derive(Debug, Clone)]
pub(crate) struct InterceptRules {
    pub(crate) host: CanonicalHost,
    pub(crate) port: u16,
    pub(crate) rules: RequestRules,
}

/// The gateway name syntax: `[a-z0-9-]`, 1 to 64 bytes.
fn valid_gateway_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Compile `gateways`; errors are `(key, message)`, the key relative to
/// the network section (`gateways[0].upstream`).
pub(crate) fn compile_gateways(list: &[Gateway]) -> Result<Vec<GatewayRoute>, (String, String)> {
    let mut out: Vec<GatewayRoute> = Vec::with_capacity(list.len());
    for (i, g) in list.iter().enumerate() {
        let key = format!("gateways[{i}]");
        if !valid_gateway_name(&g.name) {
            return Err((
                format!("{key}.name"),
                format!("{:?}: a gateway name is 1 to 64 of [a-z0-9-]", g.name),
            ));
        }
        if out.iter().any(|o| o.name == g.name) {
            return Err((
                format!("{key}.name"),
                format!("{:?}: a second gateway with this name", g.name),
            ));
        }
        let (host, port, base) =
            parse_upstream(&g.upstream).map_err(|m| (format!("{key}.upstream"), m))?;
        let rules = RequestRules::compile(
            &key,
            &g.methods,
            &g.paths,
            g.max_requests,
            g.max_bytes.map(|b| b.0),
        )?;
        out.push(GatewayRoute {
            name: g.name.clone(),
            host,
            port,
            base,
            rules,
        });
    }
    Ok(out)
}

/// Compile `intercept`; errors as [`compile_gateways`].
pub(crate) fn compile_intercepts(
    list: &[Intercept],
) -> Result<Vec<InterceptRules>, (String, String)> {
    let mut out: Vec<InterceptRules> = Vec::with_capacity(list.len());
    for (i, x) in list.iter().enumerate() {
        let key = format!("intercept[{i}]");
        let err = |m: String| (format!("{key}.host"), format!("{:?}: {m}", x.host));
        let (h, port) = split_host_port(x.host.trim()).map_err(err)?;
        if h.contains('*') {
            return Err(err("an intercepted host is one name, not a pattern".into()));
        }
        let host = canonicalize(h).map_err(|e| err(e.to_string()))?;
        let port = port.unwrap_or(443);
        if port == 0 {
            return Err(err("port 0".into()));
        }
        if out.iter().any(|o| o.host == host && o.port == port) {
            return Err(err("listed twice".into()));
        }
        let rules = RequestRules::compile(
            &key,
            &x.methods,
            &x.paths,
            x.max_requests,
            x.max_bytes.map(|b| b.0),
        )?;
        out.push(InterceptRules { host, port, rules });
    }
    Ok(out)
}

/// `https://host[:port][/base-path]`: no credentials, query or fragment.
fn parse_upstream(text: &str) -> Result<(CanonicalHost, u16, String), String> {
    let q = |m: &str| format!("{text:?}: {m}");
    let rest = text
        .strip_prefix("https://")
        .ok_or_else(|| q("an upstream is https://host[:port][/base-path]"))?;
    if rest.contains(['?', '#', '@']) {
        return Err(q("an upstream has no credentials, query or fragment"));
    }
    let (authority, base) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (h, port) = split_host_port(authority).map_err(|m| q(&m))?;
    if h.is_empty() || h.contains('*') {
        return Err(q("an upstream names one host"));
    }
    let host = canonicalize(h).map_err(|e| q(&e.to_string()))?;
    let port = port.unwrap_or(443);
    if port == 0 {
        return Err(q("port 0"));
    }
    if base.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(q("the base path is visible ASCII"));
    }
    check_path_is_plain(base).map_err(|m| q(&m))?;
    Ok((host, port, base.trim_end_matches('/').to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(
        methods: &[&str],
        paths: &[&str],
        max_req: Option<u64>,
        max_bytes: Option<u64>,
    ) -> RequestRules {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        RequestRules::compile("g", &s(methods), &s(paths), max_req, max_bytes).unwrap()
    }

    #[test]
    fn methods_and_path_prefixes_at_segment_boundaries() {
        let r = rules(&["post"], &["/v1/messages"], None, None);
        assert!(r.admit(&Method::POST, "/v1/messages").is_ok());
        assert!(r.admit(&Method::POST, "/v1/messages/count_tokens").is_ok());
        assert!(matches!(
            r.admit(&Method::POST, "/v1/messagesX"),
            Err(RuleRefusal::Denied(_))
        ));
        assert!(matches!(
            r.admit(&Method::GET, "/v1/messages"),
            Err(RuleRefusal::Denied(_))
        ));
        assert!(matches!(
            r.admit(&Method::POST, "/v1/models"),
            Err(RuleRefusal::Denied(_))
        ));
        let any = rules(&[], &["/simple/"], None, None);
        assert!(any.admit(&Method::DELETE, "/simple/x").is_ok());
        assert!(any.admit(&Method::GET, "/simplex").is_err());
    }

    #[test]
    fn budgets_count_requests_and_bytes() {
        let r = rules(&[], &[], Some(2), None);
        assert!(r.admit(&Method::GET, "/").is_ok());
        assert!(r.admit(&Method::GET, "/").is_ok());
        assert!(matches!(
            r.admit(&Method::GET, "/"),
            Err(RuleRefusal::Budget(_))
        ));
        let b = rules(&[], &[], None, Some(100));
        assert!(b.admit(&Method::GET, "/").is_ok());
        assert!(b.account(60));
        assert!(!b.account(60));
        assert!(matches!(
            b.admit(&Method::GET, "/"),
            Err(RuleRefusal::Budget(_))
        ));
        // A copy (a Policy cloned for serving) starts from zero.
        assert!(b.clone().admit(&Method::GET, "/").is_ok());
    }

    #[test]
    fn dot_segments_and_encoded_separators_are_refused() {
        for bad in [
            "/v1/../admin",
            "/v1/%2e%2E/x",
            "/a/./b",
            "/a%2fb",
            "/a%5Cb",
            "/a\\b",
            "/x%00",
        ] {
            assert!(check_path_is_plain(bad).is_err(), "{bad}");
        }
        for ok in ["/v1/messages", "/", "", "/a..b/c.d", "/%41"] {
            assert!(check_path_is_plain(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn upstreams_and_names_compile_or_say_why() {
        let g = |name: &str, up: &str| Gateway {
            name: name.into(),
            upstream: up.into(),
            env: vec![],
            methods: vec![],
            paths: vec![],
            max_requests: None,
            max_bytes: None,
        };
        let ok = compile_gateways(&[
            g("anthropic", "https://API.Anthropic.com/"),
            g("idx", "https://pypi.example:8443/simple/"),
        ])
        .unwrap();
        assert_eq!(ok[0].host.to_string(), "api.anthropic.com");
        assert_eq!((ok[0].port, ok[0].base.as_str()), (443, ""));
        assert_eq!((ok[1].port, ok[1].base.as_str()), (8443, "/simple"));
        for (name, up, key) in [
            ("a", "http://x.example", "gateways[0].upstream"),
            ("a", "https://u:p@x.example", "gateways[0].upstream"),
            ("a", "https://x.example/?q", "gateways[0].upstream"),
            ("a", "https://*.example", "gateways[0].upstream"),
            ("a", "https://x.example/../y", "gateways[0].upstream"),
            ("A", "https://x.example", "gateways[0].name"),
            ("", "https://x.example", "gateways[0].name"),
        ] {
            assert_eq!(
                compile_gateways(&[g(name, up)]).unwrap_err().0,
                key,
                "{name} {up}"
            );
        }
        assert_eq!(
            compile_gateways(&[g("a", "https://x.example"), g("a", "https://y.example")])
                .unwrap_err()
                .0,
            "gateways[1].name"
        );
    }
}
