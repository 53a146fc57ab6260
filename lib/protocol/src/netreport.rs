//! The network helper's report: the one JSON document `lazaret-netpolicy`
//! prints on stdout, which the supervisor reads (and keeps verbatim as the
//! readiness evidence, `install.json` / `probe.json`). Shared by both ends
//! so that neither reads the other's output as untyped JSON.
//!
//! The helper runs confined, but it runs as root of the Domain user
//! namespace next to the sandbox's network: the supervisor treats the
//! report as input, bounded and parsed into these types, nothing more.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most bytes of report the supervisor reads.
pub const MAX_REPORT_BYTES: usize = 1 << 20;

/// Which subcommand produced the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetMode {
    Install,
    Probe,
}

impl NetMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetMode::Install => "install",
            NetMode::Probe => "probe",
        }
    }
}

/// The JSON document printed on stdout.
#[derive(Debug, Serialize, Deserialize)]
pub struct NetReport {
    pub ok: bool,
    pub mode: NetMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attestation: Option<Attestation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeReport>,
    /// `Seccomp`, `NoNewPrivs`, `CapEff`... of the helper after confinement,
    /// read from its own `/proc/thread-self/status` (opened before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confinement: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_stage: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the enforcement namespace holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnforcementState {
    pub links: Vec<String>,
    pub addresses_v4: Vec<String>,
    pub addresses_v6: Vec<String>,
    pub routes_v4: Vec<ObservedRoute>,
    pub routes_v6: Vec<ObservedRoute>,
    pub rules_v4: Vec<ObservedRule>,
    /// `disable_ipv6` of `all`, `default` and every link.
    pub disable_ipv6: BTreeMap<String, String>,
}

/// What the sandbox namespace holds that does not change when slirp B
/// attaches (so the fingerprint is the same at install and at probe).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxState {
    pub disable_ipv6_all: String,
    pub disable_ipv6_default: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    pub enforcement: EnforcementState,
    pub sandbox: SandboxState,
}

/// The installer's statement: this policy, this observed state, this
/// fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attestation {
    pub policy_digest: String,
    pub binding: String,
    pub expected_routes: Vec<String>,
    pub observed: Observed,
    /// SHA-256 over the context, the policy digest and the canonical
    /// (postcard) observed state.
    pub fingerprint: String,
}

/// One route, normalised for attestation: names instead of ifindexes, only
/// the attributes that decide forwarding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObservedRoute {
    pub table: u32,
    pub dst: String,
    pub kind: String,
    pub gateway: Option<String>,
    pub dev: Option<String>,
    pub scope: u8,
    pub protocol: u8,
    pub onlink: bool,
    pub priority: Option<u32>,
    pub prefsrc: Option<String>,
    /// Attributes the normaliser does not know (encapsulation, multipath,
    /// marks...): their presence alone is recorded, and fails verification.
    pub unusual: Vec<String>,
}

/// One policy-routing rule, normalised.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObservedRule {
    pub priority: u32,
    pub table: u32,
    pub action: String,
    /// Selectors (from, to, iif, fwmark...): any make the rule non-default.
    pub selectors: Vec<String>,
}

/// One check of the probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub check: String,
    pub target: String,
    pub passed: bool,
    pub observed: String,
    /// A failing check that is not required is recorded but does not fail
    /// the probe (the implicit resolver, see `ProbePlan::dns_required`).
    #[serde(default = "required_default")]
    pub required: bool,
}

fn required_default() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub checks: Vec<Check>,
    pub passed: bool,
}

impl ProbeReport {
    /// The failing checks, for an error message.
    pub fn failures(&self) -> String {
        self.checks
            .iter()
            .filter(|c| !c.passed && c.required)
            .map(|c| format!("{} {} ({})", c.check, c.target, c.observed))
            .collect::<Vec<_>>()
            .join("; ")
    }
}
