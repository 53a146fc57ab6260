//! Kernel read-only binds, in the router's own mount namespace, over what
//! Git Sentry keeps from the sandbox: the host's Git configuration, hooks
//! and redirections, and the paths host Git runs from the workspace
//! (`core.hooksPath`, hook managers' files, `protected_paths`).
//!
//! Landlock cannot carve a file out of a tree it grants, and the router
//! must be able to write the rest of the workspace. So before it confines
//! itself, the router moves into a mount namespace of its own (it is root
//! of the holder's user namespace there) and binds each such entry that
//! exists onto itself read-only. A bug in the router's name policy then
//! meets `EROFS` from the kernel instead of writing them. The sandbox is
//! not affected: it sees the router's FUSE mount, made before the move.
//!
//! Enforces: every entry of a host Git directory (`.git`, each Git
//! directory under `.git/modules`, each `.git/worktrees/*`) that the name
//! policy never lets the sandbox write on the host (configuration,
//! `commondir`, `gitdir`, `hooks`, attributes and other `info/` files,
//! alternates, any other name Git does not write in normal operation), a
//! `.git` file, and the protected paths.
//!
//! Limits: only entries that exist at start can be bound (a later one is
//! kept by the name policy alone); a directory is bound only when nothing
//! beneath it is live (`hooks`, `remotes`, `branches`); when host Git
//! replaces a bound file by rename (`git config` on the host), the kernel
//! drops that bind in this namespace and the name policy alone keeps the
//! new file until the next Domain start. At most [`MAX_SHIELDS`] binds.
//!
//! Leaves to others: the name policy itself (`sentry`), landlock and
//! seccomp (`confine`).

use crate::sentry::{self, Access};
use crate::sys::{join, open_beneath};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Dir, FileType, Mode, OFlags, StatVfsMountFlags};
use rustix::io::Errno;
use rustix::mount::{MountFlags, MountPropagationFlags};
use std::path::Path;

/// The most entries bound read-only; past it, the rest are left to the
/// name policy (and the router says so).
pub const MAX_SHIELDS: usize = 1024;
/// The most directories walked under `.git/modules` to find submodule
/// Git directories.
const MAX_MODULE_DIRS: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum ShieldError {
    #[error("cannot {what}: {source}")]
    Sys {
        what: &'static str,
        #[source]
        source: Errno,
    },
}

fn sys(what: &'static str) -> impl FnOnce(Errno) -> ShieldError {
    move |source| ShieldError::Sys { what, source }
}

/// The workspace as the policy sees it, read through descriptors.
struct FdHost<'a>(BorrowedFd<'a>);

impl FdHost<'_> {
    fn stat(&self, path: &[u8]) -> Option<rustix::fs::Stat> {
        let fd = open_beneath(self.0, path, OFlags::PATH | OFlags::NOFOLLOW).ok()?;
        rustix::fs::fstat(&fd).ok()
    }
}

impl sentry::Host for FdHost<'_> {
    fn exists(&self, path: &[u8]) -> bool {
        self.stat(path).is_some()
    }

    fn is_git_dir(&self, path: &[u8]) -> bool {
        sentry::is_git_dir_by(
            |p| {
                self.stat(p)
                    .map(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
            },
            path,
        )
    }
}

fn kind(host: &FdHost<'_>, path: &[u8]) -> Option<FileType> {
    host.stat(path).map(|s| FileType::from_raw_mode(s.st_mode))
}

fn entries(host: BorrowedFd<'_>, dir: &[u8]) -> Vec<Vec<u8>> {
    let Ok(fd) = open_beneath(
        host,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
    ) else {
        return Vec::new();
    };
    let Ok(mut d) = Dir::new(fd) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(e)) = d.read() {
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(n.to_vec());
        }
    }
    out.sort();
    out
}

