//! The compiled egress policy: host+port rules, allowed special addresses,
//! resolution overrides and limits.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::addr::{parse_allowed, special_range};
use super::broker::rules::{GatewayRoute, InterceptRules, compile_gateways, compile_intercepts};
use super::error::NetError;
use super::host::{CanonicalHost, canonicalize, split_host_port};
use crate::spec::ProxyPolicy;

/// The host part of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this name or address.
    Exact(CanonicalHost),
    /// `*.x`: strict subdomains of `x`, never `x` itself.
    Subdomains(String),
    /// `**.x`: `x` and its subdomains.
    ApexAndSubdomains(String),
}

/// Ports a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// No port written: 443, plus 80 when plain HTTP is allowed (allow
    /// rules); every port (deny rules).
    Default,
    One(u16),
}

/// One allow or deny entry, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The entry as written, for answers and the audit log.
    pub text: String,
    pub host: HostPattern,
    pub ports: Ports,
}

impl Rule {
    /// Parse `host`, `host:port`, `*.x`, `**.x:8443`, `[::1]:443`.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let (host_part, port) = split_host_port(text.trim())?;
        let ports = port.map_or(Ports::Default, Ports::One);
        let host = if let Some(rest) = host_part.strip_prefix("**.") {
            HostPattern::ApexAndSubdomains(wildcard_base(rest)?)
        } else if let Some(rest) = host_part.strip_prefix("*.") {
            HostPattern::Subdomains(wildcard_base(rest)?)
        } else if host_part.contains('*') {
            return Err("'*' is only allowed as a leading '*.' or '**.' label".into());
        } else {
            HostPattern::Exact(canonicalize(host_part).map_err(|e| e.to_string())?)
        };
        Ok(Rule {
            text: text.trim().to_string(),
            host,
            ports,
        })
    }

    /// Does this rule name `host:port`, a bare pattern meaning port 443
    /// (a secret's `hosts`, which are only ever sent over TLS)?
    pub(crate) fn covers_tls(&self, host: &CanonicalHost, port: u16) -> bool {
        let port_ok = match self.ports {
            Ports::Default => port == 443,
            Ports::One(p) => p == port,
        };
        port_ok && self.host_matches(host)
    }

    fn host_matches(&self, host: &CanonicalHost) -> bool {
        match (&self.host, host) {
            (HostPattern::Exact(h), _) => h == host,
            // A wildcard never matches an IP literal.
            (_, CanonicalHost::Ip(_)) => false,
            (HostPattern::Subdomains(base), CanonicalHost::Name(n)) => is_strict_subdomain(n, base),
            (HostPattern::ApexAndSubdomains(base), CanonicalHost::Name(n)) => {
                n == base || is_strict_subdomain(n, base)
            }
        }
    }
}

fn is_strict_subdomain(name: &str, base: &str) -> bool {
    name.len() > base.len() + 1
        && name.ends_with(base)
        && name.as_bytes()[name.len() - base.len() - 1] == b'.'
}

fn wildcard_base(rest: &str) -> Result<String, String> {
    if rest.contains('*') {
        return Err("'*' is only allowed as a leading '*.' or '**.' label".into());
    }
    match canonicalize(rest).map_err(|e| e.to_string())? {
        CanonicalHost::Name(n) => Ok(n),
        CanonicalHost::Ip(_) => Err("a wildcard cannot be applied to an IP address".into()),
    }
}

/// Effective limits (defaults filled in).
#[derive(Debug, Clone, PartialEq)]
pub struct EgressLimits {
    pub max_header_bytes: usize,
    pub handshake_timeout: Duration,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub total_timeout: Duration,
    pub max_tunnels: usize,
    pub max_connections: usize,
    pub max_pending_handshakes: usize,
    pub max_bytes: Option<u64>,
    pub max_audit_bytes: u64,
}

