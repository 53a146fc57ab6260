//! Names the sandbox may resolve (`allow_hosts`), and what the filtering
//! resolver (`lazaret-dns-filter`) decides about each query and answer.
//!
//! An entry is an exact host name (`github.com`) or a leading wildcard
//! (`*.githubusercontent.com`: any name below it, not the name itself),
//! with an optional port (`github.com:22`). A query for a name no entry
//! matches is answered NXDOMAIN by the filter itself and never leaves; an
//! answer is accepted only if every name of its CNAME chain is allowed,
//! and its addresses are kept for their TTL, which the filter clamps to the
//! plan's bounds ([`TTL_FLOOR`]..=[`TTL_CEILING`] as derived).

pub use hickory_proto::op::ResponseCode;
use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::{RData, RecordType};
use std::net::IpAddr;

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

/// What the filter does with a query from the sandbox.
#[derive(Debug, PartialEq, Eq)]
pub enum QueryVerdict {
    /// Send it upstream, unchanged.
    Forward { name: String },
    /// Answer it here with these bytes (NXDOMAIN); nothing leaves.
    Refuse { name: String, response: Vec<u8> },
    /// Not one well-formed query: dropped, unanswered.
    Drop { why: String },
}

pub fn judge_query(allow: &AllowHosts, query: &[u8]) -> QueryVerdict {
    let msg = match Message::from_vec(query) {
        Ok(m) => m,
        Err(e) => return QueryVerdict::Drop { why: e.to_string() },
    };
    if msg.message_type() != MessageType::Query || msg.queries().len() != 1 {
        return QueryVerdict::Drop {
            why: "not a query with exactly one question".into(),
        };
    }
    let q = &msg.queries()[0];
    let name = normalize(&q.name().to_ascii());
    if allow.allows(&name) {
        return QueryVerdict::Forward { name };
    }
    match reply(&msg, ResponseCode::NXDomain) {
        Ok(response) => QueryVerdict::Refuse { name, response },
        Err(why) => QueryVerdict::Drop { why },
    }
}

/// The question's name and type, for the log.
pub fn question(query: &[u8]) -> Option<(String, String)> {
    let msg = Message::from_vec(query).ok()?;
    let q = msg.queries().first()?;
    Some((normalize(&q.name().to_ascii()), q.query_type().to_string()))
}

/// An answer of `code` (NXDOMAIN, SERVFAIL) with no records, to the
/// query or response `bytes` (its ID and question kept).
pub fn answer_with(bytes: &[u8], code: ResponseCode) -> Option<Vec<u8>> {
    reply(&Message::from_vec(bytes).ok()?, code).ok()
}

fn reply(msg: &Message, code: ResponseCode) -> Result<Vec<u8>, String> {
    let mut r = Message::new();
    r.set_id(msg.id())
        .set_message_type(MessageType::Response)
        .set_op_code(msg.op_code())
        .set_recursion_desired(msg.recursion_desired())
        .set_recursion_available(true)
        .set_response_code(code);
    for q in msg.queries() {
        r.add_query(q.clone());
    }
    r.to_vec().map_err(|e| e.to_string())
}

/// What the filter does with the upstream's answer to an allowed query.
#[derive(Debug, PartialEq, Eq)]
pub enum AnswerVerdict {
    /// Route these addresses (with their TTL as answered), then pass the
    /// answer on.
    Accept { addresses: Vec<(IpAddr, u32)> },
    /// A name of the CNAME chain is not allowed: answer NXDOMAIN instead.
    Refuse { name: String },
}

