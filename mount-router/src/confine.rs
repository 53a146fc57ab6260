//! The router's own confinement, applied in one visible order.
//!
//! Enforces, in this order:
//! 1. [`sanitize`], first thing: every inherited descriptor but 0, 1, 2
//!    and the readiness descriptor is closed; the process is not dumpable
//!    (no ptrace or core dumps by others of the same uid); umask 0 (the
//!    kernel already applied the caller's); optionally the parent's death
//!    kills it.
//! 2. [`apply`], once the FUSE mount is up (mounting needs `CAP_SYS_ADMIN`
//!    over the mount namespace and `/dev/fuse`):
//!    - capabilities: only `CAP_CHOWN`, `CAP_DAC_OVERRIDE`,
//!      `CAP_DAC_READ_SEARCH`, `CAP_FOWNER` and `CAP_FSETID` are kept (the
//!      router acts on files of every uid mapped in its user namespace);
//!      every other capability leaves the effective, permitted,
//!      inheritable, ambient and bounding sets, so `CAP_SYS_ADMIN` (mount),
//!      `CAP_NET_*`, `CAP_MKNOD` and `CAP_SETUID` are gone;
//!    - `no_new_privs`;
//!    - landlock, ABI 4 at least (a hard requirement): read-write (without
//!      execute and device creation) beneath the workspace and the state
//!      directory, through descriptors opened before the mount; read-only
//!      the files `core.excludesFile` and a linked worktree's
//!      `info/exclude`; read-write `/dev/fuse` (one descriptor per worker
//!      thread); no TCP bind or connect at all; where the kernel has ABI 6,
//!      no abstract unix sockets or signals outside the domain. Landlock
//!      also forbids the router to mount or unmount anything from then on;
//!    - seccomp: the allow-list in `seccomp/x86_64.json` (kill the process
//!      on anything else), plus a second filter that makes `clone3` fail
//!      with `ENOSYS` so the C library falls back to `clone`, whose flags
//!      the allow-list checks (threads only, no namespaces). No socket
//!      call is allowed: the router has no network.
//!
//! Leaves to others: which paths the router touches within its two trees
//! (`sys` resolves every path beneath a root without symlinks); the
//! sandbox itself (runsc) and the Git Sentry mounts on top of the view.

use crate::Plan;
use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use rustix::fd::{AsRawFd, BorrowedFd};
use rustix::thread::CapabilitySet;
use std::path::PathBuf;

/// The minimum landlock ABI: file system rights including `REFER` and
/// `TRUNCATE`, and TCP restrictions.
pub const MIN_ABI: ABI = ABI::V4;

/// The seccomp policy, as reviewed data.
pub const SECCOMP_POLICY: &str = include_str!("../seccomp/x86_64.json");

/// The capabilities the router keeps.
pub const KEPT_CAPS: &[(&str, CapabilitySet)] = &[
    ("CAP_CHOWN", CapabilitySet::CHOWN),
    ("CAP_DAC_OVERRIDE", CapabilitySet::DAC_OVERRIDE),
    ("CAP_DAC_READ_SEARCH", CapabilitySet::DAC_READ_SEARCH),
    ("CAP_FOWNER", CapabilitySet::FOWNER),
    ("CAP_FSETID", CapabilitySet::FSETID),
];

/// Why confinement could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot {what}: {source}")]
    Sys {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("landlock ABI {min} or newer is required ({reason}); run on Linux 6.7 or newer with landlock in the lsm= boot parameter", min = MIN_ABI as u32)]
    Landlock { reason: String },
    #[error("the seccomp policy cannot be applied: {0}; this build supports x86_64 only")]
    Seccomp(String),
    #[error("the parent process died before the router started")]
    Orphan,
}

