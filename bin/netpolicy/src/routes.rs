//! `lazaret-netpolicy`'s own writes in the enforcement namespace, on the
//! shared [`Rtnl`] client: the policy's main table (`install`), the
//! watcher's denials of the host's new addresses in [`HOST_TABLE`]
//! (`watch`), and what attestation counts as a route of the policy.
//! The filtering resolver's routes are its own crate's
//! (`bin/dns-filter/src/routes.rs`).

use ipnet::Ipv4Net;
use lazaret_netlink::rtnl::{
    dst_of, existing_is_fine, table_of, NetlinkError, ObservedRoute, Rtnl,
};
use lazaret_protocol::netpolicy::policy::{RouteSpec, HOST_RULE_PRIORITY, HOST_TABLE};
use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::net::Ipv4Addr;

/// Deletes every IPv4 route of the main table except the device route
/// of `keep_dev` for `keep_prefix` (the kernel's, from the address).
pub fn flush_main_v4(
    rtnl: &mut Rtnl,
    keep_prefix: Ipv4Net,
    keep_dev: u32,
) -> Result<usize, NetlinkError> {
    let mut n = 0;
    for r in rtnl.route_msgs(AddressFamily::Inet)? {
        if table_of(&r) != u32::from(RouteHeader::RT_TABLE_MAIN) {
            continue;
        }
        let dst = dst_of(&r);
        let oif = r.attributes.iter().find_map(|a| match a {
            RouteAttribute::Oif(i) => Some(*i),
            _ => None,
        });
        if r.header.protocol == RouteProtocol::Kernel
            && dst == Some(keep_prefix)
            && oif == Some(keep_dev)
            && r.header.kind == RouteType::Unicast
        {
            continue;
        }
        let mut del = RouteMessage::default();
        del.header = r.header.clone();
        del.attributes = r
            .attributes
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    RouteAttribute::Destination(_)
                        | RouteAttribute::Gateway(_)
                        | RouteAttribute::Oif(_)
                        | RouteAttribute::Table(_)
                        | RouteAttribute::Priority(_)
                )
            })
            .cloned()
            .collect();
        let what = format!(
            "deleting route {}",
            dst.map(|d| d.to_string()).unwrap_or_default()
        );
        rtnl.request(&what, RouteNetlinkMessage::DelRoute(del), NLM_F_ACK)?;
        n += 1;
    }
    Ok(n)
}

/// Adds one route of the main table (`Device` routes are the kernel's
/// and are skipped).
pub fn add_route(rtnl: &mut Rtnl, spec: &RouteSpec, ifindex: u32) -> Result<(), NetlinkError> {
    let mut m = RouteMessage::default();
    m.header.address_family = AddressFamily::Inet;
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::Static;
    m.header.scope = RouteScope::Universe;
    let prefix = spec.prefix();
    m.header.destination_prefix_length = prefix.prefix_len();
    if prefix.prefix_len() > 0 {
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(
                prefix.addr(),
            )));
    }
    match spec {
        RouteSpec::Unreachable(_) => m.header.kind = RouteType::Unreachable,
        RouteSpec::Via { gateway, .. } => {
            m.header.kind = RouteType::Unicast;
            m.header.flags = RouteFlags::Onlink;
            m.attributes
                .push(RouteAttribute::Gateway(RouteAddress::Inet(*gateway)));
            m.attributes.push(RouteAttribute::Oif(ifindex));
        }
        RouteSpec::Device { .. } => return Ok(()),
    }
    rtnl.request(
        &format!("adding route `{spec}`"),
        RouteNetlinkMessage::NewRoute(m),
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
    )?;
    Ok(())
}

/// Adds the watcher's rule `lookup 75` at [`HOST_RULE_PRIORITY`]
/// (already there: nothing to do).
pub fn host_table_rule(rtnl: &mut Rtnl) -> Result<(), NetlinkError> {
    let mut m = RuleMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.action = RuleAction::ToTable;
    m.attributes
        .push(RuleAttribute::Priority(HOST_RULE_PRIORITY));
    m.attributes.push(RuleAttribute::Table(HOST_TABLE));
    existing_is_fine(rtnl.request(
        &format!("adding rule `lookup {HOST_TABLE}` (priority {HOST_RULE_PRIORITY})"),
        RouteNetlinkMessage::NewRule(m),
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
    ))
}

/// Adds the watcher's denial `unreachable ADDR/32` in [`HOST_TABLE`]
/// (connect fails with EHOSTUNREACH, as for the policy's denials).
pub fn host_route(rtnl: &mut Rtnl, addr: Ipv4Addr) -> Result<(), NetlinkError> {
    let mut m = RouteMessage::default();
    m.header.address_family = AddressFamily::Inet;
    m.header.table = RouteHeader::RT_TABLE_UNSPEC;
    m.attributes.push(RouteAttribute::Table(HOST_TABLE));
    m.header.protocol = RouteProtocol::Static;
    m.header.scope = RouteScope::Universe;
    m.header.kind = RouteType::Unreachable;
    m.header.destination_prefix_length = 32;
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::Inet(addr)));
    existing_is_fine(rtnl.request(
        &format!("adding route `unreachable {addr}/32 table {HOST_TABLE}`"),
        RouteNetlinkMessage::NewRoute(m),
        NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
    ))
}

/// Does the observed main-table route implement `spec` exactly?
pub fn route_matches(o: &ObservedRoute, spec: &RouteSpec) -> bool {
    if o.table != u32::from(RouteHeader::RT_TABLE_MAIN) || !o.unusual.is_empty() {
        return false;
    }
    let dst = spec.prefix().to_string();
    match spec {
        RouteSpec::Unreachable(_) => o.dst == dst && o.kind == "unreachable" && o.gateway.is_none(),
        RouteSpec::Via {
            gateway, ifname, ..
        } => {
            o.dst == dst
                && o.kind == "unicast"
                && o.gateway.as_deref() == Some(gateway.to_string().as_str())
                && o.dev.as_deref() == Some(ifname.as_str())
                && o.onlink
        }
        RouteSpec::Device { ifname, .. } => {
            o.dst == dst
                && o.kind == "unicast"
                && o.gateway.is_none()
                && o.dev.as_deref() == Some(ifname.as_str())
                && o.scope == u8::from(RouteScope::Link)
        }
    }
}
