//! The start-up leader: the `lazaret run` that finds no coordinator takes
//! the Domain's start-up lock, prepares the image, and starts
//! `lazaret-coordinator` with its input as a sealed memfd.

use crate::error::CliError;
use crate::run::Resolved;
use lazaret_helpers::{fds, memfd, runsc::RunscInfo, userns};
use lazaret_image::{PrepareOptions, Preparer};
use lazaret_protocol::display;
use lazaret_protocol::plan::{
    CoordinatorInput, CoordinatorReadiness, DerivedPolicy, NetworkInput, RunscInvocation,
    VolumeSpec, UNBOUND_POLICY,
};
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the other binaries are: beside this one.
pub(crate) fn libexec() -> Result<PathBuf, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Start(format!("cannot find lazaret's own path: {e}")))?;
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    for b in [
        "lazaret-mount-router",
        "lazaret-escalate",
        "lazaret-coordinator",
        "lazaret-supervisor",
        "lazaret-exec-bridge",
        "lazaret-netpolicy",
        "lazaret-dns-filter",
        "lazaret-mailbox",
    ] {
        if !dir.join(b).is_file() {
            return Err(CliError::Start(format!(
                "{b} is missing beside {}: install every Lazaret binary into one directory",
                exe.display()
            )));
        }
    }
    Ok(dir)
}

pub fn start_domain(r: &Resolved) -> Result<(), CliError> {
    let _lock = startup_lock(r)?;
    // Another leader may have started the Domain while we waited.
    if crate::run::listening(&r.domain_root) {
        return Ok(());
    }

    lazaret_helpers::timeline::mark("cli", "leader-locked");
    let runsc = detect_runsc(&r.storage_root, r.loaded.config.runtime.runsc.as_deref())?;
    lazaret_helpers::timeline::mark("cli", "runsc-detected");
    // A network configuration that cannot be derived fails here, before
    // anything is prepared or started (the coordinator derives it again,
    // bound to its generation).
    let mut network = network_input(&r.profile.network, runsc.needs_proc_sys_net_hack())?;
    // Taken host ports refuse the start now, before the image or anything
    // else is prepared.
    crate::ports::check_free(&r.ports)?;
    network.ports = r.ports.clone();
    let id_map = userns::current_id_map()?;
    let image = prepare_image(r, &runsc, &id_map)?;
    lazaret_helpers::timeline::mark("cli", "image-prepared");

    let input = coordinator_input(r, &image, &runsc, id_map, network)?;
    if let Some(max) = input.limits.anchor {
        check_anchors_bound(r, max)?;
    }
    lazaret_helpers::timeline::mark("cli", "input-ready");
    spawn_coordinator(r, &input)
}

