//! The canonical, generation-bound [`Policy`] of one Domain generation
//! (pure data, no system calls): what the derived policy means.
//!
//! Semantics (derivation, `lazaret-netpolicy`, gives a policy them; the
//! checks and the evaluation here hold it to them):
//! - IPv4 is permitted by default except the built-in denied ranges: RFC 1918
//!   (10/8, 172.16/12, 192.168/16), link-local 169.254/16 (cloud metadata),
//!   CGNAT 100.64/10, "this network" 0/8, loopback 127/8, multicast 224/4 and
//!   reserved 240/4 (with the limited broadcast address), and on the slirp
//!   link the host-loopback gateway (10.0.2.2) and, unless it is a chosen
//!   resolver, slirp's DNS forwarder (10.0.2.3).
//! - `allow` and `deny` add prefixes; `dns` resolvers get host routes even
//!   inside denied ranges; `default = "deny"` denies everything not allowed.
//! - Longest prefix wins (plain Linux routing). The same prefix in `allow`
//!   and `deny` (or a resolver and a `deny` /32) is an error naming both.
//!   An `allow` of exactly a built-in prefix (say `10.0.0.0/8`) replaces the
//!   built-in denial: trusted configuration says so explicitly.
//! - The "fixed" built-ins (0/8, 127/8, 224/4, 240/4) and the slirp link
//!   network cannot be allowed: an entry inside them is an error.
//! - IPv6 is disabled in both namespaces (`disable_ipv6=1`), so no IPv6
//!   destination is reachable at all. IPv6 `deny` entries are therefore
//!   already satisfied and accepted; IPv6 `allow` or `dns` entries are errors.
//! - Every IPv4 address of the host's interfaces (taken by the deriver in
//!   the host's network namespace, [`DeriveOptions::host_addresses`]) is
//!   denied as a /32, [`Origin::Host`]: slirp4netns A re-originates the
//!   sandbox's connections as the host's own sockets, so they would reach
//!   services listening there as local traffic. A /32 beats any shorter
//!   `allow`; only an `allow` naming that address exactly (`A` or `A/32`)
//!   opens it. Addresses inside the fixed ranges (loopback) or the slirp
//!   link are left out: denied already, or never the host (slirp answers
//!   nothing there). Addresses the host gains later are denied by
//!   `lazaret-netpolicy watch` (in [`HOST_TABLE`]).
//! - With `allow_hosts`, the profile's `dns` resolvers are denied as /32s
//!   ([`Origin::Upstream`]) so that no answer can get them routed; the
//!   filter's own socket reaches them through table 77.

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddrV4};

/// Version of the canonical encoding; part of the digest.
pub const POLICY_VERSION: u32 = 3;
/// Upper bound of the canonical policy bytes (checked before parsing).
pub const MAX_POLICY_BYTES: u64 = 256 * 1024;
/// At most this many resolvers: the C library reads no more (`MAXNS`).
pub const MAX_RESOLVERS: usize = 3;
/// At most this many `allow` plus `deny` entries.
pub const MAX_ENTRIES: usize = 1024;
/// At most this many `allow_hosts` entries.
pub const MAX_HOSTS: usize = 512;
/// At most this many host addresses are denied in the policy (and, apart,
/// at most this many more by the watcher while the Domain runs).
pub const MAX_HOST_ADDRESSES: usize = 1024;

/// Why a policy is refused: its bytes, or its structure.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("the {which} probe target {target} is {actual} by the policy, so it cannot prove the policy; pick a target the policy {expected}")]
    ProbeTarget {
        which: &'static str,
        target: SocketAddrV4,
        actual: &'static str,
        expected: &'static str,
    },
    #[error("the DNS probe name {name:?} is not a valid domain name")]
    ProbeName { name: String },
    #[error("policy encoding: {0}")]
    Encode(String),
    #[error("policy bytes do not decode: {0}; the coordinator and this helper must come from the same Lazaret build")]
    Decode(String),
    #[error("policy bytes are not canonical (re-encoding differs); refusing them")]
    NotCanonical,
    #[error("policy version {found} is not supported (this helper speaks {POLICY_VERSION}); use the helper of the same Lazaret build")]
    Version { found: u32 },
    #[error("policy is inconsistent: {0}; it was not derived by `derive`")]
    Inconsistent(String),
}

