//! The coordinator's hold on its generation's Trust Anchor: publishing
//! its public half, authenticating each control connection, and
//! invalidating it first when the Domain fails or stops.

use lazaret_protocol::trust::manifest::FILE_NAME;
use lazaret_trust::register;
use lazaret_trust::{TrustAnchor, TrustError};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct ControlTrust {
    anchor: Arc<TrustAnchor>,
    config: Arc<rustls::ServerConfig>,
    valid: AtomicBool,
    /// The published copy the `lazaret` CLI pins, in the run directory.
    pin: PathBuf,
}

/// Why the Trust Anchor does not serve, or refused a connection.
#[derive(Debug, thiserror::Error)]
pub enum ControlTrustError {
    #[error("the Trust Anchor: {0}")]
    ServerConfig(TrustError),
    #[error("the Trust Anchor of this generation was invalidated (the Domain is stopping)")]
    Invalidated,
    /// The connection did not register or authenticate.
    #[error(transparent)]
    Refused(TrustError),
}

impl ControlTrust {
    pub fn new(anchor: Arc<TrustAnchor>, run_dir: &Path) -> Result<Self, ControlTrustError> {
        Ok(Self {
            config: anchor
                .server_config()
                .map_err(ControlTrustError::ServerConfig)?,
            anchor,
            valid: AtomicBool::new(true),
            pin: pin_path(run_dir),
        })
    }

    /// Registers and authenticates a new connection as Client Session
    /// `sid`; the plain end of its TLS stream. Refused once invalidated.
    pub fn accept(&self, stream: UnixStream, sid: &str) -> Result<UnixStream, ControlTrustError> {
        if !self.valid.load(Ordering::SeqCst) {
            return Err(ControlTrustError::Invalidated);
        }
        register::accept(&self.anchor, &self.config, stream, sid)
            .map(|a| a.stream)
            .map_err(ControlTrustError::Refused)
    }

    /// No connection is authenticated from here on, and the published
    /// pin is withdrawn (the run directory goes at teardown).
    pub fn invalidate(&self) {
        self.valid.store(false, Ordering::SeqCst);
        withdraw(&self.pin);
    }
}

/// Where the CLI finds the pinned Trust Anchor of a Domain's run.
pub fn pin_path(run_dir: &Path) -> PathBuf {
    run_dir.join(FILE_NAME)
}

/// Removes the published pin (a Domain failing or stopping withdraws it
/// before anything else).
pub fn withdraw(pin: &Path) {
    match std::fs::remove_file(pin) {
        Ok(()) => crate::lifecycle::log("Trust Anchor withdrawn"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => crate::lifecycle::log(format!("cannot withdraw {}: {e}", pin.display())),
    }
}
