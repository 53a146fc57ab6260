//! The address part of the Network Sidecar's policy as NetworkPolicy
//! `ipBlock`s, for the egress Pod's own fence.
//!
//! The local policy is longest-prefix routing: an address takes the
//! verdict of the longest rule containing it, else the default. A
//! NetworkPolicy allows the union of its peers, each `cidr` minus its
//! `except`s. The two agree when every allowed region (each `allow` rule,
//! and `0.0.0.0/0` with `default = "allow"`) becomes one block whose
//! excepts are the denials strictly inside it: an address whose longest
//! rule allows is in that rule's block and in none of its excepts (a
//! denial inside it would be longer); an address whose longest rule
//! denies is, for every allowed region containing it, inside one of that
//! region's excepts (the denial is longer, hence strictly inside). The
//! tests check this against `Policy::verdict_for` on every boundary.
//!
//! With `allow_hosts` the default is `deny`, but the filtering resolver
//! routes the addresses of allowed names unless a rule denies them (a
//! private range, a `deny` entry): those addresses are reachable, by name
//! (`Policy::reachable`). The fence then allows them all and the egress Pod's
//! proxy checks the name; an address literal gets only what the rules
//! allow.
//!
//! The slirp link (10.0.2.0/24) has no meaning in a cluster: its device
//! route is not carried over, its rules (inside 10/8) are kept as plain
//! denials.

use ipnet::Ipv4Net;
use lazaret_protocol::netpolicy::policy::{Policy, Verdict};

/// One NetworkPolicy `ipBlock`: `cidr` minus `except`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub cidr: Ipv4Net,
    pub except: Vec<Ipv4Net>,
}

impl Block {
    /// Does this block allow `addr`?
    pub fn allows(&self, addr: std::net::Ipv4Addr) -> bool {
        self.cidr.contains(&addr) && !self.except.iter().any(|e| e.contains(&addr))
    }
}

/// The blocks whose union allows exactly the addresses the sandbox may
/// reach locally, `Policy::reachable` (off
/// the slirp link), in the policy's rule order.
pub fn blocks(policy: &Policy) -> Vec<Block> {
    let mut regions: Vec<Ipv4Net> = Vec::new();
    if policy.default == Verdict::Allow || policy.hosts.is_some() {
        regions.push(Ipv4Net::default());
    }
    regions.extend(
        policy
            .rules
            .iter()
            .filter(|r| r.verdict == Verdict::Allow)
            .map(|r| r.prefix),
    );
    let denials: Vec<Ipv4Net> = policy
        .rules
        .iter()
        .filter(|r| r.verdict == Verdict::Deny)
        .map(|r| r.prefix)
        .collect();
    regions
        .into_iter()
        .map(|cidr| {
            let inside: Vec<Ipv4Net> = denials
                .iter()
                .copied()
                .filter(|d| cidr.contains(d) && *d != cidr)
                .collect();
            // A denial inside another is excepted already: left out, so the
            // list stays short (the API server bounds nothing, CNIs may).
            let except = inside
                .iter()
                .copied()
                .filter(|d| !inside.iter().any(|o| o != d && o.contains(d)))
                .collect();
            Block { cidr, except }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_config::{Network, NetworkDefault};
    use std::net::Ipv4Addr;

    fn policy(net: &Network) -> Policy {
        let opts = lazaret_netpolicy::options_for(net, "test").unwrap();
        match lazaret_netpolicy::derive(net, &opts).unwrap() {
            lazaret_netpolicy::NetworkPlan::Policy(p) => p,
            lazaret_netpolicy::NetworkPlan::None => panic!("no policy"),
        }
    }

    /// Every rule's first and last address and their neighbours, and a
    /// spread of others: where longest-prefix and union could disagree.
    fn probes(p: &Policy) -> Vec<Ipv4Addr> {
        let mut out = Vec::new();
        for r in &p.rules {
            let (lo, hi) = (
                u32::from(r.prefix.network()),
                u32::from(r.prefix.broadcast()),
            );
            for a in [
                lo.wrapping_sub(1),
                lo,
                lo + 1,
                hi - 1,
                hi,
                hi.wrapping_add(1),
            ] {
                out.push(Ipv4Addr::from(a));
            }
        }
        out.extend((0..=255u32).map(|i| Ipv4Addr::from(i.wrapping_mul(0x0101_0101) ^ 0x5a00_00a5)));
        out.retain(|a| !p.link.network.contains(a));
        out
    }

    fn agree(net: &Network) {
        let p = policy(net);
        let b = blocks(&p);
        for a in probes(&p) {
            let local = p.reachable(a);
            let fence = b.iter().any(|b| b.allows(a));
            assert_eq!(local, fence, "{a}: local {local}, fence {fence}; {b:?}");
        }
    }

    #[test]
    fn the_default_policy_becomes_one_block_minus_the_private_ranges() {
        let p = policy(&Network::default());
        let b = blocks(&p);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].cidr, Ipv4Net::default());
        assert!(b[0].except.contains(&"10.0.0.0/8".parse().unwrap()));
        assert!(b[0].except.contains(&"169.254.0.0/16".parse().unwrap()));
        // 10.0.2.2/32 is inside 10/8: not listed again.
        assert!(!b[0].except.contains(&"10.0.2.2/32".parse().unwrap()));
        agree(&Network::default());
    }

    #[test]
    fn nested_allows_and_denials_agree_with_longest_prefix() {
        agree(&Network {
            allow: vec!["10.1.0.0/16".into(), "10.1.2.3".into()],
            deny: vec!["10.1.2.0/24".into(), "198.51.100.0/24".into()],
            dns: vec!["10.9.9.9".into()],
            ..Network::default()
        });
        agree(&Network {
            default: NetworkDefault::Deny,
            allow: vec!["203.0.113.0/24".into(), "10.2.0.0/16".into()],
            deny: vec!["203.0.113.128/25".into()],
            ..Network::default()
        });
    }

    #[test]
    fn names_reach_what_no_rule_denies() {
        let net = Network {
            default: NetworkDefault::Deny,
            allow_hosts: vec!["github.com".into()],
            deny: vec!["198.51.100.0/24".into()],
            ..Network::default()
        };
        agree(&net);
        let p = policy(&net);
        assert!(p.reachable(Ipv4Addr::new(140, 82, 112, 3)));
        assert!(!p.reachable(Ipv4Addr::new(198, 51, 100, 7)));
        assert!(!p.reachable(Ipv4Addr::new(10, 1, 1, 1)));
    }

    #[test]
    fn deny_by_default_without_allows_has_no_block() {
        let p = policy(&Network {
            default: NetworkDefault::Deny,
            ..Network::default()
        });
        assert!(blocks(&p).is_empty());
    }
}
