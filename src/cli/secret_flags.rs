//! `--secret`, `--gateway` and `--intercept`: one comma-separated
//! `key=value` list per flag, each key a field of the Spec's schema
//! (`docs/secrets.md`), so flags, profiles and the APIs say the same thing.
//! A value holding a comma needs a profile file.

use anyhow::{Result, anyhow, bail};

use crate::spec::{ByteSize, Gateway, Injection, Intercept, Secret, SecretSource};

/// `--secret name=N,from-env=V|from-file=P|from-fd=N,host=H[,host=H...]
/// [,env=VAR][,method=M...][,path=P...][,inject=replace|bearer|header:NAME|basic:USER]`
pub(super) fn secret(text: &str) -> Result<Secret> {
    let flag = "--secret";
    let mut name = None;
    let mut env = None;
    let mut from = None;
    let mut hosts = Vec::new();
    let mut methods = Vec::new();
    let mut paths = Vec::new();
    let mut inject = Injection::Replace;
    for (k, v) in pairs(flag, text)? {
        match k {
            "name" => name = Some(v.to_string()),
            "env" => env = Some(v.to_string()),
            "from-env" | "from-file" | "from-fd" => {
                if from.is_some() {
                    bail!("{flag}: one source (from-env, from-file or from-fd), not two");
                }
                from = Some(match k {
                    "from-env" => SecretSource::Env(v.to_string()),
                    "from-file" => SecretSource::File(absolute(v)?),
                    _ => SecretSource::Fd(
                        v.parse()
                            .map_err(|_| anyhow!("{flag}: from-fd={v:?} is not an fd number"))?,
                    ),
                });
            }
            "host" => hosts.push(v.to_string()),
            "method" => methods.push(v.to_string()),
            "path" => paths.push(v.to_string()),
            "inject" => inject = injection(v)?,
            other => bail!(
                "{flag}: unknown key {other:?} (name, env, from-env, from-file, from-fd, host, method, path, inject)"
            ),
        }
    }
    let name = name.ok_or_else(|| anyhow!("{flag}: name=NAME is missing"))?;
    let from = from.ok_or_else(|| {
        anyhow!("{flag} {name}: a source is missing (from-env=VAR, from-file=PATH or from-fd=N)")
    })?;
    if hosts.is_empty() {
        bail!("{flag} {name}: host=HOST is missing (the hosts the secret may be sent to)");
    }
    Ok(Secret {
        name,
        env,
        from,
        hosts,
        methods,
        paths,
        inject,
    })
}

/// `--gateway name=N,upstream=https://HOST[:PORT][/BASE][,env=VAR...]
/// [,method=M...][,path=P...][,max-requests=N][,max-bytes=SIZE]`
pub(super) fn gateway(text: &str) -> Result<Gateway> {
    let flag = "--gateway";
    let mut name = None;
    let mut upstream = None;
    let mut env = Vec::new();
    let mut rules = Rules::default();
    for (k, v) in pairs(flag, text)? {
        match k {
            "name" => name = Some(v.to_string()),
            "upstream" => upstream = Some(v.to_string()),
            "env" => env.push(v.to_string()),
            _ if rules.take(flag, k, v)? => {}
            other => bail!(
                "{flag}: unknown key {other:?} (name, upstream, env, method, path, max-requests, max-bytes)"
            ),
        }
    }
    let name = name.ok_or_else(|| anyhow!("{flag}: name=NAME is missing"))?;
    let upstream =
        upstream.ok_or_else(|| anyhow!("{flag} {name}: upstream=https://HOST is missing"))?;
    Ok(Gateway {
        name,
        upstream,
        env,
        methods: rules.methods,
        paths: rules.paths,
        max_requests: rules.max_requests,
        max_bytes: rules.max_bytes,
    })
}

/// `--intercept HOST[:PORT][,method=M...][,path=P...][,max-requests=N][,max-bytes=SIZE]`
/// (or `host=HOST`).
pub(super) fn intercept(text: &str) -> Result<Intercept> {
    let flag = "--intercept";
    let mut host = None;
    let mut rules = Rules::default();
    for (i, item) in text.split(',').enumerate() {
        if i == 0 && !item.contains('=') {
            host = Some(item.to_string());
            continue;
        }
        let (k, v) = pair(flag, item)?;
        match k {
            "host" => host = Some(v.to_string()),
            _ if rules.take(flag, k, v)? => {}
            other => {
                bail!("{flag}: unknown key {other:?} (host, method, path, max-requests, max-bytes)")
            }
        }
    }
    let host = host
        .filter(|h| !h.is_empty())
        .ok_or_else(|| anyhow!("{flag}: the host is missing (--intercept HOST[,...])"))?;
    Ok(Intercept {
        host,
        methods: rules.methods,
        paths: rules.paths,
        max_requests: rules.max_requests,
        max_bytes: rules.max_bytes,
    })
}

