//! The Domain's logs in its Domain Root, and their bounds.
//!
//! Every log that events the sandbox can trigger write while a Domain
//! runs is bounded for the Domain's whole life, not only at start: it is
//! rotated when the next write would take it past [`MAX_BYTES`], into
//! `NAME.1` (newest) .. `NAME.ROTATIONS` (oldest; the one before is
//! dropped), so a log and its rotations never hold more than
//! `(ROTATIONS + 1) * MAX_BYTES`. Readers (`lazaret logs`, `lazaret
//! escalations`, the end-to-end tests' lifecycle replay) read
//! [`files`], oldest first.
//!
//! - `coordinator.log`: the coordinator's timestamped events; repeated
//!   events the sandbox triggers (refused mailbox entries) are coalesced
//!   into one line per kind and interval with a count; a rotated file
//!   begins with a `lifecycle: checkpoint` line (see
//!   [`crate::lifecycle::Checkpoint`]).
//! - `helpers.log`: what the supervisor and every helper under it write,
//!   copied there by the coordinator from a pipe; consecutive repeated
//!   lines are coalesced.
//! - `escalations.log`: see [`crate::escalation::bounds`].

use std::path::{Path, PathBuf};

/// The coordinator's timestamped events (`lazaret logs`).
pub const COORDINATOR_LOG: &str = "coordinator.log";
/// What the Domain's helpers say (`lazaret logs --helpers`).
pub const HELPERS_LOG: &str = "helpers.log";

/// A log file is rotated before a write would take it past this size ...
pub const MAX_BYTES: u64 = 1 << 20;
/// ... into `NAME.1` (newest) to `NAME.ROTATIONS`.
pub const ROTATIONS: usize = 4;

/// `name` under `root` and its `rotations` rotations, oldest first:
/// `NAME.rotations` down to `NAME.1`, then `NAME` itself.
pub fn files_of(root: &Path, name: &str, rotations: usize) -> Vec<PathBuf> {
    let mut v: Vec<_> = (1..=rotations)
        .rev()
        .map(|i| rotation(&root.join(name), i))
        .collect();
    v.push(root.join(name));
    v
}

/// The files of the Domain log `name` (one of this module's) under
/// `root`, oldest first.
pub fn files(root: &Path, name: &str) -> Vec<PathBuf> {
    files_of(root, name, ROTATIONS)
}

/// The `i`-th rotation of `path` (`PATH.i`).
pub fn rotation(path: &Path, i: usize) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".{i}"));
    PathBuf::from(p)
}

/// The bytes of every file of the Domain log `name` under `root`, oldest
/// first (files that do not exist are skipped).
pub fn read_all(root: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let mut all = Vec::new();
    for p in files(root, name) {
        match std::fs::read(&p) {
            Ok(b) => all.extend_from_slice(&b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_listed_oldest_first() {
        let f = files(Path::new("/r"), COORDINATOR_LOG);
        assert_eq!(f.len(), ROTATIONS + 1);
        assert_eq!(f[0], Path::new("/r/coordinator.log.4"));
        assert_eq!(f[3], Path::new("/r/coordinator.log.1"));
        assert_eq!(f[4], Path::new("/r/coordinator.log"));
    }

    #[test]
    fn read_all_concatenates_what_exists() {
        let d = std::env::temp_dir().join(format!("lazaret-logs-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("helpers.log.2"), "a\n").unwrap();
        std::fs::write(d.join("helpers.log"), "c\n").unwrap();
        assert_eq!(read_all(&d, HELPERS_LOG).unwrap(), b"a\nc\n");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
