//! The errors of image preparation. Every message is lowercase and says
//! what to do next.

use lazaret_helpers::storage::StorageIoError;
use lazaret_helpers::userns::UsernsError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("unsupported image reference `{reference}`: use one of {forms}", forms = crate::reference::FORMS)]
    UnsupportedReference { reference: String },

    #[error("bad image reference `{reference}`: {detail}")]
    BadReference { reference: String, detail: String },

    #[error("the image `{reference}` cannot be read: {}: {source}; check the path", path.display())]
    SourceMissing {
        reference: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("skopeo is not installed: run `sudo apt-get install skopeo`")]
    SkopeoMissing,

    #[error("skopeo could not copy `{reference}` ({status}); check that the image exists and is readable by you. its last output was:\n{output}")]
    Copy {
        reference: String,
        status: String,
        output: String,
    },

    #[error("the registry of `{reference}` cannot be reached ({detail}); check the name and this machine's network (proxy, DNS, firewall), or, where no registry can be reached, save the image on a machine that reaches it (`podman save --format oci-archive -o img.tar IMAGE`), copy the archive here and use `oci-archive:img.tar`")]
    RegistryUnreachable { reference: String, detail: String },

    #[error("refused layer {layer}, entry `{entry}`: {reason}; nothing was published. the image is damaged or hostile: rebuild it from a trusted source")]
    HostileEntry {
        layer: String,
        entry: String,
        reason: String,
    },

    #[error("refused {what} {digest}: {reason}; nothing was published. the image is damaged or was tampered with: copy or rebuild it from a trusted source")]
    BadBlob {
        what: &'static str,
        digest: String,
        reason: String,
    },

    #[error("the image `{reference}` is not usable: {detail}")]
    BadLayout { reference: String, detail: String },

    #[error("the image `{reference}` is for {found}, but this machine runs {expected}: use an image built for {expected}")]
    Platform {
        reference: String,
        found: String,
        expected: String,
    },

    #[error(transparent)]
    Catalog(#[from] lazaret_catalog::CatalogError),

    #[error("no committed image `{reference}`: make it from a Domain with `lazaret image commit --profile PROFILE --workspace DIR NAME` (see `lazaret image list`)")]
    NotCommitted { reference: String },
    #[error("no prepared image matches `{id}`: see `lazaret image list`")]
    UnknownArtifact { id: String },

    #[error("`{id}` matches several prepared images ({matches}): give more of the ID")]
    AmbiguousArtifact { id: String, matches: String },

    #[error(
        "prepared image {id} is in use by {leases}: stop those Domains' sessions first, then retry"
    )]
    Leased { id: String, leases: String },

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

    /// The Storage Root's file system refused a write: it is full or
    /// read-only. Told apart from [`ImageError::Io`] so that a full disk
    /// is never reported as a damaged image.
    #[error("cannot {what} {}: {source}; {}", path.display(), unwritable_advice(source))]
    Unwritable {
        what: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Io(StorageIoError),
}

impl ImageError {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ImageError::from_io(what, path, source)
    }

    /// [`ImageError::Io`] whatever the error says: for calls whose
    /// failure does not tell the file system's state (a pipe, a lock).
    pub(crate) fn io_plain<E: Into<std::io::Error>>(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(E) -> Self {
        let path = path.into();
        move |e| {
            ImageError::Io(StorageIoError {
                what,
                path,
                source: e.into(),
            })
        }
    }

    /// [`ImageError::Unwritable`] when `source` says the file system is
    /// full or read-only, else [`ImageError::Io`].
    pub(crate) fn from_io(what: &'static str, path: PathBuf, source: std::io::Error) -> Self {
        if lazaret_helpers::storage::is_unwritable(&source) {
            ImageError::Unwritable {
                what: what.to_string(),
                path,
                source,
            }
        } else {
            ImageError::Io(StorageIoError { what, path, source })
        }
    }
}

fn unwritable_advice(e: &std::io::Error) -> String {
    let advice = lazaret_helpers::storage::advice_for(e, None)
        .unwrap_or_else(|| "check the free space of the storage root".into());
    format!("{advice}; no half-prepared image was published")
}
