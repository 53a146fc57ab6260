//! `lazaret-egress`: the egress Pod of `lazaret export kubernetes`.
//!
//! In a cluster the agent Pod's NetworkPolicy lets it reach this Pod and
//! nothing else (all containers of a Pod share one gVisor kernel and
//! network stack, so no enforcer may live beside the agent). This Pod
//! serves the agent's two ways out, with the profile's policy as the
//! local Network Sidecar derives it (the ConfigMap's `policy.json`):
//!
//! - DNS (UDP and TCP port 53): with `allow_hosts`, a name no entry allows
//!   is answered NXDOMAIN here and never leaves, and an answer whose CNAME
//!   chain leaves the allowed names is replaced by NXDOMAIN, as
//!   `lazaret-dns-filter` does ([`lazaret_protocol::netpolicy::hosts`]); without,
//!   every name is forwarded. Upstream: this Pod's resolv.conf (the
//!   profile's `dns`, or the cluster's resolver).
//! - A forwarding proxy (HTTP `CONNECT host:port`, port 3128): a name must
//!   be allowed (and its port, `github.com:22`), and it connects only to
//!   the addresses of the name's answer the policy lets the sandbox reach
//!   ([`Policy::reachable`]); an address literal only where a rule or the
//!   default allows it. What it refuses, it answers 403 with the reason.
//!
//! The Pod's own NetworkPolicy fences it to the same addresses, so a bug
//! here does not widen what leaves the cluster.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use lazaret_protocol::netpolicy::hosts::{self, AllowHosts};
use lazaret_protocol::netpolicy::judge::{self, AnswerVerdict, QueryVerdict, ResponseCode};
use lazaret_protocol::netpolicy::policy::{Origin, Policy, Verdict, MAX_POLICY_BYTES};
use sha2::{Digest, Sha256};

/// How long one upstream may take to answer.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("cannot read the policy {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the policy {path} is larger than {MAX_POLICY_BYTES} bytes")]
    TooLarge { path: String },
    #[error("the policy's SHA-256 is {actual}, not the --digest given ({expected}): the ConfigMap and the Deployment come from different exports")]
    Digest { expected: String, actual: String },
    #[error("the policy does not parse: {0}")]
    Parse(String),
    #[error("the policy is refused: {0}")]
    Policy(#[from] lazaret_protocol::netpolicy::PolicyError),
    #[error("the policy's allow_hosts do not parse: {0}")]
    Hosts(#[from] hosts::HostError),
}

/// Why a `CONNECT` goes nowhere: the text of the 403 answer and of the
/// Pod's log line.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{address} is denied by {prefix}{}", origin.as_ref().map(|o| format!(" ({o})")).unwrap_or_default())]
    Denied {
        address: Ipv4Addr,
        prefix: ipnet::Ipv4Net,
        origin: Option<Origin>,
    },
    #[error("IPv6 is disabled in the sandbox")]
    Ipv6,
    #[error("{0:?} is not in allow_hosts")]
    NotAllowed(String),
    #[error("{name:?} is allowed on port(s) {ports:?} only")]
    Port { name: String, ports: Vec<u16> },
    #[error("{0:?} is not a domain name")]
    NotADomainName(String),
    #[error("no upstream answered for {0:?}")]
    NoAnswer(String),
    /// The upstream's answer does not decode.
    #[error(transparent)]
    Answer(#[from] hickory_proto::ProtoError),
    #[error("{name:?} resolves through {via:?}, not allowed")]
    Chain { name: String, via: String },
    #[error("no address of {name:?} may be reached ({addresses:?} answered)")]
    Unreachable {
        name: String,
        addresses: Vec<Ipv4Addr>,
    },
}

/// Why a request is no `CONNECT host:port HTTP/1.x` (answered 405).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadRequest {
    #[error("not an HTTP request")]
    NotHttp,
    #[error("only CONNECT is proxied (HTTPS, or any TCP through CONNECT), not {0}")]
    Method(String),
    #[error("CONNECT {0}: no port")]
    NoPort(String),
    #[error("CONNECT {0}: bad port")]
    BadPort(String),
    #[error("CONNECT {0}: no host")]
    NoHost(String),
}

