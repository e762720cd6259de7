//! The OCI distribution client (oci-client over reqwest and rustls with
//! hutch's ring provider): manifests by digest and blobs streamed to
//! files, each checked against its digest and size as it arrives.

use std::io::Write;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest as _, Sha256};

use super::PullError;
use super::auth::Credentials;
use crate::image::digest::Digest;
use crate::image::oci;

/// Media types asked for when fetching a manifest.
const ACCEPTED: &[&str] = &[
    oci::MT_OCI_INDEX,
    oci::MT_OCI_MANIFEST,
    oci::MT_DOCKER_LIST,
    oci::MT_DOCKER_MANIFEST,
];

/// A connection to one registry for one repository.
pub(crate) struct Registry {
    client: Client,
    auth: RegistryAuth,
    /// `HOST[:PORT]/REPOSITORY`, without tag or digest.
    repository: Reference,
    pub(crate) host: String,
}

/// The host's trust store (`SSL_CERT_FILE` and `SSL_CERT_DIR` honoured,
/// rustls-native-certs), as the only roots the client trusts.
fn trust_roots() -> Result<Vec<Certificate>, PullError> {
    let loaded = rustls_native_certs::load_native_certs();
    if loaded.certs.is_empty() {
        let why = loaded
            .errors
            .first()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "no certificates found".into());
        return Err(PullError::TrustStore(why));
    }
    Ok(loaded
        .certs
        .into_iter()
        .map(|c| Certificate {
            encoding: CertificateEncoding::Der,
            data: c.to_vec(),
        })
        .collect())
}

/// What `hutch check` says of the client: the https client builds with
/// the host's trust store; returns how many trust anchors it holds. No
/// connection is made.
pub(crate) fn check_client() -> Result<usize, PullError> {
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let roots = trust_roots()?;
    let n = roots.len();
    let config = ClientConfig {
        tls_certs_only: roots,
        ..ClientConfig::default()
    };
    Client::try_from(config).map_err(|e| PullError::Registry {
        host: "(none)".into(),
        why: one_line(&e),
    })?;
    Ok(n)
}

