//! `lazaret-mailbox`: the Escalation Mailbox reader, as a confined helper.
//!
//! The coordinator starts it with the request directory, a socketpair and
//! a sealed input; it reads, bounds, verifies and decodes every entry the
//! sandbox writes, and hands back only typed records
//! ([`lazaret_protocol::mailbox::FromReader`]). See [`confine`] for what
//! it may do, [`reader`] for what it checks, [`watch`] for what wakes it, [`run`]
//! for the order.

pub mod confine;
pub mod confinement;
pub mod reader;
pub mod run;
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
