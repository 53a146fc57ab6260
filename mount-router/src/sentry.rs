//! Git Sentry's name policy: what the sandbox may do to each name in a
//! Git directory, decided per operation, so that it holds for entries
//! that do not exist yet, after renames, and in the next Domain
//! generation (nothing the sandbox did is remembered, only the host's
//! files are looked at).
//!
//! Git directories are the workspace's `.git` (when it is a directory),
//! each submodule Git directory beneath `.git/modules/` that exists on the
//! host (a directory holding `HEAD`), each linked worktree's
//! `.git/worktrees/<name>` that exists on the host, and the `.git`
//! directory of a nested repository that exists on the host. Inside one,
//! only the entries Git writes in normal operation are live (see
//! [`LIVE`] and [`LIVE_DIRS`], each with the Git operation that writes
//! it); what Git reads as configuration, hooks, attributes or a pointer to
//! another Git or object directory is read-only ([`Access::ReadOnly`]),
//! except the configuration files, which Git inside may rewrite into a
//! sandbox-private copy that the host never reads ([`Access::Shadowed`]);
//! hooks are sandbox-private; any other name is read-only when the host
//! has it and refused (`EPERM`) when it does not.
//!
//! A `.git` entry below the workspace root that the host does not have
//! (a repository the sandbox makes, or a submodule or worktree checkout
//! it adds) is sandbox-private: it lives in the Domain's Ignored Workspace
//! State, so host Git never discovers it. The same holds for a new
//! submodule Git directory (`.git/modules/<new>`) or worktree Git
//! directory (`.git/worktrees/<new>`), so `git submodule update` and `git
//! worktree add` work inside without the host ever reading what they
//! wrote.
//!
//! The decision is a pure function of the path and of what the host has
//! ([`Host`]); the router applies it (see `router`): read-only and
//! refused names give `EPERM` for every change (create, write, truncate,
//! chmod, chown, utimes, link from or to, rename from or to, unlink,
//! rmdir), and a host directory that holds a protected entry cannot be
//! renamed.
//!
//! Leaves to others: ignore rules (`rules`), safe path resolution
//! (`sys`).

/// What the sandbox may do with a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Not in a Git directory: the ignore rules route it.
    Free,
    /// Written by Git in normal operation: read-write, on the host.
    Live,
    /// The host's entry, visible but never changed; a new entry of this
    /// name is refused (`EPERM`).
    ReadOnly,
    /// Sandbox-private: lives in the Domain's state store, and the host's
    /// entry (if any) is hidden.
    Private,
    /// The host's entry, read-only, if the host has one; otherwise a new
    /// entry is sandbox-private.
    HostOrPrivate,
    /// A sandbox-private entry if there is one, else the host's,
    /// read-only; a new entry (Git's lock-and-rename) is sandbox-private
    /// and hides the host's from then on. For configuration files, which
    /// Git inside rewrites in normal operation (`git config`, `submodule
    /// update`, `branch -D`) and host Git must never read from the
    /// sandbox.
    Shadowed,
}

impl Access {
    /// Whether the sandbox may change the host's entry, or create one.
    pub fn host_writable(self) -> bool {
        matches!(self, Access::Free | Access::Live)
    }
}

/// What the policy needs to know of the host workspace.
pub trait Host {
    /// Whether the host has an entry at `path` (not following symlinks).
    fn exists(&self, path: &[u8]) -> bool;
    /// Whether the host has a Git directory at `path`: a real directory
    /// holding a `HEAD`.
    fn is_git_dir(&self, path: &[u8]) -> bool;
}

/// What [`Host::is_git_dir`] means, given whether an entry is a directory
/// (`None`: absent): a real directory holding a `HEAD` that is not one.
pub fn is_git_dir_by(is_dir: impl Fn(&[u8]) -> Option<bool>, path: &[u8]) -> bool {
    is_dir(path) == Some(true) && is_dir(&crate::sys::join(path, b"HEAD")) == Some(false)
}

