//! Git Sentry: the mount layout that keeps Git working inside the sandbox
//! while the sandbox cannot change what the host's Git reads as
//! configuration or runs as hooks (SR-4).
//!
//! `.git` is its own mount, so it cannot be renamed or replaced from inside
//! (a mount point is busy). Inside it, each file through which Git finds
//! configuration or another Git directory (`config`, `config.worktree`,
//! `commondir`) is bound read-only, and each `hooks` directory is hidden
//! behind sandbox-local tmpfs. The same holds for the Git directories of
//! submodules (`.git/modules/...`) and linked worktrees
//! (`.git/worktrees/...`), and for the `.git` files of submodule and
//! worktree checkouts inside the workspace, which name their Git directory.
//!
//! Everything under `.git` is sandbox-writable, so planning reads it as
//! hostile data (threat model rows "Git directories" and "paths named
//! inside Git files"):
//! - Lazaret never runs host `git` here (a forged `commondir`, `config` or
//!   `include.path` would make it run `core.fsmonitor` and the like): the
//!   index is read with `gix-index`, which executes nothing, from bytes
//!   read through [`crate::workspace_fs`].
//! - every path taken from `.git` (the index's gitlinks, a worktree's
//!   `gitdir`, the directories under `.git/modules` and `.git/worktrees`)
//!   is resolved beneath the workspace without following any symlink
//!   ([`crate::workspace_fs::Root`]) before it is stat'ed, read, walked, created
//!   or mounted; what fails that is left out of the plan and logged.
//!
//! Left to others: a repository the sandbox creates from nothing (a new
//! `sub/.git`) and new files in `.git` are the sandbox's own (issue 11's
//! name policy); the Ignored Workspace State router and the developer's
//! `safe.directory` / `safe.bareRepository` policy are the defence there.

use crate::workspace_fs::{BeneathError, Kind, Root};
use lazaret_protocol::plan::{MountKind, MountPurpose, PlannedMount};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// At most this many directories under `.git/modules` are walked; more is
/// refused (fail closed: a submodule Git directory past the bound would
/// keep writable hooks).
pub const MAX_MODULE_DIRS: usize = 10_000;
/// At most this many linked worktrees are protected; more is refused.
pub const MAX_WORKTREES: usize = 10_000;
/// The largest index read (real indexes of 300k files are about 40 MiB).
pub const MAX_INDEX_BYTES: u64 = 512 << 20;
/// The largest `gitdir` file read.
const MAX_GITDIR_BYTES: u64 = 4096;
/// The largest Git configuration file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum GitSentryError {
    #[error("{path} is a symbolic link; Lazaret mounts only a real .git directory or file: replace the link with the directory it points to")]
    GitIsSymlink { path: PathBuf },
    #[error("{path} has no config file, so the sandbox could create one that the host's Git would read: run `git init` in the workspace to repair it")]
    NoConfig { path: PathBuf },
    #[error("{path} holds more than {limit} entries; Lazaret protects at most that many: remove the ones you do not use")]
    TooMany { path: PathBuf, limit: usize },
    #[error("cannot open the workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("host Git's core.hooksPath is {value:?}: {reason}; make it a plain directory in the workspace (no symbolic link, no `..`) or unset it")]
    HooksPath { value: String, reason: String },
    #[error("cannot inspect {0}")]
    Beneath(#[from] BeneathError),
}

/// The Git Sentry's mounts, and what planning refused to use (one line
/// each, for the coordinator log).
#[derive(Debug, Default)]
pub struct SentryPlan {
    pub mounts: Vec<PlannedMount>,
    pub refused: Vec<String>,
}

/// Host-side preparation the plan relies on: `hooks` directories must exist
/// to be mount points (an empty directory, harmless to the host's Git).
/// Each is created beneath the workspace, in a Git directory reached
/// without a symlink, so nothing is ever created outside it.
pub fn prepare_host(workspace: &Path) -> Result<Vec<String>, GitSentryError> {
    let root = open_root(workspace)?;
    let mut refused = Vec::new();
    if root.kind(Path::new(".git"))? != Some(Kind::Dir) {
        return Ok(refused);
    }
    for dir in git_dirs(&root, &mut refused)? {
        if let Err(e) = root.mkdir(&dir, "hooks", 0o755) {
            refused.push(e.to_string());
        }
    }
    Ok(refused)
}

