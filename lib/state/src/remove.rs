//! Removing a Domain tree whose files may belong to the sandbox's
//! subordinate IDs (an upper, a generation, Ignored Workspace State): the
//! developer cannot, so `lazaret-supervisor --remove-tree` does it from
//! inside the Domain's user namespace mapping, as a separate
//! single-threaded process.

use std::path::Path;
use std::process::{Command, Stdio};

/// Removes `dir` with the `lazaret-supervisor` found in `libexec`.
pub fn remove_tree(libexec: &Path, dir: &Path) -> Result<(), String> {
    let status = Command::new(libexec.join("lazaret-supervisor"))
        .arg("--remove-tree")
        .arg(dir)
        .stdin(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        other => Err(format!(
            "could not remove {} completely: {other:?}",
            dir.display()
        )),
    }
}
