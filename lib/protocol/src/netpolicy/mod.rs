//! The egress policy as every binary that handles it shares it (feature
//! `netpolicy`): the CLI derives it (`lazaret-netpolicy`, the library),
//! the coordinator checks it and binds it to the generation, the
//! supervisor hands it on, `lazaret-netpolicy` (the helper) installs it,
//! `lazaret-dns-filter` and the egress Pod enforce its `allow_hosts`.
//!
//! - [`policy`]: the canonical, generation-bound [`Policy`]: its types,
//!   encoding, digest, structural checks and evaluation (pure,
//!   table-tested); [`read_policy_memfd`] takes it from a sealed memfd;
//! - [`hosts`]: `allow_hosts` entries and what they match;
//! - [`judge`]: what the filtering resolver decides about each query and
//!   answer (the DNS filter's, and the egress Pod's);
//! - the records the network helpers write and the CLI reads:
//!   [`dnslog`] (`dns-filter.log`), [`hostlog`] (`host-addresses.log`),
//!   both through [`log::BoundedLog`], and [`record`] (`network.json`,
//!   the coordinator's).
//!
//! Deriving a policy from the profile's `[network]` section is not here:
//! it is `lazaret-netpolicy`'s (`lib/netpolicy`), which only the CLI and
//! the Kubernetes export link.
//!
//! [`Policy`]: policy::Policy

pub mod dnslog;
pub mod hostlog;
pub mod hosts;
pub mod judge;
pub mod log;
pub mod policy;
pub mod record;

pub use policy::{Policy, PolicyError};

/// Why a helper refuses the policy memfd it was handed.
#[derive(Debug, thiserror::Error)]
pub enum ReadPolicyError {
    #[error(transparent)]
    Memfd(#[from] crate::memfd::MemfdError),
    #[error("policy digest {got} differs from --digest {expected}; refusing the policy (the memfd is not the one the coordinator derived)")]
    Digest { got: String, expected: String },
    #[error(transparent)]
    Decode(#[from] PolicyError),
}

/// Reads the policy a helper was handed on its policy descriptor: the
/// memfd's seals and size, its SHA-256 against `digest` (`--digest`), then the
/// canonical bytes.
pub fn read_policy_memfd(
    fd: impl std::os::fd::AsFd,
    digest: &str,
) -> Result<Policy, ReadPolicyError> {
    let bytes = crate::memfd::read_sealed("network-policy", fd, policy::MAX_POLICY_BYTES)?;
    let got = policy::digest_bytes(&bytes);
    if !got.eq_ignore_ascii_case(digest) {
        return Err(ReadPolicyError::Digest {
            got,
            expected: digest.to_string(),
        });
    }
    Ok(Policy::from_bytes(&bytes)?)
}
