//! Inputs handed to a child as sealed memfds.
//!
//! The parent writes the bytes and adds every seal, so the child can trust
//! that what it reads is exactly what the parent decided, and that nobody,
//! the parent included, can change it afterwards (nor execute it, where the
//! kernel has `F_SEAL_EXEC`). The child checks the seals and a size bound
//! before it reads, and, with [`read_checked`], the SHA-256 digest the
//! parent passed out of band (argv or a record), before it parses.

use rustix::fs::{MemfdFlags, SealFlags};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};

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

const REQUIRED: SealFlags = SealFlags::SEAL
    .union(SealFlags::SHRINK)
    .union(SealFlags::GROW)
    .union(SealFlags::WRITE);

fn io(name: &str) -> impl FnOnce(std::io::Error) -> MemfdError + '_ {
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

/// Creates a memfd holding `bytes`, with every seal applied, `F_SEAL_EXEC`
/// too where the kernel has it (6.3 and later). The fd is close-on-exec;
/// pass it to a child with [`crate::fds`].
pub fn sealed(name: &str, bytes: &[u8]) -> Result<OwnedFd, MemfdError> {
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    // Not executable from birth where the kernel can say so (6.3 and
    // later); older kernels answer EINVAL to the flag.
    let fd = match rustix::fs::memfd_create(name, flags | MemfdFlags::NOEXEC_SEAL) {
        Err(rustix::io::Errno::INVAL) => rustix::fs::memfd_create(name, flags),
        other => other,
    }
    .map_err(|e| io(name)(e.into()))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(bytes).map_err(io(name))?;
    f.seek(SeekFrom::Start(0)).map_err(io(name))?;
    // Before the other seals: F_SEAL_SEAL forbids adding any later. An
    // older kernel answers EINVAL to a seal it does not know.
    match rustix::fs::fcntl_add_seals(&f, SealFlags::EXEC) {
        Ok(()) | Err(rustix::io::Errno::INVAL) => {}
        Err(e) => return Err(io(name)(e.into())),
    }
    rustix::fs::fcntl_add_seals(&f, REQUIRED).map_err(|e| io(name)(e.into()))?;
    Ok(f.into())
}

/// [`sealed`], and the digest to pass to the receiver out of band.
pub fn sealed_with_digest(name: &str, bytes: &[u8]) -> Result<(OwnedFd, String), MemfdError> {
    Ok((sealed(name, bytes)?, digest(bytes)))
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

    #[test]
    fn sealed_round_trip() {
        let fd = sealed("t", b"hello").unwrap();
        assert_eq!(read_sealed("t", &fd, 16).unwrap(), b"hello");
        // Writing is refused by the seal.
        let mut f = std::fs::File::from(fd.try_clone().unwrap());
        assert!(f.write_all(b"x").is_err());
    }

    #[test]
    fn the_digest_is_checked_before_the_bytes_are_returned() {
        let (fd, d) = sealed_with_digest("t", b"plan").unwrap();
        assert_eq!(read_checked("t", &fd, 16, &d).unwrap(), b"plan");
        assert_eq!(
            read_checked("t", &fd, 16, &d.to_ascii_uppercase()).unwrap(),
            b"plan"
        );
        let other = digest(b"other");
        let e = read_checked("t", &fd, 16, &other).unwrap_err();
        assert!(matches!(e, MemfdError::DigestMismatch { .. }), "{e}");
        assert!(e.to_string().contains(&other), "{e}");
    }

    #[test]
    fn exec_is_sealed_where_the_kernel_knows_the_seal() {
        let fd = sealed("t", b"#!/bin/sh\n").unwrap();
        let has = rustix::fs::fcntl_get_seals(&fd).unwrap();
        assert!(has.contains(REQUIRED));
        // Kernels before 6.3 refuse the seal: there is nothing to check.
        let probe = rustix::fs::memfd_create("p", MemfdFlags::ALLOW_SEALING).unwrap();
        if rustix::fs::fcntl_add_seals(&probe, SealFlags::EXEC).is_ok() {
            assert!(has.contains(SealFlags::EXEC), "{has:?}");
        }
    }

    #[test]
    fn unsealed_or_large_is_refused() {
        let fd = rustix::fs::memfd_create("u", MemfdFlags::ALLOW_SEALING).unwrap();
        assert!(matches!(
            read_sealed("u", &fd, 16),
            Err(MemfdError::Unsealed { .. })
        ));
        let fd = sealed("big", &[0u8; 64]).unwrap();
        assert!(matches!(
            read_sealed("big", &fd, 16),
            Err(MemfdError::TooLarge { .. })
        ));
    }
}