/// What happens to traffic towards a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
}

impl Verdict {
    fn past(self) -> &'static str {
        match self {
            Verdict::Allow => "permitted",
            Verdict::Deny => "denied",
        }
    }
}

/// Why a rule exists: printed by `lazaret net show` and in errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A built-in denied range; `fixed` ones cannot be allowed.
    Builtin {
        what: String,
        fixed: bool,
    },
    /// The slirp link's host-loopback gateway or DNS forwarder.
    Link {
        what: String,
    },
    Allow {
        index: u32,
        entry: String,
    },
    Deny {
        index: u32,
        entry: String,
    },
    Dns {
        index: u32,
        entry: String,
    },
    /// An address of one of the host's interfaces, taken when the policy
    /// was derived: denied so that no host service is reachable.
    Host {
        ifname: String,
    },
    /// With `allow_hosts`: a `dns` resolver, the filtering resolver's
    /// upstream only (reached through table 77 by its own socket).
    Upstream {
        index: u32,
        entry: String,
    },
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Builtin { what, fixed } => {
                write!(
                    f,
                    "built-in: {what}{}",
                    if *fixed { " (fixed)" } else { "" }
                )
            }
            Origin::Link { what } => write!(f, "link: {what}"),
            Origin::Allow { index, entry } => write!(f, "network.allow[{index}] {entry:?}"),
            Origin::Deny { index, entry } => write!(f, "network.deny[{index}] {entry:?}"),
            Origin::Dns { index, entry } => write!(f, "network.dns[{index}] {entry:?}"),
            Origin::Host { ifname } => write!(f, "host address ({ifname})"),
            Origin::Upstream { index, entry } => write!(
                f,
                "network.dns[{index}] {entry:?}, the filtering resolver's upstream only"
            ),
        }
    }
}

/// One IPv4 address of one of the host's interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAddress {
    pub address: Ipv4Addr,
    /// The interface's name (its label, `eth0` or `eth0:1`).
    pub ifname: String,
}

/// The table where `lazaret-netpolicy watch` denies the addresses the host
/// gains while the Domain runs (`unreachable ADDR/32`), looked up first
/// of all but the filter's upstream (by the rule at
/// [`HOST_RULE_PRIORITY`]): an address found there is refused whatever
/// the main table, or the filter's routes and port rules, say. The others
/// are not found there and go on to the next rule.
pub const HOST_TABLE: u32 = 75;
/// The priority of the rule `lookup 75` (added with the first such
/// denial): after the filter's upstream mark rule (so that it still
/// reaches its resolvers) and before its port rules and the main table.
pub const HOST_RULE_PRIORITY: u32 = 950;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub prefix: Ipv4Net,
    pub verdict: Verdict,
    pub origin: Origin,
}

/// The slirp4netns link as both helpers configure it (`--configure`
/// defaults): the enforcement namespace's side of slirp A and the sandbox
/// namespace's side of slirp B look the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub ifname: String,
    pub network: Ipv4Net,
    /// slirp's gateway; also its host-loopback alias, always denied.
    pub gateway: Ipv4Addr,
    /// slirp's DNS forwarder.
    pub dns: Ipv4Addr,
    /// The namespace's own address.
    pub guest: Ipv4Addr,
    pub mtu: u32,
}

impl Default for Link {
    fn default() -> Self {
        Self {
            ifname: "tap0".into(),
            network: const { Ipv4Net::new_assert(Ipv4Addr::new(10, 0, 2, 0), 24) },
            gateway: Ipv4Addr::new(10, 0, 2, 2),
            dns: Ipv4Addr::new(10, 0, 2, 3),
            guest: Ipv4Addr::new(10, 0, 2, 100),
            mtu: 65520,
        }
    }
}

