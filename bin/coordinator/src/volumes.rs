//! Writable volumes under Git Sentry: each one the profile does not opt
//! out of (`git_sentry = false`) is served through a `lazaret-mount-router`
//! of its own with Ignored Workspace State off, so every Git directory in
//! it (the host's repositories there, and any the sandbox makes later)
//! gets the workspace's rules: configuration and hooks are the sandbox's
//! private copies, and a `.git` the host does not have stays in the
//! Domain's `volume-git/<key>` (one per host path and mount point) and is
//! never a repository on the host.
//!
//! Planned here (data); the holder pins each volume's host path, starts
//! its router over what it pinned and mounts the router's view instead
//! (`lazaret-supervisor`'s `volumes` module). Read-only volumes are bound
//! directly: the sandbox writes nothing there.

use crate::lifecycle::mkdir_private;
use crate::start_error::StartError;
use lazaret_protocol::plan::{
    CoordinatorInput, MountKind, MountPurpose, PlannedMount, RouterPlan, VolumeRouter,
};
use lazaret_state::DomainLayout as Layout;
use sha2::{Digest, Sha256};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The directory beneath `volume-git` of the volume of `host` at
/// `sandbox`: named by both, so what the sandbox made in one volume never
/// shows in another when the profile's list changes, and two volumes of
/// one host directory never share a router's state.
pub fn state_name(host: &Path, sandbox: &str) -> String {
    let host = host.as_os_str().as_bytes();
    let mut h = Sha256::new();
    h.update((host.len() as u64).to_be_bytes());
    h.update(host);
    h.update(sandbox.as_bytes());
    hex::encode(&h.finalize()[..16])
}

/// A router for each writable volume with Git Sentry among `mounts`,
/// with its state and mount point made (private) beneath the Domain Root.
pub fn route(
    input: &CoordinatorInput,
    layout: &Layout,
    mounts: &[PlannedMount],
) -> Result<Vec<VolumeRouter>, StartError> {
    let mut out = Vec::new();
    for v in input
        .volumes
        .iter()
        .filter(|v| !v.read_only && v.git_sentry)
    {
        let Some(mount) = mounts.iter().position(|m| {
            m.purpose == MountPurpose::Volume
                && m.destination == v.sandbox
                && matches!(
                    m.kind,
                    MountKind::Bind {
                        read_only: false,
                        ..
                    }
                )
        }) else {
            continue;
        };
        add_router(input, layout, &mut out, mount, &v.host, &v.sandbox)?;
    }
    // With a profile `user`, each shared path is routed too: its host
    // directory is the developer's (root inside), and the router reports
    // it as the user's and keeps what the user writes the developer's, as
    // for the workspace, so an agent running as the user keeps its login
    // there. As root nothing needs it: the path stays bound directly.
    if crate::session::inside_owner(input).is_some() {
        for s in &input.shared_paths {
            let Some(mount) = mounts
                .iter()
                .position(|m| m.purpose == MountPurpose::SharedPath && m.destination == s.sandbox)
            else {
                continue;
            };
            let key = format!("shared:{}", s.sandbox);
            add_router(input, layout, &mut out, mount, &s.host, &key)?;
        }
    }
    Ok(out)
}

/// Adds a Git-Sentry-only router for planned mount `mount` (host directory
/// `host`), its private state named by `host` and `key`.
fn add_router(
    input: &CoordinatorInput,
    layout: &Layout,
    out: &mut Vec<VolumeRouter>,
    mount: usize,
    host: &Path,
    key: &str,
) -> Result<(), StartError> {
    let state = layout.volume_git().join(state_name(host, key));
    mkdir_private(&state)?;
    let mountpoint = layout
        .run()
        .join("volume-routers")
        .join(out.len().to_string());
    mkdir_private(&mountpoint)?;
    out.push(VolumeRouter {
        mount,
        // The holder replaces the workspace with what it pinned.
        router: sentry_only(input, host.to_path_buf(), state, mountpoint, None),
    });
    Ok(())
}

/// A router that enforces Git Sentry only (Ignored Workspace State off),
/// its private state bounded as the Ignored Workspace State is.
pub(crate) fn sentry_only(
    input: &CoordinatorInput,
    workspace: PathBuf,
    state: PathBuf,
    mountpoint: PathBuf,
    git_dir: Option<PathBuf>,
) -> RouterPlan {
    RouterPlan {
        binary: input.libexec.join("lazaret-mount-router"),
        workspace,
        state,
        mountpoint,
        isolate_ignored: false,
        protected_paths: Vec::new(),
        rules_baseline: None,
        state_max_bytes: input.limits.ignored_state,
        git_dir,
        inside_owner: crate::session::inside_owner(input),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_are_per_host_path_and_flat() {
        let a = state_name(Path::new("/srv/a"), "/a");
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, state_name(Path::new("/srv/b"), "/a"));
        assert_ne!(a, state_name(Path::new("/srv/a"), "/b"));
        assert_ne!(a, state_name(Path::new("/srv/a/"), "a"));
        assert_eq!(a, state_name(Path::new("/srv/a"), "/a"));
    }
}
