//! Starting `lazaret-mount-router` in the holder's namespaces, before
//! runsc: the sandbox's `/workspace` is its mount point. The router
//! confines itself (landlock, seccomp, capabilities) once mounted; it dies
//! with the holder (`--die-with-parent`), and with it its mount.

use lazaret_helpers::fds;
use lazaret_protocol::fdno::mount_router as fdno;
use lazaret_protocol::plan::RouterPlan;
use lazaret_protocol::readiness::READY_LINE;
use std::io::Read;
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};

/// Why a mount router did not start.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// Its readiness pipe could not be made.
    #[error("{0}")]
    Pipe(rustix::io::Errno),
    #[error("cannot start {}: {source}", binary.display())]
    Spawn {
        binary: std::path::PathBuf,
        source: std::io::Error,
    },
    /// It did not say it is ready; `answered`: it said something else or
    /// closed its pipe, rather than nothing within 15 s.
    #[error("the mount router did not start (see its message in helpers.log in the Domain Root: `lazaret logs --helpers`){}", if *answered { "" } else { ": no answer within 15 s" })]
    NotReady { answered: bool },
}

pub fn start(r: &RouterPlan) -> Result<Child, RouterError> {
    let (ready_r, ready_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(RouterError::Pipe)?;
    let ready_fd = fdno::READY.to_string();
    let mut cmd = Command::new(&r.binary);
    cmd.arg("--workspace")
        .arg(&r.workspace)
        .arg("--state")
        .arg(&r.state)
        .arg("--mountpoint")
        .arg(&r.mountpoint)
        // The Sentry stats donated descriptors as its own (nested) uid:
        // without allow_other FUSE refuses it (EACCES, then EIO on
        // append). Only this mount namespace's processes can reach it.
        .args([
            "--ready-fd",
            &ready_fd,
            "--die-with-parent",
            "--allow-other",
        ])
        .args((!r.isolate_ignored).then_some("--sentry-only"))
        .args(
            r.inside_owner
                .iter()
                .flat_map(|(u, g)| ["--inside-owner".to_string(), format!("{u}:{g}")]),
        )
        .args(r.protected_paths.iter().flat_map(|p| ["--protect", p]))
        .args(
            r.rules_baseline
                .iter()
                .flat_map(|b| [std::ffi::OsStr::new("--rules-baseline"), b.as_os_str()]),
        )
        .args(
            r.git_dir
                .iter()
                .flat_map(|g| [std::ffi::OsStr::new("--git-dir"), g.as_os_str()]),
        )
        .args(
            r.state_max_bytes
                .iter()
                .flat_map(|n| ["--state-max-bytes".to_string(), n.to_string()]),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    fds::pass_fds(&mut cmd, vec![(ready_w, fdno::READY)]);
    // The holder blocks the signals it waits for; the router must not.
    lazaret_helpers::child::set_signals(
        &mut cmd,
        lazaret_helpers::child::ChildSignals::UNBLOCK_ALL,
    );
    let mut child = cmd.spawn().map_err(|source| RouterError::Spawn {
        binary: r.binary.clone(),
        source,
    })?;
    drop(cmd);
    let mut ready = std::fs::File::from(ready_r);
    let mut pfd = [nix::poll::PollFd::new(
        ready.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let n = nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(15_000u16)).unwrap_or(0);
    let mut said = String::new();
    if n > 0 {
        let _ = (&mut ready).take(64).read_to_string(&mut said);
    }
    if said.as_bytes() == READY_LINE {
        return Ok(child);
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(RouterError::NotReady { answered: n != 0 })
}
