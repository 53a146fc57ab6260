//! The fixed descriptor numbers the CLI hands to a new coordinator.

/// Sealed memfd holding the postcard-encoded `CoordinatorInput`.
pub const INPUT: i32 = 3;
/// Write end of the readiness pipe: one line, `ready` or `error <message>`.
pub const READY: i32 = 4;
