//! `lazaret-netpolicy`, the Network Sidecar's confined helper: installs a
//! Domain's [`Policy`] as kernel routes in the enforcement network
//! namespace, disables IPv6 in both namespaces, attests and probes it.
//!
//! - [`attest`], [`sysctl`]: installing, reading the state back,
//!   fingerprinting it (through `lazaret-netlink`'s rtnetlink client);
//! - [`probe`]: the readiness probe from the sandbox's network namespace;
//! - [`confine`], [`helper`]: the process, which holds `CAP_NET_ADMIN`
//!   over the enforcement namespace and nothing else;
//! - [`watch`]: `lazaret-netpolicy watch`, which denies the addresses
//!   the host gains while the Domain runs (its log: `lazaret-netlink`'s
//!   bounded log).
//!
//! The policy's types come from `lazaret-netpolicy` without its `derive`
//! feature: this crate never links the configuration parser.
//!
//! [`Policy`]: lazaret_netpolicy::Policy

pub mod attest;
pub mod confine;
pub mod confinement;
pub mod helper;
pub mod probe;
pub mod sysctl;
pub mod watch;

/// This crate's compiled seccomp policies (`build.rs`).
pub mod policies {
    include!(concat!(env!("OUT_DIR"), "/policies.rs"));

    /// The policies are reviewed for x86_64: there each one compiles.
    #[cfg(all(test, target_arch = "x86_64"))]
    #[test]
    fn every_policy_is_compiled() {
        assert!(!POLICIES.is_empty());
        for p in POLICIES {
            let prog = lazaret_seccomp::program(POLICIES, p.binary);
            assert!(prog.is_some_and(|f| !f.is_empty()), "{}", p.binary);
        }
    }
}