/// Top-level files of a Git directory that Git writes in normal
/// operation (each also as `NAME.lock`, Git's lock-and-rename).
pub const LIVE: &[&str] = &[
    "HEAD",             // checkout, commit, branch switch
    "ORIG_HEAD",        // reset, merge, rebase, pull
    "FETCH_HEAD",       // fetch, pull
    "MERGE_HEAD",       // merge in progress
    "MERGE_MSG",        // merge in progress
    "MERGE_MODE",       // merge in progress
    "MERGE_RR",         // rerere during merge
    "MERGE_AUTOSTASH",  // merge --autostash
    "AUTO_MERGE",       // merge-ort's tree of the last merge
    "CHERRY_PICK_HEAD", // cherry-pick in progress
    "REVERT_HEAD",      // revert in progress
    "REBASE_HEAD",      // rebase stopped at a commit
    "BISECT_LOG",       // bisect
    "BISECT_START",     // bisect
    "BISECT_EXPECTED_REV",
    "BISECT_ANCESTORS_OK",
    "BISECT_NAMES",
    "BISECT_TERMS",
    "BISECT_RUN",
    "BISECT_HEAD",
    "SQUASH_MSG",          // merge --squash
    "COMMIT_EDITMSG",      // commit
    "TAG_EDITMSG",         // tag -a
    "NOTES_EDITMSG",       // notes
    "NOTES_MERGE_PARTIAL", // notes merge
    "NOTES_MERGE_REF",     // notes merge
    "EDIT_DESCRIPTION",    // branch --edit-description
    "PULLREQ_EDITMSG",     // request-pull editors
    "index",               // add, commit, status (refresh), checkout
    "packed-refs",         // pack-refs, gc, fetch
    "shallow",             // fetch --depth
    "gc.pid",              // gc
    "gc.log",              // gc --auto in the background
    "description",         // init (gitweb reads it; Git runs nothing)
];

/// Prefixes of live top-level files whose rest Git chooses (temporary
/// index files and split-index files).
pub const LIVE_PREFIXES: &[&str] = &[
    "sharedindex.", // split index
    "next-index-",  // commit with pathspec, add -i
    "index.stash.", // stash's temporary index
    "BISECT_",      // bisect's other state files
    "shallow_",     // fetch's temporary shallow file
];

/// Top-level directories of a Git directory that Git writes in normal
/// operation; everything beneath them is live, except [`READ_ONLY_BENEATH`].
pub const LIVE_DIRS: &[&str] = &[
    "objects",              // every write of a blob, tree, commit, pack
    "refs",                 // branches, tags, remotes' refs, stash
    "logs",                 // reflogs
    "rebase-merge",         // rebase in progress
    "rebase-apply",         // am, rebase --apply
    "sequencer",            // cherry-pick/revert of several commits
    "rr-cache",             // rerere
    "lfs",                  // git-lfs object store (data only)
    "lost-found",           // fsck --lost-found
    "NOTES_MERGE_WORKTREE", // notes merge
];

/// Names beneath live directories that Git reads as a pointer to other
/// object stores: read-only.
pub const READ_ONLY_BENEATH: &[&str] = &["objects/info/alternates", "objects/info/http-alternates"];

/// Entries of `info/` that Git writes: the rest of `info/` (attributes,
/// grafts) is read-only.
pub const INFO_LIVE: &[&str] = &[
    "exclude",         // ignore rules: the router lets these only hide more
    "refs",            // update-server-info
    "packs",           // (objects/info/packs, for dumb transports)
    "sparse-checkout", // sparse-checkout set
];

/// Configuration files: Git inside rewrites them, into a sandbox-private
/// copy ([`Access::Shadowed`]); the host's are never written.
pub const SHADOWED: &[&str] = &[
    "config",          // configuration: core.fsmonitor, aliases, filters...
    "config.worktree", // per-worktree configuration
];

/// Names Git reads as configuration, attributes, hooks' location or a
/// redirection to another Git directory: never written from inside.
pub const PROTECTED: &[&str] = &[
    "commondir", // redirection to the common Git directory
    "gitdir",    // a worktree's pointer back to its checkout
    "remotes",   // legacy remote definitions
    "branches",  // legacy remote definitions
];

/// The policy as text, for `--print-confinement`.
pub fn describe() -> String {
    let list = |l: &[&str]| l.join(" ");
    format!(
        "[git sentry] in every Git directory (.git, .git/modules/<existing>, \
         .git/worktrees/<existing>, a nested repository's .git); each name also as NAME.lock and NAME.new\n\
         live (read-write): {}\n\
         live prefixes: {}\n\
         live directories (and all beneath): {}\n\
         live in info/: {}\n\
         shadowed (private copy on rewrite, host's read-only): {}\n\
         read-only: {} {}\n\
         private: hooks/, a .git the host does not have, .git/modules/<new>, .git/worktrees/<new>\n\
         refused (EPERM): any other name; symlinks; links to or from protected names; \
         renaming a directory that holds a protected name\n",
        list(LIVE),
        list(LIVE_PREFIXES),
        list(LIVE_DIRS),
        list(INFO_LIVE),
        list(SHADOWED),
        list(PROTECTED),
        list(READ_ONLY_BENEATH),
    )
}

