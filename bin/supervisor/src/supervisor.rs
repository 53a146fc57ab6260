//! The supervisor proper: starts the Domain (user namespace, holder,
//! uplink, runsc) from the checked plan, then serves the coordinator's
//! requests on the control channel until it is asked to stop or the
//! sandbox ends.

use crate::failure::Failure;
use crate::holder::holder_main;
use crate::read_plan;
use crate::remove_tree::remove_run_dir;
use lazaret_helpers::channel::{Channel, ChannelError};
use lazaret_helpers::{pidfd, userns};
use lazaret_protocol::plan::SandboxPlan;
use lazaret_protocol::supervisor::{FromSupervisor, MemoryBound, ToSupervisor, MAX_RECORD};
use lazaret_supervisor::bridge::{self, Bridge};
use lazaret_supervisor::exit;
use lazaret_supervisor::network::{self, Uplink};
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, Signal};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// A running sandbox and what the supervisor tracks of it.
pub(crate) struct Supervisor {
    plan: SandboxPlan,
    holder: nix::unistd::Pid,
    holder_fd: OwnedFd,
    uplink: Option<Uplink>,
    uplink_lost: bool,
    bridges: Vec<Bridge>,
    signals: nix::sys::signalfd::SignalFd,
    /// gVisor's memory file, when the profile bounds memory.
    memory: Option<lazaret_supervisor::memory::MemoryFile>,
}

