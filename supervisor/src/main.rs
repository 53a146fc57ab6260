//! `lazaret-supervisor`: started by the Session Coordinator with the plan on
//! fd 3 and a status pipe on fd 4. See the crate documentation.
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
//! ```
//! See [`lazaret_supervisor::network`] for the network's order.
//! Every process of the sandbox lives in the holder's PID namespace, so when
//! the holder dies, for whatever reason, the kernel kills all of them: no
//! runsc, gofer or sandbox process can outlive the Domain. The holder dies
//! with the supervisor (`PR_SET_PDEATHSIG`), which dies with the coordinator.

use lazaret_helpers::{fds, memfd, userns};
use lazaret_protocol::plan::SandboxPlan;
use lazaret_supervisor::network::{self, Uplink};
use lazaret_supervisor::{bundle, exit, fdno};
use nix::sched::CloneFlags;
use nix::sys::signal::{self, SigHandler, SigSet, Signal};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    // Inherited by the holder, runsc, slirp4netns and the mount router.
    lazaret_helpers::limits::raise_nofile();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--print-confinement") {
        lazaret_seccomp::binaries::print_and_exit("lazaret-supervisor");
    }
    match args.get(1).map(String::as_str) {
        Some("--remove-tree") => std::process::exit(remove_tree(args.get(2).map(Path::new))),
        Some("--scan-anchor") => std::process::exit(scan_anchor(&args[2..])),
        _ => {}
    }
    let code = match run() {
        Ok(code) => code,
        Err((code, msg)) => {
            eprintln!("lazaret-supervisor: error: {msg}");
            report_status(&format!("error {msg}"));
            code
        }
    };
    std::process::exit(code);
}

fn report_status(line: &str) {
    // SAFETY: fd 4 was handed to us as the status pipe; wrapping it in a
    // ManuallyDrop'd File only borrows it for this write.
    let mut f = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fdno::STATUS) });
    let _ = writeln!(*f, "{line}");
}

type Failure = (i32, String);

/// `lazaret-supervisor --scan-anchor PATH UPPER LOWER`: prints the JSON
/// summary of a State Anchor's upper (never file contents), scanned from
/// inside the mapped user namespace where its directories are readable.
fn scan_anchor(args: &[String]) -> i32 {
    let [path, upper, lower] = args else {
        eprintln!("lazaret-supervisor: --scan-anchor takes PATH UPPER LOWER");
        return exit::BAD_PLAN;
    };
    let map = match userns::current_id_map() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    let (r, w) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    let w_raw = w.as_raw_fd();
    // This process is single-threaded, so the clone may allocate.
    let child = userns::clone_mapped(&map, CloneFlags::empty(), || {
        // SAFETY: w_raw is the pipe's write end, inherited by the clone.
        let mut out = unsafe { std::fs::File::from_raw_fd(w_raw) };
        let result = lazaret_state::scan::scan(path, Path::new(upper), Path::new(lower), 1000)
            .map_err(|e| e.to_string());
        let _ = serde_json::to_writer(&mut out, &result);
        0
    });
    drop(w);
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    let mut json = String::new();
    let _ = std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut json);
    let _ = nix::sys::wait::waitpid(child, None);
    match serde_json::from_str::<Result<lazaret_state::scan::Summary, String>>(&json) {
        Ok(Ok(summary)) => {
            println!("{}", serde_json::to_string(&summary).expect("json"));
            exit::STOPPED
        }
        Ok(Err(e)) => {
            eprintln!("lazaret-supervisor: cannot scan {upper}: {e}");
            exit::START_FAILED
        }
        Err(e) => {
            eprintln!("lazaret-supervisor: the scan of {upper} gave no result: {e}");
            exit::START_FAILED
        }
    }
}

/// `lazaret-supervisor --remove-tree DIR`: removes a Domain's transient
/// tree, whose files belong to the developer's subordinate IDs, from inside
/// the mapped user namespace. A separate single-threaded process, because
/// cloning a multi-threaded coordinator for it would not be safe.
fn remove_tree(dir: Option<&Path>) -> i32 {
    let Some(dir) = dir.filter(|d| d.is_absolute()) else {
        eprintln!("lazaret-supervisor: --remove-tree takes an absolute directory");
        return exit::BAD_PLAN;
    };
    let map = match userns::current_id_map() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("lazaret-supervisor: {e}");
            return exit::START_FAILED;
        }
    };
    match userns::run_mapped(&map, Command::new("rm").arg("-rf").arg("--").arg(dir)) {
        Ok(s) if s.success() && !dir.exists() => exit::STOPPED,
        other => {
            eprintln!(
                "lazaret-supervisor: could not remove {}: {other:?}",
                dir.display()
            );
            exit::START_FAILED
        }
    }
}

