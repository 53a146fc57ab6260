//! State Anchor generations: creation, crash-consistent reset, recovery
//! and structural verification.
//!
//! On disk: `state/anchors/<name>/g<N>/{upper,work}` beneath the Domain
//! Root, with `<name>` from [`anchor_dir_name`] and N the generation the
//! Domain Store records for the anchor. Only the recorded generation is
//! ever mounted.
//!
//! A reset (OR-5): (1) record the intent (old and new generation of each
//! selected anchor) in the Domain Store; (2) create `g<new>.tmp` with an
//! empty upper and work; (3) rename it to `g<new>`; (4) in one transaction,
//! switch the records to the new generations and clear the intent; (5)
//! remove the old generations. [`Anchors::recover`], run under the
//! lifecycle lock before anything mounts, rolls an interrupted reset
//! forward when every new generation was renamed into place, and back
//! otherwise: the Domain comes back with the prior generation or a new
//! empty one, never a half-reset upper.

use crate::beneath::{Kind, Root};
use crate::layout::{anchor_dir_name, generation_dir_name, DomainLayout};
use crate::store::{AnchorRecord, ResetIntent, Store, StoreError};
use lazaret_helpers::fault;
use std::fmt::Display;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no State Anchor for {path}; this Domain has: {known}")]
    Unknown { path: String, known: String },
    #[error("{path} is not a real directory beneath the Domain Root (a symlink or another file was found there); run `lazaret state verify` and remove it by hand")]
    NotADirectory { path: PathBuf },
    #[error("cannot remove {path}: {detail}")]
    Remove { path: PathBuf, detail: String },
    /// A reset that failed part way (a full or read-only file system, say)
    /// and was undone: every State Anchor keeps its generation.
    #[error("the reset failed and was undone, every State Anchor keeps its content: {source}")]
    ResetUndone { source: Box<AnchorError> },
    /// A reset that failed part way and could not be undone at once: the
    /// next start (or reset) rolls it back, or forward when every new
    /// generation was already in place; never half.
    #[error("the reset failed: {source}; undoing it failed too ({undo}): the next `lazaret run` or `lazaret state reset` finishes it, each State Anchor then has its old content or is empty, never half")]
    ResetPending {
        source: Box<AnchorError>,
        undo: Box<AnchorError>,
    },
}

/// The directories of one anchor's current generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnchorDirs {
    pub path: String,
    pub generation: u64,
    pub upper: PathBuf,
    pub work: PathBuf,
}

pub struct Anchors<'a> {
    root: Root,
    store: &'a Store,
}

fn rel_anchor(path: &str) -> PathBuf {
    Path::new(DomainLayout::ANCHORS).join(anchor_dir_name(path))
}

fn rel_gen(path: &str, g: u64) -> PathBuf {
    rel_anchor(path).join(generation_dir_name(g))
}

/// Removes a tree whose files may belong to the sandbox's subordinate IDs;
/// the caller supplies how (inside the user namespace), and its error
/// becomes the detail of [`AnchorError::Remove`].
pub type Remover<'r, E> = &'r mut dyn FnMut(&Path) -> Result<(), E>;

impl<'a> Anchors<'a> {
    pub fn new(layout: &DomainLayout, store: &'a Store) -> Result<Self, AnchorError> {
        let root = Root::open(&layout.root).map_err(|source| AnchorError::Io {
            what: "cannot open the Domain Root",
            path: layout.root.clone(),
            source,
        })?;
        Ok(Self { root, store })
    }

    fn io(&self, what: &'static str, rel: &Path) -> impl FnOnce(std::io::Error) -> AnchorError {
        let path = self.root.abs(rel);
        move |source| AnchorError::Io { what, path, source }
    }

    fn make_generation(&self, path: &str, g: u64) -> Result<(), AnchorError> {
        let tmp_name = format!("{}.tmp", generation_dir_name(g));
        let tmp = rel_anchor(path).join(&tmp_name);
        for sub in ["upper", "work"] {
            let p = tmp.join(sub);
            self.root
                .mkdir_all(&p)
                .map_err(self.io("cannot create", &p))?;
        }
        fault::point("reset-mkdir");
        self.root
            .rename(&rel_anchor(path), &tmp_name, &generation_dir_name(g))
            .map_err(self.io("cannot publish", &rel_gen(path, g)))?;
        fault::point("reset-rename");
        Ok(())
    }

    fn dirs(&self, path: &str, g: u64) -> AnchorDirs {
        let base = self.root.abs(&rel_gen(path, g));
        AnchorDirs {
            path: path.to_string(),
            generation: g,
            upper: base.join("upper"),
            work: base.join("work"),
        }
    }

