//! Unix socket paths that fit in `sun_path` (108 bytes) however deep the
//! Storage Root lies: the socket is named through `/proc/self/fd/N/NAME`,
//! where N is an `O_PATH` descriptor of its directory.

use rustix::fs::{Mode, OFlags};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A directory held open, and the short path of `name` inside it. The path
/// is valid while the value lives.
pub struct ShortPath {
    _dir: OwnedFd,
    pub path: PathBuf,
}

pub fn short(dir: &Path, name: &str) -> std::io::Result<ShortPath> {
    let fd = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let path = PathBuf::from(format!("/proc/self/fd/{}/{name}", fd.as_raw_fd()));
    Ok(ShortPath { _dir: fd, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_and_connects_beneath_a_long_directory() {
        let d = tempfile::tempdir().unwrap();
        let deep = d.path().join("x".repeat(60)).join("y".repeat(60));
        std::fs::create_dir_all(&deep).unwrap();
        let p = short(&deep, "s.sock").unwrap();
        let _l = std::os::unix::net::UnixListener::bind(&p.path).unwrap();
        assert!(deep.join("s.sock").exists());
        std::os::unix::net::UnixStream::connect(&short(&deep, "s.sock").unwrap().path).unwrap();
    }
}
