//! Derivation of a [`Policy`] from the profile's `[network]` (the trusted
//! host configuration), behind the `derive` feature: `lazaret-config`
//! links this crate for [`crate::section`] alone.

use crate::section::{Network, NetworkDefault, NetworkMode};
use ipnet::Ipv4Net;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use crate::plan::{DeriveError, DeriveOptions, NetworkPlan};
use lazaret_protocol::netpolicy::hosts::{HostName, HostPattern, TTL_CEILING, TTL_FLOOR};
use lazaret_protocol::netpolicy::policy::*;

const DEFAULT_DENIED_PROBES: [SocketAddrV4; 2] = [
    SocketAddrV4::new(Ipv4Addr::new(169, 254, 169, 254), 80),
    SocketAddrV4::new(Ipv4Addr::new(240, 0, 0, 1), 80),
];

/// Parses one `allow`/`deny` entry: a CIDR or a bare address (a /32).
fn parse_entry(list: &'static str, index: usize, entry: &str) -> Result<Entry, DeriveError> {
    let s = entry.trim();
    let invalid = || DeriveError::InvalidCidr {
        list,
        index,
        entry: entry.to_string(),
    };
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(match ip {
            IpAddr::V4(a) => Entry::V4(Ipv4Net::from(a)),
            IpAddr::V6(_) => Entry::V6,
        });
    }
    match s.parse::<ipnet::IpNet>().map_err(|_| invalid())? {
        ipnet::IpNet::V4(n) => {
            if n.trunc() != n {
                return Err(DeriveError::HostBits {
                    list,
                    index,
                    entry: entry.to_string(),
                    network: n.trunc(),
                });
            }
            Ok(Entry::V4(n))
        }
        ipnet::IpNet::V6(_) => Ok(Entry::V6),
    }
}

enum Entry {
    V4(Ipv4Net),
    V6,
}

/// The [`DeriveOptions`] a profile asks for: the generation `binding`
/// and, from `probe = "IP:PORT"`, the permitted probe target.
pub fn options_for(net: &Network, binding: &str) -> Result<DeriveOptions, DeriveError> {
    let probe_permitted = match &net.probe {
        None => None,
        Some(p) => Some(
            p.trim()
                .parse::<SocketAddrV4>()
                .map_err(|_| DeriveError::InvalidProbe { entry: p.clone() })?,
        ),
    };
    Ok(DeriveOptions {
        binding: binding.to_string(),
        probe_permitted,
        ..DeriveOptions::default()
    })
}

/// [`options_for`], with the addresses of this host ([`host_addresses`],
/// in the caller's network namespace, which must be the host's): what
/// the coordinator derives the generation's policy with, and what the
/// CLI checks and previews.
pub fn options_on_this_host(net: &Network, binding: &str) -> Result<DeriveOptions, DeriveError> {
    let mut opts = options_for(net, binding)?;
    opts.host_addresses = host_addresses()?;
    Ok(opts)
}

/// `allow_hosts`: the filtering resolver's plan. It forwards to the
/// profile's `dns` (`resolvers`, routed for the filter alone) or else to
/// slirp A's forwarder (the host's resolver).
fn derive_hosts(
    net: &Network,
    link: &Link,
    resolvers: &[Ipv4Addr],
) -> Result<Option<HostsPlan>, DeriveError> {
    if net.allow_hosts.is_empty() {
        return Ok(None);
    }
    if net.allow_hosts.len() > MAX_HOSTS {
        return Err(DeriveError::TooManyHosts {
            count: net.allow_hosts.len(),
        });
    }
    if net.default != NetworkDefault::Deny {
        return Err(DeriveError::HostsNeedDeny);
    }
    let mut allow = Vec::new();
    let mut probe_allowed = None;
    for (index, e) in net.allow_hosts.iter().enumerate() {
        let entry = e.trim().to_string();
        let p = HostPattern::parse(&entry).map_err(|h| DeriveError::InvalidHost {
            index,
            entry: e.clone(),
            why: h.why,
        })?;
        if let (None, HostName::Exact(n)) = (&probe_allowed, &p.name) {
            probe_allowed = Some(n.clone());
        }
        allow.push(entry);
    }
    Ok(Some(HostsPlan {
        allow,
        listen: link.guest,
        upstream: resolvers.to_vec(),
        ttl_floor: TTL_FLOOR,
        ttl_ceiling: TTL_CEILING,
        probe_allowed,
    }))
}

