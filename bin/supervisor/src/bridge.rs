//! Client Sessions' exec bridges, started by the supervisor on the
//! coordinator's request ([`StartBridge`]), so that the coordinator, which
//! confines itself after start-up, is never the parent of `runsc exec`.
//!
//! The coordinator names the session and hands the process to run inside
//! (a sealed memfd, digest checked) and the session's stdio; every runsc
//! argument (binary, state directory, container, pid and process files) is
//! the supervisor's own, from its plan. A bridge is tracked by the pidfd
//! taken at spawn; its pidfd goes back to the coordinator for signals.

use lazaret_helpers::pidfd::{PidfdError, Tracked};
use lazaret_helpers::{fds, memfd};
use lazaret_protocol::fdno::exec_bridge;
use lazaret_protocol::plan::SandboxPlan;
use lazaret_protocol::supervisor::{
    valid_session_id, ExitStatus, SessionProcess, StartBridge, MAX_PROCESS,
};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("session id {0:?} is not 32 lowercase hex digits")]
    BadSession(String),
    #[error("session {0} already has an exec bridge")]
    Duplicate(String),
    #[error("the session's descriptors are missing")]
    MissingFds,
    #[error("the session's process: {0}")]
    Process(#[from] memfd::MemfdError),
    #[error("the session's process is malformed: {0}")]
    Decode(#[from] postcard::Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the exec bridge {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("exec bridge: {0}")]
    Pidfd(#[from] PidfdError),
}

pub struct Bridge {
    pub session: String,
    pub tracked: Tracked,
    /// The length of gVisor's memory file when the session started
    /// ([`crate::memory`]).
    pub memory_at_start: Option<u64>,
}

impl Bridge {
    /// The status once the bridge has exited (it is reaped then).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let s = self.tracked.child.try_wait().ok()??;
        Some(match (s.code(), s.signal()) {
            (Some(c), _) => ExitStatus::Exited(c),
            (None, Some(sig)) => ExitStatus::Signaled(sig),
            (None, None) => ExitStatus::Exited(125),
        })
    }
}

/// The runsc `--pid-file` of a session (the coordinator reads it to tell
/// runsc's diagnostics from the command's output).
fn pid_file(plan: &SandboxPlan, session: &str) -> PathBuf {
    plan.run_dir.join("sessions").join(format!("{session}.pid"))
}

/// Starts the exec bridge of `req.session`. `fds`: the sealed process
/// memfd, then the PTY slave or stdin, stdout and stderr (the count was
/// checked with the record).
pub fn start(
    plan: &SandboxPlan,
    holder: &OwnedFd,
    req: &StartBridge,
    fds: Vec<OwnedFd>,
    running: &[Bridge],
) -> Result<Bridge, BridgeError> {
    if !valid_session_id(&req.session) {
        return Err(BridgeError::BadSession(req.session.clone()));
    }
    if running.iter().any(|b| b.session == req.session) {
        return Err(BridgeError::Duplicate(req.session.clone()));
    }
    let mut fds = fds.into_iter();
    let process_fd = fds.next().ok_or(BridgeError::MissingFds)?;
    let process = read_process(req, process_fd)?;
    let pid_file = pid_file(plan, &req.session);
    let spec = process_spec(plan, req, &process, &pid_file)?;

    // runsc writes the pid file once the command's process exists.
    let runsc = plan.runsc.command(
        &plan.state_dir,
        &[
            "exec",
            "--pid-file",
            &pid_file.to_string_lossy(),
            "--process",
            &format!("/proc/self/fd/{}", exec_bridge::PROCESS),
            &plan.sandbox_id,
        ],
    );
    let mut cmd = Command::new(&plan.exec_bridge);
    if req.tty {
        cmd.arg("--tty");
    }
    cmd.arg("--").args(&runsc);
    let stdio: Vec<OwnedFd> = fds.collect();
    attach_stdio(&mut cmd, plan, req.tty, &stdio)?;
    drop(stdio);
    let holder = holder.try_clone().map_err(|source| BridgeError::Spawn {
        path: plan.exec_bridge.clone(),
        source,
    })?;
    fds::pass_fds(
        &mut cmd,
        vec![
            (holder, exec_bridge::HOLDER_PIDFD),
            (spec, exec_bridge::PROCESS),
        ],
    );
    // The supervisor blocks the signals it takes through its signalfd;
    // the bridge must start with none blocked.
    lazaret_helpers::child::set_signals(
        &mut cmd,
        lazaret_helpers::child::ChildSignals::UNBLOCK_ALL_DIE_WITH_PARENT,
    );
    let child = cmd.spawn().map_err(|source| BridgeError::Spawn {
        path: plan.exec_bridge.clone(),
        source,
    })?;
    // Closes our copies of the session's stdio: the coordinator's PTY
    // reader sees EIO once the bridge's side is gone.
    drop(cmd);
    Ok(Bridge {
        session: req.session.clone(),
        tracked: Tracked::new(child)?,
        memory_at_start: None,
    })
}

/// The session's process, read from its sealed memfd (digest checked
/// against the request), which is closed then.
fn read_process(req: &StartBridge, process_fd: OwnedFd) -> Result<SessionProcess, BridgeError> {
    let bytes = memfd::read_checked(
        "session-process",
        &process_fd,
        MAX_PROCESS,
        &req.process_digest,
    )?;
    drop(process_fd);
    Ok(postcard::from_bytes(&bytes)?)
}

/// The session's `runsc exec --process` specification, in a sealed memfd;
/// the directory of its pid file is made on the way.
fn process_spec(
    plan: &SandboxPlan,
    req: &StartBridge,
    process: &SessionProcess,
    pid_file: &std::path::Path,
) -> Result<OwnedFd, BridgeError> {
    let json = crate::bundle::exec_process_json(
        &process.argv,
        &process.env,
        &process.cwd,
        req.tty,
        process.setuid,
        &plan.limits,
    );
    if let Some(dir) = pid_file.parent() {
        std::fs::create_dir_all(dir).map_err(|source| BridgeError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    // The specification may hold the session's own variables (API keys):
    // it goes to runsc in a sealed memfd, never into a file.
    memfd::sealed(
        "session-process-json",
        &serde_json::to_vec(&json).unwrap_or_default(),
    )
    .map_err(|e| BridgeError::Write {
        path: "the session's process memfd".into(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// The bridge's stdio: copies of the PTY slave (`tty`), or of stdin,
/// stdout and stderr.
fn attach_stdio(
    cmd: &mut Command,
    plan: &SandboxPlan,
    tty: bool,
    stdio: &[OwnedFd],
) -> Result<(), BridgeError> {
    let clone = |fd: &OwnedFd| {
        fd.try_clone()
            .map_err(|source| BridgeError::Spawn {
                path: plan.exec_bridge.clone(),
                source,
            })
            .map(Stdio::from)
    };
    match (tty, stdio) {
        (true, [slave]) => {
            cmd.stdin(clone(slave)?)
                .stdout(clone(slave)?)
                .stderr(clone(slave)?);
        }
        (false, [i, o, e]) => {
            cmd.stdin(clone(i)?).stdout(clone(o)?).stderr(clone(e)?);
        }
        _ => return Err(BridgeError::MissingFds),
    }
    Ok(())
}