impl Default for EgressLimits {
    fn default() -> Self {
        EgressLimits {
            max_header_bytes: 16 * 1024,
            handshake_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            total_timeout: Duration::from_secs(6 * 3600),
            max_tunnels: 512,
            max_connections: 1024,
            max_pending_handshakes: 64,
            max_bytes: None,
            max_audit_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Result of checking a host and port against the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed by this rule.
    Allow(String),
    /// Denied; the string names the rule (or its absence).
    Deny(String),
}

/// A compiled, canonicalised egress policy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) allow: Vec<Rule>,
    pub(crate) deny: Vec<Rule>,
    pub(crate) allowed_addresses: Vec<IpNet>,
    pub(crate) resolve: HashMap<CanonicalHost, IpAddr>,
    pub(crate) plain_http: bool,
    pub(crate) limits: EgressLimits,
    /// Plain-HTTP endpoints mapped to HTTPS upstreams ([`super::broker`]).
    pub(crate) gateways: Vec<GatewayRoute>,
    /// Hosts whose TLS is terminated, with their request rules.
    pub(crate) intercepts: Vec<InterceptRules>,
}

impl Policy {
    /// Compile a Spec's proxy policy; errors name the offending entry.
    pub fn from_spec(p: &ProxyPolicy) -> Result<Policy, NetError> {
        let rules = |list: &[String], key: &str| -> Result<Vec<Rule>, NetError> {
            list.iter()
                .enumerate()
                .map(|(i, t)| {
                    Rule::parse(t).map_err(|m| NetError::Policy {
                        key: format!("{key}[{i}]"),
                        message: format!("{t:?}: {m}"),
                    })
                })
                .collect()
        };
        let allow = rules(&p.allow, "allow")?;
        let deny = rules(&p.deny, "deny")?;
        let allowed_addresses = p
            .allow_address
            .iter()
            .enumerate()
            .map(|(i, a)| {
                parse_allowed(a).map_err(|message| NetError::Policy {
                    key: format!("allow_address[{i}]"),
                    message,
                })
            })
            .collect::<Result<_, _>>()?;
        let mut resolve = HashMap::new();
        for (name, addr) in &p.resolve {
            let err = |message: String| NetError::Policy {
                key: format!("resolve.{name}"),
                message,
            };
            let host = canonicalize(name).map_err(|e| err(format!("{name:?}: {e}")))?;
            let bare = addr
                .strip_prefix('[')
                .and_then(|a| a.strip_suffix(']'))
                .unwrap_or(addr);
            let ip: IpAddr = bare
                .parse()
                .map_err(|_| err(format!("{addr:?} is not an IP address")))?;
            resolve.insert(host, ip);
        }
        let d = EgressLimits::default();
        let l = &p.limits;
        let positive = |key: &str, v: Option<u64>, dflt: usize| -> Result<usize, NetError> {
            match v {
                None => Ok(dflt),
                Some(0) => Err(NetError::Policy {
                    key: format!("limits.{key}"),
                    message: "must be at least 1".into(),
                }),
                Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
            }
        };
        let limits = EgressLimits {
            max_header_bytes: match l.max_header_bytes {
                None => d.max_header_bytes,
                Some(b) if b.0 < 1024 || b.0 > 1024 * 1024 => {
                    return Err(NetError::Policy {
                        key: "limits.max_header_bytes".into(),
                        message: "must be between 1 KiB and 1 MiB".into(),
                    });
                }
                Some(b) => b.0 as usize,
            },
            handshake_timeout: l.handshake_timeout.map_or(d.handshake_timeout, |t| t.0),
            connect_timeout: l.connect_timeout.map_or(d.connect_timeout, |t| t.0),
            idle_timeout: l.idle_timeout.map_or(d.idle_timeout, |t| t.0),
            total_timeout: l.total_timeout.map_or(d.total_timeout, |t| t.0),
            max_tunnels: positive("max_tunnels", l.max_tunnels, d.max_tunnels)?,
            max_connections: positive("max_connections", l.max_connections, d.max_connections)?,
            max_pending_handshakes: positive(
                "max_pending_handshakes",
                l.max_pending_handshakes,
                d.max_pending_handshakes,
            )?,
            max_bytes: l.max_bytes.map(|b| b.0),
            max_audit_bytes: match l.max_audit_bytes {
                None => d.max_audit_bytes,
                Some(b) if b.0 < 4096 => {
                    return Err(NetError::Policy {
                        key: "limits.max_audit_bytes".into(),
                        message: "must be at least 4 KiB".into(),
                    });
                }
                Some(b) => b.0,
            },
        };
        for (key, t) in [
            ("handshake_timeout", limits.handshake_timeout),
            ("connect_timeout", limits.connect_timeout),
            ("idle_timeout", limits.idle_timeout),
            ("total_timeout", limits.total_timeout),
        ] {
            if t.is_zero() {
                return Err(NetError::Policy {
                    key: format!("limits.{key}"),
                    message: "must be longer than 0".into(),
                });
            }
        }
        let broker_err = |(key, message): (String, String)| NetError::Policy { key, message };
        let gateways = compile_gateways(&p.gateways).map_err(broker_err)?;
        let intercepts = compile_intercepts(&p.intercept).map_err(broker_err)?;
        Ok(Policy {
            allow,
            deny,
            allowed_addresses,
            resolve,
            plain_http: p.plain_http,
            limits,
            gateways,
            intercepts,
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &EgressLimits {
        &self.limits
    }

    /// Check a canonical host and port: deny rules win, then the first
    /// matching allow rule.
    pub fn check(&self, host: &CanonicalHost, port: u16) -> Verdict {
        for r in &self.deny {
            let port_ok = match r.ports {
                Ports::Default => true,
                Ports::One(p) => p == port,
            };
            if port_ok && r.host_matches(host) {
                return Verdict::Deny(format!("deny rule {:?}", r.text));
            }
        }
        let mut host_listed = None;
        for r in &self.allow {
            if !r.host_matches(host) {
                continue;
            }
            let port_ok = match r.ports {
                Ports::Default => port == 443 || (self.plain_http && port == 80),
                Ports::One(p) => p == port,
            };
            if port_ok {
                return Verdict::Allow(format!("allow rule {:?}", r.text));
            }
            host_listed.get_or_insert(r);
        }
        match host_listed {
            Some(r) => Verdict::Deny(format!(
                "port {port} is not allowed for {host} (allow rule {:?} covers {})",
                r.text,
                match r.ports {
                    Ports::Default if self.plain_http => "ports 443 and 80".to_string(),
                    Ports::Default => "port 443 only".to_string(),
                    Ports::One(p) => format!("port {p} only"),
                }
            )),
            None => Verdict::Deny("no allow rule matches".into()),
        }
    }

    /// Every port some allow rule can allow (the ports `transparent`
    /// egress captures), ascending.
    pub fn allowed_ports(&self) -> Vec<u16> {
        let mut ports = std::collections::BTreeSet::new();
        for r in &self.allow {
            match r.ports {
                Ports::Default => {
                    ports.insert(443);
                    if self.plain_http {
                        ports.insert(80);
                    }
                }
                Ports::One(p) => {
                    ports.insert(p);
                }
            }
        }
        ports.into_iter().collect()
    }

    /// May `host` be resolved at all (`transparent` egress's resolver)?
    /// Yes when it is allowed on at least one port; the connection is
    /// still decided by [`Policy::check`] with its real port.
    pub fn check_name(&self, host: &CanonicalHost) -> Verdict {
        let ports = self.allowed_ports();
        let mut first_denial = None;
        for port in ports {
            match self.check(host, port) {
                Verdict::Allow(rule) => return Verdict::Allow(rule),
                Verdict::Deny(why) => {
                    first_denial.get_or_insert(why);
                }
            }
        }
        Verdict::Deny(first_denial.unwrap_or_else(|| "no allow rule matches".into()))
    }

    /// May this resolved address be dialled? `Err` names the special range.
    pub fn check_address(&self, ip: IpAddr) -> Result<(), &'static str> {
        if self.allowed_addresses.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        match special_range(ip) {
            None => Ok(()),
            Some(range) => Err(range),
        }
    }

    /// A resolution override for this host, if any.
    pub fn resolve_override(&self, host: &CanonicalHost) -> Option<IpAddr> {
        self.resolve.get(host).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str], plain_http: bool) -> Policy {
        Policy::from_spec(&ProxyPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
            plain_http,
            ..Default::default()
        })
        .unwrap()
    }