/// The host's interface addresses (IPv4), in the calling process's
/// network namespace: the deriver runs in the host's, so these are the
/// addresses slirp4netns A's sockets would reach as the host's own.
pub fn host_addresses() -> Result<Vec<HostAddress>, DeriveError> {
    let why = |e: nix::Error| DeriveError::HostAddresses {
        why: format!("getifaddrs: {e}"),
    };
    let mut out: Vec<HostAddress> = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs().map_err(why)? {
        let Some(sin) = ifa.address.as_ref().and_then(|a| a.as_sockaddr_in()) else {
            continue;
        };
        out.push(HostAddress {
            address: sin.ip(),
            ifname: ifa.interface_name.clone(),
        });
    }
    Ok(out)
}

/// The denials of the host's addresses: one /32 per address the policy
/// must deny ([`host_deniable`]), the first interface naming it.
fn host_rules(addrs: &[HostAddress], link: &Link) -> Result<Vec<Rule>, DeriveError> {
    let mut by_addr: std::collections::BTreeMap<Ipv4Addr, &str> = Default::default();
    for h in addrs.iter().filter(|h| host_deniable(link, h.address)) {
        by_addr.entry(h.address).or_insert(&h.ifname);
    }
    if by_addr.len() > MAX_HOST_ADDRESSES {
        return Err(DeriveError::TooManyHostAddresses {
            count: by_addr.len(),
        });
    }
    Ok(by_addr
        .into_iter()
        .map(|(a, ifname)| Rule {
            prefix: Ipv4Net::from(a),
            verdict: Verdict::Deny,
            origin: Origin::Host {
                ifname: ifname.to_string(),
            },
        })
        .collect())
}

/// Derives the policy. Pure: the same profile and options always give the
/// same bytes.
pub fn derive(net: &Network, opts: &DeriveOptions) -> Result<NetworkPlan, DeriveError> {
    if net.mode == Some(NetworkMode::None) {
        return Ok(NetworkPlan::None);
    }
    if net.allow.len() + net.deny.len() > MAX_ENTRIES {
        return Err(DeriveError::TooManyEntries {
            count: net.allow.len() + net.deny.len(),
        });
    }
    let link = Link::default();
    let default = match net.default {
        NetworkDefault::Allow => Verdict::Allow,
        NetworkDefault::Deny => Verdict::Deny,
    };
    let mut ipv6_denied = Vec::new();
    let allows = checked_allows(net, &link)?;
    let denies = checked_denies(net, &link, &allows, &mut ipv6_denied)?;
    let dns_required = !net.dns.is_empty();
    let resolvers = checked_resolvers(net, &link, &denies)?;

    let upstream: Vec<Ipv4Addr> = resolvers.iter().map(|(_, a)| *a).collect();
    let hosts = derive_hosts(net, &link, &upstream)?;
    let entries = Entries {
        net,
        link: &link,
        allows: &allows,
        denies: &denies,
        resolvers: &resolvers,
    };
    let rules = assemble_rules(&entries, opts, hosts.is_some())?;
    ipv6_denied.sort();
    ipv6_denied.dedup();

    let mut policy = Policy {
        version: POLICY_VERSION,
        binding: opts.binding.clone(),
        link,
        default,
        rules,
        // With allow_hosts the sandbox asks slirp B's forwarder, which
        // the holder points at the filter.
        resolvers: match hosts {
            Some(_) => vec![Link::default().dns],
            None => resolvers.into_iter().map(|(_, a)| a).collect(),
        },
        ipv6: Ipv6Mode::DisabledInBothNamespaces,
        ipv6_denied,
        probe: probe_plan(opts, dns_required),
        hosts,
    };
    policy.probe.denied = match opts.probe_denied {
        Some(t) => t,
        None => DEFAULT_DENIED_PROBES
            .into_iter()
            .find(|t| policy.verdict_for(*t.ip()).verdict == Verdict::Deny)
            // 240/4 is a fixed denial; were none denied, `check_probe`
            // refuses the stand-in.
            .unwrap_or(policy.probe.denied),
    };
    policy.check_probe()?;
    Ok(NetworkPlan::Policy(policy))
}

/// The probe plan before its denied target is chosen (which needs the
/// assembled policy): the first default denial stands in until then.
fn probe_plan(opts: &DeriveOptions, dns_required: bool) -> ProbePlan {
    ProbePlan {
        denied: DEFAULT_DENIED_PROBES[0],
        permitted: opts.probe_permitted,
        dns_name: opts
            .dns_name
            .clone()
            .unwrap_or_else(|| "lazaret-probe.invalid.".into()),
        timeout_ms: opts.probe_timeout_ms.unwrap_or(3000),
        dns_required,
    }
}

