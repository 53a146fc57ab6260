//! Removing a Domain tree whose files may belong to the sandbox's
//! subordinate IDs (an upper, a generation, Ignored Workspace State): the
//! developer cannot, so `lazaret-supervisor --remove-tree` does it from
//! inside the Domain's user namespace mapping, as a separate
//! single-threaded process.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Why a tree was not removed completely. The messages show what
/// `lazaret-supervisor --remove-tree` gave back as it came (`Ok(status)` or
/// `Err(error)`), as they always did.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// The helper ran and did not succeed.
    #[error("could not remove {} completely: Ok({status:?})", dir.display())]
    Failed { dir: PathBuf, status: ExitStatus },
    /// The helper could not be run.
    #[error("could not remove {} completely: Err({source:?})", dir.display())]
    Spawn {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// Removes `dir` with the `lazaret-supervisor` found in `libexec`.
pub fn remove_tree(libexec: &Path, dir: &Path) -> Result<(), RemoveError> {
    let status = Command::new(libexec.join("lazaret-supervisor"))
        .arg("--remove-tree")
        .arg(dir)
        .stdin(Stdio::null())
        .status();
    let dir = dir.to_path_buf();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(status) => Err(RemoveError::Failed { dir, status }),
        Err(source) => Err(RemoveError::Spawn { dir, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// The messages are those of the `Result` the helper gave, as before
    /// the error was a type.
    #[test]
    fn messages_show_the_helpers_outcome_as_it_was() {
        let dir = PathBuf::from("/d/run");
        let status = ExitStatus::from_raw(256);
        let old: std::io::Result<ExitStatus> = Ok(status);
        let e = RemoveError::Failed {
            dir: dir.clone(),
            status,
        };
        assert_eq!(
            e.to_string(),
            format!("could not remove /d/run completely: {old:?}")
        );
        let old: std::io::Result<ExitStatus> = Err(std::io::Error::from_raw_os_error(2));
        let e = RemoveError::Spawn {
            dir,
            source: std::io::Error::from_raw_os_error(2),
        };
        assert_eq!(
            e.to_string(),
            format!("could not remove /d/run completely: {old:?}")
        );
    }
}
