//! The Network Sidecar's processes and order (see `lib/netpolicy/README.md`):
//!
//! ```text
//! supervisor (host netns) ── slirp4netns A ── tap0 of N1 = the holder's netns (enforcement)
//! holder (root of U, N1) ─── keeper K: unshare(CLONE_NEWNET) = N2 (sandbox netns)
//!                        ├── lazaret-netpolicy install (routes in N1, IPv6 off in N1 and N2)
//!                        ├── lazaret-netpolicy watch (for the Domain's life: denies in N1
//!                        │     each address the host gains; reads them through a host
//!                        │     netlink socket the supervisor bound before the holder existed)
//!                        ├── slirp4netns B (in U + N1, so N1's routes apply) ── tap0 of N2
//!                        ├── with published ports: their forwards in slirp B, and the
//!                        │     relay from the host sockets to them (`crate::ports`)
//!                        ├── lazaret-netpolicy probe (from N2: denied refused, resolvers answer)
//!                        └── runsc run --network=sandbox, spec netns = /proc/K/ns/net
//! ```
//!
//! This module enforces the order and fails closed: every step's failure
//! is an error naming the step, and `runsc run` is never started after
//! one. It leaves the policy itself to `lazaret-netpolicy`, which checks
//! the digest, installs, attests and probes.
//!
//! Lifetimes: K and slirp B live in the holder's PID namespace and die
//! with it. slirp A lives in the host's; it dies with the supervisor
//! (`PR_SET_PDEATHSIG`, and its `--exit-fd` closes with the supervisor),
//! and the supervisor stops it after the holder.