/// IPv6 handling; only one choice today, spelled out in the policy so the
/// attestation states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ipv6Mode {
    /// `net.ipv6.conf.{all,default,*}.disable_ipv6 = 1` in the enforcement
    /// and the sandbox namespace.
    DisabledInBothNamespaces,
}

/// What the readiness probe checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbePlan {
    /// Must be refused by the policy (connect fails with "no route").
    pub denied: SocketAddrV4,
    /// Must be reachable, when the caller names one.
    pub permitted: Option<SocketAddrV4>,
    /// Name asked of each resolver; any well-formed answer passes.
    pub dns_name: String,
    pub timeout_ms: u32,
    /// Whether a silent resolver fails the probe. True for resolvers the
    /// profile names in `dns`; false for the implicit one (slirp's
    /// forwarder to the host's own resolver, which Lazaret does not
    /// configure and which may be offline): its answer is recorded as
    /// evidence but does not keep the sandbox from starting.
    pub dns_required: bool,
}

/// The derived, canonical network policy of one Domain generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub version: u32,
    /// Opaque generation binding chosen by the coordinator (Domain ID and
    /// generation), so that a policy of one generation is not mistaken for
    /// another's.
    pub binding: String,
    pub link: Link,
    /// The verdict of 0.0.0.0/0.
    pub default: Verdict,
    /// Sorted by prefix (address, then length); one rule per prefix;
    /// never 0.0.0.0/0.
    pub rules: Vec<Rule>,
    /// What the sandbox's `/etc/resolv.conf` and slirp B's resolve with.
    pub resolvers: Vec<Ipv4Addr>,
    pub ipv6: Ipv6Mode,
    /// IPv6 `deny` entries, accepted as already satisfied (IPv6 is off).
    pub ipv6_denied: Vec<String>,
    pub probe: ProbePlan,
    /// `allow_hosts`: the filtering resolver's plan, when names are listed.
    pub hosts: Option<HostsPlan>,
}

/// The filtering resolver of the Network Sidecar (`lazaret-dns-filter`):
/// it listens in the enforcement namespace on `listen:53`, which slirp4netns
/// B's DNS forwarder (the sandbox's only resolver) sends every query to;
/// answers names no entry allows with NXDOMAIN itself, forwards the others
/// to `upstream`, and routes each answer's addresses in the enforcement
/// namespace for the answer's TTL, clamped to `ttl_floor..=ttl_ceiling`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostsPlan {
    /// The entries as written (trimmed), in the profile's order.
    pub allow: Vec<String>,
    /// The enforcement namespace's own address on the link.
    pub listen: Ipv4Addr,
    /// Where allowed queries go: the profile's `dns`, else slirp4netns A's
    /// forwarder (the host's resolver).
    pub upstream: Vec<Ipv4Addr>,
    pub ttl_floor: u32,
    pub ttl_ceiling: u32,
    /// An exact allowed name the readiness probe asks for; its answer is
    /// evidence (the host's resolver may be offline), while the probe's
    /// disallowed name must be refused by the filter.
    pub probe_allowed: Option<String>,
}

impl HostsPlan {
    /// The parsed allow-list (the entries were checked when derived).
    pub fn patterns(&self) -> Result<super::hosts::AllowHosts, super::hosts::HostError> {
        super::hosts::AllowHosts::parse(&self.allow)
    }
}

/// Routes the filtering resolver installs carry this protocol number
/// (`ip route ... proto 76`), so attestation can tell them from the
/// policy's own and check their shape.
pub const DNS_ROUTE_PROTOCOL: u8 = 76;
/// The table of port-limited entries (`github.com:22`): one default route
/// via the link's gateway, reached only through the rules below.
pub const DNS_PORT_TABLE: u32 = 76;
/// The priority of the filtering resolver's rules (`to ADDR/32 ipproto
/// tcp|udp dport PORT lookup 76`), before the main table's.
pub const DNS_RULE_PRIORITY: u32 = 1000;
/// With `dns` and `allow_hosts`, the configured resolvers are the filter's
/// upstream only: routed in this table, which only packets of the filter's
/// upstream socket (marked [`DNS_UPSTREAM_MARK`]) look up, by a rule at
/// [`DNS_UPSTREAM_PRIORITY`]; the main table keeps them denied, so the
/// sandbox (through slirp B) cannot reach them.
pub const DNS_UPSTREAM_TABLE: u32 = 77;
pub const DNS_UPSTREAM_PRIORITY: u32 = 900;
pub const DNS_UPSTREAM_MARK: u32 = 0x4c5a;

