//! gVisor's memory file, watched so that a session that ends while the
//! sandbox's memory is at the profile's `limits.memory` can say so.
//!
//! The Sentry keeps every byte of the sandbox's memory in one memfd,
//! `memfd:runsc-memory`, which it grows in [`MEMORY_FILE_STEP`]s and never
//! shrinks; [`crate::limits`] bounds its length with `RLIMIT_FSIZE`. Its
//! length is therefore a high-water mark of the sandbox's memory, which the
//! supervisor reads with `fstat` when a session starts and when it ends
//! ([`MemoryBound::of_session`]).
//!
//! The file is found once, as soon as runsc reports the sandbox running
//! and before any session starts: only Lazaret's own init has run inside
//! by then, so the descriptor that carries the name is the Sentry's own.
//! The holder finds it ([`find`]): the Sentry's descriptor table belongs to
//! a user ID of the Domain's user namespace (runsc 20221219 runs the Sentry
//! as a subordinate ID), which only that namespace's root may list. The
//! holder keeps its descriptor, and the supervisor opens its own through
//! the holder's descriptor table ([`MemoryFile::open`]). Afterwards the
//! supervisor only `fstat`s what it holds: it never opens anything the
//! sandbox could have replaced, and it never reads the file's bytes.
//!
//! [`MEMORY_FILE_STEP`]: lazaret_protocol::supervisor::MEMORY_FILE_STEP
//! [`MemoryBound::of_session`]: lazaret_protocol::supervisor::MemoryBound::of_session

use std::fs::File;
use std::path::{Path, PathBuf};

/// What the Sentry's memory file is called in its descriptor table (the
/// link text of `/proc/PID/fd/N`), on every runsc release Lazaret supports.
pub const MEMORY_FILE_LINK: &str = "/memfd:runsc-memory (deleted)";

/// The most descriptors of the Sentry looked at (it holds a few dozen).
const MAX_FDS: usize = 4096;

/// Finds and opens the memory file of the Sentry `sentry`, a PID of the
/// PID namespace whose `/proc` is `proc` (run in the holder).
/// Why the Sentry's memory file is not held.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("cannot list {}: {source}", dir.display())]
    List {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("no {MEMORY_FILE_LINK} among {}", dir.display())]
    NotFound { dir: PathBuf },
    #[error("{} is not {MEMORY_FILE_LINK}", link.display())]
    NotMemoryFile { link: PathBuf },
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The opened file's `fstat`.
    #[error("{0}")]
    Metadata(std::io::Error),
    #[error("{} is not a regular file", path.display())]
    NotRegular { path: PathBuf },
}

pub fn find(proc: &Path, sentry: i32) -> Result<File, MemoryError> {
    let dir = proc.join(sentry.to_string()).join("fd");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(source) => return Err(MemoryError::List { dir, source }),
    };
    let found = entries
        .take(MAX_FDS)
        .flatten()
        .map(|e| e.path())
        .find(|p| is_memory_file(p))
        .ok_or(MemoryError::NotFound { dir })?;
    open_regular(&found)
}

/// The Sentry's memory file, held open for `fstat`.
#[derive(Debug)]
pub struct MemoryFile(File);

impl MemoryFile {
    /// Opens the memory file through `link`, a `/proc/PID/fd/N` of the
    /// holder, checked to carry the memory file's name.
    pub fn open(link: &Path) -> Result<MemoryFile, MemoryError> {
        if !is_memory_file(link) {
            return Err(MemoryError::NotMemoryFile {
                link: link.to_path_buf(),
            });
        }
        open_regular(link).map(MemoryFile)
    }

    /// The file's length now (`None`: `fstat` failed).
    pub fn size(&self) -> Option<u64> {
        self.0.metadata().ok().map(|m| m.len())
    }
}

/// `path` opened read-only, when it is a regular file (a memfd is one).
fn open_regular(path: &Path) -> Result<File, MemoryError> {
    let file = File::open(path).map_err(|source| MemoryError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let meta = file.metadata().map_err(MemoryError::Metadata)?;
    if !meta.file_type().is_file() {
        return Err(MemoryError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    Ok(file)
}

fn is_memory_file(link: &Path) -> bool {
    std::fs::read_link(link).is_ok_and(|t| t.as_os_str() == MEMORY_FILE_LINK)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/proc/PID/fd` with links named as the Sentry's are: the one
    /// to a memfd of that name is found, whatever its number.
    #[test]
    fn the_memory_file_is_found_by_its_link_text() {
        let dir = tempfile::tempdir().unwrap();
        let fd = dir.path().join("7").join("fd");
        std::fs::create_dir_all(&fd).unwrap();
        let real = dir.path().join("memory");
        std::fs::write(&real, vec![0u8; 4096]).unwrap();
        std::os::unix::fs::symlink("/dev/null", fd.join("0")).unwrap();
        // The link text is what the kernel shows; the test's link cannot
        // point at a memfd, so it is not found.
        std::os::unix::fs::symlink(&real, fd.join("12")).unwrap();
        let err = find(dir.path(), 7).unwrap_err();
        assert!(err.to_string().contains("no /memfd:runsc-memory"), "{err}");
        assert!(find(dir.path(), 8).is_err());
        assert!(MemoryFile::open(&fd.join("12")).is_err());
    }

    /// A memfd of this process, named as gVisor names its own, is found
    /// through this process's own `/proc`, opened again through the
    /// descriptor found, and its length read.
    #[test]
    fn a_memfd_of_that_name_is_opened_and_measured() {
        use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
        use std::os::fd::AsRawFd;
        let m = memfd_create("runsc-memory", MemfdFlags::CLOEXEC).unwrap();
        ftruncate(&m, 1 << 20).unwrap();
        let me = std::process::id() as i32;
        let held = find(Path::new("/proc"), me).unwrap();
        let link = format!("/proc/self/fd/{}", held.as_raw_fd());
        let file = MemoryFile::open(Path::new(&link)).unwrap();
        assert_eq!(file.size(), Some(1 << 20));
        ftruncate(&m, 2 << 20).unwrap();
        assert_eq!(file.size(), Some(2 << 20), "the length is read anew");
    }
}
