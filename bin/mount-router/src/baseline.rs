//! The host's own ignore rules, remembered across the sandbox's edits, so
//! that the sandbox can hide more but never reveal (SR-13).
//!
//! Enforces: every change the sandbox makes to a rules file in the
//! workspace (`.gitignore` anywhere, `.git/info/exclude`) goes through the
//! router, which records, before the first such change, the file's
//! host-authored content (or that there was none), and after each change,
//! the file's stamp (device, inode, size, mtime, ctime; or that it is
//! gone). The rules then apply twice, as they are now and as the host last
//! wrote them, and a path is ignored when either says so: the sandbox's
//! edits can add rules, never take one of the host's away, and a negation
//! it writes cannot re-include what the host's rules exclude. A rules file
//! whose stamp is not the one the sandbox left was changed on the host:
//! its content becomes the host's, and its record is dropped.
//!
//! The records persist in their own directory of the Domain Root (outside
//! the state the sandbox sees, and kept by `state reset --ignored`), in one
//! file replaced atomically, so a restart or a later Domain generation does
//! not forget. The file is bounded ([`MAX_BYTES`]); over the bound, new
//! records are not kept and the router says so once.
//!
//! Leaves to others: evaluating the rules (`rules`), noticing the
//! sandbox's changes (`router`).

use crate::router::lock;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Mutex;

/// The most bytes of records kept (host contents included).
pub const MAX_BYTES: usize = 16 << 20;

const FILE: &str = "rules-baseline";
const TMP: &str = "rules-baseline.tmp";

/// A rules file's identity and version ([`crate::sys::Stamp`]), or its
/// absence.
pub type Stamp = Option<crate::sys::Stamp>;

/// What is remembered of one rules file the sandbox changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The host's content before the sandbox first changed it (`None`:
    /// the host had no such file).
    pub host: Option<Vec<u8>>,
    /// The file's stamp after the sandbox's last change.
    pub sandbox: Stamp,
}

/// The records of one Domain.
pub struct Baseline {
    dir: Option<OwnedFd>,
    records: Mutex<BTreeMap<Vec<u8>, Record>>,
    full_logged: Mutex<bool>,
}

impl Baseline {
    /// Records kept only in memory (tests, or no directory given).
    pub fn in_memory() -> Baseline {
        Baseline {
            dir: None,
            records: Mutex::new(BTreeMap::new()),
            full_logged: Mutex::new(false),
        }
    }

