use super::*;
use hickory_proto::rr::rdata::{A, CNAME};
use hickory_proto::rr::Record;
use lazaret_config::{Network, NetworkDefault};

fn policy(net: &Network) -> Policy {
    let opts = lazaret_netpolicy::options_for(net, "kubernetes:test").unwrap();
    match lazaret_netpolicy::derive(net, &opts).unwrap() {
        lazaret_netpolicy::NetworkPlan::Policy(p) => p,
        lazaret_netpolicy::NetworkPlan::None => panic!("no policy"),
    }
}

fn names() -> Network {
    Network {
        default: NetworkDefault::Deny,
        allow_hosts: vec![
            "github.com".into(),
            "*.githubusercontent.com".into(),
            "registry.npmjs.org:443".into(),
        ],
        ..Network::default()
    }
}

/// A resolver on 127.0.0.1 that answers from `zone`: name -> records
/// (`A x.x.x.x` or `CNAME name`); NXDOMAIN for the others. Counts the
/// queries it saw.
fn upstream(
    zone: &'static [(&'static str, &'static [&'static str])],
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let q = Message::from_vec(&buf[..n]).unwrap();
            let qname = q.queries()[0].name().clone();
            let mut r = Message::new();
            r.set_id(q.id())
                .set_message_type(MessageType::Response)
                .add_query(q.queries()[0].clone());
            let key = hosts::normalize(&qname.to_ascii());
            match zone.iter().find(|(n, _)| *n == key) {
                None => {
                    r.set_response_code(ResponseCode::NXDomain);
                }
                Some((_, records)) => {
                    let mut owner = qname.clone();
                    for rec in records.iter() {
                        let (kind, value) = rec.split_once(' ').unwrap();
                        let data = match kind {
                            "A" => RData::A(A(value.parse().unwrap())),
                            _ => {
                                RData::CNAME(CNAME(Name::from_ascii(format!("{value}.")).unwrap()))
                            }
                        };
                        r.add_answer(Record::from_rdata(owner.clone(), 60, data));
                        if kind == "CNAME" {
                            owner = Name::from_ascii(format!("{value}.")).unwrap();
                        }
                    }
                }
            }
            let _ = sock.send_to(&r.to_vec().unwrap(), from);
        }
    });
    (addr, seen)
}

const ZONE: &[(&str, &[&str])] = &[
    ("github.com", &["A 140.82.112.3"]),
    ("raw.githubusercontent.com", &["A 185.199.108.133"]),
    (
        "objects.githubusercontent.com",
        &["CNAME evil.example", "A 203.0.113.9"],
    ),
    (
        "private.githubusercontent.com",
        &["A 10.0.0.5", "A 169.254.169.254"],
    ),
    ("registry.npmjs.org", &["A 104.16.0.34"]),
    ("example.org", &["A 93.184.215.14", "A 192.168.1.1"]),
];

#[test]
fn names_go_only_where_allow_hosts_and_the_rules_let_them() {
    let (u, seen) = upstream(ZONE);
    let e = Egress::new(policy(&names()), vec![u]).unwrap();
    assert_eq!(
        e.destinations("github.com", 443).unwrap(),
        vec!["140.82.112.3:443".parse().unwrap()]
    );
    assert_eq!(
        e.destinations("RAW.githubusercontent.com.", 22).unwrap(),
        vec!["185.199.108.133:22".parse().unwrap()]
    );
    // Not allowed: refused before any lookup.
    let before = seen.load(std::sync::atomic::Ordering::SeqCst);
    let why = e.destinations("evil.example", 443).unwrap_err().to_string();
    assert!(why.contains("not in allow_hosts"), "{why}");
    assert!(e.destinations("githubusercontent.com", 443).is_err());
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), before);
    // Allowed on its port only.
    let why = e
        .destinations("registry.npmjs.org", 22)
        .unwrap_err()
        .to_string();
    assert!(why.contains("port"), "{why}");
    assert!(e.destinations("registry.npmjs.org", 443).is_ok());
    // A CNAME out of the allowed names.
    let why = e
        .destinations("objects.githubusercontent.com", 443)
        .unwrap_err()
        .to_string();
    assert!(why.contains("evil.example"), "{why}");
    // Private and metadata addresses, whatever the name.
    let why = e
        .destinations("private.githubusercontent.com", 443)
        .unwrap_err()
        .to_string();
    assert!(why.contains("no address"), "{why}");
    // An address literal: only what a rule allows (here none: default deny).
    assert!(e.destinations("140.82.112.3", 443).is_err());
    assert!(e.destinations("[::1]", 443).is_err());
}

