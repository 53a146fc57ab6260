//! The Storage Catalog: `catalog.redb` under the Storage Root, the record
//! of every prepared artifact, of the sources they were prepared from, and
//! of the leases Domain generations hold on them (FR-21).
//!
//! Every operation takes the host-wide `storage-catalog.lock` (`flock(2)`,
//! exclusive), opens the database, runs exactly one redb write transaction,
//! closes the database and releases the lock (FR-17). No handle is kept
//! between operations, so any number of processes may use the catalog.
//!
//! Records are JSON values in three tables:
//!
//! | table | key | value |
//! | --- | --- | --- |
//! | `artifacts` | artifact ID | [`ArtifactRecord`] |
//! | `leases` | `<domain-id>/<generation>` | [`Lease`] |
//! | `sources` | resolved source (`oci-archive:/abs/file:tag`) | the source file's stamp and the artifact it gave |
//!
//! The lease protocol, for the Session Coordinator: call
//! [`Catalog::lease`] once the generation's intent is durable in the Domain
//! Store and before the overlay that uses the lower is mounted; call
//! [`Catalog::release`] after the generation's mounts are gone (teardown or
//! recovery). A lease on an artifact that is not (or no longer) in the
//! catalog is refused, so a lower that `image rm` or `image gc` is removing
//! is never mounted.

use lazaret_helpers::storage::StorageIoError;
use redb::{ReadableTable, TableDefinition};
use rustix::fs::FlockOperation;
use serde::{Deserialize, Serialize};
use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The database file under the Storage Root.
pub const CATALOG_FILE: &str = "catalog.redb";
/// The lock file under the Storage Root.
pub const LOCK_FILE: &str = "storage-catalog.lock";

const ARTIFACTS: TableDefinition<&str, &[u8]> = TableDefinition::new("artifacts");
const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("leases");
const SOURCES: TableDefinition<&str, &[u8]> = TableDefinition::new("sources");

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Io(StorageIoError),
    /// The Storage Root's file system refused a write to the catalog: it
    /// is full or read-only. The catalog itself is sound (redb commits
    /// atomically): no advice to move it aside.
    #[error("cannot {what} {}: {source}; {}", path.display(), lazaret_helpers::storage::advice_for(source, None).unwrap_or_default())]
    Unwritable {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the storage catalog {} is unusable: {source}; move it aside and run `lazaret image gc` to rebuild what can be", path.display())]
    Db {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    #[error("the storage catalog {} holds a damaged record under `{key}`: {detail}; move it aside and run `lazaret image gc`", path.display())]
    Record {
        path: PathBuf,
        key: String,
        detail: String,
    },
    #[error("prepared image {artifact_id} is not in the storage catalog (it was removed, or never prepared): prepare the image again (`lazaret image prepare REF`) and retry")]
    UnknownArtifact { artifact_id: String },
}

/// A prepared artifact, as recorded when it was published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    /// The prepared-artifact ID (64 lowercase hex digits).
    pub id: String,
    /// The reference as given (`oci-archive:img.tar`, `lazaret:default`).
    pub reference: String,
    /// The reference with its paths made absolute, as handed to skopeo.
    pub source: String,
    /// The digest of the image manifest that was unpacked
    /// (`sha256:...`); for `lazaret:default`, the digest of its recipe.
    pub manifest_digest: String,
    /// `os/architecture[/variant]`.
    pub platform: String,
    /// The preparer and its version (`lazaret-image/oci/1`).
    pub preparer: String,
    /// Bytes of regular-file content in the rootfs.
    pub size: u64,
    /// When it was published, seconds since the epoch.
    pub created: u64,
}

/// A lease held by one Domain generation on one artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub artifact_id: String,
    pub domain_id: String,
    pub generation: u64,
    /// When it was taken, seconds since the epoch.
    pub since: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct SourceRecord {
    stamp: String,
    artifact_id: String,
}

/// What [`Catalog::remove_unleased`] decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removal {
    /// Artifacts whose records were deleted (their trees must go).
    pub removed: Vec<String>,
    /// Artifacts kept because a lease holds them, with the leases.
    pub kept: Vec<(String, Vec<Lease>)>,
}

