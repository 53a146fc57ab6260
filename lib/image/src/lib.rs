//! Prepares the image rootfs that becomes the sandbox's read-only overlay
//! lower.
//!
//! No container registry is reachable on the machines Lazaret targets, so
//! the built-in image `lazaret:default` is built locally, on first use, from
//! Debian packages by the unprivileged developer (`mmdebstrap
//! --mode=unshare`). The tree is unpacked inside a user namespace mapped to
//! the developer's subordinate IDs, so its ownership is the one the sandbox's
//! user namespace sees (platform notes §3).
//!
//! `local:NAME` names an image made by `lazaret image commit` from a
//! Domain's image and its State Anchors (`commit.rs`); it is never
//! fetched or built, only looked up.
//!
//! Other references (`oci:`, `oci-archive:`, `docker-archive:`,
//! `containers-storage:`, `docker://`) are copied by `skopeo` into an OCI
//! layout in a staging directory, then unpacked by Lazaret's own checked
//! unpacker (`unpack.rs`: every tar entry is validated, and written only
//! through directory descriptors resolved inside the rootfs). Every
//! prepared artifact is recorded in the Storage Catalog (`catalog.rs`),
//! where Domain generations lease it.
//!
//! Layout under the Storage Root:
//!
//! ```text
//! catalog.redb               the Storage Catalog (artifacts, sources, leases)
//! storage-catalog.lock       flock(2) around every catalog transaction
//! lowers/                    0700
//!   .build.lock              flock(2) serialising preparations (and gc)
//!   .staging-XXXX/           a preparation in progress (or an interrupted one)
//!   .trash-XXXX/             an artifact being removed
//!   <artifact-id>/           0555 once published
//!     rootfs/                the overlay lower
//!     complete               marker written last; holds the recipe
//! ```

pub mod commit;
mod debian;
mod error;
mod manage;
mod oci;
pub mod progress;
mod reference;
mod sparse;
mod store;
mod unpack;

// The Storage Catalog is its own crate (the coordinator leases from it
// without linking the image preparation); re-exported for the image's users.
pub use error::ImageError;
pub use lazaret_catalog::{
    artifact_id_of_rootfs, storage_root_of_rootfs, ArtifactRecord, Catalog, CatalogError, Lease,
    CATALOG_FILE, LOCK_FILE,
};
pub use manage::{GcReport, Listed};
pub use oci::{oci_artifact_id, OCI_PREPARER};
pub use progress::Progress;
pub use reference::Reference;
pub use store::Store;
pub use unpack::Limits;

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Entry points for the in-tree fuzz targets (`tools/fuzz/`): not an API.
#[doc(hidden)]
pub mod fuzzing {
    use sha2::{Digest, Sha256};
    use std::path::Path;

    /// Applies `tar` (an uncompressed layer whose digests match) to a
    /// fresh rootfs in `dir`, with small limits; the outcome is ignored,
    /// only a panic or a write outside `dir` is a finding.
    pub fn unpack_layer(tar: &[u8], dir: &Path) {
        let sha = |b: &[u8]| format!("sha256:{}", hex::encode(Sha256::digest(b)));
        let blob = dir.join("blob");
        let rootfs = dir.join("rootfs");
        if std::fs::write(&blob, tar).is_err() || std::fs::create_dir(&rootfs).is_err() {
            return;
        }
        let layer = crate::unpack::Layer {
            blob,
            digest: sha(tar),
            size: tar.len() as u64,
            diff_id: sha(tar),
            compression: crate::unpack::Compression::None,
        };
        let limits = crate::Limits {
            max_unpacked: 16 << 20,
            max_entries: 10_000,
        };
        if let Ok(mut u) = crate::unpack::Unpacker::new(&rootfs, 65535, 65535, limits) {
            let _ = u.apply_layer(&layer, &mut crate::progress::Silent);
        }
    }

    /// Parses a reference the way a profile's `image` is.
    pub fn reference(text: &str) {
        let _ = crate::Reference::parse(text);
    }
}

/// The built-in image.
pub const DEFAULT_REFERENCE: &str = "lazaret:default";

/// Bytes of regular-file content under `dir` (unreadable parts count 0).
pub(crate) fn tree_size(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&p) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() && m.nlink() >= 1 {
                total += m.len();
            }
        }
    }
    total
}

/// A prepared image: a published, complete rootfs tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedImage {
    /// The prepared-artifact ID (lowercase hex); the name of the directory
    /// under `lowers/`.
    pub id: String,
    /// The rootfs tree to use as the overlay lower.
    pub rootfs: PathBuf,
    /// The reference the image was prepared for.
    pub reference: String,
}

/// How to prepare an image. Part of the artifact ID: different options give
/// different artifacts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Install the statx LD_PRELOAD shim (needed only for old runsc, which
    /// rejects `statx(..., AT_NO_AUTOMOUNT)`), and apt's [`APT_NO_PTY`]
    /// (the same releases refuse `TIOCSCTTY`).
    pub statx_shim: bool,
}

