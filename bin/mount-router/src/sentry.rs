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
    /// The index: the sandbox reads its own exact copy while the host's
    /// index is the one the router last wrote from it; the host's index
    /// is written only by the router, sanitized (no flag that hides a
    /// change, no cached stat the host did not vouch for, no cache tree).
    /// Changed only by Git's lock-and-rename.
    Mirrored,
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
/// operation and that the host must share with the sandbox (each also as
/// `NAME.lock`, Git's lock-and-rename): what the branch is and the refs.
pub const LIVE: &[&str] = &[
    "HEAD",        // checkout, commit, branch switch
    "packed-refs", // pack-refs, gc, fetch (its content is checked: no replace refs)
    "description", // init (gitweb reads it; Git runs nothing)
];

/// Top-level directories of a Git directory that Git writes in normal
/// operation and the host shares; everything beneath them is live, except
/// [`READ_ONLY_BENEATH`] and [`PRIVATE_BENEATH`].
pub const LIVE_DIRS: &[&str] = &[
    "objects",    // every write of a blob, tree, commit, pack
    "refs",       // branches, tags, remotes' refs, stash
    "logs",       // reflogs
    "lost-found", // fsck --lost-found
];

/// Names beneath live directories that Git reads as a pointer to other
/// object stores: read-only.
pub const READ_ONLY_BENEATH: &[&str] = &["objects/info/alternates", "objects/info/http-alternates"];

/// Names beneath live directories that change what host Git shows of a
/// commit without changing the commit (what `git push` sends): replace
/// refs swap one object for another in `log`, `show` and `diff`, and a
/// commit-graph file is trusted for parents. Sandbox-private: Git inside
/// uses its own, host Git never sees them.
pub const PRIVATE_BENEATH: &[&str] = &[
    "refs/replace",               // git replace
    "objects/info/commit-graph",  // gc, commit-graph write
    "objects/info/commit-graphs", // split commit-graph chains
];

/// The state of an operation in progress, and other per-operation files:
/// host Git carries out or reuses what they say when the developer
/// continues (`rebase --continue` runs the todo list's `exec` lines,
/// `commit` concludes a merge with `MERGE_HEAD` as a parent, rerere
/// replays its resolutions, `gc --auto` prints `gc.log` raw). Each side has
/// its own: the sandbox's are private, and the host's are hidden inside
/// (so Git inside neither sees nor continues an operation the host began).
pub const PRIVATE_FILES: &[&str] = &[
    "ORIG_HEAD",           // reset, merge, rebase, pull
    "FETCH_HEAD",          // fetch, pull (merged by pull)
    "MERGE_HEAD",          // merge in progress
    "MERGE_MSG",           // merge in progress
    "MERGE_MODE",          // merge in progress
    "MERGE_RR",            // rerere during merge
    "MERGE_AUTOSTASH",     // merge --autostash
    "AUTO_MERGE",          // merge-ort's tree of the last merge
    "CHERRY_PICK_HEAD",    // cherry-pick in progress
    "REVERT_HEAD",         // revert in progress
    "REBASE_HEAD",         // rebase stopped at a commit
    "SQUASH_MSG",          // merge --squash (the next commit's message)
    "COMMIT_EDITMSG",      // commit
    "TAG_EDITMSG",         // tag -a
    "NOTES_EDITMSG",       // notes
    "NOTES_MERGE_PARTIAL", // notes merge
    "NOTES_MERGE_REF",     // notes merge
    "EDIT_DESCRIPTION",    // branch --edit-description
    "PULLREQ_EDITMSG",     // request-pull editors
    "gc.pid",              // gc
    "gc.log",              // gc --auto in the background (printed by host gc)
    "index.lock",          // the index's lock: see MIRRORED
];

/// Prefixes of per-operation files whose rest Git chooses: private.
pub const PRIVATE_PREFIXES: &[&str] = &[
    "BISECT_",      // bisect's state files (BISECT_LOG, BISECT_START...)
    "shallow_",     // fetch's temporary shallow file
    "sharedindex.", // split index (the host never reads the sandbox's)
    "next-index-",  // commit with pathspec, add -i: a temporary index
    "index.stash.", // stash's temporary index
];

/// Directories of operations in progress: private, everything beneath.
pub const PRIVATE_DIRS: &[&str] = &[
    "rebase-merge",         // rebase in progress: git-rebase-todo, strategy...
    "rebase-apply",         // am, rebase --apply: the patches to apply
    "sequencer",            // cherry-pick/revert of several commits: todo
    "rr-cache",             // rerere's recorded resolutions
    "NOTES_MERGE_WORKTREE", // notes merge
    "lfs",                  // git-lfs object store: smudged into checkouts
];