/// The Storage Catalog of one Storage Root. Holds no open handle.
#[derive(Clone, Debug)]
pub struct Catalog {
    root: PathBuf,
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A failed call on `path`: [`CatalogError::Unwritable`] when the file
/// system is full or read-only, else [`CatalogError::Io`].
fn io_error(what: &'static str, path: PathBuf, source: std::io::Error) -> CatalogError {
    if lazaret_helpers::storage::is_unwritable(&source) {
        CatalogError::Unwritable { what, path, source }
    } else {
        CatalogError::Io(StorageIoError { what, path, source })
    }
}

/// A failed redb call on the catalog at `path`; an I/O error that says the
/// file system is full or read-only is [`CatalogError::Unwritable`].
fn db_error(path: PathBuf, e: redb::Error) -> CatalogError {
    match e {
        redb::Error::Io(source) if lazaret_helpers::storage::is_unwritable(&source) => {
            CatalogError::Unwritable {
                what: "write the storage catalog",
                path,
                source,
            }
        }
        e => CatalogError::Db {
            path,
            source: Box::new(e),
        },
    }
}

fn lease_key(domain_id: &str, generation: u64) -> String {
    format!("{domain_id}/{generation:020}")
}

impl Catalog {
    /// The catalog of `storage_root`. Creates nothing until the first
    /// operation, which creates the Storage Root (0700) if needed.
    pub fn open(storage_root: &Path) -> Catalog {
        Catalog {
            root: storage_root.to_path_buf(),
        }
    }

    /// `<storage_root>/catalog.redb`.
    pub fn path(&self) -> PathBuf {
        self.root.join(CATALOG_FILE)
    }

