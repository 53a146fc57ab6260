//! What `lazaret-dns-filter` may do: the data it applies and prints
//! (`--print-confinement`), beside its reviewed seccomp policy
//! `lazaret-dns-filter.json`, which `build.rs` compiles.

use lazaret_seccomp::caps;
use lazaret_seccomp::landlock::ABI;
use lazaret_seccomp::ruleset::no_files_no_tcp;
use lazaret_seccomp::{Capabilities, Confinement, PolicySource, Status};

/// The newest landlock ABI whose rights `lazaret-dns-filter` uses (Linux
/// 6.12); it runs from ABI 1 with what the kernel offers.
pub const DNS_FILTER_ABI: ABI = ABI::V6;

pub fn dns_filter() -> Confinement {
    Confinement {
        binary: "lazaret-dns-filter",
        runs_as: "root of the Domain user namespace, started by lazaret-supervisor's holder when the profile lists allow_hosts; fd 3 a sealed memfd with the canonical policy (seals, size and SHA-256 checked), fd 4 its log (dns-filter.log in the Domain Root, opened for appending by the holder)",
        status: Status::Confined,
        namespaces: "the enforcement network namespace (the holder's), never the sandbox's",
        closes_fds: Some("0, 1, 2, the policy memfd and the log"),
        no_new_privs: true,
        not_dumpable: true,
        capabilities: Capabilities::Keep(vec![caps::NET_ADMIN]),
        landlock: Some(no_files_no_tcp(
            DNS_FILTER_ABI,
            "no file system access: the policy, the log, /proc/self/net/tcp, the netlink socket and both UDP sockets are opened before confining",
        )),
        seccomp: Some(PolicySource {
            file: "bin/dns-filter/src/lazaret-dns-filter.json",
            json: include_str!("lazaret-dns-filter.json"),
        }),
        notes: vec![
            "binds UDP port 53 on the enforcement namespace's own address (with CAP_NET_BIND_SERVICE, dropped right after)",
            "CAP_NET_ADMIN over the enforcement namespace: host routes (proto 76) and port rules (priority 1000, table 76) for addresses only the default denies, and with `dns` its upstream's routes (table 77) behind a mark rule (priority 900) only its upstream socket (SO_MARK, set before confining) matches; attestation rejects any other",
            "creates no socket after confining; sends upstream only queries for allowed names",
            "single-threaded",
        ],
    }
}
