//! The receiving half of an input handed over as a sealed memfd: the
//! receiver checks the seals and a size bound before it reads, and, with
//! [`read_checked`], the SHA-256 digest the sender passed out of band
//! (argv or a record), before it parses. The sending half (creating and
//! sealing) is `lazaret_helpers::memfd`, which re-exports this.
//!
//! It lives in the protocol so that a confined receiver (the Escalation
//! Mailbox reader, the DNS filter) is audited from its own folder, this
//! crate and the confinement library.

use rustix::fs::SealFlags;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;

#[derive(Debug, thiserror::Error)]
pub enum MemfdError {
    #[error("memfd {name}: missing seals (has {has:?}, needs {needs:?})")]
    Unsealed {
        name: String,
        has: SealFlags,
        needs: SealFlags,
    },
    #[error("memfd {name}: {size} bytes exceed the limit of {limit}")]
    TooLarge { name: String, size: u64, limit: u64 },
    #[error("memfd {name}: its SHA-256 digest {got} differs from the expected {expected}; refusing it (it is not what the sender decided)")]
    DigestMismatch {
        name: String,
        got: String,
        expected: String,
    },
    #[error("memfd {name}: {source}")]
    Io {
        name: String,
        source: std::io::Error,
    },
}

/// The seals a sender adds and a receiver requires: no write, no resize,
/// no further seal.
pub const REQUIRED: SealFlags = SealFlags::SEAL
    .union(SealFlags::SHRINK)
    .union(SealFlags::GROW)
    .union(SealFlags::WRITE);

/// The error of an I/O failure on memfd `name` (for the sending half too).
pub fn io(name: &str) -> impl FnOnce(std::io::Error) -> MemfdError + '_ {
    move |source| MemfdError::Io {
        name: name.to_string(),
        source,
    }
}

/// The SHA-256 of `bytes`, lowercase hex: what [`read_checked`] expects.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// [`read_sealed`], then the SHA-256 digest compared with `expected`
/// (hex, either case) before the bytes are handed to any parser.
pub fn read_checked(
    name: &str,
    fd: impl AsFd,
    limit: u64,
    expected: &str,
) -> Result<Vec<u8>, MemfdError> {
    let bytes = read_sealed(name, fd, limit)?;
    let got = digest(&bytes);
    if !got.eq_ignore_ascii_case(expected) {
        return Err(MemfdError::DigestMismatch {
            name: name.to_string(),
            got,
            expected: expected.to_string(),
        });
    }
    Ok(bytes)
}

/// Reads a sealed memfd after checking its seals and size.
pub fn read_sealed(name: &str, fd: impl AsFd, limit: u64) -> Result<Vec<u8>, MemfdError> {
    let has = rustix::fs::fcntl_get_seals(&fd).map_err(|e| io(name)(e.into()))?;
    if !has.contains(REQUIRED) {
        return Err(MemfdError::Unsealed {
            name: name.to_string(),
            has,
            needs: REQUIRED,
        });
    }
    let size = rustix::fs::fstat(&fd)
        .map_err(|e| io(name)(e.into()))?
        .st_size as u64;
    if size > limit {
        return Err(MemfdError::TooLarge {
            name: name.to_string(),
            size,
            limit,
        });
    }
    let dup = fd.as_fd().try_clone_to_owned().map_err(io(name))?;
    let mut f = std::fs::File::from(dup);
    let mut buf = Vec::with_capacity(size as usize);
    // pread from 0: the offset is shared with whoever else holds the fd.
    f.seek(SeekFrom::Start(0)).map_err(io(name))?;
    f.take(limit).read_to_end(&mut buf).map_err(io(name))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::MemfdFlags;
    use std::io::Write;

    fn sealed(bytes: &[u8]) -> std::os::fd::OwnedFd {
        let fd = rustix::fs::memfd_create("t", MemfdFlags::ALLOW_SEALING).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes).unwrap();
        rustix::fs::fcntl_add_seals(&f, REQUIRED).unwrap();
        f.into()
    }

    #[test]
    fn a_sealed_input_is_read_and_its_digest_checked() {
        let fd = sealed(b"plan");
        assert_eq!(read_sealed("t", &fd, 16).unwrap(), b"plan");
        assert_eq!(
            read_checked("t", &fd, 16, &digest(b"plan")).unwrap(),
            b"plan"
        );
        let e = read_checked("t", &fd, 16, &digest(b"other")).unwrap_err();
        assert!(matches!(e, MemfdError::DigestMismatch { .. }), "{e}");
    }

    #[test]
    fn an_unsealed_or_oversized_input_is_refused() {
        let fd = rustix::fs::memfd_create("u", MemfdFlags::ALLOW_SEALING).unwrap();
        assert!(matches!(
            read_sealed("u", &fd, 16),
            Err(MemfdError::Unsealed { .. })
        ));
        assert!(matches!(
            read_sealed("big", sealed(&[0u8; 64]), 16),
            Err(MemfdError::TooLarge { .. })
        ));
    }
}
