//! A genuine or forged peer on a Domain's control socket, for the
//! forged-peer tests (`tools/tests/tests/trust.rs`). Run it as the developer's
//! user: the peer-uid check (SR-10) comes before everything here.
//!
//! `lazaret-forge-peer DOMAIN_ROOT MODE [ARG]`, MODE one of:
//! `genuine` (connects as the CLI does and asks for the Domain's status),
//! `save FILE` (the same, saving the certificate and key it was issued
//! in FILE),
//! `replay FILE` (registers, then presents FILE's certificate),
//! `sandbox` (presents the Agent Sandbox's certificate and key),
//! `self-signed` (a certificate with this generation's claims from a CA
//! of its own), `alpn NAME`, `no-alpn`, `plain` (a session `Hello` with
//! no TLS). Prints `accepted ...` or `refused ...` (the client's view; the
//! coordinator logs its reason).

use lazaret_protocol::frame::{read_frame, write_frame};
use lazaret_protocol::session::{Control, Hello, ServerMsg};
use lazaret_protocol::trust::manifest::{Published, Verified};
use lazaret_protocol::trust::Role;
use lazaret_trust::register::{self, client_handshake};
use lazaret_trust::{tls, Key, TrustAnchor};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Asks for the status over `s`; the answer, or why there was none.
fn ask(s: &mut (impl Read + Write)) -> Result<String, String> {
    write_frame(s, &Hello::control(Control::Status)).map_err(|e| e.to_string())?;
    match read_frame::<_, ServerMsg>(s) {
        Ok(ServerMsg::Status(st)) => Ok(format!("generation {}", st.generation)),
        Ok(other) => Ok(format!("{other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

fn out(r: Result<String, String>) {
    match r {
        Ok(s) => println!("accepted {s}"),
        Err(e) => println!("refused {e}"),
    }
}

fn load(file: &str) -> (Vec<u8>, Key) {
    let text = std::fs::read_to_string(file).expect("credential file");
    let mut lines = text.lines();
    let cert = hex::decode(lines.next().unwrap()).unwrap();
    let seed: [u8; 32] = hex::decode(lines.next().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    (cert, Key::from_seed(seed))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let root = Path::new(&args[1]);
    let mode = args[2].as_str();
    let arg = args.get(3).cloned().unwrap_or_default();
    let run = root.join("run");
    let sock = lazaret_helpers::sockpath::short(&run, "coordinator.sock").unwrap();
    let mut sock = match UnixStream::connect(&sock.path) {
        Ok(s) => s,
        Err(e) => return out(Err(format!("connect: {e}"))),
    };
    sock.set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    if mode == "plain" {
        return out(ask(&mut sock));
    }
    let domain_id = root.file_name().unwrap().to_str().unwrap();
    let trust: Verified = match Published::read_verified(&run.join("trust"), Some(domain_id)) {
        Ok(t) => t,
        Err(e) => return out(Err(format!("the published Trust Anchor: {e}"))),
    };
    if mode == "genuine" {
        return out(match register::connect(sock, &trust) {
            Ok((mut s, _)) => ask(&mut s),
            Err(e) => Err(e.to_string()),
        });
    }
    let issued = register::register(&mut sock).expect("registration");
    let mut alpn = vec![tls::ALPN.to_vec()];
    let (cert, key) = match mode {
        "save" => {
            let seed = *issued.key.pair.sk.seed();
            std::fs::write(
                &arg,
                format!(
                    "{}\n{}\n",
                    hex::encode(&issued.certificate),
                    hex::encode(seed)
                ),
            )
            .unwrap();
            (issued.certificate, issued.key)
        }
        "replay" => load(&arg),
        "sandbox" => {
            let control = run.join("control");
            let cert = std::fs::read(control.join("sandbox-certificate")).unwrap();
            let sk = std::fs::read(control.join("request-key")).unwrap();
            (cert, Key::from_seed(sk[..32].try_into().unwrap()))
        }
        "self-signed" => {
            let fake =
                TrustAnchor::new(trust.manifest.generation.clone(), "default", "forger").unwrap();
            let key = Key::generate();
            let claims = fake.claims(Role::ClientCli, &issued.client_id, Some(&issued.session_id));
            (fake.issue(&key.public(), &claims, None).unwrap(), key)
        }
        "alpn" => {
            alpn = vec![arg.into_bytes()];
            (issued.certificate, issued.key)
        }
        "no-alpn" => {
            alpn = vec![];
            (issued.certificate, issued.key)
        }
        other => panic!("unknown mode {other}"),
    };
    let config = tls::client_config(&trust.ca_certificate, &cert, &key, alpn).unwrap();
    let mut conn = match client_handshake(&mut sock, config, domain_id) {
        Ok(c) => c,
        Err(e) => return out(Err(format!("at the handshake: {e}"))),
    };
    // TLS 1.3: a client finishes its handshake before the server has
    // judged its certificate; a refusal arrives as an alert or end of file.
    out(ask(&mut rustls::Stream::new(&mut conn, &mut sock)));
}
