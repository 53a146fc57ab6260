//! Children addressed by pidfd, never by a PID alone.
//!
//! A pidfd taken with `pidfd_open` of the caller's own child, before that
//! child is reaped, always names that child: until the parent waits for it,
//! its PID cannot be reused. So every helper here takes the pidfd right
//! after the fork, before the PID is used for anything else, and the
//! process is then signalled and watched through the pidfd (a pidfd polls
//! readable once the process has exited).

use std::os::fd::{AsFd, OwnedFd};
use std::process::Child;

#[derive(Debug, thiserror::Error)]
pub enum PidfdError {
    #[error("pid {0} is not a valid process id")]
    BadPid(i32),
    #[error("cannot open a pidfd for process {pid}: {source}")]
    Open { pid: i32, source: rustix::io::Errno },
}

/// The pidfd of `pid`, which must be the caller's own unreaped child (or a
/// process whose identity was checked otherwise, as recovery does with the
/// start time).
pub fn open(pid: i32) -> Result<OwnedFd, PidfdError> {
    // Zero and negative numbers name groups or nobody, never one process.
    let p = (pid > 0)
        .then(|| rustix::process::Pid::from_raw(pid))
        .flatten()
        .ok_or(PidfdError::BadPid(pid))?;
    rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
        .map_err(|source| PidfdError::Open { pid, source })
}

/// The pidfd of a child just spawned, before it is reaped.
pub fn of_child(child: &Child) -> Result<OwnedFd, PidfdError> {
    // Spawned children have PIDs that fit; an overflow would name no one.
    let pid = i32::try_from(child.id()).map_err(|_| PidfdError::BadPid(-1))?;
    open(pid)
}

/// A [`Child`] with its pidfd, taken at spawn.
pub struct Tracked {
    pub child: Child,
    pub pidfd: OwnedFd,
}

impl Tracked {
    /// Takes the pidfd of a freshly spawned child; kills and reaps the
    /// child when that fails, so that nothing runs untracked.
    pub fn new(mut child: Child) -> Result<Tracked, PidfdError> {
        match of_child(&child) {
            Ok(pidfd) => Ok(Tracked { child, pidfd }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    pub fn signal(&self, sig: rustix::process::Signal) -> rustix::io::Result<()> {
        send_signal(&self.pidfd, sig)
    }

    /// Whether the child has exited (without reaping it).
    pub fn exited(&self) -> bool {
        exited(&self.pidfd)
    }
}

/// The PID behind `pidfd` in this process's PID namespace, as the kernel
/// states it (`Pid:` in `/proc/self/fdinfo`); `None` once it has exited
/// (the kernel says -1) or when the descriptor is no pidfd. For records
/// and logs only: act through the pidfd.
pub fn pid_of(pidfd: impl AsFd) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let info =
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_fd().as_raw_fd())).ok()?;
    let pid: i32 = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))?
        .trim()
        .parse()
        .ok()?;
    (pid > 0).then_some(pid)
}

/// Sends `sig` through a pidfd, which cannot hit a recycled PID.
pub fn send_signal(pidfd: impl AsFd, sig: rustix::process::Signal) -> rustix::io::Result<()> {
    rustix::process::pidfd_send_signal(pidfd, sig)
}

/// Whether the process behind `pidfd` has exited (its pidfd is readable).
pub fn exited(pidfd: impl AsFd) -> bool {
    exited_within(pidfd, std::time::Duration::ZERO)
}

/// Waits up to `wait` for the process behind `pidfd` to exit; whether it
/// has. Returns as soon as it exits (or early, on a signal).
pub fn exited_within(pidfd: impl AsFd, wait: std::time::Duration) -> bool {
    let mut pfd = [rustix::event::PollFd::new(
        &pidfd,
        rustix::event::PollFlags::IN,
    )];
    let ts = rustix::event::Timespec {
        tv_sec: wait.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: wait.subsec_nanos().into(),
    };
    matches!(rustix::event::poll(&mut pfd, Some(&ts)), Ok(n) if n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_tracked_until_it_exits() {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut t = Tracked::new(child).unwrap();
        assert!(!t.exited());
        t.signal(rustix::process::Signal::KILL).unwrap();
        // A pidfd polls readable once the process has exited.
        let mut pfd = [rustix::event::PollFd::new(
            &t.pidfd,
            rustix::event::PollFlags::IN,
        )];
        rustix::event::poll(&mut pfd, None).unwrap();
        assert!(t.exited());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(t.child.wait().unwrap().signal(), Some(9));
    }

    #[test]
    fn the_kernel_names_the_pid_behind_a_pidfd() {
        let me = open(std::process::id() as i32).unwrap();
        assert_eq!(pid_of(&me), Some(std::process::id() as i32));
        let not_a_pidfd = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(pid_of(&not_a_pidfd), None);
    }

    #[test]
    fn bad_pids_are_refused() {
        assert!(matches!(open(0), Err(PidfdError::BadPid(0))));
        assert!(matches!(open(-5), Err(PidfdError::BadPid(-5))));
    }
}
