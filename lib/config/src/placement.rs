//! SR-2: the config must never lie beneath a path mounted into the sandbox.
//!
//! The config decides what the sandbox may do; if the agent could edit it,
//! the next run would obey the agent. Checked per run because the workspace
//! and the profile's volumes are only known then.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::load::Loaded;
use crate::schema::Profile;

/// Refuse when the loaded config file is equal to or beneath `workspace` or
/// any volume `host` of `profile`. Comparison is by path components on
/// canonical paths, so `/w2` is not beneath `/w` and symlinks cannot hide
/// the overlap. A built-in default config has no file and always passes.
pub fn check_not_mounted(
    loaded: &Loaded,
    profile: &Profile,
    workspace: &Path,
) -> Result<(), ConfigError> {
    let Some(config) = &loaded.path else {
        return Ok(());
    };
    let workspace = std::fs::canonicalize(workspace).map_err(|source| ConfigError::Workspace {
        path: workspace.to_path_buf(),
        source,
    })?;
    if config.starts_with(&workspace) {
        let hint = if is_default_place(config) {
            format!("run Lazaret in a project directory rather than {} (or pass --workspace DIR), or keep the config outside it and pass --config FILE", workspace.display())
        } else {
            "move it outside (for example to ~/.config/lazaret/config.toml)".into()
        };
        return Err(ConfigError::BeneathWorkspace {
            config: config.clone(),
            workspace,
            hint,
        });
    }
    for volume in &profile.volumes {
        let host = resolve_existing_prefix(&volume.host);
        if config.starts_with(&host) {
            let hint = if is_default_place(config) {
                "mount a narrower host directory that does not hold ~/.config/lazaret, or keep the config elsewhere and pass --config FILE".into()
            } else {
                "move it outside (for example to ~/.config/lazaret/config.toml) or change the volume".into()
            };
            return Err(ConfigError::BeneathVolume {
                config: config.clone(),
                host,
                sandbox: volume.sandbox.clone(),
                hint,
            });
        }
    }
    Ok(())
}

/// Whether `config` is where Lazaret looks by default
/// (`$XDG_CONFIG_HOME/lazaret/config.toml`, `~/.config/lazaret/config.toml`):
/// then "move it there" is no advice.
fn is_default_place(config: &Path) -> bool {
    config.ends_with("lazaret/config.toml")
}

/// Canonicalize the longest existing ancestor of `path` and re-append the
/// rest. A volume host that does not exist yet may still sit behind a
/// symlink (`~/link/new` with `link -> ~/.config`); resolving what exists
/// catches that. Validation already ruled out `..`, so appending is exact.
pub(crate) fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut current = path;
    loop {
        match std::fs::canonicalize(current) {
            Ok(mut resolved) => {
                resolved.extend(missing.iter().rev());
                return resolved;
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return path.to_path_buf(),
            Err(_) => match (current.parent(), current.file_name()) {
                (Some(parent), Some(name)) => {
                    missing.push(name);
                    current = parent;
                }
                _ => return path.to_path_buf(),
            },
        }
    }
}
