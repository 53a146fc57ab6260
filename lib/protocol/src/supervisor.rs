//! The control channel between the Session Coordinator and the Runtime
//! Supervisor: one `socketpair(AF_UNIX, SOCK_SEQPACKET)`, one postcard
//! record per datagram, file descriptors out of band (SCM_RIGHTS).
//!
//! The supervisor starts everything that must stay unconfined (runsc, the
//! exec bridges), so that the coordinator can confine itself after
//! start-up. Each record states how many descriptors travel with it
//! ([`ToSupervisor::fd_count`], [`FromSupervisor::fd_count`]); a receiver
//! refuses a record whose descriptors do not match.
//!
//! The supervisor decides every runsc argument itself, from its plan: the
//! coordinator names a Client Session and the process to run inside, never
//! a host command line.

use serde::{Deserialize, Serialize};

/// The largest record either side sends (descriptors aside).
pub const MAX_RECORD: usize = 64 * 1024;
/// The largest sealed [`SessionProcess`] the supervisor reads.
pub const MAX_PROCESS: u64 = 4 << 20;

/// A Client Session's ID: 32 lowercase hex digits (16 random bytes). The
/// supervisor builds file names from it, so it is checked on both sides.
pub fn valid_session_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Coordinator -> supervisor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ToSupervisor {
    /// Start the exec bridge of a Client Session. Descriptors: the sealed
    /// [`SessionProcess`] memfd, then the PTY slave (`tty`) or the
    /// session's stdin read end, stdout write end and stderr write end.
    StartBridge(StartBridge),
    /// Stop the sandbox, remove the run directory, answer
    /// [`FromSupervisor::Stopped`] and exit. No descriptors.
    Stop,
}

impl ToSupervisor {
    pub fn fd_count(&self) -> usize {
        match self {
            ToSupervisor::StartBridge(b) if b.tty => 2,
            ToSupervisor::StartBridge(_) => 4,
            ToSupervisor::Stop => 0,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StartBridge {
    /// See [`valid_session_id`].
    pub session: String,
    /// The stdio is one PTY slave (`runsc exec` with `terminal: true`).
    pub tty: bool,
    /// SHA-256 (hex) of the sealed [`SessionProcess`] memfd, checked
    /// before it is parsed.
    pub process_digest: String,
}

/// What runs inside the sandbox for a Client Session; the supervisor turns
/// it into runsc's process file with the Domain's limits and fixed
/// capabilities.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionProcess {
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub cwd: String,
    /// Whether set-user-ID programs take effect (no `no_new_privs`): the
    /// profile's `user` reaches root with `sudo`. Within gVisor and the
    /// sandbox's capability bound, so root inside has no more than it
    /// has in a root session.
    pub setuid: bool,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
}

impl ExitStatus {
    /// The status as a shell reports it (128 + signal).
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Exited(c) => c,
            ExitStatus::Signaled(s) => 128 + s,
        }
    }
}

/// gVisor keeps all of the sandbox's memory in one memory file that it
/// grows in steps of this size; the Sentry's `RLIMIT_FSIZE` (the profile's
/// `limits.memory`) refuses a step past the bound.
pub const MEMORY_FILE_STEP: u64 = 1 << 30;

/// The sandbox's memory at the profile's `limits.memory`, as the
/// supervisor saw gVisor's memory file around one session. The file never
/// shrinks (gVisor returns freed pages, not the file's length), so being
/// at the bound says that the sandbox's memory once reached it, and an
/// allocation past it since then fails inside.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemoryBound {
    /// `limits.memory`, in bytes.
    pub limit: u64,
    /// Whether the file was already at the bound when the session started
    /// (so this session did not necessarily take it there).
    pub before: bool,
}

impl MemoryBound {
    /// Whether a memory file of `size` bytes can grow no further under
    /// `limit`.
    pub fn at_bound(size: u64, limit: u64) -> bool {
        size.saturating_add(MEMORY_FILE_STEP) > limit
    }

    /// What the supervisor reports for a session: the file's size when it
    /// started and when it ended (`None`: unknown), and the limit.
    pub fn of_session(limit: Option<u64>, start: Option<u64>, end: Option<u64>) -> Option<Self> {
        let (limit, end) = (limit?, end?);
        if !Self::at_bound(end, limit) {
            return None;
        }
        // An unknown start is taken as "already there": the weaker claim.
        let before = match start {
            Some(s) => Self::at_bound(s, limit),
            None => true,
        };
        Some(MemoryBound { limit, before })
    }
}

