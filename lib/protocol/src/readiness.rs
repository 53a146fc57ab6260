//! How a helper that prints no record tells its starter it is ready: one
//! line, [`READY_LINE`], written once, when it is, and nothing before it.
//! A starter that reads end of file, or anything else, before the line
//! knows the helper failed (the helper says why on its stderr, in
//! `helpers.log`).
//!
//! - `lazaret-mount-router` on `--ready-fd` ([`crate::fdno::mount_router::READY`]),
//!   once its mount is live and it is confined; the holder reads the line
//!   whole.
//! - `lazaret-dns-filter` and `lazaret-netpolicy watch` on stdout, once
//!   they listen (or denied the host's addresses) and are confined; the
//!   holder waits for its first byte.
//!
//! The coordinator and the supervisor answer with typed records instead
//! ([`crate::plan::CoordinatorReadiness`], [`crate::supervisor::FromSupervisor::Ready`]).

/// The readiness line, newline included.
pub const READY_LINE: &[u8] = b"ready\n";

#[cfg(test)]
mod tests {
    #[test]
    fn the_line_is_what_the_helpers_always_wrote() {
        // What `writeln!(out, "ready")` wrote before the line was named
        // here, and what the mount router's tests wait for.
        assert_eq!(super::READY_LINE, b"ready\n");
    }
}
