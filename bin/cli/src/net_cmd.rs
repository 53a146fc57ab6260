//! `lazaret net show [--json]`: the Domain's network policy, its readiness
//! fingerprint and the last readiness evidence (FR-18, FR-19, FR-20); with
//! `allow_hosts`, the live name-to-address table. `lazaret net log
//! [--json]`: what the filtering resolver refused, routed and expired.
//!
//! Reads `network.json`, which the coordinator writes in the Domain Root at
//! every start (the Domain Store itself stays locked while the coordinator
//! runs). A Domain that has never started shows the policy its profile
//! would derive now, and no evidence.
//!
//! Exit codes: 0 shown; 125 failure (bad config, unreadable record).

use crate::error::CliError;
use crate::global::Global;
use lazaret_config::EnvVars;
use lazaret_netpolicy::NetworkPlan;
use lazaret_protocol::netpolicy::dnslog::{self, DnsEvent};
use lazaret_protocol::netpolicy::hostlog;
use lazaret_protocol::netpolicy::policy::{Policy, Verdict};
use lazaret_protocol::netpolicy::record::{self, NetworkRecord};
use lazaret_protocol::netreport::{Check, ProbeReport};
use lazaret_protocol::DomainIdV1;
use serde::Deserialize as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum NetCmd {
    /// The Domain's derived policy, readiness fingerprint and last probe evidence
    Show(ShowArgs),
    /// The filtering resolver's log (allow_hosts): refused lookups, routed and expired addresses
    Log(ShowArgs),
}

#[derive(clap::Args)]
pub struct ShowArgs {
    /// One JSON document instead of text
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: NetCmd, g: &Global) -> Result<i32, CliError> {
    match cmd {
        NetCmd::Show(a) => show(&a, g),
        NetCmd::Log(a) => log(&a, g),
    }
}

/// The Domain's ID and Domain Root, the profile's `[network]`, the
/// workspace and the profile's name.
type Named = (String, PathBuf, lazaret_config::Network, PathBuf, String);

fn domain(g: &Global) -> Result<Named, CliError> {
    let env = EnvVars::from_process();
    let loaded = lazaret_config::load(g.config(), &env, rustix::process::getuid().as_raw())?;
    let root = lazaret_config::storage_root(&loaded.config, &env)?;
    let ws = crate::run::canonical_workspace(g.workspace())?;
    // Without --profile, the workspace's only Domain whatever its profile.
    let name = match &g.profile {
        Some(p) => p.clone(),
        None => crate::state_cmd::obvious_profile(&root, &loaded.config, &ws)?,
    };
    let profile = loaded.config.profile(&name)?;
    let id = DomainIdV1::derive(&name, ws.as_os_str().as_bytes()).to_string();
    let dir = root.join("domains").join(&id);
    Ok((id, dir, profile.network.clone(), ws, name))
}