/// Entries of `info/` that Git writes for dumb transports: live. The
/// rest of `info/` (attributes, grafts) is read-only, and `exclude` and
/// `sparse-checkout` are shadowed ([`SHADOWED_INFO`]).
pub const INFO_LIVE: &[&str] = &[
    "refs",  // update-server-info
    "packs", // (objects/info/packs, for dumb transports)
];

/// Top-level files Git inside rewrites into a sandbox-private copy
/// ([`Access::Shadowed`]); the host's are never written.
pub const SHADOWED: &[&str] = &[
    "config",          // configuration: core.fsmonitor, aliases, filters...
    "config.worktree", // per-worktree configuration
    "shallow",         // fetch --depth: commits shown without parents
];

/// Files of `info/` Git inside rewrites into a private copy: what host
/// `git status` hides (`exclude`) and which files a checkout leaves out
/// (`sparse-checkout`) stay the host's.
pub const SHADOWED_INFO: &[&str] = &["exclude", "sparse-checkout"];

/// The index: the sandbox's own exact copy, and a sanitized copy for the
/// host written by the router at each rename into place
/// ([`Access::Mirrored`], see `crate::index`).
pub const MIRRORED: &[&str] = &["index"];

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
         live (read-write, shared with the host): {}\n\
         live directories (and all beneath): {}\n\
         live in info/: {}\n\
         private beneath live directories: {}\n\
         private (in-progress and per-operation state, each side its own): {} {}* and {}/\n\
         shadowed (private copy on rewrite, host's read-only): {} info/{}\n\
         mirrored (the sandbox's own copy; the host's written by the router, sanitized): {}\n\
         read-only: {} {}\n\
         private: hooks/, a .git the host does not have, .git/modules/<new>, .git/worktrees/<new>\n\
         refused (EPERM): any other name; symlinks; links to or from protected names; \
         renaming a directory that holds a protected name; packed-refs naming a replace ref \
         the host's does not; writing the index or packed-refs other than by lock-and-rename\n",
        list(LIVE),
        list(LIVE_DIRS),
        list(INFO_LIVE),
        list(PRIVATE_BENEATH),
        list(PRIVATE_FILES),
        PRIVATE_PREFIXES.join("* "),
        list(PRIVATE_DIRS).replace(' ', "/ "),
        list(SHADOWED),
        SHADOWED_INFO.join(" info/"),
        list(MIRRORED),
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

/// Whether `path` is the `packed-refs` file of a Git directory (whose
/// content the router checks when it is put in place: see
/// [`replace_refs`]).
pub fn is_packed_refs(host: &dyn Host, path: &[u8]) -> bool {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) if &path[i + 1..] == b"packed-refs" => host.is_git_dir(&path[..i]),
        _ => false,
    }
}

/// The lines of a `packed-refs` file that name a replace ref (`OID
/// refs/replace/...`), which host Git would apply to what `log`, `show`
/// and `diff` show.
pub fn replace_refs(packed: &[u8]) -> std::collections::BTreeSet<&[u8]> {
    packed
        .split(|&b| b == b'\n')
        .filter(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            l.split(|&b| b == b' ')
                .nth(1)
                .is_some_and(|r| r.starts_with(b"refs/replace/"))
        })
        .collect()
}

/// `path` is `prefix` or lies beneath it.
fn beneath_or_at(path: &[u8], prefix: &[u8]) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|r| r.is_empty() || r[0] == b'/')
}

/// The access to the entry `top` (`name` without its lock suffix) at the
/// top of a Git directory.
fn top_level(top: &[u8], name: &[u8]) -> Access {
    if top == b"index.lock" || is_one_of(name, PRIVATE_FILES) {
        return Access::Private;
    }
    if top == b"index" {
        return Access::Mirrored;
    }
    if is_one_of(name, SHADOWED) {
        return Access::Shadowed;
    }
    if is_one_of(name, PROTECTED) {
        return Access::ReadOnly;
    }
    if top == b"hooks"
        || is_one_of(name, PRIVATE_DIRS)
        || PRIVATE_PREFIXES
            .iter()
            .any(|p| name.starts_with(p.as_bytes()))
    {
        return Access::Private;
    }
    if is_one_of(name, LIVE)
        || is_one_of(name, LIVE_DIRS)
        || matches!(name, b"info" | b"modules" | b"worktrees")
    {
        return Access::Live;
    }
    Access::ReadOnly
}

