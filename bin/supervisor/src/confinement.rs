//! What `lazaret-supervisor` may do (it cannot confine itself: see the
//! reason), and its `--scan-anchor` clone, which does
//! (`lazaret-supervisor-scan`): the data they apply and print
//! (`--print-confinement`), beside the clone's reviewed seccomp policy
//! `lazaret-supervisor-scan.json`, which `build.rs` compiles.

use lazaret_seccomp::abi::Feature;
use lazaret_seccomp::caps;
use lazaret_seccomp::landlock::{Access, AccessFs, AccessNet, ABI};
use lazaret_seccomp::ruleset::{Landlock, Rule};
use lazaret_seccomp::{Capabilities, Confinement, PolicySource, Status};

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
        seccomp: None,
        notes: vec![
            "starts each Client Session's exec bridge on the coordinator's typed request: the coordinator names the session and hands the in-sandbox process as a sealed memfd; every runsc argument comes from the supervisor's own plan",
            "holds gVisor's memory file (opened through the Sentry's descriptor table once runsc reports the sandbox running, before any session) and only fstats it, for its length against limits.memory when a session ends; it reads none of its bytes",
            "`--scan-anchor` (run by `lazaret state`) lists the names in a State Anchor's upper, which the sandbox wrote, from a clone in the Domain's user namespace that confines itself first (landlock: read beneath the upper and the lower only, no TCP, scoped; seccomp allow-list `lazaret-supervisor-scan`, kill; only CAP_DAC_READ_SEARCH; no_new_privs); the supervisor reads its summary bounded to 16 MiB",
        ],
    }
}

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
        seccomp: Some(PolicySource {
            file: "bin/supervisor/src/lazaret-supervisor-scan.json",
            json: include_str!("lazaret-supervisor-scan.json"),
        }),
        notes: vec![
            "lists names and their lstat only (never a file's content, never a link's target); writes one bounded JSON summary to the supervisor's pipe",
        ],
    }
}
