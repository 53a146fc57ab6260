//! Turning config text into a validated [`Config`], with errors that point
//! at `FILE:LINE` and the key concerned.

use std::path::Path;

use crate::error::ConfigError;
use crate::schema::{Config, DEFAULT_PROFILE};
use crate::spans::{line_of, SpanIndex};
use crate::validate::validate;

/// Parse and validate `text`, read from `path` (used only in messages).
/// The built-in `default` Agent Profile is added when the file has none.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let mut config: Config = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
    if let Err((at, reason)) = validate(&config) {
        let line = SpanIndex::build(text).and_then(|index| index.line_of_path(&at));
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            key: at.to_string(),
            reason,
        });
    }
    // `Profile::default()` is the built-in default Agent Profile.
    config
        .profiles
        .entry(DEFAULT_PROFILE.to_owned())
        .or_default();
    Ok(config)
}

fn parse_error(path: &Path, text: &str, error: &toml::de::Error) -> ConfigError {
    let span = error.span();
    let line = span.as_ref().map(|s| line_of(text, s.start));
    // Syntax errors leave no document to index; the line is enough there.
    let key = span.and_then(|s| {
        SpanIndex::build(text).and_then(|index| index.path_at(s.start).map(ToString::to_string))
    });
    ConfigError::Parse {
        path: path.to_path_buf(),
        line,
        key,
        message: one_line(error.message()),
    }
}

/// Some parser messages span lines ("invalid string\nexpected ..."); fold
/// them so the error reads as one `FILE:LINE: ...` line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(": ")
}
