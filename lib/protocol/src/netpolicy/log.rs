//! The append-only, size-bounded JSON-lines logs the Network Sidecar's
//! long-lived helpers write (`dns-filter.log`, `host-addresses.log`), on a
//! descriptor the holder opened for appending: they hold no file access
//! of their own; and how the CLI reads them back.

use serde::Serialize;
use std::fs::File;
use std::io::Write;

/// One log: past `max` bytes, one last event (the caller's "log full")
/// and nothing more.
pub struct BoundedLog {
    file: File,
    written: u64,
    max: u64,
    full: bool,
}

impl BoundedLog {
    pub fn new(file: File, max: u64) -> BoundedLog {
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        BoundedLog {
            file,
            written,
            max,
            full: false,
        }
    }

    /// Appends `e` as one line, or `full()` once the bound is reached.
    pub fn write<T: Serialize>(&mut self, e: &T, full: impl FnOnce() -> T) {
        if self.full {
            return;
        }
        let Ok(mut line) = serde_json::to_string(e) else {
            return;
        };
        line.push('\n');
        if self.written + line.len() as u64 > self.max {
            self.full = true;
            line = serde_json::to_string(&full()).unwrap_or_default() + "\n";
        }
        if self.file.write_all(line.as_bytes()).is_ok() {
            self.written += line.len() as u64;
        }
    }
}

/// Milliseconds since the epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The events of a JSON-lines log, skipping lines longer than `max_line`
/// or that do not decode (a line the helper did not write whole).
pub fn parse_lines<T: serde::de::DeserializeOwned>(text: &str, max_line: usize) -> Vec<T> {
    text.lines()
        .filter(|l| l.len() <= max_line)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
