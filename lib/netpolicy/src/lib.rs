//! Network Sidecar: Lazaret's egress policy, the pure part.
//!
//! - [`policy`]: the canonical, generation-bound [`Policy`] (types,
//!   encoding, digest, evaluation: pure, table-tested);
//! - [`section`]: the profile's `[network]` as written (`lazaret-config`
//!   parses it into these types; this crate links no configuration parser);
//! - [`derive`] (feature `derive`, on by default): the `[network]` section
//!   becomes a [`Policy`], with the host's own addresses denied;
//! - [`record`]: `network.json`, what `lazaret net show` prints.
//! - [`hosts`]: `allow_hosts` entries and the filtering resolver's
//!   decisions; [`dnslog`]: its log (`lazaret net log`);
//! - [`hostlog`]: the denials of host addresses gained while a Domain
//!   runs (`lazaret-netpolicy watch`).
//!
//! Installing it as kernel routes, attesting and probing it is the
//! confined helper's (`bin/netpolicy/`, binary `lazaret-netpolicy`),
//! which uses this crate without `derive`.
//!
//! The topology (see `lib/netpolicy/README.md`): the sandbox's namespace N2
//! reaches the world only through slirp4netns B, which runs in the
//! enforcement namespace N1 and so obeys N1's routes; N1 reaches the host
//! through slirp4netns A. gVisor's netstack in N2 ignores `unreachable`
//! routes, so the policy lives in N1, which the sandbox cannot see.
//!
//! [`Policy`]: policy::Policy

#[cfg(feature = "derive")]
pub mod derive;
pub mod dnslog;
pub mod hostlog;
pub mod hosts;
pub mod judge;
pub mod policy;
pub mod record;
pub mod section;

#[cfg(feature = "derive")]
pub use derive::{derive, host_addresses, options_for, options_on_this_host};
pub use policy::{DeriveOptions, NetworkPlan, Policy, PolicyError};

/// Creates the sealed memfd the helper reads on its policy descriptor
/// (`lazaret_protocol::fdno::netpolicy::POLICY`), and the digest to pass
/// as `--digest`.
pub fn policy_memfd(policy: &Policy) -> Result<(std::os::fd::OwnedFd, String), String> {
    let bytes = policy.to_bytes().map_err(|e| e.to_string())?;
    let digest = policy::digest_bytes(&bytes);
    let fd = lazaret_helpers::memfd::sealed("network-policy", &bytes).map_err(|e| e.to_string())?;
    Ok((fd, digest))
}

/// Why a helper refuses the policy memfd it was handed.
#[derive(Debug, thiserror::Error)]
pub enum ReadPolicyError {
    #[error(transparent)]
    Memfd(#[from] lazaret_helpers::memfd::MemfdError),
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
    let bytes =
        lazaret_helpers::memfd::read_sealed("network-policy", fd, policy::MAX_POLICY_BYTES)?;
    let got = policy::digest_bytes(&bytes);
    if !got.eq_ignore_ascii_case(digest) {
        return Err(ReadPolicyError::Digest {
            got,
            expected: digest.to_string(),
        });
    }
    Ok(Policy::from_bytes(&bytes)?)
}
