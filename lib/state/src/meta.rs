//! `meta.json` in the Domain Root: the trusted description of a Domain that
//! `lazaret state list` and `inspect` read even while its coordinator holds
//! the Domain Store. Written only by Lazaret, atomically.

use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DomainMeta {
    pub domain_id: String,
    pub profile: String,
    pub workspace: String,
    pub image: String,
    /// The prepared lower the anchors were last mounted over.
    pub image_rootfs: String,
    /// The Domain's runtime generation (one per start).
    pub generation: u64,
    pub anchors: Vec<AnchorMeta>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AnchorMeta {
    pub path: String,
    pub generation: u64,
}

pub fn write(path: &Path, meta: &DomainMeta) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(meta).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)
}

pub fn read(path: &Path) -> std::io::Result<DomainMeta> {
    let bytes = std::fs::read(path)?;
    if bytes.len() > 1 << 20 {
        return Err(std::io::Error::other("meta.json is larger than 1 MiB"));
    }
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}
