//! A profile's host paths against the host places the sandbox must reach
//! only through Lazaret's own mounts, or not at all.
//!
//! Checked per run, once the workspace is known (like [`crate::placement`]),
//! with the file, line and key of what is refused:
//!
//! - a volume that is, contains or lies inside the workspace or a Git
//!   directory the workspace uses outside itself (a linked worktree's
//!   common directory, a submodule checkout's): the sandbox would reach
//!   them past Git Sentry and the ignored-path router;
//! - a volume that is, contains or lies inside the Storage Root (every
//!   Domain's state, the agents' logins in shared paths);
//! - a writable volume that is or contains a place whose content host
//!   programs trust: where Lazaret reads its configuration by default, and
//!   the directory of Lazaret's own programs;
//! - a read-only volume that is or lies inside a writable one (it would be
//!   writable there);
//! - a `host_ca_file` that lies in the workspace, a Git directory it uses,
//!   the Storage Root or any volume: the sandbox could put another host
//!   file in its place.
//!
//! Places are compared by identity (device and inode of the path and of
//! each ancestor, the place resolved first), so a symlink or a second
//! mount of the same directory does not hide an overlap.
//!
//! Leaves to others: that a volume's path holds no symlink (the holder
//! opens it with `RESOLVE_NO_SYMLINKS`), the config file's own placement
//! ([`crate::check_not_mounted`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{ConfigError, Invalid};
use crate::load::Loaded;
use crate::placement::resolve_existing_prefix;
use crate::schema::Profile;
use crate::spans::{key_path, KeyPath, SpanIndex};

/// The host places of one run, canonical or not (they are resolved here).
#[derive(Debug, Clone, Default)]
pub struct HostPlaces {
    pub workspace: PathBuf,
    /// Git directories the workspace uses that may lie outside it.
    pub git_dirs: Vec<PathBuf>,
    pub storage_root: PathBuf,
    /// Where Lazaret reads its configuration when no `--config` is given.
    pub default_config: Option<PathBuf>,
    /// The directory of Lazaret's own programs.
    pub programs: Option<PathBuf>,
}

/// How two paths relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    Same,
    /// The first holds the second.
    Contains,
    /// The first lies beneath the second.
    Inside,
}

impl Relation {
    fn word(self) -> &'static str {
        match self {
            Relation::Same => "is",
            Relation::Contains => "contains",
            Relation::Inside => "lies inside",
        }
    }
}

/// Which overlaps with a place are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Any volume that is it, contains it or lies inside it.
    Disjoint,
    /// A writable volume that is it or contains it.
    NotWritableOver,
}

struct Guard {
    what: &'static str,
    path: PathBuf,
    rule: Rule,
    why: &'static str,
}

fn guards(places: &HostPlaces) -> Vec<Guard> {
    let mut out = vec![Guard {
        what: "the workspace",
        path: places.workspace.clone(),
        rule: Rule::Disjoint,
        why: "the sandbox would reach the workspace past Git Sentry and the ignored-path router (the files Git ignores readable, `.git` writable); mount a directory beside the workspace instead",
    }];
    for g in &places.git_dirs {
        out.push(Guard {
            what: "the Git directory",
            path: g.clone(),
            rule: Rule::Disjoint,
            why: "the workspace uses it, and the sandbox would reach it past Git Sentry (host Git runs what its configuration and hooks say); mount a directory beside it instead",
        });
    }
    out.push(Guard {
        what: "the Storage Root",
        path: places.storage_root.clone(),
        rule: Rule::Disjoint,
        why: "it holds every Domain's state and the profiles' shared paths (agents' logins); mount a directory beside it instead",
    });
    if let Some(c) = &places.default_config {
        out.push(Guard {
            what: "the configuration file",
            path: c.clone(),
            rule: Rule::NotWritableOver,
            why: "the sandbox could write the configuration Lazaret reads next (auto-approval rules, volumes); mount a narrower directory, or set read_only = true",
        });
    }
    if let Some(p) = &places.programs {
        out.push(Guard {
            what: "the directory of Lazaret's programs",
            path: p.clone(),
            rule: Rule::NotWritableOver,
            why: "the sandbox could replace the programs Lazaret runs on the host; mount a narrower directory, or set read_only = true",
        });
    }
    out
}

/// (device, inode) of `p` and of each ancestor, `p` first; `None` for what
/// does not exist (or cannot be looked at).
fn identities(p: &Path) -> Vec<Option<(u64, u64)>> {
    p.ancestors()
        .map(|a| std::fs::metadata(a).ok().map(|m| (m.dev(), m.ino())))
        .collect()
}

/// How `a`, a path of the configuration, relates to the place `b`, by
/// identity where both exist, else by path. `a` is taken as written: its
/// ancestors are the directories it is reached through (a link at its end
/// does not move it out of the workspace it lies in; the open that follows
/// refuses links anyway). `b` is resolved first, so its ancestors are
/// those of the real directory.
pub(crate) fn relation(a: &Path, b: &Path) -> Option<Relation> {
    let b = resolve_existing_prefix(b);
    let (ia, ib) = (identities(a), identities(&b));
    if let (Some(Some(x)), Some(Some(y))) = (ia.first(), ib.first()) {
        if x == y {
            return Some(Relation::Same);
        }
    }
    if let Some(Some(x)) = ia.first() {
        if ib.iter().skip(1).any(|i| i.as_ref() == Some(x)) {
            return Some(Relation::Contains);
        }
    }
    if let Some(Some(y)) = ib.first() {
        if ia.iter().skip(1).any(|i| i.as_ref() == Some(y)) {
            return Some(Relation::Inside);
        }
    }
    // What does not exist yet is compared by its path.
    if a == b {
        Some(Relation::Same)
    } else if b.starts_with(a) {
        Some(Relation::Contains)
    } else if a.starts_with(&b) {
        Some(Relation::Inside)
    } else {
        None
    }
}

