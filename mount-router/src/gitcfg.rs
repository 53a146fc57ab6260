//! Finds the repository's rules files and settings before confinement:
//! `info/exclude`, `core.excludesFile` and `core.ignoreCase`.
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
}

/// Errors while reading Git's configuration.
#[derive(Debug, thiserror::Error)]
pub enum GitCfgError {
    #[error("cannot read the git configuration: {0}; fix or remove the named file, or pass --excludes-file")]
    Config(String),
    #[error("{path} is not a valid gitdir file: {reason}; repair the worktree link (`git worktree repair`)")]
    GitFile { path: PathBuf, reason: String },
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
    let dot_git = workspace.join(".git");
    let (git_dir, common_dir) = match std::fs::symlink_metadata(&dot_git) {
        Ok(m) if m.is_dir() => {
            let common = common_of(&dot_git);
            (Some(dot_git.clone()), Some(common))
        }
        Ok(m) if m.is_file() => {
            let text = std::fs::read(&dot_git).map_err(|e| GitCfgError::GitFile {
                path: dot_git.clone(),
                reason: e.to_string(),
            })?;
            let text = text.strip_suffix(b"\n").unwrap_or(&text);
            let rel = text
                .strip_prefix(b"gitdir: ")
                .ok_or_else(|| GitCfgError::GitFile {
                    path: dot_git.clone(),
                    reason: "it does not start with `gitdir: `".into(),
                })?;
            let gd = workspace.join(std::ffi::OsStr::from_bytes(rel));
            let common = common_of(&gd);
            (Some(gd), Some(common))
        }
        _ => (None, None),
    };
    let _ = git_dir;
    if let Some(common) = &common_dir {
        let canon_ws = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let canon_common = common.canonicalize().unwrap_or_else(|_| common.clone());
        if canon_common == canon_ws.join(".git") {
            setup.info_exclude = Some(Source::Workspace(b".git/info/exclude".to_vec()));
        } else {
            setup.info_exclude = Some(Source::Absolute(canon_common.join("info/exclude")));
            if !canon_common.starts_with(&canon_ws) {
                setup.external_common_dir = Some(canon_common.clone());
            }
        }
    }

    let home = env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let xdg = env("XDG_CONFIG_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));

    let mut files: Vec<(PathBuf, gix_config::Source)> = Vec::new();
    if env("GIT_CONFIG_NOSYSTEM").is_none() {
        let sys = env("GIT_CONFIG_SYSTEM")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/etc/gitconfig"));
        files.push((sys, gix_config::Source::System));
    }
    if let Some(g) = env("GIT_CONFIG_GLOBAL") {
        files.push((PathBuf::from(g), gix_config::Source::User));
    } else {
        if let Some(x) = &xdg {
            files.push((x.join("git/config"), gix_config::Source::Git));
        }
        if let Some(h) = &home {
            files.push((h.join(".gitconfig"), gix_config::Source::User));
        }
    }
    if let Some(common) = &common_dir {
        files.push((common.join("config"), gix_config::Source::Local));
    }
    let metas = files
        .into_iter()
        .filter(|(p, _)| p.is_file())
        .map(|(p, s)| gix_config::file::Metadata {
            path: Some(p),
            source: s,
            level: 0,
            trust: gix_sec::Trust::Full,
        });
    let options = gix_config::file::init::Options {
        includes: gix_config::file::includes::Options::follow_without_conditional(home.as_deref()),
        ..Default::default()
    };
    let config = gix_config::File::from_paths_metadata(metas, options)
        .map_err(|e| GitCfgError::Config(e.to_string()))?
        .unwrap_or_default();

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
                let ctx = gix_config::path::interpolate::Context {
                    git_install_dir: None,
                    home_dir: home.as_deref(),
                    home_for_user: None,
                };
                let p = p
                    .interpolate(ctx)
                    .map_err(|e| GitCfgError::Config(format!("core.excludesFile: {e}")))?;
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
    Ok(setup)
}

/// The common directory of the Git directory `gd` (`commondir` file, else
/// `gd` itself).
fn common_of(gd: &Path) -> PathBuf {
    match std::fs::read(gd.join("commondir")) {
        Ok(t) => {
            let t = t.strip_suffix(b"\n").unwrap_or(&t);
            gd.join(std::ffi::OsStr::from_bytes(t))
        }
        Err(_) => gd.to_path_buf(),
    }
}