use lazaret_helpers::memfd;
use lazaret_helpers::pidfd::Tracked;
use lazaret_protocol::fdno;
use lazaret_protocol::netreport::{NetReport, MAX_REPORT_BYTES};
use lazaret_protocol::plan::{DnsFilterPlan, SandboxNetwork};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Why a step of the Network Sidecar failed. The start fails closed on
/// any of them; [`NetworkError::Step`] names the step.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// `stage` of the holder's set-up failed.
    #[error("network: {stage}: {source}")]
    Step {
        stage: &'static str,
        source: Box<NetworkError>,
    },
    /// A pipe (for readiness, or slirp's exit) could not be made.
    #[error("{0}")]
    Pipe(rustix::io::Errno),
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} has no stdout pipe")]
    NoStdout { program: String },
    /// Waiting for `what` to say it is ready failed.
    #[error("{what}: {source}")]
    Poll {
        what: &'static str,
        source: nix::errno::Errno,
    },
    /// `status` is how it ended once killed, empty when unknown.
    #[error("{what} did not become ready within {} s ({status}); see its messages in helpers.log in the Domain Root (`lazaret logs --helpers`)", SLIRP_READY.as_secs())]
    NotReady { what: &'static str, status: String },
    /// slirp A's process could not be tracked by a pidfd.
    #[error("{0}")]
    Pidfd(lazaret_helpers::pidfd::PidfdError),
    #[error("network: host addresses: cannot open a netlink socket: {0}")]
    NetlinkSocket(rustix::io::Errno),
    #[error("network: host addresses: cannot subscribe to the host's address changes: {0}")]
    NetlinkSubscribe(rustix::io::Errno),
    #[error("fork: {0}")]
    Fork(nix::errno::Errno),
    #[error("the keeper could not create a network namespace (unshare CLONE_NEWNET)")]
    Keeper,
    #[error("cannot open {path}: {source}")]
    OpenNetns {
        path: String,
        source: std::io::Error,
    },
    #[error("slirp4netns A did not configure the enforcement namespace")]
    NoUplink,
    #[error("the helper's report has no attestation")]
    NoAttestation,
    #[error(
        "the Network Sidecar attested another network attachment ({attested:?}), not {expected:?}"
    )]
    OtherAttachment { attested: String, expected: String },
    #[error("cannot bind {} over /etc/resolv.conf in the holder's mount namespace: {source}", path.display())]
    BindResolvConf {
        path: std::path::PathBuf,
        source: nix::errno::Errno,
    },
    #[error("cannot open {}: {source}", path.display())]
    OpenLog {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The sealed policy's memfd.
    #[error("{0}")]
    Memfd(memfd::MemfdError),
    /// The sandbox network namespace could not be handed to the helper.
    #[error("{0}")]
    Netns(std::io::Error),
    #[error("cannot run {}: {source}", helper.display())]
    RunHelper {
        helper: std::path::PathBuf,
        source: std::io::Error,
    },
    /// `lazaret-netpolicy` failed: its failing stage (`None` when it is
    /// the mode it ran) and message.
    #[error("{}{message}", stage.as_ref().map(|s| format!("{s}: ")).unwrap_or_default())]
    Helper {
        stage: Option<String>,
        message: String,
    },
    #[error(transparent)]
    Ports(#[from] crate::ports::PortsError),
    #[error("network: runsc workaround: cannot mount a tmpfs over /proc/sys/net: {0}")]
    HideProcSysNet(nix::errno::Errno),
}

/// The slirp link's MTU, as the policy's `Link` says.
const MTU: &str = "--mtu=65520";
/// How long a slirp4netns (or the DNS filter) may take to report ready.
const SLIRP_READY: Duration = Duration::from_secs(20);

/// Sets up the child of a helper of ours: `fds` open at their numbers,
/// no signal blocked, and killed when the thread that started it exits.
fn hand_over(cmd: &mut Command, fds: Vec<(OwnedFd, RawFd)>) {
    lazaret_helpers::child::setup(
        cmd,
        lazaret_helpers::child::Setup {
            fds,
            signals: lazaret_helpers::child::ChildSignals::UNBLOCK_ALL_DIE_WITH_PARENT,
            ..Default::default()
        },
    );
}

/// slirp4netns as both of ours start: named for `role` and the Domain in
/// argv (for `ps` and the tests), with the options they share (ready on
/// [`fdno::slirp4netns::READY`]).
fn slirp_command(net: &SandboxNetwork, role: &str) -> Command {
    let mut cmd = Command::new(&net.slirp4netns);
    cmd.arg0(format!(
        "slirp4netns-{role}:lazaret-domain={}",
        net.domain_id
    ))
    .args([
        "--configure",
        MTU,
        "--disable-host-loopback",
        "--enable-sandbox",
        "--enable-seccomp",
    ])
    .arg(format!("--ready-fd={}", fdno::slirp4netns::READY));
    cmd
}

/// Waits until `r` delivers one byte (slirp4netns' `--ready-fd`, the first
/// of the DNS filter's and the watch's
/// [`lazaret_protocol::readiness::READY_LINE`]).
fn wait_ready(r: OwnedFd, what: &'static str, child: &mut Child) -> Result<(), NetworkError> {
    let f = std::fs::File::from(r);
    let mut pfd = [nix::poll::PollFd::new(
        f.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let ms = SLIRP_READY.as_millis() as u16;
    let n = nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(ms))
        .map_err(|source| NetworkError::Poll { what, source })?;
    let mut b = [0u8; 1];
    if n == 1 && (&f).read(&mut b).map(|k| k == 1).unwrap_or(false) {
        return Ok(());
    }
    let _ = child.kill();
    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
    Err(NetworkError::NotReady { what, status })
}

/// slirp4netns A, started by the supervisor from the host's network
/// namespace into the holder's (N1), tracked by the pidfd taken at spawn.
pub struct Uplink {
    child: Tracked,
    /// Closing it (POLLHUP on slirp's `--exit-fd`) stops slirp A.
    exit_w: Option<OwnedFd>,
}

impl Uplink {
    pub fn start(net: &SandboxNetwork, holder_pid: i32) -> Result<Uplink, NetworkError> {
        let (ready_r, ready_w) = pipe()?;
        let (exit_r, exit_w) = pipe()?;
        let mut cmd = slirp_command(net, "uplink");
        cmd.arg(format!("--exit-fd={}", fdno::slirp4netns::EXIT))
            .arg(holder_pid.to_string())
            .arg("tap0")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        hand_over(
            &mut cmd,
            vec![
                (ready_w, fdno::slirp4netns::READY),
                (exit_r, fdno::slirp4netns::EXIT),
            ],
        );
        let mut child = spawn_slirp(&mut cmd, net)?;
        drop(cmd);
        wait_ready(ready_r, "slirp4netns A (the uplink)", &mut child)?;
        Ok(Uplink {
            child: Tracked::new(child).map_err(NetworkError::Pidfd)?,
            exit_w: Some(exit_w),
        })
    }

    /// Polls readable once slirp A has exited.
    pub fn pidfd(&self) -> &OwnedFd {
        &self.child.pidfd
    }

    /// Stops slirp A: its exit fd first, SIGKILL (by pidfd) after a grace
    /// period, then reaps it.
    pub fn stop(mut self) {
        drop(self.exit_w.take());
        for _ in 0..100 {
            if self.child.exited() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if !self.child.exited() {
            let _ = self.child.signal(rustix::process::Signal::KILL);
        }
        let _ = self.child.child.wait();
    }
}

/// The multicast group of IPv4 address changes (`RTMGRP_IPV4_IFADDR`).
const RTMGRP_IPV4_IFADDR: u32 = 0x10;

/// A NETLINK_ROUTE socket of the host's network namespace (the caller's),
/// subscribed to its IPv4 address changes: made before the holder, handed
/// to `lazaret-netpolicy watch`, which can only read through it (the
/// kernel checks changes against this namespace, where the watch holds no
/// capability). Subscribed before the watch dumps the addresses, so no
/// address added in between is missed.
pub fn host_address_socket() -> Result<OwnedFd, NetworkError> {
    use rustix::net::{netlink::SocketAddrNetlink, AddressFamily, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(NetworkError::NetlinkSocket)?;
    rustix::net::bind(&fd, &SocketAddrNetlink::new(0, RTMGRP_IPV4_IFADDR))
        .map_err(NetworkError::NetlinkSubscribe)?;
    Ok(fd)
}

/// What the holder keeps of the network after set-up.
pub struct HolderNet {
    /// `/proc/K/ns/net` in the holder's `/proc`: the bundle's netns path.
    pub netns_path: String,
    pub keeper: i32,
    pub slirp_b: Child,
    /// `lazaret-netpolicy watch`: the Domain stops if it exits.
    pub watch: Child,
    /// `lazaret-dns-filter`, with `allow_hosts`.
    pub dns_filter: Option<Child>,
}

/// Fails closed: the error names the step.
fn step<E: Into<NetworkError>>(stage: &'static str) -> impl Fn(E) -> NetworkError {
    move |e| NetworkError::Step {
        stage,
        source: Box::new(e.into()),
    }
}

/// A close-on-exec pipe.
fn pipe() -> Result<(OwnedFd, OwnedFd), NetworkError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(NetworkError::Pipe)
}

/// Spawns one of the slirp4netns.
fn spawn_slirp(cmd: &mut Command, net: &SandboxNetwork) -> Result<Child, NetworkError> {
    cmd.spawn().map_err(|source| NetworkError::Spawn {
        program: net.slirp4netns.display().to_string(),
        source,
    })
}

/// In the holder (PID 1 of the Domain's PID namespace, root of U, in N1),
/// after `/proc` is mounted: everything up to a passed probe. `uplink_r`
/// delivers one byte once slirp A configured N1's tap0; `host_netlink`
/// is [`host_address_socket`]'s; `host_ports` are the published ports'
/// host sockets ([`crate::ports::bind_host`]), in `net.ports`' order.
pub fn setup_in_holder(
    net: &SandboxNetwork,
    uplink_r: RawFd,
    host_netlink: OwnedFd,
    host_ports: Vec<std::net::TcpListener>,
) -> Result<HolderNet, NetworkError> {
    let keeper = fork_keeper().map_err(step("sandbox namespace"))?;
    let netns_path = format!("/proc/{keeper}/ns/net");
    let netns = std::fs::File::open(&netns_path)
        .map_err(|source| NetworkError::OpenNetns {
            path: netns_path.clone(),
            source,
        })
        .map_err(step("sandbox namespace"))?;

    wait_uplink(uplink_r)?;
    let fingerprint = install_policy(net, &netns)?;
    // The host's addresses the policy does not list (gained since it was
    // derived) are denied once the watch is ready, and every later one as
    // it comes. It starts now and is waited for before the probe, so its
    // start overlaps slirp B's, and the sandbox never runs without it.
    let (mut watch, watch_ready) =
        spawn_with_ready_line(watch_command(net, host_netlink).map_err(step("host addresses"))?)
            .map_err(step("host addresses"))?;

    // slirp B's DNS forwarder (10.0.2.3 in N2) reads this mount
    // namespace's resolv.conf: make it the policy's, or the filtering
    // resolver's (`allow_hosts`), which must listen before slirp B runs.
    let dns_filter = start_resolver(net)?;

    let slirp_b = start_slirp_b(net, &netns_path).map_err(step("slirp4netns B"))?;
    if !net.ports.is_empty() {
        crate::ports::publish(&net.api_socket_dir, &net.ports, host_ports)
            .map_err(step("published ports"))?;
    }
    wait_ready(watch_ready, "lazaret-netpolicy watch", &mut watch)
        .map_err(step("host addresses"))?;
    lazaret_helpers::timeline::mark("holder", "host-watch-ready");

    run_helper(net, &netns, "probe", &["--fingerprint", &fingerprint]).map_err(step("probe"))?;
    Ok(HolderNet {
        netns_path,
        keeper,
        slirp_b,
        watch,
        dns_filter,
    })
}

/// Waits for slirp4netns A to have configured N1's tap0: one byte on
/// `uplink_r`, which this function takes over and closes.
fn wait_uplink(uplink_r: RawFd) -> Result<(), NetworkError> {
    // SAFETY: uplink_r is the read end of the supervisor's pipe, inherited
    // by the clone; this function takes it over.
    let mut uplink = unsafe { std::fs::File::from_raw_fd(uplink_r) };
    let mut b = [0u8; 1];
    if !matches!(uplink.read(&mut b), Ok(1)) {
        return Err(step("uplink")(NetworkError::NoUplink));
    }
    drop(uplink);
    Ok(())
}

/// Installs the policy in the enforcement namespace (`lazaret-netpolicy
/// install`), checks that its attestation names this generation's network
/// attachment, and returns the installed policy's fingerprint.
fn install_policy(net: &SandboxNetwork, netns: &std::fs::File) -> Result<String, NetworkError> {
    let install = run_helper(net, netns, "install", &[]).map_err(step("install"))?;
    let attestation = install
        .attestation
        .ok_or_else(|| step("install")(NetworkError::NoAttestation))?;
    check_attachment(&attestation.binding, &net.attachment).map_err(step("install"))?;
    Ok(attestation.fingerprint)
}

/// Starts the filtering resolver where the profile has `allow_hosts`, then
/// binds the resolver configuration slirp B's DNS forwarder must read over
/// this mount namespace's `/etc/resolv.conf`.
fn start_resolver(net: &SandboxNetwork) -> Result<Option<Child>, NetworkError> {
    let sidecar_resolv = net
        .dns_filter
        .as_ref()
        .map_or(&net.resolv_conf, |f| &f.sidecar_resolv_conf);
    let dns_filter = match &net.dns_filter {
        None => None,
        Some(f) => {
            let child = start_dns_filter(net, f).map_err(step("filtering resolver"))?;
            lazaret_helpers::timeline::mark("holder", "dns-filter-ready");
            Some(child)
        }
    };
    nix::mount::mount(
        Some(sidecar_resolv),
        "/etc/resolv.conf",
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|source| NetworkError::BindResolvConf {
        path: sidecar_resolv.clone(),
        source,
    })
    .map_err(step("resolver"))?;
    Ok(dns_filter)
}

/// Opens a helper's log in the Domain Root for appending (the helpers
/// hold no file access of their own).
fn open_log(path: &Path) -> Result<OwnedFd, NetworkError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|source| NetworkError::OpenLog {
            path: path.to_path_buf(),
            source,
        })
}

/// A helper of N1 that holds the sealed policy (`lazaret-netpolicy
/// watch`, `lazaret-dns-filter`): `binary`, named `NAME:lazaret-domain=ID`
/// in argv (for `ps` and the tests), given `args` then `--digest`, with no
/// standard input and our standard error. Returns it with the policy's
/// memfd and its log `log` (opened for appending), for the caller to pass.
fn policy_helper(
    net: &SandboxNetwork,
    binary: &Path,
    name: &str,
    args: &[&str],
    log: &Path,
) -> Result<(Command, OwnedFd, OwnedFd), NetworkError> {
    let policy = memfd::sealed("network-policy", &net.policy).map_err(NetworkError::Memfd)?;
    let log = open_log(log)?;
    let mut cmd = Command::new(binary);
    cmd.arg0(format!("{name}:lazaret-domain={}", net.domain_id))
        .args(args)
        .args(["--digest", &net.digest])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    Ok((cmd, policy, log))
}

/// `lazaret-netpolicy watch` in N1 with the sealed policy, the host
/// netlink socket and its log ([`fdno::netpolicy_watch`]); it prints
/// [`lazaret_protocol::readiness::READY_LINE`] once the host's addresses
/// are denied and it is confined.
fn watch_command(net: &SandboxNetwork, host_netlink: OwnedFd) -> Result<Command, NetworkError> {
    let (mut cmd, policy, log) = policy_helper(
        net,
        &net.helper,
        "lazaret-netpolicy-watch",
        &["watch"],
        &net.host_watch_log,
    )?;
    use fdno::netpolicy_watch as to;
    hand_over(
        &mut cmd,
        vec![
            (policy, to::POLICY),
            (host_netlink, to::HOST_NETLINK),
            (log, to::LOG),
        ],
    );
    Ok(cmd)
}

/// Spawns a helper that prints a line on stdout once it is ready (and
/// confined); returns it and that stdout, for [`wait_ready`].
fn spawn_with_ready_line(mut cmd: Command) -> Result<(Child, OwnedFd), NetworkError> {
    cmd.stdout(Stdio::piped());
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(source) => return Err(NetworkError::Spawn { program, source }),
    };
    drop(cmd);
    match child.stdout.take() {
        Some(stdout) => Ok((child, OwnedFd::from(stdout))),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(NetworkError::NoStdout { program })
        }
    }
}

