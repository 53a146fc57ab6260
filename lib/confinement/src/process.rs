//! Process hygiene: inherited descriptors, `no_new_privs`, dumpability.

use crate::ConfineError;
use std::os::fd::RawFd;

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> ConfineError {
    move |e| ConfineError::Sys {
        what,
        source: e.into(),
    }
}

/// Closes every descriptor from 3 up but those in `keep`, with
/// `close_range(2)`.
///
/// Call it before any Rust object owns a descriptor above 2 other than
/// those in `keep`: what it closes must not be closed again by a drop.
pub fn close_inherited_fds(keep: &[RawFd]) -> Result<(), ConfineError> {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter(|f| **f >= 3)
        .map(|f| *f as u32)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from = 3u32;
    for k in keep {
        if k > from {
            close_range(from, k - 1)?;
        }
        from = k + 1;
    }
    close_range(from, u32::MAX)
}

fn close_range(first: u32, last: u32) -> Result<(), ConfineError> {
    // SAFETY: close_range takes integers only; the caller guarantees (see
    // `close_inherited_fds`) that no Rust object owns a descriptor in the
    // range.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if r != 0 {
        return Err(ConfineError::Sys {
            what: "close inherited descriptors",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Neither this process nor what it executes can gain privileges
/// (setuid bits, file capabilities); required for an unprivileged
/// seccomp filter.
pub fn no_new_privs() -> Result<(), ConfineError> {
    rustix::thread::set_no_new_privs(true).map_err(sys("set no_new_privs"))
}

/// No ptrace attach or core dump by other processes of the same uid.
pub fn not_dumpable() -> Result<(), ConfineError> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(sys("make the process non-dumpable"))
}
