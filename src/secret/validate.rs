//! The check of a Spec's secrets, gateways and intercepted hosts (part of
//! `launch::validate`, run by every front end before anything starts).
//! Errors name the key path (`secrets[1].hosts[0]`); none holds a value
//! (a Spec holds none).

use std::collections::BTreeMap;

use crate::net::Policy;
use crate::net::policy::Rule;
use crate::spec::{Injection, Network, Secret, SecretSource, Spec, SpecError};

/// Longest secret name (it appears in audit lines and placeholders).
pub(crate) const MAX_NAME_BYTES: usize = 64;
/// Most secrets in one Spec.
pub(crate) const MAX_SECRETS: usize = 64;
/// Headers the proxy sets itself (or that frame the request): a secret
/// cannot be injected as one of them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
];

/// Check `spec`'s secrets, gateways and intercepted hosts.
pub(crate) fn validate(spec: &Spec) -> Result<(), SpecError> {
    let proxy = match &spec.network {
        Network::Proxy(p) => p,
        _ if spec.secrets.is_empty() => return Ok(()),
        _ => {
            return Err(SpecError::new(
                "secrets",
                "secrets need network = \"proxy\" (the proxy puts them into requests; give allowed hosts with --allow-host)",
            ));
        }
    };
    if spec.secrets.is_empty() && proxy.gateways.is_empty() && proxy.intercept.is_empty() {
        return Ok(());
    }
    // The network section itself is checked by `net::validate_spec`, which
    // runs first; a policy that does not compile was refused there.
    let Ok(policy) = Policy::from_spec(proxy) else {
        return Ok(());
    };
    if spec.secrets.len() > MAX_SECRETS {
        return Err(SpecError::new(
            "secrets",
            format!("at most {MAX_SECRETS} secrets"),
        ));
    }
    // Every variable hutch places in the sandbox, and who placed it.
    let mut placed: BTreeMap<String, String> = BTreeMap::new();
    for (k, _) in crate::net::proxy_env(|_| false) {
        placed.insert(k, "the proxy's variables".into());
    }
    let mut claim_env = |key: String, var: &str, owner: String| -> Result<(), SpecError> {
        env_name(&key, var)?;
        if spec.env.contains_key(var) {
            return Err(SpecError::new(
                key,
                format!(
                    "{var} is already set in the sandbox's environment (--setenv or env); {owner} puts its own value there: drop one of the two"
                ),
            ));
        }
        if let Some(other) = placed.insert(var.to_string(), owner.clone()) {
            return Err(SpecError::new(
                key,
                format!("{var} is already placed by {other}; each variable has one owner"),
            ));
        }
        Ok(())
    };
    // Names, upstreams, rules and budgets of gateways and intercepted hosts
    // were checked when the policy compiled (`net::broker::rules`); what is
    // left is theirs to the allow-list and to the sandbox's variables.
    for (i, (g, route)) in proxy.gateways.iter().zip(&policy.gateways).enumerate() {
        let key = format!("network.gateways[{i}]");
        allowed(
            &format!("{key}.upstream"),
            &route.host,
            route.port,
            &policy,
            "",
        )?;
        for (j, var) in g.env.iter().enumerate() {
            claim_env(
                format!("{key}.env[{j}]"),
                var,
                format!("gateway {:?}", g.name),
            )?;
        }
    }
    for (i, x) in policy.intercepts.iter().enumerate() {
        allowed(
            &format!("network.intercept[{i}].host"),
            &x.host,
            x.port,
            &policy,
            "; only allowed hosts are intercepted",
        )?;
    }
    // The hosts the proxy sees requests for: gateway upstreams and
    // intercepted hosts. A secret bound elsewhere could never be injected.
    let seen_hosts: Vec<(crate::net::host::CanonicalHost, u16)> = policy
        .gateways
        .iter()
        .map(|g| (g.host.clone(), g.port))
        .chain(policy.intercepts.iter().map(|x| (x.host.clone(), x.port)))
        .collect();
    for (i, s) in spec.secrets.iter().enumerate() {
        let key = format!("secrets[{i}]");
        secret(&key, s, &policy, &seen_hosts, spec)?;
        if spec.secrets[..i].iter().any(|o| o.name == s.name) {
            return Err(SpecError::new(
                format!("{key}.name"),
                format!("secret {:?} is defined twice", s.name),
            ));
        }
        if let SecretSource::Fd(fd) = s.from
            && spec.secrets[..i]
                .iter()
                .any(|o| o.from == SecretSource::Fd(fd))
        {
            return Err(SpecError::new(
                format!("{key}.from.fd"),
                format!("fd {fd} is the source of two secrets; it is read to its end once"),
            ));
        }
        if let Some(var) = &s.env {
            claim_env(format!("{key}.env"), var, format!("secret {:?}", s.name))?;
        }
    }
    Ok(())
}

