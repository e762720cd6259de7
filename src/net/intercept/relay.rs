//! Until the request pipeline (`net::broker`) serves intercepted
//! connections: the decrypted stream is relayed to the host over a TLS
//! connection of the proxy's own, verified against the host's trust
//! store, with the protocol the sandbox's client chose.

use std::sync::{Arc, OnceLock};

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

use crate::net::dial::dial;
use crate::net::host::CanonicalHost;
use crate::net::record::Decision;

fn client_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
            let config = ClientConfig::builder_with_provider(super::provider())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

pub(super) async fn relay<S>(
    dec: &Arc<Decision>,
    mut client: S,
    host: &CanonicalHost,
    port: u16,
    h2: bool,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let state = dec.state.clone();
    let rule = dec.with(|f| f.rule.clone()).unwrap_or_default();
    let tcp = dial(&state, dec, host, port, &rule)
        .await
        .map_err(|_| format!("cannot reach {host}:{port}"))?;
    let mut config = (*client_config()).clone();
    config.alpn_protocols = vec![if h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    let name = match host {
        CanonicalHost::Name(n) => ServerName::try_from(n.clone()).map_err(|e| e.to_string())?,
        CanonicalHost::Ip(ip) => ServerName::IpAddress((*ip).into()),
    };
    let mut upstream = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("upstream {host}:{port}: TLS: {e}"))?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}
