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
