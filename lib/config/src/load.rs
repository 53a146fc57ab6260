//! Locating, reading and parsing the config: the one entry point callers
//! need.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::env::{config_path, EnvVars};
use crate::error::ConfigError;
use crate::file::read_trusted;
use crate::parse::parse;
use crate::schema::Config;
use crate::spans::line_of;

/// What the fingerprint of the built-in default is computed from; bump the
/// suffix if the built-in default ever changes meaning.
pub const BUILTIN_FINGERPRINT_MARKER: &str = "builtin-default-v1";

/// A loaded configuration and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// Canonical path of the file read; `None` for the built-in default.
    pub path: Option<PathBuf>,
    pub config: Config,
    /// Hex SHA-256 of the exact file bytes (or of
    /// [`BUILTIN_FINGERPRINT_MARKER`]), so a run can record which config it
    /// was started with.
    pub fingerprint: String,
    /// The file's text (`None` for the built-in default): checks made
    /// once the workspace is known name the line of the key they refuse.
    pub text: Option<String>,
}

impl Loaded {
    /// The built-in default configuration, with no file behind it.
    pub fn builtin() -> Self {
        Self {
            path: None,
            config: Config::builtin(),
            fingerprint: sha256_hex(BUILTIN_FINGERPRINT_MARKER.as_bytes()),
            text: None,
        }
    }
}

/// Load the host configuration.
///
/// `explicit` is the `--config` path, which must exist. Without it the
/// default location from [`config_path`] is used, and a missing file there
/// means the built-in default. `uid` is the invoking user: the file must be
/// owned by them or by root.
pub fn load(explicit: Option<&Path>, env: &EnvVars, uid: u32) -> Result<Loaded, ConfigError> {
    let Some(path) = config_path(explicit, env) else {
        // No HOME or XDG_CONFIG_HOME: there is no default file to miss.
        return Ok(Loaded::builtin());
    };
    // symlink_metadata, not metadata: a dangling symlink at the default
    // location is a broken setup to report, not an absent file.
    match std::fs::symlink_metadata(&path) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return match explicit {
                Some(_) => Err(ConfigError::ExplicitNotFound { path }),
                None => Ok(Loaded::builtin()),
            };
        }
        Err(source) => return Err(ConfigError::Stat { path, source }),
    }
    // Resolve symlinks exactly once; from here on only the canonical path
    // is used, and opening it refuses symlinks.
    let canonical =
        std::fs::canonicalize(&path).map_err(|source| ConfigError::Resolve { path, source })?;
    let bytes = read_trusted(&canonical, uid)?;
    let fingerprint = sha256_hex(&bytes);
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text,
        Err(e) => {
            let valid = &bytes[..e.valid_up_to()];
            // `valid` is UTF-8 by construction, so the line count is exact.
            let line = line_of(std::str::from_utf8(valid).unwrap_or_default(), valid.len());
            return Err(ConfigError::NotUtf8 {
                path: canonical,
                line,
            });
        }
    };
    let config = parse(&canonical, text)?;
    Ok(Loaded {
        path: Some(canonical),
        config,
        fingerprint,
        text: Some(text.to_owned()),
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The Storage Root for commands that must work while the configuration
/// is broken (`lazaret ps`, `stop --all`, `doctor`): the configured one
/// when the file loads; otherwise `storage.data_root` read from the file
/// as plain TOML when that much of it parses and is absolute, else the
/// default. The load error comes back beside it, for a warning.
pub fn storage_root_despite_errors(
    explicit: Option<&Path>,
    env: &crate::EnvVars,
    uid: u32,
) -> Result<(PathBuf, Option<ConfigError>), ConfigError> {
    let err = match load(explicit, env, uid) {
        Ok(l) => return Ok((crate::storage_root(&l.config, env)?, None)),
        Err(e) => e,
    };
    let configured = config_path(explicit, env)
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| read_trusted(&p, uid).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| t.parse::<toml::Table>().ok())
        .and_then(|t| {
            t.get("storage")?
                .get("data_root")?
                .as_str()
                .map(PathBuf::from)
        })
        .filter(|p| p.is_absolute());
    let root = match configured {
        Some(p) => p,
        None => crate::storage_root(&Config::builtin(), env)?,
    };
    Ok((root, Some(err)))
}
