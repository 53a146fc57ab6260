//! The errors of image preparation. Every message is lowercase and says
//! what to do next.

use lazaret_helpers::userns::UsernsError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("unsupported image reference `{reference}`: only `lazaret:default` is supported for now; use `lazaret:default` as the image")]
    UnsupportedReference { reference: String },

    #[error("mmdebstrap is not installed: run `sudo apt-get install mmdebstrap`")]
    MmdebstrapMissing,

    #[error("mmdebstrap failed ({status}) while building lazaret:default; check that the Debian mirror (deb.debian.org) is reachable that user namespaces work (`unshare --map-root-user --map-auto true`) and that $TMPDIR (or /tmp) is searchable by everyone, then retry. its last output was:\n{output}")]
    Mmdebstrap { status: String, output: String },

    #[error("`{what}` failed ({status}) while preparing the image; check the free disk space of the storage root and retry. its last output was:\n{output}")]
    Command {
        what: String,
        status: String,
        output: String,
    },

    #[error("cannot run `{what}` in a user namespace mapped to your subordinate ids: {source}")]
    Userns {
        what: String,
        #[source]
        source: UsernsError,
    },

    #[error("the built image is unusable: {detail}; retry, and report a bug if it happens again")]
    BadImage { detail: String },

    #[error("cannot {what} {}: {source}; check the permissions and free space of the storage root", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ImageError {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ImageError::Io { what, path, source }
    }
}
