//! A control connection from its first byte: the Client CLI registers a
//! public key and gets a certificate bound to a new Client CLI ID and
//! Session ID, then both sides run TLS 1.3 with mutual authentication
//! and check the other's identity tuple. What follows is the session
//! protocol, over the plain end of a [`crate::pump`].

use lazaret_protocol::frame::{read_frame, write_frame};
use lazaret_protocol::session::{Register, Registered, MAX_REGISTER, PROTOCOL_VERSION};
use lazaret_protocol::trust::manifest::Verified;
use lazaret_protocol::trust::{Claims, Expected, Role};
use rustls::{ClientConnection, ServerConfig, ServerConnection};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use crate::anchor::Key;
use crate::{tls, TrustAnchor, TrustError};

/// How long registration and handshake may take, each side.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection the coordinator accepted: the plain end of its pump and
/// the identity it authenticated.
pub struct Accepted {
    pub stream: UnixStream,
    pub claims: Claims,
}

/// Reads the [`Register`] record, telling a TLS client that skipped it
/// and a plain session client apart in the error.
fn read_register(sock: &mut UnixStream) -> Result<Register, TrustError> {
    let mut len = [0u8; 4];
    tls::read_exact(sock, &mut len)?;
    if len[0] == 0x16 && len[1] == 0x03 {
        return Err(TrustError::Refused(
            "a TLS connection that did not register first".into(),
        ));
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_REGISTER {
        return Err(TrustError::Refused(format!(
            "a plain (non-TLS) connection: its first record ({n} bytes) is not a registration"
        )));
    }
    let mut body = vec![0u8; n];
    tls::read_exact(sock, &mut body)?;
    let plain = || {
        TrustError::Refused(
            "a plain (non-TLS) connection: its first record is not a registration".into(),
        )
    };
    // Exactly one record: postcard would take a prefix of another one.
    let (r, rest) = postcard::take_from_bytes::<Register>(&body).map_err(|_| plain())?;
    if !rest.is_empty() {
        return Err(plain());
    }
    if r.version != PROTOCOL_VERSION {
        return Err(TrustError::Refused(format!(
            "registration of protocol version {}, not {PROTOCOL_VERSION}",
            r.version
        )));
    }
    Ok(r)
}

fn random_hex() -> Result<String, TrustError> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(|e| TrustError::Random(e.to_string()))?;
    Ok(hex::encode(b))
}

/// The coordinator's side of a new connection (already checked to come
/// from the developer's uid). `session_id` is the Session ID the
/// connection gets. Every refusal is an error naming why, for the log.
pub fn accept(
    anchor: &TrustAnchor,
    config: &Arc<ServerConfig>,
    mut sock: UnixStream,
    session_id: &str,
) -> Result<Accepted, TrustError> {
    let io = |e: std::io::Error| TrustError::Io(e.to_string());
    sock.set_nonblocking(false).map_err(io)?;
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io)?;
    sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(io)?;
    let reg = read_register(&mut sock)?;
    let client_id = random_hex()?;
    let issued = anchor.issue(
        &reg.public_key,
        &anchor.claims(Role::ClientCli, &client_id, Some(session_id)),
        None,
    )?;
    write_frame(
        &mut tls::NoSigPipe(&sock),
        &Registered::Issued {
            certificate: issued.clone(),
            client_id: client_id.clone(),
            session_id: session_id.to_string(),
        },
    )
    .map_err(|e| TrustError::Io(e.to_string()))?;
    let mut conn =
        ServerConnection::new(config.clone()).map_err(|e| TrustError::Tls(e.to_string()))?;
    tls::handshake(&mut conn, &mut sock)?;
    let (leaf, claims) = tls::peer_claims(
        &conn,
        &Expected {
            role: Role::ClientCli,
            generation: anchor.generation(),
            component_id: Some(&client_id),
            session_id: Some(session_id),
        },
    )?;
    if leaf != issued {
        return Err(TrustError::Identity(
            "a Client CLI certificate not issued on this connection".into(),
        ));
    }
    sock.set_write_timeout(None).map_err(io)?;
    let stream = crate::pump::spawn(rustls::Connection::Server(conn), sock).map_err(io)?;
    Ok(Accepted { stream, claims })
}

/// What a client registration returned.
pub struct Issued {
    pub key: Key,
    pub certificate: Vec<u8>,
    pub client_id: String,
    pub session_id: String,
}

/// Registers a new key on `sock` (the first step of a client).
pub fn register(sock: &mut UnixStream) -> Result<Issued, TrustError> {
    let key = Key::generate();
    write_frame(
        &mut tls::NoSigPipe(sock),
        &Register {
            version: PROTOCOL_VERSION,
            public_key: key.public(),
        },
    )
    .map_err(|e| TrustError::Io(format!("registration: {e}")))?;
    match read_frame::<_, Registered>(sock)
        .map_err(|e| TrustError::Io(format!("registration: {e}")))?
    {
        Registered::Issued {
            certificate,
            client_id,
            session_id,
        } => Ok(Issued {
            key,
            certificate,
            client_id,
            session_id,
        }),
        Registered::Refused { reason } => Err(TrustError::Refused(reason)),
    }
}

/// A TLS client handshake on `sock` with `config`, to the coordinator of
/// `domain_id`.
pub fn client_handshake(
    sock: &mut UnixStream,
    config: Arc<rustls::ClientConfig>,
    domain_id: &str,
) -> Result<ClientConnection, TrustError> {
    let mut conn = ClientConnection::new(config, tls::server_name(domain_id)?)
        .map_err(|e| TrustError::Tls(e.to_string()))?;
    tls::handshake(&mut conn, sock)?;
    Ok(conn)
}

/// The `lazaret` CLI's side: registers, authenticates the coordinator as
/// the pinned generation's Session Coordinator (its CA, its exact TLS
/// leaf, its claims), and returns the plain end with the Session ID.
pub fn connect(mut sock: UnixStream, trust: &Verified) -> Result<(UnixStream, String), TrustError> {
    let io = |e: std::io::Error| TrustError::Io(e.to_string());
    sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(io)?;
    sock.set_write_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(io)?;
    let issued = register(&mut sock)?;
    let config = tls::client_config(
        &trust.ca_certificate,
        &issued.certificate,
        &issued.key,
        vec![tls::ALPN.to_vec()],
    )?;
    let domain_id = &trust.manifest.generation.domain_id;
    let conn = client_handshake(&mut sock, config, domain_id)?;
    let (leaf, _) = tls::peer_claims(
        &conn,
        &Expected {
            role: Role::SessionCoordinator,
            generation: &trust.manifest.generation,
            component_id: Some(&trust.manifest.coordinator_id),
            session_id: None,
        },
    )?;
    if leaf != trust.coordinator_tls {
        return Err(TrustError::Identity(
            "the coordinator presented a TLS leaf other than the one its Domain published".into(),
        ));
    }
    sock.set_write_timeout(None).map_err(io)?;
    let stream = crate::pump::spawn(rustls::Connection::Client(conn), sock).map_err(io)?;
    Ok((stream, issued.session_id))
}