/// Follows the CNAME chain from `qname` through the answer section; each
/// name on it must be allowed, and only addresses of names on it count.
pub fn judge_answer(
    allow: &AllowHosts,
    qname: &str,
    response: &[u8],
) -> Result<AnswerVerdict, String> {
    let msg = Message::from_vec(response).map_err(|e| e.to_string())?;
    let mut chain = vec![normalize(qname)];
    // A chain longer than the answer is a loop.
    for _ in 0..msg.answers().len() {
        let last = chain.last().cloned().unwrap_or_default();
        let next = msg.answers().iter().find_map(|r| match r.data() {
            RData::CNAME(c) if normalize(&r.name().to_ascii()) == last => {
                Some(normalize(&c.0.to_ascii()))
            }
            _ => None,
        });
        match next {
            Some(n) if !chain.contains(&n) => {
                if !allow.allows(&n) {
                    return Ok(AnswerVerdict::Refuse { name: n });
                }
                chain.push(n);
            }
            _ => break,
        }
    }
    let addresses = msg
        .answers()
        .iter()
        .filter(|r| chain.contains(&normalize(&r.name().to_ascii())))
        .filter_map(|r| {
            let ip = match (r.record_type(), r.data()) {
                (RecordType::A, RData::A(a)) => IpAddr::V4(a.0),
                (RecordType::AAAA, RData::AAAA(a)) => IpAddr::V6(a.0),
                _ => return None,
            };
            Some((ip, r.ttl()))
        })
        .collect();
    Ok(AnswerVerdict::Accept { addresses })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::rdata::{A, CNAME};
    use hickory_proto::rr::{Name, Record};

    fn allow() -> AllowHosts {
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

    fn query(name: &str) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(4242)
            .set_message_type(MessageType::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        m.to_vec().unwrap()
    }

    #[test]
    fn a_query_for_a_name_not_allowed_is_answered_here_and_never_forwarded() {
        let a = allow();
        assert_eq!(
            judge_query(&a, &query("github.com.")),
            QueryVerdict::Forward {
                name: "github.com".into()
            }
        );
        match judge_query(&a, &query("c2VjcmV0.attacker.example.")) {
            QueryVerdict::Refuse { name, response } => {
                assert_eq!(name, "c2vjcmv0.attacker.example");
                let r = Message::from_vec(&response).unwrap();
                assert_eq!(r.id(), 4242);
                assert_eq!(r.response_code(), ResponseCode::NXDomain);
                assert_eq!(r.message_type(), MessageType::Response);
                assert_eq!(r.queries().len(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            judge_query(&a, b"\x00\x01garbage"),
            QueryVerdict::Drop { .. }
        ));
    }

    fn answer(records: Vec<Record>) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(1).set_message_type(MessageType::Response);
        for r in records {
            m.add_answer(r);
        }
        m.to_vec().unwrap()
    }

    fn a(name: &str, ip: [u8; 4], ttl: u32) -> Record {
        Record::from_rdata(
            Name::from_ascii(name).unwrap(),
            ttl,
            RData::A(A::from(std::net::Ipv4Addr::from(ip))),
        )
    }

    fn cname(name: &str, to: &str) -> Record {
        Record::from_rdata(
            Name::from_ascii(name).unwrap(),
            300,
            RData::CNAME(CNAME(Name::from_ascii(to).unwrap())),
        )
    }

    #[test]
    fn every_name_of_a_cname_chain_must_be_allowed_and_only_its_addresses_count() {
        let a_ = allow();
        let ok = answer(vec![
            cname("github.com.", "lb.githubusercontent.com."),
            a("lb.githubusercontent.com.", [192, 0, 2, 7], 5),
            a("unrelated.example.", [198, 51, 100, 1], 60),
        ]);
        assert_eq!(
            judge_answer(&a_, "github.com", &ok).unwrap(),
            AnswerVerdict::Accept {
                addresses: vec![("192.0.2.7".parse().unwrap(), 5)]
            }
        );
        let bad = answer(vec![
            cname("github.com.", "cdn.elsewhere.example."),
            a("cdn.elsewhere.example.", [192, 0, 2, 8], 60),
        ]);
        assert_eq!(
            judge_answer(&a_, "github.com", &bad).unwrap(),
            AnswerVerdict::Refuse {
                name: "cdn.elsewhere.example".into()
            }
        );
        let long = answer(vec![a("github.com.", [192, 0, 2, 9], 86_400)]);
        assert_eq!(
            judge_answer(&a_, "github.com", &long).unwrap(),
            AnswerVerdict::Accept {
                addresses: vec![("192.0.2.9".parse().unwrap(), 86_400)]
            }
        );
        // A CNAME loop ends; nothing of it is routed.
        let looped = answer(vec![
            cname("github.com.", "x.githubusercontent.com."),
            cname("x.githubusercontent.com.", "github.com."),
        ]);
        assert_eq!(
            judge_answer(&a_, "github.com", &looped).unwrap(),
            AnswerVerdict::Accept { addresses: vec![] }
        );
    }
}
