//! The Runtime Supervisor applies a [`SandboxPlan`] decided by the Session
//! Coordinator. It holds the authority to create the Domain's user, mount,
//! network, PID, IPC and UTS namespaces and to start `runsc` in them, and
//! starts each Client Session's exec bridge on the coordinator's request
//! (so that the coordinator can confine itself after start-up); it never
//! reads host configuration and holds no Trust Anchor keys.
//!
//! [`SandboxPlan`]: lazaret_protocol::plan::SandboxPlan

pub mod bridge;
pub mod bundle;
pub mod confinement;
pub mod limits;
pub mod memory;
pub mod network;
pub mod ports;
pub mod router;
pub mod volumes;

/// Exit codes of `lazaret-supervisor` (documented in the README).
pub mod exit {
    /// The sandbox ran and was stopped on request.
    pub const STOPPED: i32 = 0;
    /// The plan could not be read or was invalid.
    pub const BAD_PLAN: i32 = 2;
    /// Namespaces, mounts or runsc failed to start.
    pub const START_FAILED: i32 = 3;
    /// runsc exited without being asked to.
    pub const SANDBOX_LOST: i32 = 4;
}

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