/// A built-in denied range (see the module documentation).
pub struct Builtin {
    /// Checked when the crate compiles (`new_assert` in a constant).
    pub net: Ipv4Net,
    pub what: &'static str,
    /// Never allowed: an `allow` inside it is an error.
    pub fixed: bool,
}

pub const BUILTINS: &[Builtin] = &[
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(0, 0, 0, 0), 8),
        what: "\"this network\"",
        fixed: true,
    },
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(10, 0, 0, 0), 8),
        what: "RFC 1918 private",
        fixed: false,
    },
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(100, 64, 0, 0), 10),
        what: "CGNAT shared address space",
        fixed: false,
    },
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8),
        what: "loopback",
        fixed: true,
    },
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(169, 254, 0, 0), 16),
        what: "link-local, cloud metadata",
        fixed: false,
    },
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(172, 16, 0, 0), 12),
        what: "RFC 1918 private",
        fixed: false,
    },
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(192, 168, 0, 0), 16),
        what: "RFC 1918 private",
        fixed: false,
    },
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(224, 0, 0, 0), 4),
        what: "multicast",
        fixed: true,
    },
    Builtin {
        net: Ipv4Net::new_assert(Ipv4Addr::new(240, 0, 0, 0), 4),
        what: "reserved and broadcast",
        fixed: true,
    },
];

/// Is `addr`, an address of the host, one the policy must deny? Not when
/// it lies in a fixed range (loopback: denied already, and never
/// routable) or on the slirp link (slirp4netns A answers only its own
/// gateway and forwarder there, so a host address in 10.0.2.0/24, as a
/// QEMU user-network guest has, is never reached through it).
pub fn host_deniable(link: &Link, addr: Ipv4Addr) -> bool {
    !link.network.contains(&addr)
        && !BUILTINS
            .iter()
            .filter(|b| b.fixed)
            .any(|b| b.net.contains(&addr))
}

/// The decision for one destination, with the rule that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    /// The matching prefix (0.0.0.0/0 for the default).
    pub prefix: Ipv4Net,
    pub origin: Option<Origin>,
}

/// One route of the enforcement namespace's main table.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RouteSpec {
    /// `unreachable PREFIX` (connect fails with EHOSTUNREACH).
    Unreachable(Ipv4Net),
    /// `PREFIX via GATEWAY dev IFNAME onlink`.
    Via {
        prefix: Ipv4Net,
        gateway: Ipv4Addr,
        ifname: String,
    },
    /// The device route the kernel adds for the link's address; expected,
    /// never installed by Lazaret.
    Device { prefix: Ipv4Net, ifname: String },
}

impl RouteSpec {
    pub fn prefix(&self) -> Ipv4Net {
        match self {
            RouteSpec::Unreachable(p) => *p,
            RouteSpec::Via { prefix, .. } | RouteSpec::Device { prefix, .. } => *prefix,
        }
    }
}

impl std::fmt::Display for RouteSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteSpec::Unreachable(p) => write!(f, "unreachable {p}"),
            RouteSpec::Via {
                prefix,
                gateway,
                ifname,
            } => write!(f, "{prefix} via {gateway} dev {ifname} onlink"),
            RouteSpec::Device { prefix, ifname } => write!(f, "{prefix} dev {ifname} scope link"),
        }
    }
}

impl Policy {
    /// Canonical bytes (postcard).
    pub fn to_bytes(&self) -> Result<Vec<u8>, PolicyError> {
        postcard::to_stdvec(self).map_err(|e| PolicyError::Encode(e.to_string()))
    }

