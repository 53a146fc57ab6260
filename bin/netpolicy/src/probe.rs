//! The readiness probe, run from the sandbox's network namespace: its
//! traffic takes the sandbox's path (its tap0, slirp B, the enforcement
//! namespace's routes). It checks that the denied target is refused by
//! the policy ("no route"), that the permitted target, when one is named,
//! is reachable, and that each resolver answers a DNS query.

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use hickory_proto::ProtoError;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use crate::sysctl::Ipv6Conf;
use lazaret_netlink::rtnl::Rtnl;
use lazaret_protocol::netpolicy::policy::{HostsPlan, Policy};

/// How a TCP connection attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpOutcome {
    Connected,
    /// The destination (or slirp on its behalf) answered with a reset.
    Refused,
    /// `EHOSTUNREACH`, `ENETUNREACH`, `EACCES` or `EPERM`: a route said no.
    NoRoute {
        errno: i32,
    },
    TimedOut,
    /// Closed with no error recorded and no TCP segment received: the
    /// SYN was refused by an ICMP error or locally, and the kernel lost
    /// why (see [`tcp_connect`]). Nothing answered, nothing connected.
    Unanswered {
        detail: String,
    },
    Failed {
        error: String,
    },
}

/// The pauses before each repetition of an attempt whose outcome the
/// kernel lost: doubling, about 1.3 s in all, since on a loaded machine
/// the condition was seen to outlast five attempts 20 ms apart.
const AMBIGUOUS_BACKOFF_MS: [u64; 6] = [20, 40, 80, 160, 320, 640];

/// A connection attempt from the calling thread's network namespace.
///
/// When slirp answers a SYN at once (its ICMP error or reset arrives while
/// `connect` still holds the socket), Linux sometimes closes the socket
/// without recording why: the poll reports POLLHUP and `SO_ERROR` is 0.
/// Such an attempt is repeated (a few times) until the kernel reports a
/// definite outcome. When it never does, the last attempt says whether
/// any TCP segment came back (`TCP_INFO`): none is [`TcpOutcome::Unanswered`],
/// which a denied destination may be (its SYN got no answer from any
/// host); one is a failure, since something answered.
pub fn tcp_connect(target: SocketAddrV4, timeout: Duration) -> TcpOutcome {
    let mut outcome = tcp_connect_once(target, timeout);
    for pause in AMBIGUOUS_BACKOFF_MS {
        if !is_ambiguous(&outcome) {
            break;
        }
        std::thread::sleep(Duration::from_millis(pause));
        outcome = tcp_connect_once(target, timeout);
    }
    outcome
}

fn is_ambiguous(o: &TcpOutcome) -> bool {
    matches!(o, TcpOutcome::Unanswered { .. })
        || matches!(o, TcpOutcome::Failed { error } if error.contains("no error set after POLLHUP"))
}

fn classify(e: rustix::io::Errno) -> TcpOutcome {
    match e.raw_os_error() {
        libc::ECONNREFUSED => TcpOutcome::Refused,
        n @ (libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EACCES | libc::EPERM) => {
            TcpOutcome::NoRoute { errno: n }
        }
        libc::ETIMEDOUT => TcpOutcome::TimedOut,
        _ => TcpOutcome::Failed {
            error: std::io::Error::from(e).to_string(),
        },
    }
}

/// What the kernel says of a socket it closed without an error: the TCP
/// segments it received (none, if nothing answered), its state, options,
/// round-trip time and retransmissions, for the probe's report.
fn tcp_state(fd: &std::os::fd::OwnedFd) -> (Option<u32>, String) {
    use std::os::fd::AsRawFd;
    // SAFETY: `tcp_info` is plain data; an all-zero value is valid.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, which outlives the
    // call; the kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return (
            None,
            format!("TCP_INFO: {}", std::io::Error::last_os_error()),
        );
    }
    (
        Some(info.tcpi_segs_in),
        format!(
            "tcp state {}, segments in {} out {}, options {:#x}, rtt {} us, total retransmits {}",
            info.tcpi_state,
            info.tcpi_segs_in,
            info.tcpi_segs_out,
            info.tcpi_options,
            info.tcpi_rtt,
            info.tcpi_total_retrans
        ),
    )
}

