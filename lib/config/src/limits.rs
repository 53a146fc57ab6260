//! `[profiles.NAME.limits]`: how much of the host one Domain may use.
//!
//! Sizes are written as strings with a binary unit (`"4GiB"`, `"512MiB"`)
//! or as `"unlimited"`; they stay strings in the schema (postcard, which
//! carries the config to other processes, cannot tell an integer from a
//! string) and are checked by [`parse_size`] when the file is loaded, so a
//! malformed value is reported with its file, line and key. Which of these
//! limits the installed runsc and kernel can enforce, and how, is the
//! business of the supervisor and `lazaret doctor`, not of this crate.

use serde::{Deserialize, Serialize};

use crate::error::Invalid;

/// `memory` when the profile does not set it: enough for a build or a
/// test suite, a quarter or less of a developer laptop's RAM.
pub const DEFAULT_MEMORY: &str = "4GiB";
/// `processes` when the profile does not set it (tasks, threads included,
/// per user ID inside the sandbox).
pub const DEFAULT_PROCESSES: u64 = 4096;
/// `ignored_state_size` when the profile does not set it (`node_modules`,
/// `target/`, virtual environments).
pub const DEFAULT_IGNORED_STATE_SIZE: &str = "16GiB";
/// `anchor_size` when the profile does not set it: each State Anchor's
/// upper (what the sandbox changed under `/usr`, `/var`, ...).
pub const DEFAULT_ANCHOR_SIZE: &str = "8GiB";

/// The smallest memory bound: gVisor grows its memory file in 1 GiB steps
/// and starts with one.
pub const MIN_MEMORY: u64 = 1 << 30;
/// The smallest process bound: a shell, a build tool and its workers.
pub const MIN_PROCESSES: u64 = 32;
/// Beyond this, a process bound means nothing on any host.
pub const MAX_PROCESSES: u64 = 4_194_304;
/// The smallest storage bound.
pub const MIN_STORAGE: u64 = 1 << 20;

/// `[profiles.NAME.limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// All memory of the sandbox: its processes, its tmpfs mounts (`/tmp`,
    /// `/dev/shm`) and gVisor's page cache.
    pub memory: String,
    /// Processes and threads, per user ID inside the sandbox.
    pub processes: u64,
    /// Bytes of file data in the Domain's Ignored Workspace State.
    pub ignored_state_size: String,
    /// Bytes in each State Anchor's upper.
    pub anchor_size: String,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: DEFAULT_MEMORY.to_owned(),
            processes: DEFAULT_PROCESSES,
            ignored_state_size: DEFAULT_IGNORED_STATE_SIZE.to_owned(),
            anchor_size: DEFAULT_ANCHOR_SIZE.to_owned(),
        }
    }
}

impl Limits {
    /// `memory` in bytes; `None`: unlimited. Valid after loading.
    pub fn memory_bytes(&self) -> Option<u64> {
        parse_size(&self.memory).ok().flatten()
    }
    /// `ignored_state_size` in bytes; `None`: unlimited.
    pub fn ignored_state_bytes(&self) -> Option<u64> {
        parse_size(&self.ignored_state_size).ok().flatten()
    }
    /// `anchor_size` in bytes; `None`: unlimited.
    pub fn anchor_bytes(&self) -> Option<u64> {
        parse_size(&self.anchor_size).ok().flatten()
    }

    /// The check run when the file is loaded: which key is wrong, and why.
    pub(crate) fn check(&self) -> Result<(), (&'static str, Invalid)> {
        let sized = |key: &'static str, value: &str, min: u64| match parse_size(value) {
            Err(e) => Err((key, e)),
            Ok(Some(n)) if n < min => Err((
                key,
                Invalid::SizeTooSmall {
                    value: value.to_owned(),
                    min: format_size(min),
                },
            )),
            Ok(_) => Ok(()),
        };
        sized("memory", &self.memory, MIN_MEMORY)?;
        sized("ignored_state_size", &self.ignored_state_size, MIN_STORAGE)?;
        sized("anchor_size", &self.anchor_size, MIN_STORAGE)?;
        if !(MIN_PROCESSES..=MAX_PROCESSES).contains(&self.processes) {
            return Err((
                "processes",
                Invalid::ProcessCount {
                    value: self.processes,
                    min: MIN_PROCESSES,
                    max: MAX_PROCESSES,
                },
            ));
        }
        Ok(())
    }
}