impl Registry {
    pub(crate) fn connect(
        repository: Reference,
        insecure: bool,
        credentials: Option<Credentials>,
    ) -> Result<Registry, PullError> {
        // reqwest is built without a provider of its own: hutch's ring one
        // (a no-op when the process already has a default). ring has no
        // post-quantum key exchange (rustls's deprecation); what crosses
        // is public image content, verified by digest.
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let host = repository.registry().to_string();
        let config = ClientConfig {
            protocol: if insecure {
                ClientProtocol::HttpsExcept(vec![host.clone()])
            } else {
                ClientProtocol::Https
            },
            tls_certs_only: if insecure { Vec::new() } else { trust_roots()? },
            // Platforms are chosen by hutch (import's rules), never by the client.
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(30)),
            read_timeout: Some(Duration::from_secs(60)),
            user_agent: concat!("hutch/", env!("CARGO_PKG_VERSION")),
            ..ClientConfig::default()
        };
        let client = Client::try_from(config).map_err(|e| PullError::Registry {
            host: host.clone(),
            why: one_line(&e),
        })?;
        let auth = match credentials {
            Some(c) => RegistryAuth::Basic(c.user, c.password),
            None => RegistryAuth::Anonymous,
        };
        Ok(Registry {
            client,
            auth,
            repository,
            host,
        })
    }

    fn at(&self, digest: &Digest) -> Reference {
        Reference::with_digest(
            self.repository.registry().to_string(),
            self.repository.repository().to_string(),
            digest.to_string(),
        )
    }

    fn failed(&self, e: oci_client::errors::OciDistributionError) -> PullError {
        use oci_client::errors::OciDistributionError as E;
        let hint = match &e {
            E::UnauthorizedError { .. } | E::AuthenticationFailure(_) => {
                " (give credentials with --registry-auth FILE, or check them)"
            }
            E::ImageManifestNotFoundError(_) => " (no such repository or digest there)",
            _ => "",
        };
        PullError::Registry {
            host: self.host.clone(),
            why: format!("{}{hint}", one_line(&e)),
        }
    }

    /// The manifest (or index) `reference` names, its bytes verified
    /// against `expected` when given; returns the bytes and their digest.
    pub(crate) async fn manifest(
        &self,
        reference: &Reference,
        expected: Option<&Digest>,
    ) -> Result<(Vec<u8>, Digest), PullError> {
        let (bytes, _) = self
            .client
            .pull_manifest_raw(reference, &self.auth, ACCEPTED)
            .await
            .map_err(|e| self.failed(e))?;
        if bytes.len() as u64 > oci::MAX_DOCUMENT {
            return Err(PullError::Tampered {
                digest: expected.map(|d| d.to_string()).unwrap_or_default(),
                why: format!("a manifest over {} bytes", oci::MAX_DOCUMENT),
            });
        }
        let got = Digest::of(&bytes);
        if let Some(want) = expected
            && got != *want
        {
            return Err(PullError::Tampered {
                digest: want.to_string(),
                why: format!("the registry sent a manifest whose digest is {got}"),
            });
        }
        Ok((bytes.to_vec(), got))
    }

    /// The manifest with `digest` in this repository.
    pub(crate) async fn manifest_by_digest(
        &self,
        digest: &Digest,
    ) -> Result<Vec<u8>, PullError> {
        Ok(self.manifest(&self.at(digest), Some(digest)).await?.0)
    }

    /// Stream blob `digest` of `size` bytes into `dest` (created), checking
    /// size and digest as the bytes arrive: more bytes than the
    /// descriptor says stop the transfer at once.
    pub(crate) async fn blob_to_file(
        &self,
        digest: &Digest,
        size: u64,
        dest: &Path,
    ) -> Result<(), PullError> {
        let file = std::fs::File::create(dest).map_err(|e| PullError::Store {
            path: dest.display().to_string(),
            why: e.to_string(),
        })?;
        let desc = oci_client::manifest::OciDescriptor {
            digest: digest.to_string(),
            size: size as i64,
            ..Default::default()
        };
        let mut sink = CheckedSink {
            file,
            written: 0,
            limit: size,
            hash: Sha256::new(),
        };
        let res = self
            .client
            .pull_blob(&self.at(digest), &desc, &mut sink)
            .await;
        if sink.written > size {
            return Err(PullError::Tampered {
                digest: digest.to_string(),
                why: format!("the registry sent more than the descriptor's {size} bytes"),
            });
        }
        if let Err(e) = res {
            if matches!(e, oci_client::errors::OciDistributionError::DigestError(_)) {
                return Err(PullError::Tampered {
                    digest: digest.to_string(),
                    why: "the content's digest differs: the blob was altered or corrupted"
                        .into(),
                });
            }
            return Err(PullError::Registry {
                host: self.host.clone(),
                why: format!("blob {digest}: {}", one_line(&e)),
            });
        }
        if sink.written != size {
            return Err(PullError::Tampered {
                digest: digest.to_string(),
                why: format!(
                    "{} bytes arrived, but its descriptor says {size} (the connection ended early?)",
                    sink.written
                ),
            });
        }
        let got = Digest::from_hex(&hex::encode(sink.hash.finalize())).map_err(|e| {
            PullError::Tampered {
                digest: digest.to_string(),
                why: e,
            }
        })?;
        if got != *digest {
            return Err(PullError::Tampered {
                digest: digest.to_string(),
                why: format!("the content's digest is {got}: the blob was altered or corrupted"),
            });
        }
        // No fsync: the blob is staging for the import, which verifies it
        // again and makes the image durable (layers, then the index).
        Ok(())
    }
}

/// The error and its sources on one line (reqwest keeps the cause, a
/// refused connection or a TLS failure, in its sources).
fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cause = c.source();
    }
    out.replace(['\n', '\r'], " ")
}

/// A file writer that hashes what it writes and refuses bytes past `limit`.
struct CheckedSink {
    file: std::fs::File,
    written: u64,
    limit: u64,
    hash: Sha256,
}

impl tokio::io::AsyncWrite for CheckedSink {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.written += buf.len() as u64;
        if this.written > this.limit {
            return Poll::Ready(Err(std::io::Error::other("more bytes than the descriptor")));
        }
        this.hash.update(buf);
        // A local file: a blocking write of one network chunk.
        Poll::Ready(this.file.write_all(buf).map(|()| buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(self.get_mut().file.flush())
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
