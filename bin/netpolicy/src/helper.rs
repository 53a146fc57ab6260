//! The `lazaret-netpolicy` process, in the order it runs:
//!
//! 1. sanitise: close every inherited fd but 0, 1, 2, the policy fd and
//!    the sandbox-netns fd;
//! 2. open handles in the enforcement namespace (where it was started): a
//!    NETLINK_ROUTE socket and `/proc/sys/net/ipv6/conf`; `setns` into the
//!    sandbox namespace (fd) and open the same two there; stay there;
//! 3. confine (see [`crate::confine`]): capabilities, no_new_privs,
//!    landlock layer 1, seccomp;
//! 4. read the policy: seals and size of the memfd, SHA-256 against
//!    `--digest`, canonical postcard, structural checks;
//! 5. landlock layer 2 (TCP connect to the probe ports only);
//! 6. `install`: install, read back, verify, fingerprint; `probe`: read
//!    back, verify, compare the fingerprint with `--fingerprint`, then run
//!    the probe from the sandbox namespace;
//! 7. print one JSON document on stdout.

use std::os::fd::{AsFd, OwnedFd, RawFd};

use crate::attest::{self, Namespaces};
use crate::confine;
use crate::probe;
use crate::sysctl::Ipv6Conf;
use lazaret_netlink::rtnl::Rtnl;
use lazaret_protocol::netpolicy::policy::Policy;

/// Exit codes of `lazaret-netpolicy`.
pub mod exit {
    pub const OK: i32 = 0;
    /// Arguments, fds, memfd seals/size/digest or policy bytes are wrong.
    pub const BAD_INPUT: i32 = 2;
    /// Opening handles or installing routes/sysctls failed.
    pub const INSTALL_FAILED: i32 = 3;
    /// The state read back does not implement the policy, or the
    /// fingerprint changed.
    pub const VERIFY_FAILED: i32 = 4;
    /// A probe check failed.
    pub const PROBE_FAILED: i32 = 5;
    /// Confinement could not be applied.
    pub const CONFINE_FAILED: i32 = 6;
}

/// What the caller asked for.
#[derive(Debug, Clone)]
pub enum Mode {
    Install,
    Probe { fingerprint: String },
}

#[derive(Debug, Clone)]
pub struct Request {
    pub mode: Mode,
    pub digest: String,
    pub policy_fd: RawFd,
    pub sandbox_netns_fd: RawFd,
}

/// A failure with the stage that failed, for the report and exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub stage: &'static str,
    pub message: String,
}

fn fail(code: i32, stage: &'static str) -> impl FnOnce(String) -> Failure {
    move |message| Failure {
        code,
        stage,
        message,
    }
}

pub use lazaret_protocol::netreport::{NetMode, NetReport as Report};

/// Runs the whole helper. Call from `main` only, single-threaded.
pub fn run(req: &Request) -> Result<Report, Failure> {
    check_arguments(req)?;
    lazaret_seccomp::process::close_inherited_fds(&[req.policy_fd, req.sandbox_netns_fd])
        .map_err(|e| fail(exit::BAD_INPUT, "sanitise")(e.to_string()))?;
    let policy_fd = lazaret_helpers::fds::inherited(req.policy_fd).map_err(|e| {
        fail(exit::BAD_INPUT, "policy fd")(format!("no policy memfd on fd {}: {e}", req.policy_fd))
    })?;
    let netns_fd = lazaret_helpers::fds::inherited(req.sandbox_netns_fd).map_err(|e| {
        fail(exit::BAD_INPUT, "sandbox netns fd")(format!(
            "no sandbox network namespace on fd {}: {e}",
            req.sandbox_netns_fd
        ))
    })?;
    // Compile the filter before touching anything.
    let filters = confine::seccomp_filters()
        .map_err(|e| fail(exit::CONFINE_FAILED, "seccomp")(e.to_string()))?;

    let status = std::fs::File::open("/proc/thread-self/status").ok();
    let mut ns = open_handles(netns_fd)?;

    confine::apply(ns.enforcement_ipv6.dir(), ns.sandbox_ipv6.dir(), &filters)
        .map_err(|e| fail(exit::CONFINE_FAILED, confine::stage(&e))(e.to_string()))?;

    let policy = read_policy(&policy_fd, &req.digest)?;
    drop(policy_fd);
    let confinement = status.as_ref().map(own_status);

    let ports: Vec<u16> = match &req.mode {
        Mode::Install => Vec::new(),
        Mode::Probe { .. } => std::iter::once(policy.probe.denied.port())
            .chain(policy.probe.permitted.map(|p| p.port()))
            .collect(),
    };
    confine::landlock_connect(&ports)
        .map_err(|e| fail(exit::CONFINE_FAILED, "landlock")(e.to_string()))?;

    match &req.mode {
        Mode::Install => run_install(&mut ns, &policy, confinement),
        Mode::Probe { fingerprint } => run_probe(&mut ns, &policy, fingerprint, confinement),
    }
}