fn split(path: &[u8]) -> Vec<&[u8]> {
    if path.is_empty() {
        return Vec::new();
    }
    path.split(|&b| b == b'/').collect()
}

fn join(c: &[&[u8]]) -> Vec<u8> {
    c.join(&b'/')
}

/// Strips a trailing `.lock` or `.new` (Git's lock files and the
/// temporary files it renames into place share their target's fate).
fn unlocked(name: &[u8]) -> &[u8] {
    name.strip_suffix(b".lock")
        .or_else(|| name.strip_suffix(b".new"))
        .unwrap_or(name)
}

/// `NAME` for `NAME_XXXXXX`, the temporary file `update-server-info`
/// renames into place.
fn temp_of(name: &[u8]) -> &[u8] {
    match name.iter().rposition(|&b| b == b'_') {
        Some(i) if name.len() - i == 7 => &name[..i],
        _ => name,
    }
}

fn is_one_of(name: &[u8], list: &[&str]) -> bool {
    list.iter().any(|l| l.as_bytes() == name)
}

/// The access the sandbox has to `path` (relative to the workspace root).
pub fn access(host: &dyn Host, path: &[u8]) -> Access {
    let c = split(path);
    // A `.git` anywhere below the root: the host's (read-only, and a Git
    // directory beneath it if it is one), or sandbox-private.
    for i in 0..c.len() {
        if c[i] != b".git" {
            continue;
        }
        let dotgit = join(&c[..=i]);
        if !host.exists(&dotgit) {
            return Access::Private;
        }
        if i + 1 == c.len() || !host.is_git_dir(&dotgit) {
            // The host's `.git` itself, or anything beneath a `.git` file
            // or a `.git` directory that is no Git directory.
            return Access::ReadOnly;
        }
        return in_git_dir(host, &c[..=i], &c[i + 1..]);
    }
    Access::Free
}

