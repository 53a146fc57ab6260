//! `host-addresses.log`: the denials `lazaret-netpolicy watch` installed
//! for addresses the host has but the policy did not list (gained after
//! the policy was derived), one JSON object per line, appended to the
//! Domain Root; `lazaret net show` replays the last generation's.
//!
//! Written by a confined helper from the host's own netlink messages
//! (never from anything the sandbox sends); interface names are escaped
//! when printed all the same.

use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

/// File name in the Domain Root.
pub const FILE: &str = "host-addresses.log";
/// The watcher stops writing (after one [`HostEvent::LogFull`]) at this size.
pub const MAX_BYTES: u64 = 1 << 20;
/// A line longer than this is not one the watcher wrote: skipped.
pub const MAX_LINE: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HostEvent {
    /// The watcher of one generation (its policy's binding) started.
    Started {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        generation: String,
    },
    /// `address` (of `ifname`) is denied from now on: `unreachable
    /// ADDR/32` in [`super::policy::HOST_TABLE`].
    Denied {
        #[serde(rename = "time_unix_ms")]
        time_ms: u64,
        address: Ipv4Addr,
        ifname: String,
    },
    /// The watcher stopped (the Domain stops with it).
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

/// Parses a log, skipping lines that are too long or do not decode.
pub fn parse(text: &str) -> Vec<HostEvent> {
    super::log::parse_lines(text, MAX_LINE)
}

/// One address the watcher denied in the last generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WatchDenial {
    pub address: Ipv4Addr,
    pub ifname: String,
    #[serde(rename = "since_unix_ms")]
    pub since_ms: u64,
}

/// The denials of the last generation in `events` (after its `Started`).
pub fn denials(events: &[HostEvent]) -> Vec<WatchDenial> {
    let start = events
        .iter()
        .rposition(|e| matches!(e, HostEvent::Started { .. }))
        .unwrap_or(0);
    let mut out: Vec<WatchDenial> = Vec::new();
    for e in &events[start..] {
        if let HostEvent::Denied {
            time_ms,
            address,
            ifname,
        } = e
        {
            if !out.iter().any(|d| d.address == *address) {
                out.push(WatchDenial {
                    address: *address,
                    ifname: ifname.clone(),
                    since_ms: *time_ms,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_denials_are_the_last_generations() {
        let a: Ipv4Addr = "203.0.113.77".parse().unwrap();
        let b: Ipv4Addr = "203.0.113.78".parse().unwrap();
        let denied = |address, time_ms| HostEvent::Denied {
            time_ms,
            address,
            ifname: "eth0".into(),
        };
        let started = HostEvent::Started {
            time_ms: 5,
            generation: "g".into(),
        };
        let events = vec![denied(b, 1), started, denied(a, 7), denied(a, 9)];
        let text: String = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .chain(["garbage\n".to_string(), "x".repeat(MAX_LINE + 1)])
            .collect();
        assert_eq!(parse(&text), events);
        assert_eq!(
            denials(&events),
            vec![WatchDenial {
                address: a,
                ifname: "eth0".into(),
                since_ms: 7
            }]
        );
    }
}
