//! `network.json` in the Domain Root: what `lazaret net show` prints while
//! the coordinator holds the Domain Store. Written only by the coordinator
//! (atomically: a temporary file, fsync, rename), after every start.

use serde::{Deserialize, Serialize};
use std::path::Path;

use super::policy::Policy;

/// File name in the Domain Root.
pub const FILE: &str = "network.json";
/// Upper bound of what `read` accepts.
pub const MAX_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NetworkRecord {
    pub domain_id: String,
    pub generation: u64,
    /// `mode = "none"`: the sandbox ran with `--network=none`.
    pub disabled: bool,
    pub policy_digest: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// The routes of the enforcement namespace, as `ip route` would print.
    pub routes: Vec<String>,
    /// The sandbox's `/etc/resolv.conf`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolv_conf: Option<String>,
    /// The readiness fingerprint (empty when installation failed).
    pub fingerprint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
}

/// The last readiness evidence: the helper's two reports, verbatim.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evidence {
    pub passed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Milliseconds since the epoch (as every `*_unix_ms` of Lazaret's
    /// JSON output).
    #[serde(rename = "recorded_at_unix_ms", default)]
    pub recorded_at_ms: u64,
    /// A record written before times were milliseconds: its seconds,
    /// turned into `recorded_at_ms` by [`read`] and never written.
    #[serde(rename = "recorded_at", default, skip_serializing)]
    pub legacy_recorded_at_secs: Option<u64>,
    pub install: serde_json::Value,
    pub probe: serde_json::Value,
}

impl NetworkRecord {
    /// The record of a policy about to be installed (no evidence yet).
    pub fn for_policy(domain_id: &str, generation: u64, policy: &Policy, digest: &str) -> Self {
        Self {
            domain_id: domain_id.into(),
            generation,
            disabled: false,
            policy_digest: digest.into(),
            policy: Some(policy.clone()),
            routes: policy.routes().iter().map(|r| r.to_string()).collect(),
            resolv_conf: Some(policy.resolv_conf()),
            fingerprint: String::new(),
            evidence: None,
        }
    }

    /// The record of a generation without network.
    pub fn disabled(domain_id: &str, generation: u64) -> Self {
        Self {
            domain_id: domain_id.into(),
            generation,
            disabled: true,
            policy_digest: String::new(),
            policy: None,
            routes: Vec::new(),
            resolv_conf: None,
            fingerprint: String::new(),
            evidence: None,
        }
    }
}

pub fn write(path: &Path, rec: &NetworkRecord) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)
}

pub fn read(path: &Path) -> std::io::Result<NetworkRecord> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(std::io::Error::other(format!(
            "{} is larger than {MAX_BYTES} bytes",
            path.display()
        )));
    }
    let mut rec: NetworkRecord = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
    if let Some(e) = rec.evidence.as_mut() {
        if let Some(secs) = e.legacy_recorded_at_secs.take() {
            e.recorded_at_ms = secs.saturating_mul(1000);
        }
    }
    Ok(rec)
}
