//! The suite's binaries and each one's [`Confinement`]: the data the
//! binaries apply and print, and the confinement tests apply too.

use crate::abi::{Available, Feature};
use crate::caps;
use crate::describe::{Capabilities, Confinement, Status};
use crate::ruleset::{Landlock, Rule};
use landlock::{Access, AccessFs, AccessNet, BitFlags, ABI};

/// Every binary of the suite, in the order of the README's authority
/// table. Adding a binary to the table is adding its name here (the
/// binary must answer `--print-confinement`).
pub const SUITE: &[&str] = &[
    "lazaret",
    "lazaret-coordinator",
    "lazaret-mailbox",
    "lazaret-supervisor",
    "lazaret-exec-bridge",
    "lazaret-mount-router",
    "lazaret-netpolicy",
    "lazaret-dns-filter",
    "lazaret-escalate",
    "lazaret-port-relay",
    "lazaret-sudo",
];

/// `binary`'s confinement, for the binaries described here.
pub fn get(binary: &str) -> Option<Confinement> {
    Some(match binary {
        "lazaret" => cli(),
        "lazaret-coordinator" => coordinator(),
        "lazaret-mailbox" => mailbox(),
        "lazaret-supervisor-scan" => supervisor_scan(),
        "lazaret-supervisor" => supervisor(),
        "lazaret-exec-bridge" => exec_bridge(),
        "lazaret-mount-router" => mount_router(),
        "lazaret-netpolicy" => netpolicy(),
        "lazaret-netpolicy-watch" => netpolicy_watch(),
        "lazaret-dns-filter" => dns_filter(),
        "lazaret-escalate" => escalate(),
        "lazaret-port-relay" => port_relay(),
        "lazaret-sudo" => sudo(),
        _ => return None,
    })
}

/// Every confinement with a landlock layer: the suite's binaries and the
/// two described by name only (`lazaret-supervisor-scan`,
/// `lazaret-netpolicy-watch`). `lazaret doctor` reports them all.
pub fn landlocked() -> Vec<Confinement> {
    SUITE
        .iter()
        .chain(&["lazaret-supervisor-scan", "lazaret-netpolicy-watch"])
        .filter_map(|b| get(b))
        .filter(|c| c.landlock.is_some())
        .collect()
}

/// For `--print-confinement`: prints `binary`'s confinement on stdout,
/// then what of it this kernel enforces, and exits 0 (1 if this build does
/// not describe it, 125 for a bad [`crate::abi::TEST_CAP_ENV`]).
pub fn print_and_exit(binary: &str) -> ! {
    match get(binary) {
        Some(c) => {
            print!("{}", c.print());
            match Available::detect() {
                Ok(a) => print!("{}", c.on_kernel(&a).unwrap_or_default()),
                Err(e) => {
                    eprintln!("{binary}: {e}");
                    std::process::exit(125)
                }
            }
            std::process::exit(0)
        }
        None => {
            eprintln!("{binary}: no confinement is described for this binary");
            std::process::exit(1)
        }
    }
}

// ---------------------------------------------------------------- netpolicy

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
        seccomp: true,
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
            "no file system access: the policy, the log and both netlink sockets are opened before confining",
        )),
        seccomp: true,
        notes: vec![
            "CAP_NET_ADMIN over the enforcement namespace: routes `unreachable ADDR/32` in table 75 for addresses of the host the policy does not decide exactly, and the rule `lookup 75` at priority 950; attestation rejects anything else there",
            "creates no socket; never reads anything the sandbox sends",
            "single-threaded; if it exits, the holder stops the Domain",
        ],
    }
}

/// The Network Sidecar's long-lived helpers' landlock: no place at all,
/// every file system and TCP right handled, so none is granted.
fn no_files_no_tcp(opened_before: &'static str) -> Landlock {
    Landlock {
        abi: NETPOLICY_ABI,
        fs: AccessFs::from_all(NETPOLICY_ABI),
        net: AccessNet::from_all(NETPOLICY_ABI),
        scoped: true,
        rules: vec![],
        require_full: true,
        notes: vec![opened_before, "TCP: no bind, no connect"],
        below: vec![],
    }
}