/// The Domain's start-up lock, held by the leader until the coordinator
/// is ready (or the start failed).
fn startup_lock(r: &Resolved) -> Result<std::fs::File, CliError> {
    let lock_path = r.domain_root.join("startup.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(CliError::storage(&lock_path))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| CliError::Start(format!("cannot lock {}: {e}", lock_path.display())))?;
    Ok(lock)
}

/// The profile's image, prepared (built on first use, with progress on
/// stderr: one updating line on a terminal).
fn prepare_image(
    r: &Resolved,
    runsc: &RunscInfo,
    id_map: &lazaret_protocol::plan::IdMap,
) -> Result<lazaret_image::PreparedImage, CliError> {
    let images = lazaret_image::Store::new(&r.storage_root, id_map.clone());
    let opts = PrepareOptions {
        statx_shim: runsc.needs_statx_shim(),
    };
    let reference = &r.profile.image;
    let interactive = std::io::stderr().is_terminal();
    let mut announced = false;
    let image = images.prepare(reference, &opts, &mut |line: &str| {
        if !announced {
            eprintln!(
                "lazaret: preparing image {reference} (first use; this takes about a minute)"
            );
            announced = true;
        }
        if interactive {
            // One updating status line, not a scroll of mmdebstrap output.
            let short = lazaret_protocol::display::bounded(line, 100);
            eprint!("\r\x1b[2K  {short}");
        } else {
            eprintln!("  {}", lazaret_protocol::display::message(line));
        }
    })?;
    if announced && interactive {
        eprintln!("\r\x1b[2K  image {reference} ready");
    }
    Ok(image)
}

/// What the coordinator is given: the resolved profile, the prepared
/// image, runsc and the network.
fn coordinator_input(
    r: &Resolved,
    image: &lazaret_image::PreparedImage,
    runsc: &RunscInfo,
    id_map: lazaret_protocol::plan::IdMap,
    network: NetworkInput,
) -> Result<CoordinatorInput, CliError> {
    Ok(CoordinatorInput {
        domain_id: r.domain_id.to_string(),
        profile_name: r.profile_name.clone(),
        workspace: r.workspace.clone(),
        domain_root: r.domain_root.clone(),
        config_fingerprint: r.loaded.fingerprint.clone(),
        image_rootfs: image.rootfs.clone(),
        image_reference: r.profile.image.clone(),
        runsc: RunscInvocation {
            path: runsc.path.clone(),
            global_flags: runsc.global_flags(),
        },
        id_map,
        env: r
            .profile
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        persistent_paths: r.profile.persistent_paths.clone(),
        isolate_ignored: r.profile.isolate_ignored,
        protected_paths: r.profile.protected_paths.clone(),
        user: r.profile.user.clone(),
        git_identity: git_identity(&r.profile.git_identity),
        host_ca: crate::host_ca::bundle(&r.profile)?,
        auto_approve: r
            .profile
            .escalation
            .auto_approve
            .iter()
            .map(|a| lazaret_protocol::plan::AutoApproveRule {
                argv: a.argv.clone(),
                trailing_args: a.trailing_args,
                trailing_options: a.trailing_options.clone(),
            })
            .collect(),
        volumes: r
            .profile
            .volumes
            .iter()
            .map(|v| VolumeSpec {
                host: v.host.clone(),
                sandbox: v.sandbox.clone(),
                read_only: v.read_only,
                git_sentry: v.git_sentry,
            })
            .collect(),
        shared_paths: crate::shared_paths::prepare(
            &r.storage_root,
            &r.profile_name,
            &r.profile.shared_paths,
            rustix::process::getuid().as_raw(),
        )?,
        libexec: libexec()?,
        network,
        limits: lazaret_protocol::plan::SandboxLimits {
            memory: r.profile.limits.memory_bytes(),
            processes: Some(r.profile.limits.processes),
            ignored_state: r.profile.limits.ignored_state_bytes(),
            anchor: r.profile.limits.anchor_bytes(),
        },
        keep_alive_ms: r.profile.keep_alive_ms(),
        detach_on_hangup: r.profile.detach_on_hangup,
    })
}

/// A State Anchor already past `max` (limits.anchor_size) refuses the
/// start, naming how to discard it.
fn check_anchors_bound(r: &Resolved, max: u64) -> Result<(), CliError> {
    let over = crate::state_cmd::anchors_over(&r.domain_root, max);
    if !over.is_empty() {
        let list: Vec<String> = over
            .iter()
            .map(|(p, b)| format!("{} takes {b} bytes on disk", display::message(p)))
            .collect();
        return Err(CliError::Start(format!(
            "State Anchor {} past its bound of {} (limits.anchor_size): discard it with `lazaret state reset {}`, or raise limits.anchor_size in the profile",
            list.join(", "),
            lazaret_config::format_size(max),
            over.iter().map(|(p, _)| display::message(p)).collect::<Vec<_>>().join(" ")
        )));
    }
    Ok(())
}

/// The installed runsc, its probes' outputs reused from the Storage
/// Root's cache while the binary is unchanged (`lazaret doctor` always
/// probes afresh).
pub(crate) fn detect_runsc(
    storage_root: &Path,
    runsc: Option<&Path>,
) -> Result<RunscInfo, lazaret_helpers::runsc::RunscError> {
    RunscInfo::detect_cached(runsc, &storage_root.join("cache").join("runsc-probe"))
}

/// The profile's `[network]` for the coordinator: the policy derived here,
/// in the host's network namespace, once slirp4netns is known to be there.
pub(crate) fn network_input(
    net: &lazaret_config::Network,
    hide_proc_sys_net: bool,
) -> Result<NetworkInput, CliError> {
    let slirp4netns = lazaret_helpers::runsc::find_on_path("slirp4netns");
    let refused = |e: lazaret_netpolicy::DeriveError| CliError::Network(e.to_string());
    // The host's addresses are taken now, before anything starts: each is
    // denied (the coordinator binds the policy to its generation).
    let opts = lazaret_netpolicy::options_on_this_host(net, UNBOUND_POLICY).map_err(refused)?;
    let policy = match lazaret_netpolicy::derive(net, &opts).map_err(refused)? {
        lazaret_netpolicy::NetworkPlan::None => None,
        lazaret_netpolicy::NetworkPlan::Policy(p) => {
            if slirp4netns.is_none() {
                return Err(CliError::Network(
                    "slirp4netns is not installed (apt-get install slirp4netns), or set `mode = \"none\"` in the profile's [network] to run without a network".into(),
                ));
            }
            let bytes = p.to_bytes().map_err(|e| refused(e.into()))?;
            let digest = lazaret_protocol::netpolicy::policy::digest_bytes(&bytes);
            Some(DerivedPolicy { bytes, digest })
        }
    };
    Ok(NetworkInput {
        policy,
        slirp4netns,
        hide_proc_sys_net,
        ports: Vec::new(),
    })
}

fn spawn_coordinator(r: &Resolved, input: &CoordinatorInput) -> Result<(), CliError> {
    let bytes = postcard::to_stdvec(input).map_err(|e| CliError::Start(e.to_string()))?;
    let (input_fd, digest) = memfd::sealed_with_digest("coordinator-input", &bytes)
        .map_err(|e| CliError::Start(e.to_string()))?;
    let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| CliError::Start(e.to_string()))?;
    // The coordinator's stderr until it writes through its rotating
    // writer (which rotates this file when full: `lazaret_protocol::logs`).
    let log_path = r.domain_root.join(lazaret_protocol::logs::COORDINATOR_LOG);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(CliError::storage(&log_path))?;
    let mut cmd = coordinator_command(input, &digest, log)?;
    // Ourselves, so that the coordinator does not wait for a session
    // from a CLI that is gone.
    let me = lazaret_helpers::pidfd::open(std::process::id() as i32)
        .map_err(|e| CliError::Start(format!("cannot open a pidfd of this process: {e}")))?;
    use lazaret_protocol::fdno::coordinator as fdno;
    fds::pass_fds(
        &mut cmd,
        vec![
            (input_fd, fdno::INPUT),
            (ready_w, fdno::READY),
            (me, fdno::LEADER),
        ],
    );
    // The intermediate child exits at once, so the coordinator is nobody's
    // child here and is never left a zombie of this CLI; its own session
    // takes it out of ours, so the terminal's signals and hangups miss it.
    lazaret_helpers::child::setup(
        &mut cmd,
        lazaret_helpers::child::Setup {
            detach: true,
            new_session: true,
            ..Default::default()
        },
    );
    let mut child = cmd
        .spawn()
        .map_err(|e| CliError::Start(format!("cannot start lazaret-coordinator: {e}")))?;
    drop(cmd);
    // Reap the intermediate; the coordinator itself lives on.
    let _ = child.wait();
    wait_ready(std::fs::File::from(ready_r), &log_path)
}

