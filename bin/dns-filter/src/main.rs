//! `lazaret-dns-filter`: the filtering resolver of `allow_hosts`. Started
//! by the supervisor's holder in the enforcement network namespace as root
//! of the Domain user namespace, with the policy memfd on fd 3 and its log
//! on fd 4. Prints `ready` on stdout once it listens and is confined, then
//! serves until killed (it dies with the holder).
//!
//! ```text
//! lazaret-dns-filter --digest HEX [--policy-fd N] [--log-fd N]
//! lazaret-dns-filter --print-confinement
//! ```
//!
//! Exit codes: 2 bad input (arguments, fds, policy), 3 cannot listen or
//! open its handles, 6 confinement failed, 7 a socket failed while serving.

use argh::FromArgs;
use lazaret_dns_filter::routes::{dns_route, dns_upstream_rule};
use lazaret_dns_filter::serve::{now_ms, Filter, Log};
use lazaret_protocol::fdno::dns_filter as fdno;
use lazaret_protocol::netpolicy::dnslog::DnsEvent;
use std::io::Write;
use std::net::{Ipv4Addr, UdpSocket};

const BINARY: &str = "lazaret-dns-filter";

/// Serve a Domain's allow_hosts as a filtering resolver.
#[derive(FromArgs)]
struct Cli {
    /// SHA-256 (hex) of the policy bytes in the memfd
    #[argh(option)]
    digest: String,
    /// the policy memfd
    #[argh(option, default = "fdno::POLICY")]
    policy_fd: i32,
    /// the log (opened for appending)
    #[argh(option, default = "fdno::LOG")]
    log_fd: i32,
}

fn die(code: i32, stage: &str, msg: impl std::fmt::Display) -> ! {
    eprintln!("{BINARY}: {stage} failed: {msg}");
    std::process::exit(code)
}

/// The command line (after `--print-confinement` was ruled out); bad
/// arguments end the process with exit code 2.
fn parse_cli(args: &[String]) -> Cli {
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let cli = match Cli::from_args(&[BINARY], &rest) {
        Ok(c) => c,
        Err(early) => match early.status {
            Ok(()) => {
                println!("{}", early.output);
                std::process::exit(0);
            }
            Err(()) => die(2, "arguments", early.output.trim_end()),
        },
    };
    if cli.policy_fd < 3 || cli.log_fd < 3 || cli.policy_fd == cli.log_fd {
        die(
            2,
            "arguments",
            "--policy-fd and --log-fd must be distinct and at least 3",
        );
    }
    cli
}

/// The profile's resolvers: reachable by the upstream socket's packets
/// alone (the main table keeps them denied for slirp B's), through its
/// mark, a route per resolver in the upstream table, and the rule to it.
fn route_upstream_by_mark(
    policy: &lazaret_protocol::netpolicy::Policy,
    hosts: &lazaret_protocol::netpolicy::policy::HostsPlan,
    upstream: &UdpSocket,
    rtnl: &mut lazaret_netlink::Rtnl,
    ifindex: u32,
) {
    use lazaret_protocol::netpolicy::policy::{DNS_UPSTREAM_MARK, DNS_UPSTREAM_TABLE};
    nix::sys::socket::setsockopt(
        upstream,
        nix::sys::socket::sockopt::Mark,
        &DNS_UPSTREAM_MARK,
    )
    .unwrap_or_else(|e| die(3, "upstream socket", format!("SO_MARK: {e}")));
    for u in &hosts.upstream {
        dns_route(
            rtnl,
            DNS_UPSTREAM_TABLE,
            Some(*u),
            policy.link.gateway,
            ifindex,
            true,
        )
        .unwrap_or_else(|e| die(3, "upstream route", e));
    }
    dns_upstream_rule(rtnl).unwrap_or_else(|e| die(3, "upstream rule", e));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--print-confinement") {
        lazaret_dns_filter::confinement::dns_filter().print_and_exit();
    }
    let cli = parse_cli(&args);
    lazaret_seccomp::process::close_inherited_fds(&[cli.policy_fd, cli.log_fd])
        .unwrap_or_else(|e| die(2, "sanitise", e));
    let policy_fd = lazaret_protocol::fdno::inherited(cli.policy_fd).unwrap_or_else(|e| {
        die(
            2,
            "policy fd",
            format!("no policy memfd on fd {}: {e}", cli.policy_fd),
        )
    });
    let log_fd = lazaret_protocol::fdno::inherited(cli.log_fd)
        .unwrap_or_else(|e| die(2, "log fd", format!("no log on fd {}: {e}", cli.log_fd)));
    let filters = lazaret_seccomp::filters(lazaret_dns_filter::policies::POLICIES, BINARY)
        .unwrap_or_else(|e| die(6, "seccomp", e));

    let policy = lazaret_protocol::netpolicy::read_policy_memfd(&policy_fd, &cli.digest)
        .unwrap_or_else(|e| die(2, "policy", e));
    drop(policy_fd);
    let Some(hosts) = policy.hosts.clone() else {
        die(
            2,
            "policy",
            "the policy lists no allow_hosts: nothing to filter",
        )
    };
    let allow = hosts.patterns().unwrap_or_else(|e| die(2, "policy", e));

    // Handles, before confinement: none can be opened after.
    let mut rtnl = lazaret_netlink::Rtnl::open().unwrap_or_else(|e| die(3, "netlink", e));
    let ifindex = rtnl
        .ifindex(&policy.link.ifname)
        .unwrap_or_else(|e| die(3, "netlink", e));
    let listen = UdpSocket::bind((hosts.listen, 53)).unwrap_or_else(|e| {
        die(
            3,
            "listen",
            format!("cannot bind {}:53 (UDP): {e}", hosts.listen),
        )
    });
    let upstream = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .unwrap_or_else(|e| die(3, "upstream socket", e));
    let tcp = std::fs::File::open("/proc/self/net/tcp")
        .unwrap_or_else(|e| die(3, "/proc/self/net/tcp", e));
    if policy.upstream_by_mark() {
        route_upstream_by_mark(&policy, &hosts, &upstream, &mut rtnl, ifindex);
    }

    lazaret_dns_filter::confinement::dns_filter()
        .apply(&[], &filters)
        .unwrap_or_else(|e| die(6, "confine", e));

    let mut log = Log::new(std::fs::File::from(log_fd));
    log.write(&DnsEvent::Started {
        time_ms: now_ms(),
        generation: policy.binding.clone(),
        allow: hosts.allow.clone(),
    });
    let mut out = std::io::stdout();
    let _ = out
        .write_all(lazaret_protocol::readiness::READY_LINE)
        .and_then(|_| out.flush());

    let mut filter = Filter::new(
        policy, hosts, allow, listen, upstream, rtnl, ifindex, tcp, log,
    );
    if let Err(e) = filter.serve() {
        die(7, "serve", e);
    }
}
