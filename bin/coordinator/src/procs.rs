//! Identifying processes by (pid, start time), and pidfds.

use std::os::fd::OwnedFd;

/// The start time of `pid` in clock ticks since boot (field 22 of
/// `/proc/PID/stat`), or `None` when it does not exist.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses; the
    // fields after the last ')' are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Whether the process that was `(pid, start)` still exists.
pub fn alive(pid: i32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

/// A pidfd of `pid`, a process that is not our child (recovery): check
/// its start time again after opening, before acting on it.
pub fn pidfd(pid: i32) -> Result<OwnedFd, lazaret_helpers::pidfd::PidfdError> {
    lazaret_helpers::pidfd::open(pid)
}

/// Sends SIGKILL through a pidfd, which cannot hit a recycled pid.
pub fn kill_pidfd(fd: &OwnedFd) {
    let _ = lazaret_helpers::pidfd::send_signal(fd, rustix::process::Signal::KILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_stable() {
        let me = std::process::id() as i32;
        let t = start_time(me).unwrap();
        assert!(alive(me, t));
        assert!(!alive(me, t + 1));
        assert_eq!(start_time(i32::MAX), None);
    }
}
