//! Table tests of policy derivation: no root, no namespaces.

use crate::derive::*;
use crate::plan::{DeriveError, DeriveOptions, NetworkPlan};
use crate::section::{Network, NetworkDefault, NetworkMode};
use ipnet::Ipv4Net;
use lazaret_protocol::netpolicy::policy::*;
use std::net::Ipv4Addr;

fn net(allow: &[&str], deny: &[&str], dns: &[&str], default: NetworkDefault) -> Network {
    Network {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
        dns: dns.iter().map(|s| s.to_string()).collect(),
        allow_hosts: vec![],
        default,
        mode: None,
        probe: None,
    }
}

fn policy(n: &Network) -> Policy {
    match derive(n, &DeriveOptions::default()).unwrap() {
        NetworkPlan::Policy(p) => p,
        NetworkPlan::None => panic!("expected a policy"),
    }
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

use NetworkDefault::{Allow as DA, Deny as DD};
use Verdict::{Allow as A, Deny as D};

#[test]
fn verdict_table() {
    // (config, destination, expected verdict)
    let default_allow = net(&[], &[], &[], DA);
    let with_allow = net(&["10.99.0.0/24"], &[], &["10.99.5.53"], DA);
    let default_deny = net(&["198.51.100.0/28", "10.99.0.0/24"], &[], &[], DD);
    let nested = net(&["10.99.0.0/16"], &["10.99.7.0/24"], &[], DA);
    let public_deny = net(&[], &["203.0.113.0/24"], &[], DA);
    let override_builtin = net(&["172.16.0.0/12"], &[], &[], DA);
    let cases: &[(&Network, &str, Verdict)] = &[
        (&default_allow, "198.51.100.1", A),
        (&default_allow, "8.8.8.8", A),
        (&default_allow, "10.99.0.1", D),
        (&default_allow, "172.16.9.1", D),
        (&default_allow, "172.31.255.255", D),
        (&default_allow, "172.32.0.1", A),
        (&default_allow, "192.168.1.1", D),
        (&default_allow, "169.254.169.254", D),
        (&default_allow, "100.64.0.1", D),
        (&default_allow, "100.127.255.254", D),
        (&default_allow, "100.128.0.1", A),
        (&default_allow, "0.1.2.3", D),
        (&default_allow, "127.0.0.1", D),
        (&default_allow, "224.0.0.1", D),
        (&default_allow, "239.255.255.250", D),
        (&default_allow, "240.0.0.1", D),
        (&default_allow, "255.255.255.255", D),
        (&default_allow, "10.0.2.2", D), // slirp host loopback
        (&default_allow, "10.0.2.3", A), // slirp DNS: the default resolver
        (&with_allow, "10.99.0.1", A),
        (&with_allow, "10.99.1.1", D),
        (&with_allow, "10.99.5.53", A), // resolver host route inside 10/8
        (&with_allow, "10.99.5.54", D),
        (&with_allow, "10.0.2.3", D), // not a chosen resolver
        (&default_deny, "198.51.100.1", A),
        (&default_deny, "198.51.100.16", D),
        (&default_deny, "8.8.8.8", D),
        (&default_deny, "10.99.0.1", A),
        (&default_deny, "10.99.1.1", D),
        (&default_deny, "10.0.2.3", A), // DNS stays reachable
        (&nested, "10.99.0.1", A),
        (&nested, "10.99.7.1", D),
        (&nested, "10.98.0.1", D),
        (&public_deny, "203.0.113.9", D),
        (&public_deny, "203.0.114.9", A),
        (&override_builtin, "172.16.9.1", A),
        (&override_builtin, "10.1.1.1", D),
    ];
    for (n, dst, want) in cases {
        let p = policy(n);
        let d = p.verdict_for(ip(dst));
        assert_eq!(d.verdict, *want, "{dst} under {n:?}: {d:?}");
    }
}

#[test]
fn default_deny_installs_unreachable_default() {
    let p = policy(&net(&["198.51.100.0/28"], &[], &[], DD));
    let r = p.routes();
    assert!(r.contains(&RouteSpec::Unreachable(Ipv4Net::default())));
    assert!(r.contains(&RouteSpec::Via {
        prefix: "198.51.100.0/28".parse().unwrap(),
        gateway: ip("10.0.2.2"),
        ifname: "tap0".into()
    }));
}

#[test]
fn default_allow_routes() {
    let p = policy(&net(&["10.99.0.0/24"], &[], &["10.99.5.53"], DA));
    let r: Vec<String> = p.routes().iter().map(|r| r.to_string()).collect();
    for want in [
        "0.0.0.0/0 via 10.0.2.2 dev tap0 onlink",
        "10.0.2.0/24 dev tap0 scope link",
        "unreachable 10.0.0.0/8",
        "unreachable 10.0.2.2/32",
        "unreachable 10.0.2.3/32",
        "10.99.0.0/24 via 10.0.2.2 dev tap0 onlink",
        "10.99.5.53/32 via 10.0.2.2 dev tap0 onlink",
        "unreachable 169.254.0.0/16",
        "unreachable 100.64.0.0/10",
        "unreachable 240.0.0.0/4",
    ] {
        assert!(r.contains(&want.to_string()), "{want} missing from {r:#?}");
    }
    assert_eq!(p.resolvers, vec![ip("10.99.5.53")]);
    assert_eq!(
        p.resolv_conf()
            .lines()
            .filter(|l| l.starts_with("nameserver"))
            .collect::<Vec<_>>(),
        vec!["nameserver 10.99.5.53"]
    );
}

#[test]
fn errors_name_the_entries() {
    let cases: &[(Network, &str)] = &[
        (
            net(&["10.99.0.0/24"], &["10.99.0.0/24"], &[], DA),
            "network.allow[0] \"10.99.0.0/24\" and network.deny[0] \"10.99.0.0/24\"",
        ),
        (
            net(
                &["1.2.3.0/24", "10.99.0.0/24"],
                &["5.0.0.0/8", " 10.99.0.0/24"],
                &[],
                DA,
            ),
            "network.allow[1] \"10.99.0.0/24\" and network.deny[1] \" 10.99.0.0/24\"",
        ),
        (
            net(&["10.99.0.0/33"], &[], &[], DA),
            "network.allow[0] \"10.99.0.0/33\"",
        ),
        (
            net(&[], &["not-a-cidr"], &[], DA),
            "network.deny[0] \"not-a-cidr\"",
        ),
        (
            net(&["10.99.0.1/24"], &[], &[], DA),
            "host bits set; write the network address, 10.99.0.0/24",
        ),
        (
            net(&[], &[], &["resolver.example"], DA),
            "network.dns[0] \"resolver.example\"",
        ),
        (
            net(&[], &["10.99.5.53/32"], &["10.99.5.53"], DA),
            "network.dns[0] \"10.99.5.53\" and network.deny[0] \"10.99.5.53/32\"",
        ),
        (
            net(&["127.0.0.1"], &[], &[], DA),
            "lies in 127.0.0.0/8 (loopback)",
        ),
        (
            net(&["224.0.0.0/8"], &[], &[], DA),
            "lies in 224.0.0.0/4 (multicast)",
        ),
        (
            net(&["10.0.2.0/24"], &[], &[], DA),
            "overlaps the slirp4netns link network",
        ),
        (
            net(&[], &["10.0.2.7"], &[], DA),
            "network.deny[0] \"10.0.2.7\" overlaps the slirp4netns link",
        ),
        (
            net(&["0.0.0.0/0"], &[], &[], DD),
            "set `default = \"allow\"` instead",
        ),
        (
            net(&["2001:db8::/32"], &[], &[], DA),
            "network.allow[0] \"2001:db8::/32\" is IPv6",
        ),
        (
            net(&[], &[], &["2001:db8::53"], DA),
            "network.dns[0] \"2001:db8::53\" is IPv6",
        ),
        (
            net(&[], &[], &["1.1.1.1", "1.0.0.1", "9.9.9.9", "8.8.8.8"], DA),
            "at most 3",
        ),
    ];
    for (n, want) in cases {
        let e = derive(n, &DeriveOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "error {e:?} lacks {want:?}");
    }
}

#[test]
fn ipv6_deny_is_accepted_and_recorded() {
    let p = policy(&net(&[], &["fc00::/7", "fe80::/10"], &[], DA));
    assert_eq!(p.ipv6_denied, vec!["fc00::/7", "fe80::/10"]);
    assert_eq!(p.ipv6, Ipv6Mode::DisabledInBothNamespaces);
}

#[test]
fn mode_none_means_no_network() {
    let mut n = net(&[], &[], &[], DA);
    n.mode = Some(NetworkMode::None);
    assert_eq!(
        derive(&n, &DeriveOptions::default()).unwrap(),
        NetworkPlan::None
    );
}

#[test]
fn canonical_bytes_round_trip_and_digest_is_stable() {
    let n = net(
        &["10.99.0.0/24", "10.99.0.0/24"],
        &["203.0.113.0/24"],
        &["10.99.5.53"],
        DA,
    );
    let a = policy(&n);
    let b = policy(&n);
    assert_eq!(a.to_bytes().unwrap(), b.to_bytes().unwrap());
    assert_eq!(a.digest().unwrap(), b.digest().unwrap());
    let back = Policy::from_bytes(&a.to_bytes().unwrap()).unwrap();
    assert_eq!(back, a);
    // Order of entries does not matter for the routes, only for origins.
    let mut other = a.clone();
    other.binding = "generation 2".into();
    assert_ne!(other.digest().unwrap(), a.digest().unwrap());
}

#[test]
fn tampered_bytes_are_refused() {
    let p = policy(&net(&[], &[], &[], DA));
    let mut bytes = p.to_bytes().unwrap();
    bytes.push(0);
    assert!(matches!(
        Policy::from_bytes(&bytes),
        Err(PolicyError::Decode(_)) | Err(PolicyError::NotCanonical)
    ));
    // A structurally valid policy that drops a fixed denial is refused.
    let mut bad = p.clone();
    bad.rules.retain(|r| r.prefix.to_string() != "127.0.0.0/8");
    assert!(matches!(
        Policy::from_bytes(&bad.to_bytes().unwrap()),
        Err(PolicyError::Inconsistent(_))
    ));
    let mut bad = p.clone();
    bad.rules.push(Rule {
        prefix: "127.0.0.0/9".parse().unwrap(),
        verdict: Verdict::Allow,
        origin: Origin::Allow {
            index: 0,
            entry: "x".into(),
        },
    });
    assert!(Policy::from_bytes(&bad.to_bytes().unwrap()).is_err());
    let mut v = p.clone();
    v.version = 99;
    assert!(matches!(
        Policy::from_bytes(&v.to_bytes().unwrap()),
        Err(PolicyError::Version { found: 99 })
    ));
}

#[test]
fn probe_targets() {
    let n = net(&["169.254.169.254"], &[], &[], DA);
    // The metadata address is allowed here, so the probe falls back.
    assert_eq!(policy(&n).probe.denied, "240.0.0.1:80".parse().unwrap());
    let opts = DeriveOptions {
        probe_permitted: Some("10.99.1.1:80".parse().unwrap()),
        ..Default::default()
    };
    let e = derive(&net(&[], &[], &[], DA), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("permitted probe target 10.99.1.1:80 is denied"),
        "{e}"
    );
    let opts = DeriveOptions {
        probe_denied: Some("198.51.100.1:80".parse().unwrap()),
        ..Default::default()
    };
    let e = derive(&net(&[], &[], &[], DA), &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("denied probe target 198.51.100.1:80 is permitted"),
        "{e}"
    );
}

#[test]
fn resolver_equal_to_allow_keeps_the_allow_origin() {
    let p = policy(&net(&["198.51.100.53/32"], &[], &["198.51.100.53"], DA));
    let r = p
        .rules
        .iter()
        .find(|r| r.prefix.to_string() == "198.51.100.53/32")
        .unwrap();
    assert!(matches!(r.origin, Origin::Allow { .. }));
}

#[test]
fn probe_key_and_implicit_resolver() {
    let mut n = net(&[], &[], &[], DA);
    n.probe = Some("198.51.100.1:8080".into());
    let opts = options_for(&n, "d/1").unwrap();
    assert_eq!(opts.binding, "d/1");
    assert_eq!(
        opts.probe_permitted,
        Some("198.51.100.1:8080".parse().unwrap())
    );
    let NetworkPlan::Policy(p) = derive(&n, &opts).unwrap() else {
        panic!("no policy")
    };
    assert_eq!(
        p.probe.permitted,
        Some("198.51.100.1:8080".parse().unwrap())
    );
    // No `dns`: slirp's forwarder to the host's resolver, not required.
    assert!(!p.probe.dns_required);
    for bad in [
        "198.51.100.1",
        "example.com:80",
        "[::1]:80",
        "1.2.3.4:99999",
    ] {
        n.probe = Some(bad.into());
        let e = options_for(&n, "d/1").unwrap_err().to_string();
        assert!(e.contains(&format!("network.probe {bad:?}")), "{e}");
    }
    // A private probe target is denied by the default policy: refused.
    n.probe = Some("10.99.0.1:80".into());
    let e = derive(&n, &options_for(&n, "d/1").unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("permitted probe target 10.99.0.1:80 is denied"),
        "{e}"
    );
    // Named resolvers are required to answer.
    let p = policy(&net(&[], &[], &["198.51.100.53"], DA));
    assert!(p.probe.dns_required);
}

fn hosts_net(entries: &[&str], dns: &[&str], default: NetworkDefault) -> Network {
    Network {
        allow_hosts: entries.iter().map(|s| s.to_string()).collect(),
        ..net(&[], &[], dns, default)
    }
}

#[test]
fn allow_hosts_plan_the_filter_and_errors_name_the_entry() {
    let p = policy(&hosts_net(
        &["*.githubusercontent.com", "github.com:22", " github.com "],
        &[],
        DD,
    ));
    let h = p.hosts.clone().expect("a filter plan");
    assert_eq!(
        h.allow,
        ["*.githubusercontent.com", "github.com:22", "github.com"]
    );
    // The first exact name, for the probe; the filter listens on the
    // enforcement namespace's own address, forwards to slirp A's.
    assert_eq!(h.probe_allowed.as_deref(), Some("github.com"));
    assert_eq!(h.listen, p.link.guest);
    assert_eq!(h.upstream, [p.link.dns]);
    assert_eq!(p.resolvers, [p.link.dns]);
    assert!(p.resolv_conf().contains("nameserver 10.0.2.3"));
    assert!(p
        .sidecar_resolv_conf()
        .contains(&format!("nameserver {}", p.link.guest)));
    // The plan is part of the canonical, checked policy.
    assert_eq!(Policy::from_bytes(&p.to_bytes().unwrap()).unwrap(), p);
    let mut forged = p.clone();
    forged.hosts.as_mut().unwrap().upstream = vec![ip("10.0.2.2")];
    assert!(forged.check_consistent().is_err());

    let err = |n: &Network| derive(n, &DeriveOptions::default()).unwrap_err();
    let e = err(&hosts_net(&["github.com", "a.*.example.org"], &[], DD));
    assert!(
        matches!(&e, DeriveError::InvalidHost { index: 1, entry, .. } if entry == "a.*.example.org"),
        "{e}"
    );
    assert!(e.to_string().contains("network.allow_hosts[1]"), "{e}");
    assert_eq!(
        err(&hosts_net(&["github.com"], &[], DA)),
        DeriveError::HostsNeedDeny
    );
    // With `dns`: the resolvers are the filter's upstream only, never
    // routed in the main table (the sandbox asks slirp B's forwarder).
    let with_dns = policy(&hosts_net(&["github.com"], &["10.99.5.53", "9.9.9.9"], DD));
    assert_eq!(
        with_dns.hosts.as_ref().unwrap().upstream,
        [ip("10.99.5.53"), ip("9.9.9.9")]
    );
    assert!(with_dns.upstream_by_mark() && !p.upstream_by_mark());
    assert_eq!(with_dns.resolvers, [with_dns.link.dns]);
    for a in ["10.99.5.53", "9.9.9.9", "10.0.2.3"] {
        assert_eq!(with_dns.verdict_for(ip(a)).verdict, D, "{a}");
    }
    assert!(with_dns.probe.dns_required);
    assert_eq!(
        Policy::from_bytes(&with_dns.to_bytes().unwrap()).unwrap(),
        with_dns
    );
    let many: Vec<String> = (0..=MAX_HOSTS).map(|i| format!("h{i}.example")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(matches!(
        err(&hosts_net(&many, &[], DD)),
        DeriveError::TooManyHosts { .. }
    ));
    // Without allow_hosts, nothing changes.
    assert_eq!(policy(&net(&[], &[], &[], DD)).hosts, None);
}

fn with_host(n: &Network, addrs: &[(&str, &str)]) -> Result<Policy, DeriveError> {
    let opts = DeriveOptions {
        host_addresses: addrs
            .iter()
            .map(|(a, i)| HostAddress {
                address: ip(a),
                ifname: i.to_string(),
            })
            .collect(),
        ..DeriveOptions::default()
    };
    derive(n, &opts).map(|p| match p {
        NetworkPlan::Policy(p) => p,
        NetworkPlan::None => panic!("expected a policy"),
    })
}

#[test]
fn every_host_address_is_denied_unless_allowed_exactly() {
    let host = [
        ("203.0.113.1", "eth0"),
        ("192.168.1.5", "wlan0"),
        ("203.0.113.1", "eth0:1"),
        ("127.0.0.1", "lo"),
        ("10.0.2.15", "ens3"),
    ];
    let p = with_host(
        &net(&["192.168.0.0/16", "203.0.113.0/24"], &[], &[], DA),
        &host,
    )
    .unwrap();
    // A /32 each, named after its interface, beating the shorter allows.
    for (a, ifname) in [("203.0.113.1", "eth0"), ("192.168.1.5", "wlan0")] {
        let d = p.verdict_for(ip(a));
        assert_eq!(d.verdict, D, "{a}");
        assert_eq!(d.prefix.to_string(), format!("{a}/32"));
        assert_eq!(
            d.origin,
            Some(Origin::Host {
                ifname: ifname.into()
            })
        );
        assert!(p.routes().contains(&RouteSpec::Unreachable(d.prefix)));
        assert_eq!(
            d.origin.unwrap().to_string(),
            format!("host address ({ifname})")
        );
    }
    assert_eq!(p.verdict_for(ip("203.0.113.2")).verdict, A);
    // Loopback (fixed) and the slirp link (never the host through slirp)
    // are left out; each address once.
    let hosts: Vec<_> = p
        .rules
        .iter()
        .filter(|r| matches!(r.origin, Origin::Host { .. }))
        .map(|r| r.prefix.to_string())
        .collect();
    assert_eq!(hosts, ["192.168.1.5/32", "203.0.113.1/32"]);
    assert!(!host_deniable(&p.link, ip("10.0.2.15")) && !host_deniable(&p.link, ip("127.0.0.1")));
    assert!(p.decides_exactly(ip("203.0.113.1")) && !p.decides_exactly(ip("203.0.113.2")));
    assert_eq!(Policy::from_bytes(&p.to_bytes().unwrap()).unwrap(), p);

    // An allow naming the address exactly opens it, in either spelling.
    for entry in ["203.0.113.1", "203.0.113.1/32"] {
        let p = with_host(&net(&[entry], &[], &[], DD), &host).unwrap();
        let d = p.verdict_for(ip("203.0.113.1"));
        assert_eq!(d.verdict, A, "{entry}");
        assert!(matches!(d.origin, Some(Origin::Allow { index: 0, .. })));
    }
    // A resolver at a host address opens every service there: refused,
    // naming it, unless `allow` names it too.
    let e = with_host(&net(&[], &[], &["203.0.113.1"], DA), &host).unwrap_err();
    assert!(
        matches!(&e, DeriveError::ResolverIsHost { index: 0, ifname, .. } if ifname == "eth0"),
        "{e}"
    );
    assert!(
        e.to_string().contains("network.dns[0] \"203.0.113.1\""),
        "{e}"
    );
    let p = with_host(&net(&["203.0.113.1"], &[], &["203.0.113.1"], DA), &host).unwrap();
    assert_eq!(p.verdict_for(ip("203.0.113.1")).verdict, A);

    // Forged: a host address allowed, or one that is not the host's to deny.
    let mut forged = with_host(&net(&[], &[], &[], DA), &host).unwrap();
    forged
        .rules
        .iter_mut()
        .find(|r| matches!(r.origin, Origin::Host { .. }))
        .unwrap()
        .verdict = A;
    assert!(forged.check_consistent().is_err());
    let mut forged = with_host(&net(&[], &[], &[], DA), &host).unwrap();
    forged.rules.push(Rule {
        prefix: "10.0.2.16/32".parse().unwrap(),
        verdict: D,
        origin: Origin::Host { ifname: "x".into() },
    });
    forged
        .rules
        .sort_by_key(|r| (r.prefix.addr(), r.prefix.prefix_len()));
    assert!(forged.check_consistent().is_err());
    // Bounded.
    let many: Vec<(String, &str)> = (0..=MAX_HOST_ADDRESSES as u32)
        .map(|i| (Ipv4Addr::from(0xcb00_7100 + i).to_string(), "eth0"))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(a, i)| (a.as_str(), *i)).collect();
    assert!(matches!(
        with_host(&net(&[], &[], &[], DA), &many),
        Err(DeriveError::TooManyHostAddresses { .. })
    ));
}

#[test]
fn allow_hosts_upstreams_are_denied_so_no_answer_routes_them() {
    let p = with_host(
        &hosts_net(&["svc.example"], &["198.51.100.53", "10.99.5.53"], DD),
        &[("203.0.113.1", "eth0")],
    )
    .unwrap();
    for (i, a) in ["198.51.100.53", "10.99.5.53"].iter().enumerate() {
        let d = p.verdict_for(ip(a));
        assert_eq!(d.verdict, D, "{a}");
        assert_eq!(d.prefix.prefix_len(), 32);
        assert!(
            matches!(&d.origin, Some(Origin::Upstream { index, .. }) if *index as usize == i),
            "{d:?}"
        );
    }
    // A host address is the filter's upstream: fine, the filter alone
    // reaches it (table 77), the sandbox never.
    let p = with_host(
        &hosts_net(&["svc.example"], &["203.0.113.1"], DD),
        &[("203.0.113.1", "eth0")],
    )
    .unwrap();
    assert_eq!(p.verdict_for(ip("203.0.113.1")).verdict, D);
    assert_eq!(Policy::from_bytes(&p.to_bytes().unwrap()).unwrap(), p);
    // Forged: an upstream left without its own rule.
    let mut forged = p.clone();
    forged
        .rules
        .retain(|r| r.prefix.to_string() != "203.0.113.1/32");
    assert!(forged.check_consistent().is_err());
}
