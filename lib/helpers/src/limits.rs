//! Resource limits of Lazaret's own processes.
//!
//! Every long-lived Lazaret process (the `lazaret` CLI while in `run`, the
//! coordinator, the supervisor, the exec bridge) raises its soft
//! `RLIMIT_NOFILE` to the hard limit at start, so a Debian user's default
//! soft limit of 1024 does not bound what the sandbox can open. Processes
//! they start (the holder, runsc and its gofer, slirp4netns, the mount
//! router) inherit the raised soft limit; runsc and the router are fine
//! with descriptors above 1024 (neither uses `select(2)`). The hard limit
//! is never raised: that is the administrator's (`lazaret doctor` shows
//! both and says when the hard one is too low).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. Returns the limit in
/// force afterwards (`None` in a field: unlimited). Failure leaves the
/// limit as it was (and is reported in the returned value only).
pub fn raise_nofile() -> Rlimit {
    let lim = getrlimit(Resource::Nofile);
    if lim.current == lim.maximum {
        return lim;
    }
    let raised = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => raised,
        Err(_) => lim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child, so the test runner's own limit stays as it is.
    #[test]
    fn soft_limit_is_raised_to_the_hard_one() {
        // SAFETY: the child only makes async-signal-safe raw calls
        // (getrlimit/setrlimit through rustix, which are plain syscalls)
        // before _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let hard = getrlimit(Resource::Nofile).maximum;
            let low = Rlimit {
                current: Some(64),
                maximum: hard,
            };
            let code = if setrlimit(Resource::Nofile, low).is_err() {
                2
            } else {
                let after = raise_nofile();
                let now = getrlimit(Resource::Nofile);
                if after.current == hard && now.current == hard && now.maximum == hard {
                    0
                } else {
                    1
                }
            };
            // SAFETY: _exit ends the forked child without running the
            // parent's atexit handlers or destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above; status is a valid
        // pointer to a local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
