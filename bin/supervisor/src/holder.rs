//! The sandbox holder: PID 1 of the Domain's PID namespace, root of its
//! user namespace, in its own mount and network namespaces. It mounts the
//! root overlay and the State Anchors, starts the Network Sidecar's
//! processes in order, runs `runsc run`, and waits.

use lazaret_protocol::plan::SandboxPlan;
use lazaret_supervisor::network;
use lazaret_supervisor::{bundle, exit};
use nix::sys::signal::{self, SigHandler, SigSet, Signal};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

extern "C" fn noop(_: libc::c_int) {}

/// Why the holder did not start the sandbox. The supervisor gets the
/// message on the readiness pipe (`error MESSAGE`) and hands it on as
/// the start's failure.
#[derive(Debug, thiserror::Error)]
enum HolderError {
    #[error(transparent)]
    Network(#[from] network::NetworkError),
    #[error(transparent)]
    Router(#[from] lazaret_supervisor::router::RouterError),
    #[error(transparent)]
    Volume(#[from] lazaret_supervisor::volumes::VolumeError),
    #[error("pdeathsig: {0}")]
    DeathSignal(nix::errno::Errno),
    /// The handlers or the mask of the signals PID 1 waits for.
    #[error("{0}")]
    Signals(nix::errno::Errno),
    #[error("cannot make the mount namespace private: {0}")]
    PrivateMounts(nix::errno::Errno),
    #[error("cannot mount /proc for the Domain's PID namespace: {0}")]
    Proc(nix::errno::Errno),
    #[error("network: no host netlink socket")]
    NoHostNetlink,
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot set the owner and mode of {}: {source}", path.display())]
    RootAttrs {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot mount the sandbox root overlay ({opts}): {source}")]
    RootOverlay {
        opts: String,
        source: nix::errno::Errno,
    },
    /// The empty lower of a State Anchor absent from the image.
    #[error("{0}")]
    EmptyLower(std::io::Error),
    #[error("cannot mount the State Anchor for {path} ({opts}): {source}")]
    Anchor {
        path: String,
        opts: String,
        source: nix::errno::Errno,
    },
    #[error("cannot write the OCI bundle: {0}")]
    BundleEncode(serde_json::Error),
    #[error("cannot write the OCI bundle: {0}")]
    BundleWrite(std::io::Error),
    /// runsc's state directory.
    #[error("{0}")]
    StateDir(std::io::Error),
    #[error("network: host addresses: lazaret-netpolicy watch exited ({0}); see helpers.log in the Domain Root (`lazaret logs --helpers`)")]
    WatchExited(std::process::ExitStatus),
    #[error("cannot start {program}: {source}")]
    SpawnRunsc {
        program: String,
        source: std::io::Error,
    },
    #[error("runsc failed to start it ({0}); runsc's own messages are in helpers.log in the Domain Root (`lazaret logs --helpers`), and `lazaret doctor` checks what runsc needs")]
    RunscFailed(std::process::ExitStatus),
    #[error("runsc did not start the sandbox within 60 s")]
    RunscTimeout,
    #[error("cannot bound the sandbox's memory: {0}")]
    Memory(lazaret_supervisor::limits::LimitsError),
}

impl HolderError {
    fn create(path: &Path) -> impl FnOnce(std::io::Error) -> HolderError {
        let path = path.to_path_buf();
        move |source| HolderError::Create { path, source }
    }
}

/// PID 1 of the Domain's PID namespace, ID 0 of its user namespace.
pub(crate) fn holder_main(
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
) -> Result<(std::process::Child, Vec<Essential>, i32), HolderError> {
    enter_namespaces()?;
    lazaret_helpers::timeline::mark("holder", "namespaces-ready");

    // The network first: policy installed and probe passed, or no sandbox.
    let mut net = start_network(plan, uplink_r, host_netlink, host_ports)?;

    lazaret_helpers::timeline::mark("holder", "network-ready");
    mount_root(plan)?;

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
    write_bundle(plan, net.as_ref())?;
    let mut child = spawn_runsc(plan, net.as_mut())?;

    let deadline = Instant::now() + Duration::from_secs(60);
    // runsc rewrites its state file in the state directory at each step of
    // the start; each rewrite wakes this loop, which then asks `runsc
    // state` (the only interface it trusts). Polling is the fallback.
    let state_changes = StateChanges::watch(&plan.state_dir);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(HolderError::RunscFailed(status));
        }
        if let Some((status, pid)) = runsc_state(plan) {
            if status == "running" {
                let sentry = bound_sentry(plan, &mut child, pid)?;
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
            return Err(HolderError::RunscTimeout);
        }
        state_changes.wait();
    }
}

/// The holder's own set-up as PID 1 of its namespaces: it dies with the
/// supervisor, takes its signals by sigwait, and has a private mount
/// namespace with its own `/proc`.
fn enter_namespaces() -> Result<(), HolderError> {
    use nix::mount::{mount, MsFlags};
    // Die with the supervisor.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(HolderError::DeathSignal)?;
    // PID 1 of a namespace receives only signals it handles: install real
    // handlers, then block them and take them with sigwait.
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        // SAFETY: noop is an async-signal-safe handler that does nothing.
        unsafe { signal::signal(s, SigHandler::Handler(noop)) }.map_err(HolderError::Signals)?;
    }
    SigSet::from_iter([Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD])
        .thread_block()
        .map_err(HolderError::Signals)?;

    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(HolderError::PrivateMounts)?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(HolderError::Proc)
}

/// The Network Sidecar's processes, up to a passed probe, where the plan
/// has a network; without one, the uplink pipe is closed.
fn start_network(
    plan: &SandboxPlan,
    uplink_r: i32,
    host_netlink: Option<std::os::fd::OwnedFd>,
    host_ports: Vec<std::net::TcpListener>,
) -> Result<Option<network::HolderNet>, HolderError> {
    match (&plan.network, host_netlink) {
        (Some(n), Some(h)) => Ok(Some(network::setup_in_holder(n, uplink_r, h, host_ports)?)),
        (Some(_), None) => Err(HolderError::NoHostNetlink),
        (None, _) => {
            // SAFETY: uplink_r is our inherited copy of the pipe's read
            // end, unused without a network.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(uplink_r) });
            Ok(None)
        }
    }
}

/// Mounts the sandbox's root overlay: the image below our control layer,
/// with the generation's upper directory.
fn mount_root(plan: &SandboxPlan) -> Result<(), HolderError> {
    use nix::mount::{mount, MsFlags};
    let root = &plan.root;
    for d in [&root.upper, &root.work, &root.merged] {
        std::fs::create_dir_all(d).map_err(HolderError::create(d))?;
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
    .map_err(|source| HolderError::RootOverlay { opts, source })
}

/// Writes the OCI bundle's `config.json`, hides `/proc/sys/net` where the
/// plan asks, and says which network processes run.
fn write_bundle(plan: &SandboxPlan, net: Option<&network::HolderNet>) -> Result<(), HolderError> {
    let config = bundle::config_json(plan, net.map(|n| n.netns_path.as_str()));
    // Whole or absent (written aside, then renamed): whoever reads the
    // bundle (runsc, `lazaret` tools, tests) never sees half of it.
    let part = plan.bundle_dir.join(".config.json.part");
    let config = serde_json::to_vec_pretty(&config).map_err(HolderError::BundleEncode)?;
    std::fs::write(&part, config)
        .and_then(|()| std::fs::rename(&part, plan.bundle_dir.join("config.json")))
        .map_err(HolderError::BundleWrite)?;
    if plan.network.as_ref().is_some_and(|n| n.hide_proc_sys_net) {
        network::hide_proc_sys_net()?;
    }
    if let Some(n) = net {
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
    Ok(())
}

/// Starts `runsc run` on the bundle, once the host-address watch is seen
/// alive; a thread copies each of its output pipes to our stderr.
fn spawn_runsc(
    plan: &SandboxPlan,
    net: Option<&mut network::HolderNet>,
) -> Result<std::process::Child, HolderError> {
    std::fs::create_dir_all(&plan.state_dir).map_err(HolderError::StateDir)?;
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
    if let Some(n) = net {
        if let Ok(Some(status)) = n.watch.try_wait() {
            return Err(HolderError::WatchExited(status));
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
    lazaret_helpers::child::set_signals(
        &mut cmd,
        lazaret_helpers::child::ChildSignals::UNBLOCK_ALL,
    );
    let mut child = cmd.spawn().map_err(|source| HolderError::SpawnRunsc {
        program: argv[0].clone(),
        source,
    })?;
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
    Ok(child)
}

/// Bounds the running sandbox's memory through its Sentry (`pid`, from
/// `runsc state`), before any session: only our init has run inside. A
/// sandbox that cannot be bounded is killed.
fn bound_sentry(
    plan: &SandboxPlan,
    child: &mut std::process::Child,
    pid: Option<i32>,
) -> Result<i32, HolderError> {
    let sentry = pid.ok_or(lazaret_supervisor::limits::LimitsError::NoSentry);
    match sentry.and_then(|pid| {
        lazaret_supervisor::limits::apply_to_sentry(pid, &plan.sandbox_id, &plan.limits)
            .map(|()| pid)
    }) {
        Ok(pid) => Ok(pid),
        Err(e) => {
            let _ = child.kill();
            Err(HolderError::Memory(e))
        }
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
fn match_root_attrs(upper: &Path, lower: &Path) -> Result<(), HolderError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(md) = std::fs::metadata(lower) else {
        return Ok(());
    };
    std::os::unix::fs::chown(upper, Some(md.uid()), Some(md.gid()))
        .and_then(|_| {
            std::fs::set_permissions(upper, std::fs::Permissions::from_mode(md.mode() & 0o7777))
        })
        .map_err(|source| HolderError::RootAttrs {
            path: upper.to_path_buf(),
            source,
        })
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
fn mount_anchors(plan: &SandboxPlan) -> Result<(), HolderError> {
    use nix::mount::{mount, MsFlags};
    let empty = plan.bundle_dir.join("empty-lower");
    for a in &plan.anchors {
        let lower = match &a.lower {
            Some(l) => l.clone(),
            None => {
                std::fs::create_dir_all(&empty).map_err(HolderError::EmptyLower)?;
                empty.clone()
            }
        };
        std::fs::create_dir_all(&a.merged).map_err(HolderError::create(&a.merged))?;
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
        .map_err(|source| HolderError::Anchor {
            path: a.path.clone(),
            opts,
            source,
        })?;
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

pub(crate) fn stop(plan: &SandboxPlan, runsc: &mut std::process::Child) -> isize {
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