type Failure = (KeyPath, Invalid);

/// Refuses what the module documentation lists for profile `name` of
/// `loaded`, naming the file, the line and the key.
pub fn check_host_overlap(
    loaded: &Loaded,
    name: &str,
    places: &HostPlaces,
) -> Result<(), ConfigError> {
    // The built-in default declares no volume and no bundle.
    let (Some(path), Ok(profile)) = (&loaded.path, loaded.config.profile(name)) else {
        return Ok(());
    };
    let at = key_path!["profiles", name];
    let checked = volumes(profile, &at, places).and_then(|()| host_ca(profile, &at, places));
    checked.map_err(|(key, reason)| {
        let line = loaded
            .text
            .as_deref()
            .and_then(SpanIndex::build)
            .and_then(|index| index.line_of_path(&key));
        ConfigError::Invalid {
            path: path.clone(),
            line,
            key: key.to_string(),
            reason,
        }
    })
}

fn volumes(profile: &Profile, at: &KeyPath, places: &HostPlaces) -> Result<(), Failure> {
    let guards = guards(places);
    for (i, v) in profile.volumes.iter().enumerate() {
        let here = at.key("volumes").index(i).key("host");
        for g in &guards {
            let Some(rel) = relation(&v.host, &g.path) else {
                continue;
            };
            let refused = match g.rule {
                Rule::Disjoint => true,
                Rule::NotWritableOver => !v.read_only && rel != Relation::Inside,
            };
            if refused {
                return Err((
                    here,
                    Invalid::VolumeOverlap {
                        host: v.host.display().to_string(),
                        overlap: format!(
                            "{} {} {}: {}",
                            rel.word(),
                            g.what,
                            g.path.display(),
                            g.why
                        ),
                    },
                ));
            }
        }
        if !v.read_only {
            continue;
        }
        for (j, w) in profile.volumes.iter().enumerate() {
            let within = matches!(
                relation(&v.host, &w.host),
                Some(Relation::Same | Relation::Inside)
            );
            if j != i && !w.read_only && within {
                return Err((
                    here,
                    Invalid::ReadOnlyInWritable {
                        host: v.host.display().to_string(),
                        other: j,
                    },
                ));
            }
        }
    }
    Ok(())
}

fn host_ca(profile: &Profile, at: &KeyPath, places: &HostPlaces) -> Result<(), Failure> {
    let Some(file) = profile
        .host_ca_file
        .as_ref()
        .filter(|_| profile.trust_host_ca)
    else {
        return Ok(());
    };
    let mut writable: Vec<String> = vec![format!("the workspace {}", places.workspace.display())];
    let mut paths: Vec<&Path> = vec![&places.workspace];
    for g in &places.git_dirs {
        writable.push(format!("the Git directory {}", g.display()));
        paths.push(g);
    }
    writable.push(format!(
        "the Storage Root {}",
        places.storage_root.display()
    ));
    paths.push(&places.storage_root);
    for (i, v) in profile.volumes.iter().enumerate() {
        writable.push(format!(
            "the host path {} of volumes[{i}]",
            v.host.display()
        ));
        paths.push(&v.host);
    }
    for (place, p) in writable.into_iter().zip(paths) {
        if let Some(rel @ (Relation::Same | Relation::Inside)) = relation(file, p) {
            return Err((
                at.key("host_ca_file"),
                Invalid::HostCaPlace {
                    path: file.display().to_string(),
                    place: format!("{} {place}", rel.word()),
                },
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relations_by_identity_and_by_path() {
        let d = tempfile::tempdir().unwrap();
        let b = d.path();
        std::fs::create_dir_all(b.join("src/app")).unwrap();
        std::fs::create_dir_all(b.join("src2")).unwrap();
        std::os::unix::fs::symlink(b.join("src"), b.join("alias")).unwrap();
        let r = |x: &str, y: &str| relation(&b.join(x), &b.join(y));
        assert_eq!(r("src", "src/app"), Some(Relation::Contains));
        assert_eq!(r("src/app", "src"), Some(Relation::Inside));
        assert_eq!(r("src/app", "src/app"), Some(Relation::Same));
        assert_eq!(r("alias", "src/app"), Some(Relation::Contains));
        assert_eq!(r("alias/app", "src/app"), Some(Relation::Same));
        assert_eq!(r("src2", "src/app"), None);
        assert_eq!(r("src", "src2"), None);
        // What does not exist yet, beneath what does.
        assert_eq!(r("src", "src/app/not/yet"), Some(Relation::Contains));
        assert_eq!(r("src/new", "src"), Some(Relation::Inside));
        assert_eq!(r("src2", "src/new"), None);
        assert_eq!(relation(Path::new("/"), b), Some(Relation::Contains));
        // A link in the workspace to a file outside still lies inside.
        std::fs::write(b.join("src2/key.pem"), "").unwrap();
        std::os::unix::fs::symlink(b.join("src2/key.pem"), b.join("src/app/ca.pem")).unwrap();
        assert_eq!(r("src/app/ca.pem", "src/app"), Some(Relation::Inside));
    }
}
