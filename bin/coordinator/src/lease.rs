//! The Domain generation's lease on its prepared image in the Storage
//! Catalog (FR-21): taken after the generation's intent is durable and
//! before anything mounts the image, released after teardown unmounted
//! it, so `lazaret image rm` and `gc` never remove a lower in use.

use lazaret_catalog::{artifact_id_of_rootfs, storage_root_of_rootfs, Catalog, CatalogError};
use lazaret_protocol::plan::CoordinatorInput;

/// The catalog and artifact of the image, when it is a catalogued lower.
fn target(input: &CoordinatorInput) -> Option<(Catalog, String)> {
    let root = storage_root_of_rootfs(&input.image_rootfs)?;
    let art = artifact_id_of_rootfs(&input.image_rootfs)?;
    Some((Catalog::open(root), art.to_string()))
}

pub fn take(input: &CoordinatorInput, generation: u64) -> Result<(), CatalogError> {
    match target(input) {
        Some((catalog, art)) => catalog
            .lease(&art, &input.domain_id, generation)
            .map(|_| ()),
        None => Ok(()),
    }
}

pub fn release(input: &CoordinatorInput, generation: u64) {
    if let Some((catalog, _)) = target(input) {
        if let Err(e) = catalog.release(&input.domain_id, generation) {
            crate::lifecycle::log(format!("cannot release the image lease: {e}"));
        }
    }
}

/// After a crash: no earlier generation of this Domain holds anything.
pub fn release_stale(input: &CoordinatorInput) {
    if let Some((catalog, _)) = target(input) {
        if let Err(e) = catalog.release_domain(&input.domain_id, None) {
            crate::lifecycle::log(format!("cannot release stale image leases: {e}"));
        }
    }
}
