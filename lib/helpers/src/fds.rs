//! Handing file descriptors to a child at fixed numbers.

use std::os::fd::{OwnedFd, RawFd};
use std::process::Command;

/// Arranges for each `(fd, target)` to be open at `target` in the child,
/// without close-on-exec. Targets must be 3 or above and distinct. The fds
/// are moved into the child's set-up ([`crate::child::setup`]) and closed
/// in the parent when `cmd` drops.
pub fn pass_fds(cmd: &mut Command, fds: Vec<(OwnedFd, RawFd)>) {
    crate::child::setup(
        cmd,
        crate::child::Setup {
            fds,
            ..Default::default()
        },
    );
}

pub use lazaret_protocol::fdno::inherited;
