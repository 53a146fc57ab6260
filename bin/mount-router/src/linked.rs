//! `--git-dir`: the router presents one host Git directory alone (a
//! linked worktree's common directory, or a submodule checkout's Git
//! directory), seen by Git Sentry as the `.git` of an otherwise empty
//! workspace, so every rule of the name policy and of the read-only
//! binds applies to it unchanged, and nothing else of the repository that
//! holds it is reachable.
//!
//! Enforces: the Git directory is bound onto the empty `.git` of the
//! `--workspace` directory in a mount namespace of the router's own,
//! entered before anything reads the workspace; no other process (the
//! holder, the teardown that removes the run directory, the sandbox) ever
//! sees that bind. Both ends are opened once without following a
//! symbolic link and bound by descriptor.
//!
//! Leaves to others: the name policy (`sentry`), the read-only binds
//! (`shield`), and the FUSE mount itself, made before this in the
//! holder's namespace (`sys::fuse_mount`).

use crate::sys::open_beneath;
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::mount::MountPropagationFlags;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("cannot present the Git directory {path}: {reason}")]
pub struct GitDirError {
    pub path: PathBuf,
    pub reason: String,
}

fn fd_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Moves this thread (the router's only one at this point) into a mount
/// namespace of its own and binds `git_dir` onto `workspace/.git`, which
/// must be an empty directory.
pub fn bind(workspace: &Path, git_dir: &Path) -> Result<(), GitDirError> {
    let err = |reason: String| GitDirError {
        path: git_dir.to_path_buf(),
        reason,
    };
    // Both ends are opened in the new namespace: a bind takes its source
    // from the caller's own namespace only.
    // SAFETY: CLONE_NEWNS only: no descriptor table or credentials are
    // unshared, and no other thread exists yet (the FUSE workers start
    // later, from this one, and inherit the namespace).
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
        .map_err(|e| err(format!("cannot enter a mount namespace of its own: {e}")))?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(|e| err(format!("cannot make its mounts private: {e}")))?;
    let gd = rustix::fs::open(
        git_dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| err(format!("cannot open it: {e}")))?;
    match open_beneath(gd.as_fd(), b"HEAD", OFlags::PATH | OFlags::NOFOLLOW)
        .and_then(|f| rustix::fs::fstat(&f))
    {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() => {}
        _ => return Err(err("it holds no HEAD file: it is no Git directory".into())),
    }
    let ws = rustix::fs::open(
        workspace,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| err(format!("cannot open {}: {e}", workspace.display())))?;
    let target: OwnedFd = open_beneath(
        ws.as_fd(),
        b".git",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
    )
    .map_err(|e| err(format!("{}/.git: {e}", workspace.display())))?;
    let mut dir = rustix::fs::Dir::read_from(&target)
        .map_err(|e| err(format!("{}/.git: {e}", workspace.display())))?;
    while let Some(Ok(e)) = dir.read() {
        if !matches!(e.file_name().to_bytes(), b"." | b"..") {
            return Err(err(format!(
                "{}/.git is not empty: give an empty directory to bind it on",
                workspace.display()
            )));
        }
    }
    rustix::mount::mount_bind(
        fd_path(gd.as_fd()).as_str(),
        fd_path(target.as_fd()).as_str(),
    )
    .map_err(|e| err(format!("cannot bind it: {e}")))
}
