//! The CLI's one error type, reported once at the top.

/// Lazaret itself failed (podman's convention).
pub const LAZARET_FAILED: i32 = 125;

/// Refused, nothing changed: the Domain is active or in use, or the
/// developer did not confirm (README "Exit codes").
pub const REFUSED: i32 = 2;

/// Prints an error once, at the top of the command. The message may quote
/// paths and values the sandbox chose: it reaches the terminal through
/// [`lazaret_protocol::display::message`], so no control byte does.
pub fn report(e: &dyn std::fmt::Display) {
    eprintln!(
        "lazaret: error: {}",
        lazaret_protocol::display::message(&e.to_string())
    );
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] lazaret_config::ConfigError),
    #[error(transparent)]
    // Boxed: image errors carry a lot of context, and every CLI result
    // would otherwise be as large as the largest of them.
    Image(Box<lazaret_image::ImageError>),
    #[error(transparent)]
    Runsc(#[from] lazaret_helpers::runsc::RunscError),
    #[error(transparent)]
    Userns(#[from] lazaret_helpers::userns::UsernsError),
    #[error(transparent)]
    HostPath(#[from] lazaret_helpers::hostpath::HostPathError),
    #[error(transparent)]
    HostCa(#[from] crate::host_ca::HostCaError),
    #[error(transparent)]
    Remove(#[from] lazaret_state::remove::RemoveError),
    #[error(transparent)]
    Store(#[from] lazaret_state::store::StoreError),
    #[error(transparent)]
    Anchor(#[from] lazaret_state::anchors::AnchorError),
    #[error("workspace {path}: {source}; pass an existing directory with --workspace")]
    Workspace {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot create {path}: {source}")]
    Storage {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Placement(String),
    #[error("the profile's network configuration is refused: {0}; nothing was started")]
    Network(String),
    #[error("the sandbox could not start: {0}")]
    Start(String),
    #[error("{0}")]
    Session(String),
    /// A `--json` output that could not be encoded.
    #[error("cannot encode the output as JSON: {0}")]
    Encode(serde_json::Error),
    /// A command-line argument that cannot be used as given.
    #[error("{0}")]
    Usage(String),
    /// Refused as things are now (the Domain is active or in use);
    /// exits [`REFUSED`].
    #[error("{0}")]
    Refused(String),
    /// A failure while the Storage Root's file system is full or
    /// read-only: the failure as it was seen, then what to do about the
    /// storage (see [`CliError::with_storage`]).
    #[error("{source}\n{advice}")]
    StorageCondition {
        source: Box<CliError>,
        advice: String,
    },
}

impl CliError {
    /// [`CliError::Storage`] for a failed call on `path`.
    pub fn storage(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> CliError {
        let path = path.display().to_string();
        move |source| CliError::Storage { path, source }
    }

    /// The exit code this error ends the command with.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Refused(_) => REFUSED,
            CliError::StorageCondition { source, .. } => source.exit_code(),
            _ => LAZARET_FAILED,
        }
    }

    /// This failure, with what to do about the Storage Root `root` when
    /// its file system is full or read-only now. Start-up failures reach
    /// the CLI as text from the coordinator, so the file system itself is
    /// looked at (`statvfs`), not the error. A refusal, or an error that
    /// already tells the storage's condition, is returned as it is.
    pub fn with_storage(self, root: &std::path::Path) -> CliError {
        let told = match &self {
            CliError::Refused(_) | CliError::StorageCondition { .. } => true,
            CliError::Image(e) => matches!(
                **e,
                lazaret_image::ImageError::Unwritable { .. }
                    | lazaret_image::ImageError::Catalog(
                        lazaret_image::CatalogError::Unwritable { .. }
                    )
            ),
            _ => false,
        };
        if told {
            return self;
        }
        match lazaret_helpers::storage::condition(root) {
            Some(c) => CliError::StorageCondition {
                source: Box::new(self),
                advice: lazaret_helpers::storage::advice(c, Some(root)),
            },
            None => self,
        }
    }
}

impl From<lazaret_image::ImageError> for CliError {
    fn from(e: lazaret_image::ImageError) -> Self {
        CliError::Image(Box::new(e))
    }
}
