//! `registry_client` (optional): the client of `hutch image pull` builds
//! its https client over rustls with the host's trust store
//! (`SSL_CERT_FILE`, `SSL_CERT_DIR`, else the system's). No registry is
//! contacted.

use super::{Feature, Status};

const NAME: &str = "registry_client";

pub(super) fn probe() -> Feature {
    match crate::image::pull::check_client() {
        Ok(n) => Feature::ok(
            NAME,
            false,
            format!(
                "oci-client over rustls (ring): an https client with {n} trust anchor(s) from \
                 the host's store"
            ),
        ),
        Err(e) => Feature::bad(
            NAME,
            false,
            Status::Missing,
            e.to_string(),
            "install ca-certificates, or point SSL_CERT_FILE at a PEM bundle \
             (`hutch image pull` of a plain-http registry needs --insecure-registry)",
        ),
    }
}