/// `lazaret-dns-filter` in N1 with the sealed policy and its log
/// ([`fdno::dns_filter`]); returns once it printed
/// [`lazaret_protocol::readiness::READY_LINE`] (it listens and is
/// confined).
fn start_dns_filter(net: &SandboxNetwork, plan: &DnsFilterPlan) -> Result<Child, NetworkError> {
    let (mut cmd, policy, log) =
        policy_helper(net, &plan.binary, "lazaret-dns-filter", &[], &plan.log)?;
    hand_over(
        &mut cmd,
        vec![
            (policy, fdno::dns_filter::POLICY),
            (log, fdno::dns_filter::LOG),
        ],
    );
    let (mut child, ready) = spawn_with_ready_line(cmd)?;
    wait_ready(ready, "lazaret-dns-filter", &mut child)?;
    Ok(child)
}

/// Only where runsc's root-network-namespace check would fire (it has the
/// check and this kernel shows `/proc/sys/net/core/rmem_default` in a fresh
/// network namespace: `RunscInfo::needs_proc_sys_net_hack`): hides
/// `/proc/sys/net` in the holder's mount namespace, after the helper no
/// longer needs it.
pub fn hide_proc_sys_net() -> Result<(), NetworkError> {
    use nix::mount::MsFlags;
    nix::mount::mount(
        Some("lazaret-hide"),
        "/proc/sys/net",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=4k,mode=555"),
    )
    .map_err(NetworkError::HideProcSysNet)
}

