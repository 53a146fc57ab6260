//! Whether host `git status` would list a new file: the repository's
//! ignore rules as they are on the host now (`.gitignore` at every
//! level, `.git/info/exclude`, `core.excludesFile`), evaluated with
//! `gix-ignore` as the mount router does, never by running Git. For
//! `lazaret changes`, which flags new files the rules hide.
//!
//! Files are read beneath the workspace without following links, each
//! bounded; an unreadable one counts as absent (the flag may then be
//! missed, never wrongly set).

use bstr::{BStr, ByteSlice};
use gix_glob::pattern::Case;
use gix_glob::search::pattern::List;
use gix_ignore::search::Ignore;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const MAX_FILE: u64 = 1 << 20;
const PARSE: Ignore = Ignore {
    support_precious: false,
};

pub struct HostRules {
    root: Option<lazaret_state::beneath::Root>,
    globals: Vec<List<Ignore>>,
    dirs: std::cell::RefCell<HashMap<Vec<u8>, Option<List<Ignore>>>>,
}

fn bounded(f: std::fs::File) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    f.take(MAX_FILE).read_to_end(&mut buf).ok()?;
    Some(buf)
}

impl HostRules {
    pub fn load(ws: &Path) -> HostRules {
        let root = lazaret_state::beneath::Root::open(ws).ok();
        let mut globals = Vec::new();
        let read_rel = |rel: &str| -> Option<Vec<u8>> {
            let r = root.as_ref()?;
            let (dir, name) = rel.rsplit_once('/')?;
            let fd = r.open_dir(Path::new(dir)).ok()?;
            let f = rustix::fs::openat(
                &fd,
                name,
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .ok()?;
            bounded(std::fs::File::from(f))
        };
        if let Some(b) = read_rel(".git/info/exclude") {
            if let Ok(l) = List::from_bytes(&b, PathBuf::from(".git/info/exclude"), None, PARSE) {
                globals.push(l);
            }
        }
        if let Some(p) = excludes_file(ws) {
            if let Some(b) = std::fs::File::open(&p).ok().and_then(bounded) {
                if let Ok(l) = List::from_bytes(&b, p, None, PARSE) {
                    globals.push(l);
                }
            }
        }
        HostRules {
            root,
            globals,
            dirs: Default::default(),
        }
    }

    fn dir_list(&self, dir: &[u8]) -> Option<List<Ignore>> {
        let root = self.root.as_ref()?;
        let fd = root
            .open_dir(Path::new(std::ffi::OsStr::from_bytes(dir)))
            .ok()?;
        let f = rustix::fs::openat(
            &fd,
            ".gitignore",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()?;
        let bytes = bounded(std::fs::File::from(f))?;
        let mut rel = dir.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(b".gitignore");
        List::from_bytes(
            &bytes,
            PathBuf::from(std::ffi::OsStr::from_bytes(&rel)),
            Some(Path::new("")),
            PARSE,
        )
        .ok()
    }

    fn matched(&self, stack: &[&List<Ignore>], path: &[u8], is_dir: bool) -> bool {
        let rel: &BStr = path.as_bstr();
        let basename_pos = rel.rfind_byte(b'/').map(|p| p + 1);
        for list in stack.iter().rev().copied().chain(self.globals.iter()) {
            if let Some(m) = gix_ignore::search::pattern_matching_relative_path(
                list,
                rel,
                basename_pos,
                Some(is_dir),
                Case::Sensitive,
            ) {
                return !m.pattern.is_negative();
            }
        }
        false
    }

    /// Whether the file `path` (workspace-relative) is ignored: a leading
    /// directory ignored, or the file itself.
    pub fn is_ignored(&self, path: &[u8]) -> bool {
        self.is_ignored_as(path, false)
    }

    /// Whether the directory `path` (workspace-relative) is ignored: it or
    /// a leading directory.
    pub fn is_ignored_dir(&self, path: &[u8]) -> bool {
        self.is_ignored_as(path, true)
    }

    fn is_ignored_as(&self, path: &[u8], is_dir: bool) -> bool {
        let comps: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
        let mut dirs = self.dirs.borrow_mut();
        for i in 0..comps.len() {
            let dir = comps[..i].join(&b'/');
            dirs.entry(dir.clone())
                .or_insert_with(|| self.dir_list(&dir));
        }
        let stack_for = |i: usize| -> Vec<&List<Ignore>> {
            (0..=i)
                .filter_map(|k| dirs.get(&comps[..k].join(&b'/')).and_then(|l| l.as_ref()))
                .collect()
        };
        for i in 1..comps.len() {
            let prefix = comps[..i].join(&b'/');
            if self.matched(&stack_for(i - 1), &prefix, true) {
                return true;
            }
        }
        self.matched(&stack_for(comps.len() - 1), path, is_dir)
    }
}

/// `core.excludesFile` as host Git takes it (its default,
/// `$XDG_CONFIG_HOME/git/ignore`, when unset).
fn excludes_file(ws: &Path) -> Option<PathBuf> {
    let lookup = lazaret_gitconfig::Lookup {
        env: &lazaret_gitconfig::process_env,
    };
    let cfg = lookup.load(Some(&ws.join(".git"))).ok();
    match cfg.as_ref().and_then(|c| c.path("core.excludesFile")) {
        Some(p) => p
            .interpolate(gix_config::path::interpolate::Context {
                home_dir: lookup.home().as_deref(),
                ..Default::default()
            })
            .ok(),
        None => lookup.xdg_config_home().map(|x| x.join("git/ignore")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_rules_at_every_level_and_the_exclude_file() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path();
        std::fs::create_dir_all(w.join(".git/info")).unwrap();
        std::fs::create_dir_all(w.join("tests/deep")).unwrap();
        std::fs::write(w.join(".gitignore"), "*.log\nbuild/\n").unwrap();
        std::fs::write(w.join("tests/.gitignore"), "*\n!keep.py\n").unwrap();
        std::fs::write(w.join(".git/info/exclude"), "secret.txt\n").unwrap();
        let r = HostRules::load(w);
        for p in [
            "a.log",
            "build/x",
            "tests/conftest.py",
            "tests/.gitignore",
            "secret.txt",
            "tests/deep/x",
        ] {
            assert!(r.is_ignored(p.as_bytes()), "{p}");
        }
        for p in ["src/main.rs", "tests/keep.py", "README"] {
            assert!(!r.is_ignored(p.as_bytes()), "{p}");
        }
    }
}
