//! Confinement of `lazaret-mailbox`, applied in this order once its
//! inputs are read (the sealed input memfd) and only the request
//! directory handle and the socket to the coordinator remain open:
//!
//! 1. capabilities: the effective, permitted, inheritable and ambient
//!    sets are emptied; the bounding set is emptied too when the process
//!    may (it runs as the developer, usually without `CAP_SETPCAP`;
//!    `no_new_privs` and the absence of exec make the bounding set moot);
//! 2. `no_new_privs`, not dumpable;
//! 3. resource bounds: address space ([`MAX_ADDRESS_SPACE`]), descriptors
//!    ([`MAX_FILES`]), no core files;
//! 4. landlock (hard requirement: ABI 6, Linux 6.12): every file-system
//!    access right handled; allowed only reading files and listing, and
//!    removing files and directories, beneath the request directory, by
//!    the handle the coordinator opened; no TCP bind or connect; no
//!    abstract unix sockets or signals outside the reader;
//! 5. seccomp: the allow-list in `seccomp/lazaret-mailbox.json`, kill the
//!    process on anything else: no exec, no fork, no socket creation (only
//!    the inherited socketpair is used), no `PROT_EXEC` mappings.
//!
//! What it leaves to others: which directory and socket the reader gets
//! is the coordinator's decision, as are the key and the sandbox ID (in
//! the sealed input, whose seals and digest the reader checks before it
//! parses it). Per-pass work is bounded by the reader itself
//! ([`crate::reader`]).

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use rustix::process::{Resource, Rlimit};
use rustix::thread::{CapabilitySet, CapabilitySets};
use std::os::fd::BorrowedFd;

/// The landlock ABI this helper requires (as `lazaret-netpolicy`).
pub const LANDLOCK_ABI: ABI = ABI::V6;

/// The seccomp allow-list, reviewed as data.
pub const SECCOMP_JSON: &str = include_str!("../seccomp/lazaret-mailbox.json");

const FILTER_NAME: &str = "lazaret-mailbox";

/// Address space of the reader: the binary, one request of at most
/// 64 KiB at a time, the session table and one pass's records fit many
/// times over.
pub const MAX_ADDRESS_SPACE: u64 = 256 << 20;

/// Descriptors: stdio, the three inherited ones, a listing and an entry.
pub const MAX_FILES: u64 = 32;

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot drop capabilities: {0}")]
    Caps(std::io::Error),
    #[error("cannot set no_new_privs or dumpable: {0}")]
    Prctl(std::io::Error),
    #[error("cannot set resource limits: {0}")]
    Rlimit(std::io::Error),
    #[error("landlock ABI {abi} is required (Linux 6.12 or later with landlock enabled in the `lsm=` boot list): {detail}")]
    Landlock { abi: i32, detail: String },
    #[error("seccomp: {0}; the seccomp policy is compiled into this binary, rebuild it")]
    Seccomp(String),
}

fn ll(detail: impl std::fmt::Display) -> ConfineError {
    ConfineError::Landlock {
        abi: LANDLOCK_ABI as i32,
        detail: detail.to_string(),
    }
}

/// The whole sequence, steps 1 to 5, with a policy compiled beforehand.
pub fn confine(
    requests: BorrowedFd<'_>,
    prog: &seccompiler::BpfProgram,
) -> Result<(), ConfineError> {
    drop_privileges()?;
    limit_resources()?;
    landlock(requests)?;
    apply_seccomp(prog)
}

/// Steps 1 and 2.
pub fn drop_privileges() -> Result<(), ConfineError> {
    let may_drop_bounding = rustix::thread::capabilities(None)
        .map(|c| c.effective.contains(CapabilitySet::SETPCAP))
        .unwrap_or(false);
    if may_drop_bounding {
        for bit in 0..64u32 {
            let set = CapabilitySet::from_bits_retain(1u64 << bit);
            match rustix::thread::remove_capability_from_bounding_set(set) {
                Ok(()) => {}
                // Past the last capability the kernel knows.
                Err(rustix::io::Errno::INVAL) => break,
                Err(e) => return Err(ConfineError::Caps(e.into())),
            }
        }
    }
    rustix::thread::clear_ambient_capability_set().map_err(|e| ConfineError::Caps(e.into()))?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| ConfineError::Caps(e.into()))?;
    rustix::thread::set_no_new_privs(true).map_err(|e| ConfineError::Prctl(e.into()))?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| ConfineError::Prctl(e.into()))?;
    Ok(())
}

