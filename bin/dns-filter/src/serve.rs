//! The filter's loop: queries from slirp4netns B's forwarder (the
//! sandbox's only resolver) on the listening socket, answers from the
//! upstream (slirp4netns A's forwarder, the host's resolver) on the other.
//!
//! Order for an allowed name: forward, check the answer's CNAME chain,
//! route its addresses (the kernel acknowledged them), then answer; so
//! the sandbox never holds an address it cannot reach yet, nor one of a
//! name it may not use.

use std::collections::HashMap;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::unix::fs::FileExt;

use crate::grants::{Change, Grants};
use crate::inuse;
use crate::routes::{dns_port_rule, dns_route};
use lazaret_netlink::Rtnl;
use lazaret_protocol::netpolicy::dnslog::{self, DnsEvent};
use lazaret_protocol::netpolicy::hosts::AllowHosts;
use lazaret_protocol::netpolicy::judge::{
    self as hosts, AnswerVerdict, QueryVerdict, ResponseCode,
};
pub use lazaret_protocol::netpolicy::log::now_ms;
use lazaret_protocol::netpolicy::log::BoundedLog;
use lazaret_protocol::netpolicy::policy::{HostsPlan, Policy, Verdict, DNS_PORT_TABLE};

/// Queries waiting for the upstream, at most.
const MAX_PENDING: usize = 256;
/// An upstream answer later than this is dropped (the client retries).
const PENDING_MS: u64 = 5_000;
/// Datagrams taken per socket per wake-up, so neither starves the other.
const BATCH: usize = 64;
/// Addresses routed per answer, at most: the rest of a longer answer is
/// passed on but not routed (its owner cannot fill the table in one go).
const MAX_PER_ANSWER: usize = 64;
/// Largest `/proc/self/net/tcp` read.
const MAX_TCP_TABLE: usize = 4 << 20;
const MAIN_TABLE: u32 = 254;

struct Pending {
    client: SocketAddr,
    id: [u8; 2],
    name: String,
    qtype: String,
    query: Vec<u8>,
    deadline_ms: u64,
}

/// The log: append-only, bounded by [`dnslog::MAX_BYTES`].
pub struct Log(BoundedLog);

impl Log {
    pub fn new(file: File) -> Log {
        Log(BoundedLog::new(file, dnslog::MAX_BYTES))
    }

    pub fn write(&mut self, e: &DnsEvent) {
        self.0.write(e, || DnsEvent::LogFull { time_ms: now_ms() })
    }
}

/// Everything the loop holds; opened before confinement.
pub struct Filter {
    pub policy: Policy,
    pub hosts: HostsPlan,
    pub allow: AllowHosts,
    pub listen: UdpSocket,
    pub upstream: UdpSocket,
    /// The resolvers, asked in turn (a client's retry goes to the next).
    upstreams: Vec<SocketAddrV4>,
    next_upstream: usize,
    pub rtnl: Rtnl,
    pub ifindex: u32,
    pub tcp: File,
    pub log: Log,
    port_table_ready: bool,
    grants: Grants,
    pending: HashMap<[u8; 2], Pending>,
}