/// The request rules gateways and intercepted hosts share.
#[derive(Default)]
struct Rules {
    methods: Vec<String>,
    paths: Vec<String>,
    max_requests: Option<u64>,
    max_bytes: Option<ByteSize>,
}

impl Rules {
    /// Take `k=v` if it is a rule's key.
    fn take(&mut self, flag: &str, k: &str, v: &str) -> Result<bool> {
        match k {
            "method" => self.methods.push(v.to_string()),
            "path" => self.paths.push(v.to_string()),
            "max-requests" => {
                self.max_requests = Some(
                    v.parse()
                        .map_err(|_| anyhow!("{flag}: max-requests={v:?} is not a number"))?,
                )
            }
            "max-bytes" => {
                self.max_bytes =
                    Some(ByteSize::parse(v).map_err(|e| anyhow!("{flag}: max-bytes: {e}"))?)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn injection(v: &str) -> Result<Injection> {
    Ok(match v.split_once(':') {
        None if v == "replace" => Injection::Replace,
        None if v == "bearer" => Injection::Bearer,
        Some(("header", h)) => Injection::Header(h.to_string()),
        Some(("basic", user)) => Injection::Basic(user.to_string()),
        _ => bail!("--secret: inject={v:?}: expected replace, bearer, header:NAME or basic:USER"),
    })
}

fn pairs<'a>(flag: &str, text: &'a str) -> Result<Vec<(&'a str, &'a str)>> {
    text.split(',').map(|item| pair(flag, item)).collect()
}

fn pair<'a>(flag: &str, item: &'a str) -> Result<(&'a str, &'a str)> {
    item.split_once('=')
        .ok_or_else(|| anyhow!("{flag}: expected KEY=VALUE, got {item:?}"))
}

/// A relative file is the caller's (hutch run's working directory).
fn absolute(p: &str) -> Result<std::path::PathBuf> {
    let p = std::path::Path::new(p);
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir()
        .map_err(|e| anyhow!("--secret: from-file={p:?}: no working directory: {e}"))?;
    Ok(cwd.join(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_flag_maps_onto_the_schema() {
        let s = secret("name=anthropic,env=ANTHROPIC_API_KEY,from-env=REAL,host=api.anthropic.com,method=POST,path=/v1/messages,inject=header:x-api-key").unwrap();
        assert_eq!(s.name, "anthropic");
        assert_eq!(s.env.as_deref(), Some("ANTHROPIC_API_KEY"));
        assert_eq!(s.from, SecretSource::Env("REAL".into()));
        assert_eq!(s.hosts, ["api.anthropic.com"]);
        assert_eq!(s.methods, ["POST"]);
        assert_eq!(s.paths, ["/v1/messages"]);
        assert_eq!(s.inject, Injection::Header("x-api-key".into()));
        let s = secret("name=gh,from-fd=3,host=github.com,inject=basic:x-access-token").unwrap();
        assert_eq!(s.from, SecretSource::Fd(3));
        assert_eq!(s.inject, Injection::Basic("x-access-token".into()));
        for bad in [
            "env=X,from-env=Y,host=h",
            "name=a,host=h",
            "name=a,from-env=Y",
            "name=a,from-env=Y,from-fd=3,host=h",
            "name=a,from-env=Y,host=h,inject=cookie",
            "name=a,from-env=Y,host=h,value=sk-1",
            "name=a,from-fd=x,host=h",
        ] {
            assert!(secret(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn gateway_and_intercept_flags_map_onto_the_schema() {
        let g = gateway("name=anthropic,upstream=https://api.anthropic.com,env=ANTHROPIC_BASE_URL,method=POST,max-requests=10,max-bytes=1M").unwrap();
        assert_eq!(g.upstream, "https://api.anthropic.com");
        assert_eq!(g.env, ["ANTHROPIC_BASE_URL"]);
        assert_eq!(g.max_requests, Some(10));
        assert_eq!(g.max_bytes, Some(ByteSize(1 << 20)));
        assert!(gateway("name=a").is_err());
        let x = intercept("github.com,path=/org/,max-requests=5").unwrap();
        assert_eq!(x.host, "github.com");
        assert_eq!(x.paths, ["/org/"]);
        assert_eq!(intercept("host=a.example").unwrap().host, "a.example");
        assert!(intercept("").is_err());
        assert!(intercept("a.example,bogus=1").is_err());
    }
}