/// Everything up to a running sandbox, then [`FromSupervisor::Ready`] with
/// the holder's pidfd.
pub(crate) fn start(args: &[String], channel: &Channel) -> Result<Supervisor, Failure> {
    let plan = read_plan(args)?;
    std::fs::create_dir_all(&plan.bundle_dir).map_err(|source| Failure::Create {
        path: plan.bundle_dir.clone(),
        source,
    })?;
    let signals = block_signals()?;

    // The holder tells us over this pipe when runsc's sandbox is running.
    let (ready_r, ready_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(Failure::Pipe)?;
    // We tell the holder over this one when slirp4netns A is up.
    let (uplink_r, uplink_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(Failure::Pipe)?;
    let (host_netlink, host_ports) = host_sides(&plan)?;
    let ready_w_raw = ready_w.as_raw_fd();
    let uplink_r_raw = uplink_r.as_raw_fd();
    let host_netlink_raw = host_netlink.as_ref().map(|f| f.as_raw_fd());
    let flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    // The channel must not outlive us in the holder and what it starts.
    let (holder, holder_fd) = userns::clone_mapped_pidfd(&plan.id_map, flags, || {
        // SAFETY: closing the clone's copy of the channel, which it never uses.
        unsafe { libc::close(channel.as_fd().as_raw_fd()) };
        holder_main(
            &plan,
            ready_w_raw,
            uplink_r_raw,
            host_netlink_raw,
            &host_ports,
        )
    })
    .map_err(Failure::Clone)?;
    drop(lazaret_supervisor::ports::from_raw(&host_ports));
    drop(ready_w);
    drop(uplink_r);
    drop(host_netlink);
    let mut ready = std::io::BufReader::new(std::fs::File::from(ready_r));
    let uplink = start_uplink(&plan, (holder, &holder_fd), uplink_w, &mut ready)?;

    let line = holder_line(&mut ready);
    let Some(memory_fd) = line.strip_prefix("running ") else {
        let _ = nix::sys::wait::waitpid(holder, None);
        if let Some(u) = uplink {
            u.stop();
        }
        return Err(Failure::of_holder(&line).unwrap_or(Failure::HolderExited));
    };
    let memory = open_memory(holder, memory_fd);
    if let Err(e) = channel.send(&FromSupervisor::Ready, &[holder_fd.as_fd()], MAX_RECORD) {
        kill_holder(holder, &holder_fd);
        if let Some(u) = uplink {
            u.stop();
        }
        return Err(Failure::Ready(e));
    }
    Ok(Supervisor {
        plan,
        holder,
        holder_fd,
        uplink,
        uplink_lost: false,
        bridges: Vec::new(),
        signals,
        memory,
    })
}

/// SIGTERM and SIGINT, taken through a signalfd; blocked before any child
/// exists, and unblocked again in every child before it execs.
fn block_signals() -> Result<nix::sys::signalfd::SignalFd, Failure> {
    let term = SigSet::from_iter([Signal::SIGTERM, Signal::SIGINT]);
    term.thread_block().map_err(Failure::Signals)?;
    nix::sys::signalfd::SignalFd::with_flags(
        &term,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .map_err(Failure::Signalfd)
}

/// What the holder takes of the host's network namespace, made here before
/// it exists: the host-address netlink socket and the published ports'
/// host sockets (raw, for the clone).
fn host_sides(plan: &SandboxPlan) -> Result<(Option<OwnedFd>, Vec<i32>), Failure> {
    // The host's address changes, subscribed here in the host's network
    // namespace before the holder exists (see `network::host_address_socket`).
    let host_netlink = match &plan.network {
        Some(_) => Some(network::host_address_socket()?),
        None => None,
    };
    // The published ports' host sides, bound here in the host's network
    // namespace, only at the addresses asked for: a taken one fails the
    // start before the holder exists. Only the holder keeps them.
    let host_ports = match &plan.network {
        Some(n) => {
            lazaret_supervisor::ports::into_raw(lazaret_supervisor::ports::bind_host(&n.ports)?)
        }
        None => Vec::new(),
    };
    Ok((host_netlink, host_ports))
}

/// The holder's next line on the readiness pipe, trimmed ("" at its end).
fn holder_line(ready: &mut std::io::BufReader<std::fs::File>) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    let _ = ready.read_line(&mut line);
    line.trim().to_string()
}

/// Kills the holder (by its pidfd) and reaps it.
fn kill_holder(holder: nix::unistd::Pid, holder_fd: &OwnedFd) {
    let _ = pidfd::send_signal(holder_fd, rustix::process::Signal::KILL);
    let _ = nix::sys::wait::waitpid(holder, None);
}

/// Starts slirp4netns A where the plan has a network and tells the holder
/// (over `uplink_w`) that it is up; without a network, the pipe is closed.
/// A failed uplink kills the holder, whose own error says more if it
/// failed first.
fn start_uplink(
    plan: &SandboxPlan,
    (holder, holder_fd): (nix::unistd::Pid, &OwnedFd),
    uplink_w: OwnedFd,
    ready: &mut std::io::BufReader<std::fs::File>,
) -> Result<Option<Uplink>, Failure> {
    let Some(net) = &plan.network else {
        drop(uplink_w);
        return Ok(None);
    };
    match Uplink::start(net, holder.as_raw()) {
        Ok(u) => {
            let _ = std::fs::File::from(uplink_w).write_all(b"u");
            Ok(Some(u))
        }
        Err(e) => {
            // The holder's own error, if it failed first, says more.
            drop(uplink_w);
            kill_holder(holder, holder_fd);
            let line = holder_line(ready);
            Err(Failure::of_holder(&line).unwrap_or(Failure::Uplink(e)))
        }
    }
}

/// gVisor's memory file, through the holder's descriptor `memory_fd`
/// (from its readiness line), opened before any session (see `memory`);
/// without it, sessions only lose the note on the memory bound.
fn open_memory(
    holder: nix::unistd::Pid,
    memory_fd: &str,
) -> Option<lazaret_supervisor::memory::MemoryFile> {
    memory_fd.parse::<i32>().ok().and_then(|fd| {
        let link = Path::new("/proc")
            .join(holder.as_raw().to_string())
            .join(format!("fd/{fd}"));
        lazaret_supervisor::memory::MemoryFile::open(&link)
            .map_err(|e| {
                lazaret_protocol::log_line!(
                    "lazaret-supervisor: the sandbox's memory file is not watched: {e}"
                )
            })
            .ok()
    })
}

/// Why the control loop cannot go on: the sandbox is stopped.
#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error("poll: {0}")]
    Poll(rustix::io::Errno),
    #[error("cannot answer the coordinator: {0}")]
    Answer(ChannelError),
}

/// Why the control loop ended.
enum End {
    /// The holder ended by itself (exit code of the supervisor).
    HolderGone(i32),
    /// Stop requested (record, SIGTERM/SIGINT, or the coordinator is gone);
    /// answer `Stopped` when `reply`.
    Stop { reply: bool },
}

impl Supervisor {
    /// Until the sandbox ends or the coordinator asks to stop: starts and
    /// reaps exec bridges, watches the holder and slirp4netns A by pidfd.
    pub(crate) fn serve(&mut self, channel: &Channel) -> i32 {
        let end = loop {
            match self.step(channel) {
                Ok(None) => {}
                Ok(Some(end)) => break end,
                Err(e) => {
                    lazaret_protocol::log_line!("lazaret-supervisor: {e}: stopping the sandbox");
                    break End::Stop { reply: false };
                }
            }
        };
        match end {
            End::HolderGone(code) => {
                self.reap_bridges(channel, Duration::from_secs(5));
                // The coordinator ends too; it must not have to exec
                // anything to clean up after us.
                remove_run_dir(&self.plan);
                code
            }
            End::Stop { reply } => {
                self.stop_holder();
                self.reap_bridges(channel, Duration::from_secs(5));
                let removed = remove_run_dir(&self.plan);
                if reply {
                    let _ = channel.send(
                        &FromSupervisor::Stopped {
                            run_dir_removed: removed,
                        },
                        &[],
                        MAX_RECORD,
                    );
                }
                exit::STOPPED
            }
        }
    }

    /// One wait for whatever happens next.
    fn step(&mut self, channel: &Channel) -> Result<Option<End>, ServeError> {
        use rustix::event::{PollFd, PollFlags};
        let watch_uplink = !self.uplink_lost && self.uplink.is_some();
        let mut pfds = vec![
            PollFd::new(channel, PollFlags::IN),
            PollFd::new(&self.signals, PollFlags::IN),
            PollFd::new(&self.holder_fd, PollFlags::IN),
        ];
        if let (true, Some(u)) = (watch_uplink, &self.uplink) {
            pfds.push(PollFd::new(u.pidfd(), PollFlags::IN));
        }
        let first_bridge = pfds.len();
        for b in &self.bridges {
            pfds.push(PollFd::new(&b.tracked.pidfd, PollFlags::IN));
        }
        match rustix::event::poll(&mut pfds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(None),
            Err(e) => return Err(ServeError::Poll(e)),
        }
        let ready: Vec<bool> = pfds.iter().map(|p| !p.revents().is_empty()).collect();
        drop(pfds);

        if ready[1] {
            while let Ok(Some(_)) = self.signals.read_signal() {}
            return Ok(Some(End::Stop { reply: false }));
        }
        if ready[2] {
            return Ok(Some(End::HolderGone(self.reap_holder())));
        }
        if watch_uplink && ready[3] {
            self.uplink_lost = true;
            lazaret_protocol::log_line!(
                "lazaret-supervisor: slirp4netns A exited: the sandbox has lost its network"
            );
        }
        let exited: Vec<usize> = (0..self.bridges.len())
            .filter(|i| ready[first_bridge + i])
            .collect();
        for i in exited.into_iter().rev() {
            self.report_exit(channel, i);
        }
        if ready[0] {
            return self.handle(channel);
        }
        Ok(None)
    }

    /// One record from the coordinator.
    fn handle(&mut self, channel: &Channel) -> Result<Option<End>, ServeError> {
        let (msg, fds) =
            match channel.recv_checked::<ToSupervisor>(MAX_RECORD, ToSupervisor::fd_count) {
                Ok(m) => m,
                Err(ChannelError::Closed) => {
                    lazaret_protocol::log_line!(
                        "lazaret-supervisor: the coordinator is gone: stopping the sandbox"
                    );
                    return Ok(Some(End::Stop { reply: false }));
                }
                // A bad record is refused; its descriptors are closed.
                Err(e) => {
                    lazaret_protocol::log_line!(
                        "lazaret-supervisor: refused a record from the coordinator: {e}"
                    );
                    return Ok(None);
                }
            };
        match msg {
            ToSupervisor::Stop => Ok(Some(End::Stop { reply: true })),
            ToSupervisor::StartBridge(req) => {
                let memory_at_start = self.memory_size();
                match bridge::start(&self.plan, &self.holder_fd, &req, fds, &self.bridges) {
                    Ok(mut b) => {
                        b.memory_at_start = memory_at_start;
                        let sent = channel.send(
                            &FromSupervisor::BridgeStarted {
                                session: req.session.clone(),
                            },
                            &[b.tracked.pidfd.as_fd()],
                            MAX_RECORD,
                        );
                        self.bridges.push(b);
                        sent.map_err(ServeError::Answer)?;
                    }
                    Err(e) => {
                        lazaret_protocol::log_line!(
                            "lazaret-supervisor: session {}: {e}",
                            req.session
                        );
                        channel
                            .send(
                                &FromSupervisor::BridgeFailed {
                                    session: req.session,
                                    reason: e.to_string(),
                                },
                                &[],
                                MAX_RECORD,
                            )
                            .map_err(ServeError::Answer)?;
                    }
                }
                Ok(None)
            }
        }
    }

    /// Reaps bridge `i` when it has exited and tells the coordinator.
    fn report_exit(&mut self, channel: &Channel, i: usize) {
        let Some(status) = self.bridges[i].try_status() else {
            return;
        };
        let b = self.bridges.swap_remove(i);
        let memory = MemoryBound::of_session(
            self.plan.limits.memory,
            b.memory_at_start,
            self.memory_size(),
        );
        let _ = channel.send(
            &FromSupervisor::BridgeExited {
                session: b.session.clone(),
                status,
                memory,
            },
            &[],
            MAX_RECORD,
        );
    }

    /// The length of gVisor's memory file now, when it is watched.
    fn memory_size(&self) -> Option<u64> {
        self.memory.as_ref().and_then(|m| m.size())
    }

    /// After the sandbox is gone, its bridges end (their `runsc exec` dies
    /// with the holder's PID namespace): reap and report them, killing
    /// those that linger.
    fn reap_bridges(&mut self, channel: &Channel, grace: Duration) {
        let deadline = Instant::now() + grace;
        while !self.bridges.is_empty() {
            for i in (0..self.bridges.len()).rev() {
                if self.bridges[i].tracked.exited() {
                    self.report_exit(channel, i);
                }
            }
            if Instant::now() > deadline {
                for b in &self.bridges {
                    let _ = b.tracked.signal(rustix::process::Signal::KILL);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The holder's exit, as the supervisor's exit code.
    fn reap_holder(&mut self) -> i32 {
        match nix::sys::wait::waitpid(self.holder, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => exit::STOPPED,
            _ => exit::SANDBOX_LOST,
        }
    }

    /// SIGTERM to the holder, which stops runsc; SIGKILL after 20 s (killing
    /// PID 1 of the namespace kills everything in it).
    fn stop_holder(&mut self) {
        if pidfd::exited(&self.holder_fd) {
            let _ = nix::sys::wait::waitpid(self.holder, None);
            return;
        }
        let _ = pidfd::send_signal(&self.holder_fd, rustix::process::Signal::TERM);
        let mut pfd = [rustix::event::PollFd::new(
            &self.holder_fd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 20,
            tv_nsec: 0,
        };
        if !matches!(rustix::event::poll(&mut pfd, Some(&timeout)), Ok(n) if n > 0) {
            let _ = pidfd::send_signal(&self.holder_fd, rustix::process::Signal::KILL);
        }
        let _ = nix::sys::wait::waitpid(self.holder, None);
    }

    /// After the holder: slirp4netns A.
    pub(crate) fn finish(self) {
        if let Some(u) = self.uplink {
            u.stop();
        }
    }
}
