//! `lazaret-netpolicy watch`: keeps "no host service is reachable" true
//! while the Domain runs. The policy denies every address the host had
//! when it was derived; this process denies each address the host gains
//! afterwards (DHCP, a VPN, an interface brought up), as the route
//! `unreachable ADDR/32` in table 75 of the enforcement namespace
//! ([`lazaret_protocol::netpolicy::policy::HOST_TABLE`]), which the rule `lookup 75`
//! ([`lazaret_protocol::netpolicy::policy::HOST_RULE_PRIORITY`], added with the
//! first) looks up before the filtering resolver's port rules and the
//! main table, so nothing there can reach it (and a connection fails with
//! "no route", EHOSTUNREACH, as for the policy's own denials).
//!
//! Why this binary, and why so little: it is the one that writes the
//! policy into the enforcement namespace already, and attestation (also
//! here) is what says which rules at that priority are acceptable. The
//! watch process gets less than `install` does: no sandbox namespace, no
//! sysctl files, no TCP, and no socket of its own after confining. It
//! learns the host's addresses through a NETLINK_ROUTE socket of the
//! host's namespace that the supervisor (as the developer, no capability
//! there) bound to the IPv4 address group before the holder existed: the
//! kernel checks changes against the socket's namespace, where this
//! process holds nothing, so through it it can only read. It never reads
//! anything the sandbox sends.
//!
//! Order, in [`run`]: sanitise the fds, read the policy, open the
//! enforcement namespace's netlink socket, confine
//! (`lazaret-netpolicy-watch`), then dump the host's addresses and deny
//! those the policy does not decide (the socket was subscribed before the
//! dump, so nothing added meanwhile is missed), print `ready`, and serve
//! notifications until killed. Addresses the host loses stay denied.
//! Lost notifications (`ENOBUFS`) start a new dump. Any failure exits,
//! and the holder then stops the Domain.

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::collections::BTreeSet;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use crate::helper::{exit, read_policy, Failure};
use crate::routes::{host_route, host_table_rule};
use lazaret_netlink::rtnl::{NetlinkError, Rtnl};
use lazaret_protocol::netpolicy::hostlog::{self, HostEvent};
use lazaret_protocol::netpolicy::log::{now_ms, BoundedLog};
use lazaret_protocol::netpolicy::policy::{HostAddress, Policy, MAX_HOST_ADDRESSES};

/// The confinement's name (`bin/netpolicy/src/lazaret-netpolicy-watch.json`).
pub const CONFINEMENT: &str = "lazaret-netpolicy-watch";
/// Exit code: the watch failed while serving (the Domain stops).
pub const WATCH_FAILED: i32 = 7;
/// New dumps after lost notifications, in a row, before giving up.
const MAX_RESYNCS: u32 = 16;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    #[error("the host netlink socket: {0}")]
    Host(std::io::Error),
    #[error("a message of the host netlink socket does not decode: {0}")]
    Decode(#[from] netlink_packet_core::DecodeError),
    #[error("the kernel refused the host address dump: {0}")]
    Refused(std::io::Error),
    #[error("{MAX_HOST_ADDRESSES} host addresses are denied already; {0} cannot be, so the Domain stops")]
    Full(Ipv4Addr),
    #[error("notifications were lost {MAX_RESYNCS} times in a row")]
    Overrun,
}

/// What one datagram of the host socket says.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// An IPv4 address the host has (from the dump or a notification).
    Address(HostAddress),
    /// The dump with this sequence number is complete.
    DumpDone(u32),
    /// The request with this sequence number was refused (errno).
    Refused(u32, i32),
}

