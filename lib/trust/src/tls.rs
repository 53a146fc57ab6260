//! TLS 1.3 on the host-private control socket: the generation's CA only,
//! ALPN `lazaret-control/1`, mutual authentication, no early data, no
//! resumption. The session protocol then runs unchanged over a plain
//! socket pair that [`crate::pump`] joins to the TLS stream.

use lazaret_protocol::trust::{Claims, Expected};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use crate::anchor::Key;
use crate::TrustError;

/// The one application protocol spoken on the control socket.
pub const ALPN: &[u8] = b"lazaret-control/1";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca: &[u8]) -> Result<Arc<RootCertStore>, TrustError> {
    let mut r = RootCertStore::empty();
    r.add(CertificateDer::from(ca.to_vec()))
        .map_err(|e| TrustError::Tls(format!("the generation CA: {e}")))?;
    Ok(Arc::new(r))
}

fn key_der(key: &Key) -> PrivateKeyDer<'static> {
    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.pkcs8()))
}

fn tls_err(e: impl std::fmt::Display) -> TrustError {
    TrustError::Tls(e.to_string())
}

/// The coordinator's side: client certificates of the generation CA are
/// required; which role and tuple they must carry is checked after the
/// handshake ([`peer_claims`]).
pub fn server_config(ca: &[u8], leaf: &[u8], key: &Key) -> Result<Arc<ServerConfig>, TrustError> {
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider())
            .build()
            .map_err(tls_err)?;
    let mut c = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_err)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![CertificateDer::from(leaf.to_vec())], key_der(key))
        .map_err(tls_err)?;
    c.alpn_protocols = vec![ALPN.to_vec()];
    c.max_early_data_size = 0;
    c.send_tls13_tickets = 0;
    c.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    Ok(Arc::new(c))
}

/// A client's side: the pinned generation CA only, its own certificate,
/// and the given ALPN list (tests offer others).
pub fn client_config(
    ca: &[u8],
    cert: &[u8],
    key: &Key,
    alpn: Vec<Vec<u8>>,
) -> Result<Arc<ClientConfig>, TrustError> {
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_err)?
        .with_root_certificates(roots(ca)?)
        .with_client_auth_cert(vec![CertificateDer::from(cert.to_vec())], key_der(key))
        .map_err(tls_err)?;
    c.alpn_protocols = alpn;
    c.resumption = rustls::client::Resumption::disabled();
    c.enable_early_data = false;
    Ok(Arc::new(c))
}

/// A socket that is written with `MSG_NOSIGNAL`: a peer that went away
/// is an `EPIPE` error, never a SIGPIPE, which would kill a `lazaret`
/// command that restored the signal's default action (every command but
/// `run` does, to end quietly in a pipe).
pub struct NoSigPipe<'a>(pub &'a UnixStream);

impl std::io::Write for NoSigPipe<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        rustix::net::send(self.0, buf, rustix::net::SendFlags::NOSIGNAL).map_err(Into::into)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Read for NoSigPipe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self.0).read(buf)
    }
}

/// Runs a handshake to its end on a blocking stream.
pub fn handshake<C, S>(
    conn: &mut C,
    sock: &mut std::os::unix::net::UnixStream,
) -> Result<(), TrustError>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<S>>,
    S: rustls::SideData,
{
    while conn.is_handshaking() {
        conn.complete_io(&mut NoSigPipe(sock)).map_err(|e| {
            match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(rustls::Error::NoApplicationProtocol) => TrustError::Tls(format!(
                    "handshake: the peer did not offer ALPN {}",
                    String::from_utf8_lossy(ALPN)
                )),
                Some(rustls::Error::InvalidCertificate(why)) => TrustError::Tls(format!(
                    "handshake: the peer's certificate was not issued by this generation's Trust Anchor ({why:?})"
                )),
                Some(_) => TrustError::Tls(format!("handshake: {e}")),
                // Not a TLS failure: the connection was lost or timed out.
                None => TrustError::Io(format!("handshake: {e}")),
            }
        })?;
    }
    // The last flight (the client's Finished) may still be buffered.
    while conn.wants_write() {
        conn.write_tls(&mut NoSigPipe(sock))
            .map_err(|e| TrustError::Io(format!("handshake: {e}")))?;
    }
    if conn.alpn_protocol() != Some(ALPN) {
        return Err(TrustError::Tls(format!(
            "the peer did not agree on ALPN {}",
            String::from_utf8_lossy(ALPN)
        )));
    }
    Ok(())
}

/// The verified peer's end-entity certificate and its claims, checked
/// against `want`.
pub fn peer_claims<S: rustls::SideData>(
    conn: &rustls::ConnectionCommon<S>,
    want: &Expected<'_>,
) -> Result<(Vec<u8>, Claims), TrustError> {
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or_else(|| TrustError::Tls("the peer presented no certificate".into()))?
        .to_vec();
    let claims = crate::certificate::claims_of(&leaf)?;
    if let Some(why) = claims.mismatch(want) {
        return Err(TrustError::Identity(why));
    }
    Ok((leaf, claims))
}

/// The name a client checks in the coordinator's TLS leaf.
pub fn server_name(domain_id: &str) -> Result<ServerName<'static>, TrustError> {
    ServerName::try_from(crate::anchor::coordinator_server_name(domain_id))
        .map_err(|e| TrustError::Tls(format!("server name: {e}")))
}

/// A blocking read of exactly `buf.len()` bytes, for the registration.
pub(crate) fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<(), TrustError> {
    r.read_exact(buf)
        .map_err(|e| TrustError::Io(format!("registration: {e}")))
}
