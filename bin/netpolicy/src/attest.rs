//! Installing the policy, reading back what the kernel holds, checking it
//! against the policy, and the readiness fingerprint over both.

use netlink_packet_route::AddressFamily;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

use crate::routes::{add_route, flush_main_v4, route_matches};
use crate::sysctl::{Ipv6Conf, SysctlError};
use lazaret_netlink::rtnl::{host_of, NetlinkError, ObservedRoute, ObservedRule, Rtnl};
use lazaret_protocol::netpolicy::policy::{
    Policy, PolicyError, DNS_PORT_TABLE, DNS_ROUTE_PROTOCOL, DNS_RULE_PRIORITY, DNS_UPSTREAM_MARK,
    DNS_UPSTREAM_PRIORITY, DNS_UPSTREAM_TABLE, HOST_RULE_PRIORITY, HOST_TABLE, MAX_HOST_ADDRESSES,
};

/// Domain separation of the fingerprint.
pub const FINGERPRINT_CONTEXT: &[u8] = b"lazaret-netpolicy readiness fingerprint v1\0";

#[derive(Debug, thiserror::Error)]
pub enum AttestError {
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("observed state differs from the policy: {}; the enforcement namespace was changed by someone else, start the Domain anew", .0.join("; "))]
    Mismatch(Vec<String>),
    #[error("readiness fingerprint {observed} differs from the installed {expected}: the enforcement namespace changed between install and probe")]
    Fingerprint { expected: String, observed: String },
}

/// Handles on the two namespaces, opened before confinement.
pub struct Namespaces {
    pub enforcement: Rtnl,
    pub enforcement_ipv6: Ipv6Conf,
    pub sandbox: Rtnl,
    pub sandbox_ipv6: Ipv6Conf,
}

pub use lazaret_protocol::netreport::{Attestation, EnforcementState, Observed, SandboxState};

/// Installs `policy` in the enforcement namespace and disables IPv6 in
/// both, then attests. Fails closed: any refusal or mismatch is an error.
pub fn install(ns: &mut Namespaces, policy: &Policy) -> Result<Attestation, AttestError> {
    let link = &policy.link;
    let ifindex = ns.enforcement.ifindex(&link.ifname)?;
    ns.enforcement_ipv6.disable_ipv6()?;
    ns.sandbox_ipv6.disable_ipv6()?;
    // Per-link values follow `all`; write them too so a kernel that does
    // not propagate is still covered.
    for (_, name) in ns.enforcement.links()? {
        ns.enforcement_ipv6.write(&name, "disable_ipv6", "1")?;
    }
    for (_, name) in ns.sandbox.links()? {
        ns.sandbox_ipv6.write(&name, "disable_ipv6", "1")?;
    }
    flush_main_v4(&mut ns.enforcement, link.network, ifindex)?;
    // Denials first, so no allow is ever in force without its context.
    let mut routes = policy.routes();
    routes.sort_by_key(|r| {
        !matches!(
            r,
            lazaret_protocol::netpolicy::policy::RouteSpec::Unreachable(_)
        )
    });
    for r in &routes {
        add_route(&mut ns.enforcement, r, ifindex)?;
    }
    attest(ns, policy)
}

/// Reads the state back, verifies it against `policy`, fingerprints it.
pub fn attest(ns: &mut Namespaces, policy: &Policy) -> Result<Attestation, AttestError> {
    let mut observed = observe(ns)?;
    // The filtering resolver's entries come and go with lookups, and the
    // watcher's with the host's addresses: checked for their shape, then
    // left out of the fingerprint.
    let dynamic = take_dynamic(policy, &mut observed);
    let mut problems = check_dynamic(policy, &dynamic);
    problems.extend(check_host_denials(policy, &dynamic));
    problems.extend(verify(policy, &observed));
    if !problems.is_empty() {
        return Err(AttestError::Mismatch(problems));
    }
    let policy_digest = policy.digest()?;
    let fingerprint = fingerprint(&policy_digest, &observed)?;
    Ok(Attestation {
        policy_digest,
        binding: policy.binding.clone(),
        expected_routes: policy.routes().iter().map(|r| r.to_string()).collect(),
        observed,
        fingerprint,
    })
}