/// Forks the keeper K: it leaves for a new network namespace (N2, owned
/// by U because K is in U) and waits to be killed with the holder.
fn fork_keeper() -> Result<i32, NetworkError> {
    let (r, w) = pipe()?;
    let w_raw = w.as_raw_fd();
    // SAFETY: the holder is single-threaded here (no thread was started
    // yet); the child makes only async-signal-safe calls and never returns.
    match unsafe { nix::unistd::fork() }.map_err(NetworkError::Fork)? {
        nix::unistd::ForkResult::Child => {
            // SAFETY: raw libc calls only; the child exits with _exit.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    libc::_exit(1);
                }
                let b = b"k";
                libc::write(w_raw, b.as_ptr().cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(w);
            let mut b = [0u8; 1];
            if matches!(std::fs::File::from(r).read(&mut b), Ok(1)) {
                Ok(child.as_raw())
            } else {
                let _ = nix::sys::wait::waitpid(child, None);
                Err(NetworkError::Keeper)
            }
        }
    }
}

/// slirp4netns B: in U, N1 and the holder's mount namespace (so its
/// sockets obey N1's routes), serving N2's tap0.
fn start_slirp_b(net: &SandboxNetwork, netns_path: &str) -> Result<Child, NetworkError> {
    let (ready_r, ready_w) = pipe()?;
    let mut cmd = slirp_command(net, "sandbox");
    cmd.args(["--netns-type=path", netns_path]);
    if !net.ports.is_empty() {
        // Relative to its working directory, the Domain's run directory
        // (never mounted into the sandbox): slirp4netns binds it before
        // it enters its own sandbox. `crate::ports` removes it again.
        cmd.arg(format!("--api-socket={}", crate::ports::API_SOCKET))
            .current_dir(&net.api_socket_dir);
    }
    cmd.arg("tap0").stdin(Stdio::null()).stdout(Stdio::null());
    hand_over(&mut cmd, vec![(ready_w, fdno::slirp4netns::READY)]);
    let mut child = spawn_slirp(&mut cmd, net)?;
    drop(cmd);
    wait_ready(ready_r, "slirp4netns B", &mut child)?;
    lazaret_helpers::fault::point("holder:slirp4netns-b-ready");
    Ok(child)
}