fn secret(
    key: &str,
    s: &Secret,
    policy: &Policy,
    seen_hosts: &[(crate::net::host::CanonicalHost, u16)],
    spec: &Spec,
) -> Result<(), SpecError> {
    if s.name.is_empty()
        || s.name.len() > MAX_NAME_BYTES
        || !s
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(SpecError::new(
            format!("{key}.name"),
            format!("a secret's name is 1 to {MAX_NAME_BYTES} of [A-Za-z0-9_.-]"),
        ));
    }
    match &s.from {
        SecretSource::Env(var) => env_name(&format!("{key}.from.env"), var)?,
        SecretSource::File(path) => {
            if !path.is_absolute() {
                return Err(SpecError::new(
                    format!("{key}.from.file"),
                    "must be an absolute path",
                ));
            }
        }
        SecretSource::Fd(fd) => {
            if *fd < 3 {
                return Err(SpecError::new(
                    format!("{key}.from.fd"),
                    "must be 3 or more (0-2 are the sandbox's stdio)",
                ));
            }
            if spec.inherit_fds.contains(fd) {
                return Err(SpecError::new(
                    format!("{key}.from.fd"),
                    format!("fd {fd} is also in inherit_fds: the sandbox would get the secret"),
                ));
            }
        }
    }
    if s.hosts.is_empty() {
        return Err(SpecError::new(
            format!("{key}.hosts"),
            "a secret needs at least one host it may be sent to",
        ));
    }
    for (j, h) in s.hosts.iter().enumerate() {
        let hkey = format!("{key}.hosts[{j}]");
        let rule = Rule::parse(h).map_err(|m| SpecError::new(&hkey, format!("{h:?}: {m}")))?;
        if !policy.allows_all_of(&rule) {
            return Err(SpecError::new(
                &hkey,
                format!(
                    "{h:?} is not on the allow-list; a secret goes only to allowed hosts (add it with --allow-host or network.allow)"
                ),
            ));
        }
        if !seen_hosts
            .iter()
            .any(|(host, port)| rule.covers_tls(host, *port))
        {
            return Err(SpecError::new(
                &hkey,
                format!(
                    "{h:?} is neither a gateway's upstream nor an intercepted host: its requests pass the proxy as an opaque TLS tunnel and could never carry the secret (add a gateway for it, or intercept it with --intercept)"
                ),
            ));
        }
    }
    rules(key, &s.methods, &s.paths)?;
    match &s.inject {
        Injection::Replace if s.env.is_none() => Err(SpecError::new(
            format!("{key}.inject"),
            "inject = \"replace\" swaps the placeholder of `env`, which is not set: set env, or inject into a header (header, bearer, basic)",
        )),
        Injection::Header(h) => {
            let lower = h.to_ascii_lowercase();
            if h.is_empty() || !h.bytes().all(is_tchar) {
                Err(SpecError::new(
                    format!("{key}.inject.header"),
                    format!("{h:?} is not a header name"),
                ))
            } else if RESERVED_HEADERS.contains(&lower.as_str()) {
                Err(SpecError::new(
                    format!("{key}.inject.header"),
                    format!("{h:?} frames the request; a secret cannot go there"),
                ))
            } else {
                Ok(())
            }
        }
        Injection::Basic(user) => {
            if user.contains(':') || user.bytes().any(|b| !b.is_ascii_graphic()) {
                Err(SpecError::new(
                    format!("{key}.inject.basic"),
                    "the user name holds printable ASCII and no ':'",
                ))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// `host:port` (a gateway's upstream, an intercepted host) is on the
/// allow-list.
fn allowed(
    key: &str,
    host: &crate::net::host::CanonicalHost,
    port: u16,
    policy: &Policy,
    why: &str,
) -> Result<(), SpecError> {
    let rule = Rule::parse(&format!("{host}:{port}")).map_err(|m| SpecError::new(key, m))?;
    if !policy.allows_all_of(&rule) {
        return Err(SpecError::new(
            key,
            format!(
                "{host}:{port} is not on the allow-list{why} (add it with --allow-host or network.allow)"
            ),
        ));
    }
    Ok(())
}

/// Methods are tokens (`POST`); path prefixes start with `/`.
fn rules(key: &str, methods: &[String], paths: &[String]) -> Result<(), SpecError> {
    for (i, m) in methods.iter().enumerate() {
        if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(SpecError::new(
                format!("{key}.methods[{i}]"),
                format!("{m:?} is not a method (GET, POST, ... in capitals)"),
            ));
        }
    }
    for (i, p) in paths.iter().enumerate() {
        if !p.starts_with('/') || p.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(SpecError::new(
                format!("{key}.paths[{i}]"),
                format!("{p:?} is not a path prefix (it starts with '/', no spaces)"),
            ));
        }
    }
    Ok(())
}

/// A POSIX-portable variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn env_name(key: &str, var: &str) -> Result<(), SpecError> {
    let ok = var.len() <= 255
        && var
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(SpecError::new(
            key,
            format!("{var:?} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
        ))
    }
}