fn tcp_connect_once(target: SocketAddrV4, timeout: Duration) -> TcpOutcome {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let fd = match rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    ) {
        Ok(f) => f,
        Err(e) => {
            return TcpOutcome::Failed {
                error: format!("socket: {e}"),
            }
        }
    };
    match rustix::net::connect(&fd, &SocketAddr::V4(target)) {
        Ok(()) => return TcpOutcome::Connected,
        Err(rustix::io::Errno::INPROGRESS) => {}
        Err(e) => return classify(e),
    }
    let deadline = Instant::now() + timeout;
    let revents = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return TcpOutcome::TimedOut;
        }
        let ts = rustix::time::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => continue,
            Ok(_) => break fds[0].revents(),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                return TcpOutcome::Failed {
                    error: format!("poll: {e}"),
                }
            }
        }
    };
    match rustix::net::sockopt::socket_error(&fd) {
        Ok(Err(e)) => classify(e),
        Err(e) => TcpOutcome::Failed {
            error: format!("SO_ERROR: {e}"),
        },
        Ok(Ok(())) if revents.intersects(PollFlags::HUP | PollFlags::ERR) => match tcp_state(&fd) {
            (Some(0), detail) => TcpOutcome::Unanswered {
                detail: format!("closed with no error recorded (revents {revents:?}; {detail})"),
            },
            (_, detail) => TcpOutcome::Failed {
                error: format!("no error set after POLLHUP (revents {revents:?}; {detail})"),
            },
        },
        Ok(Ok(())) => TcpOutcome::Connected,
    }
}

/// A resolver's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsAnswer {
    pub rcode: String,
    pub answers: Vec<String>,
}

/// Why a resolver gave no answer: the probe's observation.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("name {name:?}: {source}")]
    Name { name: String, source: ProtoError },
    #[error("{0}")]
    Encode(ProtoError),
    #[error("getrandom: {0}")]
    Random(getrandom::Error),
    #[error("bind: {0}")]
    Bind(std::io::Error),
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("timeout: {0}")]
    Timeout(std::io::Error),
    #[error("send: {0}")]
    Send(std::io::Error),
    #[error("recv: {0}")]
    Recv(std::io::Error),
    #[error("malformed answer")]
    Malformed,
    #[error("no answer")]
    NoAnswer,
    #[error("no answer before the timeout")]
    NoAnswerInTime,
}

/// Builds a recursive query for the A records of `name`.
pub fn dns_query(id: u16, name: &str) -> Result<Vec<u8>, DnsError> {
    let name = Name::from_ascii(name).map_err(|source| DnsError::Name {
        name: name.into(),
        source,
    })?;
    let mut msg = Message::new();
    msg.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(name, RecordType::A));
    msg.to_vec().map_err(DnsError::Encode)
}