    /// Runs `f` in one write transaction under the catalog lock. The
    /// transaction commits only if `f` succeeds.
    fn locked<T>(
        &self,
        commit: bool,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, CatalogError>,
    ) -> Result<T, CatalogError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(|source| io_error("create", self.root.clone(), source))?;
        let lock_path = self.root.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|source| io_error("open", lock_path.clone(), source))?;
        flock_exclusive(&lock).map_err(|source| io_error("lock", lock_path.clone(), source))?;
        let path = self.path();
        let db_err = |e: redb::Error| db_error(path.clone(), e);
        if !path.exists() {
            // Created private; redb would use the umask.
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|source| io_error("create", path.clone(), source))?;
        }
        let db = redb::Database::create(&path).map_err(|e| db_err(e.into()))?;
        let txn = db.begin_write().map_err(|e| db_err(e.into()))?;
        let out = f(&txn)?;
        if commit {
            txn.commit().map_err(|e| db_err(e.into()))?;
        } else {
            txn.abort().map_err(|e| db_err(e.into()))?;
        }
        drop(db);
        drop(lock);
        Ok(out)
    }

    /// A write transaction, committed (durably) if `f` succeeds.
    fn transact<T>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, CatalogError>,
    ) -> Result<T, CatalogError> {
        self.locked(true, f)
    }

    /// A transaction that only reads: the same lock and view as
    /// [`Catalog::transact`], but aborted, so no commit (and no fsync) is
    /// paid for it. Every start reads the catalog this way.
    fn read<T>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, CatalogError>,
    ) -> Result<T, CatalogError> {
        self.locked(false, f)
    }

    fn db_err(&self) -> impl Fn(redb::Error) -> CatalogError + '_ {
        move |e| db_error(self.path(), e)
    }

    fn decode<T: for<'a> Deserialize<'a>>(
        &self,
        key: &str,
        bytes: &[u8],
    ) -> Result<T, CatalogError> {
        serde_json::from_slice(bytes).map_err(|e| CatalogError::Record {
            path: self.path(),
            key: key.to_string(),
            detail: e.to_string(),
        })
    }

    fn all<T: for<'a> Deserialize<'a>>(
        &self,
        txn: &redb::WriteTransaction,
        def: TableDefinition<&str, &[u8]>,
    ) -> Result<Vec<(String, T)>, CatalogError> {
        let e = self.db_err();
        let table = txn.open_table(def).map_err(|x| e(x.into()))?;
        let mut out = Vec::new();
        for row in table.iter().map_err(|x| e(x.into()))? {
            let (k, v) = row.map_err(|x| e(x.into()))?;
            let key = k.value().to_string();
            let value = self.decode(&key, v.value())?;
            out.push((key, value));
        }
        Ok(out)
    }

    fn put<T: Serialize>(
        &self,
        txn: &redb::WriteTransaction,
        def: TableDefinition<&str, &[u8]>,
        key: &str,
        value: &T,
    ) -> Result<(), CatalogError> {
        let e = self.db_err();
        let bytes = serde_json::to_vec(value).map_err(|x| CatalogError::Record {
            path: self.path(),
            key: key.to_string(),
            detail: x.to_string(),
        })?;
        let mut table = txn.open_table(def).map_err(|x| e(x.into()))?;
        table
            .insert(key, bytes.as_slice())
            .map_err(|x| e(x.into()))?;
        Ok(())
    }

    fn get<T: for<'a> Deserialize<'a>>(
        &self,
        txn: &redb::WriteTransaction,
        def: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<T>, CatalogError> {
        let e = self.db_err();
        let table = txn.open_table(def).map_err(|x| e(x.into()))?;
        let got = table.get(key).map_err(|x| e(x.into()))?;
        match got {
            Some(v) => Ok(Some(self.decode(key, v.value())?)),
            None => Ok(None),
        }
    }

    fn delete(
        &self,
        txn: &redb::WriteTransaction,
        def: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<bool, CatalogError> {
        let e = self.db_err();
        let mut table = txn.open_table(def).map_err(|x| e(x.into()))?;
        let removed = table.remove(key).map_err(|x| e(x.into()))?.is_some();
        Ok(removed)
    }

    /// Records that Domain `domain_id`'s generation `generation` uses
    /// artifact `artifact_id`. Idempotent. Refused (with
    /// [`CatalogError::UnknownArtifact`]) when the artifact is not in the
    /// catalog.
    pub fn lease(
        &self,
        artifact_id: &str,
        domain_id: &str,
        generation: u64,
    ) -> Result<(), CatalogError> {
        self.transact(|txn| {
            if self
                .get::<ArtifactRecord>(txn, ARTIFACTS, artifact_id)?
                .is_none()
            {
                return Err(CatalogError::UnknownArtifact {
                    artifact_id: artifact_id.to_string(),
                });
            }
            let key = lease_key(domain_id, generation);
            if let Some(old) = self.get::<Lease>(txn, LEASES, &key)? {
                if old.artifact_id == artifact_id {
                    return Ok(());
                }
            }
            self.put(
                txn,
                LEASES,
                &key,
                &Lease {
                    artifact_id: artifact_id.to_string(),
                    domain_id: domain_id.to_string(),
                    generation,
                    since: now(),
                },
            )
        })
    }

    /// Drops the lease of Domain `domain_id`'s generation `generation`.
    /// Returns whether there was one. Idempotent.
    pub fn release(&self, domain_id: &str, generation: u64) -> Result<bool, CatalogError> {
        self.transact(|txn| self.delete(txn, LEASES, &lease_key(domain_id, generation)))
    }

    /// Drops every lease of Domain `domain_id` whose generation is not
    /// `keep` (all of them with `None`): recovery's release of the leases
    /// of generations that will never run again. Returns how many went.
    pub fn release_domain(
        &self,
        domain_id: &str,
        keep: Option<u64>,
    ) -> Result<usize, CatalogError> {
        let stale = |l: &Lease| l.domain_id == domain_id && Some(l.generation) != keep;
        // Usually there is none: then nothing is written.
        if !self.leases()?.iter().any(stale) {
            return Ok(0);
        }
        self.transact(|txn| {
            let mut n = 0;
            for (key, lease) in self.all::<Lease>(txn, LEASES)? {
                if stale(&lease) {
                    self.delete(txn, LEASES, &key)?;
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    /// Every lease, ordered by Domain and generation.
    pub fn leases(&self) -> Result<Vec<Lease>, CatalogError> {
        self.read(|txn| Ok(self.all(txn, LEASES)?.into_iter().map(|(_, l)| l).collect()))
    }

    /// Every artifact record, ordered by ID.
    pub fn artifacts(&self) -> Result<Vec<ArtifactRecord>, CatalogError> {
        self.read(|txn| {
            Ok(self
                .all(txn, ARTIFACTS)?
                .into_iter()
                .map(|(_, a)| a)
                .collect())
        })
    }

    /// Every artifact record and every lease, read in one transaction.
    pub fn snapshot(&self) -> Result<(Vec<ArtifactRecord>, Vec<Lease>), CatalogError> {
        self.read(|txn| {
            let a = self
                .all(txn, ARTIFACTS)?
                .into_iter()
                .map(|(_, a)| a)
                .collect();
            let l = self.all(txn, LEASES)?.into_iter().map(|(_, l)| l).collect();
            Ok((a, l))
        })
    }

    /// The record of artifact `id`.
    pub fn artifact(&self, id: &str) -> Result<Option<ArtifactRecord>, CatalogError> {
        self.read(|txn| self.get(txn, ARTIFACTS, id))
    }

    /// Records a published artifact, and the source it came from with the
    /// source's stamp (if the source can be stamped). `check` runs inside
    /// the transaction and must say whether the artifact's tree is complete;
    /// the record is written only then.
    pub fn record_artifact(
        &self,
        record: &ArtifactRecord,
        source_stamp: Option<&str>,
        check: impl FnOnce() -> bool,
    ) -> Result<bool, CatalogError> {
        self.transact(|txn| {
            if !check() {
                return Ok(false);
            }
            if self
                .get::<ArtifactRecord>(txn, ARTIFACTS, &record.id)?
                .is_none()
            {
                self.put(txn, ARTIFACTS, &record.id, record)?;
            }
            if let Some(stamp) = source_stamp {
                self.put(
                    txn,
                    SOURCES,
                    &record.source,
                    &SourceRecord {
                        stamp: stamp.to_string(),
                        artifact_id: record.id.clone(),
                    },
                )?;
            }
            Ok(true)
        })
    }

    /// The artifact last prepared from `source` when the source's stamp was
    /// `stamp`, if it is still recorded.
    pub fn lookup_source(
        &self,
        source: &str,
        stamp: &str,
    ) -> Result<Option<ArtifactRecord>, CatalogError> {
        self.transact(|txn| {
            let Some(s) = self.get::<SourceRecord>(txn, SOURCES, source)? else {
                return Ok(None);
            };
            if s.stamp != stamp {
                return Ok(None);
            }
            self.get(txn, ARTIFACTS, &s.artifact_id)
        })
    }

    /// In one transaction: deletes the records of the artifacts in `ids`
    /// that no lease holds (and the sources that point at them), and calls
    /// `detach` for each, inside the lock, before the commit (it renames the
    /// tree out of the way, so no fast path finds it). Leases of Domains for
    /// which `domain_gone` holds are dropped first.
    pub fn remove_unleased(
        &self,
        ids: &[String],
        domain_gone: &dyn Fn(&str) -> bool,
        detach: &mut dyn FnMut(&str) -> Result<(), CatalogError>,
    ) -> Result<Removal, CatalogError> {
        self.transact(|txn| {
            let mut leases = Vec::new();
            for (key, lease) in self.all::<Lease>(txn, LEASES)? {
                if domain_gone(&lease.domain_id) {
                    self.delete(txn, LEASES, &key)?;
                } else {
                    leases.push(lease);
                }
            }
            let mut out = Removal::default();
            for id in ids {
                let holding: Vec<Lease> = leases
                    .iter()
                    .filter(|l| &l.artifact_id == id)
                    .cloned()
                    .collect();
                if !holding.is_empty() {
                    out.kept.push((id.clone(), holding));
                    continue;
                }
                self.delete(txn, ARTIFACTS, id)?;
                detach(id)?;
                out.removed.push(id.clone());
            }
            for (key, s) in self.all::<SourceRecord>(txn, SOURCES)? {
                if out.removed.contains(&s.artifact_id) {
                    self.delete(txn, SOURCES, &key)?;
                }
            }
            Ok(out)
        })
    }
}

fn flock_exclusive(file: &File) -> std::io::Result<()> {
    loop {
        match rustix::fs::flock(file, FlockOperation::LockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The artifact ID of a prepared rootfs path
/// (`<storage_root>/lowers/<artifact-id>/rootfs`), for the Session
/// Coordinator, which receives the rootfs path and leases the artifact.
pub fn artifact_id_of_rootfs(rootfs: &Path) -> Option<&str> {
    if rootfs.file_name()? != "rootfs" {
        return None;
    }
    let dir = rootfs.parent()?;
    if dir.parent()?.file_name()? != "lowers" {
        return None;
    }
    let id = dir.file_name()?.to_str()?;
    (id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
    .then_some(id)
}

/// The Storage Root of a prepared rootfs path (see
/// [`artifact_id_of_rootfs`]).
pub fn storage_root_of_rootfs(rootfs: &Path) -> Option<&Path> {
    artifact_id_of_rootfs(rootfs)?;
    rootfs.parent()?.parent()?.parent()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> ArtifactRecord {
        ArtifactRecord {
            id: id.into(),
            reference: "oci:img".into(),
            source: format!("oci:/x/{id}"),
            manifest_digest: "sha256:00".into(),
            platform: "linux/amd64".into(),
            preparer: "test".into(),
            size: 42,
            created: 1,
        }
    }

    #[test]
    fn leases_need_a_recorded_artifact_and_are_idempotent() {
        let root = tempfile::tempdir().unwrap();
        let c = Catalog::open(&root.path().join("store"));
        let err = c.lease("aa", "d1", 1).unwrap_err();
        assert!(matches!(err, CatalogError::UnknownArtifact { .. }), "{err}");
        assert!(err.to_string().contains("lazaret image prepare"), "{err}");
        assert!(c.record_artifact(&record("aa"), None, || true).unwrap());
        assert!(!c.record_artifact(&record("bb"), None, || false).unwrap());
        assert_eq!(c.artifacts().unwrap(), vec![record("aa")]);
        c.lease("aa", "d1", 1).unwrap();
        c.lease("aa", "d1", 1).unwrap();
        c.lease("aa", "d1", 2).unwrap();
        c.lease("aa", "d2", 7).unwrap();
        let l = c.leases().unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!((l[0].domain_id.as_str(), l[0].generation), ("d1", 1));
        assert!(c.release("d1", 1).unwrap());
        assert!(!c.release("d1", 1).unwrap());
        assert_eq!(c.release_domain("d1", Some(5)).unwrap(), 1);
        assert_eq!(c.leases().unwrap().len(), 1);
        // Private files.
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(root.path().join("store")), 0o700);
        assert_eq!(mode(c.path()), 0o600);
        assert_eq!(mode(root.path().join("store").join(LOCK_FILE)), 0o600);
    }

    #[test]
    fn removal_keeps_leased_artifacts_and_drops_gone_domains() {
        let root = tempfile::tempdir().unwrap();
        let c = Catalog::open(root.path());
        for id in ["a", "b", "c"] {
            c.record_artifact(&record(id), Some("stamp"), || true)
                .unwrap();
        }
        assert_eq!(
            c.lookup_source("oci:/x/a", "stamp").unwrap(),
            Some(record("a"))
        );
        assert_eq!(c.lookup_source("oci:/x/a", "other").unwrap(), None);
        c.lease("a", "live", 1).unwrap();
        c.lease("b", "gone", 3).unwrap();
        let mut detached = Vec::new();
        let r = c
            .remove_unleased(
                &["a".into(), "b".into(), "c".into()],
                &|d| d == "gone",
                &mut |id| {
                    detached.push(id.to_string());
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!(r.removed, vec!["b".to_string(), "c".to_string()]);
        assert_eq!(r.kept.len(), 1);
        assert_eq!(r.kept[0].0, "a");
        assert_eq!(detached, r.removed);
        assert_eq!(c.artifacts().unwrap(), vec![record("a")]);
        assert_eq!(c.lookup_source("oci:/x/b", "stamp").unwrap(), None);
        assert_eq!(c.leases().unwrap().len(), 1);
        // A failing detach rolls the whole transaction back.
        c.release("live", 1).unwrap();
        let err = c
            .remove_unleased(&["a".into()], &|_| false, &mut |_| {
                Err(CatalogError::UnknownArtifact {
                    artifact_id: "x".into(),
                })
            })
            .unwrap_err();
        assert!(matches!(err, CatalogError::UnknownArtifact { .. }));
        assert_eq!(c.artifacts().unwrap(), vec![record("a")]);
    }
}
