//! The armed secrets of one sandbox: which hosts (and methods, paths) each
//! is bound to, putting its value into a request per its [`Injection`],
//! and containment: a placeholder in a request to anywhere else is refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hyper::Method;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use memchr::memmem;

use super::rules::{compile_methods, compile_paths, path_has_prefix};
use crate::net::error::NetError;
use crate::net::host::CanonicalHost;
use crate::net::policy::Rule;
use crate::secret::{ArmedSecret, SecretValue};
use crate::spec::Injection;

/// One secret, compiled for the proxy.
#[derive(Debug)]
struct Bound {
    name: String,
    placeholder: Vec<u8>,
    value: SecretValue,
    hosts: Vec<Rule>,
    methods: Vec<Method>,
    paths: Vec<String>,
    inject: Injection,
}

/// What a request to one destination did with the secrets.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Names of the secrets whose value was put into the request.
    pub(crate) names: Vec<String>,
}

/// The armed secrets of one sandbox.
#[derive(Debug, Default)]
pub(crate) struct Secrets {
    list: Vec<Bound>,
}

impl Secrets {
    /// Compile the secrets' rules; errors name the secret, never its value.
    pub(crate) fn arm(armed: Vec<ArmedSecret>) -> Result<Secrets, NetError> {
        let mut list = Vec::with_capacity(armed.len());
        for (i, a) in armed.into_iter().enumerate() {
            let key = format!("secrets[{i}]");
            let policy_err = |(key, message): (String, String)| NetError::Policy { key, message };
            let hosts = a
                .rule
                .hosts
                .iter()
                .enumerate()
                .map(|(j, h)| {
                    Rule::parse(h).map_err(|m| NetError::Policy {
                        key: format!("{key}.hosts[{j}]"),
                        message: format!("secret {}: {h:?}: {m}", a.rule.name),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if a.placeholder.0.is_empty() || a.value.expose().is_empty() {
                return Err(NetError::Policy {
                    key,
                    message: format!("secret {}: empty value or placeholder", a.rule.name),
                });
            }
            list.push(Bound {
                methods: compile_methods(&key, &a.rule.methods).map_err(policy_err)?,
                paths: compile_paths(&key, &a.rule.paths).map_err(policy_err)?,
                name: a.rule.name,
                placeholder: a.placeholder.0.into_bytes(),
                value: a.value,
                hosts,
                inject: a.rule.inject,
            });
        }
        Ok(Secrets { list })
    }

    /// `(value, placeholder)` of every secret: what [`super::scrub`] swaps
    /// back in a response.
    pub(crate) fn scrub_pairs(&self) -> Vec<(SecretValue, Vec<u8>)> {
        self.list
            .iter()
            .map(|b| (b.value.clone(), b.placeholder.clone()))
            .collect()
    }

    /// A request leaving in plain HTTP: no placeholder may be in it (a
    /// secret is only ever sent over TLS, by a gateway or interception).
    pub(crate) fn refuse_in_plain_http(
        &self,
        target: &str,
        uri: &str,
        headers: &HeaderMap,
    ) -> Result<(), String> {
        for b in &self.list {
            if b.present(uri, headers) {
                return Err(format!(
                    "the placeholder of secret {} may not be sent to {target} in plain HTTP \
                     (a secret goes only to its hosts, over a gateway or interception)",
                    b.name
                ));
            }
        }
        Ok(())
    }

    /// Containment then injection for a request to `host:port` (over TLS):
    /// a placeholder of a secret not bound to it, or bound but not for
    /// this method and path, refuses the request (`Err`, the reason, which
    /// names the secret but never its value or placeholder); every secret
    /// bound to it is put in per its injection.
    pub(crate) fn apply(
        &self,
        host: &CanonicalHost,
        port: u16,
        method: &Method,
        path: &str,
        uri: &str,
        headers: &mut HeaderMap,
    ) -> Result<Applied, String> {
        let mut applied = Applied::default();
        for b in &self.list {
            let bound = b.hosts.iter().any(|r| r.covers_tls(host, port));
            let present = b.present(uri, headers);
            if !bound {
                if present {
                    return Err(format!(
                        "the placeholder of secret {} may not be sent to {host}:{port} \
                         (it is bound to {})",
                        b.name,
                        b.hosts
                            .iter()
                            .map(|r| r.text.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                continue;
            }
            let method_ok = b.methods.is_empty() || b.methods.contains(method);
            let path_ok = b.paths.is_empty() || b.paths.iter().any(|p| path_has_prefix(path, p));
            if !(method_ok && path_ok) {
                if present {
                    return Err(format!(
                        "secret {} may not be sent with {method} {path} to {host}:{port}",
                        b.name
                    ));
                }
                continue;
            }
            if b.inject(headers)? {
                applied.names.push(b.name.clone());
            }
        }
        Ok(applied)
    }
}

impl Bound {
    fn present(&self, uri: &str, headers: &HeaderMap) -> bool {
        let finder = memmem::Finder::new(&self.placeholder);
        finder.find(uri.as_bytes()).is_some()
            || headers.iter().any(|(name, v)| {
                finder.find(v.as_bytes()).is_some()
                    || (name == header::AUTHORIZATION
                        && basic_credentials(v).is_some_and(|c| finder.find(&c).is_some()))
            })
    }

    /// Put the value in; true when the request now carries it.
    fn inject(&self, headers: &mut HeaderMap) -> Result<bool, String> {
        let value = self.value.expose();
        let set = |headers: &mut HeaderMap, name: HeaderName, bytes: &[u8]| {
            let mut v = HeaderValue::from_bytes(bytes).map_err(|_| {
                format!(
                    "secret {}: its value cannot be sent in a header (control characters)",
                    self.name
                )
            })?;
            v.set_sensitive(true);
            headers.insert(name, v);
            Ok::<_, String>(true)
        };
        match &self.inject {
            Injection::Header(name) => {
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("secret {}: {name:?} is not a header name", self.name))?;
                set(headers, name, value)
            }
            Injection::Bearer => {
                let mut v = b"Bearer ".to_vec();
                v.extend_from_slice(value);
                set(headers, header::AUTHORIZATION, &v)
            }
            Injection::Basic(user) => {
                let mut creds = user.as_bytes().to_vec();
                creds.push(b':');
                creds.extend_from_slice(value);
                let v = format!("Basic {}", B64.encode(&creds));
                set(headers, header::AUTHORIZATION, v.as_bytes())
            }
            // `Injection` is non-exhaustive: a kind this proxy does not
            // know is treated as Replace, the one that adds nothing.
            _ => {
                let mut changed = false;
                let names: Vec<HeaderName> = headers.keys().cloned().collect();
                for name in names {
                    let old: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
                    let mut new = Vec::with_capacity(old.len());
                    let mut touched = false;
                    for v in old {
                        match self.replaced(&name, &v) {
                            Some(bytes) => {
                                touched = true;
                                let mut hv = HeaderValue::from_bytes(&bytes).map_err(|_| {
                                    format!(
                                        "secret {}: its value cannot be sent in a header \
                                         (control characters)",
                                        self.name
                                    )
                                })?;
                                hv.set_sensitive(true);
                                new.push(hv);
                            }
                            None => new.push(v),
                        }
                    }
                    if touched {
                        changed = true;
                        headers.remove(&name);
                        for v in new {
                            headers.append(name.clone(), v);
                        }
                    }
                }
                Ok(changed)
            }
        }
    }

    /// The header value with the placeholder replaced (inside decoded
    /// `Basic` credentials too); `None` when it holds no placeholder.
    fn replaced(&self, name: &HeaderName, v: &HeaderValue) -> Option<Vec<u8>> {
        let value = self.value.expose();
        if let Some(out) = replace_all(v.as_bytes(), &self.placeholder, value) {
            return Some(out);
        }
        if name == header::AUTHORIZATION {
            let creds = basic_credentials(v)?;
            let swapped = replace_all(&creds, &self.placeholder, value)?;
            return Some(format!("Basic {}", B64.encode(&swapped)).into_bytes());
        }
        None
    }
}

/// The decoded credentials of an `Authorization: Basic` value.
fn basic_credentials(v: &HeaderValue) -> Option<Vec<u8>> {
    let s = v.as_bytes();
    let scheme = s.get(..6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    B64.decode(s[6..].trim_ascii()).ok()
}

/// `hay` with every `from` replaced by `to`; `None` when there is none.
fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    let finder = memmem::Finder::new(from);
    let mut it = finder.find_iter(hay).peekable();
    it.peek()?;
    let mut out = Vec::with_capacity(hay.len() + to.len());
    let mut last = 0;
    for at in it {
        out.extend_from_slice(&hay[last..at]);
        out.extend_from_slice(to);
        last = at + from.len();
    }
    out.extend_from_slice(&hay[last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::host::canonicalize;
    use crate::secret::Placeholder;
    use crate::spec::{Secret, SecretSource};

    const VALUE: &str = "sk-real-value-123";
    const PH: &str = "hutch-ph-0a1b2c";

    fn armed(name: &str, hosts: &[&str], inject: Injection) -> ArmedSecret {
        ArmedSecret {
            rule: Secret {
                name: name.into(),
                env: Some("KEY".into()),
                from: SecretSource::Env("KEY".into()),
                hosts: hosts.iter().map(|h| h.to_string()).collect(),
                methods: vec![],
                paths: vec![],
                inject,
            },
            placeholder: Placeholder(format!("{PH}-{name}")),
            value: SecretValue::new(format!("{VALUE}-{name}").into_bytes()),
        }
    }

    fn host(h: &str) -> CanonicalHost {
        canonicalize(h).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn replace_swaps_the_placeholder_only_for_bound_hosts() {
        let s = Secrets::arm(vec![armed(
            "anthropic",
            &["api.anthropic.com"],
            Injection::Replace,
        )])
        .unwrap();
        let mut h = headers(&[("x-api-key", &format!("{PH}-anthropic")), ("accept", "*/*")]);
        let got = s
            .apply(
                &host("api.anthropic.com"),
                443,
                &Method::POST,
                "/v1/messages",
                "/v1/messages",
                &mut h,
            )
            .unwrap();
        assert_eq!(got.names, ["anthropic"]);
        assert_eq!(h["x-api-key"], format!("{VALUE}-anthropic"));
        assert!(h["x-api-key"].is_sensitive());
        assert_eq!(h["accept"], "*/*");
        // The same placeholder to another host, or another port: refused,
        // and the refusal names the secret, never the value or placeholder.
        for (to, port) in [("evil.example", 443), ("api.anthropic.com", 8443)] {
            let mut h = headers(&[("x-api-key", &format!("{PH}-anthropic"))]);
            let why = s
                .apply(&host(to), port, &Method::POST, "/", "/", &mut h)
                .unwrap_err();
            assert!(why.contains("secret anthropic"), "{why}");
            assert!(!why.contains(VALUE) && !why.contains(PH), "{why}");
            assert_eq!(h["x-api-key"], format!("{PH}-anthropic"));
        }
        // In the URI too.
        let uri = format!("/x?key={PH}-anthropic");
        assert!(
            s.apply(
                &host("evil.example"),
                443,
                &Method::GET,
                "/x",
                &uri,
                &mut HeaderMap::new()
            )
            .is_err()
        );
        // No placeholder, another host: nothing to do.
        let mut h = headers(&[("accept", "*/*")]);
        assert_eq!(
            s.apply(&host("evil.example"), 443, &Method::GET, "/", "/", &mut h)
                .unwrap(),
            Applied::default()
        );
    }

    #[test]
    fn header_bearer_and_basic_are_set_whatever_the_client_sent() {
        let s = Secrets::arm(vec![
            armed("h", &["a.example"], Injection::Header("x-api-key".into())),
            armed("b", &["b.example"], Injection::Bearer),
            armed(
                "g",
                &["**.git.example"],
                Injection::Basic("x-access-token".into()),
            ),
        ])
        .unwrap();
        let mut h = headers(&[("x-api-key", "anything")]);
        s.apply(&host("a.example"), 443, &Method::GET, "/", "/", &mut h)
            .unwrap();
        assert_eq!(h["x-api-key"], format!("{VALUE}-h"));
        let mut h = headers(&[("authorization", &format!("Bearer {PH}-b"))]);
        s.apply(&host("b.example"), 443, &Method::GET, "/", "/", &mut h)
            .unwrap();
        assert_eq!(h["authorization"], format!("Bearer {VALUE}-b"));
        let mut h = HeaderMap::new();
        let got = s
            .apply(
                &host("code.git.example"),
                443,
                &Method::GET,
                "/",
                "/",
                &mut h,
            )
            .unwrap();
        assert_eq!(got.names, ["g"]);
        let want = format!("Basic {}", B64.encode(format!("x-access-token:{VALUE}-g")));
        assert_eq!(h["authorization"], want);
    }

    #[test]
    fn replace_reaches_inside_basic_credentials() {
        let s = Secrets::arm(vec![armed("git", &["git.example"], Injection::Replace)]).unwrap();
        let basic = format!("Basic {}", B64.encode(format!("user:{PH}-git")));
        let mut h = headers(&[("authorization", &basic)]);
        s.apply(&host("git.example"), 443, &Method::GET, "/", "/", &mut h)
            .unwrap();
        let want = format!("Basic {}", B64.encode(format!("user:{VALUE}-git")));
        assert_eq!(h["authorization"], want);
        // ... and containment sees it there.
        let mut h = headers(&[("authorization", &basic)]);
        assert!(
            s.apply(&host("other.example"), 443, &Method::GET, "/", "/", &mut h)
                .is_err()
        );
        assert!(
            s.refuse_in_plain_http(
                "git.example:80",
                "/",
                &headers(&[("authorization", &basic)])
            )
            .is_err()
        );
        assert!(
            s.refuse_in_plain_http("git.example:80", "/", &HeaderMap::new())
                .is_ok()
        );
    }

    #[test]
    fn a_secrets_methods_and_paths_bind_it_further() {
        let mut a = armed("m", &["api.example"], Injection::Replace);
        a.rule.methods = vec!["POST".into()];
        a.rule.paths = vec!["/v1/messages".into()];
        let s = Secrets::arm(vec![a]).unwrap();
        let mut h = headers(&[("x-api-key", &format!("{PH}-m"))]);
        let why = s
            .apply(
                &host("api.example"),
                443,
                &Method::GET,
                "/v1/messages",
                "/v1/messages",
                &mut h,
            )
            .unwrap_err();
        assert!(why.contains("GET /v1/messages"), "{why}");
        let mut h = headers(&[("x-api-key", &format!("{PH}-m"))]);
        assert!(
            s.apply(
                &host("api.example"),
                443,
                &Method::POST,
                "/v1/files",
                "/v1/files",
                &mut h
            )
            .is_err()
        );
        let mut h = headers(&[("x-api-key", &format!("{PH}-m"))]);
        assert!(
            s.apply(
                &host("api.example"),
                443,
                &Method::POST,
                "/v1/messages",
                "/v1/messages?beta=1",
                &mut h
            )
            .is_ok()
        );
        assert_eq!(h["x-api-key"], format!("{VALUE}-m"));
    }

    #[test]
    fn debug_never_prints_the_value() {
        let s = Secrets::arm(vec![armed("d", &["a.example"], Injection::Bearer)]).unwrap();
        let dbg = format!("{s:?}");
        assert!(!dbg.contains(VALUE), "{dbg}");
    }
}
