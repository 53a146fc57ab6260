//! Confinement of `lazaret-netpolicy` itself, applied in this order once
//! the handles it needs are open (netlink sockets and sysctl directories
//! of both namespaces):
//!
//! 1. capabilities: every capability but `CAP_NET_ADMIN` leaves the
//!    effective, permitted, inheritable and bounding sets (the helper is
//!    root of the Domain user namespace, so this is what keeps it from
//!    mounting, joining other namespaces or changing ownership);
//! 2. `no_new_privs`, not dumpable;
//! 3. landlock layer 1 (hard requirement: ABI 6, Linux 6.12): file system
//!    access only to read and write files beneath the two
//!    `/proc/sys/net/ipv6/conf` handles; no TCP bind; no TCP connect at all
//!    until layer 2; no abstract unix sockets or signals outside the
//!    helper (runsc's control socket is abstract);
//! 4. seccomp: the allow-list in `seccomp/lazaret-netpolicy.json`, kill
//!    the process on anything else (no exec, no setns, no mount, no raw or
//!    packet sockets, no `PROT_EXEC` mappings);
//! 5. landlock layer 2, after the policy is read: TCP connect only to the
//!    probe targets' ports (none for `install`).
//!
//! What it leaves to others: which namespace the helper starts in and
//! which fds it receives is the supervisor's decision; the policy's
//! content is the coordinator's (the helper checks its digest, seals and
//! structure); UDP is not covered by landlock, seccomp only limits which
//! sockets can be created. `CAP_NET_ADMIN` over the enforcement namespace
//! is the authority this helper exists to use.

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use rustix::thread::{CapabilitySet, CapabilitySets};
use std::os::fd::BorrowedFd;

/// The landlock ABI this helper requires.
pub const LANDLOCK_ABI: ABI = ABI::V6;

/// The seccomp allow-list, reviewed as data.
pub const SECCOMP_JSON: &str = include_str!("../seccomp/lazaret-netpolicy.json");

const FILTER_NAME: &str = "lazaret-netpolicy";

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot drop capabilities: {0}")]
    Caps(std::io::Error),
    #[error("cannot set no_new_privs or dumpable: {0}")]
    Prctl(std::io::Error),
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

/// Steps 1 and 2.
pub fn drop_privileges() -> Result<(), ConfineError> {
    // The bounding set first, while CAP_SETPCAP is still effective.
    for bit in 0..64u32 {
        let set = CapabilitySet::from_bits_retain(1u64 << bit);
        if set == CapabilitySet::NET_ADMIN {
            continue;
        }
        match rustix::thread::remove_capability_from_bounding_set(set) {
            Ok(()) => {}
            // Past the last capability the kernel knows.
            Err(rustix::io::Errno::INVAL) => break,
            Err(e) => return Err(ConfineError::Caps(e.into())),
        }
    }
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::NET_ADMIN,
            permitted: CapabilitySet::NET_ADMIN,
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| ConfineError::Caps(e.into()))?;
    rustix::thread::set_no_new_privs(true).map_err(|e| ConfineError::Prctl(e.into()))?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| ConfineError::Prctl(e.into()))?;
    Ok(())
}

/// Step 3: landlock layer 1.
pub fn landlock_base(sysctl_dirs: &[BorrowedFd<'_>]) -> Result<(), ConfineError> {
    let fs_all = AccessFs::from_all(LANDLOCK_ABI);
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(fs_all)
        .map_err(ll)?
        .handle_access(AccessNet::BindTcp)
        .map_err(ll)?
        .scope(Scope::from_all(LANDLOCK_ABI))
        .map_err(ll)?
        .create()
        .map_err(ll)?;
    for d in sysctl_dirs {
        rs = rs
            .add_rule(PathBeneath::new(
                *d,
                AccessFs::ReadFile | AccessFs::WriteFile,
            ))
            .map_err(ll)?;
    }
    let status = rs.restrict_self().map_err(ll)?;
    if status.ruleset != landlock::RulesetStatus::FullyEnforced {
        return Err(ll(format!("ruleset only {:?}", status.ruleset)));
    }
    Ok(())
}

/// Step 5: landlock layer 2, TCP connect only to `ports`.
pub fn landlock_connect(ports: &[u16]) -> Result<(), ConfineError> {
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp)
        .map_err(ll)?
        .create()
        .map_err(ll)?;
    for p in ports {
        rs = rs
            .add_rule(NetPort::new(*p, AccessNet::ConnectTcp))
            .map_err(ll)?;
    }
    let status = rs.restrict_self().map_err(ll)?;
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

/// Step 4.
pub fn apply_seccomp(prog: &seccompiler::BpfProgram) -> Result<(), ConfineError> {
    seccompiler::apply_filter(prog).map_err(|e| ConfineError::Seccomp(e.to_string()))
}

/// What `--print-confinement` shows.
pub fn describe() -> String {
    let mut s = String::new();
    s.push_str("lazaret-netpolicy confinement\n");
    s.push_str("runs as: root of the Domain user namespace, started in the enforcement network namespace\n");
    s.push_str("inputs: fd 3 sealed memfd (canonical policy, seals + size + SHA-256 digest checked); fd 4 the sandbox network namespace\n");
    s.push_str("capabilities after setup: CAP_NET_ADMIN only (effective, permitted, bounding); inheritable and ambient empty\n");
    s.push_str("no_new_privs: yes; dumpable: no\n");
    s.push_str(&format!(
        "landlock (hard requirement ABI {}):\n",
        LANDLOCK_ABI as i32
    ));
    s.push_str("  fs: every access right handled; allowed: read_file, write_file beneath /proc/sys/net/ipv6/conf of the enforcement and of the sandbox namespace (directory handles opened before confinement)\n");
    s.push_str("  net: bind_tcp denied; connect_tcp denied for `install`, allowed only to the probe targets' ports for `probe`\n");
    s.push_str("  scope: abstract unix sockets and signals outside the helper denied\n");
    s.push_str("seccomp (mismatch: kill process), from seccomp/lazaret-netpolicy.json:\n");
    s.push_str(SECCOMP_JSON);
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}
