//! The router's own confinement, applied in one visible order. The data
//! (capabilities kept, landlock places and rights, the seccomp policy) is
//! [`crate::confinement::mount_router`], which
//! `--print-confinement` prints.
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
//!    - landlock, with what the kernel's ABI offers (all of it from ABI 6): read-write (without
//!      execute and device creation) beneath the workspace and the state
//!      directory, through descriptors opened before the mount; read-only
//!      the files `core.excludesFile` and a linked worktree's
//!      `info/exclude`; read-write `/dev/fuse` (one descriptor per worker
//!      thread); no TCP bind or connect at all; where the kernel has ABI 6,
//!      no abstract unix sockets or signals outside the domain. Landlock
//!      also forbids the router to mount or unmount anything from then on;
//!    - seccomp: the allow-list `bin/mount-router/src/lazaret-mount-router.json`
//!      (compiled at build time; kill the process on anything else), after
//!      a second filter in the same file that makes `clone3` fail with
//!      `ENOSYS` so the C library falls back to `clone`, whose flags the
//!      allow-list checks (threads only, no namespaces). No socket call is
//!      allowed: the router has no network.
//!
//! Leaves to others: which paths the router touches within its two trees
//! (`sys` resolves every path beneath a root without symlinks); the
//! sandbox itself (runsc) and the Git Sentry mounts on top of the view.

use crate::confinement::{
    self, PLACE_BASELINE, PLACE_EXCLUDES, PLACE_FUSE, PLACE_INFO_EXCLUDE, PLACE_STATE,
    PLACE_WORKSPACE,
};
use crate::Plan;
use lazaret_seccomp::ruleset::Place;
use lazaret_seccomp::BpfProgram;
pub use lazaret_seccomp::ConfineError as SharedError;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

const BINARY: &str = "lazaret-mount-router";

/// Why confinement could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error(transparent)]
    Shared(#[from] SharedError),
    #[error("cannot {what}: {source}")]
    Sys {
        what: &'static str,
        source: std::io::Error,
    },
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

/// Step 1: a clean process. `run` calls this before opening anything, and
/// the one inherited descriptor it took ownership of (`keep`) stays open.
pub fn sanitize(keep: Option<BorrowedFd<'_>>, die_with_parent: bool) -> Result<(), ConfineError> {
    let keep: Vec<i32> = keep.map(|f| f.as_raw_fd()).into_iter().collect();
    lazaret_seccomp::process::close_inherited_fds(&keep)?;
    lazaret_seccomp::process::not_dumpable()?;
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

/// The files outside the stores the router reads, with their places.
fn read_only_files(plan: &Plan) -> Vec<(&'static str, PathBuf)> {
    let mut v = Vec::new();
    if let Some(p) = &plan.git.excludes_file {
        v.push((PLACE_EXCLUDES, p.clone()));
    }
    if let Some(crate::rules::Source::Absolute(p)) = &plan.git.info_exclude {
        v.push((PLACE_INFO_EXCLUDE, p.clone()));
    }
    v.into_iter().filter(|(_, p)| p.is_file()).collect()
}

fn path_fd(p: &Path) -> Result<OwnedFd, SharedError> {
    rustix::fs::open(
        p,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| SharedError::Sys {
        what: "open a landlock place",
        source: e.into(),
    })
}

/// Step 2: capabilities, `no_new_privs`, landlock, seccomp.
pub fn apply(
    plan: &Plan,
    host: BorrowedFd<'_>,
    state: BorrowedFd<'_>,
    filters: Vec<(&'static str, BpfProgram)>,
) -> Result<(), ConfineError> {
    let mut opened: Vec<(&'static str, OwnedFd)> = Vec::new();
    if let Some(b) = &plan.baseline {
        opened.push((PLACE_BASELINE, path_fd(b)?));
    }
    opened.push((PLACE_FUSE, path_fd(Path::new("/dev/fuse"))?));
    for (place, f) in read_only_files(plan) {
        // A file that vanished since is simply not readable.
        if let Ok(fd) = path_fd(&f) {
            opened.push((place, fd));
        }
    }
    let mut places = vec![
        Place {
            place: PLACE_WORKSPACE,
            fd: host,
        },
        Place {
            place: PLACE_STATE,
            fd: state,
        },
    ];
    places.extend(opened.iter().map(|(place, fd)| Place {
        place,
        fd: fd.as_fd(),
    }));
    confinement::mount_router().apply(&places, &filters)?;
    Ok(())
}

/// The compiled filters, in the order they are installed: the `clone3` →
/// `ENOSYS` one, then the allow-list.
pub fn seccomp_filters() -> Result<Vec<(&'static str, BpfProgram)>, ConfineError> {
    Ok(lazaret_seccomp::filters(crate::policies::POLICIES, BINARY)?)
}

/// What `--print-confinement` prints: the shared description, then, with
/// a plan, where each place is on this machine.
pub fn describe(plan: Option<&Plan>) -> String {
    use std::fmt::Write;
    let mut s = confinement::mount_router().print_on_this_kernel();
    if let Some(p) = plan {
        let _ = writeln!(s, "\n[places on this machine]");
        let _ = writeln!(s, "{PLACE_WORKSPACE}: {}", p.workspace.display());
        let _ = writeln!(s, "{PLACE_STATE}: {}", p.state.display());
        if let Some(b) = &p.baseline {
            let _ = writeln!(s, "{PLACE_BASELINE}: {}", b.display());
        }
        for (place, f) in read_only_files(p) {
            let _ = writeln!(s, "{place}: {}", f.display());
        }
    }
    s.push('\n');
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
    s
}
