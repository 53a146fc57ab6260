//! The Domain Store: `domain.redb` in the Domain Root, opened only by the
//! coordinator that holds the Domain `flock` (FR-17). Every mutation is one
//! redb write transaction.
//!
//! The coordinator records its intent before it creates anything, so that
//! the next coordinator, after a crash, knows what may have been left.

use redb::{Database, TableDefinition};
use serde::{Deserialize, Serialize};
use std::path::Path;

const GENERATION: TableDefinition<&str, &[u8]> = TableDefinition::new("generation");
const DOMAIN: TableDefinition<&str, &[u8]> = TableDefinition::new("domain");
const CURRENT: &str = "current";
const META: &str = "meta";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("Domain Store: {0}")]
    Db(String),
    #[error("Domain Store record is malformed: {0}")]
    Decode(#[from] postcard::Error),
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self { StoreError::Db(e.to_string()) }
        }
    )*};
}
db_err!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Phase {
    /// Resources may be in creation; recovery must assume any of them exist.
    Starting,
    Running,
    /// Teardown began; recovery finishes it.
    Stopping,
    /// Nothing transient exists.
    Stopped,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Generation {
    pub number: u64,
    pub phase: Phase,
    pub sandbox_id: String,
    pub coordinator_id: String,
    /// The supervisor, as (pid, start time in clock ticks since boot): the
    /// pair, not the pid alone, identifies the process.
    pub supervisor: Option<(i32, u64)>,
    pub holder: Option<(i32, u64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DomainMeta {
    pub profile: String,
    pub workspace: String,
    pub image: String,
}

pub struct Store {
    db: Database,
}

impl Store {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Ok(Self {
            db: Database::create(path)?,
        })
    }

    fn get<T: for<'de> Deserialize<'de>>(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        let r = self.db.begin_read()?;
        let t = match r.open_table(table) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let v = t.get(key)?;
        Ok(match v {
            Some(v) => Some(postcard::from_bytes(v.value())?),
            None => None,
        })
    }

    fn put<T: Serialize>(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = postcard::to_stdvec(value)?;
        let w = self.db.begin_write()?;
        {
            let mut t = w.open_table(table)?;
            t.insert(key, bytes.as_slice())?;
        }
        w.commit()?;
        Ok(())
    }

    pub fn generation(&self) -> Result<Option<Generation>, StoreError> {
        self.get(GENERATION, CURRENT)
    }

    pub fn set_generation(&self, g: &Generation) -> Result<(), StoreError> {
        self.put(GENERATION, CURRENT, g)
    }

    pub fn set_meta(&self, m: &DomainMeta) -> Result<(), StoreError> {
        self.put(DOMAIN, META, m)
    }

    pub fn meta(&self) -> Result<Option<DomainMeta>, StoreError> {
        self.get(DOMAIN, META)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_round_trip_and_persistence() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("domain.redb");
        let g = Generation {
            number: 3,
            phase: Phase::Starting,
            sandbox_id: "s".into(),
            coordinator_id: "c".into(),
            supervisor: Some((42, 7)),
            holder: None,
        };
        {
            let s = Store::open(&p).unwrap();
            assert_eq!(s.generation().unwrap(), None);
            s.set_generation(&g).unwrap();
        }
        let s = Store::open(&p).unwrap();
        assert_eq!(s.generation().unwrap(), Some(g));
    }
}
