//! `lazaret image list | rm | gc`: what the Storage Catalog holds, and the
//! removal of artifacts no lease holds.
//!
//! Removal order: under the build lock (no preparation is publishing), one
//! catalog transaction checks the leases, deletes the record and renames
//! the tree to `lowers/.trash-*` (so neither a lease nor a fast path can
//! find it any more); the tree is then deleted in the mapped user
//! namespace. An interrupted removal leaves a `.trash-*` directory, which
//! the next preparation or `gc` deletes.

use crate::store::{find_leftovers, Store, TRASH_PREFIX};
use crate::ImageError;
use lazaret_catalog::{ArtifactRecord, CatalogError, Lease};
use lazaret_helpers::storage::StorageIoError;
use serde::Serialize;
use std::path::PathBuf;

/// One artifact with its leases, for `image list`. Its JSON (`image list
/// --json`) gives times as `*_unix_ms`, milliseconds since the epoch, as
/// every JSON output of Lazaret does (the catalog keeps seconds).
#[derive(Clone, Debug)]
pub struct Listed {
    pub record: ArtifactRecord,
    pub leases: Vec<Lease>,
}

#[derive(Serialize)]
struct ListedJson<'a> {
    id: &'a str,
    reference: &'a str,
    source: &'a str,
    manifest_digest: &'a str,
    platform: &'a str,
    preparer: &'a str,
    size: u64,
    created_unix_ms: u64,
    leases: Vec<LeaseJson<'a>>,
}

#[derive(Serialize)]
struct LeaseJson<'a> {
    artifact_id: &'a str,
    domain_id: &'a str,
    generation: u64,
    since_unix_ms: u64,
}

impl Serialize for Listed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = &self.record;
        ListedJson {
            id: &r.id,
            reference: &r.reference,
            source: &r.source,
            manifest_digest: &r.manifest_digest,
            platform: &r.platform,
            preparer: &r.preparer,
            size: r.size,
            created_unix_ms: r.created.saturating_mul(1000),
            leases: self
                .leases
                .iter()
                .map(|l| LeaseJson {
                    artifact_id: &l.artifact_id,
                    domain_id: &l.domain_id,
                    generation: l.generation,
                    since_unix_ms: l.since.saturating_mul(1000),
                })
                .collect(),
        }
        .serialize(s)
    }
}

/// What `image gc` did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    /// Artifacts removed.
    pub removed: Vec<String>,
    /// Artifacts kept because they are leased.
    pub kept: Vec<String>,
    /// Leftover staging and trash directories removed.
    pub leftovers: usize,
}

