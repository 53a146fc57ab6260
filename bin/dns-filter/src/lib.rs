//! `lazaret-dns-filter`, the Network Sidecar's filtering resolver for a
//! profile's `allow_hosts` (see [`serve`] for the order of one lookup):
//!
//! - `lazaret_protocol::netpolicy::judge`: what it decides about each
//!   query and answer (shared with the egress Pod of `lazaret export
//!   kubernetes`), against the handed policy's `allow_hosts`
//!   (`lazaret_protocol::netpolicy::{policy, hosts}`);
//! - [`grants`]: which addresses are routed, on which ports, until when;
//! - [`routes`]: the routes and rules it writes for them;
//! - [`inuse`]: which of them still carry a connection when they expire;
//! - [`serve`]: the loop and its log (`dns-filter.log`).
//!
//! It runs in the enforcement namespace, next to slirp4netns B, started by
//! the supervisor's holder after the policy is installed and before slirp
//! B; the sandbox reaches it only as slirp B's DNS forwarder.

pub mod confinement;
pub mod grants;
pub mod inuse;
pub mod routes;
pub mod serve;

// `policies::POLICIES`: this crate's seccomp policies, compiled by `build.rs`.
lazaret_seccomp::compiled_policies!();