// ---------------------------------------------------------------- dns filter

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
            "no file system access: the policy, the log, /proc/self/net/tcp, the netlink socket and both UDP sockets are opened before confining",
        )),
        seccomp: true,
        notes: vec![
            "binds UDP port 53 on the enforcement namespace's own address (with CAP_NET_BIND_SERVICE, dropped right after)",
            "CAP_NET_ADMIN over the enforcement namespace: host routes (proto 76) and port rules (priority 1000, table 76) for addresses only the default denies, and with `dns` its upstream's routes (table 77) behind a mark rule (priority 900) only its upstream socket (SO_MARK, set before confining) matches; attestation rejects any other",
            "creates no socket after confining; sends upstream only queries for allowed names",
            "single-threaded",
        ],
    }
}

// ---------------------------------------------------------------- mount router

/// The newest landlock ABI whose file system and TCP rights
/// `lazaret-mount-router` uses (`REFER`, `TRUNCATE`, TCP); it scopes too
/// (ABI 6) and runs from ABI 1 with what the kernel offers.
pub const ROUTER_ABI: ABI = ABI::V4;
pub const PLACE_WORKSPACE: &str = "the workspace";
pub const PLACE_STATE: &str = "the Domain's Ignored Workspace State";
pub const PLACE_BASELINE: &str = "the rules baseline directory (--rules-baseline)";
pub const PLACE_FUSE: &str = "/dev/fuse";
pub const PLACE_EXCLUDES: &str = "core.excludesFile";
pub const PLACE_INFO_EXCLUDE: &str = "a linked worktree's info/exclude";

/// Rights beneath the router's stores: everything but execute and devices.
pub fn router_store_rights() -> BitFlags<AccessFs> {
    AccessFs::from_all(ROUTER_ABI) & !(AccessFs::Execute | AccessFs::MakeChar | AccessFs::MakeBlock)
}

pub fn mount_router() -> Confinement {
    let store = router_store_rights();
    let rule = |place, access, required| Rule {
        place,
        access,
        required,
    };
    Confinement {
        binary: "lazaret-mount-router",
        runs_as: "root of the Domain user namespace, started by lazaret-supervisor before runsc",
        status: Status::Confined,
        namespaces: "mounts the FUSE view in the holder's mount namespace, then moves into a mount namespace of its own (read-only binds of what Git Sentry keeps)",
        closes_fds: Some("0, 1, 2 and --ready-fd"),
        no_new_privs: true,
        not_dumpable: true,
        capabilities: Capabilities::Keep(vec![
            caps::CHOWN,
            caps::DAC_OVERRIDE,
            caps::DAC_READ_SEARCH,
            caps::FOWNER,
            caps::FSETID,
        ]),
        landlock: Some(Landlock {
            abi: ROUTER_ABI,
            fs: AccessFs::from_all(ROUTER_ABI),
            net: AccessNet::from_all(ROUTER_ABI),
            scoped: true,
            rules: vec![
                rule(PLACE_WORKSPACE, store, true),
                rule(PLACE_STATE, store, true),
                rule(PLACE_BASELINE, store, false),
                rule(PLACE_FUSE, AccessFs::ReadFile | AccessFs::WriteFile, true),
                rule(PLACE_EXCLUDES, AccessFs::ReadFile.into(), false),
                rule(PLACE_INFO_EXCLUDE, AccessFs::ReadFile.into(), false),
            ],
            require_full: true,
            notes: vec![
                "TCP: no bind, no connect",
                "no mount or unmount once confined (landlock forbids it)",
            ],
            below: vec![
                (
                    Feature::Refer,
                    "in the sandbox, renaming or linking a file into another directory of the workspace fails with EXDEV (`mv` copies instead; programs that rename across directories fail)",
                ),
                (
                    Feature::Scopes,
                    "tgkill is for its own threads and abort; a compromised router could signal the developer's processes (they share its host uid), a denial of service, with no other authority over them",
                ),
            ],
        }),
        seccomp: true,
        notes: vec![
            "umask 0; the parent's death kills it with --die-with-parent",
            "the clone3 filter makes the C library fall back to clone, whose flags the allow-list checks (threads only)",
        ],
    }
}