pub fn observe(ns: &mut Namespaces) -> Result<Observed, AttestError> {
    let e = &mut ns.enforcement;
    let links: Vec<String> = e.links()?.into_iter().map(|(_, n)| n).collect();
    let mut disable_ipv6 = BTreeMap::new();
    for name in ["all", "default"]
        .into_iter()
        .map(String::from)
        .chain(links.iter().cloned())
    {
        let v = ns.enforcement_ipv6.read(&name, "disable_ipv6")?;
        disable_ipv6.insert(name, v);
    }
    let enforcement = EnforcementState {
        addresses_v4: e.addresses(AddressFamily::Inet)?,
        addresses_v6: e.addresses(AddressFamily::Inet6)?,
        routes_v4: e.routes(AddressFamily::Inet)?,
        routes_v6: e.routes(AddressFamily::Inet6)?,
        rules_v4: e.rules(AddressFamily::Inet)?,
        links,
        disable_ipv6,
    };
    let sandbox = SandboxState {
        disable_ipv6_all: ns.sandbox_ipv6.read("all", "disable_ipv6")?,
        disable_ipv6_default: ns.sandbox_ipv6.read("default", "disable_ipv6")?,
    };
    Ok(Observed {
        enforcement,
        sandbox,
    })
}

/// What the filtering resolver (`allow_hosts`) added: host routes in the
/// main table, the port table and its rules; and what the host-address
/// watcher added: its table's routes and the rule that looks it up.
#[derive(Debug, Default)]
pub struct Dynamic {
    pub routes: Vec<ObservedRoute>,
    pub rules: Vec<ObservedRule>,
    /// The watcher's routes, in [`HOST_TABLE`].
    pub host_routes: Vec<ObservedRoute>,
    /// The watcher's rule, at [`HOST_RULE_PRIORITY`].
    pub host_rules: Vec<ObservedRule>,
}

/// Moves the watcher's routes and rule, and the filtering resolver's
/// routes and rules (only when the policy has `allow_hosts`; otherwise
/// they stay and fail `verify`), out of `o`.
pub fn take_dynamic(policy: &Policy, o: &mut Observed) -> Dynamic {
    let e = &mut o.enforcement;
    let (host_routes, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut e.routes_v4)
        .into_iter()
        .partition(|r| r.table == HOST_TABLE);
    e.routes_v4 = kept;
    let (host_rules, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut e.rules_v4)
        .into_iter()
        .partition(|r| r.priority == HOST_RULE_PRIORITY);
    e.rules_v4 = kept;
    let mut d = Dynamic {
        host_routes,
        host_rules,
        ..Dynamic::default()
    };
    if policy.hosts.is_none() {
        return d;
    }
    let (dynamic, kept): (Vec<_>, Vec<_>) =
        std::mem::take(&mut e.routes_v4).into_iter().partition(|r| {
            r.protocol == DNS_ROUTE_PROTOCOL
                || r.table == DNS_PORT_TABLE
                || r.table == DNS_UPSTREAM_TABLE
        });
    e.routes_v4 = kept;
    d.routes = dynamic;
    let (dynamic, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut e.rules_v4)
        .into_iter()
        .partition(|r| r.priority == DNS_RULE_PRIORITY || r.priority == DNS_UPSTREAM_PRIORITY);
    e.rules_v4 = kept;
    d.rules = dynamic;
    d
}

/// Everything of the watcher must be what it adds: the one rule `lookup
/// 75` (no selector) and, in that table, `unreachable ADDR/32` routes,
/// nothing else, each for an address of a kind the host may have that
/// the policy does not decide exactly (`Policy::watch_may_deny`: so
/// never an `allow`ed one), at most [`MAX_HOST_ADDRESSES`] of them.
pub fn check_host_denials(policy: &Policy, d: &Dynamic) -> Vec<String> {
    let mut p = Vec::new();
    if d.host_routes.len() > MAX_HOST_ADDRESSES {
        p.push(format!(
            "{} host-address denials, more than the watcher adds",
            d.host_routes.len()
        ));
    }
    for r in &d.host_routes {
        let ok = r.kind == "unreachable"
            && r.gateway.is_none()
            && r.prefsrc.is_none()
            && r.unusual.is_empty()
            && host_of(r).is_some_and(|a| policy.watch_may_deny(a));
        if !ok {
            p.push(format!(
                "route not allowed for the host-address watcher: {r:?}"
            ));
        }
    }
    for (i, r) in d.host_rules.iter().enumerate() {
        let ok = i == 0 && r.action == "totable" && r.table == HOST_TABLE && r.selectors.is_empty();
        if !ok {
            p.push(format!(
                "rule not allowed for the host-address watcher: {r:?}"
            ));
        }
    }
    p
}

