//! Why the supervisor did not start the sandbox: [`Failure`], with the
//! exit code it ends with. Its message goes to the coordinator once, as
//! `StartFailed`, and to `helpers.log`.

use lazaret_supervisor::exit;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    #[error("unknown argument {0:?}")]
    UnknownArgument(String),
    #[error("no --plan-digest: the plan's SHA-256 digest is required")]
    NoDigest,
    #[error("no plan on fd {fd}: {source}")]
    NoPlan { fd: i32, source: std::io::Error },
    /// The plan's memfd: seals, size or digest.
    #[error(transparent)]
    Memfd(lazaret_helpers::memfd::MemfdError),
    #[error("plan: {0}")]
    Decode(postcard::Error),
    #[error("network: the policy's SHA-256 digest {got} differs from the plan's {expected}; refusing it")]
    PolicyDigest { got: String, expected: String },
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The stop signals could not be blocked.
    #[error("{0}")]
    Signals(nix::errno::Errno),
    #[error("signalfd: {0}")]
    Signalfd(nix::errno::Errno),
    /// A pipe to the holder could not be made.
    #[error("{0}")]
    Pipe(rustix::io::Errno),
    #[error(transparent)]
    Network(#[from] lazaret_supervisor::network::NetworkError),
    #[error(transparent)]
    Ports(#[from] lazaret_supervisor::ports::PortsError),
    /// The holder could not be cloned into its namespaces.
    #[error("{0}")]
    Clone(lazaret_helpers::userns::UsernsError),
    /// What the holder said (`error MESSAGE` on its readiness pipe).
    #[error("{0}")]
    Holder(String),
    #[error("the sandbox holder exited")]
    HolderExited,
    #[error("network: uplink: {0}")]
    Uplink(lazaret_supervisor::network::NetworkError),
    #[error("cannot tell the coordinator the sandbox is ready: {0}")]
    Ready(lazaret_helpers::channel::ChannelError),
}

impl Failure {
    /// [`exit::BAD_PLAN`] for the arguments and the plan, else
    /// [`exit::START_FAILED`].
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Failure::UnknownArgument(_)
            | Failure::NoDigest
            | Failure::NoPlan { .. }
            | Failure::Memfd(_)
            | Failure::Decode(_)
            | Failure::PolicyDigest { .. } => exit::BAD_PLAN,
            _ => exit::START_FAILED,
        }
    }

    /// The holder's failure from its readiness line, when it said one.
    pub(crate) fn of_holder(line: &str) -> Option<Failure> {
        line.strip_prefix("error ")
            .map(|m| Failure::Holder(m.to_string()))
    }
}
