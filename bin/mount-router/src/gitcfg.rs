//! Finds the repository's rules files and settings before confinement:
//! `info/exclude`, `core.excludesFile` and `core.ignoreCase`, and what
//! host Git runs from the workspace (`core.hooksPath`, a hook manager's
//! files) for Git Sentry to protect.
//!
//! Enforces: the same sources Git reads, in Git's order: the system config
//! (`$GIT_CONFIG_SYSTEM`, else `/etc/gitconfig`, unless
//! `$GIT_CONFIG_NOSYSTEM`), the global config (`$GIT_CONFIG_GLOBAL`, else
//! `$XDG_CONFIG_HOME/git/config` or `~/.config/git/config`, then
//! `~/.gitconfig`), then the repository's own `config`, later ones winning,
//! with `include.path` followed. Without a `core.excludesFile`, Git's
//! default `$XDG_CONFIG_HOME/git/ignore` (or `~/.config/git/ignore`) is
//! used. `.git` may be a directory, or a `gitdir:` file (linked worktrees
//! and submodules), whose common directory holds `info/exclude` and
//! `config`.
//!
//! Not followed: conditional includes (`includeIf`), and per-worktree
//! `config.worktree`; a `core.excludesFile` set only there is missed.
//!
//! Leaves to others: reading and watching the rules files (`rules`), and
//! allowing the files found here through landlock (`confine`).