fn open_root(workspace: &Path) -> Result<Root, GitSentryError> {
    Root::open(workspace).map_err(|source| GitSentryError::Workspace {
        path: workspace.to_path_buf(),
        source,
    })
}

/// The Git directories below `.git` that have their own hooks and config,
/// relative to the workspace: `.git` itself and every submodule Git
/// directory under `.git/modules`. Symlinks are not followed (and noted
/// in `refused`).
fn git_dirs(root: &Root, refused: &mut Vec<String>) -> Result<Vec<PathBuf>, GitSentryError> {
    let git = PathBuf::from(".git");
    let mut out = vec![git.clone()];
    let modules = git.join("modules");
    let mut stack = Vec::new();
    match root.kind(&modules)? {
        Some(Kind::Dir) => stack.push(modules.clone()),
        Some(Kind::Symlink) => refused.push(format!(
            "{}: a symbolic link (not followed)",
            modules.display()
        )),
        _ => {}
    }
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        seen += 1;
        if seen > MAX_MODULE_DIRS {
            return Err(GitSentryError::TooMany {
                path: root.abs(&modules),
                limit: MAX_MODULE_DIRS,
            });
        }
        let names = match root.list(&dir) {
            Ok(n) => n,
            Err(e) => {
                refused.push(e.to_string());
                continue;
            }
        };
        for name in names {
            let p = dir.join(&name);
            match root.kind(&p) {
                Ok(Some(Kind::Dir)) => {}
                Ok(Some(Kind::Symlink)) => {
                    refused.push(format!("{}: a symbolic link (not followed)", p.display()));
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    refused.push(e.to_string());
                    continue;
                }
            }
            if root.is_file(&p.join("HEAD")).unwrap_or(false) {
                out.push(p.clone());
                // Nested submodules live in <gitdir>/modules.
                let nested = p.join("modules");
                if root.kind(&nested).ok().flatten() == Some(Kind::Dir) {
                    stack.push(nested);
                }
            } else {
                // Submodule names may contain slashes.
                stack.push(p);
            }
        }
    }
    Ok(out)
}