/// The policy this Pod enforces, and where it resolves.
pub struct Egress {
    pub policy: Policy,
    /// `None`: no `allow_hosts`, every name resolves.
    pub allow: Option<AllowHosts>,
    pub upstream: Vec<SocketAddr>,
}

impl Egress {
    /// Reads `policy.json`, checks it against `digest` (the Deployment's
    /// argument: both come from one export) and its invariants.
    pub fn load(
        path: &std::path::Path,
        digest: &str,
        upstream: Vec<SocketAddr>,
    ) -> Result<Self, EgressError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| EgressError::Read {
            path: p.clone(),
            source,
        })?;
        if bytes.len() as u64 > MAX_POLICY_BYTES {
            return Err(EgressError::TooLarge { path: p });
        }
        let actual = hex::encode(Sha256::digest(&bytes));
        if !actual.eq_ignore_ascii_case(digest) {
            return Err(EgressError::Digest {
                expected: digest.into(),
                actual,
            });
        }
        let policy: Policy =
            serde_json::from_slice(&bytes).map_err(|e| EgressError::Parse(e.to_string()))?;
        Self::new(policy, upstream)
    }

    pub fn new(policy: Policy, upstream: Vec<SocketAddr>) -> Result<Self, EgressError> {
        policy.check_consistent()?;
        let allow = match &policy.hosts {
            Some(h) => Some(h.patterns()?),
            None => None,
        };
        Ok(Self {
            policy,
            allow,
            upstream,
        })
    }

    /// One DNS message from the agent: the bytes to answer with (`None`:
    /// dropped, as a malformed query is locally).
    pub fn dns(&self, query: &[u8]) -> (Option<Vec<u8>>, String) {
        let name = match &self.allow {
            Some(allow) => match judge::judge_query(allow, query) {
                QueryVerdict::Forward { name } => name,
                QueryVerdict::Refuse { name, response } => {
                    return (
                        Some(response),
                        format!("dns refused {name:?}: not in allow_hosts"),
                    )
                }
                QueryVerdict::Drop { why } => return (None, format!("dns dropped: {why}")),
            },
            None => match judge::question(query) {
                Some((name, _)) => name,
                None => return (None, "dns dropped: not a query".into()),
            },
        };
        let Some(answer) = self.forward(query) else {
            return (
                judge::answer_with(query, ResponseCode::ServFail),
                format!("dns {name:?}: no upstream answered"),
            );
        };
        if let Some(allow) = &self.allow {
            match judge::judge_answer(allow, &name, &answer) {
                Ok(AnswerVerdict::Accept { .. }) => {}
                Ok(AnswerVerdict::Refuse { name: via }) => {
                    return (
                        judge::answer_with(query, ResponseCode::NXDomain),
                        format!("dns refused {name:?}: its answer goes through {via:?}"),
                    )
                }
                Err(e) => {
                    return (
                        judge::answer_with(query, ResponseCode::ServFail),
                        format!("dns {name:?}: the answer does not decode: {e}"),
                    )
                }
            }
        }
        (Some(answer), format!("dns answered {name:?}"))
    }

    /// Asks each upstream in turn; the first answer to this query's ID.
    fn forward(&self, query: &[u8]) -> Option<Vec<u8>> {
        for u in &self.upstream {
            let Ok(sock) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) else {
                continue;
            };
            if sock.set_read_timeout(Some(UPSTREAM_TIMEOUT)).is_err()
                || sock.connect(u).is_err()
                || sock.send(query).is_err()
            {
                continue;
            }
            let mut buf = vec![0u8; 65535];
            while let Ok(n) = sock.recv(&mut buf) {
                if n >= 2 && query.len() >= 2 && buf[..2] == query[..2] {
                    return Some(buf[..n].to_vec());
                }
            }
        }
        None
    }

    /// Where `CONNECT host:port` may go: the addresses to try, or why not.
    pub fn destinations(&self, host: &str, port: u16) -> Result<Vec<SocketAddrV4>, Refused> {
        if let Ok(address) = host.parse::<Ipv4Addr>() {
            let d = self.policy.verdict_for(address);
            return match d.verdict {
                Verdict::Allow => Ok(vec![SocketAddrV4::new(address, port)]),
                Verdict::Deny => Err(Refused::Denied {
                    address,
                    prefix: d.prefix,
                    origin: d.origin,
                }),
            };
        }
        if host.starts_with('[') || host.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(Refused::Ipv6);
        }
        let name = hosts::normalize(host);
        if let Some(allow) = &self.allow {
            if !allow.allows(&name) {
                return Err(Refused::NotAllowed(name));
            }
            if let Some(ports) = allow.ports(&name) {
                if !ports.contains(&port) {
                    return Err(Refused::Port { name, ports });
                }
            }
        }
        let Some(query) = a_query(&name) else {
            return Err(Refused::NotADomainName(name));
        };
        let Some(answer) = self.forward(&query) else {
            return Err(Refused::NoAnswer(name));
        };
        let addresses = match &self.allow {
            Some(allow) => match judge::judge_answer(allow, &name, &answer)? {
                AnswerVerdict::Refuse { name: via } => return Err(Refused::Chain { name, via }),
                AnswerVerdict::Accept { addresses } => addresses
                    .into_iter()
                    .filter_map(|(ip, _)| match ip {
                        std::net::IpAddr::V4(a) => Some(a),
                        std::net::IpAddr::V6(_) => None,
                    })
                    .collect(),
            },
            None => a_records(&answer),
        };
        let reachable: Vec<SocketAddrV4> = addresses
            .iter()
            .filter(|a| self.policy.reachable(**a))
            .map(|a| SocketAddrV4::new(*a, port))
            .collect();
        if reachable.is_empty() {
            return Err(Refused::Unreachable { name, addresses });
        }
        Ok(reachable)
    }
}