/// Every filtering-resolver entry must be one it may add: a host route
/// via the link's gateway to an address only the default denies (never
/// one inside a denied range or `deny` entry), the port table's default
/// route, and rules `to ADDR/32 ipproto tcp|udp dport PORT lookup 76`.
pub fn check_dynamic(policy: &Policy, d: &Dynamic) -> Vec<String> {
    let mut p = Vec::new();
    let link = &policy.link;
    let via_gateway = |r: &ObservedRoute| {
        r.kind == "unicast"
            && r.gateway.as_deref() == Some(link.gateway.to_string().as_str())
            && r.dev.as_deref() == Some(link.ifname.as_str())
            && r.onlink
            && r.unusual.is_empty()
            && r.protocol == DNS_ROUTE_PROTOCOL
    };
    for r in &d.routes {
        let ok = match r.table {
            MAIN => {
                via_gateway(r)
                    && r.dst
                        .strip_suffix("/32")
                        .and_then(|a| a.parse::<std::net::Ipv4Addr>().ok())
                        .is_some_and(|a| may_route(policy, a))
            }
            DNS_PORT_TABLE => via_gateway(r) && r.dst == "0.0.0.0/0",
            DNS_UPSTREAM_TABLE => {
                via_gateway(r)
                    && policy.upstream_by_mark()
                    && policy
                        .hosts
                        .as_ref()
                        .is_some_and(|h| h.upstream.iter().any(|u| r.dst == format!("{u}/32")))
            }
            _ => false,
        };
        if !ok {
            p.push(format!(
                "route not allowed for the filtering resolver: {r:?}"
            ));
        }
    }
    for r in &d.rules {
        if r.priority == DNS_UPSTREAM_PRIORITY {
            let mark = format!("FwMark({DNS_UPSTREAM_MARK})");
            let ok = policy.upstream_by_mark()
                && r.table == DNS_UPSTREAM_TABLE
                && r.action == "totable"
                && r.selectors.contains(&mark)
                && r.selectors
                    .iter()
                    .all(|s| *s == mark || s == "FwMask(4294967295)");
            if !ok {
                p.push(format!(
                    "rule not allowed for the filtering resolver: {r:?}"
                ));
            }
            continue;
        }
        let mut dst = None;
        let mut shape_ok = r.table == DNS_PORT_TABLE && r.action == "totable";
        for sel in &r.selectors {
            if let Some(a) = sel
                .strip_prefix("Destination(")
                .and_then(|x| x.strip_suffix(')'))
            {
                dst = a.parse::<std::net::Ipv4Addr>().ok();
            } else if !(sel == "src_len=0 dst_len=32 tos=0"
                || sel == "IpProtocol(Tcp)"
                || sel == "IpProtocol(Udp)"
                || sel.starts_with("DestinationPortRange("))
            {
                shape_ok = false;
            }
        }
        if !shape_ok || !dst.is_some_and(|a| may_route(policy, a)) {
            p.push(format!(
                "rule not allowed for the filtering resolver: {r:?}"
            ));
        }
    }
    p
}

/// May the filtering resolver route `addr`? Only where no rule of the
/// policy decides (the default, deny, applies): an answer naming a
/// private, link-local or `deny`-listed address is never routed.
pub fn may_route(policy: &Policy, addr: std::net::Ipv4Addr) -> bool {
    let d = policy.verdict_for(addr);
    d.verdict == lazaret_protocol::netpolicy::policy::Verdict::Deny && d.origin.is_none()
}

