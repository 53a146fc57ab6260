//! The Trust Anchor of one Domain generation, held by the coordinator.
//!
//! Its secret keys (TLS CA, protocol issuer, the coordinator's TLS leaf
//! and protocol keys) live in this process's memory only: nothing secret
//! is written anywhere, so nothing outlives the generation, and a failed
//! or stopped Domain's anchor is gone with its coordinator. What is
//! published ([`Published`]) is public.

use ed25519_compact::{KeyPair, Seed};
use lazaret_protocol::trust::manifest::{ProtocolCredential, Published, SignedManifest};
use lazaret_protocol::trust::{Claims, GenerationId, Role, TrustManifest};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyUsagePurpose, SanType,
};
use std::sync::Arc;

use crate::TrustError;

/// How long the generation's certificates are valid. The generation's
/// life bounds them in practice (its CA is never written anywhere); the
/// dates only keep a certificate that somehow outlives it from being
/// valid for ever.
const VALIDITY_DAYS: i64 = 400;

/// An Ed25519 key as `ed25519-compact` and as rcgen / rustls take it.
pub struct Key {
    pub pair: KeyPair,
}

impl Key {
    pub fn generate() -> Self {
        Self {
            pair: KeyPair::from_seed(Seed::generate()),
        }
    }

    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            pair: KeyPair::from_seed(Seed::new(seed)),
        }
    }

    pub fn public(&self) -> [u8; 32] {
        *self.pair.pk
    }

    /// PKCS #8 v1 (RFC 8410): a fixed 16-byte header, then the seed.
    pub fn pkcs8(&self) -> Vec<u8> {
        const HEADER: [u8; 16] = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        let mut v = HEADER.to_vec();
        v.extend_from_slice(self.pair.sk.seed().as_ref());
        v
    }

    fn rcgen(&self) -> Result<rcgen::KeyPair, TrustError> {
        let der = rustls::pki_types::PrivatePkcs8KeyDer::from(self.pkcs8());
        rcgen::KeyPair::try_from(&der).map_err(|e| TrustError::Certificate(e.to_string()))
    }

    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        self.pair.sk.sign(msg, None).to_vec()
    }
}

/// A subject public key given as raw Ed25519 bytes.
struct RawEd25519<'a>(&'a [u8; 32]);

impl rcgen::PublicKeyData for RawEd25519<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0
    }
    fn algorithm(&self) -> &rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ED25519
    }
}

/// The DNS name in the coordinator's TLS leaf, the name a client checks.
pub fn coordinator_server_name(domain_id: &str) -> String {
    format!("{domain_id}.coordinator.lazaret.invalid")
}

fn validity(p: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + time::Duration::days(VALIDITY_DAYS);
}

/// The anchor's CA certificate for `generation`: self-signed with
/// `ca_key`, issuing leaves only.
fn ca_certificate(
    generation: &GenerationId,
    ca_key: &rcgen::KeyPair,
) -> Result<rcgen::Certificate, TrustError> {
    let mut p = CertificateParams::default();
    validity(&mut p);
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!(
            "Lazaret Trust Anchor {} #{}",
            generation.domain_id, generation.number
        ),
    );
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.self_signed(ca_key)
        .map_err(|e| TrustError::Certificate(e.to_string()))
}

pub struct TrustAnchor {
    generation: GenerationId,
    profile: String,
    coordinator_id: String,
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
    coordinator_tls: Key,
    coordinator_tls_cert: Vec<u8>,
    coordinator_protocol: Key,
    published: Published,
}