/// The host Git directories of the workspace: `.git`, the submodule Git
/// directories under `.git/modules` (names may hold slashes), and the
/// linked worktrees' under `.git/worktrees`.
fn git_dirs(host: &FdHost<'_>) -> Vec<Vec<u8>> {
    use sentry::Host;
    let root = b".git".to_vec();
    if !host.is_git_dir(&root) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut walked = 0usize;
    while let Some(dir) = stack.pop() {
        for (sub, deep) in [
            (b"modules".as_slice(), true),
            (b"worktrees".as_slice(), false),
        ] {
            let base = join(&dir, sub);
            let mut walk = vec![base];
            while let Some(d) = walk.pop() {
                walked += 1;
                if walked > MAX_MODULE_DIRS {
                    break;
                }
                for e in entries(host.0, &d) {
                    let p = join(&d, &e);
                    if host.is_git_dir(&p) {
                        stack.push(p);
                    } else if deep && kind(host, &p) == Some(FileType::Directory) {
                        walk.push(p);
                    }
                }
            }
        }
        out.push(dir);
    }
    out
}

/// What to bind read-only, workspace-relative, in a stable order.
pub fn candidates(host_fd: BorrowedFd<'_>, protected: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let host = FdHost(host_fd);
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut add = |p: Vec<u8>| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for p in protected {
        if kind(&host, p).is_some_and(|k| k != FileType::Symlink) {
            add(p.clone());
        }
    }
    if kind(&host, b".git") == Some(FileType::RegularFile) {
        // A `gitdir:` file: the redirection itself.
        add(b".git".to_vec());
    }
    for dir in git_dirs(&host) {
        let mut names: Vec<Vec<u8>> = entries(host_fd, &dir)
            .into_iter()
            .map(|e| join(&dir, &e))
            .collect();
        names.extend(
            entries(host_fd, &join(&dir, b"info"))
                .into_iter()
                .map(|e| join(&join(&dir, b"info"), &e)),
        );
        names.extend(
            sentry::READ_ONLY_BENEATH
                .iter()
                .map(|r| join(&dir, r.as_bytes())),
        );
        for p in names {
            let Some(k) = kind(&host, &p) else { continue };
            let access = sentry::access(&host, &p);
            // The index is written on the host by the router itself.
            if access.host_writable() || access == Access::Mirrored {
                continue;
            }
            let name = p.rsplit(|&b| b == b'/').next().unwrap_or(&p);
            let shield = match k {
                FileType::RegularFile => true,
                // Directories only where nothing beneath is live.
                FileType::Directory => {
                    access == Access::Private
                        || (access == Access::ReadOnly
                            && sentry::PROTECTED.iter().any(|n| n.as_bytes() == name))
                }
                _ => false,
            };
            if shield {
                add(p);
            }
        }
    }
    out
}

/// What [`apply`] did.
pub struct Shielded {
    /// The workspace, opened again in the router's own mount namespace:
    /// walks from it meet the read-only binds.
    pub host: OwnedFd,
    /// The entries bound read-only.
    pub bound: Vec<Vec<u8>>,
    /// Entries that could not be bound, with why (for the log).
    pub skipped: Vec<String>,
}

/// Moves this thread (the router's only one at this point) into a mount
/// namespace of its own and binds each of `paths` (workspace-relative)
/// read-only onto itself.
pub fn apply(workspace: &Path, paths: &[Vec<u8>]) -> Result<Shielded, ShieldError> {
    // SAFETY: CLONE_NEWNS only: no descriptor table or credentials are
    // unshared, and no other thread exists yet (the FUSE workers start
    // later, from this one, and inherit the namespace).
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
        .map_err(sys("enter a mount namespace of its own"))?;
    // Nothing made here reaches the holder's namespace (or the sandbox).
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(sys("make its mounts private"))?;
    let host = rustix::fs::open(
        workspace,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(sys("open the workspace in its own mount namespace"))?;
    let mut bound = Vec::new();
    let mut skipped = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        if i >= MAX_SHIELDS {
            skipped.push(format!(
                "{} more entries past the bound of {MAX_SHIELDS} (kept by the name policy alone)",
                paths.len() - MAX_SHIELDS
            ));
            break;
        }
        match bind_read_only(host.as_fd(), p) {
            Ok(()) => bound.push(p.clone()),
            Err(e) => skipped.push(format!("{}: {e}", String::from_utf8_lossy(p))),
        }
    }
    Ok(Shielded {
        host,
        bound,
        skipped,
    })
}

