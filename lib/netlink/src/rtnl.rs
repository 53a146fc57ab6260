//! A small synchronous rtnetlink client: one request and its answers,
//! dumps of links, addresses, routes and rules, and the host denials both
//! helpers honour; each helper's writes are its own crate's. One socket
//! per network namespace; the socket is bound to the namespace it was
//! created in, so the caller opens it before switching namespaces or
//! confining itself.

use ipnet::Ipv4Net;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteFlags, RouteMessage};
use netlink_packet_route::rule::{RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::net::{IpAddr, Ipv4Addr};

use lazaret_protocol::netpolicy::policy::HOST_TABLE;

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
    pub fn route_msgs(&mut self, family: AddressFamily) -> Result<Vec<RouteMessage>, NetlinkError> {
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
}

impl Rtnl {
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

/// The table of a route message (its attribute, else its header's).
pub fn table_of(r: &RouteMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table))
}

/// The destination prefix of a route message.
pub fn dst_of(r: &RouteMessage) -> Option<Ipv4Net> {
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
