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

/// Takes ownership of an inherited fd number, after checking it is open.
pub fn inherited(fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: fcntl(F_GETFD) on any integer is harmless; it only reports
    // whether the descriptor is open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Make it close-on-exec so it does not leak further.
    // SAFETY: fd is open (checked above).
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the descriptor is open and was handed to this process to own.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}
