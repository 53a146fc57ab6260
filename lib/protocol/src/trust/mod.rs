//! The records of a Domain generation's Trust Anchor that cross process
//! boundaries: Protocol Identity claims, the signed Trust Manifest and
//! the coordinator's signed Escalation Results. Key generation,
//! certificates and TLS live in `lazaret-trust`; this part needs only
//! Ed25519 verification, so the static `lazaret-escalate` can use it.

pub mod claims;
pub mod manifest;
pub mod result;

pub use claims::{Claims, Expected, GenerationId, Role};
pub use manifest::TrustManifest;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TrustError {
    #[error("{0}")]
    Manifest(String),
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Result(String),
}

/// The network attachment a generation's Network Sidecar is bound to:
/// `(Domain ID, Network Sidecar ID, Agent Sandbox ID)` in that generation.
/// The coordinator puts it in the policy it seals for the sidecar; the
/// sidecar's attestation must name exactly it, or the supervisor refuses
/// the network and the coordinator records the readiness as failed.
pub fn network_attachment(generation: &GenerationId, sidecar_id: &str, sandbox_id: &str) -> String {
    format!(
        "lazaret-network-attachment/1 domain={} generation={}:{} sidecar={sidecar_id} sandbox={sandbox_id}",
        generation.domain_id,
        generation.number,
        hex::encode(generation.nonce)
    )
}