    /// Loads the records from `dir` (a directory descriptor). An
    /// unreadable or corrupt file is an error: forgetting it would let the
    /// sandbox's old edits count as the host's.
    pub fn load(dir: OwnedFd) -> std::io::Result<Baseline> {
        let records = match rustix::fs::openat(
            &dir,
            FILE,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let mut buf = Vec::new();
                std::fs::File::from(fd)
                    .take(MAX_BYTES as u64 + 1)
                    .read_to_end(&mut buf)?;
                if buf.len() > MAX_BYTES {
                    return Err(std::io::Error::other(
                        "the rules baseline is over its bound",
                    ));
                }
                postcard::from_bytes(&buf).map_err(|e| {
                    std::io::Error::other(format!("the rules baseline is corrupt: {e}"))
                })?
            }
            Err(rustix::io::Errno::NOENT) => BTreeMap::new(),
            Err(e) => return Err(e.into()),
        };
        Ok(Baseline {
            dir: Some(dir),
            records: Mutex::new(records),
            full_logged: Mutex::new(false),
        })
    }

    /// The record of `rel`, if the sandbox changed it.
    pub fn get(&self, rel: &[u8]) -> Option<Record> {
        lock(&self.records).get(rel).cloned()
    }

    /// Before the sandbox changes `rel`: remembers the host's content
    /// (read by `current`) unless a record exists.
    pub fn before_change(&self, rel: &[u8], current: impl FnOnce() -> Option<Vec<u8>>) {
        let mut r = lock(&self.records);
        if r.contains_key(rel) {
            return;
        }
        r.insert(
            rel.to_vec(),
            Record {
                host: current(),
                sandbox: None,
            },
        );
        self.persist(&mut r, rel);
    }

    /// After the sandbox changed `rel`, now at `stamp`.
    pub fn after_change(&self, rel: &[u8], stamp: Stamp) {
        let mut r = lock(&self.records);
        if let Some(rec) = r.get_mut(rel) {
            if rec.sandbox != stamp {
                rec.sandbox = stamp;
                self.persist(&mut r, rel);
            }
        }
    }

    /// The host changed `rel` itself: its content is the host's again.
    pub fn host_changed(&self, rel: &[u8]) {
        let mut r = lock(&self.records);
        if r.remove(rel).is_some() {
            self.persist(&mut r, rel);
        }
    }

    /// Writes the records (tmp file, fsync, rename). Over the bound, the
    /// record of `rel` is dropped again (reported once).
    fn persist(&self, r: &mut BTreeMap<Vec<u8>, Record>, rel: &[u8]) {
        let mut bytes = postcard::to_stdvec(&*r).unwrap_or_default();
        if bytes.len() > MAX_BYTES {
            r.remove(rel);
            bytes = postcard::to_stdvec(&*r).unwrap_or_default();
            let mut logged = lock(&self.full_logged);
            if !*logged {
                *logged = true;
                lazaret_protocol::log_line!(
                    "lazaret-mount-router: the rules baseline is at its bound ({MAX_BYTES} bytes): \
                     further rules files the sandbox changes are judged as they are"
                );
            }
        }
        let Some(dir) = &self.dir else { return };
        let write = || -> std::io::Result<()> {
            let fd = rustix::fs::openat(
                dir,
                TMP,
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::TRUNC
                    | OFlags::CLOEXEC
                    | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o600),
            )?;
            let mut f = std::fs::File::from(fd);
            f.write_all(&bytes)?;
            f.sync_all()?;
            // renameat2, the call the seccomp policy allows.
            rustix::fs::renameat_with(dir, TMP, dir, FILE, rustix::fs::RenameFlags::empty())?;
            rustix::fs::fsync(dir.as_fd())?;
            Ok(())
        };
        if let Err(e) = write() {
            lazaret_protocol::log_line!(
                "lazaret-mount-router: cannot save the rules baseline: {e}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_reload_and_host_changes_drop_them() {
        let d = tempfile::tempdir().unwrap();
        let open = || {
            rustix::fs::open(
                d.path(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap()
        };
        let b = Baseline::load(open()).unwrap();
        b.before_change(b".gitignore", || Some(b".env\n".to_vec()));
        // Only the first change snapshots the host's content.
        b.before_change(b".gitignore", || Some(b"!.env\n".to_vec()));
        let stamp = Some(crate::sys::Stamp {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (4, 5),
            ctime: (6, 7),
        });
        b.after_change(b".gitignore", stamp);
        let again = Baseline::load(open()).unwrap();
        assert_eq!(
            again.get(b".gitignore"),
            Some(Record {
                host: Some(b".env\n".to_vec()),
                sandbox: stamp
            })
        );
        again.host_changed(b".gitignore");
        assert_eq!(Baseline::load(open()).unwrap().get(b".gitignore"), None);
    }

    #[test]
    fn a_stamp_is_kept_as_the_tuple_it_was() {
        // Records written before the stamp was a struct still decode.
        let stamp = crate::sys::Stamp {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (4, -5),
            ctime: (6, 7),
        };
        let tuple: (u64, u64, u64, (i64, i64), (i64, i64)) = (1, 2, 3, (4, -5), (6, 7));
        assert_eq!(
            postcard::to_allocvec(&Some(stamp)).unwrap(),
            postcard::to_allocvec(&Some(tuple)).unwrap()
        );
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_a_fresh_start() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(FILE), b"\xff\xff\xff\xff\xff").unwrap();
        let fd = rustix::fs::open(
            d.path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        assert!(Baseline::load(fd).is_err());
    }
}