/// Decodes one datagram: IPv4 `RTM_NEWADDR` (dump answers and
/// notifications alike, whatever their sequence number: handling an
/// address twice changes nothing), the end of a dump, errors. Pure.
pub fn parse(data: &[u8]) -> Result<Vec<Seen>, netlink_packet_core::DecodeError> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let msg: NetlinkMessage<RouteNetlinkMessage> = NetlinkMessage::deserialize(&data[off..])?;
        let len = msg.header.length as usize;
        let seq = msg.header.sequence_number;
        match msg.payload {
            NetlinkPayload::Done(_) => out.push(Seen::DumpDone(seq)),
            NetlinkPayload::Error(e) => {
                if let Some(code) = e.code {
                    out.push(Seen::Refused(seq, -code.get()));
                }
            }
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) => {
                out.extend(address_of(&a).map(Seen::Address));
            }
            _ => {}
        }
        if len == 0 {
            break;
        }
        off += (len + 3) & !3;
    }
    Ok(out)
}

fn address_of(a: &AddressMessage) -> Option<HostAddress> {
    if a.header.family != AddressFamily::Inet {
        return None;
    }
    let ip = |want_local: bool| {
        a.attributes.iter().find_map(|x| match x {
            AddressAttribute::Local(IpAddr::V4(v)) if want_local => Some(*v),
            AddressAttribute::Address(IpAddr::V4(v)) if !want_local => Some(*v),
            _ => None,
        })
    };
    let address = ip(true).or_else(|| ip(false))?;
    let ifname = a
        .attributes
        .iter()
        .find_map(|x| match x {
            AddressAttribute::Label(l) => Some(l.clone()),
            _ => None,
        })
        .unwrap_or_else(|| format!("if{}", a.header.index));
    Some(HostAddress { address, ifname })
}

/// The request for a dump of the host's IPv4 addresses.
fn dump_request(seq: u32) -> Vec<u8> {
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST | NLM_F_DUMP;
    hdr.sequence_number = seq;
    let mut req = AddressMessage::default();
    req.header.family = AddressFamily::Inet;
    let mut msg = NetlinkMessage::new(
        hdr,
        NetlinkPayload::from(RouteNetlinkMessage::GetAddress(req)),
    );
    msg.finalize();
    let mut buf = vec![0u8; msg.header.length as usize];
    msg.serialize(&mut buf);
    buf
}

/// Everything the watch holds; opened before confinement.
pub struct Watcher {
    policy: Policy,
    enforcement: Rtnl,
    host: netlink_sys::Socket,
    seq: u32,
    denied: BTreeSet<Ipv4Addr>,
    /// Whether the rule `lookup 75` is in.
    table_rule: bool,
    log: BoundedLog,
}

impl Watcher {
    /// Denies `h` unless the policy decides it or it is denied already.
    fn consider(&mut self, h: HostAddress) -> Result<(), WatchError> {
        if self.denied.contains(&h.address) || !self.policy.watch_may_deny(h.address) {
            return Ok(());
        }
        if self.denied.len() >= MAX_HOST_ADDRESSES {
            return Err(WatchError::Full(h.address));
        }
        // The route first: the table is looked up only once the rule is in.
        host_route(&mut self.enforcement, h.address)?;
        if !self.table_rule {
            host_table_rule(&mut self.enforcement)?;
            self.table_rule = true;
        }
        self.denied.insert(h.address);
        self.log.write(
            &HostEvent::Denied {
                time_ms: now_ms(),
                address: h.address,
                ifname: h.ifname,
            },
            || HostEvent::LogFull { time_ms: now_ms() },
        );
        Ok(())
    }

    /// One datagram; returns the sequence number of a dump it ended.
    fn receive(&mut self) -> Result<Option<u32>, WatchError> {
        let (data, _) = self.host.recv_from_full().map_err(WatchError::Host)?;
        let mut done = None;
        for seen in parse(&data)? {
            match seen {
                Seen::Address(h) => self.consider(h)?,
                Seen::DumpDone(seq) => done = Some(seq),
                Seen::Refused(seq, errno) if seq == self.seq => {
                    return Err(WatchError::Refused(std::io::Error::from_raw_os_error(
                        errno,
                    )))
                }
                Seen::Refused(..) => {}
            }
        }
        Ok(done)
    }