use crate::rules::Source;
use lazaret_gitconfig::linked::common_dir as common_of;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What `discover` found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GitSetup {
    /// The repository's `info/exclude`.
    pub info_exclude: Option<Source>,
    /// `core.excludesFile`, canonical when it exists.
    pub excludes_file: Option<PathBuf>,
    /// `core.ignoreCase`.
    pub ignore_case: bool,
    /// The common Git directory when it lies outside the workspace (a
    /// linked worktree's), for landlock.
    pub external_common_dir: Option<PathBuf>,
    /// Workspace-relative paths that host Git runs or that the host's hook
    /// manager reads its commands from: the effective `core.hooksPath`
    /// when it lies in the workspace, and the configuration of husky,
    /// pre-commit, lefthook or overcommit when the installed hooks run
    /// it. Each with why, for the log.
    pub hook_paths: Vec<(Vec<u8>, &'static str)>,
}

/// Files of a hook manager, found by a word its installed hooks carry
/// (and Git's own sample hooks do not).
const HOOK_MANAGERS: &[(&str, &[&str])] = &[
    ("husky", &[".husky"]),
    (
        "pre-commit.com",
        &[".pre-commit-config.yaml", ".pre-commit-hooks.yaml"],
    ),
    (
        "pre_commit",
        &[".pre-commit-config.yaml", ".pre-commit-hooks.yaml"],
    ),
    (
        "lefthook",
        &[
            "lefthook.yml",
            ".lefthook.yml",
            "lefthook-local.yml",
            ".lefthook-local.yml",
            "lefthook.yaml",
            ".lefthook.yaml",
            ".lefthook",
            "lefthook",
        ],
    ),
    ("overcommit", &[".overcommit.yml", ".git-hooks"]),
];

/// The most hook files read, and bytes of each, to find a hook manager.
const MAX_HOOK_FILES: usize = 64;
const MAX_HOOK_BYTES: u64 = 256 * 1024;

/// `path` with its symlinks resolved, or as it is when it cannot be
/// (it does not exist, or is out of reach).
fn canonical_or_as_is(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// What host Git will run from the workspace (see
/// [`GitSetup::hook_paths`]). `hooks_dir` is the host's effective hooks
/// directory.
fn hook_paths(workspace: &Path, hooks_dir: &Path) -> Vec<(Vec<u8>, &'static str)> {
    let mut out = Vec::new();
    let canon_ws = canonical_or_as_is(workspace);
    let canon_hooks = canonical_or_as_is(hooks_dir);
    if let Ok(rel) = canon_hooks.strip_prefix(&canon_ws) {
        if !rel.as_os_str().is_empty() && !rel.starts_with(".git") {
            out.push((rel.as_os_str().as_bytes().to_vec(), "core.hooksPath"));
        }
    }
    let mut words = Vec::new();
    if let Ok(rd) = std::fs::read_dir(hooks_dir) {
        for e in rd.flatten().take(MAX_HOOK_FILES) {
            let Ok(m) = e.metadata() else { continue };
            // Git installs `*.sample` hooks, which it never runs.
            if !m.is_file()
                || m.len() > MAX_HOOK_BYTES
                || e.file_name().as_bytes().ends_with(b".sample")
            {
                continue;
            }
            if let Ok(text) = std::fs::read(e.path()) {
                for (word, _) in HOOK_MANAGERS {
                    if text.windows(word.len()).any(|w| w == word.as_bytes())
                        && !words.contains(word)
                    {
                        words.push(*word);
                    }
                }
            }
        }
    }
    for (word, files) in HOOK_MANAGERS {
        if words.contains(word) {
            for f in *files {
                if !out.iter().any(|(p, _)| p == f.as_bytes()) {
                    out.push((f.as_bytes().to_vec(), *word));
                }
            }
        }
    }
    out
}

/// Errors while reading Git's configuration.
#[derive(Debug, thiserror::Error)]
pub enum GitCfgError {
    #[error("{0}; fix or remove the named file, or pass --excludes-file")]
    Config(lazaret_gitconfig::Error),
    /// `core.excludesFile` cannot be interpolated (gix's error, as text:
    /// its type lives in a crate this one does not use).
    #[error("core.excludesFile: {0}; fix or remove the named file, or pass --excludes-file")]
    ExcludesFile(String),
    #[error(transparent)]
    GitFile(lazaret_gitconfig::linked::LinkedError),
}

/// How `core.excludesFile` is chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExcludesChoice {
    /// As Git would (configuration, then the XDG default).
    FromConfig,
    /// This file.
    Path(PathBuf),
    /// None at all.
    Off,
}

/// Finds the rules sources of the repository at `workspace`, reading the
/// environment (`HOME`, `XDG_CONFIG_HOME`, `GIT_CONFIG_*`) as Git does.
pub fn discover(
    workspace: &Path,
    excludes: &ExcludesChoice,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<GitSetup, GitCfgError> {
    let mut setup = GitSetup::default();
    let common_dir = common_dir_of(&workspace.join(".git"))?;
    if let Some(common) = &common_dir {
        set_info_exclude(&mut setup, workspace, common);
    }

    let lookup = lazaret_gitconfig::Lookup { env };
    let home = lookup.home();
    let xdg = lookup.xdg_config_home();
    let config = lookup
        .load(common_dir.as_deref())
        .map_err(GitCfgError::Config)?;

    setup.ignore_case = config
        .boolean("core.ignoreCase")
        .ok()
        .flatten()
        .unwrap_or(false);

    let excludes_file = match excludes {
        ExcludesChoice::Off => None,
        ExcludesChoice::Path(p) => Some(p.clone()),
        ExcludesChoice::FromConfig => match config.path("core.excludesFile") {
            Some(p) => {
                let p = p
                    .interpolate(interpolation(home.as_deref()))
                    .map_err(|e| GitCfgError::ExcludesFile(e.to_string()))?;
                Some(if p.is_relative() {
                    workspace.join(p)
                } else {
                    p
                })
            }
            None => xdg.map(|x| x.join("git/ignore")),
        },
    };
    setup.excludes_file = excludes_file.map(|p| p.canonicalize().unwrap_or(p));

    // Hooks run from `core.hooksPath` (relative: from the working tree),
    // else from the common directory's `hooks`.
    let hooks_dir = match config.path("core.hooksPath") {
        Some(p) => p.interpolate(interpolation(home.as_deref())).ok().map(|p| {
            if p.is_relative() {
                workspace.join(p)
            } else {
                p
            }
        }),
        None => common_dir.as_ref().map(|c| c.join("hooks")),
    };
    if let Some(h) = hooks_dir {
        setup.hook_paths = hook_paths(workspace, &h);
    }
    Ok(setup)
}

/// The common Git directory of the repository whose `.git` is `dot_git`
/// (a directory, or a linked worktree's `.git` file), if it has one.
fn common_dir_of(dot_git: &Path) -> Result<Option<PathBuf>, GitCfgError> {
    Ok(match std::fs::symlink_metadata(dot_git) {
        Ok(m) if m.is_dir() => Some(common_of(dot_git)),
        Ok(m) if m.is_file() => {
            let gd =
                lazaret_gitconfig::linked::read_gitfile(dot_git).map_err(GitCfgError::GitFile)?;
            Some(common_of(&gd))
        }
        _ => None,
    })
}

/// `info/exclude` of the common directory: in the workspace (then read
/// through it), or outside it (a linked worktree's).
fn set_info_exclude(setup: &mut GitSetup, workspace: &Path, common: &Path) {
    let canon_ws = canonical_or_as_is(workspace);
    let canon_common = canonical_or_as_is(common);
    if canon_common == canon_ws.join(".git") {
        setup.info_exclude = Some(Source::Workspace(b".git/info/exclude".to_vec()));
    } else {
        setup.info_exclude = Some(Source::Absolute(canon_common.join("info/exclude")));
        if !canon_common.starts_with(&canon_ws) {
            setup.external_common_dir = Some(canon_common.clone());
        }
    }
}

/// How a configured path is interpolated: `~` is `home`.
fn interpolation(home: Option<&Path>) -> gix_config::path::interpolate::Context<'_> {
    gix_config::path::interpolate::Context {
        git_install_dir: None,
        home_dir: home,
        home_for_user: None,
    }
}
