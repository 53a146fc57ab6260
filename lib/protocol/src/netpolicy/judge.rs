//! What the filtering resolver decides about each query from the sandbox
//! and each answer from upstream, against the policy's `allow_hosts`
//! ([`AllowHosts`]): pure, table-tested, fuzzed (`lazaret-fuzz`). Here,
//! beside the policy it applies, not in `bin/dns-filter`, because the
//! egress Pod of `lazaret export kubernetes` (`bin/egress`) decides the
//! same way, and a `bin/` crate links no other.
//!
//! A query for a name no entry matches is answered NXDOMAIN here and never
//! leaves; an answer is accepted only if every name of its CNAME chain is
//! allowed, and only the addresses of names on the chain count.

use super::hosts::{normalize, AllowHosts};
pub use hickory_proto::op::ResponseCode;
use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::{RData, RecordType};
use hickory_proto::ProtoError;
use std::net::IpAddr;

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
        Err(e) => QueryVerdict::Drop { why: e.to_string() },
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

fn reply(msg: &Message, code: ResponseCode) -> Result<Vec<u8>, ProtoError> {
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
    r.to_vec()
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
) -> Result<AnswerVerdict, ProtoError> {
    let msg = Message::from_vec(response)?;
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
    use crate::netpolicy::hosts::tests::allow;
    use hickory_proto::op::Query;
    use hickory_proto::rr::rdata::{A, CNAME};
    use hickory_proto::rr::{Name, Record};

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
