//! The addresses the filter routes, for how long, on which ports: pure
//! bookkeeping that says which routes and rules to add and remove.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// At most this many addresses are routed at once; an answer that would
/// add more is refused (SERVFAIL) until some expire.
pub const MAX_ADDRESSES: usize = 4096;

/// A change to the enforcement namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// `ADDR/32 via GATEWAY` in the main table: every port.
    AddRoute(Ipv4Addr),
    DelRoute(Ipv4Addr),
    /// `to ADDR/32 ipproto tcp|udp dport PORT lookup 76`.
    AddRules(Ipv4Addr, u16),
    DelRules(Ipv4Addr, u16),
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Grant {
    /// Every port, until (ms since the epoch).
    all: Option<u64>,
    ports: BTreeMap<u16, u64>,
}

#[derive(Debug, Default)]
pub struct Grants {
    by_addr: BTreeMap<Ipv4Addr, Grant>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{MAX_ADDRESSES} addresses are routed already; wait for some to expire")]
pub struct Full;

impl Grants {
    /// Grants `addr` on `ports` (`None`: every port) until `until`;
    /// returns what to add. A grant never shortens an earlier one.
    pub fn grant(
        &mut self,
        addr: Ipv4Addr,
        ports: Option<&[u16]>,
        until: u64,
    ) -> Result<Vec<Change>, Full> {
        if !self.by_addr.contains_key(&addr) && self.by_addr.len() >= MAX_ADDRESSES {
            return Err(Full);
        }
        let g = self.by_addr.entry(addr).or_default();
        let mut out = Vec::new();
        match ports {
            None => {
                if g.all.is_none() {
                    out.push(Change::AddRoute(addr));
                }
                g.all = Some(g.all.unwrap_or(0).max(until));
            }
            Some(ports) => {
                for p in ports {
                    let e = g.ports.entry(*p).or_insert_with(|| {
                        out.push(Change::AddRules(addr, *p));
                        0
                    });
                    *e = (*e).max(until);
                }
            }
        }
        Ok(out)
    }

    /// Removes what expired by `now`, except what `in_use(addr, port)`
    /// says is still used (`port` `None` for the every-port route), which
    /// is kept `extend` ms longer.
    pub fn expire(
        &mut self,
        now: u64,
        extend: u64,
        in_use: impl Fn(Ipv4Addr, Option<u16>) -> bool,
    ) -> Vec<Change> {
        let mut out = Vec::new();
        for (addr, g) in self.by_addr.iter_mut() {
            if let Some(until) = g.all {
                if until <= now {
                    if in_use(*addr, None) {
                        g.all = Some(now + extend);
                    } else {
                        g.all = None;
                        out.push(Change::DelRoute(*addr));
                    }
                }
            }
            let mut gone = Vec::new();
            for (port, until) in g.ports.iter_mut() {
                if *until <= now {
                    if in_use(*addr, Some(*port)) {
                        *until = now + extend;
                    } else {
                        gone.push(*port);
                    }
                }
            }
            for p in gone {
                g.ports.remove(&p);
                out.push(Change::DelRules(*addr, p));
            }
        }
        self.by_addr
            .retain(|_, g| g.all.is_some() || !g.ports.is_empty());
        out
    }

    /// Is nothing of `addr` routed any more?
    pub fn is_gone(&self, addr: Ipv4Addr) -> bool {
        !self.by_addr.contains_key(&addr)
    }

    /// The earliest expiry, for the poll timeout.
    pub fn next_expiry(&self) -> Option<u64> {
        self.by_addr
            .values()
            .flat_map(|g| g.all.into_iter().chain(g.ports.values().copied()))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);

    #[test]
    fn grants_add_once_extend_and_expire_unless_in_use() {
        let mut g = Grants::default();
        assert_eq!(g.grant(A, None, 100).unwrap(), vec![Change::AddRoute(A)]);
        assert_eq!(g.grant(A, None, 50).unwrap(), vec![]);
        assert_eq!(
            g.grant(A, Some(&[22, 443]), 80).unwrap(),
            vec![Change::AddRules(A, 22), Change::AddRules(A, 443)]
        );
        assert_eq!(g.next_expiry(), Some(80));
        assert_eq!(g.expire(79, 30, |_, _| false), vec![]);
        // Port 22 still carries a connection: kept 30 ms more.
        assert_eq!(
            g.expire(90, 30, |_, p| p == Some(22)),
            vec![Change::DelRules(A, 443)]
        );
        assert_eq!(
            g.expire(120, 30, |_, _| false),
            vec![Change::DelRoute(A), Change::DelRules(A, 22)]
        );
        assert!(g.is_gone(A));
        assert_eq!(g.next_expiry(), None);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut g = Grants::default();
        for i in 0..MAX_ADDRESSES as u32 {
            g.grant(Ipv4Addr::from(0x0b00_0000 + i), None, 1).unwrap();
        }
        assert_eq!(g.grant(A, None, 1), Err(Full));
        // A known address may still be extended.
        assert!(g.grant(Ipv4Addr::from(0x0b00_0000), None, 5).is_ok());
    }
}
