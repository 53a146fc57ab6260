//! A small synchronous rtnetlink client: dump links, addresses, routes and
//! rules; add and delete routes. One socket per network namespace; the
//! socket is bound to the namespace it was created in, so the caller opens
//! it before switching namespaces or confining itself.

use ipnet::Ipv4Net;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::net::{IpAddr, Ipv4Addr};

use lazaret_netpolicy::policy::{RouteSpec, HOST_RULE_PRIORITY, HOST_TABLE};

#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("cannot open a NETLINK_ROUTE socket: {0}; the helper must run in the enforcement network namespace with CAP_NET_ADMIN there")]
    Open(std::io::Error),
    #[error("netlink i/o during {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("netlink answer to {what} does not decode: {detail}")]
    Decode { what: String, detail: String },
    #[error("the kernel refused {what}: {source}")]
    Refused {
        what: String,
        source: std::io::Error,
    },
    #[error("interface {0} does not exist in the enforcement namespace; start slirp4netns (A) with --configure on it first")]
    NoInterface(String),
}

/// A NETLINK_ROUTE socket bound to the namespace it was opened in.
pub struct Rtnl {
    sock: Socket,
    seq: u32,
}

pub use lazaret_protocol::netreport::{ObservedRoute, ObservedRule};

fn io_err(what: &str) -> impl FnOnce(std::io::Error) -> NetlinkError + '_ {
    move |source| NetlinkError::Io {
        what: what.to_string(),
        source,
    }
}

impl Rtnl {
    /// Opens a socket in the calling thread's current network namespace.
    pub fn open() -> Result<Rtnl, NetlinkError> {
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(NetlinkError::Open)?;
        sock.bind_auto().map_err(NetlinkError::Open)?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(NetlinkError::Open)?;
        Ok(Rtnl { sock, seq: 0 })
    }

    /// Sends one request and collects the answers: every inner message of a
    /// dump, or nothing for an acknowledged change.
    pub fn request(
        &mut self,
        what: &str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let mut hdr = NetlinkHeader::default();
        hdr.flags = NLM_F_REQUEST | flags;
        hdr.sequence_number = self.seq;
        let mut req = NetlinkMessage::new(hdr, NetlinkPayload::from(msg));
        req.finalize();
        let mut buf = vec![0u8; req.header.length as usize];
        req.serialize(&mut buf);
        self.sock.send(&buf, 0).map_err(io_err(what))?;

        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut out = Vec::new();
        loop {
            let (data, _) = self.sock.recv_from_full().map_err(io_err(what))?;
            let mut off = 0;
            while off < data.len() {
                let msg: NetlinkMessage<RouteNetlinkMessage> =
                    NetlinkMessage::deserialize(&data[off..]).map_err(|e| {
                        NetlinkError::Decode {
                            what: what.to_string(),
                            detail: e.to_string(),
                        }
                    })?;
                let len = msg.header.length as usize;
                if msg.header.sequence_number != self.seq {
                    // A stale answer to an earlier request: skip it.
                } else {
                    match msg.payload {
                        NetlinkPayload::Done(_) => return Ok(out),
                        NetlinkPayload::Error(e) => match e.code {
                            None if !dump => return Ok(out),
                            None => {}
                            Some(code) => {
                                return Err(NetlinkError::Refused {
                                    what: what.to_string(),
                                    source: std::io::Error::from_raw_os_error(-code.get()),
                                })
                            }
                        },
                        NetlinkPayload::InnerMessage(m) => out.push(m),
                        _ => {}
                    }
                }
                if len == 0 {
                    break;
                }
                off += (len + 3) & !3;
            }
        }
    }

