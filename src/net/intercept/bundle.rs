//! The sandbox's trust: one PEM bundle (the host's trust store, then the
//! sandbox's CA) bound read-only into its root, and the variables that
//! point the common TLS stacks at it.

use rustls::pki_types::CertificateDer;

/// Where the bundle is inside the sandbox (next to the proxy's Unix door).
pub const CA_BUNDLE_PATH: &str = "/run/hutch/ca-bundle.pem";

/// The variables set to [`CA_BUNDLE_PATH`] (unless the caller set one):
/// OpenSSL and everything on it (curl, Python's `ssl`, git, Ruby), Node's
/// extra CAs, Python `requests`, curl, git and pip explicitly.
pub const CA_ENV: [&str; 6] = [
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

/// The host's trust store as rustls-native-certs reads it (honouring
/// `SSL_CERT_FILE` / `SSL_CERT_DIR`), then `ca_pem`. An unreadable store
/// leaves the CA alone in the bundle: the sandbox then trusts what the
/// host trusts, nothing.
pub(crate) fn trust_bundle(ca_pem: &str) -> String {
    let found = rustls_native_certs::load_native_certs();
    let mut out = String::with_capacity(found.certs.len() * 2048 + ca_pem.len());
    for der in &found.certs {
        out.push_str(&pem_certificate(der));
    }
    out.push_str(ca_pem);
    out
}

fn pem_certificate(der: &CertificateDer<'_>) -> String {
    pem::encode_config(
        &pem::Pem::new("CERTIFICATE", der.as_ref().to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}
