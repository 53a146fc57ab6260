//! `lazaret-supervisor`: started by the Session Coordinator with the plan
//! (a sealed memfd) on fd 3, its SHA-256 digest in argv (`--plan-digest`),
//! and its end of the control channel on fd 4
//! ([`lazaret_protocol::supervisor`]). See the crate documentation.
//!
//! Process layout:
//! ```text
//! lazaret-supervisor            (host namespaces; maps the user namespace)
//!  ├─ slirp4netns A            (host netns -> tap0 of the holder's netns N1;
//!  │                             only with a network)
//!  └─ sandbox holder            (PID 1 of a new PID namespace, root of the
//!      │                         Domain user namespace, own mount/net ns N1)
//!      ├─ keeper K              (holds the sandbox netns N2)
//!      ├─ lazaret-netpolicy     (install, then probe; before runsc)
//!      ├─ slirp4netns B         (in N1 -> tap0 of N2)
//!      └─ runsc run             (terminal-neutral, --network=sandbox in N2,
//!                                or --network=none)
//! lazaret-supervisor
//!  └─ lazaret-exec-bridge       (one per Client Session, on the
//!                                coordinator's request; joins the holder's
//!                                namespaces and runs `runsc exec`)
//! ```
//! See [`lazaret_supervisor::network`] for the network's order.
//! Every process of the sandbox lives in the holder's PID namespace, so when
//! the holder dies, for whatever reason, the kernel kills all of them: no
//! runsc, gofer or sandbox process can outlive the Domain. The holder dies
//! with the supervisor (`PR_SET_PDEATHSIG`), which dies with the coordinator.

use lazaret_helpers::channel::{Channel, ChannelError};
use lazaret_helpers::{fds, memfd, pidfd, userns};
use lazaret_protocol::plan::SandboxPlan;
use lazaret_protocol::supervisor::{FromSupervisor, MemoryBound, ToSupervisor, MAX_RECORD};
use lazaret_supervisor::bridge::{self, Bridge};
use lazaret_supervisor::network::{self, Uplink};
use lazaret_supervisor::{bundle, exit, fdno};
use nix::sched::CloneFlags;
use nix::sys::signal::{self, SigHandler, SigSet, Signal};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    // Inherited by the holder, runsc, slirp4netns, the mount router and the
    // exec bridges.
    lazaret_helpers::limits::raise_nofile();
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 1 || args.get(1).map(String::as_str) == Some("--domain") {
        lazaret_helpers::timeline::mark("supervisor", "start");
    }
    if args.get(1).map(String::as_str) == Some("--print-confinement") {
        lazaret_seccomp::binaries::print_and_exit("lazaret-supervisor");
    }
    match args.get(1).map(String::as_str) {
        Some("--remove-tree") => std::process::exit(remove_tree(args.get(2).map(Path::new))),
        Some("--scan-anchor") => std::process::exit(scan_anchor(&args[2..])),
        _ => {}
    }
    let channel = match fds::inherited(fdno::CHANNEL) {
        Ok(fd) => Channel::from_fd(fd),
        Err(e) => {
            lazaret_protocol::log_line!(
                "lazaret-supervisor: error: no control channel on fd {}: {e}",
                fdno::CHANNEL
            );
            std::process::exit(exit::BAD_PLAN);
        }
    };
    let code = match start(&args, &channel) {
        Ok(mut sup) => {
            let code = sup.serve(&channel);
            sup.finish();
            code
        }
        Err((code, reason)) => {
            lazaret_protocol::log_line!("lazaret-supervisor: error: {reason}");
            let _ = channel.send(&FromSupervisor::StartFailed { reason }, &[], MAX_RECORD);
            code
        }
    };
    std::process::exit(code);
}

type Failure = (i32, String);

