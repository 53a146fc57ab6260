//! The public half of a Trust Anchor: the signed Trust Manifest, the CA
//! certificate, the coordinator's TLS leaf and protocol credential.
//!
//! The coordinator publishes it twice: in the host-private Domain run
//! directory, where the `lazaret` CLI pins it (its trust comes from that
//! directory's owner and mode, SR-10), and in the sandbox's read-only
//! control mount, where `lazaret-escalate` verifies Escalation Results
//! with it. It holds no secret.

use ed25519_compact::{PublicKey, Signature};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::claims::{Claims, GenerationId, Role};
use super::TrustError;

/// The file name, in the run directory and in the control mount.
pub const FILE_NAME: &str = "trust";
/// The largest published file read.
pub const MAX_BYTES: u64 = 64 * 1024;
const VERSION: u32 = 1;

/// Binds both roots of a generation to its identity.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TrustManifest {
    pub version: u32,
    pub generation: GenerationId,
    pub profile: String,
    pub coordinator_id: String,
    /// SHA-256 of the TLS CA certificate (DER).
    pub ca_certificate_sha256: [u8; 32],
    pub ca_public_key: [u8; 32],
    pub issuer_public_key: [u8; 32],
    pub created_unix: u64,
}

/// The manifest's exact bytes, signed by each root.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SignedManifest {
    pub manifest: Vec<u8>,
    pub by_ca: Vec<u8>,
    pub by_issuer: Vec<u8>,
}

/// A protocol (non-TLS) credential: claims and a public key, signed by
/// the generation's protocol issuer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProtocolCredential {
    pub claims: Vec<u8>,
    pub public_key: [u8; 32],
    pub issuer_signature: Vec<u8>,
}

impl ProtocolCredential {
    pub fn signed_bytes(claims: &[u8], public_key: &[u8; 32]) -> Vec<u8> {
        let mut v = b"lazaret protocol credential 1\0".to_vec();
        v.extend_from_slice(public_key);
        v.extend_from_slice(claims);
        v
    }
}

/// Everything public of one generation's Trust Anchor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Published {
    pub manifest: SignedManifest,
    pub ca_certificate: Vec<u8>,
    pub coordinator_tls: Vec<u8>,
    pub coordinator_protocol: ProtocolCredential,
}

/// A [`Published`] whose signatures and bindings were checked.
#[derive(Clone, Debug)]
pub struct Verified {
    pub manifest: TrustManifest,
    pub ca_certificate: Vec<u8>,
    pub coordinator_tls: Vec<u8>,
    /// The key that signs Escalation Results.
    pub result_key: PublicKey,
}

fn verify_sig(key: &[u8; 32], msg: &[u8], sig: &[u8], what: &str) -> Result<(), TrustError> {
    let bad = || TrustError::Manifest(format!("{what}: bad signature"));
    let pk = PublicKey::from_slice(key).map_err(|_| bad())?;
    let sig = Signature::from_slice(sig).map_err(|_| bad())?;
    pk.verify(msg, &sig).map_err(|_| bad())
}

impl Published {
    // Invariant: `Published` (plain fields, derived `Serialize`) always
    // encodes into a `Vec`.
    #[allow(clippy::expect_used)]
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("published encode")
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, TrustError> {
        postcard::from_bytes(bytes).map_err(|e| TrustError::Manifest(format!("malformed: {e}")))
    }

    /// Checks the manifest under both roots it names, the CA certificate
    /// against the manifest, the coordinator's protocol credential under
    /// the issuer, and that everything names `domain_id`.
    pub fn verify(&self, domain_id: &str) -> Result<Verified, TrustError> {
        let m: TrustManifest = postcard::from_bytes(&self.manifest.manifest)
            .map_err(|e| TrustError::Manifest(format!("malformed Trust Manifest: {e}")))?;
        if m.version != VERSION {
            return Err(TrustError::Manifest(format!(
                "Trust Manifest version {} is not {VERSION}",
                m.version
            )));
        }
        verify_sig(
            &m.issuer_public_key,
            &self.manifest.manifest,
            &self.manifest.by_issuer,
            "Trust Manifest (protocol issuer)",
        )?;
        verify_sig(
            &m.ca_public_key,
            &self.manifest.manifest,
            &self.manifest.by_ca,
            "Trust Manifest (TLS CA)",
        )?;
        if m.generation.domain_id != domain_id {
            return Err(TrustError::Manifest(format!(
                "the Trust Manifest is of Domain {}, not {domain_id}",
                m.generation.domain_id
            )));
        }
        if Sha256::digest(&self.ca_certificate).as_slice() != m.ca_certificate_sha256 {
            return Err(TrustError::Manifest(
                "the CA certificate is not the one the Trust Manifest names".into(),
            ));
        }
        let cred = &self.coordinator_protocol;
        verify_sig(
            &m.issuer_public_key,
            &ProtocolCredential::signed_bytes(&cred.claims, &cred.public_key),
            &cred.issuer_signature,
            "coordinator protocol credential",
        )?;
        let claims: Claims = postcard::from_bytes(&cred.claims)
            .map_err(|e| TrustError::Manifest(format!("malformed credential claims: {e}")))?;
        if claims.role != Role::SessionCoordinator
            || claims.generation != m.generation
            || claims.component_id != m.coordinator_id
        {
            return Err(TrustError::Manifest(
                "the protocol credential is not this generation's Session Coordinator's".into(),
            ));
        }
        Ok(Verified {
            result_key: PublicKey::from_slice(&cred.public_key)
                .map_err(|_| TrustError::Manifest("malformed result key".into()))?,
            manifest: m,
            ca_certificate: self.ca_certificate.clone(),
            coordinator_tls: self.coordinator_tls.clone(),
        })
    }

    /// The Domain the manifest names (before it is verified).
    pub fn domain_id(&self) -> Result<String, TrustError> {
        let m: TrustManifest = postcard::from_bytes(&self.manifest.manifest)
            .map_err(|e| TrustError::Manifest(format!("malformed Trust Manifest: {e}")))?;
        Ok(m.generation.domain_id)
    }

    /// Reads the file at `path` (at most [`MAX_BYTES`]) and verifies it
    /// for `domain_id`, or for the Domain it names itself when `None`
    /// (inside the sandbox, which has no other name for its Domain).
    pub fn read_verified(
        path: &std::path::Path,
        domain_id: Option<&str>,
    ) -> Result<Verified, TrustError> {
        use std::io::Read;
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| TrustError::Io(format!("{}: {e}", path.display())))?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(TrustError::Manifest(format!(
                "{} is larger than {MAX_BYTES} bytes",
                path.display()
            )));
        }
        let p = Self::decode(&bytes)?;
        let own = p.domain_id()?;
        p.verify(domain_id.unwrap_or(&own))
    }
}

impl TrustManifest {
    // Invariant: a `TrustManifest` (plain fields, derived `Serialize`) always
    // encodes into a `Vec`.
    #[allow(clippy::expect_used)]
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("manifest encode")
    }

    pub fn new(
        generation: GenerationId,
        profile: &str,
        coordinator_id: &str,
        ca_certificate: &[u8],
        ca_public_key: [u8; 32],
        issuer_public_key: [u8; 32],
    ) -> Self {
        Self {
            version: VERSION,
            generation,
            profile: profile.to_string(),
            coordinator_id: coordinator_id.to_string(),
            ca_certificate_sha256: Sha256::digest(ca_certificate).into(),
            ca_public_key,
            issuer_public_key,
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }
}
