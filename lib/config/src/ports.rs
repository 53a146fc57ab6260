//! `ports` and `lazaret run -p`: a published port,
//! `[HOST_ADDR:]HOST_PORT:SANDBOX_PORT` (TCP, IPv4). The host side binds
//! the host's loopback unless an address is given; the sandbox side is a
//! port the agent listens on inside, now or later.

use std::net::Ipv4Addr;

use crate::error::Invalid;

/// One published port, as parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortSpec {
    pub host_addr: Ipv4Addr,
    pub host_port: u16,
    pub sandbox_port: u16,
}

/// The most ports one Domain may publish.
pub const MAX_PORTS: usize = 64;

impl PortSpec {
    /// Whether the host side is reachable from the network, not only from
    /// this host (any address but a loopback one).
    pub fn beyond_loopback(&self) -> bool {
        !self.host_addr.is_loopback()
    }
}

impl std::fmt::Display for PortSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.host_addr, self.host_port, self.sandbox_port
        )
    }
}

/// Parses `[HOST_ADDR:]HOST_PORT:SANDBOX_PORT`.
pub fn parse_port(spec: &str) -> Result<PortSpec, Invalid> {
    let bad = |why: &str| Invalid::Port {
        spec: spec.chars().take(80).collect(),
        why: why.to_owned(),
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let (addr, host, sandbox) = match parts.as_slice() {
        [h, s] => (None, *h, *s),
        [a, h, s] => (Some(*a), *h, *s),
        _ => {
            return Err(bad(
                "give [HOST_ADDR:]HOST_PORT:SANDBOX_PORT, for example 8080:3000 or 127.0.0.1:8080:3000 (IPv4 only)",
            ))
        }
    };
    let host_addr = match addr {
        None => Ipv4Addr::LOCALHOST,
        Some(a) => a
            .parse::<Ipv4Addr>()
            .map_err(|_| bad("the host address is not an IPv4 address (for example 127.0.0.1)"))?,
    };
    let port = |s: &str, what: &str| -> Result<u16, Invalid> {
        let n: u32 = if !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse().unwrap_or(0)
        } else {
            return Err(bad(&format!(
                "the {what} port is not a number from 1 to 65535"
            )));
        };
        match u16::try_from(n) {
            Ok(p) if p != 0 => Ok(p),
            _ => Err(bad(&format!(
                "the {what} port is not a number from 1 to 65535"
            ))),
        }
    };
    Ok(PortSpec {
        host_addr,
        host_port: port(host, "host")?,
        sandbox_port: port(sandbox, "sandbox")?,
    })
}

/// Parses a list and refuses a host address and port given twice (as
/// `(index of the second, error)`) or more than [`MAX_PORTS`].
pub fn parse_ports<S: AsRef<str>>(specs: &[S]) -> Result<Vec<PortSpec>, (usize, Invalid)> {
    let mut out: Vec<PortSpec> = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let p = parse_port(s.as_ref()).map_err(|e| (i, e))?;
        if let Some(first) = out.iter().position(|q| clashes(q, &p)) {
            if out[first] == p {
                continue;
            }
            return Err((
                i,
                Invalid::PortTwice {
                    spec: p.to_string(),
                    first,
                },
            ));
        }
        if out.len() == MAX_PORTS {
            return Err((i, Invalid::TooManyPorts(MAX_PORTS)));
        }
        out.push(p);
    }
    Ok(out)
}

/// Two host sides that cannot both be bound: the same port on the same
/// address, or on any address where one is 0.0.0.0.
pub fn clashes(a: &PortSpec, b: &PortSpec) -> bool {
    a.host_port == b.host_port
        && (a.host_addr == b.host_addr
            || a.host_addr.is_unspecified()
            || b.host_addr.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_loopback_by_default() {
        let p = parse_port("8080:3000").unwrap();
        assert_eq!(p.host_addr, Ipv4Addr::LOCALHOST);
        assert_eq!((p.host_port, p.sandbox_port), (8080, 3000));
        let p = parse_port("0.0.0.0:1455:1455").unwrap();
        assert!(p.host_addr.is_unspecified() && p.beyond_loopback());
        assert_eq!(p.to_string(), "0.0.0.0:1455:1455");
        assert!(!parse_port("127.0.0.2:1:65535").unwrap().beyond_loopback());
    }

    #[test]
    fn bad_specs_are_refused_with_the_reason() {
        for (spec, why) in [
            ("0:80", "host port"),
            ("80:0", "sandbox port"),
            ("70000:80", "host port"),
            ("80:65536", "sandbox port"),
            ("8080", "[HOST_ADDR:]HOST_PORT:SANDBOX_PORT"),
            ("a:b:c:d", "[HOST_ADDR:]HOST_PORT:SANDBOX_PORT"),
            ("garbage:80", "host port"),
            ("+80:80", "host port"),
            ("localhost:80:80", "IPv4"),
            ("::1:80:80", "[HOST_ADDR:]"),
            ("", "[HOST_ADDR:]"),
            ("1.2.3:80:80", "IPv4"),
        ] {
            let e = parse_port(spec).unwrap_err().to_string();
            assert!(e.contains(why), "{spec}: {e}");
        }
    }

    #[test]
    fn a_host_port_is_bound_once() {
        assert_eq!(parse_ports(&["8080:80", "8080:80"]).unwrap().len(), 1);
        assert_eq!(
            parse_ports(&["8080:80", "127.0.0.2:8080:81"])
                .unwrap()
                .len(),
            2
        );
        for twice in [
            ["8080:80", "8080:81"],
            ["0.0.0.0:8080:80", "8080:80"],
            ["8080:80", "0.0.0.0:8080:80"],
        ] {
            let (i, e) = parse_ports(&twice).unwrap_err();
            assert_eq!(i, 1);
            assert!(e.to_string().contains("ports[0]"), "{e}");
        }
        let many: Vec<String> = (1..=65).map(|p| format!("{p}:80")).collect();
        assert!(parse_ports(&many).is_err());
    }
}