    /// Dumps the host's addresses and considers each, until the dump
    /// ended; lost notifications start it again.
    fn resync(&mut self) -> Result<(), WatchError> {
        for _ in 0..MAX_RESYNCS {
            self.seq = self.seq.wrapping_add(1);
            let kernel = netlink_sys::SocketAddr::new(0, 0);
            self.host
                .send_to(&dump_request(self.seq), &kernel, 0)
                .map_err(WatchError::Host)?;
            loop {
                match self.receive() {
                    Ok(Some(seq)) if seq == self.seq => return Ok(()),
                    Ok(_) => {}
                    Err(WatchError::Host(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        Err(WatchError::Overrun)
    }

    /// Notifications until something fails.
    fn serve(&mut self) -> WatchError {
        loop {
            match self.receive() {
                Ok(_) => {}
                Err(WatchError::Host(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    if let Err(e) = self.resync() {
                        return e;
                    }
                }
                Err(e) => return e,
            }
        }
    }
}

/// What the holder passes (`--policy-fd`, `--host-netlink-fd`, `--log-fd`).
#[derive(Debug, Clone)]
pub struct WatchRequest {
    pub digest: String,
    pub policy_fd: RawFd,
    pub host_fd: RawFd,
    pub log_fd: RawFd,
}

fn fail(code: i32, stage: &'static str) -> impl FnOnce(String) -> Failure {
    move |message| Failure {
        code,
        stage,
        message,
    }
}

/// Runs the watch; returns only when it failed. Call from `main` only,
/// single-threaded.
pub fn run(req: &WatchRequest) -> Failure {
    let mut w = match start(req) {
        Ok(w) => w,
        Err(f) => return f,
    };
    let mut out = std::io::stdout();
    let _ = out
        .write_all(lazaret_protocol::readiness::READY_LINE)
        .and_then(|_| out.flush());
    let e = w.serve();
    w.log.write(
        &HostEvent::Failed {
            time_ms: now_ms(),
            message: e.to_string(),
        },
        || HostEvent::LogFull { time_ms: now_ms() },
    );
    fail(WATCH_FAILED, "watch")(e.to_string())
}

/// Everything up to the first complete dump, confined.
fn start(req: &WatchRequest) -> Result<Watcher, Failure> {
    let fds = [req.policy_fd, req.host_fd, req.log_fd];
    if fds.iter().any(|f| *f < 3) || fds[0] == fds[1] || fds[1] == fds[2] || fds[0] == fds[2] {
        return Err(fail(exit::BAD_INPUT, "arguments")(
            "--policy-fd, --host-netlink-fd and --log-fd must be distinct and at least 3".into(),
        ));
    }
    lazaret_seccomp::process::close_inherited_fds(&fds)
        .map_err(|e| fail(exit::BAD_INPUT, "sanitise")(e.to_string()))?;
    let inherited = |fd: RawFd, what: &str| {
        lazaret_helpers::fds::inherited(fd)
            .map_err(|e| fail(exit::BAD_INPUT, "fds")(format!("no {what} on fd {fd}: {e}")))
    };
    let policy_fd = inherited(req.policy_fd, "policy memfd")?;
    let host_fd = inherited(req.host_fd, "host netlink socket")?;
    let log_fd = inherited(req.log_fd, "log")?;
    let filters = lazaret_seccomp::filters(crate::policies::POLICIES, CONFINEMENT)
        .map_err(|e| fail(exit::CONFINE_FAILED, "seccomp")(e.to_string()))?;
    let policy = read_policy(&policy_fd, &req.digest)?;
    drop(policy_fd);
    let host = host_socket(host_fd)?;
    let enforcement =
        Rtnl::open().map_err(|e| fail(exit::INSTALL_FAILED, "open handles")(e.to_string()))?;
    crate::confinement::netpolicy_watch()
        .apply(&[], &filters)
        .map_err(|e| fail(exit::CONFINE_FAILED, crate::confine::stage(&e))(e.to_string()))?;
    let mut log = BoundedLog::new(std::fs::File::from(log_fd), hostlog::MAX_BYTES);
    log.write(
        &HostEvent::Started {
            time_ms: now_ms(),
            generation: policy.binding.clone(),
        },
        || HostEvent::LogFull { time_ms: now_ms() },
    );
    let mut w = Watcher {
        policy,
        enforcement,
        host,
        seq: 0,
        denied: BTreeSet::new(),
        table_rule: false,
        log,
    };
    w.resync()
        .map_err(|e| fail(exit::INSTALL_FAILED, "host addresses")(e.to_string()))?;
    Ok(w)
}

/// The inherited socket, checked to be a NETLINK_ROUTE one.
fn host_socket(fd: OwnedFd) -> Result<netlink_sys::Socket, Failure> {
    let bad = |m: String| fail(exit::BAD_INPUT, "host netlink socket")(m);
    let domain = rustix::net::sockopt::socket_domain(fd.as_fd()).map_err(|e| bad(e.to_string()))?;
    let proto =
        rustix::net::sockopt::socket_protocol(fd.as_fd()).map_err(|e| bad(e.to_string()))?;
    if domain != rustix::net::AddressFamily::NETLINK || proto.is_some() {
        return Err(bad(format!(
            "the host socket is not a NETLINK_ROUTE socket ({domain:?}, {proto:?})"
        )));
    }
    // SAFETY: the descriptor is ours (taken from `fd`, which is consumed)
    // and is a netlink socket, as checked.
    Ok(unsafe { netlink_sys::Socket::from_raw_fd(fd.into_raw_fd()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{DoneMessage, ErrorMessage};

    fn datagram(msgs: Vec<(u32, NetlinkPayload<RouteNetlinkMessage>)>) -> Vec<u8> {
        let mut out = Vec::new();
        for (seq, payload) in msgs {
            let mut hdr = NetlinkHeader::default();
            hdr.sequence_number = seq;
            let mut m = NetlinkMessage::new(hdr, payload);
            m.finalize();
            let mut buf = vec![0u8; m.header.length as usize];
            m.serialize(&mut buf);
            buf.resize((buf.len() + 3) & !3, 0);
            out.extend(buf);
        }
        out
    }

    fn addr(family: AddressFamily, ip: IpAddr, label: Option<&str>) -> RouteNetlinkMessage {
        let mut a = AddressMessage::default();
        a.header.family = family;
        a.header.index = 7;
        a.attributes.push(AddressAttribute::Local(ip));
        a.attributes.push(AddressAttribute::Address(ip));
        if let Some(l) = label {
            a.attributes.push(AddressAttribute::Label(l.into()));
        }
        RouteNetlinkMessage::NewAddress(a)
    }

    #[test]
    fn dumps_and_notifications_give_the_hosts_ipv4_addresses() {
        let v4: IpAddr = "203.0.113.77".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let mut err = ErrorMessage::default();
        err.code = std::num::NonZeroI32::new(-libc::EPERM);
        let data = datagram(vec![
            (
                0,
                NetlinkPayload::InnerMessage(addr(AddressFamily::Inet, v4, Some("eth0"))),
            ),
            (
                3,
                NetlinkPayload::InnerMessage(addr(AddressFamily::Inet6, v6, None)),
            ),
            (
                3,
                NetlinkPayload::InnerMessage(addr(AddressFamily::Inet, v4, None)),
            ),
            (3, NetlinkPayload::Done(DoneMessage::default())),
            (4, NetlinkPayload::Error(err)),
        ]);
        let a = |ifname: &str| {
            Seen::Address(HostAddress {
                address: "203.0.113.77".parse().unwrap(),
                ifname: ifname.into(),
            })
        };
        assert_eq!(
            parse(&data).unwrap(),
            vec![
                a("eth0"),
                a("if7"),
                Seen::DumpDone(3),
                Seen::Refused(4, libc::EPERM)
            ]
        );
        assert!(parse(b"\x10\0\0\0garbage").is_err());
    }
}
