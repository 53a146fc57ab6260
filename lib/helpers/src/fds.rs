//! Handing file descriptors to a child at fixed numbers.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Arranges for each `(fd, target)` to be open at `target` in the child,
/// without close-on-exec. Targets must be 3 or above and distinct. The fds
/// are moved into the closure and closed in the parent when `cmd` drops.
pub fn pass_fds(cmd: &mut Command, fds: Vec<(OwnedFd, RawFd)>) {
    // SAFETY: the closure runs between fork and exec and makes only
    // async-signal-safe calls (dup, dup3, fcntl) on fds it owns.
    unsafe {
        cmd.pre_exec(move || {
            // First move every source above all targets, so that no dup2
            // can clobber a source that is itself some other target.
            let high = fds.iter().map(|(_, t)| *t).max().unwrap_or(2) + 1;
            let mut moved = Vec::with_capacity(fds.len());
            for (fd, target) in &fds {
                let n = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, high);
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                moved.push((n, *target));
            }
            for (n, target) in moved {
                if libc::dup2(n, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(n);
            }
            Ok(())
        });
    }
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
