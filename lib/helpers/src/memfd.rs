//! Inputs handed to a child as sealed memfds: the sending half (the
//! receiving half is `lazaret_protocol::memfd`, re-exported here).
//!
//! The parent writes the bytes and adds every seal, so the child can trust
//! that what it reads is exactly what the parent decided, and that nobody,
//! the parent included, can change it afterwards (nor execute it, where the
//! kernel has `F_SEAL_EXEC`). The child checks the seals and a size bound
//! before it reads, and, with [`read_checked`], the SHA-256 digest the
//! parent passed out of band (argv or a record), before it parses.

use rustix::fs::{MemfdFlags, SealFlags};
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;

use lazaret_protocol::memfd::io;
pub use lazaret_protocol::memfd::{digest, read_checked, read_sealed, MemfdError, REQUIRED};

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
