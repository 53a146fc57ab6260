//! Where the config file and the Storage Root live, derived from the
//! environment (XDG base directories, falling back to `$HOME`).
//!
//! The environment is passed in as [`EnvVars`] rather than read here so
//! tests can inject values without touching process-global state.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::schema::Config;

/// The environment variables the loader looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvVars {
    pub home: Option<PathBuf>,
    pub xdg_config_home: Option<PathBuf>,
    pub xdg_data_home: Option<PathBuf>,
}

impl EnvVars {
    /// Snapshot `HOME`, `XDG_CONFIG_HOME` and `XDG_DATA_HOME`; empty values
    /// count as unset, as the XDG spec says.
    pub fn from_process() -> Self {
        let get = |name: &str| {
            std::env::var_os(name)
                .filter(|v: &OsString| !v.is_empty())
                .map(PathBuf::from)
        };
        Self {
            home: get("HOME"),
            xdg_config_home: get("XDG_CONFIG_HOME"),
            xdg_data_home: get("XDG_DATA_HOME"),
        }
    }
}

/// A directory from the environment, if it is usable as a base. Relative
/// values are ignored (the XDG spec says so): they would resolve against the
/// current directory, which may well be the workspace mounted into the
/// sandbox.
fn usable(dir: &Option<PathBuf>) -> Option<&Path> {
    dir.as_deref()
        .filter(|d| !d.as_os_str().is_empty() && d.is_absolute())
}

/// The config file to read: `explicit` (from `--config`) if given, else
/// `$XDG_CONFIG_HOME/lazaret/config.toml`, else
/// `$HOME/.config/lazaret/config.toml`; `None` when none of them is usable.
pub fn config_path(explicit: Option<&Path>, env: &EnvVars) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_path_buf());
    }
    if let Some(xdg) = usable(&env.xdg_config_home) {
        return Some(xdg.join("lazaret").join("config.toml"));
    }
    usable(&env.home).map(|home| home.join(".config").join("lazaret").join("config.toml"))
}

/// The Storage Root: `storage.data_root` if configured, else
/// `$XDG_DATA_HOME/lazaret`, else `$HOME/.local/share/lazaret`.
pub fn storage_root(config: &Config, env: &EnvVars) -> Result<PathBuf, ConfigError> {
    if let Some(root) = &config.storage.data_root {
        // Validation already guaranteed it is absolute.
        return Ok(root.clone());
    }
    if let Some(xdg) = usable(&env.xdg_data_home) {
        return Ok(xdg.join("lazaret"));
    }
    usable(&env.home)
        .map(|home| home.join(".local").join("share").join("lazaret"))
        .ok_or(ConfigError::NoStorageRoot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(home: Option<&str>, xdg_config: Option<&str>, xdg_data: Option<&str>) -> EnvVars {
        EnvVars {
            home: home.map(PathBuf::from),
            xdg_config_home: xdg_config.map(PathBuf::from),
            xdg_data_home: xdg_data.map(PathBuf::from),
        }
    }

    #[test]
    fn config_path_prefers_explicit() {
        let e = env(Some("/home/u"), Some("/xdg"), None);
        assert_eq!(
            config_path(Some(Path::new("rel/c.toml")), &e),
            Some(PathBuf::from("rel/c.toml"))
        );
    }

    #[test]
    fn config_path_uses_xdg_when_absolute() {
        let e = env(Some("/home/u"), Some("/xdg"), None);
        assert_eq!(
            config_path(None, &e),
            Some(PathBuf::from("/xdg/lazaret/config.toml"))
        );
    }

    #[test]
    fn config_path_falls_back_to_home_for_empty_or_relative_xdg() {
        for xdg in [None, Some(""), Some("relative/xdg")] {
            let e = env(Some("/home/u"), xdg, None);
            assert_eq!(
                config_path(None, &e),
                Some(PathBuf::from("/home/u/.config/lazaret/config.toml")),
                "XDG_CONFIG_HOME={xdg:?}"
            );
        }
    }

    #[test]
    fn config_path_none_without_usable_home() {
        assert_eq!(config_path(None, &env(None, None, None)), None);
        assert_eq!(config_path(None, &env(Some("rel"), Some(""), None)), None);
    }

    #[test]
    fn storage_root_prefers_configured_data_root() {
        let mut config = Config::builtin();
        config.storage.data_root = Some(PathBuf::from("/srv/lazaret"));
        let e = env(Some("/home/u"), None, Some("/xdgdata"));
        assert_eq!(
            storage_root(&config, &e).unwrap(),
            PathBuf::from("/srv/lazaret")
        );
    }

    #[test]
    fn storage_root_falls_back_to_xdg_then_home() {
        let config = Config::builtin();
        let e = env(Some("/home/u"), None, Some("/xdgdata"));
        assert_eq!(
            storage_root(&config, &e).unwrap(),
            PathBuf::from("/xdgdata/lazaret")
        );
        let e = env(Some("/home/u"), None, Some("relative"));
        assert_eq!(
            storage_root(&config, &e).unwrap(),
            PathBuf::from("/home/u/.local/share/lazaret")
        );
        let e = env(Some("/home/u"), None, None);
        assert_eq!(
            storage_root(&config, &e).unwrap(),
            PathBuf::from("/home/u/.local/share/lazaret")
        );
    }

    #[test]
    fn storage_root_errors_without_any_source() {
        let err = storage_root(&Config::builtin(), &env(None, None, None)).unwrap_err();
        assert!(matches!(err, ConfigError::NoStorageRoot), "{err:?}");
        assert!(err.to_string().contains("storage.data_root"), "{err}");
    }
}
