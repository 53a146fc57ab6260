//! Confinement of `lazaret-netpolicy` itself: the data is
//! [`crate::confinement::netpolicy`] (printed by
//! `--print-confinement`), applied in this order once the handles it needs
//! are open (netlink sockets and sysctl directories of both namespaces):
//!
//! 1. capabilities: every capability but `CAP_NET_ADMIN` leaves the
//!    effective, permitted, inheritable and bounding sets (the helper is
//!    root of the Domain user namespace, so this is what keeps it from
//!    mounting, joining other namespaces or changing ownership);
//! 2. `no_new_privs`, not dumpable;
//! 3. landlock layer 1 (what the kernel's ABI offers, all of it from ABI 6): file system
//!    access only to read and write files beneath the two
//!    `/proc/sys/net/ipv6/conf` handles; no TCP bind; no abstract unix
//!    sockets or signals outside the helper (runsc's control socket is
//!    abstract);
//! 4. seccomp: the allow-list `bin/netpolicy/src/lazaret-netpolicy.json`,
//!    compiled at build time; anything else kills the process (no exec, no
//!    setns, no mount, no raw or packet sockets, no `PROT_EXEC` mappings);
//! 5. landlock layer 2, after the policy is read: TCP connect only to the
//!    probe targets' ports (none for `install`).
//!
//! What it leaves to others: which namespace the helper starts in and
//! which fds it receives is the supervisor's decision; the policy's
//! content is the coordinator's (the helper checks its digest, seals and
//! structure); UDP is not covered by landlock, seccomp only limits which
//! sockets can be created. `CAP_NET_ADMIN` over the enforcement namespace
//! is the authority this helper exists to use.

use crate::confinement::{self, PLACE_ENFORCEMENT_IPV6, PLACE_SANDBOX_IPV6};
use lazaret_seccomp::ruleset::Place;
pub use lazaret_seccomp::ConfineError;
use lazaret_seccomp::{BpfProgram, Confinement};
use std::os::fd::BorrowedFd;

const BINARY: &str = "lazaret-netpolicy";

/// This helper's confinement, as data.
pub fn confinement() -> Confinement {
    confinement::netpolicy()
}

/// The compiled filters, decoded before any confinement.
pub fn seccomp_filters() -> Result<Vec<(&'static str, BpfProgram)>, ConfineError> {
    lazaret_seccomp::filters(crate::policies::POLICIES, BINARY)
}

/// Steps 1 to 4.
pub fn apply(
    enforcement_ipv6: BorrowedFd<'_>,
    sandbox_ipv6: BorrowedFd<'_>,
    filters: &[(&'static str, BpfProgram)],
) -> Result<(), ConfineError> {
    confinement().apply(
        &[
            Place {
                place: PLACE_ENFORCEMENT_IPV6,
                fd: enforcement_ipv6,
            },
            Place {
                place: PLACE_SANDBOX_IPV6,
                fd: sandbox_ipv6,
            },
        ],
        filters,
    )
}

/// Step 5: landlock layer 2, TCP connect only to `ports`.
pub fn landlock_connect(ports: &[u16]) -> Result<(), ConfineError> {
    lazaret_seccomp::ruleset::connect_only(ports)
}

/// The report's name for the step that failed.
pub fn stage(e: &ConfineError) -> &'static str {
    match e {
        ConfineError::Caps(_) => "capabilities",
        ConfineError::Landlock { .. }
        | ConfineError::MissingPlace(_)
        | ConfineError::NoLandlock(_)
        | ConfineError::BadCap(_) => "landlock",
        ConfineError::Seccomp(_) | ConfineError::NoPolicy { .. } => "seccomp",
        ConfineError::Sys { .. } => "confine",
    }
}