/// Step 3.
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

/// Step 4.
pub fn landlock(requests: BorrowedFd<'_>) -> Result<(), ConfineError> {
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))
        .map_err(ll)?
        .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
        .map_err(ll)?
        .scope(Scope::from_all(LANDLOCK_ABI))
        .map_err(ll)?
        .create()
        .map_err(ll)?
        .add_rule(PathBeneath::new(
            requests,
            AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::RemoveFile | AccessFs::RemoveDir,
        ))
        .map_err(ll)?
        .restrict_self()
        .map_err(ll)?;
    if status.ruleset != landlock::RulesetStatus::FullyEnforced {
        return Err(ll(format!("ruleset only {:?}", status.ruleset)));
    }
    Ok(())
}

fn target_arch() -> Result<seccompiler::TargetArch, ConfineError> {
    if cfg!(target_arch = "x86_64") {
        Ok(seccompiler::TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(seccompiler::TargetArch::aarch64)
    } else {
        Err(ConfineError::Seccomp(
            "no seccomp policy for this architecture".into(),
        ))
    }
}

/// Compiles the allow-list (done before any confinement, so a broken
/// policy fails before anything is installed).
pub fn compile_seccomp() -> Result<seccompiler::BpfProgram, ConfineError> {
    let mut map = seccompiler::compile_from_json(SECCOMP_JSON.as_bytes(), target_arch()?)
        .map_err(|e| ConfineError::Seccomp(e.to_string()))?;
    map.remove(FILTER_NAME)
        .ok_or_else(|| ConfineError::Seccomp(format!("no filter named {FILTER_NAME}")))
}

/// Step 5.
pub fn apply_seccomp(prog: &seccompiler::BpfProgram) -> Result<(), ConfineError> {
    seccompiler::apply_filter(prog).map_err(|e| ConfineError::Seccomp(e.to_string()))
}

/// What `--print-confinement` shows.
pub fn describe() -> String {
    let mut s = String::new();
    s.push_str("lazaret-mailbox confinement\n");
    s.push_str("runs as: the developer, started by lazaret-coordinator before the coordinator confines itself\n");
    s.push_str("inputs: fd 3 sealed memfd (public key, sandbox ID, bounds; seals + size + SHA-256 digest from argv checked before parsing); fd 4 the request directory (O_DIRECTORY); fd 5 its end of a Unix socketpair to the coordinator\n");
    s.push_str("capabilities: none (effective, permitted, inheritable, ambient empty; bounding emptied when CAP_SETPCAP allows)\n");
    s.push_str("no_new_privs: yes; dumpable: no\n");
    s.push_str(&format!(
        "rlimits: address space {} MiB, {} descriptors, no core files\n",
        MAX_ADDRESS_SPACE >> 20,
        MAX_FILES
    ));
    s.push_str(&format!(
        "landlock (hard requirement ABI {}):\n",
        LANDLOCK_ABI as i32
    ));
    s.push_str("  fs: every access right handled; allowed: read_file, read_dir, remove_file, remove_dir beneath the request directory (the handle on fd 4)\n");
    s.push_str("  net: bind_tcp and connect_tcp denied\n");
    s.push_str("  scope: abstract unix sockets and signals outside the reader denied\n");
    s.push_str("seccomp (mismatch: kill process), from seccomp/lazaret-mailbox.json:\n");
    s.push_str(SECCOMP_JSON);
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_compiles_and_is_printed_whole() {
        compile_seccomp().unwrap();
        let d = describe();
        assert!(d.contains(SECCOMP_JSON.trim_end()), "{d}");
        assert!(d.contains("landlock (hard requirement ABI 6)"), "{d}");
        // Nothing that would let it run or reach anything else.
        let policy: serde_json::Value = serde_json::from_str(SECCOMP_JSON).unwrap();
        let allowed: Vec<&str> = policy[FILTER_NAME]["filter"]
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
            "accept",
            "accept4",
            "bind",
            "listen",
            "ptrace",
            "setns",
            "unshare",
            "mount",
            "prctl",
            "kill",
            "tgkill",
        ] {
            assert!(!allowed.contains(&forbidden), "{forbidden} is allowed");
        }
    }
}