/// Every config entry: checked against the fixed ranges and the link.
fn check_entry(
    link: &Link,
    list: &'static str,
    index: usize,
    entry: &str,
    n: Ipv4Net,
) -> Result<(), DeriveError> {
    if n.prefix_len() == 0 {
        return Err(DeriveError::WholeSpace {
            list,
            index,
            entry: entry.to_string(),
            default: if list == "deny" { "deny" } else { "allow" },
        });
    }
    // Inside (or equal to) the link: the link is Lazaret's own. A prefix
    // strictly containing it is fine, the device route stays more specific.
    if link.network.contains(&n) {
        return Err(DeriveError::LinkOverlap {
            list,
            index,
            entry: entry.to_string(),
            link: link.network,
        });
    }
    if list != "deny" {
        for b in BUILTINS.iter().filter(|b| b.fixed) {
            let range = b.net;
            if range.contains(&n) {
                return Err(DeriveError::Unroutable {
                    list,
                    index,
                    entry: entry.to_string(),
                    range,
                    what: b.what,
                });
            }
        }
    }
    Ok(())
}

/// The `allow` entries, parsed and checked, with their config index.
fn checked_allows(net: &Network, link: &Link) -> Result<Vec<(usize, Ipv4Net)>, DeriveError> {
    let mut allows: Vec<(usize, Ipv4Net)> = Vec::new();
    for (i, e) in net.allow.iter().enumerate() {
        match parse_entry("allow", i, e)? {
            Entry::V4(n) => {
                check_entry(link, "allow", i, e, n)?;
                allows.push((i, n));
            }
            Entry::V6 => {
                return Err(DeriveError::Ipv6Disabled {
                    list: "allow",
                    index: i,
                    entry: e.clone(),
                })
            }
        }
    }
    Ok(allows)
}

/// The `deny` entries, parsed and checked, with their config index; an
/// IPv6 entry goes to `ipv6_denied` (IPv6 is denied whole anyway).
fn checked_denies(
    net: &Network,
    link: &Link,
    allows: &[(usize, Ipv4Net)],
    ipv6_denied: &mut Vec<String>,
) -> Result<Vec<(usize, Ipv4Net)>, DeriveError> {
    let mut denies: Vec<(usize, Ipv4Net)> = Vec::new();
    for (i, e) in net.deny.iter().enumerate() {
        match parse_entry("deny", i, e)? {
            Entry::V4(n) => {
                check_entry(link, "deny", i, e, n)?;
                if let Some((ai, _)) = allows.iter().find(|(_, a)| *a == n) {
                    return Err(DeriveError::Conflict {
                        allow_index: *ai,
                        allow: net.allow[*ai].clone(),
                        deny_index: i,
                        deny: e.clone(),
                        prefix: n,
                    });
                }
                denies.push((i, n));
            }
            Entry::V6 => ipv6_denied.push(e.trim().to_string()),
        }
    }
    Ok(denies)
}

/// The `dns` entries, parsed, checked and deduplicated, with their config
/// index; none gives slirp's forwarder (index `usize::MAX`).
fn checked_resolvers(
    net: &Network,
    link: &Link,
    denies: &[(usize, Ipv4Net)],
) -> Result<Vec<(usize, Ipv4Addr)>, DeriveError> {
    if net.dns.len() > MAX_RESOLVERS {
        return Err(DeriveError::TooManyResolvers {
            count: net.dns.len(),
        });
    }
    let mut resolvers: Vec<(usize, Ipv4Addr)> = Vec::new();
    for (i, e) in net.dns.iter().enumerate() {
        let ip: IpAddr = e.trim().parse().map_err(|_| DeriveError::InvalidResolver {
            index: i,
            entry: e.clone(),
        })?;
        let IpAddr::V4(a) = ip else {
            return Err(DeriveError::Ipv6Disabled {
                list: "dns",
                index: i,
                entry: e.clone(),
            });
        };
        let host = Ipv4Net::from(a);
        if a != link.dns {
            check_entry(link, "dns", i, e, host)?;
        }
        if let Some((di, _)) = denies.iter().find(|(_, d)| *d == host) {
            return Err(DeriveError::ResolverDenied {
                dns_index: i,
                dns: e.clone(),
                deny_index: *di,
                deny: net.deny[*di].clone(),
                prefix: host,
            });
        }
        if !resolvers.iter().any(|(_, r)| *r == a) {
            resolvers.push((i, a));
        }
    }
    if resolvers.is_empty() {
        // slirp's forwarder: through slirp B, then slirp A, to the host's
        // own resolver (see the integration notes).
        resolvers.push((usize::MAX, link.dns));
    }
    Ok(resolvers)
}

/// The checked config entries the rules are assembled from.
struct Entries<'a> {
    net: &'a Network,
    link: &'a Link,
    allows: &'a [(usize, Ipv4Net)],
    denies: &'a [(usize, Ipv4Net)],
    resolvers: &'a [(usize, Ipv4Addr)],
}