const MAIN: u32 = 254;
const LOCAL: u32 = 255;
const DEFAULT_TABLE: u32 = 253;

/// Every way the observed state departs from the policy; empty when it
/// implements it exactly. Pure.
pub fn verify(policy: &Policy, o: &Observed) -> Vec<String> {
    let mut p = Vec::new();
    let e = &o.enforcement;
    // The main table: exactly the expected routes.
    let main: Vec<&ObservedRoute> = e.routes_v4.iter().filter(|r| r.table == MAIN).collect();
    let expected = policy.routes();
    for spec in &expected {
        let n = main.iter().filter(|r| route_matches(r, spec)).count();
        if n != 1 {
            p.push(format!("route `{spec}` present {n} times, expected once"));
        }
    }
    for r in &main {
        if !expected.iter().any(|s| route_matches(r, s)) {
            p.push(format!("unexpected route {r:?}"));
        }
    }
    // Other tables: only the kernel's local table, holding only local and
    // broadcast entries.
    for r in &e.routes_v4 {
        match r.table {
            MAIN => {}
            LOCAL if r.kind == "local" || r.kind == "broadcast" => {}
            _ => p.push(format!("unexpected route outside the main table: {r:?}")),
        }
    }
    // Policy routing: exactly the kernel's three default rules.
    let defaults = [(0u32, LOCAL), (32766, MAIN), (32767, DEFAULT_TABLE)];
    let rules: Vec<(u32, u32)> = e.rules_v4.iter().map(|r| (r.priority, r.table)).collect();
    if rules != defaults
        || e.rules_v4
            .iter()
            .any(|r| !r.selectors.is_empty() || r.action != "totable")
    {
        p.push(format!(
            "policy-routing rules are not the kernel defaults: {:?}",
            e.rules_v4
        ));
    }
    // IPv6 off.
    for (k, v) in &e.disable_ipv6 {
        if v != "1" {
            p.push(format!(
                "enforcement namespace: ipv6 conf {k} disable_ipv6={v}"
            ));
        }
    }
    if !e.addresses_v6.is_empty() {
        p.push(format!(
            "enforcement namespace has IPv6 addresses {:?}",
            e.addresses_v6
        ));
    }
    if o.sandbox.disable_ipv6_all != "1" || o.sandbox.disable_ipv6_default != "1" {
        p.push(format!(
            "sandbox namespace: disable_ipv6 all={} default={}",
            o.sandbox.disable_ipv6_all, o.sandbox.disable_ipv6_default
        ));
    }
    // The link as slirp configured it.
    let want_addr = format!(
        "{} {}/{}",
        policy.link.ifname,
        policy.link.guest,
        policy.link.network.prefix_len()
    );
    if !e.addresses_v4.contains(&want_addr) {
        p.push(format!(
            "enforcement namespace lacks the address {want_addr} (has {:?})",
            e.addresses_v4
        ));
    }
    p
}

