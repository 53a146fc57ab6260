//! Domain identity (FR-1).

use sha2::{Digest, Sha256};
use std::fmt;

/// The deterministic identifier of a Domain: a digest of the Agent Profile
/// name and the canonical Agent Workspace bytes. It names resources; it
/// authenticates nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DomainIdV1([u8; 16]);

impl DomainIdV1 {
    const CONTEXT: &'static [u8] = b"lazaret.domain-id.v1\0";

    /// Derives the ID. Both inputs are length-prefixed so that no pair of
    /// (profile, workspace) can collide with another by shifting bytes.
    pub fn derive(profile: &str, canonical_workspace: &[u8]) -> Self {
        let mut h = Sha256::new();
        h.update(Self::CONTEXT);
        h.update((profile.len() as u64).to_be_bytes());
        h.update(profile.as_bytes());
        h.update((canonical_workspace.len() as u64).to_be_bytes());
        h.update(canonical_workspace);
        let digest = h.finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        Self(id)
    }

    /// Parses the 32-character lowercase hex form used in paths and messages.
    pub fn parse(s: &str) -> Option<Self> {
        if s.len() != 32 || s.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let mut id = [0u8; 16];
        hex::decode_to_slice(s, &mut id).ok()?;
        Some(Self(id))
    }
}

impl fmt::Display for DomainIdV1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for DomainIdV1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DomainIdV1({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_distinct() {
        let a = DomainIdV1::derive("default", b"/home/dev/proj");
        assert_eq!(a, DomainIdV1::derive("default", b"/home/dev/proj"));
        assert_ne!(a, DomainIdV1::derive("other", b"/home/dev/proj"));
        assert_ne!(a, DomainIdV1::derive("default", b"/home/dev/proj2"));
        // Length prefixes keep shifted boundaries apart.
        assert_ne!(
            DomainIdV1::derive("ab", b"c"),
            DomainIdV1::derive("a", b"bc")
        );
    }

    #[test]
    fn hex_round_trip() {
        let a = DomainIdV1::derive("default", b"/w");
        assert_eq!(DomainIdV1::parse(&a.to_string()), Some(a));
        assert_eq!(DomainIdV1::parse("xyz"), None);
        assert_eq!(DomainIdV1::parse(&a.to_string().to_uppercase()), None);
    }
}
