//! The fixed descriptor numbers the coordinator hands to the supervisor.

/// Sealed memfd holding the postcard-encoded `SandboxPlan`; its SHA-256
/// digest comes in argv (`--plan-digest`).
pub const PLAN: i32 = lazaret_protocol::supervisor::PLAN_FD;
/// The supervisor's end of the control channel (`SOCK_SEQPACKET`), see
/// [`lazaret_protocol::supervisor`].
pub const CHANNEL: i32 = lazaret_protocol::supervisor::CHANNEL_FD;