/// Runs `lazaret-netpolicy MODE` with the sealed policy and N2
/// ([`fdno::netpolicy`]); leaves its report in the evidence directory; returns it when the
/// helper succeeded, else an error with its failing stage and message.
fn run_helper(
    net: &SandboxNetwork,
    netns: &std::fs::File,
    mode: &str,
    extra: &[&str],
) -> Result<NetReport, NetworkError> {
    let policy = memfd::sealed("network-policy", &net.policy).map_err(NetworkError::Memfd)?;
    let netns = OwnedFd::from(netns.try_clone().map_err(NetworkError::Netns)?);
    let mut cmd = Command::new(&net.helper);
    cmd.arg(mode)
        .args(["--digest", &net.digest])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    hand_over(
        &mut cmd,
        vec![
            (policy, fdno::netpolicy::POLICY),
            (netns, fdno::netpolicy::SANDBOX_NETNS),
        ],
    );
    let out = cmd.output().map_err(|source| NetworkError::RunHelper {
        helper: net.helper.clone(),
        source,
    })?;
    drop(cmd);
    let report = evidence_file(&net.evidence_dir, mode);
    let _ = std::fs::File::create(&report).and_then(|mut f| f.write_all(&out.stdout));
    // Bounded and typed: the helper shares a user namespace with the
    // sandbox's network; anything else is a failure of the helper.
    let parsed: Option<NetReport> = (out.stdout.len() <= MAX_REPORT_BYTES)
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten();
    let (stage, msg) = match parsed {
        Some(r) if out.status.success() && r.ok && r.mode.as_str() == mode => return Ok(r),
        Some(r) => (r.failed_stage, r.error),
        None => (None, None),
    };
    let stage = stage.unwrap_or_else(|| "helper".into());
    let message =
        msg.unwrap_or_else(|| format!("lazaret-netpolicy {mode} exited with {}", out.status));
    Err(NetworkError::Helper {
        stage: (stage != mode).then_some(stage),
        message,
    })
}

