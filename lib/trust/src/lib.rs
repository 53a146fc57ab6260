//! The Trust Anchor of a Domain generation (spec 3.2, SR-9; refinements
//! on the Trust Anchor): separate Ed25519 TLS-CA and protocol-issuer keys,
//! the signed Trust Manifest, role-bound certificates made with rcgen,
//! and TLS 1.3 with mutual authentication on the host-private control
//! socket (rustls). The records that cross process boundaries (claims,
//! manifest, signed results) are in `lazaret_protocol::trust`.

pub mod anchor;
pub mod certificate;
pub mod pump;
pub mod register;
pub mod tls;

pub use anchor::{new_generation, Key, TrustAnchor};

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("randomness: {0}")]
    Random(String),
    #[error("certificate: {0}")]
    Certificate(String),
    #[error("TLS: {0}")]
    Tls(String),
    /// The peer authenticated, but as the wrong identity.
    #[error("{0}")]
    Identity(String),
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Published(#[from] lazaret_protocol::trust::TrustError),
}
