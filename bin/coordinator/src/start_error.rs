//! Why a Domain generation did not start. Reported once, at the top of
//! the coordinator ([`crate::lifecycle::main`]): to the CLI as
//! `CoordinatorReadiness::Failed` (which says "the sandbox could not
//! start: " before it) and in `coordinator.log`.

use lazaret_helpers::channel::ChannelError;
use lazaret_helpers::memfd::MemfdError;
use lazaret_protocol::supervisor::FromSupervisor;
use std::path::PathBuf;

/// Why the coordinator input could not be read; the coordinator exits
/// [`crate::exit::BAD_INPUT`].
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("no --input-digest: the coordinator is started by lazaret")]
    NoDigest,
    #[error("no input on fd {fd}: {source}")]
    NoInput { fd: i32, source: std::io::Error },
    #[error(transparent)]
    Memfd(#[from] MemfdError),
    #[error("coordinator input: {0}")]
    Decode(postcard::Error),
}

/// Why a generation did not start (or stopped being served); the
/// coordinator exits [`crate::exit::START_FAILED`].
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The network policy the CLI handed over fails a check.
    #[error("the network policy the CLI derived is refused: {0}; nothing was started")]
    PolicyRefused(PolicyRefusal),
    #[error("slirp4netns is not installed (apt-get install slirp4netns), or set `mode = \"none\"` in the profile's [network]")]
    NoSlirp4netns,
    /// The plan asks for a network but the input names no slirp4netns.
    #[error("slirp4netns is not installed (apt-get install slirp4netns)")]
    NoSlirp4netnsToPlan,
    /// The bound policy's encoding.
    #[error(transparent)]
    Policy(#[from] lazaret_protocol::netpolicy::PolicyError),
    #[error(transparent)]
    Store(#[from] lazaret_state::store::StoreError),
    #[error(transparent)]
    Anchors(#[from] lazaret_state::anchors::AnchorError),
    /// The generation's lease on its prepared image.
    #[error(transparent)]
    Lease(#[from] lazaret_catalog::CatalogError),
    #[error(transparent)]
    HelpersLog(#[from] crate::logs::HelpersLogError),
    #[error(transparent)]
    ControlTrust(#[from] crate::trust::ControlTrustError),
    #[error(transparent)]
    Linked(#[from] lazaret_gitconfig::linked::LinkedError),
    #[error("getrandom: {0}")]
    Random(getrandom::Error),
    #[error("cannot open the Domain lock {}: {source}", path.display())]
    OpenLock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the Domain lock {} is held by another coordinator ({source}); wait for it to stop", path.display())]
    Locked {
        path: PathBuf,
        source: rustix::io::Errno,
    },
    /// The stop signals' handlers could not be registered.
    #[error("{0}")]
    Signals(std::io::Error),
    #[error("cannot make the Trust Anchor: {0}")]
    TrustAnchor(lazaret_trust::TrustError),
    #[error("cannot issue the Agent Sandbox certificate: {0}")]
    Certificate(lazaret_trust::TrustError),
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open {} to the sandbox's user: {source}", path.display())]
    OpenToUser {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make {} executable: {source}", path.display())]
    Executable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the {name} link: {source}")]
    PathLink {
        name: &'static str,
        source: std::io::Error,
    },
    /// The Domain's socket path has no directory or name.
    #[error("cannot listen on {}", path.display())]
    SocketPath { path: PathBuf },
    #[error("cannot open {}: {source}", dir.display())]
    SocketDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {}: {source}", path.display())]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The listening socket's mode or non-blocking flag.
    #[error("{0}")]
    Socket(std::io::Error),
    #[error("the coordinator cannot confine itself: {0}")]
    Confine(lazaret_seccomp::ConfineError),
    #[error("cannot read the Runtime Supervisor's channel: {0}")]
    Link(std::io::Error),
    /// The sandbox plan could not be encoded.
    #[error("{0}")]
    Encode(postcard::Error),
    /// The sandbox plan's memfd.
    #[error(transparent)]
    Memfd(MemfdError),
    /// The supervisor's channel could not be made.
    #[error(transparent)]
    Channel(ChannelError),
    /// The helpers' log pipe could not be handed to the supervisor.
    #[error("{0}")]
    HelpersPipe(std::io::Error),
    #[error("cannot start lazaret-supervisor: {0}")]
    SpawnSupervisor(std::io::Error),
    #[error("the sandbox did not start within 60 s; see helpers.log in the Domain Root (`lazaret logs --helpers`)")]
    Timeout,
    /// Waiting for the supervisor's answer failed.
    #[error("{0}")]
    Poll(nix::errno::Errno),
    #[error("the Runtime Supervisor's readiness came without the holder's pidfd")]
    NoHolder,
    /// Why the supervisor says the sandbox did not start, as it says it.
    #[error("{0}")]
    Supervisor(String),
    #[error("the Runtime Supervisor answered {0:?} to its start")]
    Answered(Box<FromSupervisor>),
    #[error("the Runtime Supervisor exited")]
    SupervisorExited,
    #[error("the Runtime Supervisor's answer: {0}")]
    Answer(ChannelError),
}

impl StartError {
    /// [`StartError::Create`] of `path`.
    pub fn create(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StartError {
        let path = path.to_path_buf();
        move |source| StartError::Create { path, source }
    }

    /// [`StartError::Write`] of `path`.
    pub fn write(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StartError {
        let path = path.to_path_buf();
        move |source| StartError::Write { path, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages are the text the coordinator reported before its
    /// errors were types.
    #[test]
    fn messages_are_as_they_were() {
        let other = FromSupervisor::BridgeStarted {
            session: "s".into(),
        };
        let old = format!("the Runtime Supervisor answered {other:?} to its start");
        assert_eq!(StartError::Answered(Box::new(other)).to_string(), old);
        let path = PathBuf::from("/d/lock");
        let e = StartError::Locked {
            path: path.clone(),
            source: rustix::io::Errno::WOULDBLOCK,
        };
        let old = format!(
            "the Domain lock {} is held by another coordinator ({}); wait for it to stop",
            path.display(),
            rustix::io::Errno::WOULDBLOCK
        );
        assert_eq!(e.to_string(), old);
        let e = StartError::create(&path)(std::io::Error::from_raw_os_error(13));
        assert_eq!(
            e.to_string(),
            "cannot create /d/lock: Permission denied (os error 13)"
        );
    }
}

/// Why the coordinator refuses the policy the CLI handed over.
#[derive(Debug, thiserror::Error)]
pub enum PolicyRefusal {
    #[error("its digest is {got}, not {handed}")]
    Digest { got: String, handed: String },
    #[error(transparent)]
    Policy(#[from] lazaret_protocol::netpolicy::PolicyError),
}
