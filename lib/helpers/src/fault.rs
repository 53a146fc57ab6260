//! Test-only fault points, for the end-to-end tests' fault-injection
//! matrix (`tools/tests/tests/fault_matrix.rs`). A fault point is a name a
//! process passes on its way: every [`crate::timeline::mark`] is one
//! (`component:phase`, e.g. `holder:routers-ready`), and a few steps with
//! no timeline mark call [`point`] themselves (`reset-switch`).
//!
//! - `LAZARET_FAULT_POINT=NAME` makes the process kill itself with
//!   SIGKILL when it reaches `NAME`.
//! - `LAZARET_FAULT_PAUSE=NAME` makes it write
//!   `lazaret-fault: paused at NAME (pid P)` on its stderr and sleep
//!   [`PAUSE`] there, so that a test can SIGKILL any other process of the
//!   Domain while this one stands at that step; then it goes on.
//!
//! `NAME#N` matches only the N-th time this process reaches `NAME` (from
//! 1), e.g. the second session's `coordinator:session-hello#2`. Without
//! the variables nothing happens: a disabled point costs one check of a
//! value read once. The CLI passes both variables on to the coordinator,
//! which passes its environment to the supervisor and the holder; the
//! other helpers start with an empty environment and have no points.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Kill this process at the named point.
pub const KILL_ENV: &str = "LAZARET_FAULT_POINT";
/// Pause this process at the named point.
pub const PAUSE_ENV: &str = "LAZARET_FAULT_PAUSE";
/// How long a process stands at a pause point.
pub const PAUSE: Duration = Duration::from_millis(1500);

/// One configured point: its name and which occurrence (1-based; 0 = every).
struct Target {
    name: String,
    nth: u32,
    seen: AtomicU32,
}

impl Target {
    fn parse(v: &str) -> Option<Target> {
        if v.is_empty() {
            return None;
        }
        let (name, nth) = match v.rsplit_once('#') {
            Some((n, k)) => (n, k.parse().ok()?),
            None => (v, 0),
        };
        Some(Target {
            name: name.to_string(),
            nth,
            seen: AtomicU32::new(0),
        })
    }

    /// Whether passing `name` now hits this target.
    fn hit(&self, name: &str) -> bool {
        if self.name != name {
            return false;
        }
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        self.nth == 0 || self.nth == n
    }
}

struct Targets {
    kill: Option<Target>,
    pause: Option<Target>,
}

fn targets() -> &'static Targets {
    static T: OnceLock<Targets> = OnceLock::new();
    T.get_or_init(|| {
        let read = |k| std::env::var(k).ok().and_then(|v| Target::parse(&v));
        Targets {
            kill: read(KILL_ENV),
            pause: read(PAUSE_ENV),
        }
    })
}

/// Whether any fault point is configured in this process.
pub fn armed() -> bool {
    let t = targets();
    t.kill.is_some() || t.pause.is_some()
}

/// Passes the fault point `name`.
pub fn point(name: &str) {
    let t = targets();
    if t.kill.as_ref().is_some_and(|k| k.hit(name)) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
    if t.pause.as_ref().is_some_and(|p| p.hit(name)) {
        // Not eprintln!, which panics when stderr (a log file) is full.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "lazaret-fault: paused at {name} (pid {})",
            rustix::process::getpid().as_raw_nonzero()
        );
        std::thread::sleep(PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::Target;

    #[test]
    fn a_numbered_point_hits_only_its_occurrence() {
        let t = Target::parse("coordinator:session-hello#2").unwrap();
        assert!(!t.hit("coordinator:session-hello"));
        assert!(!t.hit("coordinator:ready"));
        assert!(t.hit("coordinator:session-hello"));
        assert!(!t.hit("coordinator:session-hello"));
    }

    #[test]
    fn an_unnumbered_point_hits_every_time() {
        let t = Target::parse("reset-switch").unwrap();
        assert!(t.hit("reset-switch"));
        assert!(t.hit("reset-switch"));
        assert!(!t.hit("reset-intent"));
    }

    #[test]
    fn malformed_or_empty_values_arm_nothing() {
        assert!(Target::parse("").is_none());
        assert!(Target::parse("x#two").is_none());
    }
}