// ---------------------------------------------------------------- coordinator

/// The newest landlock ABI whose rights `lazaret-coordinator` uses (ioctl
/// on the PTY devices is ABI 5); it runs from ABI 1 with what the kernel
/// offers.
pub const COORDINATOR_ABI: ABI = ABI::V6;
pub const PLACE_DOMAIN_ROOT: &str = "the Domain Root";
pub const PLACE_CATALOG: &str = "the Storage Catalog's files (catalog.redb, storage-catalog.lock)";
pub const PLACE_PTMX: &str = "/dev/ptmx";
pub const PLACE_PTS: &str = "/dev/pts";

pub fn coordinator() -> Confinement {
    let tree = AccessFs::ReadFile
        | AccessFs::WriteFile
        | AccessFs::ReadDir
        | AccessFs::RemoveDir
        | AccessFs::RemoveFile
        | AccessFs::MakeDir
        | AccessFs::MakeReg
        | AccessFs::Refer
        | AccessFs::Truncate;
    let file = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    let tty = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    Confinement {
        binary: "lazaret-coordinator",
        runs_as: "the developer, one per Domain, started by lazaret (the startup leader)",
        status: Status::Confined,
        namespaces: "the developer's; confines itself once the Runtime Supervisor and the Escalation Mailbox reader are started and its socket is bound, before it serves any Client Session",
        closes_fds: None,
        no_new_privs: true,
        not_dumpable: true,
        capabilities: Capabilities::Keep(vec![]),
        landlock: Some(Landlock {
            abi: COORDINATOR_ABI,
            fs: AccessFs::from_all(COORDINATOR_ABI),
            net: AccessNet::from_all(COORDINATOR_ABI),
            scoped: false,
            rules: vec![
                Rule {
                    place: PLACE_DOMAIN_ROOT,
                    access: tree,
                    required: true,
                },
                Rule {
                    place: PLACE_CATALOG,
                    access: file,
                    required: false,
                },
                Rule {
                    place: PLACE_PTMX,
                    access: tty,
                    required: true,
                },
                Rule {
                    place: PLACE_PTS,
                    access: tty,
                    required: true,
                },
            ],
            require_full: true,
            notes: vec![
                "no execute anywhere; TCP: no bind, no connect",
                "signals are not scoped: it signals the sessions' exec bridges (children of lazaret-supervisor) through their pidfds",
            ],
            below: vec![],
        }),
        seccomp: true,
        notes: vec![
            "starts no process once confined: the supervisor starts runsc and the exec bridges on its request, each session's lazaret runs the host commands approved in it",
            "parses nothing the sandbox writes: lazaret-mailbox hands it verified, typed records",
            "the clone3 filter makes the C library fall back to clone, whose flags the allow-list checks (threads only)",
        ],
    }
}

// ---------------------------------------------------------------- mailbox

/// The newest landlock ABI whose rights `lazaret-mailbox` uses (Linux
/// 6.12); it runs from ABI 1 with what the kernel offers.
pub const MAILBOX_ABI: ABI = ABI::V6;
pub const PLACE_MAILBOX_REQUESTS: &str = "the Escalation Mailbox's request directory";
/// The reader's address space: the binary, one request of at most 64 KiB
/// at a time, the session table and one pass's records, many times over.
pub const MAILBOX_MAX_ADDRESS_SPACE: u64 = 256 << 20;
/// Its descriptors: stdio, the three inherited ones, a listing, an entry.
pub const MAILBOX_MAX_FILES: u64 = 32;