/// The access to `rest` beneath the Git directory `dir`.
fn in_git_dir(host: &dyn Host, dir: &[&[u8]], rest: &[&[u8]]) -> Access {
    let top = rest[0];
    let name = unlocked(top);
    if rest.len() == 1 && is_one_of(name, SHADOWED) {
        return Access::Shadowed;
    }
    if is_one_of(name, PROTECTED) {
        return Access::ReadOnly;
    }
    if top == b"hooks" {
        return Access::Private;
    }
    if rest.len() == 1 {
        if is_one_of(name, LIVE)
            || is_one_of(name, LIVE_DIRS)
            || LIVE_PREFIXES.iter().any(|p| name.starts_with(p.as_bytes()))
            || matches!(name, b"info" | b"modules" | b"worktrees")
        {
            return Access::Live;
        }
        return Access::ReadOnly;
    }
    if is_one_of(top, LIVE_DIRS) {
        let rel = join(rest);
        if READ_ONLY_BENEATH.iter().any(|r| {
            let r = r.as_bytes();
            rel == r || unlocked(&rel) == r
        }) {
            return Access::ReadOnly;
        }
        return Access::Live;
    }
    match top {
        b"info" => {
            if rest.len() == 2 && is_one_of(temp_of(unlocked(rest[1])), INFO_LIVE) {
                Access::Live
            } else {
                Access::ReadOnly
            }
        }
        b"modules" | b"worktrees" => {
            // The first directory beneath that is a Git directory on the
            // host (submodule names may hold slashes; worktrees' may not).
            let deepest = if top == b"worktrees" { 2 } else { rest.len() };
            for k in 2..=deepest.min(rest.len()) {
                let mut sub: Vec<&[u8]> = dir.to_vec();
                sub.extend_from_slice(&rest[..k]);
                let sub_path = join(&sub);
                if host.is_git_dir(&sub_path) {
                    if k == rest.len() {
                        // The Git directory itself.
                        return Access::ReadOnly;
                    }
                    return in_git_dir(host, &sub, &rest[k..]);
                }
            }
            Access::HostOrPrivate
        }
        _ => Access::ReadOnly,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    struct Fake {
        entries: HashSet<Vec<u8>>,
        git_dirs: HashSet<Vec<u8>>,
    }

    impl Fake {
        fn new(entries: &[&str], git_dirs: &[&str]) -> Fake {
            Fake {
                entries: entries.iter().map(|e| e.as_bytes().to_vec()).collect(),
                git_dirs: git_dirs.iter().map(|e| e.as_bytes().to_vec()).collect(),
            }
        }
    }

    impl Host for Fake {
        fn exists(&self, path: &[u8]) -> bool {
            self.entries.contains(path) || self.git_dirs.contains(path)
        }
        fn is_git_dir(&self, path: &[u8]) -> bool {
            self.git_dirs.contains(path)
        }
    }

    fn host() -> Fake {
        Fake::new(
            &[
                ".git/config",
                ".git/description",
                ".git/info",
                ".git/info/exclude",
                ".git/info/attributes",
                ".git/modules",
                ".git/modules/lib",
                ".git/worktrees",
                "lib/sub/.git",
                "wt/.git",
                "nested/.git/config",
            ],
            &[
                ".git",
                ".git/modules/lib/sub",
                ".git/worktrees/wt",
                "nested/.git",
            ],
        )
    }

    #[test]
    fn names_git_writes_are_live() {
        let h = host();
        for p in [
            ".git/HEAD",
            ".git/HEAD.lock",
            ".git/index",
            ".git/index.lock",
            ".git/ORIG_HEAD",
            ".git/FETCH_HEAD",
            ".git/COMMIT_EDITMSG",
            ".git/packed-refs.lock",
            ".git/packed-refs.new",
            ".git/shallow_Ab12Cd",
            ".git/sharedindex.0123abcd",
            ".git/next-index-1234.lock",
            ".git/objects/ab/cdef",
            ".git/objects/pack/pack-1.pack",
            ".git/objects/info/packs",
            ".git/refs/heads/main.lock",
            ".git/refs/stash",
            ".git/logs/HEAD",
            ".git/rebase-merge/done",
            ".git/sequencer/todo",
            ".git/info/exclude",
            ".git/info/sparse-checkout",
            ".git/info/refs_a1B2c3",
            ".git/modules/lib/sub/HEAD",
            ".git/modules/lib/sub/objects/ab/cd",
            ".git/worktrees/wt/HEAD",
            ".git/worktrees/wt/index.lock",
            "nested/.git/refs/heads/x",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::Live, "{p}");
        }
    }

    #[test]
    fn configuration_hooks_and_redirections_are_protected() {
        let h = host();
        for p in [
            ".git",
            ".git/commondir",
            ".git/gitdir",
            ".git/remotes/origin",
            ".git/branches/x",
            ".git/info/attributes",
            ".git/info/grafts",
            ".git/objects/info/alternates",
            ".git/objects/info/http-alternates",
            ".git/modules/lib/sub",
            ".git/modules/lib/sub/commondir",
            ".git/worktrees/wt/commondir",
            ".git/worktrees/wt/gitdir",
            ".git/fsmonitor--daemon.ipc",
            ".git/unknown-new-file",
            "lib/sub/.git",
            "wt/.git",
            "nested/.git",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::ReadOnly, "{p}");
        }
    }

    #[test]
    fn configuration_files_are_shadowed_by_private_copies() {
        let h = host();
        for p in [
            ".git/config",
            ".git/config.lock",
            ".git/config.worktree",
            ".git/modules/lib/sub/config",
            ".git/modules/lib/sub/config.lock",
            ".git/worktrees/wt/config.worktree",
            "nested/.git/config",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::Shadowed, "{p}");
        }
        assert!(!Access::Shadowed.host_writable());
    }

    #[test]
    fn hooks_and_new_repositories_are_private() {
        let h = host();
        for p in [
            ".git/hooks",
            ".git/hooks/pre-commit",
            ".git/modules/lib/sub/hooks/post-checkout",
            ".git/worktrees/wt/hooks",
            "nested/.git/hooks/pre-push",
            "new/.git",
            "new/.git/config",
            "a/b/c/.git",
            "lib/sub/deeper/.git/HEAD",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::Private, "{p}");
        }
        for p in [
            ".git/modules/evil",
            ".git/modules/evil/config",
            ".git/modules/lib/other/HEAD",
            ".git/worktrees/new",
            ".git/worktrees/new/commondir",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::HostOrPrivate, "{p}");
        }
    }

    #[test]
    fn the_rest_of_the_workspace_is_free() {
        let h = host();
        for p in [
            "",
            "src/main.rs",
            ".gitignore",
            ".github/x",
            "a.git",
            "git/x",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::Free, "{p}");
        }
    }

    #[test]
    fn a_dotgit_file_workspace_has_nothing_beneath() {
        let h = Fake::new(&[".git"], &[]);
        assert_eq!(access(&h, b".git"), Access::ReadOnly);
        assert_eq!(access(&h, b".git/config"), Access::ReadOnly);
        assert_eq!(access(&h, b".git/HEAD"), Access::ReadOnly);
        // No repository at all: the sandbox's own `git init` stays private.
        let none = Fake::new(&[], &[]);
        assert_eq!(access(&none, b".git"), Access::Private);
        assert_eq!(access(&none, b".git/config"), Access::Private);
    }
}
