//! The control connection in one process: a coordinator thread accepts on
//! one end of a socket pair, clients (genuine and forged) on the other.

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lazaret_protocol::frame::write_frame;
use lazaret_protocol::session::{Hello, SessionEnv};
use lazaret_protocol::trust::manifest::{Published, Verified};
use lazaret_protocol::trust::{GenerationId, Role};
use lazaret_trust::register::{self, client_handshake};
use lazaret_trust::{new_generation, tls, Key, TrustAnchor, TrustError};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

fn anchor(domain: &str, number: u64) -> TrustAnchor {
    TrustAnchor::new(
        new_generation(domain, number).unwrap(),
        "default",
        "coord-1",
    )
    .unwrap()
}

fn verified(a: &TrustAnchor) -> Verified {
    Published::decode(&a.published().encode())
        .unwrap()
        .verify(&a.generation().domain_id)
        .unwrap()
}

/// Serves one connection as the coordinator does, echoing what it reads.
fn serve(a: Arc<TrustAnchor>, sock: UnixStream) -> std::thread::JoinHandle<Result<String, String>> {
    std::thread::spawn(move || {
        let config = a.server_config().unwrap();
        match register::accept(&a, &config, sock, "sess-1") {
            Ok(mut acc) => {
                let mut buf = [0u8; 5];
                acc.stream.read_exact(&mut buf).map_err(|e| e.to_string())?;
                acc.stream.write_all(&buf).map_err(|e| e.to_string())?;
                Ok(acc.claims.component_id)
            }
            Err(e) => Err(e.to_string()),
        }
    })
}

#[test]
fn the_cli_and_coordinator_authenticate_each_other_and_talk_inside_tls() {
    let a = Arc::new(anchor("dom", 1));
    let (c, s) = UnixStream::pair().unwrap();
    let server = serve(a.clone(), s);
    let (mut stream, sid) = register::connect(c, &verified(&a)).unwrap();
    assert_eq!(sid, "sess-1");
    stream.write_all(b"hello").unwrap();
    let mut back = [0u8; 5];
    stream.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"hello");
    assert!(server.join().unwrap().is_ok());
    // The coordinator is gone: the client reads end of file.
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

/// A client that registers, then presents `present` (or its own issued
/// certificate) with `alpn`; returns the coordinator's error.
fn forged(
    a: &Arc<TrustAnchor>,
    present: Option<(Vec<u8>, Key, Vec<u8>)>,
    alpn: Vec<Vec<u8>>,
) -> String {
    let (mut c, s) = UnixStream::pair().unwrap();
    let server = serve(a.clone(), s);
    let issued = register::register(&mut c).unwrap();
    let (cert, key, ca) = present.unwrap_or((
        issued.certificate,
        issued.key,
        a.published().ca_certificate.clone(),
    ));
    let config = tls::client_config(&ca, &cert, &key, alpn).unwrap();
    let client = client_handshake(&mut c, config, &a.generation().domain_id);
    let server = server.join().unwrap();
    assert!(server.is_err(), "the coordinator accepted it");
    if let Ok(mut conn) = client {
        // TLS 1.3: the client finishes before the server checks its
        // certificate; the server's refusal arrives as an alert.
        let mut buf = [0u8; 1];
        let mut s = rustls::Stream::new(&mut conn, &mut c);
        assert!(s.read(&mut buf).map(|n| n == 0).unwrap_or(true));
    }
    server.unwrap_err()
}

#[test]
fn the_wrong_alpn_or_none_is_refused() {
    let a = Arc::new(anchor("dom", 1));
    let e = forged(&a, None, vec![b"h2".to_vec()]);
    assert!(
        e.contains("ALPN") || e.contains("application protocol"),
        "{e}"
    );
    let e = forged(&a, None, vec![]);
    assert!(e.contains("ALPN"), "{e}");
}

#[test]
fn a_certificate_of_another_role_domain_generation_session_or_ca_is_refused() {
    let a = Arc::new(anchor("dom", 2));
    let alpn = || vec![tls::ALPN.to_vec()];
    let ca = a.published().ca_certificate.clone();

    // Another role: the Agent Sandbox's certificate, from the same CA.
    let k = Key::generate();
    let c = a
        .issue(&k.public(), &a.claims(Role::AgentSandbox, "sb", None), None)
        .unwrap();
    let e = forged(&a, Some((c, k, ca.clone())), alpn());
    assert!(e.contains("role AgentSandbox"), "{e}");

    // Another session: a Client CLI certificate of this generation, for
    // another Session ID.
    let k = Key::generate();
    let c = a
        .issue(
            &k.public(),
            &a.claims(Role::ClientCli, "cli-x", Some("sess-0")),
            None,
        )
        .unwrap();
    let e = forged(&a, Some((c, k, ca.clone())), alpn());
    assert!(
        e.contains("another component") || e.contains("another Client Session"),
        "{e}"
    );

    // The previous generation and another Domain: other CAs.
    for other in [anchor("dom", 1), anchor("other", 2)] {
        let k = Key::generate();
        let c = other
            .issue(
                &k.public(),
                &other.claims(Role::ClientCli, "cli", Some("sess-1")),
                None,
            )
            .unwrap();
        // The forger trusts the real CA, so the handshake reaches the
        // coordinator's check of the client certificate.
        let e = forged(&a, Some((c, k, ca.clone())), alpn());
        assert!(
            e.contains("not issued by this generation's Trust Anchor"),
            "{e}"
        );
    }

    // A self-made CA with claims copied from the real generation.
    let fake = TrustAnchor::new(
        GenerationId {
            ..a.generation().clone()
        },
        "default",
        "coord-1",
    )
    .unwrap();
    let k = Key::generate();
    let c = fake
        .issue(
            &k.public(),
            &fake.claims(Role::ClientCli, "cli", Some("sess-1")),
            None,
        )
        .unwrap();
    let e = forged(&a, Some((c, k, ca)), alpn());
    assert!(
        e.contains("not issued by this generation's Trust Anchor"),
        "{e}"
    );
}