pub fn mailbox() -> Confinement {
    Confinement {
        binary: "lazaret-mailbox",
        runs_as: "the developer, started by lazaret-coordinator before the coordinator confines itself; fd 3 a sealed memfd (public key, sandbox ID, bounds; seals, size and SHA-256 from argv checked before parsing), fd 4 the request directory, fd 5 its end of a socketpair to the coordinator",
        status: Status::Confined,
        namespaces: "the developer's",
        closes_fds: Some("0, 1, 2, the request directory and the socketpair, before confining"),
        no_new_privs: true,
        not_dumpable: true,
        capabilities: Capabilities::Keep(vec![]),
        landlock: Some(Landlock {
            abi: MAILBOX_ABI,
            fs: AccessFs::from_all(MAILBOX_ABI),
            net: AccessNet::from_all(MAILBOX_ABI),
            scoped: true,
            rules: vec![Rule {
                place: PLACE_MAILBOX_REQUESTS,
                access: AccessFs::ReadFile
                    | AccessFs::ReadDir
                    | AccessFs::RemoveFile
                    | AccessFs::RemoveDir,
                required: true,
            }],
            require_full: true,
            notes: vec!["TCP: no bind, no connect"],
            below: vec![],
        }),
        seccomp: true,
        notes: vec![
            "resource limits: 256 MiB of address space, 32 descriptors, no core files",
            "reads, bounds, verifies (signature before parsing, generation, age, Session Anchor MAC) and decodes every mailbox entry; hands the coordinator typed records only, which the coordinator verifies again over its own encoding",
            "an inotify watch of the request directory, taken before confining (no inotify call is allowed after), only wakes it: each pass lists the directory itself; passes are paced so that, on average, it reads no more directory entries per 15 ms than one pass may take",
            "single-threaded: no clone at all",
        ],
    }
}

// ---------------------------------------------------------------- supervisor --scan-anchor

/// `lazaret-supervisor --scan-anchor`'s clone, which lists the names of a
/// State Anchor's upper (written by the sandbox) for `lazaret state`. Not
/// a binary of its own: printed in the supervisor's notes, applied and
/// tested by this name.
pub const SCAN_ABI: ABI = ABI::V6;
pub const PLACE_SCAN_UPPER: &str = "the State Anchor's upper";
pub const PLACE_SCAN_LOWER: &str = "the image's directory beneath it (the lower)";

pub fn supervisor_scan() -> Confinement {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    Confinement {
        binary: "lazaret-supervisor-scan",
        runs_as: "a clone of lazaret-supervisor --scan-anchor (run by lazaret state), root of the Domain user namespace",
        status: Status::Confined,
        namespaces: "the Domain's user namespace (mapped like the sandbox's)",
        closes_fds: None,
        no_new_privs: true,
        not_dumpable: true,
        capabilities: Capabilities::Keep(vec![caps::DAC_READ_SEARCH]),
        landlock: Some(Landlock {
            abi: SCAN_ABI,
            fs: AccessFs::from_all(SCAN_ABI),
            net: AccessNet::from_all(SCAN_ABI),
            scoped: true,
            rules: vec![
                Rule {
                    place: PLACE_SCAN_UPPER,
                    access: read,
                    required: true,
                },
                Rule {
                    place: PLACE_SCAN_LOWER,
                    access: read,
                    required: false,
                },
            ],
            require_full: true,
            notes: vec!["TCP: no bind, no connect; nothing writable"],
            below: vec![(
                Feature::Scopes,
                "tgkill is for its own abort; a compromised scan could signal the developer's processes (they share its host uid), a denial of service: it only lists names and their lstat",
            )],
        }),
        seccomp: true,
        notes: vec![
            "lists names and their lstat only (never a file's content, never a link's target); writes one bounded JSON summary to the supervisor's pipe",
        ],
    }
}

// ---------------------------------------------------------------- unconfined

