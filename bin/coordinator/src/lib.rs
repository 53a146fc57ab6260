//! The Session Coordinator: the single owner of one Domain's runtime
//! resources (OR-1). It holds the Domain `flock` and the Domain Store, has
//! the Runtime Supervisor start the Agent Sandbox, serves Client Sessions on
//! a host-private Unix socket, and tears everything transient down when the
//! last session leaves (FR-6). It holds no mount or network authority of its
//! own: those belong to the supervisor.

pub mod attach;
pub mod confine;
pub mod confinement;
pub mod escalation;
pub mod gate;
pub mod lease;
pub mod lifecycle;
pub mod logs;
pub mod network;
pub mod procs;
pub mod session;
pub mod start_error;
pub mod supervisor_link;
pub mod trust;
pub mod volumes;

/// Exit codes of `lazaret-coordinator`.
pub mod exit {
    pub const OK: i32 = 0;
    pub const BAD_INPUT: i32 = 2;
    pub const START_FAILED: i32 = 3;
}

// `policies::POLICIES`: this crate's seccomp policies, compiled by `build.rs`.
lazaret_seccomp::compiled_policies!();
