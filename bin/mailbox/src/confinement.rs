//! What `lazaret-mailbox` may do: the data it applies
//! ([`crate::confine`]) and prints (`--print-confinement`), beside its
//! reviewed seccomp policy `lazaret-mailbox.json`, which `build.rs`
//! compiles.

use lazaret_seccomp::landlock::{Access, AccessFs, AccessNet, ABI};
use lazaret_seccomp::ruleset::{Landlock, Rule};
use lazaret_seccomp::{Capabilities, Confinement, PolicySource, Status};

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
        seccomp: Some(PolicySource {
            file: "bin/mailbox/src/lazaret-mailbox.json",
            json: include_str!("lazaret-mailbox.json"),
        }),
        notes: vec![
            "resource limits: 256 MiB of address space, 32 descriptors, no core files",
            "reads, bounds, verifies (signature before parsing, generation, age, Session Anchor MAC) and decodes every mailbox entry; hands the coordinator typed records only, which the coordinator verifies again over its own encoding",
            "an inotify watch of the request directory, taken before confining (no inotify call is allowed after), only wakes it: each pass lists the directory itself; passes are paced so that, on average, it reads no more directory entries per 15 ms than one pass may take",
            "single-threaded: no clone at all",
        ],
    }
}