/// The request's descriptors and digest, checked before anything is
/// touched.
fn check_arguments(req: &Request) -> Result<(), Failure> {
    if req.policy_fd < 3 || req.sandbox_netns_fd < 3 || req.policy_fd == req.sandbox_netns_fd {
        return Err(fail(exit::BAD_INPUT, "arguments")(
            "--policy-fd and --sandbox-netns-fd must be distinct and at least 3".into(),
        ));
    }
    if req.digest.len() != 64 || !req.digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(fail(exit::BAD_INPUT, "arguments")(
            "--digest must be 64 hex digits (the SHA-256 of the policy bytes)".into(),
        ));
    }
    Ok(())
}

/// `install`: installs the policy and attests it (a mismatch is a failed
/// verification).
fn run_install(
    ns: &mut Namespaces,
    policy: &Policy,
    confinement: Option<std::collections::BTreeMap<String, String>>,
) -> Result<Report, Failure> {
    let att = attest::install(ns, policy).map_err(|e| {
        let code = if matches!(e, attest::AttestError::Mismatch(_)) {
            exit::VERIFY_FAILED
        } else {
            exit::INSTALL_FAILED
        };
        fail(code, "install")(e.to_string())
    })?;
    Ok(Report {
        ok: true,
        mode: NetMode::Install,
        attestation: Some(att),
        probe: None,
        confinement,
        failed_stage: None,
        error: None,
    })
}

/// `probe`: attests that the installed policy is still the one of
/// `fingerprint`, then runs the readiness probe in the sandbox namespace.
fn run_probe(
    ns: &mut Namespaces,
    policy: &Policy,
    fingerprint: &str,
    confinement: Option<std::collections::BTreeMap<String, String>>,
) -> Result<Report, Failure> {
    let att = attest::attest(ns, policy)
        .map_err(|e| fail(exit::VERIFY_FAILED, "verify")(e.to_string()))?;
    if att.fingerprint != fingerprint {
        return Err(fail(exit::VERIFY_FAILED, "fingerprint")(
            attest::AttestError::Fingerprint {
                expected: fingerprint.to_string(),
                observed: att.fingerprint,
            }
            .to_string(),
        ));
    }
    let report = probe::run(policy, &mut ns.sandbox, &ns.sandbox_ipv6);
    if !report.passed {
        return Err(fail(exit::PROBE_FAILED, "probe")(format!(
            "readiness probe failed: {}",
            report.failures()
        )));
    }
    Ok(Report {
        ok: true,
        mode: NetMode::Probe,
        attestation: Some(att),
        probe: Some(report),
        confinement,
        failed_stage: None,
        error: None,
    })
}

/// Step 2. Leaves the thread in the sandbox namespace.
fn open_handles(netns_fd: OwnedFd) -> Result<Namespaces, Failure> {
    let f = |e: String| fail(exit::INSTALL_FAILED, "open handles")(e);
    let enforcement = Rtnl::open().map_err(|e| f(e.to_string()))?;
    let enforcement_ipv6 = Ipv6Conf::open().map_err(|e| f(e.to_string()))?;
    rustix::thread::move_into_link_name_space(
        netns_fd.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| {
        fail(exit::INSTALL_FAILED, "setns")(format!(
            "cannot enter the sandbox network namespace: {e}; it must be owned by the helper's user namespace"
        ))
    })?;
    drop(netns_fd);
    let sandbox = Rtnl::open().map_err(|e| f(e.to_string()))?;
    let sandbox_ipv6 = Ipv6Conf::open().map_err(|e| f(e.to_string()))?;
    Ok(Namespaces {
        enforcement,
        enforcement_ipv6,
        sandbox,
        sandbox_ipv6,
    })
}

/// Step 4.
pub fn read_policy(fd: &OwnedFd, digest: &str) -> Result<Policy, Failure> {
    lazaret_protocol::netpolicy::read_policy_memfd(fd, digest)
        .map_err(|e| fail(exit::BAD_INPUT, "policy")(e.to_string()))
}

/// The confinement-relevant lines of this thread's status, read through a
/// handle opened before landlock.
fn own_status(f: &std::fs::File) -> std::collections::BTreeMap<String, String> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 8192];
    let n = f.read_at(&mut buf, 0).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| {
            matches!(
                *k,
                "Seccomp"
                    | "Seccomp_filters"
                    | "NoNewPrivs"
                    | "CapEff"
                    | "CapPrm"
                    | "CapBnd"
                    | "CapInh"
                    | "CapAmb"
            )
        })
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}