    /// `(ifindex, name)` of every link.
    pub fn links(&mut self) -> Result<Vec<(u32, String)>, NetlinkError> {
        let msgs = self.request(
            "link dump",
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            NLM_F_DUMP,
        )?;
        let mut out = Vec::new();
        for m in msgs {
            if let RouteNetlinkMessage::NewLink(l) = m {
                let name = l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                });
                out.push((l.header.index, name.unwrap_or_default()));
            }
        }
        out.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(out)
    }

    pub fn ifindex(&mut self, name: &str) -> Result<u32, NetlinkError> {
        self.links()?
            .into_iter()
            .find(|(_, n)| n == name)
            .map(|(i, _)| i)
            .ok_or_else(|| NetlinkError::NoInterface(name.to_string()))
    }

    /// Addresses of one family as `dev addr/len`, sorted.
    pub fn addresses(&mut self, family: AddressFamily) -> Result<Vec<String>, NetlinkError> {
        let links = self.links()?;
        let mut req = AddressMessage::default();
        req.header.family = family;
        let msgs = self.request(
            "address dump",
            RouteNetlinkMessage::GetAddress(req),
            NLM_F_DUMP,
        )?;
        let mut out = Vec::new();
        for m in msgs {
            if let RouteNetlinkMessage::NewAddress(a) = m {
                if a.header.family != family {
                    continue;
                }
                let dev = name_of(&links, a.header.index);
                let addr = a.attributes.iter().find_map(|x| match x {
                    AddressAttribute::Local(ip) => Some(*ip),
                    _ => None,
                });
                let addr = addr.or_else(|| {
                    a.attributes.iter().find_map(|x| match x {
                        AddressAttribute::Address(ip) => Some(*ip),
                        _ => None,
                    })
                });
                if let Some(ip) = addr {
                    out.push(format!("{dev} {ip}/{}", a.header.prefix_len));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Raw route messages of one family, every table.
    fn route_msgs(&mut self, family: AddressFamily) -> Result<Vec<RouteMessage>, NetlinkError> {
        let mut req = RouteMessage::default();
        req.header.address_family = family;
        let msgs = self.request("route dump", RouteNetlinkMessage::GetRoute(req), NLM_F_DUMP)?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) if r.header.address_family == family => Some(r),
                _ => None,
            })
            .collect())
    }

    /// Every route of one family in every table, normalised and sorted.
    pub fn routes(&mut self, family: AddressFamily) -> Result<Vec<ObservedRoute>, NetlinkError> {
        let links = self.links()?;
        let mut out: Vec<ObservedRoute> = self
            .route_msgs(family)?
            .iter()
            .map(|r| normalise_route(r, &links))
            .collect();
        out.sort();
        Ok(out)
    }

    /// Policy-routing rules of one family, normalised, in priority order.
    pub fn rules(&mut self, family: AddressFamily) -> Result<Vec<ObservedRule>, NetlinkError> {
        let mut req = RuleMessage::default();
        req.header.family = family;
        let msgs = self.request("rule dump", RouteNetlinkMessage::GetRule(req), NLM_F_DUMP)?;
        let mut out = Vec::new();
        for m in msgs {
            if let RouteNetlinkMessage::NewRule(r) = m {
                if r.header.family != family {
                    continue;
                }
                let mut priority = 0;
                let mut table = u32::from(r.header.table);
                let mut selectors = Vec::new();
                if r.header.src_len != 0 || r.header.dst_len != 0 || r.header.tos != 0 {
                    selectors.push(format!(
                        "src_len={} dst_len={} tos={}",
                        r.header.src_len, r.header.dst_len, r.header.tos
                    ));
                }
                for a in &r.attributes {
                    match a {
                        RuleAttribute::Priority(p) => priority = *p,
                        RuleAttribute::Table(t) => table = *t,
                        RuleAttribute::Protocol(_) => {}
                        // u32::MAX is the kernel's "not set" for these.
                        RuleAttribute::SuppressPrefixLen(u32::MAX)
                        | RuleAttribute::SuppressIfGroup(u32::MAX) => {}
                        other => selectors.push(format!("{other:?}")),
                    }
                }
                out.push(ObservedRule {
                    priority,
                    table,
                    action: format!("{:?}", r.header.action).to_lowercase(),
                    selectors,
                });
            }
        }
        out.sort();
        Ok(out)
    }

    /// Deletes every IPv4 route of the main table except the device route
    /// of `keep_dev` for `keep_prefix` (the kernel's, from the address).
    pub fn flush_main_v4(
        &mut self,
        keep_prefix: Ipv4Net,
        keep_dev: u32,
    ) -> Result<usize, NetlinkError> {
        let mut n = 0;
        for r in self.route_msgs(AddressFamily::Inet)? {
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
            self.request(&what, RouteNetlinkMessage::DelRoute(del), NLM_F_ACK)?;
            n += 1;
        }
        Ok(n)
    }

    /// Adds one route of the main table (`Device` routes are the kernel's
    /// and are skipped).
    pub fn add_route(&mut self, spec: &RouteSpec, ifindex: u32) -> Result<(), NetlinkError> {
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
        self.request(
            &format!("adding route `{spec}`"),
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        )?;
        Ok(())
    }
}

