//! Network Sidecar: Lazaret's egress policy.
//!
//! - [`policy`]: the profile's `[network]` becomes a canonical,
//!   generation-bound [`Policy`] (pure, table-tested), with its digest.
//! - [`attest`], [`netlink`], [`sysctl`]: installing it as kernel routes in
//!   the enforcement network namespace, disabling IPv6 in both namespaces,
//!   reading the state back and fingerprinting it.
//! - [`probe`]: the readiness probe from the sandbox's network namespace.
//! - [`confine`], [`helper`]: the `lazaret-netpolicy` binary, which holds
//!   `CAP_NET_ADMIN` over the enforcement namespace and nothing else.
//!
//! The topology (see `netpolicy/README.md`): the sandbox's namespace N2
//! reaches the world only through slirp4netns B, which runs in the
//! enforcement namespace N1 and so obeys N1's routes; N1 reaches the host
//! through slirp4netns A. gVisor's netstack in N2 ignores `unreachable`
//! routes, so the policy lives in N1, which the sandbox cannot see.
//!
//! [`Policy`]: policy::Policy

pub mod attest;
pub mod confine;
pub mod helper;
pub mod netlink;
pub mod policy;
pub mod probe;
pub mod record;
pub mod sysctl;

pub use policy::{derive, options_for, DeriveOptions, NetworkPlan, Policy, PolicyError};

/// The fixed descriptor numbers the supervisor hands to the helper.
pub mod fdno {
    /// Sealed memfd with the canonical policy bytes.
    pub const POLICY: i32 = 3;
    /// An fd of the sandbox network namespace (`/proc/PID/ns/net`).
    pub const SANDBOX_NETNS: i32 = 4;
}

/// Creates the sealed memfd the helper reads on [`fdno::POLICY`], and the
/// digest to pass as `--digest`.
pub fn policy_memfd(policy: &Policy) -> Result<(std::os::fd::OwnedFd, String), String> {
    let bytes = policy.to_bytes().map_err(|e| e.to_string())?;
    let digest = policy::digest_bytes(&bytes);
    let fd = lazaret_helpers::memfd::sealed("network-policy", &bytes).map_err(|e| e.to_string())?;
    Ok((fd, digest))
}
