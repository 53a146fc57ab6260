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

// `policies::POLICIES`: this crate's seccomp policies, compiled by `build.rs`.
lazaret_seccomp::compiled_policies!();
