//! What `lazaret-netpolicy` may do, and `lazaret-netpolicy watch` (its
//! own, narrower confinement `lazaret-netpolicy-watch`): the data the
//! helper applies ([`crate::confine`], [`crate::watch`]) and prints
//! (`--print-confinement [watch]`), beside the reviewed seccomp policies
//! `lazaret-netpolicy.json` and `lazaret-netpolicy-watch.json` that
//! `build.rs` compiles.

use lazaret_seccomp::abi::Feature;
use lazaret_seccomp::caps;
use lazaret_seccomp::landlock::{Access, AccessFs, AccessNet, ABI};
use lazaret_seccomp::ruleset::{no_files_no_tcp, Landlock, Rule};
use lazaret_seccomp::{Capabilities, Confinement, PolicySource, Status};

/// The newest landlock ABI whose rights `lazaret-netpolicy` uses (Linux
/// 6.12); it runs from ABI 1 with what the kernel offers.
pub const NETPOLICY_ABI: ABI = ABI::V6;
/// `/proc/sys/net/ipv6/conf` of the enforcement namespace.
pub const PLACE_ENFORCEMENT_IPV6: &str =
    "the enforcement network namespace's /proc/sys/net/ipv6/conf";
/// `/proc/sys/net/ipv6/conf` of the sandbox namespace.
pub const PLACE_SANDBOX_IPV6: &str = "the sandbox network namespace's /proc/sys/net/ipv6/conf";

pub fn netpolicy() -> Confinement {
    let sysctl = AccessFs::ReadFile | AccessFs::WriteFile;
    Confinement {
        binary: "lazaret-netpolicy",
        runs_as: "root of the Domain user namespace, started by lazaret-supervisor's holder; fd 3 a sealed memfd with the canonical policy (seals, size and SHA-256 checked), fd 4 the sandbox network namespace (`watch`: a netlink socket of the host's namespace, fd 5 its log)",
        status: Status::Confined,
        namespaces: "starts in the enforcement network namespace, opens its handles there, joins the sandbox network namespace (fd 4) and opens the same there",
        closes_fds: Some("0, 1, 2, the policy memfd and the sandbox network namespace"),
        no_new_privs: true,
        not_dumpable: true,
        capabilities: Capabilities::Keep(vec![caps::NET_ADMIN]),
        landlock: Some(Landlock {
            abi: NETPOLICY_ABI,
            fs: AccessFs::from_all(NETPOLICY_ABI),
            net: AccessNet::BindTcp.into(),
            scoped: true,
            rules: vec![
                Rule {
                    place: PLACE_ENFORCEMENT_IPV6,
                    access: sysctl,
                    required: true,
                },
                Rule {
                    place: PLACE_SANDBOX_IPV6,
                    access: sysctl,
                    required: true,
                },
            ],
            require_full: true,
            notes: vec![
                "TCP: no bind; connect_tcp: a second layer, once the policy is read, allows only the probe targets' ports (`probe`), none for `install`",
            ],
            below: vec![(
                Feature::Tcp,
                "it may then bind and connect TCP wherever the enforcement and sandbox network namespaces reach (the second layer is left out too); it holds CAP_NET_ADMIN over the enforcement namespace, whose routes it installs anyway, and reads only the host's canonical policy and the probe's answers",
            )],
        }),
        seccomp: Some(PolicySource {
            file: "bin/netpolicy/src/lazaret-netpolicy.json",
            json: include_str!("lazaret-netpolicy.json"),
        }),
        notes: vec![
            "CAP_NET_ADMIN over the enforcement namespace is the authority this helper exists to use",
            "UDP is not covered by landlock; seccomp limits which sockets it can create",
            "`watch` (for the Domain's life, started after `install`) denies every address the host gains (`unreachable ADDR/32` in table 75, looked up by a rule at priority 950) under its own, narrower confinement `lazaret-netpolicy-watch` (`lazaret-netpolicy --print-confinement watch`): no file system, no TCP, no socket of its own (its netlink sockets are the host's, inherited read-only, and the enforcement namespace's, opened before confining), no sandbox namespace",
        ],
    }
}

/// `lazaret-netpolicy watch`, which keeps the denials of the host's
/// addresses current while the Domain runs. Not a binary of its own:
/// printed in `lazaret-netpolicy`'s notes, applied and tested by this name.
pub fn netpolicy_watch() -> Confinement {
    Confinement {
        binary: "lazaret-netpolicy-watch",
        runs_as: "root of the Domain user namespace, started by lazaret-supervisor's holder after `install`, for the Domain's life; fd 3 a sealed memfd with the canonical policy, fd 4 a NETLINK_ROUTE socket of the host's network namespace bound to its IPv4 address notifications (by the supervisor, as the developer), fd 5 its log (host-addresses.log in the Domain Root, opened for appending by the holder)",
        status: Status::Confined,
        namespaces: "the enforcement network namespace (the holder's); it reads the host's addresses only through the inherited socket, where it holds no capability (so it cannot change anything there)",
        closes_fds: Some("0, 1, 2, the policy memfd, the host netlink socket and the log"),
        no_new_privs: true,
        not_dumpable: true,
        capabilities: Capabilities::Keep(vec![caps::NET_ADMIN]),
        landlock: Some(no_files_no_tcp(
            NETPOLICY_ABI,
            "no file system access: the policy, the log and both netlink sockets are opened before confining",
        )),
        seccomp: Some(PolicySource {
            file: "bin/netpolicy/src/lazaret-netpolicy-watch.json",
            json: include_str!("lazaret-netpolicy-watch.json"),
        }),
        notes: vec![
            "CAP_NET_ADMIN over the enforcement namespace: routes `unreachable ADDR/32` in table 75 for addresses of the host the policy does not decide exactly, and the rule `lookup 75` at priority 950; attestation rejects anything else there",
            "creates no socket; never reads anything the sandbox sends",
            "single-threaded; if it exits, the holder stops the Domain",
        ],
    }
}