#[test]
fn without_allow_hosts_every_name_resolves_and_the_rules_decide() {
    let (u, _) = upstream(ZONE);
    let e = Egress::new(policy(&Network::default()), vec![u]).unwrap();
    // The private address of the answer is left out.
    assert_eq!(
        e.destinations("example.org", 80).unwrap(),
        vec!["93.184.215.14:80".parse().unwrap()]
    );
    assert!(e.destinations("8.8.8.8", 53).is_ok());
    for denied in [
        "10.1.2.3",
        "127.0.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
    ] {
        let why = e.destinations(denied, 80).unwrap_err().to_string();
        assert!(why.contains("denied by"), "{denied}: {why}");
    }
    assert_eq!(
        e.destinations("10.1.2.3", 80).unwrap_err().to_string(),
        "10.1.2.3 is denied by 10.0.0.0/8 (built-in: RFC 1918 private)"
    );
    let why = e
        .destinations("nowhere.example", 80)
        .unwrap_err()
        .to_string();
    assert!(why.contains("no address"), "{why}");
}

#[test]
fn dns_refuses_names_and_chains_not_allowed() {
    let (u, seen) = upstream(ZONE);
    let e = Egress::new(policy(&names()), vec![u]).unwrap();
    let code = |bytes: &[u8]| Message::from_vec(bytes).unwrap().response_code();
    let (a, log) = e.dns(&a_query("evil.example").unwrap());
    assert_eq!(code(&a.unwrap()), ResponseCode::NXDomain, "{log}");
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "it never left"
    );
    let (a, _) = e.dns(&a_query("github.com").unwrap());
    let m = Message::from_vec(&a.unwrap()).unwrap();
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert_eq!(
        a_records(&m.to_vec().unwrap()),
        vec![Ipv4Addr::new(140, 82, 112, 3)]
    );
    let (a, log) = e.dns(&a_query("objects.githubusercontent.com").unwrap());
    assert_eq!(code(&a.unwrap()), ResponseCode::NXDomain, "{log}");
    // Not a query: dropped.
    assert!(e.dns(b"\x00\x01garbage").0.is_none());
}

#[test]
fn the_policy_file_must_match_its_digest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.json");
    let p = policy(&names());
    let text = serde_json::to_string_pretty(&p).unwrap();
    std::fs::write(&path, &text).unwrap();
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    let e = Egress::load(&path, &digest, vec![]).unwrap();
    assert_eq!(e.policy, p);
    let err = Egress::load(&path, &"0".repeat(64), vec![]).err().unwrap();
    assert!(err.to_string().contains("not the --digest"), "{err}");
}

#[test]
fn requests_and_resolv_conf_parse() {
    assert_eq!(
        parse_connect("CONNECT github.com:443 HTTP/1.1\r\nHost: github.com:443").unwrap(),
        ("github.com".into(), 443)
    );
    for (head, why) in [
        (
            "GET http://example.org/ HTTP/1.1",
            "only CONNECT is proxied (HTTPS, or any TCP through CONNECT), not GET",
        ),
        ("CONNECT github.com HTTP/1.1", "CONNECT github.com: no port"),
        (
            "CONNECT github.com:0 HTTP/1.1",
            "CONNECT github.com:0: bad port",
        ),
        ("CONNECT :443 HTTP/1.1", "CONNECT :443: no host"),
        ("", "not an HTTP request"),
    ] {
        assert_eq!(parse_connect(head).unwrap_err().to_string(), why, "{head}");
    }
    assert_eq!(
        nameservers("# x\nnameserver 10.96.0.10\nnameserver ::1\nsearch a\nnameserver 1.1.1.1\n"),
        vec![
            "10.96.0.10:53".parse::<SocketAddr>().unwrap(),
            "1.1.1.1:53".parse().unwrap()
        ]
    );
}
