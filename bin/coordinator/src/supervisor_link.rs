//! The coordinator's end of the control channel to the Runtime Supervisor
//! ([`lazaret_protocol::supervisor`]).
//!
//! The supervisor starts every process that must stay unconfined (runsc,
//! each Client Session's exec bridge), so the coordinator itself never
//! execs after start-up. One reader thread takes the supervisor's records
//! and hands each session the events of its own bridge; any thread may
//! send (one datagram per record, so sends never interleave).

use lazaret_helpers::channel::{Channel, ChannelError};
use lazaret_helpers::memfd;
use lazaret_helpers::sync::lock;
use lazaret_protocol::supervisor::{
    ExitStatus, FromSupervisor, MemoryBound, SessionProcess, StartBridge, ToSupervisor, MAX_RECORD,
};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the supervisor may take to answer a `StartBridge` (it reads a
/// memfd, writes a file and forks).
const START_ANSWER: Duration = Duration::from_secs(30);

/// What happens to one session's exec bridge.
#[derive(Debug)]
pub enum BridgeEvent {
    /// Running; its pidfd, for signals.
    Started(OwnedFd),
    Failed(String),
    Exited(BridgeExit),
    /// The supervisor is gone (and with it the sandbox).
    Lost,
}

/// How a session's exec bridge ended, as the supervisor reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BridgeExit {
    pub status: ExitStatus,
    /// `Some`: the sandbox's memory is at the profile's `limits.memory`.
    pub memory: Option<MemoryBound>,
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot hand the session's process to the Runtime Supervisor: {0}")]
    Process(#[from] memfd::MemfdError),
    #[error("cannot encode the session's process: {0}")]
    Encode(#[from] postcard::Error),
    #[error("the Runtime Supervisor: {0}")]
    Channel(#[from] ChannelError),
    #[error("the Runtime Supervisor could not start the exec bridge: {0}")]
    Refused(String),
    #[error("the sandbox stopped while this session was starting: run the command again")]
    Lost,
}

#[derive(Default)]
struct Waiters {
    sessions: HashMap<String, Sender<BridgeEvent>>,
    stopped: Option<Sender<bool>>,
    closed: bool,
}

pub struct Link {
    channel: Channel,
    waiters: Mutex<Waiters>,
}

impl Link {
    /// Starts the reader thread on a channel whose `Ready` was taken.
    pub fn start(channel: Channel) -> std::io::Result<Arc<Link>> {
        let reader = channel.try_clone()?;
        let link = Arc::new(Link {
            channel,
            waiters: Mutex::new(Waiters::default()),
        });
        let l = link.clone();
        std::thread::spawn(move || l.read(reader));
        Ok(link)
    }

    fn read(&self, reader: Channel) {
        loop {
            let (msg, mut fds) = match reader
                .recv_checked::<FromSupervisor>(MAX_RECORD, FromSupervisor::fd_count)
            {
                Ok(m) => m,
                Err(ChannelError::Closed) => break,
                Err(e) => {
                    crate::lifecycle::log(format!("the Runtime Supervisor sent a bad record: {e}"));
                    continue;
                }
            };
            let mut w = lock(&self.waiters);
            let (session, event) = match msg {
                FromSupervisor::BridgeStarted { session } => match fds.pop() {
                    Some(fd) => (session, BridgeEvent::Started(fd)),
                    None => continue,
                },
                FromSupervisor::BridgeFailed { session, reason } => {
                    (session, BridgeEvent::Failed(reason))
                }
                FromSupervisor::BridgeExited {
                    session,
                    status,
                    memory,
                } => (session, BridgeEvent::Exited(BridgeExit { status, memory })),
                FromSupervisor::Stopped { run_dir_removed } => {
                    if let Some(tx) = w.stopped.take() {
                        let _ = tx.send(run_dir_removed);
                    }
                    continue;
                }
                other => {
                    crate::lifecycle::log(format!(
                        "the Runtime Supervisor sent an unexpected record: {other:?}"
                    ));
                    continue;
                }
            };
            if let Some(tx) = w.sessions.get(&session) {
                let _ = tx.send(event);
            }
        }
        let mut w = lock(&self.waiters);
        w.closed = true;
        for (_, tx) in w.sessions.drain() {
            let _ = tx.send(BridgeEvent::Lost);
        }
        w.stopped = None;
    }

    /// Whether the supervisor's channel has closed (it is gone, and the
    /// sandbox with it).
    pub fn is_closed(&self) -> bool {
        lock(&self.waiters).closed
    }

    /// Has the supervisor start `session`'s exec bridge on `stdio` (the
    /// PTY slave, or stdin, stdout and stderr); returns the bridge's pidfd
    /// and the receiver of its later events.
    pub fn start_bridge(
        &self,
        session: &str,
        tty: bool,
        process: &SessionProcess,
        stdio: &[OwnedFd],
    ) -> Result<(OwnedFd, Receiver<BridgeEvent>), LinkError> {
        let bytes = postcard::to_stdvec(process)?;
        let (process_fd, process_digest) = memfd::sealed_with_digest("session-process", &bytes)?;
        let (tx, rx) = channel();
        {
            let mut w = lock(&self.waiters);
            if w.closed {
                return Err(LinkError::Lost);
            }
            w.sessions.insert(session.to_string(), tx);
        }
        let msg = ToSupervisor::StartBridge(StartBridge {
            session: session.to_string(),
            tty,
            process_digest,
        });
        let mut fds = vec![process_fd.as_fd()];
        fds.extend(stdio.iter().map(|f| f.as_fd()));
        let answer = self
            .channel
            .send(&msg, &fds, MAX_RECORD)
            .map_err(LinkError::from)
            .and_then(|()| match rx.recv_timeout(START_ANSWER) {
                Ok(BridgeEvent::Started(fd)) => Ok(fd),
                Ok(BridgeEvent::Failed(reason)) => Err(LinkError::Refused(reason)),
                Ok(_) | Err(_) => Err(LinkError::Lost),
            });
        match answer {
            Ok(fd) => Ok((fd, rx)),
            Err(e) => {
                self.forget(session);
                Err(e)
            }
        }
    }

    /// The session's events are no longer wanted.
    pub fn forget(&self, session: &str) {
        let mut w = lock(&self.waiters);
        w.sessions.remove(session);
    }

    /// Asks the supervisor to stop the sandbox and remove the run
    /// directory. `Some(removed)` when it answered within `timeout`.
    pub fn stop(&self, timeout: Duration) -> Option<bool> {
        let (tx, rx) = channel();
        {
            let mut w = lock(&self.waiters);
            if w.closed {
                return None;
            }
            w.stopped = Some(tx);
        }
        self.channel
            .send(&ToSupervisor::Stop, &[], MAX_RECORD)
            .ok()?;
        rx.recv_timeout(timeout).ok()
    }
}

/// Waits for the bridge's exit: its status, or `None` when the supervisor
/// went away first.
pub fn wait_exit(rx: &Receiver<BridgeEvent>) -> Option<BridgeExit> {
    loop {
        match rx.recv() {
            Ok(BridgeEvent::Exited(s)) => return Some(s),
            Ok(BridgeEvent::Started(_) | BridgeEvent::Failed(_)) => continue,
            Ok(BridgeEvent::Lost) | Err(_) => return None,
        }
    }
}
