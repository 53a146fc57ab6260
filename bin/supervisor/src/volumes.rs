//! Volumes are mounted by what one resolution found, never by their path
//! again: each host path is opened once with no symbolic link in any
//! component ([`lazaret_helpers::hostpath::open_volume`]) and the object
//! that descriptor holds is bound at a private path of the holder's mount
//! namespace, which runsc then mounts. Which volumes exist and where they
//! go in the sandbox is the plan's business.
//!
//! A writable volume the plan routes (`SandboxPlan::volume_routers`) is
//! then served through a mount router of its own, started over the pinned
//! directory ([`route`]): Git Sentry holds for every Git directory in it.

use lazaret_protocol::plan::SandboxPlan;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Starts the router of each routed volume over what [`pin`] bound for it,
/// and makes the router's mount point the volume's source; returns the
/// routers (the holder's children, watched like the workspace's). A
/// volume that turned out to be a single file is left bound directly: a
/// file holds no repository.
/// Why the volumes could not be pinned or routed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("the plan routes mount {mount} as a volume, which it is not")]
    NotAVolume { mount: usize },
    #[error("the routed volume {} was not pinned", path.display())]
    NotPinned { path: PathBuf },
    #[error(transparent)]
    Router(#[from] crate::router::RouterError),
    #[error(transparent)]
    HostPath(#[from] lazaret_helpers::hostpath::HostPathError),
    #[error("volume host path {}: {source}", path.display())]
    Stat {
        path: PathBuf,
        source: rustix::io::Errno,
    },
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot bind the volume {}: {source}", path.display())]
    Bind {
        path: PathBuf,
        source: nix::errno::Errno,
    },
}

pub fn route(plan: &mut SandboxPlan) -> Result<Vec<std::process::Child>, VolumeError> {
    use lazaret_protocol::plan::MountKind;
    let mut routers = Vec::new();
    for v in plan.volume_routers.clone() {
        let Some(MountKind::Bind { source, .. }) =
            plan.mounts.get_mut(v.mount).map(|m| &mut m.kind)
        else {
            return Err(VolumeError::NotAVolume { mount: v.mount });
        };
        // Only what `pin` bound: the router must never resolve the host
        // path itself.
        if !source.starts_with(plan.bundle_dir.join("volumes")) {
            return Err(VolumeError::NotPinned {
                path: source.clone(),
            });
        }
        if !source.is_dir() {
            continue;
        }
        let mut router = v.router;
        router.workspace = source.clone();
        routers.push(crate::router::start(&router)?);
        *source = router.mountpoint;
    }
    Ok(routers)
}

/// Resolves each volume's host path once, with no symbolic link in any
/// component (`lazaret_helpers::hostpath::open_volume`), and binds what
/// that descriptor holds at `<bundle>/volumes/<n>` in the holder's private
/// mount namespace; runsc gets that path. A symlink planted in a volume's
/// path (by this sandbox's earlier generation or another Domain's through
/// a writable volume) fails the start; one planted after the check changes
/// nothing, because the path is never resolved again.
pub fn pin(plan: &SandboxPlan) -> Result<SandboxPlan, VolumeError> {
    use lazaret_protocol::plan::{MountKind, MountPurpose};
    use nix::mount::{mount, MsFlags};
    let mut plan = plan.clone();
    let staging = plan.bundle_dir.join("volumes");
    for (i, m) in plan.mounts.iter_mut().enumerate() {
        let MountKind::Bind { source, .. } = &mut m.kind else {
            continue;
        };
        // A shared path's host directory is written by every Domain of
        // its profile: pinned the same way.
        if !matches!(m.purpose, MountPurpose::Volume | MountPurpose::SharedPath) {
            continue;
        }
        let fd = lazaret_helpers::hostpath::open_volume(source)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| VolumeError::Stat {
            path: source.clone(),
            source: e,
        })?;
        let target = staging.join(i.to_string());
        std::fs::create_dir_all(&staging).map_err(|e| VolumeError::Create {
            path: staging.clone(),
            source: e,
        })?;
        let made = if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() {
            std::fs::create_dir(&target)
        } else {
            std::fs::File::create(&target).map(drop)
        };
        made.map_err(|e| VolumeError::Create {
            path: target.clone(),
            source: e,
        })?;
        // The magic link names the descriptor's object itself: the path is
        // not looked up again.
        let by_fd = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount(
            Some(by_fd.as_str()),
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| VolumeError::Bind {
            path: source.clone(),
            source: e,
        })?;
        *source = target;
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::plan::{MountKind, MountPurpose, PlannedMount};
    use std::path::Path;

    /// Runs `f` in a forked child with a private mount namespace (the
    /// mounts are irreversible for the process that makes them); `None`
    /// when it cannot (not root).
    fn in_mount_namespace(f: impl FnOnce() -> Result<(), String>) -> Option<Result<(), String>> {
        if !rustix::process::getuid().is_root() {
            lazaret_protocol::log_line!("skipping: binding volumes needs root or a user namespace");
            return None;
        }
        let (r, w) = std::io::pipe().unwrap();
        // SAFETY: the child only runs the test's own code and exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                drop(r);
                let result = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
                    .map_err(|e| e.to_string())
                    .and_then(|_| {
                        nix::mount::mount(
                            None::<&str>,
                            "/",
                            None::<&str>,
                            nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
                            None::<&str>,
                        )
                        .map_err(|e| e.to_string())
                    })
                    .and_then(|_| f());
                let mut w = w;
                let said = match result {
                    Ok(()) => "ok".to_string(),
                    Err(e) => e,
                };
                let _ = std::io::Write::write_all(&mut w, said.as_bytes());
                std::process::exit(0);
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(w);
                let mut msg = String::new();
                std::io::Read::read_to_string(&mut { r }, &mut msg).unwrap();
                nix::sys::wait::waitpid(child, None).unwrap();
                // A child that panicked said nothing: a failure too.
                Some(match msg.as_str() {
                    "ok" => Ok(()),
                    "" => Err("the child failed without a word".into()),
                    _ => Err(msg),
                })
            }
        }
    }

    fn plan(bundle: &Path, source: &Path) -> SandboxPlan {
        use lazaret_protocol::plan::{IdMap, RootLayout, RunscInvocation};
        SandboxPlan {
            sandbox_id: "s1".into(),
            runsc: RunscInvocation {
                path: "/usr/bin/runsc".into(),
                global_flags: vec![],
            },
            state_dir: bundle.join("state"),
            bundle_dir: bundle.into(),
            run_dir: "/r".into(),
            exec_bridge: "/usr/libexec/lazaret/lazaret-exec-bridge".into(),
            root: RootLayout {
                lower: "/l".into(),
                upper: "/r/u".into(),
                work: "/r/w".into(),
                merged: "/r/root".into(),
            },
            control_lower: None,
            anchors: vec![],
            mounts: vec![PlannedMount {
                destination: "/data".into(),
                kind: MountKind::Bind {
                    source: source.into(),
                    read_only: true,
                },
                purpose: MountPurpose::Volume,
            }],
            hostname: "lazaret".into(),
            env: vec![],
            id_map: IdMap {
                uid: 1000,
                gid: 1000,
                sub_uid: (100000, 65535),
                sub_gid: (100000, 65535),
            },
            network: None,
            router: None,
            git_router: None,
            volume_routers: Vec::new(),
            limits: Default::default(),
        }
    }

    #[test]
    fn only_a_pinned_directory_is_routed() {
        use lazaret_protocol::plan::{RouterPlan, VolumeRouter};
        let d = tempfile::tempdir().unwrap();
        let bundle = d.path().join("bundle");
        std::fs::create_dir_all(bundle.join("volumes")).unwrap();
        let file = bundle.join("volumes/0");
        std::fs::write(&file, "one file").unwrap();
        let router = |workspace: &Path| RouterPlan {
            binary: "/nonexistent/lazaret-mount-router".into(),
            workspace: workspace.into(),
            state: d.path().join("state"),
            mountpoint: d.path().join("mnt"),
            isolate_ignored: false,
            protected_paths: vec![],
            rules_baseline: None,
            state_max_bytes: None,
            git_dir: None,
            inside_owner: None,
        };
        // A single file: bound directly, no router started.
        let mut p = plan(&bundle, &file);
        p.volume_routers = vec![VolumeRouter {
            mount: 0,
            router: router(&file),
        }];
        assert!(route(&mut p).unwrap().is_empty());
        // A source `pin` did not bind: refused, never resolved.
        let mut p = plan(&bundle, Path::new("/srv/data"));
        p.volume_routers = vec![VolumeRouter {
            mount: 0,
            router: router(Path::new("/srv/data")),
        }];
        let e = route(&mut p).unwrap_err();
        assert!(e.to_string().contains("was not pinned"), "{e}");
    }

    #[test]
    fn a_volume_is_bound_by_what_was_resolved_and_never_by_its_path_again() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().to_path_buf();
        let outcome = in_mount_namespace(move || {
            let real = base.join("shared/data");
            std::fs::create_dir_all(&real).unwrap();
            std::fs::write(real.join("f"), "resolved").unwrap();
            std::fs::create_dir_all(base.join("secret")).unwrap();
            std::fs::write(base.join("secret/f"), "secret").unwrap();
            std::fs::create_dir_all(base.join("bundle")).unwrap();
            let pinned = pin(&plan(&base.join("bundle"), &real)).map_err(|e| e.to_string())?;
            let MountKind::Bind { source, .. } = &pinned.mounts[0].kind else {
                return Err("not a bind".into());
            };
            // The path is swapped for a link after the resolution.
            std::fs::rename(&real, base.join("shared/old")).unwrap();
            std::os::unix::fs::symlink(base.join("secret"), &real).unwrap();
            let seen = std::fs::read_to_string(source.join("f")).unwrap();
            if seen != "resolved" {
                return Err(format!("the staged volume shows {seen:?}"));
            }
            // The next start refuses the link, naming it.
            match pin(&plan(&base.join("bundle2"), &real)) {
                Err(e) if e.to_string().contains("is a symbolic link") => Ok(()),
                other => Err(format!("a linked volume was not refused: {other:?}")),
            }
        });
        if let Some(r) = outcome {
            r.unwrap();
        }
    }
}
