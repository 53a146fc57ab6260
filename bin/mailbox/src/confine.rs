//! Confinement of `lazaret-mailbox`, applied once its inputs are read (the
//! sealed input memfd) and only the request directory handle, its inotify
//! watch ([`crate::watch`]) and the socket to the coordinator remain open:
//! resource bounds first, then what [`crate::confinement::mailbox`]
//! describes (no capabilities, `no_new_privs`, not dumpable, landlock
//! beneath the request directory only, the seccomp allow-list in
//! `bin/mailbox/src/lazaret-mailbox.json`, killing the process on
//! anything else: it has no inotify call, the watch is taken before).
//!
//! What it leaves to others: which directory and socket the reader gets
//! is the coordinator's decision, as are the key and the sandbox ID (in
//! the sealed input, whose seals and digest the reader checks before it
//! parses it). Per-pass work is bounded by the reader itself
//! ([`crate::reader`]), the rate of passes by [`crate::run::Pace`].

use crate::confinement::{self, PLACE_MAILBOX_REQUESTS};
use lazaret_seccomp::ruleset::Place;
use lazaret_seccomp::BpfProgram;
use rustix::process::{Resource, Rlimit};
use std::os::fd::BorrowedFd;

pub use confinement::{
    MAILBOX_MAX_ADDRESS_SPACE as MAX_ADDRESS_SPACE, MAILBOX_MAX_FILES as MAX_FILES,
};

const BINARY: &str = "lazaret-mailbox";

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot set resource limits: {0}")]
    Rlimit(std::io::Error),
    #[error(transparent)]
    Confine(#[from] lazaret_seccomp::ConfineError),
}

/// The compiled filters (decoded before confining: the allow-list need
/// not allow decoding).
pub fn filters() -> Result<Vec<(&'static str, BpfProgram)>, ConfineError> {
    Ok(lazaret_seccomp::filters(crate::policies::POLICIES, BINARY)?)
}

/// Resource bounds, then the reader's [`confinement::mailbox`] confinement.
pub fn confine(
    requests: BorrowedFd<'_>,
    filters: &[(&'static str, BpfProgram)],
) -> Result<(), ConfineError> {
    limit_resources()?;
    let places = [Place {
        place: PLACE_MAILBOX_REQUESTS,
        fd: requests,
    }];
    Ok(confinement::mailbox().apply(&places, filters)?)
}

/// Address space, descriptors, no core files.
pub fn limit_resources() -> Result<(), ConfineError> {
    for (res, max) in [
        (Resource::As, MAX_ADDRESS_SPACE),
        (Resource::Nofile, MAX_FILES),
        (Resource::Core, 0),
    ] {
        rustix::process::setrlimit(
            res,
            Rlimit {
                current: Some(max),
                maximum: Some(max),
            },
        )
        .map_err(|e| ConfineError::Rlimit(e.into()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_policy_compiles_and_allows_nothing_that_runs_or_reaches_out() {
        super::filters().unwrap();
        let json = crate::confinement::mailbox().seccomp.unwrap().json;
        let policy: serde_json::Value = serde_json::from_str(json).unwrap();
        let allowed: Vec<&str> = policy[super::BINARY]["filter"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["syscall"].as_str().unwrap())
            .collect();
        for forbidden in [
            "execve",
            "execveat",
            "fork",
            "vfork",
            "clone",
            "clone3",
            "socket",
            "socketpair",
            "connect",
            "bind",
            "accept4",
            "ptrace",
            "mount",
            "setns",
            "unshare",
        ] {
            assert!(!allowed.contains(&forbidden), "{forbidden} is allowed");
        }
    }
}