/// The mounts of the workspace and its Git Sentry, in mount order.
pub fn plan(workspace: &Path) -> Result<SentryPlan, GitSentryError> {
    let mut out = SentryPlan {
        mounts: vec![PlannedMount {
            destination: "/workspace".into(),
            kind: MountKind::Bind {
                source: workspace.to_path_buf(),
                read_only: false,
            },
            purpose: MountPurpose::Workspace,
        }],
        refused: Vec::new(),
    };
    let root = open_root(workspace)?;
    let git = Path::new(".git");
    let to_sandbox = |rel: &Path| format!("/workspace/{}", rel.display());
    let ro = |rel: &Path| PlannedMount {
        destination: to_sandbox(rel),
        kind: MountKind::Bind {
            source: root.abs(rel),
            read_only: true,
        },
        purpose: MountPurpose::GitSentry,
    };
    match root.kind(git)? {
        None => return Ok(out),
        Some(Kind::Symlink) => {
            return Err(GitSentryError::GitIsSymlink {
                path: root.abs(git),
            })
        }
        Some(Kind::File) => {
            // A `.git` file names the Git directory elsewhere (this
            // workspace is a linked worktree or a submodule checkout). It
            // stays read-only so the sandbox cannot point it anywhere else.
            out.mounts.push(ro(git));
            // The repository's own config lies outside the workspace (not
            // read); a system or global core.hooksPath still applies here.
            if let Some(rel) = hooks_path_dir(&root, effective_hooks_path(&root, false)?)? {
                out.mounts.push(ro(&rel));
            }
            return Ok(out);
        }
        Some(Kind::Dir) => {}
        Some(Kind::Other) => return Ok(out),
    }
    if !root.is_file(&git.join("config"))? {
        return Err(GitSentryError::NoConfig {
            path: root.abs(git),
        });
    }
    out.mounts.push(PlannedMount {
        destination: "/workspace/.git".into(),
        kind: MountKind::Bind {
            source: root.abs(git),
            read_only: false,
        },
        purpose: MountPurpose::GitSentry,
    });
    let mut refused = Vec::new();
    let mut protected: Vec<PlannedMount> = Vec::new();
    for dir in git_dirs(&root, &mut refused)? {
        for name in ["config", "config.worktree", "commondir"] {
            let f = dir.join(name);
            match root.kind(&f) {
                Ok(Some(Kind::File)) => protected.push(ro(&f)),
                Ok(Some(Kind::Symlink)) => {
                    refused.push(format!("{}: a symbolic link (not mounted)", f.display()))
                }
                Ok(_) => {}
                Err(e) => refused.push(e.to_string()),
            }
        }
        // A tmpfs needs no host source: its destination is resolved by
        // runsc inside the sandbox, so a `hooks` symlink (one the developer
        // made to a tracked directory, say) keeps its target hidden too.
        let hooks = dir.join("hooks");
        if matches!(root.kind(&hooks), Ok(Some(Kind::Dir | Kind::Symlink))) {
            protected.push(PlannedMount {
                destination: to_sandbox(&hooks),
                kind: MountKind::Tmpfs,
                purpose: MountPurpose::GitSentry,
            });
        }
    }
    protected.extend(worktree_mounts(&root, &mut refused)?.iter().map(|r| ro(r)));
    // Where host Git looks for hooks instead of `.git/hooks` (husky, a
    // tracked `.githooks/`): read-only inside when it is in the workspace.
    if let Some(rel) = hooks_path_dir(&root, effective_hooks_path(&root, true)?)? {
        protected.push(ro(&rel));
    }
    // Submodule checkouts: `<path>/.git` files naming `.git/modules/...`.
    for rel in submodule_dotgit_files(&root, &mut refused) {
        protected.push(ro(&rel));
    }
    protected.sort_by(|a, b| a.destination.cmp(&b.destination));
    protected.dedup_by(|a, b| a.destination == b.destination);
    out.mounts.extend(protected);
    out.refused = refused;
    Ok(out)
}

/// Host Git's effective `core.hooksPath` for this repository: the system
/// and global files, then the repository's own `.git/config` (read-only
/// inside; read beneath the workspace) when `repository`, the last value
/// winning. Parsed, not asked of `git`; includes are not followed.
pub fn effective_hooks_path(
    root: &Root,
    repository: bool,
) -> Result<Option<String>, GitSentryError> {
    let repo = if repository {
        Some(root.read(Path::new(".git/config"), MAX_CONFIG_BYTES)?)
    } else {
        None
    };
    Ok(hooks_path_in(
        &lazaret_helpers::gitconfig::global_files(),
        repo.as_deref(),
    ))
}

/// `core.hooksPath` as `files` (in Git's order), then the repository
/// config's text, set it; unreadable files count as empty.
fn hooks_path_in(files: &[PathBuf], repo: Option<&[u8]>) -> Option<String> {
    use std::io::Read;
    let last = |text: &[u8]| {
        lazaret_helpers::gitconfig::last_value(&String::from_utf8_lossy(text), "core", "hookspath")
    };
    let mut value = None;
    for f in files {
        let mut text = Vec::new();
        if let Ok(file) = std::fs::File::open(f) {
            let _ = file.take(MAX_CONFIG_BYTES).read_to_end(&mut text);
            value = last(&text).or(value);
        }
    }
    repo.and_then(last).or(value)
}