/// Something that turns an image reference into a prepared rootfs.
/// `Store` is the one implementation; [`Store::prepare_with`] also reports
/// byte progress for a progress bar.
pub trait Preparer {
    /// Prepares `reference`, building it if needed. `progress` receives
    /// human-readable lines (without context; the caller adds it).
    fn prepare(
        &self,
        reference: &str,
        opts: &PrepareOptions,
        progress: &mut dyn FnMut(&str),
    ) -> Result<PreparedImage, ImageError>;
}

/// Bump when the way the default image is built changes, so existing
/// artifacts are not reused.
const BUILDER_VERSION: &str = "lazaret-image/debian/1";

/// The source of the statx shim; part of the recipe when the shim is used.
const STATX_SHIM_SOURCE: &str = include_str!("../shim/statx-shim.c");

/// apt's configuration for the same old runsc releases: they refuse the
/// `TIOCSCTTY` apt's child issues on the pseudo-terminal it opens for
/// dpkg, and apt then prints `E: Setting TIOCSCTTY for slave fd N failed!`
/// on an install that succeeded. Without the pseudo-terminal apt runs dpkg
/// on its own standard streams; only the terminal progress bar is lost.
pub(crate) const APT_NO_PTY: &str =
    "// Written by Lazaret for runsc releases that refuse TIOCSCTTY.\nDpkg::Use-Pty \"0\";\n";

/// The recipe of the default image: every input that determines the
/// result, one `key=value` per line.
fn default_recipe(opts: &PrepareOptions) -> String {
    let mut packages = debian::PACKAGES.to_vec();
    packages.sort_unstable();
    packages.dedup();
    let mut recipe = format!(
        "builder={BUILDER_VERSION}\nsuite={}\nvariant={}\npackages={}\nstatx_shim={}\n",
        debian::SUITE,
        debian::VARIANT,
        packages.join(","),
        opts.statx_shim,
    );
    if opts.statx_shim {
        recipe.push_str(&format!(
            "statx_shim_source={}\napt_no_pty={}\n",
            hex::encode(Sha256::digest(STATX_SHIM_SOURCE.as_bytes())),
            hex::encode(Sha256::digest(APT_NO_PTY.as_bytes()))
        ));
    }
    recipe
}

/// The artifact ID of `lazaret:default` built with `opts`: the hex SHA-256
/// of its recipe.
pub fn default_artifact_id(opts: &PrepareOptions) -> String {
    hex::encode(Sha256::digest(default_recipe(opts).as_bytes()))
}

impl Preparer for Store {
    fn prepare(
        &self,
        reference: &str,
        opts: &PrepareOptions,
        progress: &mut dyn FnMut(&str),
    ) -> Result<PreparedImage, ImageError> {
        self.prepare_with(reference, opts, &mut progress::Lines(progress))
    }
}

impl Store {
    /// Prepares `reference` (any supported form) with the default
    /// [`Limits`], records it in the Storage Catalog, and returns the
    /// published rootfs. Reuses a published artifact when the source is
    /// unchanged; concurrent preparations of one reference wait for each
    /// other and give one artifact.
    pub fn prepare_with(
        &self,
        reference: &str,
        opts: &PrepareOptions,
        progress: &mut dyn Progress,
    ) -> Result<PreparedImage, ImageError> {
        self.prepare_limited(reference, opts, Limits::default(), progress)
    }

    /// [`Store::prepare_with`] with explicit limits.
    pub fn prepare_limited(
        &self,
        reference: &str,
        opts: &PrepareOptions,
        limits: Limits,
        progress: &mut dyn Progress,
    ) -> Result<PreparedImage, ImageError> {
        match Reference::parse(reference)? {
            Reference::Default => {
                debian::prepare_default(self, opts, &mut |l: &str| progress.line(l))
            }
            Reference::Local { name } => self.committed(&name),
            r => oci::prepare_oci(self, reference, &r, opts, limits, progress),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_id_is_stable_hex_and_depends_on_the_shim() {
        let off = PrepareOptions { statx_shim: false };
        let on = PrepareOptions { statx_shim: true };
        let a = default_artifact_id(&off);
        assert_eq!(a, default_artifact_id(&off.clone()));
        assert_eq!(a.len(), 64);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, default_artifact_id(&on));
        assert_eq!(default_artifact_id(&on), default_artifact_id(&on));
        let recipe = default_recipe(&off);
        assert!(recipe.contains("suite=bookworm\n"), "{recipe}");
        assert!(recipe.contains("variant=apt\n"), "{recipe}");
        assert!(
            recipe.contains(
                "packages=bash,ca-certificates,coreutils,curl,git,jq,less,make,ncurses-term,\
                 openssh-client,procps,python3,ripgrep,sudo,vim-tiny\n"
            ),
            "{recipe}"
        );
        assert!(recipe.contains("statx_shim=false\n"), "{recipe}");
    }

    #[test]
    fn the_statx_shim_is_embedded() {
        // An ELF shared object.
        assert_eq!(&debian::STATX_SHIM[..4], b"\x7fELF");
        assert!(STATX_SHIM_SOURCE.contains("AT_NO_AUTOMOUNT"));
    }
}
