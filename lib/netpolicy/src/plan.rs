//! What derivation takes besides the profile, what it gives, and why it
//! refuses a `[network]` section.

use ipnet::Ipv4Net;
use lazaret_protocol::netpolicy::policy::{
    HostAddress, Policy, PolicyError, MAX_ENTRIES, MAX_HOSTS, MAX_HOST_ADDRESSES, MAX_RESOLVERS,
};
use std::net::SocketAddrV4;

/// Result of derivation: no network at all, or a policy to install.
// One value per start: boxing the policy would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkPlan {
    /// `mode = "none"`: run the sandbox with `--network=none`.
    None,
    Policy(Policy),
}

/// Inputs that do not come from the profile.
#[derive(Debug, Clone, Default)]
pub struct DeriveOptions {
    /// Generation binding (see [`Policy::binding`]).
    pub binding: String,
    /// Denied probe target; by default the first of 169.254.169.254:80 and
    /// 240.0.0.1:80 that the policy denies.
    pub probe_denied: Option<SocketAddrV4>,
    /// Permitted probe target; none by default (nothing is contacted).
    pub probe_permitted: Option<SocketAddrV4>,
    /// Name asked of each resolver; default `lazaret-probe.invalid.` is
    /// never a real name, so an NXDOMAIN answer is the expected proof.
    pub dns_name: Option<String>,
    /// Per-check timeout; default 3000 ms.
    pub probe_timeout_ms: Option<u32>,
    /// The host's interface addresses, each denied (see the module
    /// documentation); `derive::host_addresses` lists them.
    pub host_addresses: Vec<HostAddress>,
}
/// Why the profile's `[network]` section gives no policy: each names the
/// entry (`network.LIST[i] "entry"`) and what to write instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeriveError {
    #[error("network.{list}[{index}] {entry:?} is not an IPv4 or IPv6 CIDR (write it as 198.51.100.0/24 or 198.51.100.7)")]
    InvalidCidr {
        list: &'static str,
        index: usize,
        entry: String,
    },
    #[error(
        "network.{list}[{index}] {entry:?} has host bits set; write the network address, {network}"
    )]
    HostBits {
        list: &'static str,
        index: usize,
        entry: String,
        network: Ipv4Net,
    },
    #[error("network.dns[{index}] {entry:?} is not an IP address (write a resolver address such as 198.51.100.53)")]
    InvalidResolver { index: usize, entry: String },
    #[error("network.allow[{allow_index}] {allow:?} and network.deny[{deny_index}] {deny:?} name the same prefix {prefix}; remove one of them")]
    Conflict {
        allow_index: usize,
        allow: String,
        deny_index: usize,
        deny: String,
        prefix: Ipv4Net,
    },
    #[error("network.dns[{dns_index}] {dns:?} and network.deny[{deny_index}] {deny:?} name the same host {prefix}; remove one of them")]
    ResolverDenied {
        dns_index: usize,
        dns: String,
        deny_index: usize,
        deny: String,
        prefix: Ipv4Net,
    },
    #[error("network.{list}[{index}] {entry:?} lies in {range} ({what}), which Lazaret never routes; remove it")]
    Unroutable {
        list: &'static str,
        index: usize,
        entry: String,
        range: Ipv4Net,
        what: &'static str,
    },
    #[error("network.{list}[{index}] {entry:?} overlaps the slirp4netns link network {link}; remove it (the link is Lazaret's own)")]
    LinkOverlap {
        list: &'static str,
        index: usize,
        entry: String,
        link: Ipv4Net,
    },
    #[error("network.{list}[{index}] {entry:?} is the whole address space; set `default = \"{default}\"` instead")]
    WholeSpace {
        list: &'static str,
        index: usize,
        entry: String,
        default: &'static str,
    },
    #[error(
        "network.{list}[{index}] {entry:?} is IPv6, but IPv6 is disabled in the sandbox; remove it"
    )]
    Ipv6Disabled {
        list: &'static str,
        index: usize,
        entry: String,
    },
    #[error(
        "network.dns lists {count} resolvers; at most {MAX_RESOLVERS} are used, remove the others"
    )]
    TooManyResolvers { count: usize },
    #[error(
        "network.allow and network.deny list {count} entries; at most {MAX_ENTRIES} are supported"
    )]
    TooManyEntries { count: usize },
    #[error(
        "network.probe {entry:?} is not an IPv4 address and port (write it as 198.51.100.7:443)"
    )]
    InvalidProbe { entry: String },
    #[error("network.allow_hosts[{index}] {entry:?}: {why}")]
    InvalidHost {
        index: usize,
        entry: String,
        why: String,
    },
    #[error("network.allow_hosts lists {count} entries; at most {MAX_HOSTS} are supported")]
    TooManyHosts { count: usize },
    #[error("network.dns[{index}] {entry:?} is an address of this host ({ifname}): the sandbox would reach every service the host offers there, not only its resolver; name it in network.allow too to accept that, or use network.allow_hosts (its resolvers are reachable by Lazaret's filtering resolver alone)")]
    ResolverIsHost {
        index: usize,
        entry: String,
        ifname: String,
    },
    #[error("this host has {count} IPv4 addresses; at most {MAX_HOST_ADDRESSES} can be denied, so the sandbox cannot start here")]
    TooManyHostAddresses { count: usize },
    #[error("cannot list this host's network addresses ({why}): Lazaret denies the sandbox every address the host answers on, so it cannot start without them")]
    HostAddresses { why: String },
    #[error("network.allow_hosts needs `default = \"deny\"`: with `default = \"allow\"` every address is reachable already, so a list of names would allow nothing more and restrict nothing")]
    HostsNeedDeny,
    /// The derived policy fails its own checks (a probe target the policy
    /// does not decide as it must, a probe name that is no domain name).
    #[error(transparent)]
    Policy(#[from] PolicyError),
}
