//! No code: `tests/dependencies.rs` checks the workspace's layout rules
//! (see `docs/layout.md`) from `cargo metadata`, so `cargo test` fails
//! when a change breaks one.
