//! The fixed descriptor numbers the coordinator hands to the supervisor.

/// Sealed memfd holding the postcard-encoded `SandboxPlan`.
pub const PLAN: i32 = 3;
/// Write end of the status pipe: one line, `ready <init-pid>` or
/// `error <message>`.
pub const STATUS: i32 = 4;
