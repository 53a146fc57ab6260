//! Names the sandbox may resolve (`allow_hosts`); what the filtering
//! resolver decides about each query and answer is [`super::judge`].
//!
//! An entry is an exact host name (`github.com`) or a leading wildcard
//! (`*.githubusercontent.com`: any name below it, not the name itself),
//! with an optional port (`github.com:22`). A query for a name no entry
//! matches is answered NXDOMAIN by the filter itself and never leaves; an
//! answer is accepted only if every name of its CNAME chain is allowed,
//! and its addresses are kept for their TTL, which the filter clamps to the
//! plan's bounds ([`TTL_FLOOR`]..=[`TTL_CEILING`] as derived).

/// The shortest time an allowed address stays routed (a TTL of 0 would
/// otherwise expire the route before the connection is made).
pub const TTL_FLOOR: u32 = 30;
/// The longest: an address the name stopped using stops being routed
/// within this bound.
pub const TTL_CEILING: u32 = 3600;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("allow_hosts entry {entry:?}: {why}")]
pub struct HostError {
    pub entry: String,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostName {
    Exact(String),
    /// `*.SUFFIX`: names strictly below SUFFIX.
    Below(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    pub name: HostName,
    /// `None`: every port.
    pub port: Option<u16>,
}

/// A name as compared: ASCII lowercase, without a trailing dot.
pub fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an empty name".into());
    }
    if !name.is_ascii() {
        return Err("not ASCII: write an internationalized name in its xn-- form".into());
    }
    if name.len() > 253 {
        return Err("longer than 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("the label {label:?} is empty or longer than 63"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "the label {label:?} has a character other than letters, digits, '-' and '_'"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("the label {label:?} starts or ends with '-'"));
        }
    }
    Ok(())
}

impl HostPattern {
    pub fn parse(entry: &str) -> Result<Self, HostError> {
        let bad = |why: String| HostError {
            entry: entry.to_string(),
            why,
        };
        if entry.contains('[') || entry.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(bad(
                "an IP address: list addresses in `allow` as prefixes".into()
            ));
        }
        let (host, port) = match entry.rsplit_once(':') {
            Some((h, p)) => {
                let port: u16 = p
                    .parse()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad(format!("the port {p:?} is not a number 1-65535")))?;
                (h, Some(port))
            }
            None => (entry, None),
        };
        let host = normalize(host);
        if host.parse::<std::net::Ipv4Addr>().is_ok() {
            return Err(bad(
                "an IP address: list addresses in `allow` as prefixes".into()
            ));
        }
        let name = match host.strip_prefix("*.") {
            Some(suffix) => {
                check_name(suffix).map_err(bad)?;
                if !suffix.contains('.') {
                    return Err(bad(format!(
                        "too broad: `*.{suffix}` would allow a whole top-level domain"
                    )));
                }
                HostName::Below(suffix.to_string())
            }
            None if host.contains('*') => {
                return Err(bad("a wildcard is allowed only as a leading `*.`".into()))
            }
            None => {
                check_name(&host).map_err(bad)?;
                HostName::Exact(host)
            }
        };
        Ok(Self { name, port })
    }

    pub fn matches(&self, name: &str) -> bool {
        let n = normalize(name);
        match &self.name {
            HostName::Exact(e) => n == *e,
            HostName::Below(s) => n
                .strip_suffix(s.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

/// A profile's `allow_hosts`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowHosts(pub Vec<HostPattern>);

impl AllowHosts {
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, HostError> {
        entries
            .iter()
            .map(|e| HostPattern::parse(e.as_ref()))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn allows(&self, name: &str) -> bool {
        self.0.iter().any(|p| p.matches(name))
    }

    /// The ports `name` may be reached on: `None` for every port, or the
    /// listed ones; empty when the name is not allowed.
    pub fn ports(&self, name: &str) -> Option<Vec<u16>> {
        let mut ports = Vec::new();
        for p in self.0.iter().filter(|p| p.matches(name)) {
            match p.port {
                None => return None,
                Some(port) => ports.push(port),
            }
        }
        ports.sort_unstable();
        ports.dedup();
        Some(ports)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The list the tests here and the judge's decide by.
    pub(crate) fn allow() -> AllowHosts {
        AllowHosts::parse(&[
            "github.com",
            "github.com:22",
            "*.githubusercontent.com",
            "Packages.Example.org.",
        ])
        .unwrap()
    }

    #[test]
    fn entries_are_names_or_leading_wildcards_and_errors_name_the_entry() {
        let a = allow();
        assert!(a.allows("github.com"));
        assert!(a.allows("GitHub.com."));
        assert!(!a.allows("api.github.com"));
        assert!(a.allows("raw.githubusercontent.com"));
        assert!(a.allows("a.b.githubusercontent.com"));
        assert!(!a.allows("githubusercontent.com"));
        assert!(!a.allows("evilgithubusercontent.com"));
        assert!(a.allows("packages.example.org"));
        assert_eq!(a.ports("github.com"), None);
        assert_eq!(
            AllowHosts::parse(&["h.example:22", "h.example:443"])
                .unwrap()
                .ports("h.example"),
            Some(vec![22, 443])
        );
        for (entry, why) in [
            ("10.0.0.1", "IP address"),
            ("[::1]:53", "IP address"),
            ("::1", "IP address"),
            ("*.com", "too broad"),
            ("a.*.example.org", "leading"),
            ("ex ample.org", "character"),
            ("-x.example.org", "starts or ends"),
            ("h.example:0", "port"),
            ("h.example:http", "port"),
            ("bücher.example", "xn--"),
            ("", "empty"),
        ] {
            let e = HostPattern::parse(entry).unwrap_err();
            assert_eq!(e.entry, entry);
            assert!(e.to_string().contains(why), "{entry}: {e}");
        }
    }
}