/// The hooks directory `value` (a `core.hooksPath`) names, relative to the
/// workspace, when it lies in the workspace: `None` when unset, outside the
/// workspace (not visible inside) or `.git/hooks` itself (already hidden).
/// A missing directory is created (empty), so that the sandbox cannot
/// create it with hooks in it; one reached through a symlink is an error.
pub fn hooks_path_dir(
    root: &Root,
    value: Option<String>,
) -> Result<Option<PathBuf>, GitSentryError> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bad = |reason: &str| GitSentryError::HooksPath {
        value: value.clone(),
        reason: reason.to_string(),
    };
    let expanded = match value.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(rest),
            None => return Ok(None),
        },
        None => PathBuf::from(&value),
    };
    // Relative: to the working tree's top, where host Git runs hooks.
    let mut p = expanded.as_os_str().as_bytes();
    while let Some(rest) = p.strip_prefix(b"./") {
        p = rest;
    }
    while let Some(rest) = p.strip_suffix(b"/") {
        p = rest;
    }
    let p = Path::new(OsStr::from_bytes(p));
    let rel = match root.relative_of(p, Path::new("")) {
        Some(rel) => rel,
        None if p.is_absolute() && !p.starts_with(root.path()) => return Ok(None),
        None if p.starts_with("..") && !p.iter().skip(1).any(|c| c == "..") => return Ok(None),
        None => return Err(bad("it cannot be resolved beneath the workspace")),
    };
    if rel == Path::new(".git/hooks") {
        return Ok(None);
    }
    match root.kind(&rel) {
        Ok(Some(Kind::Dir)) => Ok(Some(rel)),
        Ok(None) => {
            root.mkdir_all(&rel, 0o755)
                .map_err(|e| bad(&format!("cannot create it: {e}")))?;
            Ok(Some(rel))
        }
        Ok(Some(_)) => Err(bad("it is not a directory")),
        Err(e) => Err(bad(&e.to_string())),
    }
}

/// Linked worktrees: their Git directories point back to the common
/// directory, and their checkouts' `.git` files point to them. The
/// read-only files, relative to the workspace.
fn worktree_mounts(root: &Root, refused: &mut Vec<String>) -> Result<Vec<PathBuf>, GitSentryError> {
    let mut out = Vec::new();
    let worktrees = Path::new(".git/worktrees");
    let names = match root.kind(worktrees)? {
        Some(Kind::Dir) => root.list(worktrees)?,
        Some(Kind::Symlink) => {
            refused.push(format!(
                "{}: a symbolic link (not followed)",
                worktrees.display()
            ));
            return Ok(out);
        }
        _ => return Ok(out),
    };
    if names.len() > MAX_WORKTREES {
        return Err(GitSentryError::TooMany {
            path: root.abs(worktrees),
            limit: MAX_WORKTREES,
        });
    }
    for name in names {
        let dir = worktrees.join(&name);
        match root.kind(&dir) {
            Ok(Some(Kind::Dir)) => {}
            Ok(Some(Kind::Symlink)) => {
                refused.push(format!("{}: a symbolic link (not followed)", dir.display()));
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                refused.push(e.to_string());
                continue;
            }
        }
        for file in ["config.worktree", "commondir", "gitdir"] {
            let f = dir.join(file);
            match root.kind(&f) {
                Ok(Some(Kind::File)) => out.push(f),
                Ok(Some(Kind::Symlink)) => {
                    refused.push(format!("{}: a symbolic link (not mounted)", f.display()))
                }
                Ok(_) => {}
                Err(e) => refused.push(e.to_string()),
            }
        }
        let gitdir = dir.join("gitdir");
        let Ok(target) = root.read(&gitdir, MAX_GITDIR_BYTES) else {
            continue;
        };
        let target = target.strip_suffix(b"\n").unwrap_or(&target);
        let target = Path::new(OsStr::from_bytes(target));
        match root.relative_of(target, &dir) {
            Some(rel) => match root.kind(&rel) {
                Ok(Some(Kind::File)) => out.push(rel),
                Ok(_) => {}
                Err(e) => refused.push(format!("{} names {e}", gitdir.display())),
            },
            // A checkout outside the workspace is not visible inside:
            // nothing to protect, and nothing of it is touched.
            None => refused.push(format!(
                "{} names {}, not a plain path beneath the workspace (not used)",
                gitdir.display(),
                target.display()
            )),
        }
    }
    Ok(out)
}