    fn is_dir(&self, rel: &Path) -> Result<bool, AnchorError> {
        Ok(self
            .root
            .kind(rel)
            .map_err(self.io("cannot inspect", rel))?
            == Some(Kind::Dir))
    }

    /// The current directories of `paths`, creating new anchors (generation
    /// 1) and any missing directory of a recorded generation.
    pub fn ensure(&self, paths: &[String]) -> Result<Vec<AnchorDirs>, AnchorError> {
        let recorded = self.store.anchors()?;
        let mut out = Vec::new();
        for path in paths {
            let g = match recorded.iter().find(|(p, _)| p == path) {
                Some((_, r)) => r.generation,
                None => {
                    self.store
                        .set_anchor(path, AnchorRecord { generation: 1 })?;
                    1
                }
            };
            let rel = rel_gen(path, g);
            if !self.is_dir(&rel)? {
                if self
                    .root
                    .kind(&rel)
                    .map_err(self.io("cannot inspect", &rel))?
                    .is_some()
                {
                    return Err(AnchorError::NotADirectory {
                        path: self.root.abs(&rel),
                    });
                }
                self.make_generation(path, g)?;
            }
            for sub in ["upper", "work"] {
                let p = rel.join(sub);
                if !self.is_dir(&p)? {
                    self.root
                        .mkdir_all(&p)
                        .map_err(self.io("cannot create", &p))?;
                }
            }
            out.push(self.dirs(path, g));
        }
        Ok(out)
    }

    /// Finishes or rolls back an interrupted reset, then removes every
    /// generation directory that is not an anchor's current one.
    pub fn recover<E: Display>(&self, remove: Remover<E>) -> Result<(), AnchorError> {
        if let Some(intent) = self.store.reset_intent()? {
            let mut all_published = true;
            for (path, _, new) in &intent.switches {
                all_published &= self.is_dir(&rel_gen(path, *new).join("upper"))?;
            }
            if all_published {
                self.store.complete_reset(&intent)?;
            } else {
                self.store.clear_reset_intent()?;
            }
        }
        for (name, rel) in self.leftovers()? {
            let _ = name;
            self.remove(&rel, remove)?;
        }
        Ok(())
    }