pub fn cli() -> Confinement {
    Confinement {
        binary: "lazaret",
        runs_as: "the developer, at the terminal",
        status: Status::Unconfined {
            reason: "unconfined by design: it runs as the developer, owns the terminal (the Client Session's PTY, the Host Escalation prompt), starts the coordinator, and runs the host commands the developer approves, which need the developer's authority; it reads sandbox-controlled bytes only as escaped text to print",
        },
        namespaces: "the developer's",
        closes_fds: None,
        no_new_privs: false,
        not_dumpable: false,
        capabilities: Capabilities::Unchanged("the developer's (none for an ordinary user)"),
        landlock: None,
        seccomp: false,
        notes: vec![],
    }
}

pub fn supervisor() -> Confinement {
    Confinement {
        binary: "lazaret-supervisor",
        runs_as: "root of the Domain user namespace it creates (newuidmap/newgidmap), started by lazaret-coordinator as the developer",
        status: Status::Unconfined {
            reason: "its children include runsc (and slirp4netns, lazaret-mount-router, lazaret-netpolicy), which would inherit landlock and seccomp; runsc must stay unconfined to run gVisor; it reads nothing the sandbox writes (of gVisor's memory file, only its length)",
        },
        namespaces: "creates the Domain's user, mount, PID and network namespaces (the holder) and the enforcement network namespace",
        closes_fds: None,
        no_new_privs: false,
        not_dumpable: false,
        capabilities: Capabilities::Unchanged(
            "all of root's in the Domain user namespace, none on the host; runsc needs them",
        ),
        landlock: None,
        seccomp: false,
        notes: vec![
            "starts each Client Session's exec bridge on the coordinator's typed request: the coordinator names the session and hands the in-sandbox process as a sealed memfd; every runsc argument comes from the supervisor's own plan",
            "holds gVisor's memory file (opened through the Sentry's descriptor table once runsc reports the sandbox running, before any session) and only fstats it, for its length against limits.memory when a session ends; it reads none of its bytes",
            "`--scan-anchor` (run by `lazaret state`) lists the names in a State Anchor's upper, which the sandbox wrote, from a clone in the Domain's user namespace that confines itself first (landlock: read beneath the upper and the lower only, no TCP, scoped; seccomp allow-list `lazaret-supervisor-scan`, kill; only CAP_DAC_READ_SEARCH; no_new_privs); the supervisor reads its summary bounded to 16 MiB",
        ],
    }
}

pub fn exec_bridge() -> Confinement {
    Confinement {
        binary: "lazaret-exec-bridge",
        runs_as: "the developer, started by lazaret-supervisor on the coordinator's request, one per Client Session, with the PTY slave (or pipes) as 0-2, the holder's pidfd on fd 3 and the session's process specification (a sealed memfd, read by runsc exec) on fd 4",
        status: Status::Unconfined {
            reason: "runsc exec is its child and would inherit landlock and seccomp; runsc needs root's capabilities in the Domain user namespace it joins, its state directory and the sandbox's control socket, which no policy here describes yet; so it drops only its inherited descriptors, and holds no capability on the host",
        },
        namespaces: "joins the holder's user, mount, network and PID namespaces through the pidfd (never a PID), then runs runsc exec",
        closes_fds: Some("0, 1, 2, the holder's pidfd (fd 3) and the process memfd (fd 4), before joining"),
        no_new_privs: false,
        not_dumpable: false,
        capabilities: Capabilities::Unchanged(
            "none on the host; root's in the Domain user namespace once joined, for runsc exec",
        ),
        landlock: None,
        seccomp: false,
        notes: vec![],
    }
}

pub fn escalate() -> Confinement {
    Confinement {
        binary: "lazaret-escalate",
        runs_as: "a sandbox process's uid, inside the Agent Sandbox (gVisor)",
        status: Status::Unconfined {
            reason: "it holds only what the sandbox process that runs it holds (the request-signing key and the Session Anchor are that process's to read): a filter it put on itself would not bind that process, which can write the Escalation Mailbox directly; gVisor confines the whole sandbox, and the host trusts nothing it says beyond what it signed",
        },
        namespaces: "the sandbox's (gVisor)",
        closes_fds: None,
        no_new_privs: false,
        not_dumpable: false,
        capabilities: Capabilities::Unchanged("the sandbox process's, inside gVisor"),
        landlock: None,
        seccomp: false,
        notes: vec![],
    }
}

