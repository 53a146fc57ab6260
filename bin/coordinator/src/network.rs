//! The Network Sidecar, coordinator side: binds the policy the CLI derived
//! to the generation, prepares the resolver file and the
//! plan's network section, and records the intent and the readiness
//! evidence in the Domain Store and in `network.json` (which `lazaret net
//! show` reads while this coordinator holds the store).
//!
//! Installing, attesting and probing the policy is the supervisor's and
//! `lazaret-netpolicy`'s job; this module decides and records only.

use crate::start_error::{PolicyRefusal, StartError};
use lazaret_protocol::netpolicy::record::{self, Evidence, NetworkRecord};
use lazaret_protocol::netpolicy::Policy;
use lazaret_protocol::netreport::{NetReport, MAX_REPORT_BYTES};
use lazaret_protocol::plan::{
    CoordinatorInput, DerivedPolicy, DnsFilterPlan, MountKind, MountPurpose, PlannedMount,
    SandboxNetwork,
};
use lazaret_state::store::{NetworkEvidence, NetworkIntent, Store};
use lazaret_state::DomainLayout as Layout;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The sandbox path of the resolver file.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";
/// Largest helper report read back (as the supervisor bounds it).
const MAX_REPORT: u64 = MAX_REPORT_BYTES as u64;

/// The policy the CLI derived, bound to `binding`, or `None` for `mode =
/// "none"`. The coordinator derives nothing: it checks the handed bytes
/// against their digest and decodes them (which refuses bytes that are not
/// canonical or not consistent), so it links no configuration parser.
pub fn policy(input: &CoordinatorInput, binding: &str) -> Result<Option<Policy>, StartError> {
    let slirp4netns = input.network.slirp4netns.is_some();
    bind(input.network.policy.as_ref(), slirp4netns, binding)
}

fn bind(
    handed: Option<&DerivedPolicy>,
    slirp4netns: bool,
    binding: &str,
) -> Result<Option<Policy>, StartError> {
    let Some(handed) = handed else {
        return Ok(None);
    };
    let refused = |e: PolicyRefusal| StartError::PolicyRefused(e);
    let got = lazaret_protocol::netpolicy::policy::digest_bytes(&handed.bytes);
    if !got.eq_ignore_ascii_case(&handed.digest) {
        return Err(refused(PolicyRefusal::Digest {
            got,
            handed: handed.digest.clone(),
        }));
    }
    let mut p = Policy::from_bytes(&handed.bytes).map_err(|e| refused(e.into()))?;
    if !slirp4netns {
        return Err(StartError::NoSlirp4netns);
    }
    p.binding = binding.to_string();
    p.check_consistent().map_err(|e| refused(e.into()))?;
    Ok(Some(p))
}

pub fn record_path(layout: &Layout) -> PathBuf {
    layout.root.join(record::FILE)
}

/// Records what this generation is about to install, before anything runs.
pub fn record_intent(
    store: &Store,
    layout: &Layout,
    input: &CoordinatorInput,
    generation: u64,
    policy: Option<&Policy>,
) -> Result<(), StartError> {
    let (intent, rec) = match policy {
        Some(p) => {
            let d = p.digest()?;
            (
                NetworkIntent {
                    generation,
                    policy_digest: d.clone(),
                    disabled: false,
                },
                NetworkRecord::for_policy(&input.domain_id, generation, p, &d),
            )
        }
        None => (
            NetworkIntent {
                generation,
                policy_digest: String::new(),
                disabled: true,
            },
            NetworkRecord::disabled(&input.domain_id, generation),
        ),
    };
    store.set_network_intent(&intent)?;
    let path = record_path(layout);
    record::write(&path, &rec).map_err(StartError::write(&path))
}

fn net_dir(layout: &Layout) -> PathBuf {
    layout.run().join("net")
}