    /// Generation directories (and `.tmp` ones) that are not current.
    fn leftovers(&self) -> Result<Vec<(String, PathBuf)>, AnchorError> {
        let base = Path::new(DomainLayout::ANCHORS);
        if !self.is_dir(base)? {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for (path, rec) in self.store.anchors()? {
            let dir = rel_anchor(&path);
            if !self.is_dir(&dir)? {
                continue;
            }
            let current = generation_dir_name(rec.generation);
            for entry in self.root.list(&dir).map_err(self.io("cannot list", &dir))? {
                if entry != current {
                    out.push((path.clone(), dir.join(entry)));
                }
            }
        }
        Ok(out)
    }

    fn remove<E: Display>(&self, rel: &Path, remove: Remover<E>) -> Result<(), AnchorError> {
        match self
            .root
            .kind(rel)
            .map_err(self.io("cannot inspect", rel))?
        {
            None => Ok(()),
            Some(Kind::Dir) => remove(&self.root.abs(rel)).map_err(|e| AnchorError::Remove {
                path: self.root.abs(rel),
                detail: e.to_string(),
            }),
            Some(_) => Err(AnchorError::NotADirectory {
                path: self.root.abs(rel),
            }),
        }
    }

    /// The directories of every recorded anchor's current generation
    /// (creates nothing).
    pub fn current(&self) -> Result<Vec<AnchorDirs>, AnchorError> {
        Ok(self
            .list()?
            .into_iter()
            .map(|(p, g)| self.dirs(&p, g))
            .collect())
    }

    /// The recorded anchors and their generations.
    pub fn list(&self) -> Result<Vec<(String, u64)>, AnchorError> {
        Ok(self
            .store
            .anchors()?
            .into_iter()
            .map(|(p, r)| (p, r.generation))
            .collect())
    }

    /// Resets `targets` to new empty generations. The caller holds the
    /// exclusive lifecycle lock and has established that nothing uses the
    /// Domain's state.
    pub fn reset<E: Display>(
        &self,
        targets: &[String],
        remove: Remover<E>,
    ) -> Result<Vec<(String, u64, u64)>, AnchorError> {
        let recorded = self.store.anchors()?;
        let mut switches = Vec::new();
        for t in targets {
            let Some((_, rec)) = recorded.iter().find(|(p, _)| p == t) else {
                return Err(AnchorError::Unknown {
                    path: t.clone(),
                    known: recorded
                        .iter()
                        .map(|(p, _)| p.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            switches.push((t.clone(), rec.generation, rec.generation + 1));
        }
        let intent = ResetIntent { switches };
        self.store.set_reset_intent(&intent)?;
        fault::point("reset-intent");
        let switched = intent
            .switches
            .iter()
            .try_for_each(|(path, _, new)| self.make_generation(path, *new))
            .and_then(|()| Ok(self.store.complete_reset(&intent)?));
        if let Err(e) = switched {
            return Err(match self.undo_reset(&intent, remove) {
                Ok(()) => AnchorError::ResetUndone {
                    source: Box::new(e),
                },
                Err(undo) => AnchorError::ResetPending {
                    source: Box::new(e),
                    undo: Box::new(undo),
                },
            });
        }
        fault::point("reset-switch");
        for (path, old, _) in &intent.switches {
            self.remove(&rel_gen(path, *old), remove)?;
        }
        Ok(intent.switches)
    }

    /// Undoes a reset whose switch was not committed: removes the new
    /// generations (published or still `.tmp`), then drops the intent. In
    /// this order, a failure half way leaves an intent whose new
    /// generations are not all in place, which [`Anchors::recover`] rolls
    /// back too.
    fn undo_reset<E: Display>(
        &self,
        intent: &ResetIntent,
        remove: Remover<E>,
    ) -> Result<(), AnchorError> {
        for (path, _, new) in &intent.switches {
            let tmp = rel_anchor(path).join(format!("{}.tmp", generation_dir_name(*new)));
            self.remove(&rel_gen(path, *new), remove)?;
            self.remove(&tmp, remove)?;
        }
        self.store.clear_reset_intent()?;
        Ok(())
    }

    /// Structural verification: every problem found, none when sound.
    pub fn verify(&self) -> Result<Vec<String>, AnchorError> {
        let mut problems = Vec::new();
        if self.store.reset_intent()?.is_some() {
            problems
                .push("an interrupted reset is pending; the next `lazaret run` recovers it".into());
        }
        let base = Path::new(DomainLayout::ANCHORS);
        match self
            .root
            .kind(base)
            .map_err(self.io("cannot inspect", base))?
        {
            None | Some(Kind::Dir) => {}
            Some(_) => {
                problems.push(format!(
                    "{} is not a directory",
                    self.root.abs(base).display()
                ));
                return Ok(problems);
            }
        }
        let recorded = self.store.anchors()?;
        for (path, rec) in &recorded {
            let dir = rel_anchor(path);
            match self
                .root
                .kind(&dir)
                .map_err(self.io("cannot inspect", &dir))?
            {
                Some(Kind::Dir) => {}
                None => {
                    problems.push(format!(
                        "State Anchor {path}: directory {} is missing",
                        self.root.abs(&dir).display()
                    ));
                    continue;
                }
                Some(_) => {
                    problems.push(format!(
                        "State Anchor {path}: {} is not a real directory",
                        self.root.abs(&dir).display()
                    ));
                    continue;
                }
            }
            let g = rel_gen(path, rec.generation);
            for p in [g.clone(), g.join("upper"), g.join("work")] {
                if !self.is_dir(&p)? {
                    problems.push(format!(
                        "State Anchor {path} generation {}: {} is missing or not a real directory",
                        rec.generation,
                        self.root.abs(&p).display()
                    ));
                }
            }
        }
        for (path, rel) in self.leftovers()? {
            problems.push(format!(
                "State Anchor {path}: leftover {} (removed at the next start)",
                self.root.abs(&rel).display()
            ));
        }
        if self.is_dir(base)? {
            for name in self.root.list(base).map_err(self.io("cannot list", base))? {
                if !recorded.iter().any(|(p, _)| anchor_dir_name(p) == name) {
                    problems.push(format!(
                        "{} belongs to no recorded State Anchor",
                        self.root.abs(&base.join(&name)).display()
                    ));
                }
            }
        }
        Ok(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, DomainLayout, Store) {
        let d = tempfile::tempdir().unwrap();
        let layout = DomainLayout::new(d.path());
        let store = Store::open(&layout.store()).unwrap();
        (d, layout, store)
    }

    fn rm(p: &Path) -> std::io::Result<()> {
        std::fs::remove_dir_all(p)
    }

    #[test]
    fn ensure_then_reset_one_keeps_the_other() {
        let (_d, layout, store) = setup();
        let a = Anchors::new(&layout, &store).unwrap();
        let dirs = a.ensure(&["/usr".into(), "/root".into()]).unwrap();
        std::fs::write(dirs[0].upper.join("tool"), "x").unwrap();
        std::fs::write(dirs[1].upper.join("file"), "y").unwrap();
        let sw = a.reset(&["/usr".into()], &mut rm).unwrap();
        assert_eq!(sw, [("/usr".to_string(), 1, 2)]);
        let dirs = a.ensure(&["/usr".into(), "/root".into()]).unwrap();
        assert_eq!(dirs[0].generation, 2);
        assert!(!dirs[0].upper.join("tool").exists());
        assert!(dirs[1].upper.join("file").exists());
        assert!(!layout.anchors().join("usr/g1").exists());
        assert!(a.verify().unwrap().is_empty(), "{:?}", a.verify());
    }

    /// `/usr` anchored (generation 1), with a file in its upper.
    fn usr_with_a_tool(a: &Anchors) {
        let dirs = a.ensure(&["/usr".into()]).unwrap();
        std::fs::write(dirs[0].upper.join("tool"), "x").unwrap();
    }

    /// What a reset of `/usr` from generation 1 to 2 records first.
    fn intend_usr_reset(store: &Store) {
        store
            .set_reset_intent(&ResetIntent {
                switches: vec![("/usr".into(), 1, 2)],
            })
            .unwrap();
    }

    #[test]
    fn interrupted_before_publication_rolls_back() {
        let (_d, layout, store) = setup();
        let a = Anchors::new(&layout, &store).unwrap();
        usr_with_a_tool(&a);
        // As if killed after the intent and a half-made temporary.
        intend_usr_reset(&store);
        std::fs::create_dir_all(layout.anchors().join("usr/g2.tmp/upper")).unwrap();
        assert!(!a.verify().unwrap().is_empty());
        a.recover(&mut rm).unwrap();
        let dirs = a.ensure(&["/usr".into()]).unwrap();
        assert_eq!(dirs[0].generation, 1);
        assert!(dirs[0].upper.join("tool").exists());
        assert!(!layout.anchors().join("usr/g2.tmp").exists());
        assert!(a.verify().unwrap().is_empty());
    }

    #[test]
    fn interrupted_after_publication_rolls_forward() {
        let (_d, layout, store) = setup();
        let a = Anchors::new(&layout, &store).unwrap();
        usr_with_a_tool(&a);
        intend_usr_reset(&store);
        a.make_generation("/usr", 2).unwrap();
        a.recover(&mut rm).unwrap();
        let dirs = a.ensure(&["/usr".into()]).unwrap();
        assert_eq!(dirs[0].generation, 2);
        assert!(!dirs[0].upper.join("tool").exists());
        assert!(!layout.anchors().join("usr/g1").exists());
    }

    #[test]
    fn a_reset_that_fails_part_way_is_undone_at_once() {
        let (_d, layout, store) = setup();
        let a = Anchors::new(&layout, &store).unwrap();
        usr_with_a_tool(&a);
        // The new generation's upper cannot be made (as when the file
        // system is full): a file stands where it goes.
        std::fs::create_dir_all(layout.anchors().join("usr/g2.tmp")).unwrap();
        std::fs::write(layout.anchors().join("usr/g2.tmp/upper"), "").unwrap();
        let err = a.reset(&["/usr".into()], &mut rm).unwrap_err();
        assert!(matches!(err, AnchorError::ResetUndone { .. }), "{err}");
        assert!(err.to_string().contains("keeps its content"), "{err}");
        assert_eq!(store.reset_intent().unwrap(), None);
        let dirs = a.ensure(&["/usr".into()]).unwrap();
        assert_eq!(dirs[0].generation, 1);
        assert!(dirs[0].upper.join("tool").exists());
        assert!(!layout.anchors().join("usr/g2.tmp").exists());
        assert!(a.verify().unwrap().is_empty(), "{:?}", a.verify());
    }

    #[test]
    fn planted_symlink_is_never_followed() {
        let (_d, layout, store) = setup();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), "keep").unwrap();
        let a = Anchors::new(&layout, &store).unwrap();
        a.ensure(&["/usr".into()]).unwrap();
        // Replace the anchor's directory with a link to the outside.
        let anchor = layout.anchors().join("usr");
        std::fs::remove_dir_all(&anchor).unwrap();
        std::os::unix::fs::symlink(outside.path(), &anchor).unwrap();
        assert!(a.reset(&["/usr".into()], &mut rm).is_err());
        assert!(a.ensure(&["/usr".into()]).is_err());
        assert!(!a.verify().unwrap().is_empty());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("precious")).unwrap(),
            "keep"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }
}
