//! What `lazaret-coordinator` may do: the data it applies
//! ([`crate::confine`]) and prints (`--print-confinement`), beside its
//! reviewed seccomp policy `lazaret-coordinator.json`, which `build.rs`
//! compiles.

use lazaret_seccomp::landlock::{Access, AccessFs, AccessNet, ABI};
use lazaret_seccomp::ruleset::{Landlock, Rule};
use lazaret_seccomp::{Capabilities, Confinement, PolicySource, Status};

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
        seccomp: Some(PolicySource {
            file: "bin/coordinator/src/lazaret-coordinator.json",
            json: include_str!("lazaret-coordinator.json"),
        }),
        notes: vec![
            "starts no process once confined: the supervisor starts runsc and the exec bridges on its request, each session's lazaret runs the host commands approved in it",
            "parses nothing the sandbox writes: lazaret-mailbox hands it verified, typed records",
            "the clone3 filter makes the C library fall back to clone, whose flags the allow-list checks (threads only)",
        ],
    }
}
