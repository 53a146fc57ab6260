//! `lazaret-supervisor`: started by the Session Coordinator with the plan
//! (a sealed memfd) on fd 3, its SHA-256 digest in argv (`--plan-digest`),
//! and its end of the control channel on fd 4
//! ([`lazaret_protocol::fdno::supervisor`], [`lazaret_protocol::supervisor`]). See the crate documentation.
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
//!
//! Modules: [`supervisor`] (start from the checked plan, then serve the
//! control channel), [`holder`] (the sandbox holder), [`scan`]
//! (`--scan-anchor`), [`remove_tree`] (`--remove-tree`, and the run
//! directory at stop).

use failure::Failure;
use lazaret_helpers::channel::Channel;
use lazaret_helpers::{fds, memfd};
use lazaret_protocol::fdno::supervisor as fdno;
use lazaret_protocol::plan::SandboxPlan;
use lazaret_protocol::supervisor::{FromSupervisor, MAX_RECORD};
use lazaret_supervisor::exit;
use std::path::Path;

mod failure;
mod holder;
mod remove_tree;
mod scan;
mod supervisor;

use remove_tree::remove_tree;
use scan::scan_anchor;
use supervisor::start;

fn main() {
    // Inherited by the holder, runsc, slirp4netns, the mount router and the
    // exec bridges.
    lazaret_helpers::limits::raise_nofile();
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 1 || args.get(1).map(String::as_str) == Some("--domain") {
        lazaret_helpers::timeline::mark("supervisor", "start");
    }
    if args.get(1).map(String::as_str) == Some("--print-confinement") {
        lazaret_supervisor::confinement::supervisor().print_and_exit();
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
        Err(e) => {
            let reason = e.to_string();
            lazaret_protocol::log_line!("lazaret-supervisor: error: {reason}");
            let _ = channel.send(&FromSupervisor::StartFailed { reason }, &[], MAX_RECORD);
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// `r`'s value, or `None` once its error is logged
/// (`lazaret-supervisor: ERROR`): for the one-shot modes, which then exit
/// with [`exit::START_FAILED`].
pub(crate) fn logged<T, E: std::fmt::Display>(r: Result<T, E>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            lazaret_protocol::log_line!("lazaret-supervisor: {e}");
            None
        }
    }
}

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
            other => return Err(Failure::UnknownArgument(other.to_string())),
        }
    }
    digest.map(String::as_str).ok_or(Failure::NoDigest)
}

/// Reads and checks the plan: seals, size, digest, then postcard; the
/// network policy's digest too, before anything is created.
pub(crate) fn read_plan(args: &[String]) -> Result<SandboxPlan, Failure> {
    let digest = plan_digest(args)?;
    let plan_fd = fds::inherited(fdno::PLAN).map_err(|source| Failure::NoPlan {
        fd: fdno::PLAN,
        source,
    })?;
    let bytes =
        memfd::read_checked("sandbox-plan", &plan_fd, 1 << 20, digest).map_err(Failure::Memfd)?;
    drop(plan_fd);
    let plan: SandboxPlan = postcard::from_bytes(&bytes).map_err(Failure::Decode)?;
    if let Some(net) = &plan.network {
        let got = memfd::digest(&net.policy);
        if !got.eq_ignore_ascii_case(&net.digest) {
            return Err(Failure::PolicyDigest {
                got,
                expected: net.digest.clone(),
            });
        }
    }
    Ok(plan)
}
