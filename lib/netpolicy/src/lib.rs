//! The egress policy's derivation: the profile's `[network]` section
//! becomes the canonical [`Policy`] of one Domain generation.
//!
//! - [`section`]: the profile's `[network]` as written (`lazaret-config`
//!   parses it into these types; this crate links no configuration parser);
//! - [`derive`] (feature `derive`, on by default): the section becomes a
//!   [`Policy`], with the host's own addresses denied; [`plan`]: its
//!   options, its result and its errors.
//!
//! The policy itself (its types, canonical encoding, digest, checks and
//! evaluation), `allow_hosts` and the filtering resolver's decisions are
//! the shared vocabulary of every binary that handles the policy:
//! `lazaret_protocol::netpolicy`. Only the CLI (which derives it at each
//! start and hands the coordinator the canonical bytes) and the
//! Kubernetes export link this crate; no helper does.
//!
//! The topology (see `lib/netpolicy/README.md`): the sandbox's namespace N2
//! reaches the world only through slirp4netns B, which runs in the
//! enforcement namespace N1 and so obeys N1's routes; N1 reaches the host
//! through slirp4netns A. gVisor's netstack in N2 ignores `unreachable`
//! routes, so the policy lives in N1, which the sandbox cannot see.
//!
//! [`Policy`]: lazaret_protocol::netpolicy::Policy

#[cfg(feature = "derive")]
pub mod derive;
#[cfg(feature = "derive")]
pub mod plan;
pub mod section;

#[cfg(feature = "derive")]
pub use derive::{derive, host_addresses, options_for, options_on_this_host};
#[cfg(feature = "derive")]
pub use plan::{DeriveError, DeriveOptions, NetworkPlan};

// Two `cfg`s: clippy knows a test module by a plain `cfg(test)`.
#[cfg(test)]
#[cfg(feature = "derive")]
#[path = "policy_tests.rs"]
mod policy_tests;