/// An A query for `name`, recursion desired.
pub fn a_query(name: &str) -> Option<Vec<u8>> {
    let mut n = Name::from_ascii(name).ok()?;
    n.set_fqdn(true);
    // The ID pairs the answer with the question; a guessable one would
    // let an off-path forger race the upstream's answer.
    let mut id = [0u8; 2];
    getrandom::getrandom(&mut id).ok()?;
    let mut m = Message::new();
    m.set_id(u16::from_be_bytes(id))
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(n, RecordType::A));
    m.to_vec().ok()
}

/// Every A record of an answer (no `allow_hosts`: every name is allowed,
/// so the chain needs no check).
fn a_records(answer: &[u8]) -> Vec<Ipv4Addr> {
    Message::from_vec(answer)
        .map(|m| {
            m.answers()
                .iter()
                .filter_map(|r| match r.data() {
                    RData::A(a) => Some(a.0),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The nameservers of a resolv.conf (IPv4, port 53), in order.
pub fn nameservers(resolv_conf: &str) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse::<Ipv4Addr>().ok())
        .map(|a| SocketAddr::from((a, 53)))
        .collect()
}

/// The request line of a proxy request: `CONNECT host:port HTTP/1.x`.
pub fn parse_connect(head: &str) -> Result<(String, u16), BadRequest> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest::NotHttp);
    };
    if method != "CONNECT" || !version.starts_with("HTTP/1.") {
        return Err(BadRequest::Method(method.into()));
    }
    let (host, port) = target
        .rsplit_once(':')
        .ok_or_else(|| BadRequest::NoPort(target.into()))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| BadRequest::BadPort(target.into()))?;
    if host.is_empty() {
        return Err(BadRequest::NoHost(target.into()));
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests;
