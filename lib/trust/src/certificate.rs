//! Reading the Lazaret claims of a certificate (its claims URI).

use lazaret_protocol::trust::claims::{Claims, CLAIMS_URI_PREFIX};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::TrustError;

/// The claims of a certificate, unverified: call it only on a certificate
/// whose chain was verified (by the TLS handshake).
pub fn claims_of(der: &[u8]) -> Result<Claims, TrustError> {
    let bad = |why: String| TrustError::Certificate(why);
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| bad(format!("unreadable certificate: {e}")))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| bad(format!("bad subject alternative names: {e}")))?
        .ok_or_else(|| bad("a certificate without Lazaret claims".into()))?;
    let mut found = None;
    for name in &san.value.general_names {
        if let GeneralName::URI(u) = name {
            if u.starts_with(CLAIMS_URI_PREFIX) {
                if found.is_some() {
                    return Err(bad("a certificate with two sets of Lazaret claims".into()));
                }
                found = Some(
                    Claims::from_uri(u).ok_or_else(|| bad("malformed Lazaret claims".into()))?,
                );
            }
        }
    }
    found.ok_or_else(|| bad("a certificate without Lazaret claims".into()))
}
