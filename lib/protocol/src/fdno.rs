//! Every descriptor layout between Lazaret's binaries: the fixed numbers
//! at which a starter hands a helper its inputs (`lazaret_helpers::fds::
//! pass_fds` on the sending side, `lazaret_helpers::fds::inherited` on the
//! receiving one). One submodule per receiving binary (or mode); both ends
//! name the constant, so a layout changes in one place.
//!
//! Descriptors 0-2 are the standard streams; every layout starts at 3.
//! What the descriptors carry is checked by the receiver (a sealed memfd's
//! seals, size and digest; a socket's type), never trusted from the number.

/// `lazaret-coordinator`, handed by the `lazaret` CLI that leads the
/// Domain's start-up.
pub mod coordinator {
    /// Sealed memfd holding the postcard-encoded
    /// [`crate::plan::CoordinatorInput`]; its SHA-256 comes in argv
    /// (`--input-digest`).
    pub const INPUT: i32 = 3;
    /// Write end of the readiness pipe: one length-prefixed
    /// [`crate::plan::CoordinatorReadiness`] frame ([`crate::frame`]).
    pub const READY: i32 = 4;
    /// A pidfd of the `lazaret` CLI that leads the start-up, whose session
    /// is the first: if it exits before connecting, the Domain stops at
    /// once instead of waiting out the first session's grace.
    pub const LEADER: i32 = 5;
}

/// `lazaret-supervisor`, handed by the coordinator.
pub mod supervisor {
    /// Sealed memfd holding the postcard-encoded
    /// [`crate::plan::SandboxPlan`]; its SHA-256 digest comes in argv
    /// (`--plan-digest`).
    pub const PLAN: i32 = 3;
    /// The supervisor's end of the control channel (`SOCK_SEQPACKET`), see
    /// [`crate::supervisor`].
    pub const CHANNEL: i32 = 4;
}

/// `lazaret-mailbox`, handed by the coordinator. The reader closes every
/// descriptor above 2 but these, which are contiguous up to
/// [`mailbox::CHANNEL`].
pub mod mailbox {
    /// Sealed memfd holding the postcard [`crate::mailbox::ReaderInput`];
    /// its SHA-256 comes in argv (`--input-digest`).
    pub const INPUT: i32 = 3;
    /// The request directory (`O_DIRECTORY`, opened by the coordinator).
    pub const REQUESTS: i32 = 4;
    /// The reader's end of the socketpair.
    pub const CHANNEL: i32 = 5;
}

/// `lazaret-exec-bridge`, handed by the supervisor (one per Client
/// Session), its standard streams being the session's PTY slave or pipes.
pub mod exec_bridge {
    /// A pidfd of the Domain's sandbox holder, whose namespaces the bridge
    /// joins.
    pub const HOLDER_PIDFD: i32 = 3;
    /// The session's process specification for `runsc exec --process` (a
    /// sealed memfd, read by runsc as `/proc/self/fd/4`): it may hold the
    /// session's own variables (`lazaret run -e`), which are never written
    /// to a file.
    pub const PROCESS: i32 = 4;
}

/// `lazaret-mount-router`, started by the supervisor's holder. The router
/// takes the number from `--ready-fd N`; the holder passes this one.
pub mod mount_router {
    /// Write end of the readiness pipe: the router writes
    /// [`crate::readiness::READY_LINE`] once its mount is live and it is
    /// confined.
    pub const READY: i32 = 3;
}

/// `lazaret-netpolicy install` and `probe`, started by the supervisor's
/// holder (the defaults of `--policy-fd` and `--sandbox-netns-fd`).
pub mod netpolicy {
    /// Sealed memfd with the canonical policy bytes; their SHA-256 comes in
    /// argv (`--digest`).
    pub const POLICY: i32 = 3;
    /// An fd of the sandbox network namespace (`/proc/PID/ns/net`).
    pub const SANDBOX_NETNS: i32 = 4;
}

/// `lazaret-netpolicy watch`, started by the supervisor's holder for the
/// Domain's life (the defaults of `--policy-fd`, `--host-netlink-fd` and
/// `--log-fd`).
pub mod netpolicy_watch {
    /// Sealed memfd with the canonical policy bytes, as
    /// [`super::netpolicy::POLICY`].
    pub const POLICY: i32 = 3;
    /// A NETLINK_ROUTE socket of the host's network namespace, bound to
    /// its IPv4 address notifications (by the supervisor, as the
    /// developer).
    pub const HOST_NETLINK: i32 = 4;
    /// Its log, `host-addresses.log` in the Domain Root, opened for
    /// appending by the holder.
    pub const LOG: i32 = 5;
}

/// `lazaret-dns-filter`, started by the supervisor's holder when the
/// profile lists `allow_hosts` (the defaults of `--policy-fd` and
/// `--log-fd`).
pub mod dns_filter {
    /// Sealed memfd with the canonical policy bytes, as
    /// [`super::netpolicy::POLICY`].
    pub const POLICY: i32 = 3;
    /// Its log, `dns-filter.log` in the Domain Root, opened for appending
    /// by the holder.
    pub const LOG: i32 = 4;
}

/// `slirp4netns` (not Lazaret's: the host's), started by the supervisor
/// (A, the uplink) and by its holder (B). It takes the numbers from its
/// command line (`--ready-fd=N`, `--exit-fd=N`), which the starter builds
/// from these.
pub mod slirp4netns {
    /// Write end of a pipe slirp4netns writes one byte to once its tap
    /// device is configured.
    pub const READY: i32 = 3;
    /// A and only A: read end of a pipe whose write end the supervisor
    /// keeps; slirp A exits when it closes.
    pub const EXIT: i32 = 4;
}

/// Takes ownership of an inherited fd number, after checking it is open.
pub fn inherited(fd: std::os::fd::RawFd) -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: fcntl(F_GETFD) on any integer is harmless; it only reports
    // whether the descriptor is open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Make it close-on-exec so it does not leak further.
    // SAFETY: fd is open (checked above).
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the descriptor is open and was handed to this process to own.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout, as its receiver sees it.
    const LAYOUTS: &[(&str, &[i32])] = &[
        (
            "coordinator",
            &[coordinator::INPUT, coordinator::READY, coordinator::LEADER],
        ),
        ("supervisor", &[supervisor::PLAN, supervisor::CHANNEL]),
        (
            "mailbox",
            &[mailbox::INPUT, mailbox::REQUESTS, mailbox::CHANNEL],
        ),
        (
            "exec_bridge",
            &[exec_bridge::HOLDER_PIDFD, exec_bridge::PROCESS],
        ),
        ("mount_router", &[mount_router::READY]),
        ("netpolicy", &[netpolicy::POLICY, netpolicy::SANDBOX_NETNS]),
        (
            "netpolicy_watch",
            &[
                netpolicy_watch::POLICY,
                netpolicy_watch::HOST_NETLINK,
                netpolicy_watch::LOG,
            ],
        ),
        ("dns_filter", &[dns_filter::POLICY, dns_filter::LOG]),
        ("slirp4netns", &[slirp4netns::READY, slirp4netns::EXIT]),
    ];

    #[test]
    fn every_layout_starts_at_3_and_is_contiguous() {
        // Contiguous from 3 means distinct and clear of the standard
        // streams; the mailbox reader relies on it when it closes the rest.
        for (name, fds) in LAYOUTS {
            let want: Vec<i32> = (3..3 + fds.len() as i32).collect();
            assert_eq!(fds.to_vec(), want, "{name}");
        }
    }
}