/// RFC 9110 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml: &str) -> Spec {
        crate::spec::parse_toml(toml).unwrap()
    }

    const BASE: &str = r#"
command = ["true"]
[network]
mode = "proxy"
allow = ["api.anthropic.com", "**.github.com", "127.0.0.1:8443"]
[[network.gateways]]
name = "anthropic"
upstream = "https://api.anthropic.com"
env = ["ANTHROPIC_BASE_URL"]
[[network.intercept]]
host = "api.github.com"
[[secrets]]
name = "anthropic"
env = "ANTHROPIC_API_KEY"
from = { env = "REAL_ANTHROPIC_KEY" }
hosts = ["api.anthropic.com"]
inject = { header = "x-api-key" }
"#;

    fn err(extra: &str) -> SpecError {
        validate(&spec(&format!("{BASE}{extra}"))).unwrap_err()
    }

    #[test]
    fn a_well_formed_spec_passes() {
        validate(&spec(BASE)).unwrap();
        validate(&spec(&format!(
            "{BASE}[[secrets]]\nname = \"gh\"\nfrom = {{ file = \"/k\" }}\nhosts = [\"api.github.com\"]\ninject = {{ basic = \"x-access-token\" }}\n"
        )))
        .unwrap();
    }

    #[test]
    fn a_secret_host_off_the_allow_list_is_refused_at_its_key() {
        let e = err(
            "[[secrets]]\nname = \"x\"\nenv = \"X\"\nfrom = { env = \"Y\" }\nhosts = [\"evil.example\"]\n",
        );
        assert_eq!(e.path, "secrets[1].hosts[0]");
        assert!(e.message.contains("not on the allow-list"), "{}", e.message);
    }

    #[test]
    fn a_secret_host_the_proxy_never_sees_is_refused() {
        let e = err(
            "[[secrets]]\nname = \"x\"\nenv = \"X\"\nfrom = { env = \"Y\" }\nhosts = [\"github.com\"]\n",
        );
        assert_eq!(e.path, "secrets[1].hosts[0]");
        assert!(e.message.contains("opaque TLS tunnel"), "{}", e.message);
    }

    #[test]
    fn a_placeholder_variable_colliding_with_the_env_is_refused() {
        let mut s = spec(BASE);
        s.env.insert("ANTHROPIC_API_KEY".into(), "x".into());
        let e = validate(&s).unwrap_err();
        assert_eq!(e.path, "secrets[0].env");
        assert!(e.message.contains("already set"), "{}", e.message);
        // With a gateway's variable, and with the proxy's own.
        let e = err(
            "[[secrets]]\nname = \"x\"\nenv = \"ANTHROPIC_BASE_URL\"\nfrom = { env = \"Y\" }\nhosts = [\"api.anthropic.com\"]\n",
        );
        assert_eq!(e.path, "secrets[1].env");
        let e = err(
            "[[secrets]]\nname = \"x\"\nenv = \"HTTPS_PROXY\"\nfrom = { env = \"Y\" }\nhosts = [\"api.anthropic.com\"]\n",
        );
        assert!(e.message.contains("the proxy's variables"), "{}", e.message);
    }

    #[test]
    fn names_sources_and_injections_are_checked() {
        let one = |body: &str| {
            err(&format!(
                "[[secrets]]\nhosts = [\"api.anthropic.com\"]\n{body}\n"
            ))
        };
        assert_eq!(
            one("name = \"a b\"\nenv = \"X\"\nfrom = { env = \"Y\" }").path,
            "secrets[1].name"
        );
        assert_eq!(
            one("name = \"anthropic\"\nenv = \"X\"\nfrom = { env = \"Y\" }").path,
            "secrets[1].name"
        );
        assert_eq!(
            one("name = \"b\"\nenv = \"1X\"\nfrom = { env = \"Y\" }").path,
            "secrets[1].env"
        );
        assert_eq!(
            one("name = \"b\"\nenv = \"X\"\nfrom = { file = \"rel\" }").path,
            "secrets[1].from.file"
        );
        assert_eq!(
            one("name = \"b\"\nenv = \"X\"\nfrom = { fd = 1 }").path,
            "secrets[1].from.fd"
        );
        assert_eq!(
            one("name = \"b\"\nfrom = { env = \"Y\" }").path,
            "secrets[1].inject"
        );
        assert_eq!(
            one("name = \"b\"\nfrom = { env = \"Y\" }\ninject = { header = \"Host\" }").path,
            "secrets[1].inject.header"
        );
        assert_eq!(
            one("name = \"b\"\nfrom = { env = \"Y\" }\ninject = \"bearer\"\nmethods = [\"post\"]")
                .path,
            "secrets[1].methods[0]"
        );
    }

    #[test]
    fn gateways_and_intercepts_are_checked() {
        // As `launch::validate` runs them: the network section first.
        let full = |s: &Spec| crate::net::validate_spec(s).and_then(|()| validate(s));
        let bad_gw = |body: &str| {
            let s = BASE.replace(
                "upstream = \"https://api.anthropic.com\"",
                &format!("upstream = {body:?}"),
            );
            full(&spec(&s)).unwrap_err()
        };
        assert_eq!(
            bad_gw("http://api.anthropic.com").path,
            "network.gateways[0].upstream"
        );
        assert!(
            bad_gw("https://other.example")
                .message
                .contains("not on the allow-list")
        );
        assert!(
            bad_gw("https://u:p@api.anthropic.com")
                .message
                .contains("credentials")
        );
        full(&spec(&BASE.replace(
            "upstream = \"https://api.anthropic.com\"",
            "upstream = \"https://api.anthropic.com/v1/\"",
        )))
        .unwrap();
        let e = full(&spec(&BASE.replace(
            "name = \"anthropic\"\nupstream",
            "name = \"Anthropic\"\nupstream",
        )))
        .unwrap_err();
        assert_eq!(e.path, "network.gateways[0].name");
        let e = full(&spec(
            &BASE.replace("host = \"api.github.com\"", "host = \"*.github.com\""),
        ))
        .unwrap_err();
        assert_eq!(e.path, "network.intercept[0].host");
        let e = full(&spec(
            &BASE.replace("host = \"api.github.com\"", "host = \"example.org\""),
        ))
        .unwrap_err();
        assert!(e.message.contains("not on the allow-list"), "{}", e.message);
    }

    #[test]
    fn secrets_need_the_proxy_network() {
        let mut s = spec(BASE);
        s.network = Network::None;
        assert_eq!(validate(&s).unwrap_err().path, "secrets");
    }
}