    fn allowed(p: &Policy, host: &str, port: u16) -> bool {
        matches!(
            p.check(&canonicalize(host).unwrap(), port),
            Verdict::Allow(_)
        )
    }

    #[test]
    fn names_resolve_when_some_port_is_allowed_and_deny_wins() {
        let p = policy(
            &["a.example", "**.b.example:22", "10.0.0.1:80"],
            &["x.b.example"],
            true,
        );
        assert_eq!(p.allowed_ports(), [22, 80, 443]);
        let name = |h: &str| matches!(p.check_name(&canonicalize(h).unwrap()), Verdict::Allow(_));
        assert!(name("a.example") && name("b.example") && name("y.b.example"));
        assert!(!name("x.b.example") && !name("other.example"));
        assert!(policy(&[], &[], false).allowed_ports().is_empty());
    }

    #[test]
    fn matching_table() {
        let p = policy(
            &[
                "api.example.com",
                "*.sub.example",
                "**.both.example",
                "mirror.example:8080",
                "Bücher.de",
                "127.0.0.1:9000",
                "[2001:4860::1]",
                "blocked.both.example",
            ],
            &["blocked.both.example", "*.evil.sub.example:443"],
            false,
        );
        let table: &[(&str, u16, bool)] = &[
            ("api.example.com", 443, true),
            ("API.EXAMPLE.COM.", 443, true),
            ("api.example.com", 80, false),
            ("api.example.com", 8443, false),
            ("x.api.example.com", 443, false),
            ("example.com", 443, false),
            ("a.sub.example", 443, true),
            ("a.b.sub.example", 443, true),
            ("sub.example", 443, false),
            ("xsub.example", 443, false),
            ("both.example", 443, true),
            ("a.both.example", 443, true),
            ("xboth.example", 443, false),
            ("mirror.example", 8080, true),
            ("mirror.example", 443, false),
            ("xn--bcher-kva.de", 443, true),
            ("bücher.de", 443, true),
            ("127.0.0.1", 9000, true),
            ("127.1", 9000, true),
            ("2130706433", 9000, true),
            ("0x7f.0.0.1", 9000, true),
            ("0177.0.0.1", 9000, true),
            ("127.0.0.1", 443, false),
            ("[2001:4860:0::1]", 443, true),
            ("blocked.both.example", 443, false),
            ("x.evil.sub.example", 443, false),
            ("other.sub.example", 443, true),
        ];
        for (host, port, want) in table {
            assert_eq!(allowed(&p, host, *port), *want, "{host}:{port}");
        }
    }