/// Adds `rule`, one rule per prefix: an existing rule for the prefix is
/// kept unless `replace`.
fn put_rule(rules: &mut Vec<Rule>, rule: Rule, replace: bool) {
    if let Some(r) = rules.iter_mut().find(|r| r.prefix == rule.prefix) {
        if replace {
            *r = rule;
        }
    } else {
        rules.push(rule);
    }
}

/// Assembles the rules: built-ins, link, config, one rule per prefix,
/// sorted by prefix.
fn assemble_rules(
    e: &Entries,
    opts: &DeriveOptions,
    filtered: bool,
) -> Result<Vec<Rule>, DeriveError> {
    let (net, link) = (e.net, e.link);
    let mut rules: Vec<Rule> = Vec::new();
    put_fixed_rules(&mut rules, link, e.resolvers);
    for (i, n) in e.denies {
        put_rule(
            &mut rules,
            Rule {
                prefix: *n,
                verdict: Verdict::Deny,
                origin: Origin::Deny {
                    index: *i as u32,
                    entry: net.deny[*i].trim().to_string(),
                },
            },
            false,
        );
    }
    // The host's own addresses: a /32 each, which only an `allow` of
    // exactly that address replaces.
    let host_denials = host_rules(&opts.host_addresses, link)?;
    for r in &host_denials {
        put_rule(&mut rules, r.clone(), false);
    }
    for (i, n) in e.allows {
        put_rule(
            &mut rules,
            Rule {
                prefix: *n,
                verdict: Verdict::Allow,
                origin: Origin::Allow {
                    index: *i as u32,
                    entry: net.allow[*i].trim().to_string(),
                },
            },
            true,
        );
    }
    put_resolver_rules(&mut rules, e, &host_denials, filtered)?;
    rules.sort_by(|a, b| {
        (a.prefix.addr(), a.prefix.prefix_len()).cmp(&(b.prefix.addr(), b.prefix.prefix_len()))
    });
    Ok(rules)
}

/// The built-in denials and the link's: its gateway always, its DNS
/// forwarder unless it is a chosen resolver.
fn put_fixed_rules(rules: &mut Vec<Rule>, link: &Link, resolvers: &[(usize, Ipv4Addr)]) {
    for b in BUILTINS {
        put_rule(
            rules,
            Rule {
                prefix: b.net,
                verdict: Verdict::Deny,
                origin: Origin::Builtin {
                    what: b.what.into(),
                    fixed: b.fixed,
                },
            },
            false,
        );
    }
    put_rule(
        rules,
        Rule {
            prefix: Ipv4Net::from(link.gateway),
            verdict: Verdict::Deny,
            origin: Origin::Link {
                what: "slirp host-loopback gateway".into(),
            },
        },
        false,
    );
    if !resolvers.iter().any(|(_, r)| *r == link.dns) {
        put_rule(
            rules,
            Rule {
                prefix: Ipv4Net::from(link.dns),
                verdict: Verdict::Deny,
                origin: Origin::Link {
                    what: "slirp DNS forwarder (not a chosen resolver)".into(),
                },
            },
            false,
        );
    }
}

/// The resolvers' rules: with `allow_hosts` (`filtered`) each is the
/// filter's upstream and denied to the sandbox; otherwise each is allowed,
/// unless it is one of the host's own addresses no `allow` opens.
fn put_resolver_rules(
    rules: &mut Vec<Rule>,
    e: &Entries,
    host_denials: &[Rule],
    filtered: bool,
) -> Result<(), DeriveError> {
    let net = e.net;
    for (i, a) in e.resolvers {
        if *a == e.link.dns {
            continue; // on-link: the device route reaches it
        }
        let host = Ipv4Net::from(*a);
        let exact_allow = e.allows.iter().any(|(_, n)| *n == host);
        if filtered {
            // The filter's upstream only: routed by mark in table 77, and
            // denied here, so that no answer gets it routed for the
            // sandbox (an `allow` of exactly it still opens it).
            put_rule(
                rules,
                Rule {
                    prefix: host,
                    verdict: Verdict::Deny,
                    origin: Origin::Upstream {
                        index: *i as u32,
                        entry: net.dns[*i].trim().to_string(),
                    },
                },
                false,
            );
            continue;
        }
        if let Some(Origin::Host { ifname }) = host_denials
            .iter()
            .find(|r| r.prefix == host)
            .map(|r| &r.origin)
            .filter(|_| !exact_allow)
        {
            return Err(DeriveError::ResolverIsHost {
                index: *i,
                entry: net.dns[*i].clone(),
                ifname: ifname.clone(),
            });
        }
        let rule = Rule {
            prefix: host,
            verdict: Verdict::Allow,
            origin: Origin::Dns {
                index: *i as u32,
                entry: net.dns[*i].trim().to_string(),
            },
        };
        // An `allow` of the same /32 already permits it.
        put_rule(rules, rule, !exact_allow);
    }
    Ok(())
}