/// `.git` files of the submodule checkouts recorded in the host index
/// (gitlinks, mode 160000), relative to the workspace. The index is parsed
/// by `gix-index` from bytes read beneath the workspace: no `git` runs, so
/// nothing the sandbox wrote into `.git` (a `commondir`, a config with
/// `core.fsmonitor`) is ever executed. A split index's shared part is read
/// too; its gitlinks are added (a superset is harmless: every candidate
/// must be a real `.git` file beneath the workspace to be protected).
fn submodule_dotgit_files(root: &Root, refused: &mut Vec<String>) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let mut files = vec![PathBuf::from(".git/index")];
    let mut i = 0;
    while i < files.len() {
        let file = files[i].clone();
        i += 1;
        let bytes = match root.read(&file, MAX_INDEX_BYTES) {
            Ok(b) => b,
            Err(BeneathError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue
            }
            Err(e) => {
                refused.push(e.to_string());
                continue;
            }
        };
        match gitlinks(&bytes) {
            Ok((links, shared)) => {
                paths.extend(links);
                if let Some(shared) = shared {
                    if files.len() < 2 {
                        files.push(Path::new(".git").join(format!("sharedindex.{shared}")));
                    }
                }
            }
            Err(e) => refused.push(format!(
                "{}: {e} (submodules not protected)",
                file.display()
            )),
        }
    }
    let mut out = Vec::new();
    for p in paths {
        let Some(rel) = root.relative_of(&p, Path::new("")) else {
            refused.push(format!(
                "index path {} is not plain (not used)",
                p.display()
            ));
            continue;
        };
        let dotgit = rel.join(".git");
        match root.kind(&dotgit) {
            Ok(Some(Kind::File)) => out.push(dotgit),
            Ok(_) => {}
            Err(e) => refused.push(e.to_string()),
        }
    }
    out
}