/// The Network Sidecar must attest the attachment of this generation:
/// (Domain ID, Network Sidecar ID, Agent Sandbox ID), exactly.
fn check_attachment(attested: &str, expected: &str) -> Result<(), NetworkError> {
    if attested != expected {
        return Err(NetworkError::OtherAttachment {
            attested: attested.to_string(),
            expected: expected.to_string(),
        });
    }
    Ok(())
}

/// `install.json` or `probe.json`.
pub fn evidence_file(dir: &Path, mode: &str) -> std::path::PathBuf {
    dir.join(format!("{mode}.json"))
}

#[cfg(test)]
mod tests {
    use super::{check_attachment, step, NetworkError};

    /// The messages are the text the start reported before its errors
    /// were types: the step first, a helper's stage when it is not the
    /// mode it ran.
    #[test]
    fn messages_name_the_step_and_the_helpers_stage() {
        let e = step("install")(NetworkError::Helper {
            stage: Some("routes".into()),
            message: "no route".into(),
        });
        assert_eq!(e.to_string(), "network: install: routes: no route");
        let e = step("probe")(NetworkError::Helper {
            stage: None,
            message: "denied is not refused".into(),
        });
        assert_eq!(e.to_string(), "network: probe: denied is not refused");
        let e = step("uplink")(NetworkError::NoUplink);
        assert_eq!(
            e.to_string(),
            "network: uplink: slirp4netns A did not configure the enforcement namespace"
        );
    }
    use lazaret_protocol::trust::{network_attachment, GenerationId};

    #[test]
    fn only_this_generations_exact_attachment_is_accepted() {
        let g = GenerationId {
            domain_id: "d".into(),
            number: 4,
            nonce: [3; 16],
        };
        let ours = network_attachment(&g, "sidecar-1", "sandbox-1");
        assert!(check_attachment(&ours, &ours).is_ok());
        let previous = GenerationId {
            number: 3,
            ..g.clone()
        };
        for other in [
            network_attachment(&previous, "sidecar-1", "sandbox-1"),
            network_attachment(&g, "sidecar-2", "sandbox-1"),
            network_attachment(&g, "sidecar-1", "sandbox-2"),
            network_attachment(
                &GenerationId {
                    domain_id: "e".into(),
                    ..g.clone()
                },
                "sidecar-1",
                "sandbox-1",
            ),
        ] {
            let e = check_attachment(&other, &ours).unwrap_err().to_string();
            assert!(e.contains("another network attachment"), "{e}");
        }
    }
}