/// The access to `rest` beneath the Git directory `dir`.
fn in_git_dir(host: &dyn Host, dir: &[&[u8]], rest: &[&[u8]]) -> Access {
    let top = rest[0];
    let name = unlocked(top);
    if rest.len() == 1 {
        return top_level(top, name);
    }
    if top == b"hooks" || is_one_of(top, PRIVATE_DIRS) {
        return Access::Private;
    }
    if is_one_of(name, PROTECTED) {
        return Access::ReadOnly;
    }
    if is_one_of(top, LIVE_DIRS) {
        let rel = join(rest);
        let at = |list: &[&str]| {
            list.iter().any(|r| {
                let r = r.as_bytes();
                beneath_or_at(&rel, r) || unlocked(&rel) == r
            })
        };
        if at(READ_ONLY_BENEATH) {
            return Access::ReadOnly;
        }
        if at(PRIVATE_BENEATH) {
            return Access::Private;
        }
        return Access::Live;
    }
    match top {
        b"info" => {
            let leaf = unlocked(rest[1]);
            if rest.len() == 2 && is_one_of(leaf, SHADOWED_INFO) {
                Access::Shadowed
            } else if rest.len() == 2 && is_one_of(temp_of(leaf), INFO_LIVE) {
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
            ".git/packed-refs.lock",
            ".git/packed-refs.new",
            ".git/objects/ab/cdef",
            ".git/objects/pack/pack-1.pack",
            ".git/objects/info/packs",
            ".git/refs/heads/main.lock",
            ".git/refs/stash",
            ".git/refs/replacement/x",
            ".git/logs/HEAD",
            ".git/info/refs_a1B2c3",
            ".git/modules/lib/sub/HEAD",
            ".git/modules/lib/sub/objects/ab/cd",
            ".git/worktrees/wt/HEAD",
            "nested/.git/refs/heads/x",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::Live, "{p}");
        }
    }

    #[test]
    fn operations_in_progress_are_each_sides_own() {
        let h = host();
        for p in [
            ".git/ORIG_HEAD",
            ".git/FETCH_HEAD",
            ".git/MERGE_HEAD",
            ".git/MERGE_MSG.lock",
            ".git/MERGE_RR",
            ".git/AUTO_MERGE",
            ".git/CHERRY_PICK_HEAD",
            ".git/REVERT_HEAD",
            ".git/REBASE_HEAD",
            ".git/SQUASH_MSG",
            ".git/COMMIT_EDITMSG",
            ".git/BISECT_LOG",
            ".git/BISECT_START",
            ".git/gc.log",
            ".git/gc.pid",
            ".git/index.lock",
            ".git/shallow_Ab12Cd",
            ".git/sharedindex.0123abcd",
            ".git/next-index-1234.lock",
            ".git/index.stash.77",
            ".git/rebase-merge",
            ".git/rebase-merge/git-rebase-todo",
            ".git/rebase-merge/strategy",
            ".git/rebase-apply/0001",
            ".git/sequencer/todo",
            ".git/rr-cache/abc/preimage",
            ".git/lfs/objects/ab/cd/abcd",
            ".git/refs/replace",
            ".git/refs/replace/0123abcd",
            ".git/refs/replace/0123abcd.lock",
            ".git/objects/info/commit-graph",
            ".git/objects/info/commit-graph.lock",
            ".git/objects/info/commit-graphs/graph-1.graph",
            ".git/worktrees/wt/index.lock",
            ".git/worktrees/wt/rebase-merge/done",
            ".git/modules/lib/sub/MERGE_HEAD",
            "nested/.git/sequencer/todo",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::Private, "{p}");
        }
    }

    #[test]
    fn packed_refs_are_known_and_their_replace_refs_found() {
        let h = host();
        assert!(is_packed_refs(&h, b".git/packed-refs"));
        assert!(is_packed_refs(&h, b".git/modules/lib/sub/packed-refs"));
        assert!(!is_packed_refs(&h, b".git/refs/heads/packed-refs"));
        assert!(!is_packed_refs(&h, b"packed-refs"));
        let packed = b"# pack-refs with: peeled fully-peeled sorted \n\
            1111 refs/heads/main\n\
            2222 refs/replace/1111\n\
            ^3333\n\
            4444 refs/replacement\n";
        let found: Vec<&[u8]> = replace_refs(packed).into_iter().collect();
        assert_eq!(found, vec![&b"2222 refs/replace/1111"[..]]);
    }

    #[test]
    fn the_index_is_mirrored() {
        let h = host();
        for p in [
            ".git/index",
            ".git/modules/lib/sub/index",
            ".git/worktrees/wt/index",
            "nested/.git/index",
        ] {
            assert_eq!(access(&h, p.as_bytes()), Access::Mirrored, "{p}");
        }
        assert!(!Access::Mirrored.host_writable());
        assert_eq!(access(&h, b".git/index.new"), Access::ReadOnly);
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
            ".git/shallow",
            ".git/shallow.lock",
            ".git/info/exclude",
            ".git/info/exclude.lock",
            ".git/info/sparse-checkout",
            ".git/modules/lib/sub/info/exclude",
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