/// The gitlink paths in one index file's bytes, and the checksum of its
/// shared index when it is a split index.
fn gitlinks(bytes: &[u8]) -> Result<(Vec<PathBuf>, Option<String>), String> {
    let mut last = String::new();
    for kind in [gix_hash::Kind::Sha1, gix_hash::Kind::Sha256] {
        let options = gix_index::decode::Options {
            thread_limit: Some(1),
            alloc_limit_bytes: Some((MAX_INDEX_BYTES * 4) as usize),
            ..Default::default()
        };
        match gix_index::State::from_bytes(bytes, filetime::FileTime::zero(), kind, options) {
            Ok((state, _)) => {
                let links = state
                    .entries()
                    .iter()
                    .filter(|e| e.mode == gix_index::entry::Mode::COMMIT)
                    .map(|e| PathBuf::from(OsStr::from_bytes(e.path(&state))))
                    .collect();
                let shared = state.link().map(|l| l.shared_index_checksum.to_string());
                return Ok((links, shared));
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    fn dests(m: &[PlannedMount]) -> Vec<(String, bool)> {
        m.iter()
            .map(|m| {
                let ro = match &m.kind {
                    MountKind::Bind { read_only, .. } => *read_only,
                    MountKind::Tmpfs => true,
                };
                (m.destination.clone(), ro)
            })
            .collect()
    }

    #[test]
    fn plain_directory_has_only_the_workspace() {
        let d = tempfile::tempdir().unwrap();
        let m = plan(d.path()).unwrap().mounts;
        assert_eq!(dests(&m), vec![("/workspace".to_string(), false)]);
    }

    #[test]
    fn repository_layout() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().canonicalize().unwrap();
        git(&w, &["init", "-q"]);
        prepare_host(&w).unwrap();
        let m = plan(&w).unwrap().mounts;
        let ds = dests(&m);
        assert_eq!(ds[0], ("/workspace".into(), false));
        assert_eq!(ds[1], ("/workspace/.git".into(), false));
        assert!(ds.contains(&("/workspace/.git/config".into(), true)));
        let hooks = m
            .iter()
            .find(|m| m.destination == "/workspace/.git/hooks")
            .unwrap();
        assert_eq!(hooks.kind, MountKind::Tmpfs);
    }

    #[test]
    fn missing_hooks_directory_is_created() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().canonicalize().unwrap();
        git(&w, &["init", "-q"]);
        std::fs::remove_dir_all(w.join(".git/hooks")).unwrap();
        prepare_host(&w).unwrap();
        assert!(w.join(".git/hooks").is_dir());
    }

    #[test]
    fn symlinked_git_and_missing_config_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().canonicalize().unwrap();
        std::fs::create_dir(w.join("real")).unwrap();
        std::os::unix::fs::symlink(w.join("real"), w.join(".git")).unwrap();
        assert!(matches!(plan(&w), Err(GitSentryError::GitIsSymlink { .. })));
        std::fs::remove_file(w.join(".git")).unwrap();
        std::fs::create_dir(w.join(".git")).unwrap();
        assert!(matches!(plan(&w), Err(GitSentryError::NoConfig { .. })));
    }

    #[test]
    fn submodules_and_worktrees_are_protected() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let sub = root.join("subsrc");
        let w = root.join("w");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(&w).unwrap();
        git(&sub, &["init", "-q"]);
        git(&sub, &["commit", "-q", "--allow-empty", "-m", "s"]);
        git(&w, &["init", "-q"]);
        git(&w, &["commit", "-q", "--allow-empty", "-m", "w"]);
        git(
            &w,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                sub.to_str().unwrap(),
                "lib/sub",
            ],
        );
        git(&w, &["worktree", "add", "-q", "wt"]);
        prepare_host(&w).unwrap();
        let ds = dests(&plan(&w).unwrap().mounts);
        for (want, ro) in [
            ("/workspace/.git/modules/lib/sub/config", true),
            ("/workspace/.git/modules/lib/sub/hooks", true),
            ("/workspace/lib/sub/.git", true),
            ("/workspace/.git/worktrees/wt/commondir", true),
            ("/workspace/.git/worktrees/wt/gitdir", true),
            ("/workspace/wt/.git", true),
        ] {
            assert!(
                ds.contains(&(want.to_string(), ro)),
                "missing {want} in {ds:?}"
            );
        }
    }

    #[test]
    fn dotgit_file_is_read_only() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().canonicalize().unwrap();
        std::fs::write(w.join(".git"), "gitdir: /elsewhere\n").unwrap();
        let ds = dests(&plan(&w).unwrap().mounts);
        assert_eq!(ds[1], ("/workspace/.git".into(), true));
    }
    /// A repository whose Git files were written by a hostile sandbox:
    /// paths leading outside the workspace, through symlinks or `..`.
    fn hostile() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let w = base.join("w");
        let outside = base.join("outside");
        std::fs::create_dir_all(&w).unwrap();
        // Looks like a Git directory, with a config and a checkout's .git.
        std::fs::create_dir_all(outside.join("objects")).unwrap();
        std::fs::write(outside.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(outside.join("config"), "[core]\n").unwrap();
        std::fs::write(outside.join(".git"), "gitdir: /x\n").unwrap();
        git(&w, &["init", "-q"]);
        git(&w, &["commit", "-q", "--allow-empty", "-m", "w"]);
        (d, w, outside)
    }

    fn sources(m: &[PlannedMount]) -> Vec<PathBuf> {
        m.iter()
            .filter_map(|m| match &m.kind {
                MountKind::Bind { source, .. } => Some(source.clone()),
                MountKind::Tmpfs => None,
            })
            .collect()
    }

    fn assert_nothing_outside(w: &Path, outside: &Path, p: &SentryPlan) {
        for s in sources(&p.mounts) {
            assert!(
                s.starts_with(w) && !s.components().any(|c| c == std::path::Component::ParentDir),
                "mount source outside the workspace: {} ({:?})",
                s.display(),
                p.mounts
            );
            assert!(!s.starts_with(outside));
        }
        assert!(!outside.join("hooks").exists(), "created outside");
    }

    #[test]
    fn symlinked_modules_are_neither_walked_nor_mounted() {
        let (_d, w, outside) = hostile();
        std::os::unix::fs::symlink(&outside, w.join(".git/modules")).unwrap();
        assert!(prepare_host(&w)
            .unwrap()
            .iter()
            .any(|r| r.contains("symbolic link")));
        let p = plan(&w).unwrap();
        assert_nothing_outside(&w, &outside, &p);
        assert!(!p.refused.is_empty());
        // The same one level down.
        std::fs::remove_file(w.join(".git/modules")).unwrap();
        std::fs::create_dir(w.join(".git/modules")).unwrap();
        std::os::unix::fs::symlink(&outside, w.join(".git/modules/y")).unwrap();
        prepare_host(&w).unwrap();
        let p = plan(&w).unwrap();
        assert_nothing_outside(&w, &outside, &p);
        assert!(!p.mounts.iter().any(|m| m.destination.contains("modules/y")));
    }

    #[test]
    fn worktree_gitdir_outside_is_not_used() {
        let (_d, w, outside) = hostile();
        for (name, gitdir) in [
            ("abs", format!("{}/.git\n", outside.display())),
            ("dotdot", format!("{}/../outside/.git\n", w.display())),
            ("rel", "../../../../outside/.git\n".to_string()),
        ] {
            let dir = w.join(".git/worktrees").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("gitdir"), gitdir).unwrap();
        }
        // Through a symlink inside the workspace.
        std::os::unix::fs::symlink(&outside, w.join("link")).unwrap();
        let dir = w.join(".git/worktrees/sym");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gitdir"), format!("{}/link/.git\n", w.display())).unwrap();
        // A symlinked worktree directory.
        std::os::unix::fs::symlink(&outside, w.join(".git/worktrees/whole")).unwrap();
        prepare_host(&w).unwrap();
        let p = plan(&w).unwrap();
        assert_nothing_outside(&w, &outside, &p);
        assert!(
            !p.mounts.iter().any(|m| m.destination.ends_with("link/.git")
                || m.destination.contains("outside")
                || m.destination.contains("whole")),
            "{:?}",
            p.mounts
        );
        assert!(p.refused.len() >= 4, "{:?}", p.refused);
    }

    #[test]
    fn index_gitlink_through_a_symlink_is_not_mounted() {
        let (_d, w, outside) = hostile();
        // A gitlink at `link/sub`, where `link` is a symlink leading out:
        // `link/sub/.git` would be the outside's `.git` file.
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        std::fs::write(outside.join("sub/.git"), "gitdir: /x\n").unwrap();
        let head = Command::new("git")
            .arg("-C")
            .arg(&w)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        let head = String::from_utf8(head.stdout).unwrap();
        git(
            &w,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{},link/sub", head.trim()),
            ],
        );
        std::os::unix::fs::symlink(&outside, w.join("link")).unwrap();
        let p = plan(&w).unwrap();
        assert_nothing_outside(&w, &outside, &p);
        assert!(
            p.refused.iter().any(|r| r.contains("link/sub")),
            "{:?}",
            p.refused
        );
        // Without the symlink, the same gitlink is protected.
        std::fs::remove_file(w.join("link")).unwrap();
        std::fs::create_dir_all(w.join("link/sub")).unwrap();
        std::fs::write(w.join("link/sub/.git"), "gitdir: ../../.git/modules/sub\n").unwrap();
        let ds = dests(&plan(&w).unwrap().mounts);
        assert!(
            ds.contains(&("/workspace/link/sub/.git".into(), true)),
            "{ds:?}"
        );
    }

    #[test]
    fn planning_runs_no_git_configuration() {
        // A forged common directory whose config names an fsmonitor hook:
        // `git ls-files` over this repository runs it; planning must not.
        let (d, w, _outside) = hostile();
        let marker = d.path().join("MARKER");
        std::fs::create_dir_all(w.join(".git/c/objects")).unwrap();
        std::fs::create_dir_all(w.join(".git/c/refs")).unwrap();
        std::fs::write(
            w.join(".git/c/config"),
            format!(
                "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"touch {}; false\"\n",
                marker.display()
            ),
        )
        .unwrap();
        std::fs::write(w.join(".git/commondir"), "c\n").unwrap();
        prepare_host(&w).unwrap();
        let p = plan(&w).unwrap();
        assert!(!marker.exists(), "planning ran the forged fsmonitor");
        // The forged commondir is protected from further change.
        assert!(p
            .mounts
            .iter()
            .any(|m| m.destination == "/workspace/.git/commondir"));
    }

    #[test]
    fn hooks_path_in_the_workspace_is_read_only() {
        let (_d, w, outside) = hostile();
        git(&w, &["config", "core.hooksPath", ".githooks"]);
        let ds = dests(&plan(&w).unwrap().mounts);
        assert!(
            ds.contains(&("/workspace/.githooks".into(), true)),
            "{ds:?}"
        );
        assert!(
            w.join(".githooks").is_dir(),
            "the missing directory is created"
        );
        let root = Root::open(&w).unwrap();
        let dir = |v: &str| hooks_path_dir(&root, Some(v.to_string()));
        assert_eq!(dir("./.husky/_/").unwrap(), Some(PathBuf::from(".husky/_")));
        assert_eq!(
            dir(&format!("{}/tools/hooks", w.display())).unwrap(),
            Some(PathBuf::from("tools/hooks"))
        );
        assert_eq!(dir(".git/hooks").unwrap(), None);
        assert_eq!(dir(&outside.display().to_string()).unwrap(), None);
        assert_eq!(dir("../elsewhere").unwrap(), None);
        assert!(dir("a/../../b").is_err());
        std::os::unix::fs::symlink(&outside, w.join("link")).unwrap();
        assert!(matches!(
            dir("link/hooks"),
            Err(GitSentryError::HooksPath { .. })
        ));
        assert!(!outside.join("hooks").exists());
        assert_eq!(dir("").unwrap(), None);
        assert_eq!(hooks_path_dir(&root, None).unwrap(), None);
    }

    /// Planning time on a given repository (a measurement, not a check):
    /// `LAZARET_PLAN_BENCH=/path/to/ws cargo test -p lazaret-coordinator
    /// --lib plan_timing -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn plan_timing() {
        let Some(w) = std::env::var_os("LAZARET_PLAN_BENCH") else {
            return;
        };
        let w = PathBuf::from(w);
        let mut times = Vec::new();
        for _ in 0..11 {
            let t = std::time::Instant::now();
            let p = plan(&w).unwrap();
            times.push(t.elapsed());
            assert!(p.mounts.len() >= 2);
        }
        times.sort();
        println!(
            "plan() median {:?} (min {:?}, max {:?})",
            times[5], times[0], times[10]
        );
    }

    #[test]
    fn hooks_path_follows_gits_order_of_files() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("system");
        let global = d.path().join("global");
        std::fs::write(&sys, "[core]\n\thooksPath = /sys/hooks\n").unwrap();
        std::fs::write(&global, "[core]\n\thooksPath = .husky/_\n").unwrap();
        let files = [sys.clone(), global.clone(), d.path().join("missing")];
        assert_eq!(hooks_path_in(&files, None), Some(".husky/_".into()));
        assert_eq!(hooks_path_in(&files[..1], None), Some("/sys/hooks".into()));
        assert_eq!(
            hooks_path_in(&files, Some(b"[core]\nhooksPath = .githooks\n")),
            Some(".githooks".into())
        );
        assert_eq!(
            hooks_path_in(&files, Some(b"[user]\nname = x\n")),
            Some(".husky/_".into())
        );
        assert_eq!(hooks_path_in(&[], None), None);
    }
}