fn is_artifact_name(name: &str) -> bool {
    name.len() == 64
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Store {
    /// Every recorded artifact with its leases (one catalog transaction).
    pub fn list(&self) -> Result<Vec<Listed>, ImageError> {
        let (artifacts, leases) = self.catalog().snapshot()?;
        Ok(artifacts
            .into_iter()
            .map(|record| {
                let leases = leases
                    .iter()
                    .filter(|l| l.artifact_id == record.id)
                    .cloned()
                    .collect();
                Listed { record, leases }
            })
            .collect())
    }

    /// Every artifact ID recorded in the catalog or only present on disk,
    /// sorted, each once.
    fn known_ids(&self) -> Result<Vec<String>, ImageError> {
        let mut ids: Vec<String> = self
            .catalog()
            .artifacts()?
            .into_iter()
            .map(|a| a.id)
            .chain(self.published_ids()?)
            .collect();
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// The published artifact directories under `lowers/` (by ID).
    fn published_ids(&self) -> Result<Vec<String>, ImageError> {
        let rd = match std::fs::read_dir(self.lowers_dir()) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ImageError::io("list", self.lowers_dir())(e)),
        };
        let mut ids = Vec::new();
        for e in rd {
            let e = e.map_err(ImageError::io("list", self.lowers_dir()))?;
            if let Some(n) = e.file_name().to_str().filter(|n| is_artifact_name(n)) {
                ids.push(n.to_string());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Resolves a full ID or a unique prefix of one (recorded or only
    /// present on disk), or `local:NAME` (the image last committed so).
    pub fn resolve_id(&self, id: &str) -> Result<String, ImageError> {
        if let Some(name) = id.strip_prefix(crate::commit::LOCAL_PREFIX) {
            return self.committed(name).map(|img| img.id);
        }
        let all = self.known_ids()?;
        if !id.is_empty() && all.iter().any(|a| a == id) {
            return Ok(id.to_string());
        }
        let matches: Vec<&String> = all
            .iter()
            .filter(|a| !id.is_empty() && a.starts_with(id))
            .collect();
        match matches.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(ImageError::UnknownArtifact { id: id.to_string() }),
            many => Err(ImageError::AmbiguousArtifact {
                id: id.to_string(),
                matches: many
                    .iter()
                    .map(|m| &m[..12.min(m.len())])
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// Every artifact `given` names, in each form a developer may write:
    /// a full ID or a unique prefix of one, `local:NAME` (the image last
    /// committed so), or an image reference as a profile gives it
    /// (`lazaret:default`, `oci:DIR:TAG`): every artifact recorded with
    /// that reference, or that source.
    pub fn resolve_named(&self, given: &str) -> Result<Vec<String>, ImageError> {
        match self.resolve_id(given) {
            Ok(id) => Ok(vec![id]),
            Err(ImageError::UnknownArtifact { .. }) if !given.is_empty() => {
                let mut ids: Vec<String> = self
                    .catalog()
                    .artifacts()?
                    .into_iter()
                    .filter(|a| a.reference == given || a.source == given)
                    .map(|a| a.id)
                    .collect();
                ids.sort();
                if ids.is_empty() {
                    return Err(ImageError::UnknownArtifact {
                        id: given.to_string(),
                    });
                }
                Ok(ids)
            }
            Err(e) => Err(e),
        }
    }

    /// Renames `lowers/<id>` to a fresh `lowers/.trash-*` name; returns it
    /// (`None` when there was no directory).
    fn detach(&self, id: &str) -> Result<Option<PathBuf>, CatalogError> {
        let dir = self.artifact_dir(id);
        if std::fs::symlink_metadata(&dir).is_err() {
            return Ok(None);
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let trash = self.lowers_dir().join(format!(
            "{TRASH_PREFIX}{}-{}-{nanos}",
            &id[..12.min(id.len())],
            std::process::id()
        ));
        std::fs::rename(&dir, &trash).map_err(|source| {
            CatalogError::Io(StorageIoError {
                what: "move aside",
                path: dir.clone(),
                source,
            })
        })?;
        Ok(Some(trash))
    }

    /// Removes trees moved aside by [`Store::detach`].
    fn remove_trash(&self, trash: Vec<PathBuf>) -> Result<(), ImageError> {
        for t in trash {
            // The artifact directory itself was made 0555.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o700));
            self.remove_tree(&t)?;
        }
        Ok(())
    }

    /// `image rm`: removes artifact `id` (or a unique prefix), refused
    /// while a lease holds it. Returns the full ID.
    pub fn remove_artifact(
        &self,
        id: &str,
        progress: &mut dyn FnMut(&str),
    ) -> Result<String, ImageError> {
        let id = self.resolve_id(id)?;
        self.ensure_lowers()?;
        let _lock = self.lock("(removal)", progress)?;
        let mut trash = Vec::new();
        let removal =
            self.catalog()
                .remove_unleased(std::slice::from_ref(&id), &|_| false, &mut |id| {
                    trash.extend(self.detach(id)?);
                    Ok(())
                })?;
        if let Some((_, leases)) = removal.kept.first() {
            return Err(ImageError::Leased {
                id,
                leases: leases
                    .iter()
                    .map(|l| format!("Domain {} generation {}", l.domain_id, l.generation))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        self.remove_trash(trash)?;
        Ok(id)
    }

    /// `image gc`: removes every artifact no lease holds (recorded or only
    /// on disk), and leftovers of interrupted preparations and removals.
    /// Leases of Domains whose Domain Root no longer exists are dropped
    /// first.
    ///
    /// Only artifacts for which `only` holds are considered (`image gc`
    /// removes what it listed and the developer confirmed, nothing else).
    pub fn gc(
        &self,
        only: &dyn Fn(&str) -> bool,
        progress: &mut dyn FnMut(&str),
    ) -> Result<GcReport, ImageError> {
        let mut report = GcReport::default();
        if !self.lowers_dir().is_dir() && !self.catalog().path().exists() {
            return Ok(report);
        }
        self.ensure_lowers()?;
        let _lock = self.lock("(gc)", progress)?;
        let leftovers = find_leftovers(self.lowers_dir())?;
        report.leftovers = leftovers.len();
        self.remove_trash(leftovers)?;
        let mut ids = self.known_ids()?;
        ids.retain(|id| only(id));
        let domains = self.storage_root().join("domains");
        let mut trash = Vec::new();
        let removal =
            self.catalog()
                .remove_unleased(&ids, &|d| !domains.join(d).is_dir(), &mut |id| {
                    trash.extend(self.detach(id)?);
                    Ok(())
                })?;
        self.remove_trash(trash)?;
        report.removed = removal.removed;
        report.kept = removal.kept.into_iter().map(|(id, _)| id).collect();
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_catalog::now;

    fn fake(store: &Store, id: &str) {
        let dir = store.artifact_dir(id);
        std::fs::create_dir_all(dir.join("rootfs/etc")).unwrap();
        std::fs::write(dir.join("complete"), "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        let rec = ArtifactRecord {
            id: id.into(),
            reference: format!("oci:/x:{id}"),
            source: format!("oci:/x:{id}"),
            manifest_digest: "sha256:0".into(),
            platform: "linux/amd64".into(),
            preparer: "t".into(),
            size: 1,
            created: now(),
        };
        store
            .catalog()
            .record_artifact(&rec, None, || true)
            .unwrap();
    }

    #[test]
    fn listed_json_gives_times_in_unix_ms() {
        let l = Listed {
            record: ArtifactRecord {
                id: "a".into(),
                reference: "r".into(),
                source: "s".into(),
                manifest_digest: "sha256:0".into(),
                platform: "linux/amd64".into(),
                preparer: "t".into(),
                size: 1,
                created: 1_700_000_000,
            },
            leases: vec![Lease {
                artifact_id: "a".into(),
                domain_id: "d".into(),
                generation: 2,
                since: 1_700_000_001,
            }],
        };
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["created_unix_ms"], 1_700_000_000_000u64);
        assert_eq!(v["leases"][0]["since_unix_ms"], 1_700_000_001_000u64);
        assert!(v.get("created").is_none() && v["leases"][0].get("since").is_none());
        assert_eq!(v["reference"], "r");
    }

    #[test]
    fn rm_and_gc_respect_leases() {
        let _serial = crate::store::tests::USERNS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let root = tempfile::tempdir().unwrap();
        let map =
            lazaret_helpers::userns::current_id_map().unwrap_or(lazaret_protocol::plan::IdMap {
                uid: rustix::process::getuid().as_raw(),
                gid: rustix::process::getgid().as_raw(),
                sub_uid: (100000, 65535),
                sub_gid: (100000, 65535),
            });
        let store = Store::new(root.path(), map);
        let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        for id in [&a, &b, &c] {
            fake(&store, id);
        }
        // Only on disk, never recorded.
        let d = "d".repeat(64);
        std::fs::create_dir_all(store.artifact_dir(&d).join("rootfs")).unwrap();
        std::fs::create_dir_all(store.lowers_dir().join(".staging-old/rootfs")).unwrap();
        std::fs::create_dir_all(root.path().join("domains/live")).unwrap();
        let catalog = store.catalog();
        catalog.lease(&a, "live", 1).unwrap();
        catalog.lease(&b, "vanished-domain", 4).unwrap();

        assert_eq!(store.resolve_id("aaaa").unwrap(), a);
        assert!(matches!(
            store.resolve_id("e").unwrap_err(),
            ImageError::UnknownArtifact { .. }
        ));
        let e = store.remove_artifact("aaa", &mut |_| {}).unwrap_err();
        assert!(matches!(e, ImageError::Leased { .. }), "{e}");
        assert!(e.to_string().contains("Domain live generation 1"), "{e}");
        assert!(store.artifact_dir(&a).join("rootfs").is_dir());
        assert_eq!(store.remove_artifact("ccc", &mut |_| {}).unwrap(), c);
        assert!(!store.artifact_dir(&c).exists());

        let report = store.gc(&|_| true, &mut |_| {}).unwrap();
        assert_eq!(report.removed, vec![b.clone(), d.clone()]);
        assert_eq!(report.kept, vec![a.clone()]);
        assert_eq!(report.leftovers, 1);
        let names: Vec<String> = std::fs::read_dir(store.lowers_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".build.lock")
            .collect();
        assert_eq!(names, vec![a.clone()]);
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].leases.len(), 1);
        // A lease on a removed artifact is refused.
        assert!(catalog.lease(&b, "live", 2).is_err());
        catalog.release("live", 1).unwrap();
        assert_eq!(
            store.gc(&|_| true, &mut |_| {}).unwrap().removed,
            vec![a.clone()]
        );
        assert!(store.list().unwrap().is_empty());
    }
}