    /// SHA-256 over the canonical bytes, lower-case hex.
    pub fn digest(&self) -> Result<String, PolicyError> {
        Ok(digest_bytes(&self.to_bytes()?))
    }

    /// Decodes canonical bytes and checks they are canonical and consistent.
    pub fn from_bytes(bytes: &[u8]) -> Result<Policy, PolicyError> {
        let p: Policy =
            postcard::from_bytes(bytes).map_err(|e| PolicyError::Decode(e.to_string()))?;
        if p.version != POLICY_VERSION {
            return Err(PolicyError::Version { found: p.version });
        }
        if p.to_bytes()? != bytes {
            return Err(PolicyError::NotCanonical);
        }
        p.check_consistent()?;
        Ok(p)
    }

    /// Structural invariants a derived policy always has; checked again by
    /// the helper, which trusts the digest but not the deriver's code.
    pub fn check_consistent(&self) -> Result<(), PolicyError> {
        let bad = |m: String| Err(PolicyError::Inconsistent(m));
        if self.link != Link::default() {
            return bad(format!("unexpected link {:?}", self.link));
        }
        self.check_rules()?;
        if self.resolvers.is_empty() || self.resolvers.len() > MAX_RESOLVERS {
            return bad(format!("{} resolvers", self.resolvers.len()));
        }
        // With allow_hosts the sandbox's resolver is slirp B's forwarder
        // (the filter), whatever N1's routes say of 10.0.2.3.
        for r in self.resolvers.iter().filter(|_| self.hosts.is_none()) {
            if self.verdict_for(*r).verdict != Verdict::Allow {
                return bad(format!("resolver {r} is not reachable"));
            }
        }
        if self.binding.len() > 4096 {
            return bad("binding longer than 4096 bytes".into());
        }
        self.check_host_rules()?;
        if let Some(h) = &self.hosts {
            self.check_hosts(h)?;
        }
        self.check_probe()
    }

    /// The rules: sorted, one per prefix, none allowing the link or a
    /// fixed range, the fixed and gateway denials present.
    fn check_rules(&self) -> Result<(), PolicyError> {
        let bad = |m: String| Err(PolicyError::Inconsistent(m));
        for w in self.rules.windows(2) {
            let k = |r: &Rule| (r.prefix.addr(), r.prefix.prefix_len());
            if k(&w[0]) >= k(&w[1]) {
                return bad(format!("rules not sorted or duplicated at {}", w[1].prefix));
            }
        }
        for r in &self.rules {
            if r.prefix.trunc() != r.prefix || r.prefix.prefix_len() == 0 {
                return bad(format!("bad rule prefix {}", r.prefix));
            }
            if r.verdict == Verdict::Allow {
                if self.link.network.contains(&r.prefix) {
                    return bad(format!("allow {} inside the link", r.prefix));
                }
                for b in BUILTINS.iter().filter(|b| b.fixed) {
                    if b.net.contains(&r.prefix) {
                        return bad(format!("allow {} inside fixed {}", r.prefix, b.net));
                    }
                }
            }
        }
        for b in BUILTINS.iter().filter(|b| b.fixed) {
            if !self
                .rules
                .iter()
                .any(|r| r.prefix == b.net && r.verdict == Verdict::Deny)
            {
                return bad(format!("fixed denial {} missing", b.net));
            }
        }
        let gw = Ipv4Net::from(self.link.gateway);
        if !self
            .rules
            .iter()
            .any(|r| r.prefix == gw && r.verdict == Verdict::Deny)
        {
            return bad("host-loopback gateway denial missing".into());
        }
        Ok(())
    }