/// `value`'s leading decimal number and the unit after it (`"4GiB"`: 4
/// and `"GiB"`); `None` without a number, or with one over `u64`.
fn number_and_unit(value: &str) -> Option<(u64, &str)> {
    let digits = value.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (number, unit) = value.split_at(digits);
    Some((number.parse().ok()?, unit))
}

/// `"4GiB"`, `"512MiB"`, `"100KiB"`, `"1TiB"`, `"123B"` (binary units,
/// also written `K`, `M`, `G`, `T`), or `"unlimited"` (`None`).
pub fn parse_size(value: &str) -> Result<Option<u64>, Invalid> {
    let bad = || Invalid::Size(value.to_owned());
    if value == "unlimited" {
        return Ok(None);
    }
    let (number, unit) = number_and_unit(value).ok_or_else(bad)?;
    let shift = match unit {
        "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        _ => return Err(bad()),
    };
    number.checked_mul(1u64 << shift).map(Some).ok_or_else(bad)
}

/// `"30s"`, `"10m"`, `"2h"`, in milliseconds; at most 7 days.
pub fn parse_duration_ms(value: &str) -> Result<u64, Invalid> {
    let bad = || Invalid::Duration(value.to_owned());
    let (number, unit) = number_and_unit(value).ok_or_else(bad)?;
    let secs = match unit {
        "s" => number,
        "m" => number.checked_mul(60).ok_or_else(bad)?,
        "h" => number.checked_mul(3600).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if secs > 7 * 24 * 3600 {
        return Err(bad());
    }
    Ok(secs * 1000)
}

/// The shortest exact spelling of `bytes` in the units [`parse_size`]
/// reads (`4GiB`, `1536MiB`, `100B`).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes & ((1u64 << shift) - 1) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4GiB"), Ok(Some(4 << 30)));
        assert_eq!(parse_size("4G"), Ok(Some(4 << 30)));
        assert_eq!(parse_size("512MiB"), Ok(Some(512 << 20)));
        assert_eq!(parse_size("100B"), Ok(Some(100)));
        assert_eq!(parse_size("1TiB"), Ok(Some(1 << 40)));
        assert_eq!(parse_size("unlimited"), Ok(None));
        for bad in [
            "",
            "GiB",
            "4 GiB",
            "4gib",
            "4GB",
            "-1GiB",
            "1.5GiB",
            "99999999999TiB",
        ] {
            assert_eq!(parse_size(bad), Err(Invalid::Size(bad.into())), "{bad}");
        }
    }

    #[test]
    fn format_round_trips() {
        for n in [100, 1 << 20, 1536 << 20, 4 << 30, 3 << 40, (1 << 30) + 1] {
            assert_eq!(parse_size(&format_size(n)), Ok(Some(n)), "{n}");
        }
        assert_eq!(format_size(4 << 30), "4GiB");
        assert_eq!(format_size(1536 << 20), "1536MiB");
    }

    #[test]
    fn defaults_are_valid_and_bounded() {
        let l = Limits::default();
        assert_eq!(l.check(), Ok(()));
        assert_eq!(l.memory_bytes(), Some(4 << 30));
        assert!(l.ignored_state_bytes().is_some() && l.anchor_bytes().is_some());
    }

    #[test]
    fn small_or_absurd_values_are_refused() {
        let l = Limits {
            memory: "512MiB".into(),
            ..Limits::default()
        };
        assert_eq!(l.check().unwrap_err().0, "memory");
        let l = Limits {
            processes: 3,
            ..Limits::default()
        };
        assert_eq!(l.check().unwrap_err().0, "processes");
        let l = Limits {
            anchor_size: "lots".into(),
            ..Limits::default()
        };
        assert_eq!(l.check().unwrap_err().0, "anchor_size");
    }
}
