//! The Domain Store: `domain.redb` in the Domain Root, opened only by the
//! coordinator that holds the Domain `flock` (FR-17). Every mutation is one
//! redb write transaction.
//!
//! The coordinator records its intent before it creates anything, so that
//! the next coordinator, after a crash, knows what may have been left.

use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::path::Path;

const GENERATION: TableDefinition<&str, &[u8]> = TableDefinition::new("generation");
/// State Anchors by sandbox path.
const ANCHORS: TableDefinition<&str, &[u8]> = TableDefinition::new("anchors");
const RESET: TableDefinition<&str, &[u8]> = TableDefinition::new("reset");
/// The Network Sidecar: the intent of the current generation and the last
/// readiness evidence.
const NETWORK: TableDefinition<&str, &[u8]> = TableDefinition::new("network");
const EVIDENCE: &str = "evidence";
const CURRENT: &str = "current";
const INTENT: &str = "intent";

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

/// The phase of a generation: the lifecycle model's own type
/// ([`lazaret_protocol::lifecycle`]), so a renamed or added phase breaks
/// the model's build, not only its meaning.
pub use lazaret_protocol::lifecycle::Phase;

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

/// One State Anchor: its current generation.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AnchorRecord {
    pub generation: u64,
}

/// A reset in progress: for each anchor, the generation it leaves and the
/// new empty one it switches to. Recorded before anything is created.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResetIntent {
    pub switches: Vec<(String, u64, u64)>,
}

/// The network policy a generation is about to install, recorded before
/// the supervisor starts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkIntent {
    pub generation: u64,
    /// SHA-256 of the canonical policy bytes; empty when the network is
    /// disabled (`mode = "none"`).
    pub policy_digest: String,
    pub disabled: bool,
}

/// What the readiness probe established for a generation (FR-18, FR-19).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkEvidence {
    pub generation: u64,
    pub policy_digest: String,
    /// The readiness fingerprint (digest over the policy and the observed
    /// state of both namespaces); empty when installation failed.
    pub fingerprint: String,
    pub passed: bool,
    /// The failing stage and check, when `passed` is false.
    pub error: Option<String>,
    /// Seconds since the epoch.
    pub recorded_at: u64,
    /// The helper's JSON reports, verbatim.
    pub install_report: String,
    pub probe_report: String,
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

    pub fn network_intent(&self) -> Result<Option<NetworkIntent>, StoreError> {
        self.get(NETWORK, INTENT)
    }

    pub fn set_network_intent(&self, i: &NetworkIntent) -> Result<(), StoreError> {
        self.put(NETWORK, INTENT, i)
    }

    pub fn network_evidence(&self) -> Result<Option<NetworkEvidence>, StoreError> {
        self.get(NETWORK, EVIDENCE)
    }

    pub fn set_network_evidence(&self, e: &NetworkEvidence) -> Result<(), StoreError> {
        self.put(NETWORK, EVIDENCE, e)
    }

    pub fn anchors(&self) -> Result<Vec<(String, AnchorRecord)>, StoreError> {
        let r = self.db.begin_read()?;
        let t = match r.open_table(ANCHORS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for item in t.iter()? {
            let (k, v) = item?;
            out.push((k.value().to_string(), postcard::from_bytes(v.value())?));
        }
        Ok(out)
    }

    pub fn set_anchor(&self, path: &str, rec: AnchorRecord) -> Result<(), StoreError> {
        self.put(ANCHORS, path, &rec)
    }

    pub fn reset_intent(&self) -> Result<Option<ResetIntent>, StoreError> {
        self.get(RESET, INTENT)
    }

    pub fn set_reset_intent(&self, intent: &ResetIntent) -> Result<(), StoreError> {
        self.put(RESET, INTENT, intent)
    }

    /// Switches every anchor of `intent` to its new generation and clears
    /// the intent, in one transaction: the commit point of a reset.
    pub fn complete_reset(&self, intent: &ResetIntent) -> Result<(), StoreError> {
        let w = self.db.begin_write()?;
        {
            let mut anchors = w.open_table(ANCHORS)?;
            for (path, _, new) in &intent.switches {
                let bytes = postcard::to_stdvec(&AnchorRecord { generation: *new })?;
                anchors.insert(path.as_str(), bytes.as_slice())?;
            }
            let mut reset = w.open_table(RESET)?;
            reset.remove(INTENT)?;
        }
        w.commit()?;
        Ok(())
    }

    /// Drops an interrupted intent without switching (rollback).
    pub fn clear_reset_intent(&self) -> Result<(), StoreError> {
        let w = self.db.begin_write()?;
        {
            let mut reset = w.open_table(RESET)?;
            reset.remove(INTENT)?;
        }
        w.commit()?;
        Ok(())
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

#[cfg(test)]
mod network_tests {
    use super::*;

    #[test]
    fn network_intent_and_evidence_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("domain.redb");
        let i = NetworkIntent {
            generation: 2,
            policy_digest: "ab".repeat(32),
            disabled: false,
        };
        let e = NetworkEvidence {
            generation: 2,
            policy_digest: "ab".repeat(32),
            fingerprint: "cd".repeat(32),
            passed: true,
            error: None,
            recorded_at: 7,
            install_report: "{}".into(),
            probe_report: "{\"ok\":true}".into(),
        };
        {
            let s = Store::open(&p).unwrap();
            assert_eq!(s.network_intent().unwrap(), None);
            assert_eq!(s.network_evidence().unwrap(), None);
            s.set_network_intent(&i).unwrap();
            s.set_network_evidence(&e).unwrap();
        }
        let s = Store::open(&p).unwrap();
        assert_eq!(s.network_intent().unwrap(), Some(i));
        assert_eq!(s.network_evidence().unwrap(), Some(e));
    }
}

#[cfg(test)]
mod reset_tests {
    use super::*;

    #[test]
    fn reset_intent_commits_atomically() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("domain.redb")).unwrap();
        s.set_anchor("/usr", AnchorRecord { generation: 1 })
            .unwrap();
        s.set_anchor("/root", AnchorRecord { generation: 4 })
            .unwrap();
        let intent = ResetIntent {
            switches: vec![("/usr".into(), 1, 2)],
        };
        s.set_reset_intent(&intent).unwrap();
        assert_eq!(s.reset_intent().unwrap(), Some(intent.clone()));
        s.complete_reset(&intent).unwrap();
        assert_eq!(s.reset_intent().unwrap(), None);
        let a = s.anchors().unwrap();
        assert!(a.contains(&("/usr".into(), AnchorRecord { generation: 2 })));
        assert!(a.contains(&("/root".into(), AnchorRecord { generation: 4 })));
    }
}
