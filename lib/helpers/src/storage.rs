//! Why a write under the Storage Root failed, in words a developer can act
//! on: its file system is full (no bytes or no inodes left) or mounted
//! read-only.
//!
//! Two ways in: [`is_unwritable`] classifies one failed call by its errno
//! (where the error is at hand, as in image preparation), and
//! [`condition`] looks at the file system itself (`statvfs`), for a
//! failure that reached the developer as text from another process (the
//! Session Coordinator's start-up) or whose cause was cleaned up since.
//! Neither changes anything.

use std::path::{Path, PathBuf};

/// Below this many available bytes a file system counts as full: a Domain
/// start writes its Domain Store, logs and run directory, which take more.
pub const FULL_BELOW: u64 = 1 << 20;

/// What stops writes to a file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Mounted read-only (`ST_RDONLY`).
    ReadOnly,
    /// Fewer than [`FULL_BELOW`] bytes available to an unprivileged user.
    NoSpace { available: u64 },
    /// No inode left: no file or directory can be created.
    NoInodes,
}

/// The condition of the file system holding `path` (or its nearest
/// existing ancestor), if one stops writes; `None` when it is writable
/// with room, or cannot be examined.
pub fn condition(path: &Path) -> Option<Condition> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let st = rustix::fs::statvfs(existing).ok()?;
    if st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        return Some(Condition::ReadOnly);
    }
    let available = st.f_bavail.saturating_mul(st.f_frsize);
    if available < FULL_BELOW {
        return Some(Condition::NoSpace { available });
    }
    // Some file systems (btrfs) report no inode counts at all.
    if st.f_files > 0 && st.f_favail == 0 {
        return Some(Condition::NoInodes);
    }
    None
}

/// A failed call under the Storage Root that its file system's state
/// does not explain (those that it does are told apart with
/// [`is_unwritable`]): the message of the image preparation's and the
/// Storage Catalog's I/O errors.
#[derive(Debug, thiserror::Error)]
#[error("cannot {what} {}: {source}; check the permissions and free space of the storage root", path.display())]
pub struct StorageIoError {
    pub what: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Whether `e` says the file system refused a write for want of room
/// (`ENOSPC`, `EDQUOT`) or because it is read-only (`EROFS`): a state of
/// the storage, not of what was being written.
pub fn is_unwritable(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EROFS)
    )
}

/// What to do about a write that `e` refused under the Storage Root
/// `root` (named when known): a read-only file system is made writable, a
/// full one is given room. `None` when `e` is no such refusal.
pub fn advice_for(e: &std::io::Error, root: Option<&Path>) -> Option<String> {
    match e.raw_os_error() {
        Some(libc::EROFS) => Some(advice(Condition::ReadOnly, root)),
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            Some(advice(Condition::NoSpace { available: 0 }, root))
        }
        _ => None,
    }
}

/// What to do about `c` on the file system of the Storage Root `root`
/// (named when known).
pub fn advice(c: Condition, root: Option<&Path>) -> String {
    let root = match root {
        Some(r) => format!("Storage Root {}", r.display()),
        None => "Storage Root".to_string(),
    };
    match c {
        Condition::ReadOnly => format!(
            "the {root} is on a read-only file system: remount it read-write (or set storage.data_root to a writable directory), then try again"
        ),
        Condition::NoSpace { .. } | Condition::NoInodes => format!(
            "the file system of the {root} is full{}: free space there (`lazaret image gc` removes the images no Domain uses, `lazaret state prune` the Domains whose workspace is gone), then try again",
            match c {
                Condition::NoInodes => " (no inode left)".to_string(),
                Condition::NoSpace { available } if available > 0 => {
                    format!(" ({available} bytes available)")
                }
                _ => String::new(),
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_of_the_storage_are_told_apart_from_others() {
        let e = |n| std::io::Error::from_raw_os_error(n);
        assert!(is_unwritable(&e(libc::ENOSPC)));
        assert!(is_unwritable(&e(libc::EDQUOT)));
        assert!(is_unwritable(&e(libc::EROFS)));
        assert!(!is_unwritable(&e(libc::EACCES)));
        assert!(!is_unwritable(&std::io::Error::other("no errno")));
        let root = Some(Path::new("/s"));
        assert!(advice_for(&e(libc::ENOSPC), root)
            .unwrap()
            .contains("is full: free space there"));
        assert!(advice_for(&e(libc::EROFS), root)
            .unwrap()
            .contains("read-only file system"));
        assert_eq!(advice_for(&e(libc::EIO), root), None);
    }

    #[test]
    fn a_writable_directory_with_room_has_no_condition() {
        let d = tempfile::tempdir().unwrap();
        // The test machine's temporary directory has room (the tests
        // would not run otherwise); a missing child is looked up through
        // its existing ancestor.
        assert_eq!(condition(&d.path().join("not/yet")), None);
    }

    #[test]
    fn advice_names_the_root_and_what_to_do() {
        let a = advice(Condition::NoSpace { available: 512 }, Some(Path::new("/s")));
        assert!(a.contains("/s is full (512 bytes available)"), "{a}");
        let a = advice(Condition::NoInodes, None);
        assert!(
            a.contains("the file system of the Storage Root is full (no inode left)"),
            "{a}"
        );
    }
}