impl TrustAnchor {
    /// A new anchor: fresh CA and issuer keys, the coordinator's two leaf
    /// keys and credentials, and the signed Trust Manifest.
    pub fn new(
        generation: GenerationId,
        profile: &str,
        coordinator_id: &str,
    ) -> Result<Self, TrustError> {
        let ca_root = Key::generate();
        let ca_key = ca_root.rcgen()?;
        let ca = ca_certificate(&generation, &ca_key)?;
        let issuer = Key::generate();
        let coordinator_tls = Key::generate();
        let coordinator_protocol = Key::generate();

        let mut anchor = Self {
            generation: generation.clone(),
            profile: profile.to_string(),
            coordinator_id: coordinator_id.to_string(),
            ca,
            ca_key,
            coordinator_tls,
            coordinator_tls_cert: Vec::new(),
            coordinator_protocol,
            // Filled in below, once the leaves are issued.
            published: Published {
                manifest: SignedManifest {
                    manifest: Vec::new(),
                    by_ca: Vec::new(),
                    by_issuer: Vec::new(),
                },
                ca_certificate: Vec::new(),
                coordinator_tls: Vec::new(),
                coordinator_protocol: ProtocolCredential {
                    claims: Vec::new(),
                    public_key: [0; 32],
                    issuer_signature: Vec::new(),
                },
            },
        };
        let coordinator_claims = anchor.claims(Role::SessionCoordinator, coordinator_id, None);
        anchor.coordinator_tls_cert = anchor.issue(
            &anchor.coordinator_tls.public(),
            &coordinator_claims,
            Some(coordinator_server_name(&generation.domain_id)),
        )?;
        let claims = coordinator_claims.encode();
        let public_key = anchor.coordinator_protocol.public();
        let ca_der = anchor.ca.der().to_vec();
        let manifest = TrustManifest::new(
            generation,
            profile,
            coordinator_id,
            &ca_der,
            ca_root.public(),
            issuer.public(),
        )
        .encode();
        anchor.published = Published {
            manifest: SignedManifest {
                by_ca: ca_root.sign(&manifest),
                by_issuer: issuer.sign(&manifest),
                manifest,
            },
            ca_certificate: ca_der,
            coordinator_tls: anchor.coordinator_tls_cert.clone(),
            coordinator_protocol: ProtocolCredential {
                issuer_signature: issuer
                    .sign(&ProtocolCredential::signed_bytes(&claims, &public_key)),
                claims,
                public_key,
            },
        };
        Ok(anchor)
    }

    pub fn generation(&self) -> &GenerationId {
        &self.generation
    }

    pub fn published(&self) -> &Published {
        &self.published
    }

    pub fn claims(&self, role: Role, component_id: &str, session_id: Option<&str>) -> Claims {
        Claims {
            role,
            profile: self.profile.clone(),
            component_id: component_id.to_string(),
            generation: self.generation.clone(),
            session_id: session_id.map(str::to_string),
        }
    }

    /// A certificate for `public_key` with `claims`, signed by the CA. A
    /// coordinator leaf gets `server_name` and the server-auth purpose,
    /// every other role the client-auth purpose.
    pub fn issue(
        &self,
        public_key: &[u8; 32],
        claims: &Claims,
        server_name: Option<String>,
    ) -> Result<Vec<u8>, TrustError> {
        let err = |e: rcgen::Error| TrustError::Certificate(e.to_string());
        let mut p = CertificateParams::default();
        validity(&mut p);
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            format!("{:?} {}", claims.role, claims.component_id),
        );
        p.distinguished_name = dn;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.subject_alt_names
            .push(SanType::URI(claims.to_uri().try_into().map_err(err)?));
        match server_name {
            Some(n) => {
                p.subject_alt_names
                    .push(SanType::DnsName(n.try_into().map_err(err)?));
                p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            }
            None => p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth],
        }
        let mut serial = [0u8; 16];
        getrandom::getrandom(&mut serial).map_err(|e| TrustError::Random(e.to_string()))?;
        serial[0] &= 0x7f;
        p.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        let cert = p
            .signed_by(&RawEd25519(public_key), &self.ca, &self.ca_key)
            .map_err(err)?;
        Ok(cert.der().to_vec())
    }

    /// The TLS server side of the control socket: this generation's CA
    /// only, client certificates required (see [`crate::tls`]).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TrustError> {
        crate::tls::server_config(
            &self.published.ca_certificate,
            &self.coordinator_tls_cert,
            &self.coordinator_tls,
        )
    }

    /// Signs an Escalation Result with the coordinator's protocol key.
    pub fn result_key(&self) -> &ed25519_compact::SecretKey {
        &self.coordinator_protocol.pair.sk
    }

    pub fn coordinator_id(&self) -> &str {
        &self.coordinator_id
    }
}

/// A new generation identity with a random nonce.
pub fn new_generation(domain_id: &str, number: u64) -> Result<GenerationId, TrustError> {
    let mut nonce = [0u8; 16];
    getrandom::getrandom(&mut nonce).map_err(|e| TrustError::Random(e.to_string()))?;
    Ok(GenerationId {
        domain_id: domain_id.to_string(),
        number,
        nonce,
    })
}
