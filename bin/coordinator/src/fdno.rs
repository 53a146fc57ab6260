//! The fixed descriptor numbers the CLI hands to a new coordinator.

/// Sealed memfd holding the postcard-encoded `CoordinatorInput`.
pub const INPUT: i32 = 3;
/// Write end of the readiness pipe: one line, `ready` or `error <message>`.
pub const READY: i32 = 4;
/// A pidfd of the `lazaret` CLI that leads the start-up, whose session is
/// the first: if it exits before connecting, the Domain stops at once
/// instead of waiting out the first session's grace.
pub const LEADER: i32 = 5;
