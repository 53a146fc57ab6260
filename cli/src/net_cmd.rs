//! `lazaret net show [--json]`: the Domain's network policy, its readiness
//! fingerprint and the last readiness evidence (FR-18, FR-19, FR-20).
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
use lazaret_netpolicy::policy::{Origin, Policy, Verdict};
use lazaret_netpolicy::record::{self, NetworkRecord};
use lazaret_netpolicy::NetworkPlan;
use lazaret_protocol::DomainIdV1;
use std::os::unix::ffi::OsStrExt;

#[derive(clap::Subcommand)]
pub enum NetCmd {
    /// The Domain's derived policy, readiness fingerprint and last probe evidence
    Show(ShowArgs),
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
    }
}

fn show(a: &ShowArgs, g: &Global) -> Result<i32, CliError> {
    let env = EnvVars::from_process();
    let loaded = lazaret_config::load(g.config(), &env, rustix::process::getuid().as_raw())?;
    let profile = loaded.config.profile(g.profile())?;
    let root = lazaret_config::storage_root(&loaded.config, &env)?;
    let ws = crate::run::canonical_workspace(g.workspace())?;
    let id = DomainIdV1::derive(g.profile(), ws.as_os_str().as_bytes()).to_string();
    let path = root.join("domains").join(&id).join(record::FILE);

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
    let rec = match rec {
        Some(r) => r,
        None => {
            // Never started: what the profile derives now.
            let opts = lazaret_netpolicy::options_for(&profile.network, "preview")
                .map_err(|e| CliError::Network(e.to_string()))?;
            match lazaret_netpolicy::derive(&profile.network, &opts)
                .map_err(|e| CliError::Network(e.to_string()))?
            {
                NetworkPlan::None => NetworkRecord::disabled(&id, 0),
                NetworkPlan::Policy(p) => {
                    let d = p.digest().map_err(|e| CliError::Network(e.to_string()))?;
                    NetworkRecord::for_policy(&id, 0, &p, &d)
                }
            }
        }
    };
    if a.json {
        println!(
            "{}",
            lazaret_protocol::display::ascii_json(
                &serde_json::to_string_pretty(&rec).expect("json")
            )
        );
    } else {
        print!("{}", render(&rec, &ws.display().to_string(), g.profile()));
    }
    Ok(0)
}

fn origin(o: &Origin) -> String {
    match o {
        Origin::Builtin { what, fixed } => {
            format!("built-in: {what}{}", if *fixed { " (fixed)" } else { "" })
        }
        Origin::Link { what } => format!("link: {what}"),
        Origin::Allow { index, entry } => format!("network.allow[{index}] {entry:?}"),
        Origin::Deny { index, entry } => format!("network.deny[{index}] {entry:?}"),
        Origin::Dns { index, entry } => format!("network.dns[{index}] {entry:?}"),
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
            origin(&r.origin)
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
                crate::human::time_secs(e.recorded_at),
                if e.passed { "PASSED" } else { "FAILED" }
            ));
            if let Some(err) = &e.error {
                out.push_str(&format!("  error: {err}\n"));
            }
            let checks = e
                .probe
                .pointer("/probe/checks")
                .and_then(|c| c.as_array())
                .cloned()
                .unwrap_or_default();
            for c in checks {
                let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
                let mark = match (c["passed"].as_bool(), c["required"].as_bool()) {
                    (Some(true), _) => "ok  ",
                    (_, Some(false)) => "warn",
                    _ => "FAIL",
                };
                out.push_str(&format!(
                    "  {mark} {}: {} ({})\n",
                    s("check"),
                    s("target"),
                    s("observed")
                ));
            }
        }
    }
    out
}
