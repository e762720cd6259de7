//! The sandbox's own certificate authority: an ECDSA P-256 key made when
//! the sandbox is prepared, a self-signed certificate whose name
//! constraints permit only the intercepted hosts, and the leaves it signs.
//! The key never leaves the supervisor's memory; it is not written
//! anywhere and dies with the process. Only the certificate goes into the
//! sandbox (in its trust bundle).

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::{Duration, OffsetDateTime};

use super::InterceptError;
use crate::net::host::CanonicalHost;

/// How long the CA and its leaves are valid: the sandbox's life, bounded
/// (a sandbox's wall-clock limit may be unbounded; a year is past any).
const VALIDITY: Duration = Duration::days(365);
/// Backdating, for a client whose clock runs a little behind the host's.
const BACKDATE: Duration = Duration::hours(1);

/// A per-sandbox certificate authority.
pub(crate) struct EphemeralCa {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
}

/// A leaf certificate for one host: the chain to present (leaf, CA) and
/// its key.
pub(crate) struct Leaf {
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key: PrivateKeyDer<'static>,
}

impl EphemeralCa {
    /// A new CA whose certificates are valid for `hosts` only (and their
    /// subdomains: X.509 name constraints have no exact-match form).
    pub(crate) fn new(sandbox_id: &str, hosts: &[CanonicalHost]) -> Result<Self, InterceptError> {
        let key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(InterceptError::Ca)?;
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::default();
        params.not_before = now - BACKDATE;
        params.not_after = now + VALIDITY;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(
            DnType::CommonName,
            format!("hutch sandbox {sandbox_id} ephemeral CA"),
        );
        params
            .distinguished_name
            .push(DnType::OrganizationName, "hutch");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.serial_number = Some(random_serial()?.into());
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: hosts
                .iter()
                .map(|h| match h {
                    CanonicalHost::Name(n) => GeneralSubtree::DnsName(n.clone()),
                    CanonicalHost::Ip(ip) => {
                        GeneralSubtree::IpAddress(rcgen::CidrSubnet::from_addr_prefix(
                            *ip,
                            if ip.is_ipv4() { 32 } else { 128 },
                        ))
                    }
                })
                .collect(),
            excluded_subtrees: Vec::new(),
        });
        let cert = params.self_signed(&key).map_err(InterceptError::Ca)?;
        Ok(EphemeralCa {
            cert_der: cert.der().clone(),
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
            not_before: now - BACKDATE,
            not_after: now + VALIDITY,
        })
    }

    /// The CA certificate, PEM (what the sandbox's bundle adds).
    pub(crate) fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    #[cfg(test)]
    pub(crate) fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// Mint a leaf for `host`: a fresh P-256 key, the host as its only
    /// subject alternative name, server authentication only.
    pub(crate) fn mint(&self, host: &CanonicalHost) -> Result<Leaf, InterceptError> {
        let key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(InterceptError::Ca)?;
        let mut params = CertificateParams::default();
        params.not_before = self.not_before;
        params.not_after = self.not_after;
        params.serial_number = Some(random_serial()?.into());
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, host.to_string());
        params.subject_alt_names = vec![match host {
            CanonicalHost::Name(n) => {
                SanType::DnsName(n.clone().try_into().map_err(InterceptError::Ca)?)
            }
            CanonicalHost::Ip(ip) => SanType::IpAddress(IpAddr::clone(ip)),
        }];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(InterceptError::Ca)?;
        Ok(Leaf {
            chain: vec![cert.der().clone(), self.cert_der.clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }
}

/// A positive 16-byte serial from the system's random source.
fn random_serial() -> Result<Vec<u8>, InterceptError> {
    let mut serial = vec![0u8; 16];
    super::provider()
        .secure_random
        .fill(&mut serial)
        .map_err(|_| InterceptError::Random)?;
    serial[0] &= 0x7f;
    serial[0] |= 0x01; // no leading zero byte: DER keeps all 16
    Ok(serial)
}
