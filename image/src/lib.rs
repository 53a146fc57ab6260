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
//! Layout under the Storage Root:
//!
//! ```text
//! lowers/                    0700
//!   .build.lock              flock(2) serialising builds
//!   .staging-XXXX/           a build in progress (or an interrupted one)
//!   <artifact-id>/           0555 once published
//!     rootfs/                the overlay lower
//!     complete               marker written last; holds the recipe
//! ```

mod debian;
mod error;
mod store;

pub use error::ImageError;
pub use store::Store;

use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// The only reference supported for now.
pub const DEFAULT_REFERENCE: &str = "lazaret:default";

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
    /// rejects `statx(..., AT_NO_AUTOMOUNT)`).
    pub statx_shim: bool,
}

/// Something that turns an image reference into a prepared rootfs.
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
            "statx_shim_source={}\n",
            hex::encode(Sha256::digest(STATX_SHIM_SOURCE.as_bytes()))
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
        match reference {
            DEFAULT_REFERENCE => debian::prepare_default(self, opts, progress),
            _ => Err(ImageError::UnsupportedReference {
                reference: reference.to_string(),
            }),
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
            recipe
                .contains("packages=bash,ca-certificates,coreutils,curl,git,less,procps,python3\n"),
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