/// Asks `resolver` for `name` over UDP, retrying until `timeout`. Any
/// well-formed response with our ID counts as an answer.
pub fn dns_ask(resolver: Ipv4Addr, name: &str, timeout: Duration) -> Result<DnsAnswer, DnsError> {
    let mut idb = [0u8; 2];
    getrandom::getrandom(&mut idb).map_err(DnsError::Random)?;
    let id = u16::from_ne_bytes(idb);
    let query = dns_query(id, name)?;
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(DnsError::Bind)?;
    sock.connect((resolver, 53)).map_err(DnsError::Connect)?;
    let deadline = Instant::now() + timeout;
    let mut last = DnsError::NoAnswer;
    while Instant::now() < deadline {
        if let Err(e) = sock.send(&query) {
            last = DnsError::Send(e);
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let slice = (deadline - Instant::now()).min(Duration::from_millis(700));
        if slice.is_zero() {
            break;
        }
        sock.set_read_timeout(Some(slice))
            .map_err(DnsError::Timeout)?;
        let mut buf = [0u8; 4096];
        match sock.recv(&mut buf) {
            Ok(n) => {
                let Ok(m) = Message::from_vec(&buf[..n]) else {
                    last = DnsError::Malformed;
                    continue;
                };
                if m.id() != id || m.message_type() != MessageType::Response {
                    continue;
                }
                return Ok(DnsAnswer {
                    rcode: format!("{:?}", m.response_code()),
                    answers: m.answers().iter().map(|r| r.to_string()).collect(),
                });
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                last = DnsError::NoAnswerInTime;
            }
            Err(e) => {
                last = DnsError::Recv(e);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    Err(last)
}

pub use lazaret_protocol::netreport::{Check, ProbeReport};

/// `allow_hosts`: the sandbox's resolver is the filter (through slirp
/// B). A name no entry allows must get NXDOMAIN, which the filter gives
/// itself: required. An allowed name's answer comes from the upstream:
/// required for resolvers the profile names, evidence only for the host's
/// (which may be offline).
fn filter_checks(policy: &Policy, hosts: &HostsPlan, t: Duration, checks: &mut Vec<Check>) {
    let Some(r) = policy.resolvers.first() else {
        return;
    };
    let name = &policy.probe.dns_name;
    let (passed, observed) = match dns_ask(*r, name, t) {
        Ok(a) => (
            a.rcode == "NXDomain" && a.answers.is_empty(),
            format!("rcode {} answers {:?}", a.rcode, a.answers),
        ),
        Err(e) => (false, e.to_string()),
    };
    checks.push(Check {
        check: "filtering resolver refuses a name not allowed".into(),
        target: format!("{r}:53 {name}"),
        passed,
        observed,
        required: true,
    });
    if let Some(allowed) = &hosts.probe_allowed {
        // Any answer proves the way to the upstream; its rcode is
        // evidence (a listed name may not exist yet).
        let (passed, observed) = match dns_ask(*r, allowed, t) {
            Ok(a) => (true, format!("rcode {} answers {:?}", a.rcode, a.answers)),
            Err(e) => (false, e.to_string()),
        };
        checks.push(Check {
            check: "filtering resolver answers an allowed name".into(),
            target: format!("{r}:53 {allowed}"),
            passed,
            observed,
            // Required when the profile names the resolvers (`dns`): the
            // filter's own route to them is what this proves.
            required: policy.probe.dns_required,
        });
    }
}

/// Runs every check of `policy.probe` from the current namespace, which
/// must be the sandbox's (`sandbox` and `sandbox_ipv6` are its handles).
pub fn run(policy: &Policy, sandbox: &mut Rtnl, sandbox_ipv6: &Ipv6Conf) -> ProbeReport {
    let t = Duration::from_millis(u64::from(policy.probe.timeout_ms));
    let mut checks = Vec::new();

    let d = tcp_connect(policy.probe.denied, t);
    checks.push(Check {
        check: "denied destination refused".into(),
        target: policy.probe.denied.to_string(),
        passed: matches!(
            d,
            TcpOutcome::NoRoute { .. } | TcpOutcome::Unanswered { .. }
        ),
        observed: format!("{d:?}"),
        required: true,
    });
    if let Some(p) = policy.probe.permitted {
        let o = tcp_connect(p, t);
        checks.push(Check {
            check: "permitted destination reachable".into(),
            target: p.to_string(),
            passed: matches!(o, TcpOutcome::Connected | TcpOutcome::Refused),
            observed: format!("{o:?}"),
            required: true,
        });
    }
    if let Some(hosts) = &policy.hosts {
        filter_checks(policy, hosts, t, &mut checks);
    }
    for r in policy.resolvers.iter().filter(|_| policy.hosts.is_none()) {
        let (passed, observed) = match dns_ask(*r, &policy.probe.dns_name, t) {
            Ok(a) => (true, format!("rcode {} answers {:?}", a.rcode, a.answers)),
            Err(e) => (false, e.to_string()),
        };
        checks.push(Check {
            check: "resolver answers".into(),
            target: format!("{r}:53 {}", policy.probe.dns_name),
            passed,
            observed,
            required: policy.probe.dns_required,
        });
    }
    // IPv6 in the sandbox namespace, now that slirp B's tap0 exists.
    checks.push(ipv6_check(sandbox, sandbox_ipv6));
    let passed = checks.iter().all(|c| c.passed || !c.required);
    ProbeReport { checks, passed }
}

/// IPv6 disabled on every link of the sandbox namespace, with no IPv6
/// address on any.
fn ipv6_check(sandbox: &mut Rtnl, sandbox_ipv6: &Ipv6Conf) -> Check {
    let mut v6 = Vec::new();
    let mut ok = true;
    match sandbox.links() {
        Ok(links) => {
            for (_, name) in links {
                match sandbox_ipv6.read(&name, "disable_ipv6") {
                    Ok(v) => {
                        ok &= v == "1";
                        v6.push(format!("{name}={v}"));
                    }
                    Err(e) => {
                        ok = false;
                        v6.push(format!("{name}: {e}"));
                    }
                }
            }
        }
        Err(e) => {
            ok = false;
            v6.push(e.to_string());
        }
    }
    match sandbox.addresses(netlink_packet_route::AddressFamily::Inet6) {
        Ok(a) if a.is_empty() => {}
        Ok(a) => {
            ok = false;
            v6.push(format!("IPv6 addresses {a:?}"));
        }
        Err(e) => {
            ok = false;
            v6.push(e.to_string());
        }
    }
    Check {
        check: "IPv6 disabled in the sandbox namespace".into(),
        target: "disable_ipv6 of every link".into(),
        passed: ok,
        observed: v6.join(" "),
        required: true,
    }
}