impl Rtnl {
    /// Adds the watcher's rule `lookup 75` at [`HOST_RULE_PRIORITY`]
    /// (already there: nothing to do).
    pub fn host_table_rule(&mut self) -> Result<(), NetlinkError> {
        let mut m = RuleMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.action = RuleAction::ToTable;
        m.attributes
            .push(RuleAttribute::Priority(HOST_RULE_PRIORITY));
        m.attributes.push(RuleAttribute::Table(HOST_TABLE));
        existing_is_fine(self.request(
            &format!("adding rule `lookup {HOST_TABLE}` (priority {HOST_RULE_PRIORITY})"),
            RouteNetlinkMessage::NewRule(m),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        ))
    }

    /// Adds the watcher's denial `unreachable ADDR/32` in [`HOST_TABLE`]
    /// (connect fails with EHOSTUNREACH, as for the policy's denials).
    pub fn host_route(&mut self, addr: Ipv4Addr) -> Result<(), NetlinkError> {
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
        existing_is_fine(self.request(
            &format!("adding route `unreachable {addr}/32 table {HOST_TABLE}`"),
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        ))
    }

    /// The addresses the watcher denied (its routes in [`HOST_TABLE`]):
    /// the host's, gained after the policy was derived. The filtering
    /// resolver never routes them.
    pub fn host_denials(&mut self) -> Result<std::collections::BTreeSet<Ipv4Addr>, NetlinkError> {
        Ok(self
            .routes(AddressFamily::Inet)?
            .iter()
            .filter(|r| r.table == HOST_TABLE)
            .filter_map(host_of)
            .collect())
    }
}

/// An exclusive add whose entry is there already: done.
pub fn existing_is_fine(
    r: Result<Vec<RouteNetlinkMessage>, NetlinkError>,
) -> Result<(), NetlinkError> {
    match r {
        Err(NetlinkError::Refused { source, .. })
            if source.raw_os_error() == Some(libc::EEXIST) =>
        {
            Ok(())
        }
        other => other.map(drop),
    }
}

/// The address of a normalised `ADDR/32` route.
pub fn host_of(r: &ObservedRoute) -> Option<Ipv4Addr> {
    r.dst.strip_suffix("/32")?.parse().ok()
}

fn name_of(links: &[(u32, String)], index: u32) -> String {
    links
        .iter()
        .find(|(i, _)| *i == index)
        .map(|(_, n)| n.clone())
        .unwrap_or_else(|| format!("if{index}"))
}

fn table_of(r: &RouteMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table))
}

fn dst_of(r: &RouteMessage) -> Option<Ipv4Net> {
    let addr = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Destination(RouteAddress::Inet(a)) => Some(*a),
            _ => None,
        })
        .unwrap_or(Ipv4Addr::UNSPECIFIED);
    Ipv4Net::new(addr, r.header.destination_prefix_length).ok()
}

fn addr_str(a: &RouteAddress) -> String {
    match a {
        RouteAddress::Inet(v4) => v4.to_string(),
        RouteAddress::Inet6(v6) => v6.to_string(),
        other => format!("{other:?}"),
    }
}

fn normalise_route(r: &RouteMessage, links: &[(u32, String)]) -> ObservedRoute {
    let mut o = ObservedRoute {
        table: table_of(r),
        dst: String::new(),
        kind: format!("{:?}", r.header.kind).to_lowercase(),
        gateway: None,
        dev: None,
        scope: u8::from(r.header.scope),
        protocol: u8::from(r.header.protocol),
        onlink: r.header.flags.contains(RouteFlags::Onlink),
        priority: None,
        prefsrc: None,
        unusual: Vec::new(),
    };
    let mut dst: Option<IpAddr> = None;
    for a in &r.attributes {
        match a {
            RouteAttribute::Destination(d) => {
                dst = match d {
                    RouteAddress::Inet(v) => Some(IpAddr::V4(*v)),
                    RouteAddress::Inet6(v) => Some(IpAddr::V6(*v)),
                    _ => None,
                }
            }
            RouteAttribute::Gateway(g) => o.gateway = Some(addr_str(g)),
            RouteAttribute::Oif(i) => o.dev = Some(name_of(links, *i)),
            RouteAttribute::Priority(p) => o.priority = Some(*p),
            RouteAttribute::PrefSource(s) => o.prefsrc = Some(addr_str(s)),
            RouteAttribute::Table(_)
            | RouteAttribute::CacheInfo(_)
            | RouteAttribute::Preference(_)
            | RouteAttribute::Metrics(_) => {}
            other => o.unusual.push(format!("{other:?}")),
        }
    }
    let dst = dst.unwrap_or(match r.header.address_family {
        AddressFamily::Inet6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    });
    o.dst = format!("{dst}/{}", r.header.destination_prefix_length);
    o
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