/// Supervisor -> coordinator.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum FromSupervisor {
    /// The sandbox runs. Descriptor: a pidfd of the sandbox holder, taken
    /// from the supervisor's own unreaped child.
    Ready,
    /// The sandbox could not start; the supervisor exits. The text is what
    /// the CLI shows after "the sandbox could not start: ".
    StartFailed { reason: String },
    /// The session's exec bridge runs. Descriptor: its pidfd (for
    /// signals; the supervisor reaps it and reports [`Self::BridgeExited`]).
    BridgeStarted { session: String },
    /// The exec bridge could not be started. No descriptors.
    BridgeFailed { session: String, reason: String },
    /// The exec bridge ended with `status` (the command's, or 125 when the
    /// bridge itself failed). `memory`: `Some` when the sandbox's memory
    /// is at the profile's `limits.memory` as the session ends.
    BridgeExited {
        session: String,
        status: ExitStatus,
        memory: Option<MemoryBound>,
    },
    /// Answer to [`ToSupervisor::Stop`]: the sandbox is stopped; whether
    /// the run directory is gone.
    Stopped { run_dir_removed: bool },
}

impl FromSupervisor {
    pub fn fd_count(&self) -> usize {
        match self {
            FromSupervisor::Ready | FromSupervisor::BridgeStarted { .. } => 1,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_32_lowercase_hex_digits() {
        assert!(valid_session_id("0123456789abcdef0123456789abcdef"));
        for bad in [
            "",
            "../../etc/passwd",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789abcdef/123456789abcdef",
        ] {
            assert!(!valid_session_id(bad), "{bad}");
        }
    }

    #[test]
    fn descriptor_counts() {
        let b = |tty| {
            ToSupervisor::StartBridge(StartBridge {
                session: String::new(),
                tty,
                process_digest: String::new(),
            })
        };
        assert_eq!(b(true).fd_count(), 2);
        assert_eq!(b(false).fd_count(), 4);
        assert_eq!(ToSupervisor::Stop.fd_count(), 0);
        assert_eq!(FromSupervisor::Ready.fd_count(), 1);
        assert_eq!(
            FromSupervisor::StartFailed { reason: "x".into() }.fd_count(),
            0
        );
    }

    #[test]
    fn the_memory_bound_is_one_growth_step_short_of_the_limit() {
        const G: u64 = 1 << 30;
        // gVisor starts with one step: a 1 GiB bound is reached at once.
        assert!(MemoryBound::at_bound(G, G));
        assert!(!MemoryBound::at_bound(G, 2 * G));
        assert!(MemoryBound::at_bound(2 * G, 2 * G));
        // A bound between steps is reached at the last whole step below it.
        assert!(!MemoryBound::at_bound(G, 2 * G + G / 2));
        assert!(MemoryBound::at_bound(2 * G, 2 * G + G / 2));
        assert!(MemoryBound::at_bound(u64::MAX, 4 * G), "no overflow");
    }

    #[test]
    fn a_session_is_said_to_reach_the_bound_only_when_it_grew_there() {
        const G: u64 = 1 << 30;
        let of = MemoryBound::of_session;
        assert_eq!(of(None, Some(G), Some(8 * G)), None, "no limit");
        assert_eq!(of(Some(4 * G), Some(G), Some(2 * G)), None, "below");
        assert_eq!(of(Some(4 * G), Some(G), None), None, "unknown end");
        let reached = MemoryBound {
            limit: 4 * G,
            before: false,
        };
        assert_eq!(of(Some(4 * G), Some(G), Some(4 * G)), Some(reached));
        let before = MemoryBound {
            before: true,
            ..reached
        };
        assert_eq!(of(Some(4 * G), Some(4 * G), Some(4 * G)), Some(before));
        assert_eq!(of(Some(4 * G), None, Some(4 * G)), Some(before));
    }

    #[test]
    fn shell_codes() {
        assert_eq!(ExitStatus::Exited(3).shell_code(), 3);
        assert_eq!(ExitStatus::Signaled(9).shell_code(), 137);
    }
}
