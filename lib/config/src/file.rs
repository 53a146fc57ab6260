//! Reading the config file without trusting the path.
//!
//! The config decides what the sandbox may touch, so a file someone else
//! can write is as good as no sandbox. Every check is made on the open file
//! descriptor (fstat), never on the path, so nothing can be swapped between
//! the check and the read.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::error::ConfigError;

/// Largest accepted config file. Real configs are a few KiB; the limit keeps
/// a mistaken `--config /dev/zero`-like target or a huge file from eating
/// memory.
pub const MAX_CONFIG_BYTES: u64 = 1_048_576;

/// Open `path` (already canonical) and return its bytes after checking the
/// open file is a regular file of sane size, owned by `uid` or root and not
/// writable by group or others.
pub(crate) fn read_trusted(path: &Path, uid: u32) -> Result<Vec<u8>, ConfigError> {
    let file = OpenOptions::new()
        .read(true)
        // O_NOFOLLOW: the path was canonicalized once already; a symlink
        // here means it was swapped afterwards. O_NONBLOCK: opening a FIFO
        // must not hang before fstat gets to refuse it. (std adds
        // O_CLOEXEC itself.)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| ConfigError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    let meta = file.metadata().map_err(|source| ConfigError::Stat {
        path: path.to_path_buf(),
        source,
    })?;
    check_metadata(path, &meta, uid)?;
    read_limited(path, file, meta.len())
}

/// The refusals, in the order a user would want to fix them.
fn check_metadata(path: &Path, meta: &Metadata, uid: u32) -> Result<(), ConfigError> {
    let file_type = meta.file_type();
    if !file_type.is_file() {
        let kind = if file_type.is_dir() {
            "directory"
        } else if file_type.is_fifo() {
            "fifo"
        } else if file_type.is_socket() {
            "socket"
        } else if file_type.is_char_device() {
            "character device"
        } else if file_type.is_block_device() {
            "block device"
        } else {
            "special file"
        };
        return Err(ConfigError::NotRegular {
            path: path.to_path_buf(),
            kind,
        });
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    check_owner(path, meta.uid(), uid)?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(ConfigError::Writable {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Root-owned files are fine (a system-wide config installed by an admin);
/// anyone else's are not.
fn check_owner(path: &Path, owner: u32, uid: u32) -> Result<(), ConfigError> {
    if owner == uid || owner == 0 {
        Ok(())
    } else {
        Err(ConfigError::BadOwner {
            path: path.to_path_buf(),
            owner,
            uid,
        })
    }
}

/// Read at most one byte past the limit: the file may have grown since
/// fstat, and that extra byte is how we notice.
fn read_limited(path: &Path, file: File, expected: u64) -> Result<Vec<u8>, ConfigError> {
    let mut bytes = Vec::with_capacity(expected.min(MAX_CONFIG_BYTES) as usize);
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
            limit: MAX_CONFIG_BYTES,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_must_be_caller_or_root() {
        let p = Path::new("/c.toml");
        assert!(check_owner(p, 1000, 1000).is_ok());
        assert!(check_owner(p, 0, 1000).is_ok());
        let err = check_owner(p, 1001, 1000).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::BadOwner {
                    owner: 1001,
                    uid: 1000,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("owned by uid 1001"), "{err}");
    }
}
