//! The egress policy, round trip: read back from the exported YAML (as
//! the cluster gets it), the egress Pod's policy and its NetworkPolicy
//! fence decide every name and address as the local Network Sidecar's
//! policy does, derived from the same profile.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::Ipv4Addr;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use lazaret_netpolicy::NetworkPlan;
use lazaret_protocol::netpolicy::policy::{Policy, Verdict};
use serde::Deserialize;
use serde_json::Value;

/// Every document of the YAML stream, as `kubectl` would read it.
fn documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("each document parses"))
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

/// The local policy, derived as the coordinator derives it (no host
/// addresses: the same inputs as the export's).
fn local(profile: &lazaret_config::Profile) -> Option<Policy> {
    let net = &profile.network;
    let opts = lazaret_netpolicy::options_for(net, "local-domain/1").unwrap();
    match lazaret_netpolicy::derive(net, &opts).unwrap() {
        NetworkPlan::None => None,
        NetworkPlan::Policy(p) => Some(p),
    }
}

/// Each rule's edges and their neighbours, and a spread of addresses.
fn addresses(p: &Policy) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    for r in &p.rules {
        let (lo, hi) = (
            u32::from(r.prefix.network()),
            u32::from(r.prefix.broadcast()),
        );
        for a in [
            lo.wrapping_sub(1),
            lo,
            lo + 1,
            hi - 1,
            hi,
            hi.wrapping_add(1),
        ] {
            out.push(Ipv4Addr::from(a));
        }
    }
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..4096 {
        // xorshift: the same spread every run.
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.push(Ipv4Addr::from(x));
    }
    out.extend(
        [
            "8.8.8.8",
            "1.1.1.1",
            "140.82.112.3",
            "10.96.0.10",
            "169.254.169.254",
        ]
        .map(|a| a.parse::<Ipv4Addr>().unwrap()),
    );
    out
}

const NAMES: [&str; 14] = [
    "github.com",
    "GitHub.com.",
    "api.github.com",
    "githubusercontent.com",
    "raw.githubusercontent.com",
    "a.b.githubusercontent.com",
    "registry.npmjs.org",
    "ssh.github.com",
    "api.openai.com",
    "api.anthropic.com",
    "pypi.org",
    "evil.example",
    "github.com.evil.example",
    "lazaret-probe.invalid",
];

/// What the fence's `ipBlock` peers (the rule without ports) allow.
fn fence_allows(np: &NetworkPolicy, a: Ipv4Addr) -> bool {
    let spec = np.spec.as_ref().unwrap();
    spec.egress
        .iter()
        .flatten()
        .filter(|r| r.ports.is_none())
        .flat_map(|r| r.to.iter().flatten())
        .filter_map(|p| p.ip_block.as_ref())
        .any(|b| {
            let cidr: ipnet::Ipv4Net = b.cidr.parse().unwrap();
            cidr.contains(&a)
                && !b
                    .except
                    .iter()
                    .flatten()
                    .any(|e| e.parse::<ipnet::Ipv4Net>().unwrap().contains(&a))
        })
}

#[test]
fn the_egress_pod_decides_as_the_local_network_sidecar() {
    let mut checked = 0;
    for (name, profile) in common::profiles() {
        let export = common::export(&profile, &name);
        let docs = documents(&export.to_yaml().unwrap());
        let egress = format!("lazaret-egress-{name}");
        let Some(want) = local(&profile) else {
            // No network: no egress Pod, and the agent may send nothing.
            assert!(find(&docs, "ConfigMap", &egress).is_none(), "{name}");
            let np = find(&docs, "NetworkPolicy", &format!("lazaret-{name}-agent")).unwrap();
            assert_eq!(np["spec"]["egress"], serde_json::json!([]), "{name}");
            continue;
        };
        let cm =
            find(&docs, "ConfigMap", &egress).unwrap_or_else(|| panic!("{name}: no ConfigMap"));
        let got: Policy =
            serde_json::from_str(cm["data"]["policy.json"].as_str().unwrap()).unwrap();
        got.check_consistent().unwrap();
        let np: NetworkPolicy =
            serde_json::from_value(find(&docs, "NetworkPolicy", &egress).unwrap().clone()).unwrap();

        for a in addresses(&want) {
            let w = want.verdict_for(a).verdict;
            assert_eq!(got.verdict_for(a).verdict, w, "{name}: {a}");
            if !want.link.network.contains(&a) {
                // The fence lets the egress Pod reach what the sandbox may
                // reach locally, directly or by an allowed name.
                let by_name = want.hosts.is_some() && want.verdict_for(a).origin.is_none();
                assert_eq!(
                    fence_allows(&np, a),
                    w == Verdict::Allow || by_name,
                    "{name}: fence, {a}"
                );
            }
            checked += 1;
        }
        match (&want.hosts, &got.hosts) {
            (None, None) => {}
            (Some(w), Some(g)) => {
                let (w, g) = (w.patterns().unwrap(), g.patterns().unwrap());
                for n in NAMES {
                    assert_eq!(g.allows(n), w.allows(n), "{name}: {n}");
                    assert_eq!(g.ports(n), w.ports(n), "{name}: ports of {n}");
                }
            }
            (w, g) => panic!("{name}: allow_hosts {w:?} exported as {g:?}"),
        }
        assert_eq!(got.resolvers, want.resolvers, "{name}");
    }
    assert!(checked > 10_000, "only {checked} decisions compared");
}

#[test]
fn names_only_profiles_allow_only_their_names() {
    // Not vacuous: the profile with allow_hosts really restricts.
    let (_, profile) = common::profiles()
        .into_iter()
        .find(|(n, _)| n == "names")
        .unwrap();
    let export = common::export(&profile, "names");
    let hosts = export.policy.unwrap().hosts.unwrap().patterns().unwrap();
    assert!(hosts.allows("raw.githubusercontent.com"));
    assert!(!hosts.allows("githubusercontent.com"));
    assert!(!hosts.allows("evil.example"));
    assert_eq!(hosts.ports("registry.npmjs.org"), Some(vec![443]));
}

#[test]
fn a_refused_network_configuration_is_refused_by_the_export_too() {
    let mut p = lazaret_config::Profile::default();
    p.network.allow_hosts = vec!["github.com".into()];
    // allow_hosts with default = "allow": `lazaret run` refuses it.
    let e = lazaret_kubernetes::export(&p, &common::options("p")).unwrap_err();
    assert!(
        e.to_string()
            .contains("allow_hosts needs `default = \"deny\"`"),
        "{e}"
    );
    let bad = lazaret_kubernetes::export(
        &lazaret_config::Profile::default(),
        &common::options("Bad_Name"),
    )
    .unwrap_err();
    assert!(bad.to_string().contains("\"Bad_Name\""), "{bad}");
    let mut o = common::options("p");
    o.repo = None;
    let e = lazaret_kubernetes::export(&lazaret_config::Profile::default(), &o).unwrap_err();
    assert!(e.to_string().contains("--ref \"main\" needs --repo"), "{e}");
}