/// The text of a helper's log in the Domain Root, bounded (empty when
/// the helper never ran).
fn read_log(domain_root: &Path, file: &str, max: u64) -> Result<String, CliError> {
    use std::io::Read;
    let path = domain_root.join(file);
    let mut bytes = Vec::new();
    match std::fs::File::open(&path) {
        Ok(f) => f
            .take(max)
            .read_to_end(&mut bytes)
            .map_err(|e| CliError::Session(format!("cannot read {}: {e}", path.display())))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => {
            return Err(CliError::Session(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The filtering resolver's events (none when it never ran).
fn dns_events(domain_root: &Path) -> Result<Vec<DnsEvent>, CliError> {
    let max = dnslog::MAX_BYTES + dnslog::MAX_LINE as u64;
    Ok(dnslog::parse(&read_log(domain_root, dnslog::FILE, max)?))
}

/// What the host-address watcher denied in the running generation.
fn host_denials(domain_root: &Path) -> Result<Vec<hostlog::WatchDenial>, CliError> {
    let max = hostlog::MAX_BYTES + hostlog::MAX_LINE as u64;
    let text = read_log(domain_root, hostlog::FILE, max)?;
    Ok(hostlog::denials(&hostlog::parse(&text)))
}

fn log(a: &ShowArgs, g: &Global) -> Result<i32, CliError> {
    let (_, dir, _, _, _) = domain(g)?;
    let events = dns_events(&dir)?;
    if a.json {
        // One document, like every other `--json`.
        crate::json::print(&events)?;
        return Ok(0);
    }
    if events.is_empty() {
        println!("no filtering resolver log: the profile lists no network.allow_hosts, or the Domain has not started with them");
        return Ok(0);
    }
    for e in &events {
        println!("{}", describe(e));
    }
    Ok(0)
}

/// One event for people; names are the sandbox's, so escaped.
fn describe(e: &DnsEvent) -> String {
    let esc = |s: &str| lazaret_protocol::display::escape(s);
    let when = crate::human::time_ms(e.time_ms());
    match e {
        DnsEvent::Started { allow, .. } => {
            format!("{when}  started: allow_hosts = {}", esc(&allow.join(", ")))
        }
        DnsEvent::Refused {
            name,
            qtype,
            cname: None,
            ..
        } => format!(
            "{when}  refused lookup {} ({}): no allow_hosts entry matches; add \"{}\" to allow it",
            esc(name),
            esc(qtype),
            esc(name)
        ),
        DnsEvent::Refused {
            name,
            qtype,
            cname: Some(c),
            ..
        } => format!(
            "{when}  refused lookup {} ({}): its answer is an alias of {}, which no entry allows; add \"{}\" to allow it",
            esc(name),
            esc(qtype),
            esc(c),
            esc(c)
        ),
        DnsEvent::ProbeRefused { name, .. } => format!(
            "{when}  readiness probe: lookup {} refused, as it must be",
            esc(name)
        ),
        DnsEvent::Routed {
            name,
            address,
            ports,
            expires_ms,
            ..
        } => format!(
            "{when}  routed {address} for {} on {} until {}",
            esc(name),
            ports_text(ports),
            crate::human::time_ms(*expires_ms)
        ),
        DnsEvent::AddressRefused {
            name, address, why, ..
        } => format!(
            "{when}  refused address {address} of {}: {}",
            esc(name),
            esc(why)
        ),
        DnsEvent::Expired { address, .. } => format!("{when}  expired {address}: route removed"),
        DnsEvent::Failed { message, .. } => format!("{when}  failed: {}", esc(message)),
        DnsEvent::LogFull { .. } => format!("{when}  the log is full: nothing more is recorded"),
    }
}

fn ports_text(ports: &[u16]) -> String {
    if ports.is_empty() {
        "every port".into()
    } else {
        let p: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
        format!("port {}", p.join(", "))
    }
}

fn show(a: &ShowArgs, g: &Global) -> Result<i32, CliError> {
    let (id, dir, network, ws, profile_name) = domain(g)?;
    let rec = recorded_or_derived(&dir, &id, &network)?;
    // The live table: only while a generation runs (its routes go with
    // the Domain's network namespace).
    let running = crate::lifecycle_cmd::is_running(&dir.join("domain.lock"));
    let live = match rec.policy.as_ref().and_then(|p| p.hosts.as_ref()) {
        Some(_) if rec.generation > 0 && running => dnslog::live_table(&dns_events(&dir)?),
        _ => Vec::new(),
    };
    // The host's addresses gained since the start: denied by the watcher
    // (those it had at the start are the policy's `host address` rules).
    let watched = match &rec.policy {
        Some(_) if rec.generation > 0 && running => host_denials(&dir)?,
        _ => Vec::new(),
    };
    if a.json {
        let mut v = serde_json::to_value(&rec).map_err(CliError::Encode)?;
        if rec.policy.is_some() {
            v["host_denials"] = serde_json::to_value(&watched).map_err(CliError::Encode)?;
        }
        if rec.policy.as_ref().is_some_and(|p| p.hosts.is_some()) {
            v["dns_table"] = serde_json::to_value(&live).map_err(CliError::Encode)?;
        }
        crate::json::print(&v)?;
    } else {
        let mut out = render(&rec, &ws.display().to_string(), &profile_name);
        if rec.policy.is_some() {
            render_watched(&mut out, running, &watched);
        }
        if rec.policy.as_ref().is_some_and(|p| p.hosts.is_some()) {
            render_live(&mut out, running, &live);
        }
        print!("{out}");
    }
    Ok(0)
}

/// The Domain's network record (`dir`'s), or, when it never started,
/// what the profile's `network` derives now.
fn recorded_or_derived(
    dir: &Path,
    id: &str,
    network: &lazaret_config::Network,
) -> Result<NetworkRecord, CliError> {
    let path = dir.join(record::FILE);

    let rec = match record::read(&path) {
        Ok(r) => Some(r),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(CliError::Session(format!(
                "cannot read {}: {e}; it is rewritten at the Domain's next start",
                path.display()
            )))
        }
    };
    Ok(match rec {
        Some(r) => r,
        None => {
            // Never started: what the profile derives now.
            let opts = lazaret_netpolicy::options_on_this_host(network, "preview")
                .map_err(|e| CliError::Network(e.to_string()))?;
            match lazaret_netpolicy::derive(network, &opts)
                .map_err(|e| CliError::Network(e.to_string()))?
            {
                NetworkPlan::None => NetworkRecord::disabled(id, 0),
                NetworkPlan::Policy(p) => {
                    let d = p.digest().map_err(|e| CliError::Network(e.to_string()))?;
                    NetworkRecord::for_policy(id, 0, &p, &d)
                }
            }
        }
    })
}

/// The heading of a list only a running Domain has: `title: `, then
/// `none` when it is empty, or why there is none.
fn live_heading(out: &mut String, title: &str, running: bool, empty: bool) {
    out.push_str(&format!(
        "{title}: {}\n",
        match (running, empty) {
            (false, _) => "none (the Domain is not running)",
            (true, true) => "none",
            (true, false) => "",
        }
    ));
}

/// The names routed now (the live DNS table), for people.
fn render_live(out: &mut String, running: bool, live: &[dnslog::LiveEntry]) {
    live_heading(out, "names routed now", running, live.is_empty());
    for e in live {
        let names: Vec<String> = e
            .names
            .iter()
            .map(lazaret_protocol::display::escape)
            .collect();
        out.push_str(&format!(
            "  {:<15} {}  {}  until {}\n",
            e.address.to_string(),
            names.join(", "),
            ports_text(&e.ports),
            crate::human::time_ms(e.expires_ms)
        ));
    }
}

/// The watcher's denials, for people.
fn render_watched(out: &mut String, running: bool, watched: &[hostlog::WatchDenial]) {
    live_heading(
        out,
        "host addresses gained since the start, denied",
        running,
        watched.is_empty(),
    );
    for d in watched {
        out.push_str(&format!(
            "  deny  {:<18} host address ({}), since {}\n",
            format!("{}/32", d.address),
            lazaret_protocol::display::escape(&d.ifname),
            crate::human::time_ms(d.since_ms)
        ));
    }
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Allow => "allow",
        Verdict::Deny => "deny",
    }
}

fn render_policy(out: &mut String, p: &Policy) {
    out.push_str(&format!(
        "default: {}   (longest prefix wins)\n",
        verdict(p.default)
    ));
    for r in &p.rules {
        out.push_str(&format!(
            "  {:<5} {:<18} {}\n",
            verdict(r.verdict),
            r.prefix.to_string(),
            r.origin
        ));
    }
    let resolvers: Vec<String> = p.resolvers.iter().map(|r| r.to_string()).collect();
    out.push_str(&format!(
        "resolvers: {}{}\n",
        resolvers.join(", "),
        if p.probe.dns_required {
            ""
        } else {
            "   (slirp's forwarder to the host's own resolver)"
        }
    ));
    if let Some(h) = &p.hosts {
        out.push_str(&format!(
            "allow_hosts: {}\n  resolved by Lazaret's filtering resolver (other names get NXDOMAIN and are never sent upstream); each answer's addresses are routed for its TTL, kept {}..{} s\n",
            h.allow.join(", "),
            h.ttl_floor,
            h.ttl_ceiling
        ));
    }
    out.push_str("IPv6: disabled in the enforcement and the sandbox namespace\n");
    if !p.ipv6_denied.is_empty() {
        out.push_str(&format!(
            "  IPv6 deny entries (already satisfied): {}\n",
            p.ipv6_denied.join(", ")
        ));
    }
    out.push_str(&format!(
        "probe: denied {} must be refused; permitted {}\n",
        p.probe.denied,
        p.probe
            .permitted
            .map(|t| format!("{t} must connect"))
            .unwrap_or_else(|| "none configured (network.probe)".into())
    ));
}

/// The probe's checks in the helper's report as the Domain Store keeps it
/// (verbatim, [`NetReport`] JSON), typed; none when it holds no probe.
/// Only the `probe` member is read: the rest (the attestation) was
/// written in other shapes by earlier versions and is not shown here.
///
/// [`NetReport`]: lazaret_protocol::netreport::NetReport
fn probe_checks(report: &serde_json::Value) -> Vec<Check> {
    #[derive(serde::Deserialize)]
    struct ProbeOnly {
        probe: Option<ProbeReport>,
    }
    ProbeOnly::deserialize(report)
        .ok()
        .and_then(|r| r.probe)
        .map(|p| p.checks)
        .unwrap_or_default()
}

fn render(rec: &NetworkRecord, workspace: &str, profile: &str) -> String {
    let mut out = format!(
        "Domain {} (profile {profile}, workspace {workspace})\n",
        rec.domain_id
    );
    if rec.generation == 0 {
        out.push_str("not started yet: the policy the profile derives now\n");
    } else {
        out.push_str(&format!("generation {}\n", rec.generation));
    }
    if rec.disabled {
        out.push_str("network: none (mode = \"none\"; the sandbox has no network)\n");
        return out;
    }
    out.push_str(&format!("policy digest: {}\n", rec.policy_digest));
    out.push_str(&format!(
        "readiness fingerprint: {}\n",
        if rec.fingerprint.is_empty() {
            "(none)"
        } else {
            &rec.fingerprint
        }
    ));
    if let Some(p) = &rec.policy {
        render_policy(&mut out, p);
    }
    if !rec.routes.is_empty() {
        out.push_str("routes of the enforcement namespace:\n");
        for r in &rec.routes {
            out.push_str(&format!("  {r}\n"));
        }
    }
    match &rec.evidence {
        None => out.push_str("readiness evidence: none yet\n"),
        Some(e) => {
            out.push_str(&format!(
                "readiness evidence (recorded {}): {}\n",
                crate::human::time_ms(e.recorded_at_ms),
                if e.passed { "PASSED" } else { "FAILED" }
            ));
            // The evidence is what the helpers reported from the
            // Domain's namespaces: shown escaped, as every record.
            if let Some(err) = &e.error {
                out.push_str(&format!(
                    "  error: {}\n",
                    lazaret_protocol::display::escape(err)
                ));
            }
            for c in probe_checks(&e.probe) {
                let mark = if c.passed {
                    "ok  "
                } else if !c.required {
                    "warn"
                } else {
                    "FAIL"
                };
                out.push_str(&format!(
                    "  {mark} {}: {} ({})\n",
                    lazaret_protocol::display::escape(&c.check),
                    lazaret_protocol::display::escape(&c.target),
                    lazaret_protocol::display::escape(&c.observed)
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::netreport::{NetMode, NetReport};

    fn check(name: &str, passed: bool, required: bool) -> Check {
        Check {
            check: name.into(),
            target: "1.1.1.1:443".into(),
            passed,
            observed: "refused".into(),
            required,
        }
    }

    #[test]
    fn the_probe_checks_are_read_typed_from_the_stored_report() {
        let report = NetReport {
            ok: false,
            mode: NetMode::Probe,
            attestation: None,
            probe: Some(ProbeReport {
                checks: vec![check("denied", true, true), check("dns", false, false)],
                passed: false,
            }),
            confinement: None,
            failed_stage: Some("probe".into()),
            error: Some("x".into()),
        };
        let stored = serde_json::to_value(&report).unwrap();
        let checks = probe_checks(&stored);
        assert_eq!(checks, report.probe.unwrap().checks);
        // An attestation in another shape (an earlier version's) does
        // not hide the checks; `required` defaults to true.
        let older = serde_json::json!({
            "ok": true, "mode": "probe", "attestation": {"fingerprint": 7},
            "probe": {"passed": false, "checks": [
                {"check": "c", "target": "t", "passed": false, "observed": "o"}
            ]}
        });
        assert_eq!(
            probe_checks(&older),
            [Check {
                check: "c".into(),
                target: "t".into(),
                passed: false,
                observed: "o".into(),
                required: true,
            }]
        );
        // No probe (an install report, a missing file): no checks.
        assert!(probe_checks(&serde_json::Value::Null).is_empty());
        assert!(probe_checks(&serde_json::json!({"ok": true, "mode": "install"})).is_empty());
    }

    #[test]
    fn the_readiness_evidence_is_shown_escaped() {
        let mut rec = NetworkRecord::disabled("d", 1);
        rec.disabled = false;
        let hostile = "\u{1b}[2J\u{1b}]0;owned\u{7}\nFAKE line";
        let probe = serde_json::json!({"probe": {"passed": false, "checks": [
            {"check": hostile, "target": hostile, "passed": false, "observed": hostile}
        ]}});
        rec.evidence = Some(lazaret_protocol::netpolicy::record::Evidence {
            passed: false,
            error: Some(hostile.into()),
            recorded_at_ms: 0,
            legacy_recorded_at_secs: None,
            install: serde_json::Value::Null,
            probe,
        });
        let out = render(&rec, "/w", "default");
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
        assert!(!out.contains("\nFAKE"), "{out:?}");
        assert_eq!(out.matches("FAKE line").count(), 4, "{out:?}");
    }
}