fn run() -> Result<i32, Failure> {
    let plan_fd = fds::inherited(fdno::PLAN)
        .map_err(|e| (exit::BAD_PLAN, format!("no plan on fd {}: {e}", fdno::PLAN)))?;
    let bytes = memfd::read_sealed("sandbox-plan", &plan_fd, 1 << 20)
        .map_err(|e| (exit::BAD_PLAN, e.to_string()))?;
    let plan: SandboxPlan =
        postcard::from_bytes(&bytes).map_err(|e| (exit::BAD_PLAN, format!("plan: {e}")))?;
    drop(plan_fd);
    std::fs::create_dir_all(&plan.bundle_dir).map_err(|e| {
        (
            exit::START_FAILED,
            format!("cannot create {}: {e}", plan.bundle_dir.display()),
        )
    })?;

    // Blocked before the holder exists, so that its SIGCHLD cannot be lost.
    let term = SigSet::from_iter([Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD]);
    term.thread_block()
        .map_err(|e| (exit::START_FAILED, e.to_string()))?;

    // The holder tells us over this pipe when runsc's sandbox is running.
    let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| (exit::START_FAILED, e.to_string()))?;
    // We tell the holder over this one when slirp4netns A is up.
    let (uplink_r, uplink_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| (exit::START_FAILED, e.to_string()))?;
    let ready_w_raw = ready_w.as_raw_fd();
    let uplink_r_raw = uplink_r.as_raw_fd();
    let flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    let holder = userns::clone_mapped(&plan.id_map, flags, || {
        holder_main(&plan, ready_w_raw, uplink_r_raw)
    })
    .map_err(|e| (exit::START_FAILED, e.to_string()))?;
    drop(ready_w);
    drop(uplink_r);
    let mut ready = std::io::BufReader::new(std::fs::File::from(ready_r));
    let holder_line = |ready: &mut std::io::BufReader<std::fs::File>| {
        use std::io::BufRead;
        let mut line = String::new();
        let _ = ready.read_line(&mut line);
        line.trim().to_string()
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
                let _ = signal::kill(holder, Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(holder, None);
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
    if line != "running" {
        let _ = nix::sys::wait::waitpid(holder, None);
        if let Some(u) = uplink {
            u.stop();
        }
        let detail = line
            .strip_prefix("error ")
            .unwrap_or("the sandbox holder exited");
        return Err((exit::START_FAILED, detail.to_string()));
    }
    report_status(&format!("ready {}", holder.as_raw()));
    let code = supervise(holder, &term, &mut uplink);
    if let Some(u) = uplink {
        u.stop();
    }
    code
}

/// Until the holder ends: forwards SIGTERM/SIGINT to it, which stops runsc.
fn supervise(
    holder: nix::unistd::Pid,
    term: &SigSet,
    uplink: &mut Option<Uplink>,
) -> Result<i32, Failure> {
    let mut uplink_lost = false;
    // Stop on SIGTERM: forward it to the holder, which stops runsc.
    loop {
        let sig = term
            .wait()
            .map_err(|e| (exit::START_FAILED, e.to_string()))?;
        match sig {
            Signal::SIGCHLD => {
                if !uplink_lost && uplink.as_mut().is_some_and(|u| u.exited()) {
                    uplink_lost = true;
                    eprintln!("lazaret-supervisor: slirp4netns A exited: the sandbox has lost its network");
                }
                if let Ok(nix::sys::wait::WaitStatus::Exited(_, code)) =
                    nix::sys::wait::waitpid(holder, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
                {
                    return Ok(if code == 0 {
                        exit::STOPPED
                    } else {
                        exit::SANDBOX_LOST
                    });
                }
                if let Ok(nix::sys::wait::WaitStatus::Signaled(..)) =
                    nix::sys::wait::waitpid(holder, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
                {
                    return Ok(exit::SANDBOX_LOST);
                }
            }
            _ => {
                let _ = signal::kill(holder, Signal::SIGTERM);
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    match nix::sys::wait::waitpid(
                        holder,
                        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
                    ) {
                        Ok(nix::sys::wait::WaitStatus::StillAlive) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        Ok(nix::sys::wait::WaitStatus::StillAlive) => {
                            // Killing PID 1 of the namespace kills everything in it.
                            let _ = signal::kill(holder, Signal::SIGKILL);
                            let _ = nix::sys::wait::waitpid(holder, None);
                            return Ok(exit::STOPPED);
                        }
                        _ => return Ok(exit::STOPPED),
                    }
                }
            }
        }
    }
}

extern "C" fn noop(_: libc::c_int) {}

/// PID 1 of the Domain's PID namespace, ID 0 of its user namespace.
fn holder_main(plan: &SandboxPlan, ready_w: i32, uplink_r: i32) -> isize {
    // SAFETY: ready_w is the pipe's write end, inherited by the clone.
    let mut ready = unsafe { std::fs::File::from_raw_fd(ready_w) };
    match holder_start(plan, uplink_r) {
        Ok((mut runsc, router)) => {
            let _ = writeln!(ready, "running");
            drop(ready);
            holder_wait(plan, &mut runsc, router)
        }
        Err(msg) => {
            let _ = writeln!(ready, "error {msg}");
            exit::START_FAILED as isize
        }
    }
}

/// Starts everything up to a running sandbox; returns runsc and, when
/// Ignored Workspace State is on, the router's PID.
fn holder_start(
    plan: &SandboxPlan,
    uplink_r: i32,
) -> Result<(std::process::Child, Option<u32>), String> {
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

    // The network first: policy installed and probe passed, or no sandbox.
    let net = match &plan.network {
        Some(n) => Some(network::setup_in_holder(n, uplink_r)?),
        None => {
            // SAFETY: uplink_r is our inherited copy of the pipe's read
            // end, unused without a network.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(uplink_r) });
            None
        }
    };

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

    mount_anchors(plan)?;
    // The router's mount must be live before runsc binds it; the router
    // is our child and lives in our PID namespace like everything else.
    let router = match &plan.router {
        Some(r) => Some(lazaret_supervisor::router::start(r)?),
        None => None,
    };

    let plan = &lazaret_supervisor::volumes::pin(plan)?;
    let config = bundle::config_json(plan, net.as_ref().map(|n| n.netns_path.as_str()));
    std::fs::write(
        plan.bundle_dir.join("config.json"),
        serde_json::to_vec_pretty(&config).expect("json"),
    )
    .map_err(|e| format!("cannot write the OCI bundle: {e}"))?;
    if plan.network.as_ref().is_some_and(|n| n.hide_proc_sys_net) {
        network::hide_proc_sys_net()?;
    }
    if let Some(n) = &net {
        eprintln!(
            "lazaret-supervisor: network ready: keeper {}, slirp4netns B {}",
            n.keeper,
            n.slirp_b.id()
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
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "runsc failed to start it ({status}); runsc's own messages are in the coordinator log, and `lazaret doctor` checks what runsc needs"
            ));
        }
        if let Some((status, pid)) = runsc_state(plan) {
            if status == "running" {
                // Before any session: only our init has run inside.
                let sentry = pid.ok_or(lazaret_supervisor::limits::LimitsError::NoSentry);
                if let Err(e) = sentry.and_then(|pid| {
                    lazaret_supervisor::limits::apply_to_sentry(pid, &plan.sandbox_id, &plan.limits)
                }) {
                    let _ = child.kill();
                    return Err(format!("cannot bound the sandbox's memory: {e}"));
                }
                return Ok((child, router.as_ref().map(|r| r.id())));
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("runsc did not start the sandbox within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(15));
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

fn holder_wait(plan: &SandboxPlan, runsc: &mut std::process::Child, router: Option<u32>) -> isize {
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
                            eprintln!("lazaret-supervisor: runsc run exited unexpectedly: {s:?}");
                            return exit::SANDBOX_LOST as isize;
                        }
                        // Without its router the workspace is gone (the
                        // sandbox sees ENOTCONN, never host content): stop
                        // the Domain, so the next start brings it back.
                        Ok(s)
                            if router.is_some()
                                && s.pid()
                                    == router.map(|p| nix::unistd::Pid::from_raw(p as i32)) =>
                        {
                            eprintln!("lazaret-supervisor: the Ignored Workspace State router exited ({s:?}): stopping the sandbox");
                            stop(plan, runsc);
                            return exit::SANDBOX_LOST as isize;
                        }
                        Ok(_) => {}
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
