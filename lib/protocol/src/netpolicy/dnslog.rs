//! `dns-filter.log`: what the filtering resolver (`allow_hosts`) decided,
//! one JSON object per line, appended by `lazaret-dns-filter` to the
//! Domain's host-private network evidence directory; read by `lazaret net
//! show` (the live name-to-address table is replayed from it) and `lazaret
//! net log`.
//!
//! Names in it are what the sandbox asked for: untrusted text, bounded
//! here and escaped by whoever prints them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// File name in the network evidence directory.
pub const FILE: &str = "dns-filter.log";
/// The filter stops writing (after one [`DnsEvent::LogFull`]) at this size.
pub const MAX_BYTES: u64 = 8 << 20;
/// A line longer than this is not one the filter wrote: skipped.
pub const MAX_LINE: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum DnsEvent {
    /// The filter listens; `allow` is the profile's list.
    Started {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        generation: String,
        allow: Vec<String>,
    },
    /// A lookup answered NXDOMAIN by the filter: `name` is not allowed
    /// (never sent upstream), or `cname` (allowed, but the answer led to a
    /// name that is not).
    Refused {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        name: String,
        qtype: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        cname: Option<String>,
    },
    /// The readiness probe's lookup of a name no entry allows, refused as
    /// it must be (not a lookup of the sandbox's).
    ProbeRefused {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        name: String,
    },
    /// An allowed lookup's addresses, routed until `expires_ms`; `ports`
    /// empty means every port.
    Routed {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        name: String,
        address: Ipv4Addr,
        ports: Vec<u16>,
        #[serde(rename = "expires_unix_ms")]
        expires_ms: u64,
    },
    /// An answer's address that the policy denies by a rule (a private,
    /// link-local or `deny`-listed range, an address of the host, a `dns`
    /// upstream) or that the host gained while the Domain runs: passed
    /// on, never routed.
    AddressRefused {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        name: String,
        address: Ipv4Addr,
        why: String,
    },
    /// The address's route (or port rules) expired and was removed.
    Expired {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        address: Ipv4Addr,
    },
    /// The filter could not do what it should (it answered SERVFAIL).
    Failed {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        message: String,
    },
    /// The log reached [`MAX_BYTES`]; nothing more is written.
    LogFull {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
    },
}

impl DnsEvent {
    pub fn time_ms(&self) -> u64 {
        match self {
            DnsEvent::Started { time_ms, .. }
            | DnsEvent::Refused { time_ms, .. }
            | DnsEvent::ProbeRefused { time_ms, .. }
            | DnsEvent::Routed { time_ms, .. }
            | DnsEvent::AddressRefused { time_ms, .. }
            | DnsEvent::Expired { time_ms, .. }
            | DnsEvent::Failed { time_ms, .. }
            | DnsEvent::LogFull { time_ms } => *time_ms,
        }
    }
}

/// Parses a log, skipping lines that are too long or do not decode.
pub fn parse(text: &str) -> Vec<DnsEvent> {
    super::log::parse_lines(text, MAX_LINE)
}

/// One row of the live table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveEntry {
    pub address: Ipv4Addr,
    pub names: Vec<String>,
    /// Empty: every port.
    pub ports: Vec<u16>,
    #[serde(rename = "expires_unix_ms")]
    pub expires_ms: u64,
}

/// The name-to-address table in force after `events` (the last
/// generation's only): routed and not expired since.
pub fn live_table(events: &[DnsEvent]) -> Vec<LiveEntry> {
    let start = events
        .iter()
        .rposition(|e| matches!(e, DnsEvent::Started { .. }))
        .unwrap_or(0);
    let mut table: BTreeMap<Ipv4Addr, LiveEntry> = BTreeMap::new();
    for e in &events[start..] {
        match e {
            DnsEvent::Routed {
                name,
                address,
                ports,
                expires_ms,
                ..
            } => {
                let row = table.entry(*address).or_insert_with(|| LiveEntry {
                    address: *address,
                    names: Vec::new(),
                    ports: ports.clone(),
                    expires_ms: *expires_ms,
                });
                if !row.names.contains(name) {
                    row.names.push(name.clone());
                }
                if ports.is_empty() || row.ports.is_empty() {
                    row.ports.clear();
                } else {
                    row.ports.extend(ports);
                    row.ports.sort_unstable();
                    row.ports.dedup();
                }
                row.expires_ms = row.expires_ms.max(*expires_ms);
            }
            DnsEvent::Expired { address, .. } => {
                table.remove(address);
            }
            _ => {}
        }
    }
    table.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_table_is_replayed_from_the_last_generation() {
        let a: Ipv4Addr = "198.51.100.1".parse().unwrap();
        let b: Ipv4Addr = "198.51.100.2".parse().unwrap();
        let routed = |name: &str, address, ports: Vec<u16>, expires_ms| DnsEvent::Routed {
            time_ms: 1,
            name: name.into(),
            address,
            ports,
            expires_ms,
        };
        let started = DnsEvent::Started {
            time_ms: 0,
            generation: "g".into(),
            allow: vec![],
        };
        let events = vec![
            routed("old.example", b, vec![], 9),
            started.clone(),
            routed("a.example", a, vec![22], 100),
            routed("b.example", a, vec![443], 200),
            routed("c.example", b, vec![], 50),
            DnsEvent::Expired {
                time_ms: 60,
                address: b,
            },
        ];
        let text: String = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .chain([
                "not json\n".to_string(),
                format!("{}\n", "x".repeat(MAX_LINE + 1)),
            ])
            .collect();
        assert_eq!(parse(&text), events);
        assert_eq!(
            live_table(&events),
            vec![LiveEntry {
                address: a,
                names: vec!["a.example".into(), "b.example".into()],
                ports: vec![22, 443],
                expires_ms: 200,
            }]
        );
    }
}
