//! The filtering resolver's own routes and rules in the enforcement
//! namespace: a host route for each allowed address (main table, or the
//! port table 76 with a rule per port), and the upstream socket's table
//! 77. Only `lazaret-dns-filter` writes them; the shared client is
//! `lazaret-netlink`.

use lazaret_netlink::rtnl::{existing_is_fine, NetlinkError, Rtnl};
use lazaret_protocol::netpolicy::policy::{
    DNS_PORT_TABLE, DNS_ROUTE_PROTOCOL, DNS_RULE_PRIORITY, DNS_UPSTREAM_MARK,
    DNS_UPSTREAM_PRIORITY, DNS_UPSTREAM_TABLE,
};
use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage, RulePortRange};
use netlink_packet_route::{AddressFamily, IpProtocol, RouteNetlinkMessage};
use std::net::{IpAddr, Ipv4Addr};

/// Adds (or refreshes) or deletes the filtering resolver's host route
/// `ADDR/32 via GATEWAY dev IFINDEX onlink proto 76` in `table`
/// (`0.0.0.0/0` when `addr` is `None`).
pub fn dns_route(
    rtnl: &mut Rtnl,
    table: u32,
    addr: Option<Ipv4Addr>,
    gateway: Ipv4Addr,
    ifindex: u32,
    add: bool,
) -> Result<(), NetlinkError> {
    let mut m = RouteMessage::default();
    m.header.address_family = AddressFamily::Inet;
    m.header.table = RouteHeader::RT_TABLE_UNSPEC;
    m.attributes.push(RouteAttribute::Table(table));
    m.header.protocol = RouteProtocol::from(DNS_ROUTE_PROTOCOL);
    m.header.scope = RouteScope::Universe;
    m.header.kind = RouteType::Unicast;
    m.header.flags = RouteFlags::Onlink;
    if let Some(a) = addr {
        m.header.destination_prefix_length = 32;
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(a)));
    }
    m.attributes
        .push(RouteAttribute::Gateway(RouteAddress::Inet(gateway)));
    m.attributes.push(RouteAttribute::Oif(ifindex));
    let dst = addr.map_or("default".to_string(), |a| format!("{a}/32"));
    let (verb, msg, flags) = if add {
        (
            "adding",
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        )
    } else {
        ("deleting", RouteNetlinkMessage::DelRoute(m), NLM_F_ACK)
    };
    rtnl.request(
        &format!("{verb} route `{dst} via {gateway}` (table {table})"),
        msg,
        flags,
    )
    .map(drop)
}

/// Adds the rule `fwmark 0x4c5a lookup 77` at priority 900: the
/// filter's upstream socket, alone, reaches the profile's resolvers.
pub fn dns_upstream_rule(rtnl: &mut Rtnl) -> Result<(), NetlinkError> {
    let mut m = RuleMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.action = RuleAction::ToTable;
    m.attributes
        .push(RuleAttribute::Priority(DNS_UPSTREAM_PRIORITY));
    m.attributes.push(RuleAttribute::Table(DNS_UPSTREAM_TABLE));
    m.attributes.push(RuleAttribute::FwMark(DNS_UPSTREAM_MARK));
    m.attributes.push(RuleAttribute::FwMask(u32::MAX));
    rtnl.request(
        &format!("adding rule `fwmark {DNS_UPSTREAM_MARK:#x} lookup {DNS_UPSTREAM_TABLE}`"),
        RouteNetlinkMessage::NewRule(m),
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
    )
    .map(drop)
}

/// Adds or deletes the rule `to ADDR/32 ipproto PROTO dport PORT
/// lookup 76` at priority 1000.
pub fn dns_port_rule(
    rtnl: &mut Rtnl,
    addr: Ipv4Addr,
    tcp: bool,
    port: u16,
    add: bool,
) -> Result<(), NetlinkError> {
    let mut m = RuleMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.dst_len = 32;
    m.header.action = RuleAction::ToTable;
    m.attributes
        .push(RuleAttribute::Destination(IpAddr::V4(addr)));
    m.attributes
        .push(RuleAttribute::Priority(DNS_RULE_PRIORITY));
    m.attributes.push(RuleAttribute::Table(DNS_PORT_TABLE));
    m.attributes.push(RuleAttribute::IpProtocol(if tcp {
        IpProtocol::Tcp
    } else {
        IpProtocol::Udp
    }));
    m.attributes
        .push(RuleAttribute::DestinationPortRange(RulePortRange {
            start: port,
            end: port,
        }));
    let what = format!(
        "{} rule `to {addr}/32 ipproto {} dport {port} lookup {DNS_PORT_TABLE}`",
        if add { "adding" } else { "deleting" },
        if tcp { "tcp" } else { "udp" }
    );
    if add {
        existing_is_fine(rtnl.request(
            &what,
            RouteNetlinkMessage::NewRule(m),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        ))
    } else {
        rtnl.request(&what, RouteNetlinkMessage::DelRule(m), NLM_F_ACK)
            .map(drop)
    }
}
