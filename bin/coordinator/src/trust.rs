//! The coordinator's hold on its generation's Trust Anchor: publishing
//! its public half, authenticating each control connection, and
//! invalidating it first when the Domain fails or stops.

use lazaret_protocol::trust::manifest::FILE_NAME;
use lazaret_trust::register;
use lazaret_trust::TrustAnchor;
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

impl ControlTrust {
    pub fn new(anchor: Arc<TrustAnchor>, run_dir: &Path) -> Result<Self, String> {
        Ok(Self {
            config: anchor
                .server_config()
                .map_err(|e| format!("the Trust Anchor: {e}"))?,
            anchor,
            valid: AtomicBool::new(true),
            pin: pin_path(run_dir),
        })
    }

    /// Registers and authenticates a new connection as Client Session
    /// `sid`; the plain end of its TLS stream. Refused once invalidated.
    pub fn accept(&self, stream: UnixStream, sid: &str) -> Result<UnixStream, String> {
        if !self.valid.load(Ordering::SeqCst) {
            return Err(
                "the Trust Anchor of this generation was invalidated (the Domain is stopping)"
                    .into(),
            );
        }
        register::accept(&self.anchor, &self.config, stream, sid)
            .map(|a| a.stream)
            .map_err(|e| e.to_string())
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