/// The coordinator's command line: its input's digest in argv, its output
/// to `log`, and only the variables of [`COORDINATOR_ENV`].
fn coordinator_command(
    input: &CoordinatorInput,
    digest: &str,
    log: std::fs::File,
) -> Result<Command, CliError> {
    let mut cmd = lazaret_helpers::child::domain_command(
        &input.libexec,
        "lazaret-coordinator",
        &input.domain_id,
        "--input-digest",
        digest,
        log.into(),
    )
    .map_err(|e| CliError::Start(e.to_string()))?;
    cmd.current_dir("/");
    // Only what the Domain's processes read: the developer's other
    // variables (API keys, the session's own `-e` values) stay with this
    // CLI. The Git ones let the mount router find Git's configuration as
    // host Git would.
    cmd.env_clear();
    for k in COORDINATOR_ENV {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    Ok(cmd)
}

/// Waits (up to 65 s) for the coordinator's readiness record on `ready`;
/// a failure names its log.
fn wait_ready(ready: std::fs::File, log_path: &Path) -> Result<(), CliError> {
    let mut pfd = [nix::poll::PollFd::new(
        ready.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let n = nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(65_000u16))
        .map_err(|e| CliError::Start(e.to_string()))?;
    if n == 0 {
        return Err(CliError::Start(format!(
            "the coordinator did not become ready within 65 s; see {}",
            log_path.display()
        )));
    }
    let mut ready = ready;
    let why = match lazaret_protocol::frame::read_frame(&mut ready) {
        Ok(CoordinatorReadiness::Ready) => {
            lazaret_helpers::timeline::mark("cli", "coordinator-ready");
            return Ok(());
        }
        Ok(CoordinatorReadiness::Failed(why)) => why,
        Err(_) => "the coordinator exited during start-up".to_string(),
    };
    Err(CliError::Start(format!(
        "{why} (details in {})",
        log_path.display()
    )))
}

/// Who Git inside commits as: the profile's `git_identity`, else the
/// host's `user.name` / `user.email` from its system and global Git
/// configuration (parsed, never by running Git). A host value that is not
/// one bounded line is left out rather than passed on.
fn git_identity(p: &lazaret_config::GitIdentity) -> (Option<String>, Option<String>) {
    let host = if p.from_host {
        lazaret_gitconfig::Lookup {
            env: &lazaret_gitconfig::process_env,
        }
        .load(None)
        .ok()
    } else {
        None
    };
    let pick = |given: &Option<String>, key: &str| {
        given.clone().or_else(|| {
            let v = host.as_ref()?.string(key)?.to_string();
            lazaret_config::git_identity_value(&v).ok().map(|()| v)
        })
    };
    (pick(&p.name, "user.name"), pick(&p.email, "user.email"))
}

/// The variables the coordinator and the processes it starts get from the
/// startup leader's environment.
const COORDINATOR_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    lazaret_helpers::timeline::ENV,
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "RUST_BACKTRACE",
    // Test-only fault points (lazaret_helpers::fault).
    lazaret_helpers::fault::KILL_ENV,
    // Test-only: the Landlock ABI every helper may use at most (it only
    // lowers; see lazaret_seccomp::abi). From the developer's own
    // environment, like everything here.
    lazaret_seccomp::abi::TEST_CAP_ENV,
    lazaret_helpers::fault::PAUSE_ENV,
];