#[test]
fn plain_and_unregistered_connections_are_refused_by_name() {
    let a = Arc::new(anchor("dom", 1));
    // A plain session client: Hello first.
    let (mut c, s) = UnixStream::pair().unwrap();
    let server = serve(a.clone(), s);
    let hello = Hello {
        version: lazaret_protocol::session::PROTOCOL_VERSION,
        config_fingerprint: "x".repeat(64),
        argv: Some(vec!["true".into()]),
        tty: None,
        workdir: None,
        workdir_from: lazaret_protocol::session::WorkdirFrom::Cwd,
        env: SessionEnv::default(),
        control: None,
        ports: Vec::new(),
        detach: false,
        attach: None,
    };
    write_frame(&mut c, &hello).unwrap();
    let e = server.join().unwrap().unwrap_err();
    assert!(e.contains("plain (non-TLS)"), "{e}");

    // TLS straight away, without registering.
    let (mut c, s) = UnixStream::pair().unwrap();
    let server = serve(a.clone(), s);
    let k = Key::generate();
    let cert = a
        .issue(
            &k.public(),
            &a.claims(Role::ClientCli, "c", Some("sess-1")),
            None,
        )
        .unwrap();
    let config = tls::client_config(
        &a.published().ca_certificate,
        &cert,
        &k,
        vec![tls::ALPN.to_vec()],
    )
    .unwrap();
    let t = std::thread::spawn(move || {
        let _ = client_handshake(&mut c, config, "dom");
    });
    let e = server.join().unwrap().unwrap_err();
    assert!(e.contains("did not register"), "{e}");
    t.join().unwrap();
}

#[test]
fn the_cli_refuses_a_coordinator_that_is_not_the_published_one() {
    // A coordinator of another generation answers on the socket the CLI
    // pinned this generation for.
    let pinned = anchor("dom", 3);
    let impostor = Arc::new(anchor("dom", 3));
    let (c, s) = UnixStream::pair().unwrap();
    let server = serve(impostor, s);
    let e = match register::connect(c, &verified(&pinned)) {
        Err(e) => e,
        Ok(_) => panic!("the CLI accepted an impostor"),
    };
    assert!(matches!(e, TrustError::Tls(_)), "{e}");
    assert!(
        e.to_string()
            .contains("not issued by this generation's Trust Anchor"),
        "{e}"
    );
    let _ = server.join();
}

#[test]
fn a_published_anchor_verifies_and_any_change_is_caught() {
    let a = anchor("dom", 1);
    let p = a.published().clone();
    assert!(p.verify("dom").is_ok());
    assert!(p
        .verify("other")
        .unwrap_err()
        .to_string()
        .contains("Domain"));
    let mut q = p.clone();
    q.ca_certificate.push(0);
    assert!(q.verify("dom").is_err());
    let mut q = p.clone();
    *q.manifest.manifest.last_mut().unwrap() ^= 1;
    assert!(q.verify("dom").is_err());
    let mut q = p.clone();
    q.coordinator_protocol.public_key[0] ^= 1;
    assert!(q.verify("dom").is_err());
    // Another anchor's credential under this manifest.
    let mut q = p;
    q.coordinator_protocol = anchor("dom", 1).published().coordinator_protocol.clone();
    assert!(q.verify("dom").is_err());
}

#[test]
fn bytes_that_arrive_with_the_last_handshake_flight_are_delivered() {
    // The client's Finished and its first record in one write: the
    // coordinator's handshake reads both, and the pump must hand the
    // record on without waiting for more bytes on the socket.
    let a = Arc::new(anchor("dom", 1));
    let (mut c, s) = UnixStream::pair().unwrap();
    let server = serve(a.clone(), s);
    let issued = register::register(&mut c).unwrap();
    let config = tls::client_config(
        &a.published().ca_certificate,
        &issued.certificate,
        &issued.key,
        vec![tls::ALPN.to_vec()],
    )
    .unwrap();
    let mut conn = rustls::ClientConnection::new(config, tls::server_name("dom").unwrap()).unwrap();
    while conn.is_handshaking() {
        if conn.wants_write() {
            conn.write_tls(&mut c).unwrap();
        } else {
            conn.read_tls(&mut c).unwrap();
            conn.process_new_packets().unwrap();
        }
    }
    conn.writer().write_all(b"early").unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    c.write_all(&out).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut back = [0u8; 5];
    rustls::Stream::new(&mut conn, &mut c)
        .read_exact(&mut back)
        .unwrap();
    assert_eq!(&back, b"early");
    assert!(server.join().unwrap().is_ok());
}