/// `--plan-digest HEX` (and `--domain ID`, which only names the process).
fn plan_digest(args: &[String]) -> Result<&str, Failure> {
    let mut it = args.iter().skip(1);
    let mut digest = None;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--domain" => {
                it.next();
            }
            "--plan-digest" => digest = it.next(),
            other => return Err((exit::BAD_PLAN, format!("unknown argument {other:?}"))),
        }
    }
    digest.map(String::as_str).ok_or((
        exit::BAD_PLAN,
        "no --plan-digest: the plan's SHA-256 digest is required".into(),
    ))
}

/// Reads and checks the plan: seals, size, digest, then postcard; the
/// network policy's digest too, before anything is created.
fn read_plan(args: &[String]) -> Result<SandboxPlan, Failure> {
    let digest = plan_digest(args)?;
    let plan_fd = fds::inherited(fdno::PLAN)
        .map_err(|e| (exit::BAD_PLAN, format!("no plan on fd {}: {e}", fdno::PLAN)))?;
    let bytes = memfd::read_checked("sandbox-plan", &plan_fd, 1 << 20, digest)
        .map_err(|e| (exit::BAD_PLAN, e.to_string()))?;
    drop(plan_fd);
    let plan: SandboxPlan =
        postcard::from_bytes(&bytes).map_err(|e| (exit::BAD_PLAN, format!("plan: {e}")))?;
    if let Some(net) = &plan.network {
        let got = memfd::digest(&net.policy);
        if !got.eq_ignore_ascii_case(&net.digest) {
            return Err((
                exit::BAD_PLAN,
                format!(
                    "network: the policy's SHA-256 digest {got} differs from the plan's {}; refusing it",
                    net.digest
                ),
            ));
        }
    }
    Ok(plan)
}