    /// `allow_hosts`: the filtering resolver's plan, with default deny and
    /// the forwarder as the sandbox's one resolver.
    fn check_hosts(&self, h: &HostsPlan) -> Result<(), PolicyError> {
        let bad = |m: String| Err(PolicyError::Inconsistent(m));
        if self.default != Verdict::Deny {
            return bad("allow_hosts without default deny".into());
        }
        let implicit = h.upstream == [self.link.dns];
        let separate = !h.upstream.is_empty()
            && h.upstream.len() <= MAX_RESOLVERS
            && h.upstream.iter().all(|u| !self.link.network.contains(u));
        if h.listen != self.link.guest || !(implicit || separate) {
            return bad(format!(
                "filtering resolver on {} with upstream {:?}",
                h.listen, h.upstream
            ));
        }
        if h.allow.len() > MAX_HOSTS || h.patterns().is_err() {
            return bad("allow_hosts entries do not parse".into());
        }
        if h.ttl_floor == 0 || h.ttl_floor > h.ttl_ceiling {
            return bad(format!("TTL bounds {}..{}", h.ttl_floor, h.ttl_ceiling));
        }
        if self.resolvers != [self.link.dns] {
            return bad("allow_hosts with resolvers other than the forwarder".into());
        }
        // No answer may get an upstream routed: each has its own rule.
        for u in h.upstream.iter().filter(|_| self.upstream_by_mark()) {
            if !self.decides_exactly(*u) {
                return bad(format!("filter upstream {u} has no rule of its own"));
            }
        }
        Ok(())
    }

    /// Is there a rule for exactly `addr/32` (a host address, an `allow`
    /// or `deny` of it, a resolver)? The watcher leaves such an address
    /// as the policy decided it.
    pub fn decides_exactly(&self, addr: Ipv4Addr) -> bool {
        self.rules
            .iter()
            .any(|r| r.prefix.prefix_len() == 32 && r.prefix.addr() == addr)
    }

    /// May `lazaret-netpolicy watch` deny `addr`, an address the host has
    /// (and attestation accept its rule)? When it is one to deny and the
    /// policy does not decide it exactly already (as a host address taken
    /// at derivation, or an `allow`, `deny` or resolver of exactly it).
    pub fn watch_may_deny(&self, addr: Ipv4Addr) -> bool {
        host_deniable(&self.link, addr) && !self.decides_exactly(addr)
    }

    /// Rules of host addresses and filter upstreams: denials of single
    /// addresses, at most [`MAX_HOST_ADDRESSES`] of the host's.
    fn check_host_rules(&self) -> Result<(), PolicyError> {
        let bad = |m: String| Err(PolicyError::Inconsistent(m));
        let mut hosts = 0;
        for r in &self.rules {
            let (host, upstream) = match &r.origin {
                Origin::Host { .. } => (true, false),
                Origin::Upstream { .. } => (false, true),
                _ => continue,
            };
            if r.verdict != Verdict::Deny || r.prefix.prefix_len() != 32 {
                return bad(format!("{} {} is not a denied address", r.origin, r.prefix));
            }
            if host && !host_deniable(&self.link, r.prefix.addr()) {
                return bad(format!("host address {} is not one to deny", r.prefix));
            }
            if upstream
                && !self
                    .hosts
                    .as_ref()
                    .is_some_and(|h| h.upstream.contains(&r.prefix.addr()))
            {
                return bad(format!("{} is no filter upstream", r.prefix));
            }
            hosts += usize::from(host);
        }
        if hosts > MAX_HOST_ADDRESSES {
            return bad(format!("{hosts} host addresses"));
        }
        Ok(())
    }

    pub fn check_probe(&self) -> Result<(), PolicyError> {
        let d = self.verdict_for(*self.probe.denied.ip()).verdict;
        if d != Verdict::Deny {
            return Err(PolicyError::ProbeTarget {
                which: "denied",
                target: self.probe.denied,
                actual: d.past(),
                expected: "denies",
            });
        }
        if let Some(p) = self.probe.permitted {
            let v = self.verdict_for(*p.ip()).verdict;
            if v != Verdict::Allow || self.link.network.contains(p.ip()) {
                return Err(PolicyError::ProbeTarget {
                    which: "permitted",
                    target: p,
                    actual: if v == Verdict::Allow {
                        "on the slirp link and"
                    } else {
                        "denied"
                    },
                    expected: "permits, off the slirp link",
                });
            }
        }
        if hickory_proto::rr::Name::from_ascii(&self.probe.dns_name).is_err()
            || self.probe.dns_name.is_empty()
            || self.probe.dns_name.len() > 253
        {
            return Err(PolicyError::ProbeName {
                name: self.probe.dns_name.clone(),
            });
        }
        Ok(())
    }

