//! Copying a file the sandbox wrote without writing its holes out.
//!
//! A State Anchor's upper may hold a file whose apparent size is far
//! beyond what it takes on disk (`truncate -s 2G`, a seek past the end),
//! and the sandbox decides both. [`copy`] copies only the file's data
//! (`SEEK_DATA` / `SEEK_HOLE`; a file system without them is read whole)
//! and, within it, leaves every all-zero block unwritten, so the copy
//! takes no more disk than the data in it, the content is exactly the
//! same, and what is charged against a bound is what the copy allocates,
//! never the apparent size.

use rustix::fs::SeekFrom;
use rustix::io::Errno;
use std::os::fd::AsFd;

/// The unit in which zeros are left as holes (a file system block).
const BLOCK: usize = 4096;
/// How much is read at a time.
const CHUNK: usize = 1 << 20;

/// Why a copy stopped; `E` is the charge's refusal.
#[derive(Debug, thiserror::Error)]
pub enum CopyError<E> {
    /// A read, seek, write or truncation failed.
    #[error("{0}")]
    Io(#[from] Errno),
    /// A write wrote nothing.
    #[error("the copy could not be written (no space?)")]
    NoProgress,
    /// The charge refused more bytes.
    #[error("{0}")]
    Refused(E),
}

/// Copies `size` bytes of `from` into `to` (empty, just created): the data
/// regions, all-zero blocks left as holes, then `to` extended to `size`.
/// `charge(n)` is called before `n` more bytes are written and may refuse
/// them. Returns the bytes written.
pub fn copy<E>(
    from: impl AsFd,
    to: impl AsFd,
    size: u64,
    charge: &mut dyn FnMut(u64) -> Result<(), E>,
) -> Result<u64, CopyError<E>> {
    let (from, to) = (from.as_fd(), to.as_fd());
    let mut written = 0;
    let mut buf = vec![0u8; CHUNK];
    for (start, end) in data_regions(from, size)? {
        let mut off = start;
        while off < end {
            let want = ((end - off) as usize).min(CHUNK);
            let n = rustix::io::pread(from, &mut buf[..want], off)?;
            if n == 0 {
                // It shrank since its size was taken: what is left is a hole.
                break;
            }
            written += write_nonzero(to, &buf[..n], off, charge)?;
            off += n as u64;
        }
    }
    rustix::fs::ftruncate(to, size)?;
    Ok(written)
}

/// The `[start, end)` ranges of `fd` that hold data, below `size`.
fn data_regions(fd: std::os::fd::BorrowedFd<'_>, size: u64) -> Result<Vec<(u64, u64)>, Errno> {
    let mut regions = Vec::new();
    let mut off = 0;
    while off < size {
        let start = match rustix::fs::seek(fd, SeekFrom::Data(off)) {
            Ok(p) => p,
            // No data past `off`.
            Err(Errno::NXIO) => break,
            // No SEEK_DATA here: all of it may be data.
            Err(Errno::INVAL | Errno::OPNOTSUPP) if off == 0 => return Ok(vec![(0, size)]),
            Err(e) => return Err(e),
        };
        let end = rustix::fs::seek(fd, SeekFrom::Hole(start))?.min(size);
        if end <= start {
            break;
        }
        regions.push((start, end));
        off = end;
    }
    Ok(regions)
}

/// Writes the blocks of `buf` (at `off` in the file) that are not all
/// zero, each run of them in one write; the bytes written.
fn write_nonzero<E>(
    to: std::os::fd::BorrowedFd<'_>,
    buf: &[u8],
    off: u64,
    charge: &mut dyn FnMut(u64) -> Result<(), E>,
) -> Result<u64, CopyError<E>> {
    let mut written = 0;
    let mut i = 0;
    while i < buf.len() {
        // Block boundaries of the file, so a hole keeps whole blocks.
        let block_end = |at: usize| {
            let in_block = ((off + at as u64) % BLOCK as u64) as usize;
            (at + BLOCK - in_block).min(buf.len())
        };
        let zero = |a: usize, b: usize| buf[a..b].iter().all(|&x| x == 0);
        let next = block_end(i);
        if zero(i, next) {
            i = next;
            continue;
        }
        let mut j = next;
        while j < buf.len() && !zero(j, block_end(j)) {
            j = block_end(j);
        }
        charge((j - i) as u64).map_err(CopyError::Refused)?;
        write_all_at(to, &buf[i..j], off + i as u64)?;
        written += (j - i) as u64;
        i = j;
    }
    Ok(written)
}

fn write_all_at<E>(
    to: std::os::fd::BorrowedFd<'_>,
    mut buf: &[u8],
    mut off: u64,
) -> Result<(), CopyError<E>> {
    while !buf.is_empty() {
        let n = rustix::io::pwrite(to, buf, off)?;
        if n == 0 {
            return Err(CopyError::NoProgress);
        }
        buf = &buf[n..];
        off += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};
    use std::os::unix::fs::{FileExt, MetadataExt};

    fn copy_of(
        src: &std::fs::File,
        limit: u64,
    ) -> (tempfile::NamedTempFile, Result<u64, CopyError<String>>) {
        let dst = tempfile::NamedTempFile::new().unwrap();
        let size = src.metadata().unwrap().len();
        let mut charged = 0;
        let r = copy(src, dst.as_file(), size, &mut |n| {
            charged += n;
            if charged > limit {
                Err(format!("more than {limit} bytes"))
            } else {
                Ok(())
            }
        });
        (dst, r)
    }

    #[test]
    fn holes_stay_holes_and_the_content_is_exact() {
        let src = tempfile::tempfile().unwrap();
        // Data at both ends of 2 GiB, a zero-filled block written in the
        // middle, and nothing else.
        src.write_all_at(b"head", 0).unwrap();
        src.write_all_at(&[0u8; 8192], 1 << 30).unwrap();
        src.write_all_at(b"tail", (2 << 30) - 4).unwrap();
        let (dst, r) = copy_of(&src, 1 << 20);
        let written = r.unwrap();
        assert_eq!(written, 2 * BLOCK as u64, "only the blocks holding data");
        let m = dst.as_file().metadata().unwrap();
        assert_eq!(m.len(), 2 << 30);
        assert!(
            m.blocks() * 512 <= 64 << 10,
            "{} bytes allocated",
            m.blocks() * 512
        );
        let mut b = [0u8; 4];
        dst.as_file().read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"head");
        dst.as_file().read_exact_at(&mut b, (2 << 30) - 4).unwrap();
        assert_eq!(&b, b"tail");
        dst.as_file().read_exact_at(&mut b, 1 << 30).unwrap();
        assert_eq!(b, [0; 4]);
    }