/// A running sandbox and what the supervisor tracks of it.
struct Supervisor {
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
fn start(args: &[String], channel: &Channel) -> Result<Supervisor, Failure> {
    let plan = read_plan(args)?;
    std::fs::create_dir_all(&plan.bundle_dir).map_err(|e| {
        (
            exit::START_FAILED,
            format!("cannot create {}: {e}", plan.bundle_dir.display()),
        )
    })?;

    // Taken through a signalfd; blocked before any child exists, and
    // unblocked again in every child before it execs.
    let term = SigSet::from_iter([Signal::SIGTERM, Signal::SIGINT]);
    term.thread_block()
        .map_err(|e| (exit::START_FAILED, e.to_string()))?;
    let signals = nix::sys::signalfd::SignalFd::with_flags(
        &term,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .map_err(|e| (exit::START_FAILED, format!("signalfd: {e}")))?;

    // The holder tells us over this pipe when runsc's sandbox is running.
    let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| (exit::START_FAILED, e.to_string()))?;
    // We tell the holder over this one when slirp4netns A is up.
    let (uplink_r, uplink_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| (exit::START_FAILED, e.to_string()))?;
    // The host's address changes, subscribed here in the host's network
    // namespace before the holder exists (see `network::host_address_socket`).
    let host_netlink = match &plan.network {
        Some(_) => Some(network::host_address_socket().map_err(|e| (exit::START_FAILED, e))?),
        None => None,
    };
    // The published ports' host sides, bound here in the host's network
    // namespace, only at the addresses asked for: a taken one fails the
    // start before the holder exists. Only the holder keeps them.
    let host_ports = match &plan.network {
        Some(n) => lazaret_supervisor::ports::into_raw(
            lazaret_supervisor::ports::bind_host(&n.ports).map_err(|e| (exit::START_FAILED, e))?,
        ),
        None => Vec::new(),
    };
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
    .map_err(|e| (exit::START_FAILED, e.to_string()))?;
    drop(lazaret_supervisor::ports::from_raw(&host_ports));
    drop(ready_w);
    drop(uplink_r);
    drop(host_netlink);
    let mut ready = std::io::BufReader::new(std::fs::File::from(ready_r));
    let holder_line = |ready: &mut std::io::BufReader<std::fs::File>| {
        use std::io::BufRead;
        let mut line = String::new();
        let _ = ready.read_line(&mut line);
        line.trim().to_string()
    };
    let kill_holder = || {
        let _ = pidfd::send_signal(&holder_fd, rustix::process::Signal::KILL);
        let _ = nix::sys::wait::waitpid(holder, None);
    };

    let mut uplink = None;
    if let Some(net) = &plan.network {
        match Uplink::start(net, holder.as_raw()) {
            Ok(u) => {
                let _ = std::fs::File::from(uplink_w).write_all(b"u");
                uplink = Some(u);
            }
            Err(e) => {
                // The holder's own error, if it failed first, says more.
                drop(uplink_w);
                kill_holder();
                let line = holder_line(&mut ready);
                let detail = line
                    .strip_prefix("error ")
                    .map(str::to_string)
                    .unwrap_or(format!("network: uplink: {e}"));
                return Err((exit::START_FAILED, detail));
            }
        }
    } else {
        drop(uplink_w);
    }

    let line = holder_line(&mut ready);
    let Some(memory_fd) = line.strip_prefix("running ") else {
        let _ = nix::sys::wait::waitpid(holder, None);
        if let Some(u) = uplink {
            u.stop();
        }
        let detail = line
            .strip_prefix("error ")
            .unwrap_or("the sandbox holder exited");
        return Err((exit::START_FAILED, detail.to_string()));
    };
    // Before any session (see `memory`); without it, sessions only lose
    // the note on the memory bound.
    let memory = memory_fd.parse::<i32>().ok().and_then(|fd| {
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
    });
    if let Err(e) = channel.send(&FromSupervisor::Ready, &[holder_fd.as_fd()], MAX_RECORD) {
        kill_holder();
        if let Some(u) = uplink {
            u.stop();
        }
        return Err((
            exit::START_FAILED,
            format!("cannot tell the coordinator the sandbox is ready: {e}"),
        ));
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
    fn serve(&mut self, channel: &Channel) -> i32 {
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
    fn step(&mut self, channel: &Channel) -> Result<Option<End>, String> {
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
            Err(e) => return Err(format!("poll: {e}")),
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
    fn handle(&mut self, channel: &Channel) -> Result<Option<End>, String> {
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
                        sent.map_err(|e| format!("cannot answer the coordinator: {e}"))?;
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
                            .map_err(|e| format!("cannot answer the coordinator: {e}"))?;
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
    fn finish(self) {
        if let Some(u) = self.uplink {
            u.stop();
        }
    }
}

/// Removes the Domain's run directory, whose files belong to the
/// developer's subordinate IDs, from inside the mapped user namespace
/// (what `--remove-tree` does). True when it is gone.
fn remove_run_dir(plan: &SandboxPlan) -> bool {
    let dir = &plan.run_dir;
    if !dir.is_absolute() {
        return false;
    }
    if !dir.exists() {
        return true;
    }
    match userns::run_mapped(
        &plan.id_map,
        Command::new("rm").arg("-rf").arg("--").arg(dir),
    ) {
        Ok(s) if s.success() && !dir.exists() => true,
        other => {
            lazaret_protocol::log_line!(
                "lazaret-supervisor: could not remove {}: {other:?}",
                dir.display()
            );
            false
        }
    }
}

/// The confinement of `--scan-anchor`'s clone
/// (`lazaret_seccomp::binaries::supervisor_scan`).
const SCAN_CONFINEMENT: &str = "lazaret-supervisor-scan";

/// The most bytes of a scan summary read back from the clone.
const MAX_SCAN_SUMMARY: u64 = 16 << 20;

/// Confines the scanning clone: read beneath `upper` and `lower` only.
fn confine_scan(
    upper: &Path,
    lower: &Path,
    filters: &[(&'static str, lazaret_seccomp::BpfProgram)],
) -> Result<(), String> {
    use lazaret_seccomp::binaries::{PLACE_SCAN_LOWER, PLACE_SCAN_UPPER};
    use lazaret_seccomp::ruleset::Place;
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;
    let open = |p: &Path| {
        rustix::fs::open(
            p,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let up = open(upper).map_err(|e| format!("cannot open {}: {e}", upper.display()))?;
    let low = open(lower).ok();
    let mut places = vec![Place {
        place: PLACE_SCAN_UPPER,
        fd: up.as_fd(),
    }];
    if let Some(l) = &low {
        places.push(Place {
            place: PLACE_SCAN_LOWER,
            fd: l.as_fd(),
        });
    }
    lazaret_seccomp::binaries::supervisor_scan()
        .apply(&places, filters)
        .map_err(|e| format!("cannot confine the scan: {e}"))
}

/// `lazaret-supervisor --scan-anchor PATH UPPER LOWER`: prints the JSON
/// summary of a State Anchor's upper (never file contents), scanned from
/// inside the mapped user namespace where its directories are readable.
fn scan_anchor(args: &[String]) -> i32 {
    let [path, upper, lower] = args else {
        lazaret_protocol::log_line!("lazaret-supervisor: --scan-anchor takes PATH UPPER LOWER");
        return exit::BAD_PLAN;
    };
    // A scan only answers its `lazaret`: killed with it (a `state reset`
    // interrupted while it scans), it must not go on holding the Domain
    // Root, which the next `state` command would find in use.
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
        || nix::unistd::getppid().as_raw() == 1
    {
        return exit::START_FAILED;
    }
    let map = match userns::current_id_map() {
        Ok(m) => m,
        Err(e) => {
            lazaret_protocol::log_line!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    let (r, w) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            lazaret_protocol::log_line!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    // Decoded here: the clone's allow-list need not allow decoding.
    let filters = match lazaret_seccomp::filters(SCAN_CONFINEMENT) {
        Ok(f) => f,
        Err(e) => {
            lazaret_protocol::log_line!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    let w_raw = w.as_raw_fd();
    // This process is single-threaded, so the clone may allocate.
    let child = userns::clone_mapped(&map, CloneFlags::empty(), || {
        // Dies with the scan, as the scan dies with its `lazaret`.
        // SAFETY: prctl with an integer argument; nothing else is touched.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        // SAFETY: w_raw is the pipe's write end, inherited by the clone.
        let mut out = unsafe { std::fs::File::from_raw_fd(w_raw) };
        // The names it lists are the sandbox's: confined before the first.
        let result = confine_scan(Path::new(upper), Path::new(lower), &filters).and_then(|()| {
            lazaret_state::scan::scan(path, Path::new(upper), Path::new(lower), 1000)
                .map_err(|e| e.to_string())
        });
        let _ = serde_json::to_writer(&mut out, &result);
        0
    });
    drop(w);
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            lazaret_protocol::log_line!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    let mut json = String::new();
    let _ = std::io::Read::read_to_string(
        &mut std::io::Read::take(std::fs::File::from(r), MAX_SCAN_SUMMARY),
        &mut json,
    );
    let _ = nix::sys::wait::waitpid(child, None);
    match serde_json::from_str::<Result<lazaret_state::scan::Summary, String>>(&json) {
        Ok(Ok(summary)) => {
            println!("{}", serde_json::to_string(&summary).expect("json"));
            exit::STOPPED
        }
        Ok(Err(e)) => {
            lazaret_protocol::log_line!("lazaret-supervisor: cannot scan {upper}: {e}");
            exit::START_FAILED
        }
        Err(e) => {
            lazaret_protocol::log_line!(
                "lazaret-supervisor: the scan of {upper} gave no result: {e}"
            );
            exit::START_FAILED
        }
    }
}

/// `lazaret-supervisor --remove-tree DIR`: removes a Domain's transient
/// tree, whose files belong to the developer's subordinate IDs, from inside
/// the mapped user namespace. A separate single-threaded process, because
/// cloning a multi-threaded coordinator for it would not be safe. Used at
/// start-up (recovery) and by the CLI; a running Domain's run directory is
/// removed by its supervisor when it stops.
fn remove_tree(dir: Option<&Path>) -> i32 {
    let Some(dir) = dir.filter(|d| d.is_absolute()) else {
        lazaret_protocol::log_line!(
            "lazaret-supervisor: --remove-tree takes an absolute directory"
        );
        return exit::BAD_PLAN;
    };
    let map = match userns::current_id_map() {
        Ok(m) => m,
        Err(e) => {
            lazaret_protocol::log_line!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    match userns::run_mapped(&map, Command::new("rm").arg("-rf").arg("--").arg(dir)) {
        Ok(s) if s.success() && !dir.exists() => exit::STOPPED,
        other => {
            lazaret_protocol::log_line!(
                "lazaret-supervisor: could not remove {}: {other:?}",
                dir.display()
            );
            exit::START_FAILED
        }
    }
}

extern "C" fn noop(_: libc::c_int) {}

/// PID 1 of the Domain's PID namespace, ID 0 of its user namespace.
fn holder_main(
    plan: &SandboxPlan,
    ready_w: i32,
    uplink_r: i32,
    host_netlink: Option<i32>,
    host_ports: &[i32],
) -> isize {
    // SAFETY: ready_w is the pipe's write end, inherited by the clone.
    let mut ready = unsafe { std::fs::File::from_raw_fd(ready_w) };
    // SAFETY: the host netlink socket is the supervisor's, inherited by
    // the clone, which takes its copy over.
    let host_netlink = host_netlink.map(|fd| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    let host_ports = lazaret_supervisor::ports::from_raw(host_ports);
    match holder_start(plan, uplink_r, host_netlink, host_ports) {
        Ok((mut runsc, essential, sentry)) => {
            // Kept for the supervisor to open its own (see `memory`).
            let memory = plan.limits.memory.and_then(|_| {
                lazaret_supervisor::memory::find(Path::new("/proc"), sentry)
                    .map_err(|e| {
                        lazaret_protocol::log_line!(
                            "lazaret-supervisor: the sandbox's memory file is not watched: {e}"
                        )
                    })
                    .ok()
            });
            let fd = memory.as_ref().map(|f| f.as_raw_fd());
            let _ = writeln!(
                ready,
                "running {}",
                fd.map_or("-".into(), |f| f.to_string())
            );
            drop(ready);
            let code = holder_wait(plan, &mut runsc, essential);
            // Returning from the clone would end this thread only (glibc's
            // clone ends it with exit(2)), and the published ports' relay
            // threads would keep the holder alive: end them all.
            // SAFETY: _exit ends the process; nothing runs after it.
            unsafe { libc::_exit(code as i32) }
        }
        Err(msg) => {
            let _ = writeln!(ready, "error {msg}");
            exit::START_FAILED as isize
        }
    }
}

/// A child of the holder the sandbox cannot run without, and what to
/// call it when it exits.
type Essential = (u32, &'static str);

/// Starts everything up to a running sandbox; returns runsc and the
/// essential children's PIDs (the mount routers, the host-address watch).
fn holder_start(
    plan: &SandboxPlan,
    uplink_r: i32,
    host_netlink: Option<std::os::fd::OwnedFd>,
    host_ports: Vec<std::net::TcpListener>,
) -> Result<(std::process::Child, Vec<Essential>, i32), String> {
    use nix::mount::{mount, MsFlags};
    // Die with the supervisor.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("pdeathsig: {e}"))?;
    // PID 1 of a namespace receives only signals it handles: install real
    // handlers, then block them and take them with sigwait.
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        // SAFETY: noop is an async-signal-safe handler that does nothing.
        unsafe { signal::signal(s, SigHandler::Handler(noop)) }.map_err(|e| e.to_string())?;
    }
    SigSet::from_iter([Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD])
        .thread_block()
        .map_err(|e| e.to_string())?;

    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make the mount namespace private: {e}"))?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| format!("cannot mount /proc for the Domain's PID namespace: {e}"))?;
    lazaret_helpers::timeline::mark("holder", "namespaces-ready");

    // The network first: policy installed and probe passed, or no sandbox.
    let mut net = match (&plan.network, host_netlink) {
        (Some(n), Some(h)) => Some(network::setup_in_holder(n, uplink_r, h, host_ports)?),
        (Some(_), None) => return Err("network: no host netlink socket".into()),
        (None, _) => {
            // SAFETY: uplink_r is our inherited copy of the pipe's read
            // end, unused without a network.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(uplink_r) });
            None
        }
    };

    lazaret_helpers::timeline::mark("holder", "network-ready");
    let root = &plan.root;
    for d in [&root.upper, &root.work, &root.merged] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    match_root_attrs(&root.upper, &root.lower)?;
    let opts = format!(
        "userxattr,lowerdir={},upperdir={},workdir={}",
        lowers(plan.control_lower.as_deref(), "/", &root.lower),
        root.upper.display(),
        root.work.display()
    );
    mount(
        Some("lazaret-root"),
        &root.merged,
        Some("overlay"),
        MsFlags::empty(),
        Some(opts.as_str()),
    )
    .map_err(|e| format!("cannot mount the sandbox root overlay ({opts}): {e}"))?;

    lazaret_helpers::timeline::mark("holder", "root-overlay-mounted");
    mount_anchors(plan)?;
    lazaret_helpers::timeline::mark("holder", "anchors-mounted");
    // The router's mount must be live before runsc binds it; the router
    // is our child and lives in our PID namespace like everything else.
    let mut routers = Vec::new();
    for r in plan.router.iter().chain(&plan.git_router) {
        routers.push(lazaret_supervisor::router::start(r)?);
    }

    // Volumes by what one resolution found; the writable ones the plan
    // routes then through a router of their own, over what was pinned.
    let mut plan = lazaret_supervisor::volumes::pin(plan)?;
    routers.extend(lazaret_supervisor::volumes::route(&mut plan)?);
    let plan = &plan;
    lazaret_helpers::timeline::mark("holder", "routers-ready");
    let config = bundle::config_json(plan, net.as_ref().map(|n| n.netns_path.as_str()));
    // Whole or absent (written aside, then renamed): whoever reads the
    // bundle (runsc, `lazaret` tools, tests) never sees half of it.
    let part = plan.bundle_dir.join(".config.json.part");
    std::fs::write(&part, serde_json::to_vec_pretty(&config).expect("json"))
        .and_then(|()| std::fs::rename(&part, plan.bundle_dir.join("config.json")))
        .map_err(|e| format!("cannot write the OCI bundle: {e}"))?;
    if plan.network.as_ref().is_some_and(|n| n.hide_proc_sys_net) {
        network::hide_proc_sys_net()?;
    }
    if let Some(n) = &net {
        lazaret_protocol::log_line!(
            "lazaret-supervisor: network ready: keeper {}, slirp4netns B {}{}",
            n.keeper,
            n.slirp_b.id(),
            n.dns_filter
                .as_ref()
                .map(|f| format!(", lazaret-dns-filter {}", f.id()))
                .unwrap_or_default()
        );
    }

    std::fs::create_dir_all(&plan.state_dir).map_err(|e| e.to_string())?;
    let network_flag = if net.is_some() {
        "--network=sandbox"
    } else {
        "--network=none"
    };
    let argv = plan.runsc.command(
        &plan.state_dir,
        &[
            network_flag,
            "run",
            "--bundle",
            &plan.bundle_dir.to_string_lossy(),
            &plan.sandbox_id,
        ],
    );
    // The watch must be alive when the sandbox starts; after this, its
    // exit stops the Domain (`holder_wait`).
    if let Some(n) = net.as_mut() {
        if let Ok(Some(status)) = n.watch.try_wait() {
            return Err(format!(
                "network: host addresses: lazaret-netpolicy watch exited ({status}); see helpers.log in the Domain Root (`lazaret logs --helpers`)"
            ));
        }
    }
    lazaret_helpers::timeline::mark("holder", "runsc-run-spawn");
    let mut cmd = Command::new(&argv[0]);
    // runsc chowns the stdio it is given to the Sentry's uid: it gets pipes,
    // never our log file, and a thread copies what it says to our stderr.
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Signals blocked here would stay blocked in runsc.
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            SigSet::all()
                .thread_unblock()
                .map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", argv[0]))?;
    lazaret_helpers::fault::point("holder:runsc-run-spawned");
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        std::thread::spawn(move || {
            let mut stream = stream;
            let _ = std::io::copy(&mut stream, &mut std::io::stderr());
        });
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    // runsc rewrites its state file in the state directory at each step of
    // the start; each rewrite wakes this loop, which then asks `runsc
    // state` (the only interface it trusts). Polling is the fallback.
    let state_changes = StateChanges::watch(&plan.state_dir);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "runsc failed to start it ({status}); runsc's own messages are in helpers.log in the Domain Root (`lazaret logs --helpers`), and `lazaret doctor` checks what runsc needs"
            ));
        }
        if let Some((status, pid)) = runsc_state(plan) {
            if status == "running" {
                // Before any session: only our init has run inside.
                let sentry = pid.ok_or(lazaret_supervisor::limits::LimitsError::NoSentry);
                let sentry = match sentry.and_then(|pid| {
                    lazaret_supervisor::limits::apply_to_sentry(pid, &plan.sandbox_id, &plan.limits)
                        .map(|()| pid)
                }) {
                    Ok(pid) => pid,
                    Err(e) => {
                        let _ = child.kill();
                        return Err(format!("cannot bound the sandbox's memory: {e}"));
                    }
                };
                lazaret_helpers::timeline::mark("holder", "sandbox-running");
                let essential = routers
                    .iter()
                    .map(|r| (r.id(), "a mount router"))
                    .chain(net.as_ref().map(|n| {
                        (
                            n.watch.id(),
                            "the host-address watch (lazaret-netpolicy watch)",
                        )
                    }))
                    .collect();
                return Ok((child, essential, sentry));
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("runsc did not start the sandbox within 60 s".into());
        }
        state_changes.wait();
    }
}

/// Wake-ups for the wait until runsc has started the sandbox: an inotify
/// watch on runsc's state directory (a file closed after writing, or
/// renamed into it), else a fixed poll.
struct StateChanges(Option<std::os::fd::OwnedFd>);

impl StateChanges {
    /// Without a change seen, the state is asked for again after this
    /// long anyway (runsc's own exit is only seen this way).
    const FALLBACK: Duration = Duration::from_millis(50);
    /// Without a watch, the poll interval.
    const POLL: Duration = Duration::from_millis(15);

    fn watch(dir: &Path) -> StateChanges {
        use rustix::fs::inotify;
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .ok()
            .filter(|fd| {
                inotify::add_watch(
                    fd,
                    dir,
                    inotify::WatchFlags::CLOSE_WRITE | inotify::WatchFlags::MOVED_TO,
                )
                .is_ok()
            });
        StateChanges(fd)
    }

    /// Until something in the state directory changed (or the fallback
    /// passed); drains the events.
    fn wait(&self) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let Some(fd) = &self.0 else {
            std::thread::sleep(Self::POLL);
            return;
        };
        let timeout = Timespec {
            tv_sec: 0,
            tv_nsec: Self::FALLBACK.as_nanos() as _,
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        if poll(&mut fds, Some(&timeout)).is_ok_and(|n| n > 0) {
            let mut buf = [0u8; 4096];
            while rustix::io::read(fd, &mut buf).is_ok_and(|n| n > 0) {}
        }
    }
}

/// The merged directory of an overlay takes its mode and owner from the
/// upper's root: make them the image's, not those of a fresh private
/// directory (`/etc` must stay 0755 and root's).
fn match_root_attrs(upper: &Path, lower: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(md) = std::fs::metadata(lower) else {
        return Ok(());
    };
    std::os::unix::fs::chown(upper, Some(md.uid()), Some(md.gid()))
        .and_then(|_| {
            std::fs::set_permissions(upper, std::fs::Permissions::from_mode(md.mode() & 0o7777))
        })
        .map_err(|e| format!("cannot set the owner and mode of {}: {e}", upper.display()))
}

/// The `lowerdir` list for sandbox path `path`: the control layer's part
/// for that path, when it has one, above the image's.
fn lowers(control: Option<&Path>, path: &str, image: &Path) -> String {
    match control.map(|c| c.join(path.trim_start_matches('/'))) {
        Some(c) if c.is_dir() => format!("{}:{}", c.display(), image.display()),
        _ => image.display().to_string(),
    }
}

/// Overlays each State Anchor's upper on the image's copy of its path.
fn mount_anchors(plan: &SandboxPlan) -> Result<(), String> {
    use nix::mount::{mount, MsFlags};
    let empty = plan.bundle_dir.join("empty-lower");
    for a in &plan.anchors {
        let lower = match &a.lower {
            Some(l) => l.clone(),
            None => {
                std::fs::create_dir_all(&empty).map_err(|e| e.to_string())?;
                empty.clone()
            }
        };
        std::fs::create_dir_all(&a.merged)
            .map_err(|e| format!("cannot create {}: {e}", a.merged.display()))?;
        match_root_attrs(&a.upper, &lower)?;
        let opts = format!(
            "userxattr,lowerdir={},upperdir={},workdir={}",
            lowers(plan.control_lower.as_deref(), &a.path, &lower),
            a.upper.display(),
            a.work.display()
        );
        mount(
            Some("lazaret-anchor"),
            &a.merged,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
        .map_err(|e| format!("cannot mount the State Anchor for {} ({opts}): {e}", a.path))?;
    }
    Ok(())
}

/// `runsc state`: the status and the sandbox (Sentry) process.
fn runsc_state(plan: &SandboxPlan) -> Option<(String, Option<i32>)> {
    let argv = plan
        .runsc
        .command(&plan.state_dir, &["state", &plan.sandbox_id]);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let status = v.get("status")?.as_str()?.to_string();
    let pid = v
        .get("pid")
        .and_then(serde_json::Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p > 0);
    Some((status, pid))
}

fn holder_wait(
    plan: &SandboxPlan,
    runsc: &mut std::process::Child,
    essential: Vec<Essential>,
) -> isize {
    let set = SigSet::from_iter([Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD]);
    loop {
        match set.wait() {
            Ok(Signal::SIGCHLD) => {
                // Reap whatever ended (PID 1 inherits orphans).
                loop {
                    match nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
                    {
                        Ok(nix::sys::wait::WaitStatus::StillAlive) | Err(_) => break,
                        Ok(s) if s.pid() == Some(nix::unistd::Pid::from_raw(runsc.id() as i32)) => {
                            lazaret_protocol::log_line!(
                                "lazaret-supervisor: runsc run exited unexpectedly: {s:?}"
                            );
                            return exit::SANDBOX_LOST as isize;
                        }
                        // Without its router the workspace is gone (the
                        // sandbox sees ENOTCONN, never host content);
                        // without the watch, an address the host gains
                        // would stay reachable: stop the Domain, so the
                        // next start brings them back.
                        Ok(s) => {
                            let gone = essential.iter().find(|(p, _)| {
                                s.pid() == Some(nix::unistd::Pid::from_raw(*p as i32))
                            });
                            if let Some((_, what)) = gone {
                                lazaret_protocol::log_line!("lazaret-supervisor: {what} exited ({s:?}): stopping the sandbox");
                                stop(plan, runsc);
                                return exit::SANDBOX_LOST as isize;
                            }
                        }
                    }
                }
            }
            Ok(_) => return stop(plan, runsc),
            Err(_) => return exit::SANDBOX_LOST as isize,
        }
    }
}

fn stop(plan: &SandboxPlan, runsc: &mut std::process::Child) -> isize {
    let run = |args: &[&str]| {
        let argv = plan.runsc.command(&plan.state_dir, args);
        let _ = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    run(&["kill", "--all", &plan.sandbox_id, "KILL"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = runsc.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    run(&["delete", "--force", &plan.sandbox_id]);
    let _ = std::fs::remove_dir_all(Path::new(&plan.state_dir));
    exit::STOPPED as isize
}