/// A program of ours that runs inside the Agent Sandbox as the sandbox's
/// own: what it holds is the sandbox's, so a filter on itself binds
/// nothing the sandbox could not undo.
fn inside(binary: &'static str, runs_as: &'static str, reason: &'static str) -> Confinement {
    Confinement {
        binary,
        runs_as,
        status: Status::Unconfined { reason },
        namespaces: "the sandbox's (gVisor)",
        closes_fds: None,
        no_new_privs: false,
        not_dumpable: false,
        capabilities: Capabilities::Unchanged("the sandbox's root's, inside gVisor"),
        landlock: None,
        seccomp: false,
        notes: vec![],
    }
}

pub fn port_relay() -> Confinement {
    inside(
        "lazaret-port-relay",
        "root inside the Agent Sandbox (gVisor), started by the sandbox's init when the Domain publishes ports",
        "it holds nothing of the host's and only connects within the sandbox: root inside can stop or replace it, breaking only its own published ports; gVisor confines the whole sandbox, and the host side only ever connects towards it",
    )
}

pub fn sudo() -> Confinement {
    inside(
        "lazaret-sudo",
        "root inside the Agent Sandbox (gVisor), its service started by the sandbox's init when the profile has a `user`",
        "it gives root inside to any process inside that asks, which has no more than a root session has; it holds nothing of the host's and never talks to the host; gVisor confines the whole sandbox",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Kernel;

    /// Where seccomp does not cover a feature an older kernel lacks, the
    /// description says what is lost and why the binary still runs.
    #[test]
    fn every_uncovered_feature_is_explained() {
        for c in landlocked() {
            let l = c.landlock.as_ref().unwrap();
            for f in l.features() {
                let hand = l.below.iter().any(|(g, _)| *g == f);
                assert!(
                    c.below(f).is_ok() || hand,
                    "{}: {f:?} below ABI {} is neither covered by seccomp nor explained",
                    c.binary,
                    f.abi()
                );
            }
            for (f, _) in &l.below {
                assert!(
                    l.features().contains(f),
                    "{}: a note on {f:?}, which it does not use",
                    c.binary
                );
            }
            assert!(!c.print().contains("UNEXPLAINED"), "{}", c.print());
        }
    }

    /// The report at each capped ABI names exactly the features the ABI
    /// lacks, with the ABI each needs; at 0 the binary refuses.
    #[test]
    fn the_report_at_each_abi_names_what_is_not_enforced() {
        for cap in 0..=7 {
            let a = Available {
                kernel: Kernel::Abi(7),
                cap: Some(cap),
            };
            for c in landlocked() {
                let r = c.on_kernel(&a).unwrap();
                if cap == 0 {
                    assert!(r.contains("this binary refuses to run"), "{r}");
                    continue;
                }
                assert!(
                    r.starts_with(&format!("landlock on this kernel: Landlock ABI {cap}")),
                    "{r}"
                );
                for f in c.landlock.as_ref().unwrap().features() {
                    let line = format!(
                        "{}: {} (kernel Landlock ABI {cap}{}, needs {})",
                        f.name(),
                        if f == Feature::Refer {
                            "unavailable"
                        } else {
                            "not enforced"
                        },
                        if cap < 7 { " as capped" } else { "" },
                        f.abi()
                    );
                    assert_eq!(
                        r.contains(&line),
                        cap < f.abi(),
                        "{}: {line}\n{r}",
                        c.binary
                    );
                }
                assert!(!r.contains("UNEXPLAINED"), "{r}");
            }
        }
        // The brief's example: Debian 12's 6.1 (ABI 2).
        let deb12 = Available {
            kernel: Kernel::Abi(2),
            cap: None,
        };
        let r = netpolicy().on_kernel(&deb12).unwrap();
        assert!(
            r.contains("network connect and bind restriction (TCP): not enforced (kernel Landlock ABI 2, needs 4)"),
            "{r}"
        );
    }
}
