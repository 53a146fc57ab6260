//! What the binaries' children start with, set between fork and exec: one
//! place for the `pre_exec` signal set-up (and its SAFETY argument) the
//! coordinator, the supervisor, its holder, the exec bridge and the image
//! preparation (skopeo) need.

use nix::sys::signal::{SigSet, Signal};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The signal state of a child of [`Command`].
#[derive(Debug, Clone, Copy)]
pub struct ChildSignals {
    /// Start with no signal blocked (the parent blocks those it takes
    /// through a signalfd or waits for; the child must not inherit that).
    pub unblock_all: bool,
    /// `SIGKILL` when the thread that started it exits
    /// (`PR_SET_PDEATHSIG`): the child must not outlive its parent.
    pub die_with_parent: bool,
}

/// Sets up `cmd`'s child as `s` says, in the child between fork and exec.
pub fn set_signals(cmd: &mut Command, s: ChildSignals) {
    // SAFETY: between fork and exec the closure makes only
    // async-signal-safe calls (sigprocmask, prctl) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if s.unblock_all {
                SigSet::all()
                    .thread_unblock()
                    .map_err(std::io::Error::from)?;
            }
            if s.die_with_parent {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            }
            Ok(())
        });
    }
}