    #[test]
    fn a_file_of_only_a_hole_costs_nothing_and_dense_data_is_copied_whole() {
        let src = tempfile::tempfile().unwrap();
        src.set_len(2 << 30).unwrap();
        let (dst, r) = copy_of(&src, 0);
        assert_eq!(r.unwrap(), 0);
        let m = dst.as_file().metadata().unwrap();
        assert_eq!((m.len(), m.blocks()), (2 << 30, 0));

        let mut src = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3 * CHUNK + 123).map(|i| (i % 251) as u8 | 1).collect();
        src.write_all(&data).unwrap();
        src.rewind().unwrap();
        let (dst, r) = copy_of(&src, u64::MAX);
        assert_eq!(r.unwrap(), data.len() as u64);
        assert_eq!(std::fs::read(dst.path()).unwrap(), data);
    }

    #[test]
    fn the_bound_is_on_what_is_written() {
        let src = tempfile::tempfile().unwrap();
        src.set_len(1 << 40).unwrap();
        src.write_all_at(&[7u8; 3 * BLOCK], 1 << 39).unwrap();
        // A terabyte of apparent size fits a bound of three blocks ...
        let (_, r) = copy_of(&src, 3 * BLOCK as u64);
        assert_eq!(r.unwrap(), 3 * BLOCK as u64);
        // ... and its data does not fit two.
        let (_, r) = copy_of(&src, 2 * BLOCK as u64);
        assert!(r.unwrap_err().to_string().contains("more than"));
    }
}
