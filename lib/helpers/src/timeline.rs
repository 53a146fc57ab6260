//! A per-phase timeline of one Domain start, for `bench/timeline`: with
//! `LAZARET_TIMELINE=1` in the environment of `lazaret`, each process of
//! the start (the CLI, the coordinator, the supervisor and the holder)
//! writes one line per phase to its stderr (the CLI's terminal,
//! `coordinator.log`, `helpers.log`):
//!
//! ```text
//! lazaret-timeline <CLOCK_MONOTONIC ns> <component> <phase>
//! ```
//!
//! The monotonic clock is the machine's, so lines of different processes
//! order by it. Without the variable nothing is written.
//!
//! The host side of each Host Escalation is marked too (the coordinator's
//! `escalation-*`, the CLI's `host-command-*` phases), for
//! `bench/escalate/run`'s breakdown; `lazaret-mailbox` (which runs with an
//! empty environment) and `lazaret-escalate` (inside gVisor, on its own
//! clock) are not.

use std::sync::OnceLock;

/// The variable that turns the timeline on.
pub const ENV: &str = "LAZARET_TIMELINE";

fn on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(ENV).is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Marks that `component` reached `phase` (one word, or words joined by
/// `-`). Each mark is also the test-only fault point `component:phase`
/// (see [`crate::fault`]).
pub fn mark(component: &str, phase: &str) {
    if crate::fault::armed() {
        crate::fault::point(&format!("{component}:{phase}"));
    }
    if on() {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let ns = t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128;
        // Not eprintln!, which panics when stderr (a log file) is full.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "lazaret-timeline {ns} {component} {phase}"
        );
    }
}
