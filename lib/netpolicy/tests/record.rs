//! `network.json` (`lazaret_protocol::netpolicy::record`) round-trips a
//! derived policy, and reads an older record's seconds as milliseconds.

use lazaret_netpolicy::{derive, DeriveOptions, NetworkPlan};
use lazaret_protocol::netpolicy::record::{read, write, Evidence, NetworkRecord, FILE};

#[test]
fn round_trip() {
    let NetworkPlan::Policy(p) = derive(
        &lazaret_netpolicy::section::Network::default(),
        &DeriveOptions::default(),
    )
    .unwrap() else {
        panic!("no policy")
    };
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join(FILE);
    let mut rec = NetworkRecord::for_policy("id", 3, &p, &p.digest().unwrap());
    rec.evidence = Some(Evidence {
        passed: true,
        error: None,
        recorded_at_ms: 1,
        legacy_recorded_at_secs: None,
        install: serde_json::json!({"ok": true}),
        probe: serde_json::json!({"ok": true}),
    });
    write(&path, &rec).unwrap();
    let back = read(&path).unwrap();
    assert_eq!(back.policy, Some(p));
    assert!(back.routes.iter().any(|r| r == "unreachable 10.0.0.0/8"));
    assert!(back.evidence.unwrap().passed);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"recorded_at_unix_ms\": 1"), "{text}");
    assert!(!text.contains("\"recorded_at\":"), "{text}");
    // A record of an older version: seconds, read as milliseconds.
    std::fs::write(
        &path,
        text.replace("\"recorded_at_unix_ms\"", "\"recorded_at\""),
    )
    .unwrap();
    assert_eq!(read(&path).unwrap().evidence.unwrap().recorded_at_ms, 1000);
}
