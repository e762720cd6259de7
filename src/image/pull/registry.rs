//! The OCI distribution client (oci-client over reqwest and rustls with
//! hutch's ring provider): manifests by digest and blobs streamed to
//! files, each checked against its digest and size as it arrives.
//!
//! oci-client authenticates (token service or basic) and streams blobs;
//! manifests are fetched here with reqwest directly, because
//! oci-client's `pull_manifest_raw` reads a body whole before anyone can
//! cap it: here the body is read in chunks and refused past the size its
//! descriptor declares (an index's entry), or [`oci::MAX_DOCUMENT`] for
//! the document a reference names, within [`MANIFEST_DEADLINE`].

use std::io::Write;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
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

/// How long a manifest may take to arrive whole (connect, headers and
/// body): a registry trickling bytes under the read timeout is cut off.
const MANIFEST_DEADLINE: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const READ_TIMEOUT: Duration = Duration::from_secs(60);
const USER_AGENT: &str = concat!("hutch/", env!("CARGO_PKG_VERSION"));

/// A connection to one registry for one repository.
pub(crate) struct Registry {
    client: Client,
    /// The manifest fetcher: the same trust roots, timeouts and agent.
    http: reqwest::Client,
    scheme: &'static str,
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
        let roots = if insecure { Vec::new() } else { trust_roots()? };
        let mut http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(USER_AGENT);
        if !insecure {
            let certs = roots
                .iter()
                .map(|c| reqwest::Certificate::from_der(&c.data))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| PullError::TrustStore(one_line(&e)))?;
            http = http.tls_certs_only(certs);
        }
        let http = http.build().map_err(|e| PullError::Registry {
            host: host.clone(),
            why: one_line(&e),
        })?;
        let config = ClientConfig {
            protocol: if insecure {
                ClientProtocol::HttpsExcept(vec![host.clone()])
            } else {
                ClientProtocol::Https
            },
            tls_certs_only: roots,
            // Platforms are chosen by hutch (import's rules), never by the client.
            platform_resolver: None,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            user_agent: USER_AGENT,
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
            http,
            scheme: if insecure { "http" } else { "https" },
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
                " (give credentials with --registry-auth FILE or --registry-credential, or check them)"
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
    /// `declared` is the size the referring descriptor gives (an index's
    /// entry): the body must be exactly that long, and no byte past it is
    /// read. Without one (the reference's own document) the cap is
    /// [`oci::MAX_DOCUMENT`].
    pub(crate) async fn manifest(
        &self,
        reference: &Reference,
        expected: Option<&Digest>,
        declared: Option<u64>,
    ) -> Result<(Vec<u8>, Digest), PullError> {
        let bytes = tokio::time::timeout(
            MANIFEST_DEADLINE,
            self.fetch_manifest(reference, expected, declared),
        )
        .await
        .map_err(|_| PullError::Registry {
            host: self.host.clone(),
            why: format!(
                "the manifest did not arrive within {} s (a slow or stalled registry)",
                MANIFEST_DEADLINE.as_secs()
            ),
        })??;
        let got = Digest::of(&bytes);
        if let Some(want) = expected
            && got != *want
        {
            return Err(PullError::Tampered {
                digest: want.to_string(),
                why: format!("the registry sent a manifest whose digest is {got}"),
            });
        }
        Ok((bytes, got))
    }

    /// GET the manifest `reference` names, the body read in chunks and
    /// refused past the size its descriptor declares (`declared`), else
    /// at [`oci::MAX_DOCUMENT`] + 1 bytes, or at once when the announced
    /// length says so.
    async fn fetch_manifest(
        &self,
        reference: &Reference,
        expected: Option<&Digest>,
        declared: Option<u64>,
    ) -> Result<Vec<u8>, PullError> {
        let shown = expected.map(|d| d.to_string()).unwrap_or_default();
        let refused = |why: String| PullError::Tampered {
            digest: shown.clone(),
            why,
        };
        if let Some(size) = declared
            && size > oci::MAX_DOCUMENT
        {
            return Err(refused(format!(
                "a manifest of {size} bytes, over the {}-byte cap for manifests",
                oci::MAX_DOCUMENT
            )));
        }
        let too_big = || match declared {
            Some(size) => refused(format!(
                "the registry sent more than the {size} bytes its descriptor declares"
            )),
            None => refused(format!("a manifest over {} bytes", oci::MAX_DOCUMENT)),
        };
        let limit = declared.unwrap_or(oci::MAX_DOCUMENT);
        let registry = reference.resolve_registry();
        let url = format!(
            "{}://{registry}/v2/{}/manifests/{}",
            self.scheme,
            reference.repository(),
            reference
                .digest()
                .or_else(|| reference.tag())
                .unwrap_or("latest"),
        );
        let mut response = self.get(reference, &url, "Image manifest").await?;
        match (response.content_length(), declared) {
            (Some(n), Some(size)) if n != size => {
                return Err(refused(format!(
                    "the registry announced {n} bytes, but its descriptor declares {size}"
                )));
            }
            (Some(n), None) if n > oci::MAX_DOCUMENT => return Err(too_big()),
            _ => {}
        }
        let net = |e: reqwest::Error| PullError::Registry {
            host: self.host.clone(),
            why: one_line(&e),
        };
        let mut body = Vec::with_capacity(declared.unwrap_or(0) as usize);
        while let Some(chunk) = response.chunk().await.map_err(net)? {
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        if let Some(size) = declared
            && body.len() as u64 != size
        {
            return Err(refused(format!(
                "{} bytes arrived, but its descriptor declares {size}",
                body.len()
            )));
        }
        Ok(body)
    }

    /// GET `url` (of `reference`'s repository) with the pull credentials:
    /// the answer's headers, its status checked (`what` names the object
    /// in a 404's message).
    async fn get(
        &self,
        reference: &Reference,
        url: &str,
        what: &str,
    ) -> Result<reqwest::Response, PullError> {
        // A bearer token from the registry's token service, or None: then
        // basic credentials when given (oci-client's own fallback), else
        // anonymous.
        let token = self
            .client
            .auth(reference, &self.auth, RegistryOperation::Pull)
            .await
            .map_err(|e| self.failed(e))?;
        let mut request = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, ACCEPTED.join(", "));
        request = match (&token, &self.auth) {
            (Some(t), _) => request.bearer_auth(t),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, _) => request,
        };
        let response = request.send().await.map_err(|e| PullError::Registry {
            host: self.host.clone(),
            why: one_line(&e),
        })?;
        let status = response.status();
        if !status.is_success() {
            let why = match status.as_u16() {
                401 | 403 => format!(
                    "Not authorized: url {url} (give credentials with --registry-auth FILE or --registry-credential, or check them)"
                ),
                404 => format!("{what} not found: url {url} (no such repository or digest there)"),
                _ => format!("Server error: url {url}, code: {status}"),
            };
            return Err(PullError::Registry {
                host: self.host.clone(),
                why,
            });
        }
        Ok(response)
    }

    /// The answer to a GET of blob `digest` of `size` bytes, its headers
    /// read: refused when the registry announces another length. The body
    /// is the caller's to stream (and to check against size and digest).
    pub(crate) async fn blob_response(
        &self,
        digest: &Digest,
        size: u64,
    ) -> Result<reqwest::Response, PullError> {
        let reference = self.at(digest);
        let url = format!(
            "{}://{}/v2/{}/blobs/{digest}",
            self.scheme,
            reference.resolve_registry(),
            reference.repository(),
        );
        let response = self.get(&reference, &url, "Blob").await?;
        if let Some(n) = response.content_length()
            && n != size
        {
            return Err(PullError::Tampered {
                digest: digest.to_string(),
                why: format!("the registry announced {n} bytes, but its descriptor declares {size}"),
            });
        }
        Ok(response)
    }

    /// The manifest with `digest` and the `size` its descriptor declares,
    /// in this repository.
    pub(crate) async fn manifest_by_digest(
        &self,
        digest: &Digest,
        size: u64,
    ) -> Result<Vec<u8>, PullError> {
        Ok(self
            .manifest(&self.at(digest), Some(digest), Some(size))
            .await?
            .0)
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
pub(super) fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
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