fn fd_path(fd: BorrowedFd<'_>) -> String {
    use std::os::fd::AsRawFd;
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

fn bind_read_only(host: BorrowedFd<'_>, rel: &[u8]) -> Result<(), Errno> {
    let at = open_beneath(host, rel, OFlags::PATH | OFlags::NOFOLLOW)?;
    if FileType::from_raw_mode(rustix::fs::fstat(&at)?.st_mode) == FileType::Symlink {
        return Err(Errno::LOOP);
    }
    let p = fd_path(at.as_fd());
    rustix::mount::mount_bind(p.as_str(), p.as_str())?;
    // The bind's own root, reached by walking again.
    let top = open_beneath(host, rel, OFlags::PATH | OFlags::NOFOLLOW)?;
    // A remount inside a user namespace must keep the flags the parent
    // namespace locked on the mount it copies.
    let vfs = rustix::fs::fstatvfs(&top)?;
    let mut flags = MountFlags::BIND | MountFlags::RDONLY;
    for (st, ms) in [
        (StatVfsMountFlags::NOSUID, MountFlags::NOSUID),
        (StatVfsMountFlags::NODEV, MountFlags::NODEV),
        (StatVfsMountFlags::NOEXEC, MountFlags::NOEXEC),
        (StatVfsMountFlags::NOATIME, MountFlags::NOATIME),
        (StatVfsMountFlags::NODIRATIME, MountFlags::NODIRATIME),
        (StatVfsMountFlags::RELATIME, MountFlags::RELATIME),
    ] {
        if vfs.f_flag.contains(st) {
            flags |= ms;
        }
    }
    rustix::mount::mount_remount(fd_path(top.as_fd()).as_str(), flags, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let g = d.path().join(".git");
        for sub in [
            "objects/info",
            "refs/heads",
            "hooks",
            "info",
            "remotes",
            "modules/lib/sub/hooks",
            "modules/lib/sub/refs",
            "worktrees/wt/refs",
        ] {
            std::fs::create_dir_all(g.join(sub)).unwrap();
        }
        for f in [
            "HEAD",
            "config",
            "index",
            "commondir",
            "description",
            "info/exclude",
            "info/attributes",
            "objects/info/alternates",
            "hooks/pre-commit",
            "modules/lib/sub/HEAD",
            "modules/lib/sub/config",
            "worktrees/wt/HEAD",
            "worktrees/wt/gitdir",
            "worktrees/wt/index",
        ] {
            std::fs::write(g.join(f), "x").unwrap();
        }
        std::fs::create_dir(d.path().join(".githooks")).unwrap();
        d
    }

    #[test]
    fn shields_what_the_sandbox_never_writes_and_nothing_live() {
        let d = ws();
        let fd =
            rustix::fs::open(d.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let got: Vec<String> = candidates(fd.as_fd(), &[b".githooks".to_vec(), b"absent".to_vec()])
            .into_iter()
            .map(|p| String::from_utf8(p).unwrap())
            .collect();
        for want in [
            ".githooks",
            ".git/config",
            ".git/commondir",
            ".git/hooks",
            ".git/remotes",
            ".git/info/attributes",
            ".git/objects/info/alternates",
            ".git/modules/lib/sub/config",
            ".git/modules/lib/sub/hooks",
            ".git/worktrees/wt/gitdir",
        ] {
            assert!(got.iter().any(|g| g == want), "{want} missing from {got:?}");
        }
        for live in [
            ".git/HEAD",
            ".git/index",
            ".git/description",
            ".git/refs",
            ".git/objects",
            ".git/info",
            ".git/modules",
            ".git/modules/lib",
            ".git/modules/lib/sub",
            ".git/worktrees/wt",
            ".git/worktrees/wt/index",
            ".git/worktrees/wt/HEAD",
            "absent",
        ] {
            assert!(
                !got.iter().any(|g| g == live),
                "{live} would be shielded: {got:?}"
            );
        }
    }
}
