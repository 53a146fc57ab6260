//! The host's Git configuration, found where host Git finds it and parsed
//! with `gix-config`: Lazaret never runs `git` to learn a setting, so
//! nothing a configuration file names (an fsmonitor, an alias, a pager) is
//! ever executed by it.
//!
//! Sources, in Git's order (later ones win): the system config
//! (`$GIT_CONFIG_SYSTEM`, else `/etc/gitconfig`, unless
//! `$GIT_CONFIG_NOSYSTEM`), the global config (`$GIT_CONFIG_GLOBAL`, else
//! `$XDG_CONFIG_HOME/git/config` or `~/.config/git/config`, then
//! `~/.gitconfig`), then a repository's own `config` when one is given.
//! `include.path` is followed; conditional includes (`includeIf`) are not,
//! so a setting only they make is not seen (callers say what that means
//! for them).

pub mod linked;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use gix_config::File;

#[derive(Debug, thiserror::Error)]
#[error("cannot read the git configuration: {0}")]
pub struct Error(String);

/// Where to look: the environment variables Git reads (`HOME`,
/// `XDG_CONFIG_HOME`, `GIT_CONFIG_*`), through `env` so tests and callers
/// with a scrubbed environment can choose them.
pub struct Lookup<'a> {
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
}

impl Lookup<'_> {
    fn var(&self, k: &str) -> Option<OsString> {
        (self.env)(k).filter(|v| !v.is_empty())
    }

    /// The user's home directory, as Git takes it (`$HOME`).
    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    /// `$XDG_CONFIG_HOME`, else `~/.config`.
    pub fn xdg_config_home(&self) -> Option<PathBuf> {
        self.var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| self.home().map(|h| h.join(".config")))
    }

    /// The system and global files, in Git's order, whether they exist
    /// or not.
    pub fn host_files(&self) -> Vec<(PathBuf, gix_config::Source)> {
        let mut files = Vec::new();
        if self.var("GIT_CONFIG_NOSYSTEM").is_none() {
            let sys = self
                .var("GIT_CONFIG_SYSTEM")
                .map_or_else(|| PathBuf::from("/etc/gitconfig"), PathBuf::from);
            files.push((sys, gix_config::Source::System));
        }
        if let Some(g) = self.var("GIT_CONFIG_GLOBAL") {
            files.push((PathBuf::from(g), gix_config::Source::User));
        } else {
            if let Some(x) = self.xdg_config_home() {
                files.push((x.join("git/config"), gix_config::Source::Git));
            }
            if let Some(h) = self.home() {
                files.push((h.join(".gitconfig"), gix_config::Source::User));
            }
        }
        files
    }

    /// The system and global configuration, plus `<common_dir>/config`
    /// when a repository's common Git directory is given. Missing files
    /// are skipped; an unreadable or malformed one is an error.
    pub fn load(&self, common_dir: Option<&Path>) -> Result<File, Error> {
        let mut files = self.host_files();
        if let Some(common) = common_dir {
            files.push((common.join("config"), gix_config::Source::Local));
        }
        files.retain(|(p, _)| p.is_file());
        let named = files.clone();
        let metas = files.into_iter().map(|(p, s)| gix_config::file::Metadata {
            path: Some(p),
            source: s,
            level: 0,
            trust: gix_sec::Trust::Full,
        });
        let home = self.home();
        let options = gix_config::file::init::Options {
            includes: gix_config::file::includes::Options::follow_without_conditional(
                home.as_deref(),
            ),
            ..Default::default()
        };
        match File::from_paths_metadata(metas, options) {
            Ok(f) => Ok(f.unwrap_or_default()),
            Err(e) => Err(Error(describe(&e, &named))),
        }
    }
}

/// The error with its causes and, since gix's message does not name it,
/// the first of `files` that does not parse on its own.
fn describe(e: &dyn std::error::Error, files: &[(PathBuf, gix_config::Source)]) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    files
        .iter()
        .find(|(p, s)| File::from_path_no_includes(p.clone(), *s).is_err())
        .map_or(text.clone(), |(p, _)| format!("{}: {text}", p.display()))
}

/// The process's own environment.
pub fn process_env(k: &str) -> Option<OsString> {
    std::env::var_os(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &Path)], f: impl FnOnce(&Lookup)) {
        let m: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
            .collect();
        let env = move |k: &str| m.get(k).cloned();
        f(&Lookup { env: &env });
    }

    #[test]
    fn later_files_win_and_includes_are_followed() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("system");
        let home = d.path().join("home");
        std::fs::create_dir_all(home.join(".config/git")).unwrap();
        std::fs::write(
            &sys,
            "[safe]\n\tbareRepository = all\n[core]\nhooksPath=sys\n",
        )
        .unwrap();
        std::fs::write(
            home.join(".gitconfig"),
            "[include]\npath = more\n[Safe] BAREREPOSITORY = \"explicit\" ; why\n",
        )
        .unwrap();
        std::fs::write(home.join("more"), "[core]\n\thooksPath = inc\n").unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        std::fs::write(repo.join("config"), "[core]\nignoreCase = true\n").unwrap();
        with(&[("GIT_CONFIG_SYSTEM", &sys), ("HOME", &home)], |l| {
            let c = l.load(Some(&repo)).unwrap();
            assert_eq!(
                c.string("safe.bareRepository").unwrap().to_string(),
                "explicit"
            );
            assert_eq!(c.string("core.hooksPath").unwrap().to_string(), "inc");
            assert!(c.boolean("core.ignoreCase").unwrap().unwrap());
            // A key in a subsection is another key.
            assert!(c.string("user.hooksPath").is_none());
        });
    }

    #[test]
    fn nosystem_and_global_override_choose_the_files() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path().join("g");
        with(
            &[
                ("GIT_CONFIG_NOSYSTEM", Path::new("1")),
                ("GIT_CONFIG_GLOBAL", &g),
                ("HOME", d.path()),
            ],
            |l| {
                let files: Vec<_> = l.host_files().into_iter().map(|(p, _)| p).collect();
                assert_eq!(files, vec![g.clone()]);
            },
        );
        with(&[("HOME", d.path())], |l| {
            let files: Vec<_> = l.host_files().into_iter().map(|(p, _)| p).collect();
            assert_eq!(
                files,
                vec![
                    PathBuf::from("/etc/gitconfig"),
                    d.path().join(".config/git/config"),
                    d.path().join(".gitconfig"),
                ]
            );
        });
    }

    #[test]
    fn a_malformed_file_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path().join("broken");
        std::fs::write(&g, "[core\nx = 1\n").unwrap();
        with(
            &[
                ("GIT_CONFIG_NOSYSTEM", Path::new("1")),
                ("GIT_CONFIG_GLOBAL", &g),
            ],
            |l| {
                let e = l.load(None).unwrap_err().to_string();
                assert!(e.contains("broken"), "{e}");
            },
        );
    }
}
