//! Protocol Identities: the claims a credential binds (spec 3.2, SR-9).
//! The certificates themselves are made and read by `lazaret-trust`.
//!
//! A certificate carries its claims as one URI subject alternative name,
//! `urn:lazaret:claims:1:<hex of the postcard encoding>`, signed with the
//! rest of the certificate by the generation's TLS CA. A protocol
//! credential (the coordinator's result-signing key) carries the same
//! claims signed by the protocol issuer. Either way the credential ID is
//! the SHA-256 of the exact claim bytes that were signed.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The prefix of the claims URI in a certificate.
pub const CLAIMS_URI_PREFIX: &str = "urn:lazaret:claims:1:";

/// The role a component holds in a Domain's protocol.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Role {
    SessionCoordinator,
    ClientCli,
    NetworkSidecar,
    AgentSandbox,
}

/// One Domain generation: which Domain, its generation number in the
/// Domain Store, and a random nonce, so that a generation number met
/// again (a Domain Store rebuilt from nothing) is still another
/// generation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GenerationId {
    pub domain_id: String,
    pub number: u64,
    pub nonce: [u8; 16],
}

impl std::fmt::Display for GenerationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Domain {} generation {} ({})",
            self.domain_id,
            self.number,
            hex::encode(&self.nonce[..4])
        )
    }
}

/// What a credential says of its holder.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub role: Role,
    pub profile: String,
    /// The runtime component ID: the Session Coordinator ID, Client CLI
    /// ID, Network Sidecar ID or Agent Sandbox ID.
    pub component_id: String,
    pub generation: GenerationId,
    /// A Client CLI's credential names the one Client Session it may
    /// open; other roles have none.
    pub session_id: Option<String>,
}

impl Claims {
    /// The exact bytes a signature covers.
    // Invariant: `Claims` (plain fields, derived `Serialize`) always
    // encodes into a `Vec`.
    #[allow(clippy::expect_used)]
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("claims encode")
    }

    /// SHA-256 of the signed claims, in hex.
    pub fn credential_id(&self) -> String {
        hex::encode(Sha256::digest(self.encode()))
    }

    pub fn to_uri(&self) -> String {
        format!("{CLAIMS_URI_PREFIX}{}", hex::encode(self.encode()))
    }

    pub fn from_uri(uri: &str) -> Option<Self> {
        let hex_part = uri.strip_prefix(CLAIMS_URI_PREFIX)?;
        let bytes = hex::decode(hex_part).ok()?;
        postcard::from_bytes(&bytes).ok()
    }

    /// Why these claims are not the `want`ed peer, or `None` when they
    /// are: role, Domain, generation, then component and session, each
    /// named, for the log.
    pub fn mismatch(&self, want: &Expected<'_>) -> Option<String> {
        if self.role != want.role {
            return Some(format!(
                "a certificate of role {:?}, not {:?}",
                self.role, want.role
            ));
        }
        if self.generation.domain_id != want.generation.domain_id {
            return Some(format!(
                "a certificate of another Domain ({})",
                self.generation.domain_id
            ));
        }
        if self.generation != *want.generation {
            return Some(format!(
                "a certificate of another generation ({}, not {})",
                self.generation, want.generation
            ));
        }
        if let Some(s) = want.session_id {
            if self.session_id.as_deref() != Some(s) {
                return Some(format!(
                    "a certificate of another Client Session ({})",
                    self.session_id.as_deref().unwrap_or("none")
                ));
            }
        }
        if let Some(c) = want.component_id {
            if self.component_id != c {
                return Some(format!(
                    "a certificate of another component ({})",
                    self.component_id
                ));
            }
        }
        None
    }
}

/// The identity tuple a peer must present.
pub struct Expected<'a> {
    pub role: Role,
    pub generation: &'a GenerationId,
    pub component_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            role: Role::ClientCli,
            profile: "default".into(),
            component_id: "c1".into(),
            generation: GenerationId {
                domain_id: "d".into(),
                number: 3,
                nonce: [1; 16],
            },
            session_id: Some("s1".into()),
        }
    }

    #[test]
    fn the_uri_round_trips_and_the_id_is_the_digest_of_the_signed_bytes() {
        let c = claims();
        assert_eq!(Claims::from_uri(&c.to_uri()), Some(c.clone()));
        assert_eq!(
            c.credential_id(),
            hex::encode(Sha256::digest(postcard::to_allocvec(&c).unwrap()))
        );
        assert_eq!(Claims::from_uri("urn:lazaret:claims:1:zz"), None);
        assert_eq!(Claims::from_uri("urn:other"), None);
    }

    #[test]
    fn each_part_of_the_tuple_is_checked_and_named() {
        let c = claims();
        let g = c.generation.clone();
        let want = |role, generation, session_id| Expected {
            role,
            generation,
            component_id: Some("c1"),
            session_id,
        };
        assert_eq!(c.mismatch(&want(Role::ClientCli, &g, Some("s1"))), None);
        assert!(c
            .mismatch(&want(Role::AgentSandbox, &g, Some("s1")))
            .unwrap()
            .contains("role ClientCli"));
        let other_domain = GenerationId {
            domain_id: "e".into(),
            ..g.clone()
        };
        assert!(c
            .mismatch(&want(Role::ClientCli, &other_domain, Some("s1")))
            .unwrap()
            .contains("another Domain"));
        let previous = GenerationId {
            number: 2,
            ..g.clone()
        };
        assert!(c
            .mismatch(&want(Role::ClientCli, &previous, Some("s1")))
            .unwrap()
            .contains("another generation"));
        let same_number_other_nonce = GenerationId {
            nonce: [2; 16],
            ..g.clone()
        };
        assert!(c
            .mismatch(&want(Role::ClientCli, &same_number_other_nonce, Some("s1")))
            .is_some());
        assert!(c
            .mismatch(&want(Role::ClientCli, &g, Some("s2")))
            .unwrap()
            .contains("another Client Session"));
    }
}