impl Filter {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        policy: Policy,
        hosts: HostsPlan,
        allow: AllowHosts,
        listen: UdpSocket,
        upstream: UdpSocket,
        rtnl: Rtnl,
        ifindex: u32,
        tcp: File,
        log: Log,
    ) -> Filter {
        let upstreams = hosts
            .upstream
            .iter()
            .map(|u| SocketAddrV4::new(*u, 53))
            .collect();
        Filter {
            policy,
            hosts,
            allow,
            listen,
            upstream,
            upstreams,
            next_upstream: 0,
            rtnl,
            ifindex,
            tcp,
            log,
            port_table_ready: false,
            grants: Grants::default(),
            pending: HashMap::new(),
        }
    }

    /// Serves until a socket fails.
    pub fn serve(&mut self) -> std::io::Result<()> {
        use rustix::event::{poll, PollFd, PollFlags};
        self.listen.set_nonblocking(true)?;
        self.upstream.set_nonblocking(true)?;
        let mut buf = vec![0u8; 65_535];
        loop {
            let now = now_ms();
            let wait = self
                .grants
                .next_expiry()
                .map_or(1_000, |t| t.saturating_sub(now).clamp(10, 1_000));
            let (q, a) = {
                let mut fds = [
                    PollFd::new(&self.listen, PollFlags::IN),
                    PollFd::new(&self.upstream, PollFlags::IN),
                ];
                let timeout = rustix::event::Timespec {
                    tv_sec: (wait / 1000) as i64,
                    tv_nsec: ((wait % 1000) * 1_000_000) as i64,
                };
                match poll(&mut fds, Some(&timeout)) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
                (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
            };
            if q {
                for _ in 0..BATCH {
                    match self.listen.recv_from(&mut buf) {
                        Ok((n, from)) => {
                            let query = buf[..n].to_vec();
                            self.on_query(&query, from);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            if a {
                for _ in 0..BATCH {
                    match self.upstream.recv_from(&mut buf) {
                        Ok((n, from)) => {
                            let answer = buf[..n].to_vec();
                            self.on_answer(answer, from);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        // An ICMP error of an earlier send (upstream down):
                        // the client times out and retries.
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            let now = now_ms();
            self.pending.retain(|_, p| p.deadline_ms > now);
            self.expire(now);
        }
    }

    fn answer(&self, bytes: &[u8], to: SocketAddr) {
        let _ = self.listen.send_to(bytes, to);
    }

    fn on_query(&mut self, query: &[u8], client: SocketAddr) {
        match hosts::judge_query(&self.allow, query) {
            QueryVerdict::Drop { .. } => {}
            QueryVerdict::Refuse { name, response } => {
                self.answer(&response, client);
                let time_ms = now_ms();
                // The probe's name carries nothing (it is the policy's);
                // told apart so that it does not read as the sandbox's.
                if name
                    == lazaret_protocol::netpolicy::hosts::normalize(&self.policy.probe.dns_name)
                {
                    self.log.write(&DnsEvent::ProbeRefused { time_ms, name });
                    return;
                }
                let qtype = hosts::question(query).map(|q| q.1).unwrap_or_default();
                self.log.write(&DnsEvent::Refused {
                    time_ms,
                    name,
                    qtype,
                    cname: None,
                });
            }
            QueryVerdict::Forward { name } => {
                if self.pending.len() >= MAX_PENDING {
                    if let Some(r) = hosts::answer_with(query, ResponseCode::ServFail) {
                        self.answer(&r, client);
                    }
                    return;
                }
                let mut id = [0u8; 2];
                loop {
                    if getrandom::getrandom(&mut id).is_err() {
                        return;
                    }
                    if !self.pending.contains_key(&id) {
                        break;
                    }
                }
                let mut out = query.to_vec();
                let orig = [out[0], out[1]];
                out[..2].copy_from_slice(&id);
                let qtype = hosts::question(query).map(|q| q.1).unwrap_or_default();
                let to = self.upstreams[self.next_upstream % self.upstreams.len()];
                self.next_upstream = self.next_upstream.wrapping_add(1);
                if self.upstream.send_to(&out, to).is_ok() {
                    self.pending.insert(
                        id,
                        Pending {
                            client,
                            id: orig,
                            name,
                            qtype,
                            query: query.to_vec(),
                            deadline_ms: now_ms() + PENDING_MS,
                        },
                    );
                }
            }
        }
    }

    fn on_answer(&mut self, mut answer: Vec<u8>, from: SocketAddr) {
        let SocketAddr::V4(from) = from else { return };
        if !self.upstreams.contains(&from) || answer.len() < 12 {
            return;
        }
        let Some(p) = self.pending.remove(&[answer[0], answer[1]]) else {
            return;
        };
        // The answer must be to the question asked.
        if hosts::question(&answer).map(|q| q.0) != Some(p.name.clone()) {
            return;
        }
        let now = now_ms();
        let fail = |f: &mut Filter, message: String| {
            f.log.write(&DnsEvent::Failed {
                time_ms: now,
                message,
            });
            if let Some(r) = hosts::answer_with(&p.query, ResponseCode::ServFail) {
                f.answer(&r, p.client);
            }
        };
        let addresses = match hosts::judge_answer(&self.allow, &p.name, &answer) {
            Err(e) => {
                return fail(
                    self,
                    format!("the answer for {:?} does not decode: {e}", p.name),
                )
            }
            Ok(AnswerVerdict::Refuse { name }) => {
                if let Some(r) = hosts::answer_with(&p.query, ResponseCode::NXDomain) {
                    self.answer(&r, p.client);
                }
                self.log.write(&DnsEvent::Refused {
                    time_ms: now,
                    name: p.name.clone(),
                    qtype: p.qtype.clone(),
                    cname: Some(name),
                });
                return;
            }
            Ok(AnswerVerdict::Accept { addresses }) => addresses,
        };
        if let Err(message) = self.route_addresses(&p, addresses, now) {
            return fail(self, message);
        }
        answer[..2].copy_from_slice(&p.id);
        self.answer(&answer, p.client);
    }

    /// Routes the accepted addresses of an answer to `p` (at most
    /// [`MAX_PER_ANSWER`], IPv4 only) for their clamped TTL, except those
    /// the policy allows anyway and those it denies, which are logged as
    /// refused. `Err`: why the answer fails (it is not passed on).
    fn route_addresses(
        &mut self,
        p: &Pending,
        addresses: Vec<(IpAddr, u32)>,
        now: u64,
    ) -> Result<(), String> {
        let ports = self.allow.ports(&p.name);
        // The host's addresses gained after the start (the watcher's
        // rules), read once per answer, only if one may be routed.
        let mut host_denied = None;
        for (ip, ttl) in addresses.into_iter().take(MAX_PER_ANSWER) {
            // IPv6 is off in both namespaces: AAAA answers route nothing.
            let IpAddr::V4(a) = ip else { continue };
            let d = self.policy.verdict_for(a);
            let refused = match (d.verdict, &d.origin) {
                (Verdict::Allow, _) => continue,
                // A private, link-local or `deny`-listed range, a host
                // address the policy lists, a `dns` upstream.
                (Verdict::Deny, Some(origin)) => {
                    Some(format!("{} is denied by {} ({origin})", a, d.prefix))
                }
                (Verdict::Deny, None) => {
                    if host_denied.is_none() {
                        match self.rtnl.host_denials() {
                            Ok(set) => host_denied = Some(set),
                            Err(e) => {
                                return Err(format!("cannot read the host-address denials: {e}"))
                            }
                        }
                    }
                    host_denied
                        .as_ref()
                        .is_some_and(|s| s.contains(&a))
                        .then(|| format!("{a} is an address of this host, gained after the start (denied by the host-address watcher)"))
                }
            };
            if let Some(why) = refused {
                self.log.write(&DnsEvent::AddressRefused {
                    time_ms: now,
                    name: p.name.clone(),
                    address: a,
                    why,
                });
                continue;
            }
            let ttl = ttl.clamp(self.hosts.ttl_floor, self.hosts.ttl_ceiling);
            let until = now + u64::from(ttl) * 1000;
            let changes = match self.grants.grant(a, ports.as_deref(), until) {
                Ok(c) => c,
                Err(e) => return Err(e.to_string()),
            };
            for c in changes {
                if let Err(e) = self.apply(c) {
                    return Err(format!("cannot route {a} for {:?}: {e}", p.name));
                }
            }
            self.log.write(&DnsEvent::Routed {
                time_ms: now,
                name: p.name.clone(),
                address: a,
                ports: ports.clone().unwrap_or_default(),
                expires_ms: until,
            });
        }
        Ok(())
    }

    fn apply(&mut self, c: Change) -> Result<(), lazaret_netlink::NetlinkError> {
        let gw = self.policy.link.gateway;
        let ifindex = self.ifindex;
        match c {
            Change::AddRoute(a) => {
                dns_route(&mut self.rtnl, MAIN_TABLE, Some(a), gw, ifindex, true)
            }
            Change::DelRoute(a) => {
                dns_route(&mut self.rtnl, MAIN_TABLE, Some(a), gw, ifindex, false)
            }
            Change::AddRules(a, port) => {
                if !self.port_table_ready {
                    dns_route(&mut self.rtnl, DNS_PORT_TABLE, None, gw, ifindex, true)?;
                    self.port_table_ready = true;
                }
                dns_port_rule(&mut self.rtnl, a, true, port, true)?;
                dns_port_rule(&mut self.rtnl, a, false, port, true)
            }
            Change::DelRules(a, port) => {
                dns_port_rule(&mut self.rtnl, a, true, port, false)?;
                dns_port_rule(&mut self.rtnl, a, false, port, false)
            }
        }
    }

    fn tcp_peers(&self) -> std::collections::BTreeSet<(Ipv4Addr, u16)> {
        let mut buf = vec![0u8; 64 << 10];
        let mut text = Vec::new();
        loop {
            match self.tcp.read_at(&mut buf, text.len() as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => text.extend_from_slice(&buf[..n]),
            }
            if text.len() > MAX_TCP_TABLE {
                break;
            }
        }
        inuse::remote_peers(&String::from_utf8_lossy(&text))
    }

    fn expire(&mut self, now: u64) {
        if self.grants.next_expiry().is_none_or(|t| t > now) {
            return;
        }
        let peers = self.tcp_peers();
        let extend = u64::from(self.hosts.ttl_floor) * 1000;
        let changes = self.grants.expire(now, extend, |a, port| {
            peers
                .iter()
                .any(|(pa, pp)| *pa == a && port.is_none_or(|p| p == *pp))
        });
        let mut touched = std::collections::BTreeSet::new();
        for c in changes {
            if let Err(e) = self.apply(c) {
                self.log.write(&DnsEvent::Failed {
                    time_ms: now,
                    message: format!("cannot remove an expired entry ({c:?}): {e}"),
                });
            }
            if let Change::DelRoute(a) | Change::DelRules(a, _) = c {
                touched.insert(a);
            }
        }
        for address in touched {
            if self.grants.is_gone(address) {
                self.log.write(&DnsEvent::Expired {
                    time_ms: now,
                    address,
                });
            }
        }
    }
}