/// Writes the resolver file (and its mount point in Lazaret's control
/// layer, so that no State Anchor upper ever holds it), and returns the
/// plan's network section and the read-only `/etc/resolv.conf` mount.
pub fn prepare(
    input: &CoordinatorInput,
    layout: &Layout,
    policy: &Policy,
) -> Result<(SandboxNetwork, PlannedMount), StartError> {
    let dir = net_dir(layout);
    crate::lifecycle::mkdir_private(&dir)?;
    let resolv = dir.join("resolv.conf");
    write_file(&resolv, policy.resolv_conf().as_bytes())?;
    // The bind's mount point, in the layer above the image: runsc would
    // otherwise create it in the /etc State Anchor's upper.
    let etc = layout.run().join("control-lower/etc");
    crate::lifecycle::mkdir_all(&etc, 0o755)?;
    let _ = std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(0o755));
    write_file(&etc.join("resolv.conf"), b"")?;
    let slirp4netns = input
        .network
        .slirp4netns
        .clone()
        .ok_or(StartError::NoSlirp4netnsToPlan)?;
    let dns_filter = match &policy.hosts {
        None => None,
        Some(_) => {
            let sidecar = dir.join("sidecar-resolv.conf");
            write_file(&sidecar, policy.sidecar_resolv_conf().as_bytes())?;
            // One generation's log, and the one before it.
            let log = layout.root.join(lazaret_protocol::netpolicy::dnslog::FILE);
            let _ = std::fs::rename(&log, log.with_extension("log.1"));
            Some(DnsFilterPlan {
                binary: input.libexec.join("lazaret-dns-filter"),
                sidecar_resolv_conf: sidecar,
                log,
            })
        }
    };
    // One generation's log of the host-address watcher, and the one
    // before it.
    let host_watch_log = layout.root.join(lazaret_protocol::netpolicy::hostlog::FILE);
    let _ = std::fs::rename(&host_watch_log, host_watch_log.with_extension("log.1"));
    let bytes = policy.to_bytes()?;
    let net = SandboxNetwork {
        digest: lazaret_protocol::netpolicy::policy::digest_bytes(&bytes),
        policy: bytes,
        helper: input.libexec.join("lazaret-netpolicy"),
        slirp4netns,
        resolv_conf: resolv.clone(),
        api_socket_dir: dir.clone(),
        ports: input.network.ports.clone(),
        evidence_dir: dir,
        hide_proc_sys_net: input.network.hide_proc_sys_net,
        domain_id: input.domain_id.clone(),
        attachment: policy.binding.clone(),
        dns_filter,
        host_watch_log,
    };
    let mount = PlannedMount {
        destination: RESOLV_CONF.into(),
        kind: MountKind::Bind {
            source: resolv,
            read_only: true,
        },
        purpose: MountPurpose::Network,
    };
    Ok((net, mount))
}

fn write_file(p: &Path, bytes: &[u8]) -> Result<(), StartError> {
    std::fs::write(p, bytes)
        .and_then(|_| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)))
        .map_err(StartError::write(p))
}

/// A report of the network helper as the holder left it: the JSON, kept
/// verbatim as evidence, and the typed [`NetReport`] the decisions read
/// (`None` when the file is missing or holds no report).
struct Report {
    raw: serde_json::Value,
    typed: Option<NetReport>,
}

impl Report {
    fn attestation(&self) -> Option<&lazaret_protocol::netreport::Attestation> {
        self.typed.as_ref()?.attestation.as_ref()
    }

    fn error(&self) -> Option<String> {
        let r = self.typed.as_ref()?;
        let err = r.error.as_ref()?;
        Some(match &r.failed_stage {
            Some(stage) => format!("{stage}: {err}"),
            None => err.clone(),
        })
    }
}

fn read_report(p: &Path) -> Report {
    use std::io::Read;
    let mut bytes = Vec::new();
    if let Ok(f) = std::fs::File::open(p) {
        let _ = f.take(MAX_REPORT).read_to_end(&mut bytes);
    }
    let raw = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    let typed = serde_json::from_value(raw.clone()).ok();
    Report { raw, typed }
}

