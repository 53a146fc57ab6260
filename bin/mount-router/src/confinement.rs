//! What `lazaret-mount-router` may do: the data it applies
//! ([`crate::confine`]) and prints (`--print-confinement`), beside its
//! reviewed seccomp policy `lazaret-mount-router.json`, which `build.rs`
//! compiles.

use lazaret_seccomp::abi::Feature;
use lazaret_seccomp::caps;
use lazaret_seccomp::landlock::{Access, AccessFs, AccessNet, BitFlags, ABI};
use lazaret_seccomp::ruleset::{Landlock, Rule};
use lazaret_seccomp::{Capabilities, Confinement, PolicySource, Status};

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
        seccomp: Some(PolicySource {
            file: "bin/mount-router/src/lazaret-mount-router.json",
            json: include_str!("lazaret-mount-router.json"),
        }),
        notes: vec![
            "umask 0; the parent's death kills it with --die-with-parent",
            "the clone3 filter makes the C library fall back to clone, whose flags the allow-list checks (threads only)",
        ],
    }
}