    #[test]
    fn wildcard_never_matches_ip() {
        for bad in ["**.1", "*.0.0.1", "**.0x7f.1"] {
            let r = Policy::from_spec(&ProxyPolicy {
                allow: vec![bad.into()],
                ..Default::default()
            });
            assert!(r.is_err(), "{bad:?} accepted");
        }
        let p = policy(&["**.example", "*.in-addr.arpa"], &[], false);
        assert!(!allowed(&p, "127.0.0.1", 443));
        assert!(!allowed(&p, "[::1]", 443));
    }

    #[test]
    fn plain_http_adds_port_80() {
        let p = policy(&["a.example"], &[], true);
        assert!(allowed(&p, "a.example", 80));
        assert!(allowed(&p, "a.example", 443));
        assert!(!allowed(&p, "a.example", 8080));
    }

    #[test]
    fn deny_message_names_rule_and_port() {
        let p = policy(&["a.example", "**.b.example"], &["x.b.example"], false);
        let h = canonicalize("a.example").unwrap();
        match p.check(&h, 22) {
            Verdict::Deny(m) => assert!(m.contains("port 22") && m.contains("a.example")),
            v => panic!("{v:?}"),
        }
        match p.check(&canonicalize("x.b.example").unwrap(), 443) {
            Verdict::Deny(m) => assert!(m.contains("deny rule \"x.b.example\"")),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn bad_rules_refused() {
        for bad in [
            "*",
            "*.",
            "a.*.example",
            "*.127.0.0.1",
            "ex\u{0}ample.com",
            "a.com:0",
            "a.com:http",
            "[fe80::1%eth0]",
            "",
        ] {
            let r = Policy::from_spec(&ProxyPolicy {
                allow: vec![bad.into()],
                ..Default::default()
            });
            assert!(r.is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn addresses() {
        let p = Policy::from_spec(&ProxyPolicy {
            allow_address: vec!["127.0.0.1".into(), "10.1.0.0/16".into()],
            ..Default::default()
        })
        .unwrap();
        assert!(p.check_address("127.0.0.1".parse().unwrap()).is_ok());
        assert!(p.check_address("127.0.0.2".parse().unwrap()).is_err());
        assert!(p.check_address("10.1.2.3".parse().unwrap()).is_ok());
        assert!(p.check_address("10.2.0.1".parse().unwrap()).is_err());
        assert!(
            p.check_address("::ffff:127.0.0.1".parse().unwrap())
                .is_err()
        );
        assert!(p.check_address("8.8.8.8".parse().unwrap()).is_ok());
    }
}
