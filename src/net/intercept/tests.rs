use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn rule(host: &str) -> Intercept {
    let mut r: Intercept = serde_json::from_str(r#"{"host":"x"}"#).unwrap();
    r.host = host.into();
    r
}

fn interception(hosts: &[&str]) -> Arc<Interception> {
    let rules: Vec<Intercept> = hosts.iter().map(|h| rule(h)).collect();
    Interception::new("test", &rules).unwrap().unwrap()
}

/// A client that trusts the sandbox's CA only.
fn client(i: &Interception, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(i.ca.cert_der().clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// One handshake: the server side terminated as `host`, the client
/// asking for `sni`; both results, after one byte each way.
async fn handshake(
    i: &Interception,
    host: &str,
    sni: &str,
    alpn: &[&[u8]],
) -> (
    Result<(bool, LeafUse), InterceptError>,
    Result<(), std::io::Error>,
) {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let host = canonicalize(host).unwrap();
    let server = async {
        let t = tls::terminate(server_io, i, &host, LIMIT).await?;
        let mut s = t.stream;
        let mut b = [0u8; 1];
        s.read_exact(&mut b)
            .await
            .map_err(InterceptError::Handshake)?;
        s.write_all(&b).await.map_err(InterceptError::Handshake)?;
        s.flush().await.map_err(InterceptError::Handshake)?;
        Ok((t.h2, t.leaf))
    };
    let connector = client(i, alpn);
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let client = async {
        let mut c = connector.connect(name, client_io).await?;
        c.write_all(b"x").await?;
        let mut b = [0u8; 1];
        c.read_exact(&mut b).await?;
        assert_eq!(&b, b"x");
        Ok(())
    };
    tokio::join!(server, client)
}

#[test]
fn a_client_trusting_only_the_ca_completes_the_handshake_and_the_leaf_is_minted_once() {
    let i = interception(&["api.example.com", "other.example:8443"]);
    rt().block_on(async {
        let (s, c) = handshake(
            &i,
            "api.example.com",
            "api.example.com",
            &[b"h2", b"http/1.1"],
        )
        .await;
        c.unwrap();
        assert_eq!(s.unwrap(), (true, LeafUse::Minted));
        let (s, c) = handshake(&i, "api.example.com", "api.example.com", &[b"http/1.1"]).await;
        c.unwrap();
        assert_eq!(s.unwrap(), (false, LeafUse::Cached));
        assert_eq!(i.leaves_minted(), 1);
        let (s, c) = handshake(&i, "other.example", "other.example", &[]).await;
        c.unwrap();
        assert_eq!(s.unwrap(), (false, LeafUse::Minted));
        assert_eq!(i.leaves_minted(), 2);
    });
}

#[test]
fn a_server_name_other_than_the_allowed_host_is_refused_and_nothing_is_minted() {
    let i = interception(&["api.example.com"]);
    rt().block_on(async {
        let (s, c) = handshake(&i, "api.example.com", "evil.example", &[]).await;
        assert!(c.is_err());
        let e = s.unwrap_err();
        assert!(matches!(e, InterceptError::ServerName { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("\"evil.example\" is not api.example.com"),
            "{e}"
        );
    });
    assert_eq!(i.leaves_minted(), 0);
}

/// The CA's name constraints: a leaf it signed for a host not in the
/// list (which the proxy never mints) is refused by a verifying client.
#[test]
fn the_ca_cannot_vouch_for_a_host_it_was_not_made_for() {
    let i = interception(&["api.example.com"]);
    let other = canonicalize("bank.example").unwrap();
    let leaf = i.ca.mint(&other).unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(leaf.chain, leaf.key)
        .unwrap();
    rt().block_on(async {
        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let name = ServerName::try_from("bank.example").unwrap();
        let (_, c) = tokio::join!(
            acceptor.accept(server_io),
            client(&i, &[]).connect(name, client_io)
        );
        let e = c.unwrap_err().to_string();
        assert!(e.contains("NameConstraintViolation"), "{e}");
    });
}

#[test]
fn the_bundle_ends_with_the_ca_and_holds_no_key() {
    let i = interception(&["api.example.com"]);
    let bundle = i.trust_bundle();
    assert!(bundle.ends_with(i.ca_pem()));
    assert!(bundle.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(!bundle.contains("PRIVATE KEY"));
    assert!(!format!("{i:?}").contains("PRIVATE"));
}

#[test]
fn intercept_entries_are_one_host_each() {
    // The one check of the entries: the policy's compile.
    let validate = |rules: &[Intercept]| {
        crate::net::broker::rules::compile_intercepts(rules)
            .map(drop)
            .map_err(|(key, message)| format!("network.{key}: {message}"))
    };
    let bad = |h: &str| validate(&[rule(h)]).unwrap_err();
    assert!(bad("*.example.com").contains("one name, not a pattern"));
    assert!(bad("api.example.com:0").contains("\"api.example.com:0\""));
    assert!(bad("api.example.com:x").contains("api.example.com:x"));
    assert!(bad("").contains("empty host"));
    let twice = validate(&[rule("API.example.com"), rule("api.example.com:443")]).unwrap_err();
    assert!(
        twice
            .contains("network.intercept[1].host: \"api.example.com:443\": listed twice"),
        "{twice}"
    );
    validate(&[
        rule("api.example.com"),
        rule("api.example.com:8443"),
        rule("127.0.0.1"),
    ])
    .unwrap();
    let i = interception(&["API.Example.com."]);
    assert!(
        i.rule_for(&canonicalize("api.example.com").unwrap(), 443)
            .is_some()
    );
    assert!(
        i.rule_for(&canonicalize("api.example.com").unwrap(), 8443)
            .is_none()
    );
    assert!(Interception::new("t", &[]).unwrap().is_none());
}