/// The readiness fingerprint: SHA-256(context || policy digest || postcard(observed)).
pub fn fingerprint(policy_digest: &str, observed: &Observed) -> Result<String, PolicyError> {
    let bytes = postcard::to_stdvec(observed).map_err(|e| PolicyError::Encode(e.to_string()))?;
    let mut h = Sha256::new();
    h.update(FINGERPRINT_CONTEXT);
    h.update(policy_digest.as_bytes());
    h.update(b"\0");
    h.update(&bytes);
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_netpolicy::NetworkPlan;

    fn policy() -> Policy {
        let net = lazaret_config::Network {
            default: lazaret_config::NetworkDefault::Deny,
            allow: vec!["198.51.100.0/28".into()],
            deny: vec!["203.0.113.0/24".into()],
            allow_hosts: vec!["github.com".into()],
            ..Default::default()
        };
        match lazaret_netpolicy::derive(&net, &Default::default()).unwrap() {
            NetworkPlan::Policy(p) => p,
            NetworkPlan::None => unreachable!(),
        }
    }

    fn route(table: u32, dst: &str) -> ObservedRoute {
        ObservedRoute {
            table,
            dst: dst.into(),
            kind: "unicast".into(),
            gateway: Some("10.0.2.2".into()),
            dev: Some("tap0".into()),
            scope: 0,
            protocol: DNS_ROUTE_PROTOCOL,
            onlink: true,
            priority: None,
            prefsrc: None,
            unusual: vec![],
        }
    }

    fn rule(dst: &str, extra: &str) -> ObservedRule {
        ObservedRule {
            priority: DNS_RULE_PRIORITY,
            table: DNS_PORT_TABLE,
            action: "totable".into(),
            selectors: vec![
                "src_len=0 dst_len=32 tos=0".into(),
                format!("Destination({dst})"),
                "IpProtocol(Tcp)".into(),
                extra.into(),
            ],
        }
    }

    #[test]
    fn the_filter_may_route_only_what_the_default_alone_denies() {
        let p = policy();
        assert!(may_route(&p, "192.0.2.7".parse().unwrap()));
        // Inside a built-in denied range, a `deny` entry, or already allowed.
        for a in [
            "10.1.2.3",
            "169.254.169.254",
            "203.0.113.9",
            "198.51.100.1",
            "10.0.2.3",
        ] {
            assert!(!may_route(&p, a.parse().unwrap()), "{a}");
        }
        let ok = Dynamic {
            routes: vec![
                route(MAIN, "192.0.2.7/32"),
                route(DNS_PORT_TABLE, "0.0.0.0/0"),
            ],
            rules: vec![rule(
                "192.0.2.8",
                "DestinationPortRange(RulePortRange { start: 22, end: 22 })",
            )],
            ..Default::default()
        };
        assert_eq!(check_dynamic(&p, &ok), Vec::<String>::new());
        let mut wide = route(MAIN, "192.0.2.0/24");
        wide.dst = "192.0.2.0/24".into();
        let mut elsewhere = route(MAIN, "192.0.2.9/32");
        elsewhere.gateway = Some("10.0.2.3".into());
        let bad = Dynamic {
            routes: vec![
                wide,
                route(MAIN, "169.254.169.254/32"),
                route(MAIN, "203.0.113.9/32"),
                elsewhere,
                route(DNS_PORT_TABLE, "192.0.2.0/24"),
                route(77, "0.0.0.0/0"),
            ],
            rules: vec![
                rule(
                    "10.1.2.3",
                    "DestinationPortRange(RulePortRange { start: 22, end: 22 })",
                ),
                rule("192.0.2.8", "Iifname(\"tap0\")"),
            ],
            ..Default::default()
        };
        assert_eq!(
            check_dynamic(&p, &bad).len(),
            8,
            "{:#?}",
            check_dynamic(&p, &bad)
        );
        // The upstream table and its mark rule only with `dns` upstreams.
        let upstream_rule = ObservedRule {
            priority: DNS_UPSTREAM_PRIORITY,
            table: DNS_UPSTREAM_TABLE,
            action: "totable".into(),
            selectors: vec![
                format!("FwMark({DNS_UPSTREAM_MARK})"),
                "FwMask(4294967295)".into(),
            ],
        };
        let upstream = Dynamic {
            routes: vec![route(DNS_UPSTREAM_TABLE, "9.9.9.9/32")],
            rules: vec![upstream_rule.clone()],
            ..Default::default()
        };
        assert_eq!(check_dynamic(&p, &upstream).len(), 2);
        let mut with_dns = p.clone();
        with_dns.hosts.as_mut().unwrap().upstream = vec!["9.9.9.9".parse().unwrap()];
        assert_eq!(check_dynamic(&with_dns, &upstream), Vec::<String>::new());
        let mut unmarked = upstream_rule;
        unmarked.selectors = vec!["FwMark(1)".into()];
        let other = Dynamic {
            routes: vec![route(DNS_UPSTREAM_TABLE, "9.9.9.8/32")],
            rules: vec![unmarked],
            ..Default::default()
        };
        assert_eq!(check_dynamic(&with_dns, &other).len(), 2);
    }

    fn denial(dst: &str) -> ObservedRoute {
        ObservedRoute {
            table: HOST_TABLE,
            dst: format!("{dst}/32"),
            kind: "unreachable".into(),
            gateway: None,
            dev: None,
            scope: 0,
            protocol: 4,
            onlink: false,
            priority: None,
            prefsrc: None,
            unusual: vec![],
        }
    }

    fn lookup_host_table() -> ObservedRule {
        ObservedRule {
            priority: HOST_RULE_PRIORITY,
            table: HOST_TABLE,
            action: "totable".into(),
            selectors: vec![],
        }
    }

    #[test]
    fn the_watcher_may_deny_single_host_addresses_the_policy_leaves_open() {
        let opts = lazaret_netpolicy::DeriveOptions {
            host_addresses: vec![lazaret_protocol::netpolicy::policy::HostAddress {
                address: "203.0.113.1".parse().unwrap(),
                ifname: "eth0".into(),
            }],
            ..Default::default()
        };
        let net = lazaret_config::Network {
            allow: vec!["198.51.100.7".into()],
            ..Default::default()
        };
        let NetworkPlan::Policy(p) = lazaret_netpolicy::derive(&net, &opts).unwrap() else {
            unreachable!()
        };
        // Gained later: public or private, the watcher denies it.
        let ok = Dynamic {
            host_routes: vec![denial("203.0.113.77"), denial("192.168.7.7")],
            host_rules: vec![lookup_host_table()],
            ..Default::default()
        };
        assert_eq!(check_host_denials(&p, &ok), Vec::<String>::new());
        // Never one the policy decides exactly (a host address it lists,
        // an `allow` of it), the loopback or the link; never wider, a
        // route elsewhere, or a rule with a selector, another table or a
        // second one.
        let mut wide = denial("203.0.113.0");
        wide.dst = "203.0.113.0/24".into();
        let mut via = denial("203.0.113.78");
        via.kind = "unicast".into();
        via.gateway = Some("10.0.2.2".into());
        let mut selective = lookup_host_table();
        selective.selectors = vec!["IpProtocol(Tcp)".into()];
        let mut elsewhere = lookup_host_table();
        elsewhere.table = 254;
        let bad = Dynamic {
            host_routes: vec![
                denial("203.0.113.1"),
                denial("198.51.100.7"),
                denial("127.0.0.1"),
                denial("10.0.2.3"),
                wide,
                via,
            ],
            host_rules: vec![selective, elsewhere, lookup_host_table()],
            ..Default::default()
        };
        let problems = check_host_denials(&p, &bad);
        assert_eq!(problems.len(), 9, "{problems:#?}");

        // Taken out of the observed state, whatever the policy: the
        // fingerprint is the same with and without them.
        let defaults = vec![
            ObservedRule {
                priority: 0,
                table: LOCAL,
                action: "totable".into(),
                selectors: vec![],
            },
            ObservedRule {
                priority: 32766,
                table: MAIN,
                action: "totable".into(),
                selectors: vec![],
            },
            ObservedRule {
                priority: 32767,
                table: DEFAULT_TABLE,
                action: "totable".into(),
                selectors: vec![],
            },
        ];
        let observed = |rules: Vec<ObservedRule>| Observed {
            enforcement: EnforcementState {
                addresses_v4: vec!["tap0 10.0.2.100/24".into()],
                addresses_v6: vec![],
                routes_v4: vec![],
                routes_v6: vec![],
                rules_v4: rules,
                links: vec!["lo".into(), "tap0".into()],
                disable_ipv6: BTreeMap::new(),
            },
            sandbox: SandboxState {
                disable_ipv6_all: "1".into(),
                disable_ipv6_default: "1".into(),
            },
        };
        let plain = observed(defaults.clone());
        let mut with_watch = observed([defaults, ok.host_rules.clone()].concat());
        with_watch.enforcement.routes_v4 = ok.host_routes.clone();
        let d = take_dynamic(&p, &mut with_watch);
        assert_eq!(d.host_rules, ok.host_rules);
        assert_eq!(d.host_routes, ok.host_routes);
        assert_eq!(
            fingerprint("d", &with_watch).unwrap(),
            fingerprint("d", &plain).unwrap()
        );
        assert!(!verify(&p, &with_watch)
            .iter()
            .any(|m| m.contains("policy-routing rules")));
    }
}
