//! The `--json` output of the CLI's commands: one pretty-printed document
//! on standard output, with every non-ASCII character escaped
//! ([`lazaret_protocol::display::ascii_json`]).

use crate::error::CliError;

/// Prints `value` as one JSON document, or nothing when it cannot be
/// encoded.
pub fn print<T: serde::Serialize + ?Sized>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(CliError::Encode)?;
    println!("{}", lazaret_protocol::display::ascii_json(&text));
    Ok(())
}