fn sys(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> ConfineError {
    move |e| ConfineError::Sys {
        what,
        source: e.into(),
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft
/// limit then in force. The router's own need is bounded (see
/// [`crate::router::Options::max_open`]); this only makes sure that a
/// new user's default soft limit of 1024 is not the bound.
pub fn raise_nofile() -> u64 {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if lim.current != lim.maximum {
        let raised = rustix::process::Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        if rustix::process::setrlimit(rustix::process::Resource::Nofile, raised).is_ok() {
            return lim.maximum.unwrap_or(u64::MAX);
        }
    }
    lim.current.unwrap_or(u64::MAX)
}

/// Step 1: a clean process.
pub fn sanitize(keep: Option<BorrowedFd<'_>>, die_with_parent: bool) -> Result<(), ConfineError> {
    let keep = keep.map(|f| f.as_raw_fd() as u32);
    let close = |first: u32, last: u32| -> Result<(), ConfineError> {
        if first > last {
            return Ok(());
        }
        // SAFETY: close_range takes integers only. No descriptor in the
        // range is owned by Rust code at this point: `run` calls this
        // before opening anything, and the one inherited descriptor it
        // took ownership of (`keep`) is outside the ranges.
        let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
        if r != 0 {
            return Err(ConfineError::Sys {
                what: "close inherited descriptors",
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    };
    match keep {
        Some(k) => {
            close(3, k.saturating_sub(1))?;
            close(k + 1, u32::MAX)?;
        }
        None => close(3, u32::MAX)?,
    }
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(sys("make the process non-dumpable"))?;
    rustix::process::umask(rustix::fs::Mode::empty());
    if die_with_parent {
        let parent = rustix::process::getppid();
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
            .map_err(sys("set the parent-death signal"))?;
        if rustix::process::getppid() != parent {
            return Err(ConfineError::Orphan);
        }
    }
    Ok(())
}

/// Rights beneath the two stores: everything but execute and devices.
fn store_rights() -> landlock::BitFlags<AccessFs> {
    AccessFs::from_all(MIN_ABI) & !(AccessFs::Execute | AccessFs::MakeChar | AccessFs::MakeBlock)
}

/// The files outside the stores the router reads.
fn read_only_files(plan: &Plan) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = &plan.git.excludes_file {
        v.push(p.clone());
    }
    if let Some(crate::rules::Source::Absolute(p)) = &plan.git.info_exclude {
        v.push(p.clone());
    }
    v.into_iter().filter(|p| p.is_file()).collect()
}

/// Step 2: capabilities, `no_new_privs`, landlock, seccomp.
pub fn apply(
    plan: &Plan,
    host: BorrowedFd<'_>,
    state: BorrowedFd<'_>,
    filters: Vec<seccompiler::BpfProgram>,
) -> Result<(), ConfineError> {
    // Capabilities.
    let keep = KEPT_CAPS
        .iter()
        .fold(CapabilitySet::empty(), |a, (_, c)| a | *c);
    for cap in 0..=63u32 {
        if keep.bits() & (1u64 << cap) != 0 {
            continue;
        }
        // EINVAL past the last capability the kernel knows, EPERM without
        // CAP_SETPCAP: either way there is nothing we could drop.
        // SAFETY: PR_CAPBSET_DROP takes integers only.
        let _ = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    }
    let _ = rustix::thread::clear_ambient_capability_set();
    let cur = rustix::thread::capabilities(None).map_err(sys("read capabilities"))?;
    rustix::thread::set_capabilities(
        None,
        rustix::thread::CapabilitySets {
            effective: cur.permitted & keep,
            permitted: cur.permitted & keep,
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(sys("drop capabilities"))?;

    rustix::thread::set_no_new_privs(true).map_err(sys("set no_new_privs"))?;

    // Landlock.
    let ll = |e: &dyn std::fmt::Display| ConfineError::Landlock {
        reason: e.to_string(),
    };
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(MIN_ABI))
        .map_err(|e| ll(&e))?
        .handle_access(AccessNet::from_all(MIN_ABI))
        .map_err(|e| ll(&e))?
        .set_compatibility(CompatLevel::BestEffort)
        .scope(Scope::from_all(ABI::V6))
        .map_err(|e| ll(&e))?
        .create()
        .map_err(|e| ll(&e))?
        .set_compatibility(CompatLevel::HardRequirement)
        .add_rule(PathBeneath::new(host, store_rights()))
        .map_err(|e| ll(&e))?
        .add_rule(PathBeneath::new(state, store_rights()))
        .map_err(|e| ll(&e))?;
    if let Some(b) = &plan.baseline {
        let fd = PathFd::new(b).map_err(|e| ll(&e))?;
        rs = rs
            .add_rule(PathBeneath::new(fd, store_rights()))
            .map_err(|e| ll(&e))?;
    }
    let fuse = PathFd::new("/dev/fuse").map_err(|e| ll(&e))?;
    rs = rs
        .add_rule(PathBeneath::new(
            fuse,
            AccessFs::ReadFile | AccessFs::WriteFile,
        ))
        .map_err(|e| ll(&e))?;
    for f in read_only_files(plan) {
        if let Ok(fd) = PathFd::new(&f) {
            rs = rs
                .add_rule(PathBeneath::new(fd, AccessFs::ReadFile))
                .map_err(|e| ll(&e))?;
        }
    }
    let status = rs.restrict_self().map_err(|e| ll(&e))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(ConfineError::Landlock {
            reason: "the kernel did not enforce the ruleset".into(),
        });
    }

    // Seccomp, last.
    for f in filters {
        seccompiler::apply_filter(&f).map_err(|e| ConfineError::Seccomp(e.to_string()))?;
    }
    Ok(())
}

/// The compiled filters, in the order they are installed: the `clone3` →
/// `ENOSYS` one, then the allow-list.
pub fn seccomp_filters() -> Result<Vec<seccompiler::BpfProgram>, ConfineError> {
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| ConfineError::Seccomp(format!("{e:?}")))?;
    if std::env::consts::ARCH != "x86_64" {
        return Err(ConfineError::Seccomp(format!(
            "no policy for {}",
            std::env::consts::ARCH
        )));
    }
    let mut map = seccompiler::compile_from_json(SECCOMP_POLICY.as_bytes(), arch)
        .map_err(|e| ConfineError::Seccomp(e.to_string()))?;
    let mut out = Vec::new();
    // The clone3 filter first: installing a filter needs prctl and
    // seccomp, which the allow-list (installed last) does not allow.
    for name in ["clone3_enosys", "router"] {
        out.push(
            map.remove(name)
                .ok_or_else(|| ConfineError::Seccomp(format!("filter {name} missing")))?,
        );
    }
    Ok(out)
}

/// What `--print-confinement` prints.
pub fn describe(plan: Option<&Plan>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "lazaret-mount-router confinement");
    let _ = writeln!(s, "\n[process]");
    let _ = writeln!(
        s,
        "inherited descriptors: closed but 0, 1, 2 and --ready-fd\ndumpable: no\numask: 0\nno_new_privs: yes"
    );
    let _ = writeln!(s, "\n[capabilities] (all others dropped, bounding set too)");
    for (n, _) in KEPT_CAPS {
        let _ = writeln!(s, "keep {n}");
    }
    let _ = writeln!(
        s,
        "\n[landlock] minimum ABI {} (hard requirement); handled: all file system rights of that ABI, TCP bind and connect; scoped (ABI 6, best effort): abstract unix sockets, signals",
        MIN_ABI as u32
    );
    let rights = |r: landlock::BitFlags<AccessFs>| {
        r.iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    match plan {
        Some(p) => {
            let _ = writeln!(
                s,
                "read-write {}  ({})",
                p.workspace.display(),
                rights(store_rights())
            );
            let _ = writeln!(
                s,
                "read-write {}  ({})",
                p.state.display(),
                rights(store_rights())
            );
            if let Some(b) = &p.baseline {
                let _ = writeln!(
                    s,
                    "read-write {}  ({})",
                    b.display(),
                    rights(store_rights())
                );
            }
            let _ = writeln!(s, "read-write /dev/fuse  (ReadFile,WriteFile)");
            for f in read_only_files(p) {
                let _ = writeln!(s, "read-only  {}  (ReadFile)", f.display());
            }
        }
        None => {
            let _ = writeln!(s, "read-write WORKSPACE  ({})", rights(store_rights()));
            let _ = writeln!(s, "read-write STATE  ({})", rights(store_rights()));
            let _ = writeln!(s, "read-write /dev/fuse  (ReadFile,WriteFile)");
            let _ = writeln!(
                s,
                "read-only  core.excludesFile, a linked worktree's info/exclude  (ReadFile)"
            );
        }
    }
    let _ = writeln!(s, "TCP: no bind, no connect\n");
    s.push_str(&crate::sentry::describe());
    if let Some(p) = plan {
        for (path, why) in &p.git.hook_paths {
            let _ = writeln!(
                s,
                "read-only inside: {} ({why})",
                String::from_utf8_lossy(path)
            );
        }
    }
    let _ = writeln!(s, "\n[seccomp] policy seccomp/x86_64.json:");
    s.push_str(SECCOMP_POLICY);
    s
}