    /// Longest-prefix decision for `addr`, exactly as the installed routes
    /// decide it. The link network's device route permits the link itself
    /// except where a link rule denies.
    pub fn verdict_for(&self, addr: Ipv4Addr) -> Decision {
        let mut best = Decision {
            verdict: self.default,
            prefix: Ipv4Net::default(),
            origin: None,
        };
        let mut consider = |prefix: Ipv4Net, verdict: Verdict, origin: Option<Origin>| {
            if prefix.contains(&addr) && prefix.prefix_len() >= best.prefix.prefix_len() {
                best = Decision {
                    verdict,
                    prefix,
                    origin,
                };
            }
        };
        consider(
            self.link.network,
            Verdict::Allow,
            Some(Origin::Link {
                what: "slirp link network".into(),
            }),
        );
        for r in &self.rules {
            consider(r.prefix, r.verdict, Some(r.origin.clone()));
        }
        best
    }

    /// May the sandbox reach `addr` at all: when a rule or the default
    /// allows it, or, with `allow_hosts`, when only the default denies it
    /// (the filtering resolver routes such an address of an allowed
    /// name; one a rule denies, a private range or a `deny` entry, never).
    /// What the egress Pod of a cluster export checks, by name or not.
    pub fn reachable(&self, addr: Ipv4Addr) -> bool {
        let d = self.verdict_for(addr);
        d.verdict == Verdict::Allow || (self.hosts.is_some() && d.origin.is_none())
    }

    /// The main routing table of the enforcement namespace, sorted.
    pub fn routes(&self) -> Vec<RouteSpec> {
        let via = |prefix| RouteSpec::Via {
            prefix,
            gateway: self.link.gateway,
            ifname: self.link.ifname.clone(),
        };
        let mut out = vec![
            match self.default {
                Verdict::Allow => via(Ipv4Net::default()),
                Verdict::Deny => RouteSpec::Unreachable(Ipv4Net::default()),
            },
            RouteSpec::Device {
                prefix: self.link.network,
                ifname: self.link.ifname.clone(),
            },
        ];
        for r in &self.rules {
            out.push(match r.verdict {
                Verdict::Deny => RouteSpec::Unreachable(r.prefix),
                Verdict::Allow => via(r.prefix),
            });
        }
        out.sort();
        out
    }

    /// The text of `/etc/resolv.conf` for the sandbox and for slirp B.
    pub fn resolv_conf(&self) -> String {
        let mut s = String::from(match self.hosts {
            None => "# written by Lazaret from the profile's network.dns; do not edit\n",
            Some(_) => "# written by Lazaret: lookups go to Lazaret's filtering resolver (network.allow_hosts); do not edit\n",
        });
        for r in &self.resolvers {
            s.push_str(&format!("nameserver {r}\n"));
        }
        s.push_str("options edns0\n");
        s
    }

    /// Whether the filter's upstream is the profile's `dns` (routed by
    /// mark, in [`DNS_UPSTREAM_TABLE`]) rather than slirp A's forwarder.
    pub fn upstream_by_mark(&self) -> bool {
        self.hosts
            .as_ref()
            .is_some_and(|h| h.upstream != [self.link.dns])
    }

    /// What slirp4netns B's DNS forwarder reads (in the holder's mount
    /// namespace): the policy's resolvers, or the filtering resolver.
    pub fn sidecar_resolv_conf(&self) -> String {
        match &self.hosts {
            None => self.resolv_conf(),
            Some(h) => format!(
                "# written by Lazaret: slirp4netns B forwards the sandbox's lookups to the filtering resolver (network.allow_hosts)\nnameserver {}\n",
                h.listen
            ),
        }
    }
}

/// Lower-case hex SHA-256.
pub use crate::memfd::digest as digest_bytes;
