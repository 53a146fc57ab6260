//! `lazaret-netpolicy`, the Network Sidecar's confined helper: installs a
//! Domain's [`Policy`] as kernel routes in the enforcement network
//! namespace, disables IPv6 in both namespaces, attests and probes it.
//!
//! - [`attest`], [`sysctl`]: installing, reading the state back,
//!   fingerprinting it (through `lazaret-netlink`'s rtnetlink client);
//!   [`routes`]: the routes and rules this helper writes;
//! - [`probe`]: the readiness probe from the sandbox's network namespace;
//! - [`confine`], [`helper`]: the process, which holds `CAP_NET_ADMIN`
//!   over the enforcement namespace and nothing else;
//! - [`watch`]: `lazaret-netpolicy watch`, which denies the addresses
//!   the host gains while the Domain runs (its log:
//!   `lazaret_protocol::netpolicy::hostlog`).
//!
//! The policy comes as the canonical bytes the CLI derived
//! (`lazaret_protocol::netpolicy`): this crate never links the
//! configuration parser nor the derivation.
//!
//! [`Policy`]: lazaret_protocol::netpolicy::Policy

pub mod attest;
pub mod confine;
pub mod confinement;
pub mod helper;
pub mod probe;
pub mod routes;
pub mod sysctl;
pub mod watch;

// `policies::POLICIES`: this crate's seccomp policies, compiled by `build.rs`.
lazaret_seccomp::compiled_policies!();
