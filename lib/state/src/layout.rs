//! Paths of a Domain Root. All host-private (SR-10).

use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct DomainLayout {
    pub root: PathBuf,
}

impl DomainLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    /// The Domain `flock`, which is also the exclusive lifecycle lock.
    pub fn lock(&self) -> PathBuf {
        self.root.join("domain.lock")
    }
    pub fn store(&self) -> PathBuf {
        self.root.join("domain.redb")
    }
    pub fn meta(&self) -> PathBuf {
        self.root.join("meta.json")
    }
    /// Everything transient of one generation; removed at teardown.
    pub fn run(&self) -> PathBuf {
        self.root.join("run")
    }
    pub fn socket(&self) -> PathBuf {
        self.run().join("coordinator.sock")
    }
    /// Ignored Workspace State: what the sandbox wrote at Git-ignored
    /// workspace paths (persistent).
    pub fn ignored(&self) -> PathBuf {
        self.root.join(Self::IGNORED)
    }
    /// What the sandbox keeps private in a linked worktree's or submodule
    /// checkout's Git directory (hooks, a rewritten configuration, a new
    /// worktree's Git directory), reset with the Ignored Workspace State
    /// (persistent).
    pub fn linked_git(&self) -> PathBuf {
        self.root.join(Self::LINKED_GIT)
    }

    /// What the sandbox keeps private in its writable volumes: a `.git`
    /// the host does not have there (a repository made inside), hooks, a
    /// rewritten configuration; one directory per volume host path, reset
    /// with the Ignored Workspace State (persistent).
    pub fn volume_git(&self) -> PathBuf {
        self.root.join(Self::VOLUME_GIT)
    }

    /// Relative to the Domain Root: the Ignored Workspace State.
    pub const IGNORED: &'static str = "ignored";
    /// Relative to the Domain Root: see [`DomainLayout::linked_git`].
    pub const LINKED_GIT: &'static str = "linked-git";
    /// Relative to the Domain Root: see [`DomainLayout::volume_git`].
    pub const VOLUME_GIT: &'static str = "volume-git";

    /// Relative to the Domain Root: where the State Anchors live.
    pub const ANCHORS: &'static str = "state/anchors";

    pub fn anchors(&self) -> PathBuf {
        self.root.join(Self::ANCHORS)
    }
}

/// The directory name of the anchor for sandbox path `path`: the path
/// without its leading `/`, with `%` and `/` escaped so that names cannot
/// collide or climb.
pub fn anchor_dir_name(path: &str) -> String {
    path.trim_start_matches('/')
        .replace('%', "%25")
        .replace('/', "%2F")
}

/// `g<N>`: the directory of an anchor's generation N.
pub fn generation_dir_name(n: u64) -> String {
    format!("g{n}")
}

pub fn is_beneath(root: &Path, p: &Path) -> bool {
    p.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_names_are_flat_and_distinct() {
        assert_eq!(anchor_dir_name("/usr"), "usr");
        assert_eq!(anchor_dir_name("/var/lib"), "var%2Flib");
        assert_ne!(anchor_dir_name("/a%2Fb"), anchor_dir_name("/a/b"));
        assert!(!anchor_dir_name("/../x").contains('/'));
    }
}