/// Records the readiness evidence the holder left (FR-18, FR-19), after
/// the supervisor reported: the fingerprint, the probe's checks, or the
/// check that failed. Never fails the start itself: a failed record is
/// logged.
pub fn record_evidence(
    store: &Store,
    layout: &Layout,
    input: &CoordinatorInput,
    generation: u64,
    policy: Option<&Policy>,
    start_error: Option<&String>,
) {
    let Some(policy) = policy else { return };
    let Ok(d) = policy.digest() else { return };
    let dir = net_dir(layout);
    let install = read_report(&dir.join("install.json"));
    let probe = read_report(&dir.join("probe.json"));
    // The attestation must name this generation's network attachment.
    let attached = install.attestation().map(|a| a.binding.as_str());
    let misattached = attached.is_some_and(|b| b != policy.binding);
    let passed = probe.typed.as_ref().is_some_and(|r| r.ok) && !misattached;
    let fingerprint = [&probe, &install]
        .iter()
        .find_map(|r| Some(r.attestation()?.fingerprint.as_str()))
        .unwrap_or("")
        .to_string();
    let error = if passed {
        None
    } else if misattached {
        Some(format!(
            "the Network Sidecar attested another network attachment ({}), not {}",
            attached.unwrap_or_default(),
            policy.binding
        ))
    } else {
        probe
            .error()
            .or_else(|| install.error())
            .or_else(|| start_error.cloned())
            .or_else(|| Some("the readiness probe did not run".into()))
    };
    let recorded_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let ev = NetworkEvidence {
        generation,
        policy_digest: d.clone(),
        fingerprint: fingerprint.clone(),
        passed,
        error: error.clone(),
        recorded_at,
        install_report: install.raw.to_string(),
        probe_report: probe.raw.to_string(),
    };
    if let Err(e) = store.set_network_evidence(&ev) {
        crate::lifecycle::log(format!("cannot record the network evidence: {e}"));
    }
    let mut rec = NetworkRecord::for_policy(&input.domain_id, generation, policy, &d);
    rec.fingerprint = fingerprint;
    rec.evidence = Some(Evidence {
        passed,
        error,
        recorded_at_ms: recorded_at.saturating_mul(1000),
        legacy_recorded_at_secs: None,
        install: install.raw,
        probe: probe.raw,
    });
    let path = record_path(layout);
    if let Err(e) = record::write(&path, &rec) {
        crate::lifecycle::log(format!("cannot write {}: {e}", path.display()));
    }
    crate::lifecycle::log(format!(
        "network policy {d} generation {generation}: readiness {} fingerprint {}",
        if passed { "passed" } else { "FAILED" },
        rec.fingerprint
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_netpolicy::section::{Network, NetworkDefault};
    use lazaret_netpolicy::{DeriveOptions, NetworkPlan};

    fn handed() -> DerivedPolicy {
        let net = Network {
            allow: vec!["10.99.0.0/24".into()],
            default: NetworkDefault::Deny,
            ..Network::default()
        };
        let opts = DeriveOptions {
            binding: lazaret_protocol::plan::UNBOUND_POLICY.into(),
            ..DeriveOptions::default()
        };
        let NetworkPlan::Policy(p) = lazaret_netpolicy::derive(&net, &opts).unwrap() else {
            panic!("a policy")
        };
        let bytes = p.to_bytes().unwrap();
        let digest = lazaret_protocol::netpolicy::policy::digest_bytes(&bytes);
        DerivedPolicy { bytes, digest }
    }

    #[test]
    fn the_handed_policy_is_bound_to_the_generation() {
        let h = handed();
        let p = bind(Some(&h), true, "generation 7").unwrap().unwrap();
        assert_eq!(p.binding, "generation 7");
        let mut unbound = Policy::from_bytes(&h.bytes).unwrap();
        unbound.binding = p.binding.clone();
        assert_eq!(unbound, p, "nothing but the binding changes");
        assert_eq!(bind(None, false, "g").unwrap(), None, "mode = none");
    }

    #[test]
    fn a_policy_that_is_not_the_one_digested_or_not_canonical_is_refused() {
        let mut h = handed();
        h.bytes.push(0);
        let e = bind(Some(&h), true, "g").unwrap_err();
        assert!(
            matches!(e, StartError::PolicyRefused(PolicyRefusal::Digest { .. })),
            "{e}"
        );
        let got = lazaret_protocol::netpolicy::policy::digest_bytes(&h.bytes);
        assert_eq!(
            e.to_string(),
            format!(
                "the network policy the CLI derived is refused: its digest is {got}, not {}; nothing was started",
                h.digest
            )
        );
        h.digest = got;
        let e = bind(Some(&h), true, "g").unwrap_err();
        assert!(
            matches!(e, StartError::PolicyRefused(PolicyRefusal::Policy(_))),
            "{e}"
        );
        assert!(e.to_string().ends_with("; nothing was started"), "{e}");
        let e = bind(Some(&handed()), false, "g").unwrap_err();
        assert!(matches!(e, StartError::NoSlirp4netns), "{e}");
        assert!(
            e.to_string().starts_with("slirp4netns is not installed"),
            "{e}"
        );
    }
}
