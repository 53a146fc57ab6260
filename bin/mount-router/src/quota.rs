//! The byte bound of the Ignored Workspace State (`--state-max-bytes`).
//!
//! The router is the only writer of the state directory while it runs, so
//! it keeps the state's size itself: a walk of the directory at start,
//! then every change it makes. An operation that would take the state past
//! the bound fails with `ENOSPC`, for that operation only; the mount and
//! the Domain go on, and deleting files makes room again.
//!
//! What counts: for a regular file the larger of its size and its
//! allocated blocks (a sparse file counts its full size, so `truncate`
//! cannot reserve room that later writes fill for free); for any other
//! entry (directories, symbolic links) its allocated blocks. A file with
//! several links counts once per name. Growth through `write`,
//! `truncate`/`ftruncate` and `fallocate` is checked before it happens,
//! and a new entry (`create`, `mkdir`) must leave room for one block.
//! Shrinking through the router (`unlink`, `rmdir`) is subtracted at
//! once; a shrink the count does not follow (a file truncated by
//! `O_TRUNC`, a file replaced by `rename`) leaves it too high, never too
//! low, and a fresh walk (at most once a second, and only when an
//! operation would be refused) sets it right. Two operations checked at
//! the same time may each pass and together go past the bound by at most
//! their own sizes (the kernel's FUSE writes are at most 1 MiB).

use crate::router::lock;
use fuser::Errno;
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::{AtFlags, Mode, OFlags, RawDir, Stat};
use std::collections::HashSet;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Room a new entry must leave: one block of a directory.
pub const ENTRY_BYTES: u64 = 4096;

/// The shortest time between two walks of the state directory.
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// The deepest directory level the walk descends to; deeper trees are
/// counted to that level (FUSE paths are bounded far below it).
const MAX_DEPTH: usize = 512;

pub struct Quota {
    /// `None`: no bound (nothing is counted).
    limit: Option<u64>,
    used: AtomicU64,
    last_scan: Mutex<Option<Instant>>,
    /// File handles opened in the state store.
    handles: Mutex<HashSet<u64>>,
    logged: AtomicBool,
}

/// What one entry counts against the bound.
pub fn charge(st: &Stat) -> u64 {
    let blocks = (st.st_blocks as u64).saturating_mul(512);
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile {
        blocks.max(st.st_size as u64)
    } else {
        blocks
    }
}

/// The sum of [`charge`] over everything beneath `root` (not `root`
/// itself), never following a symbolic link.
pub fn usage(root: BorrowedFd<'_>) -> u64 {
    fn walk(dir: BorrowedFd<'_>, depth: usize, total: &mut u64) {
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 32 * 1024];
        let mut rd = RawDir::new(dir, &mut buf);
        while let Some(Ok(e)) = rd.next() {
            let name = e.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            *total = total.saturating_add(charge(&st));
            let is_dir =
                rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
            if is_dir && depth < MAX_DEPTH {
                if let Ok(sub) = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    walk(sub.as_fd(), depth + 1, total);
                }
            }
        }
    }
    let mut total = 0;
    if let Ok(d) = rustix::fs::openat(
        root,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        walk(d.as_fd(), 0, &mut total);
    }
    total
}

impl Quota {
    /// A bound of `limit` bytes on the state beneath `root`, counted now.
    pub fn new(limit: Option<u64>, root: BorrowedFd<'_>) -> Quota {
        let used = if limit.is_some() { usage(root) } else { 0 };
        Quota {
            limit,
            used: AtomicU64::new(used),
            last_scan: Mutex::new(Some(Instant::now())),
            handles: Mutex::new(HashSet::new()),
            logged: AtomicBool::new(false),
        }
    }

    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// The bytes counted now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// `fh` was opened in the state store.
    pub fn opened(&self, fh: u64) {
        if self.limit.is_some() {
            lock(&self.handles).insert(fh);
        }
    }

    pub fn closed(&self, fh: u64) {
        if self.limit.is_some() {
            lock(&self.handles).remove(&fh);
        }
    }

    /// Whether `fh` was opened in the state store (and so is counted).
    pub fn counts(&self, fh: u64) -> bool {
        self.limit.is_some() && lock(&self.handles).contains(&fh)
    }

    /// Whether `more` bytes fit; near the bound, the count is first set
    /// right by a fresh walk (at most once per [`RESCAN_INTERVAL`]).
    fn room_for(&self, root: BorrowedFd<'_>, more: u64) -> Result<(), Errno> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        if self.used().saturating_add(more) <= limit {
            return Ok(());
        }
        {
            let mut last = lock(&self.last_scan);
            let due = match *last {
                None => true,
                Some(t) => t.elapsed() >= RESCAN_INTERVAL,
            };
            if due {
                self.used.store(usage(root), Ordering::Release);
                *last = Some(Instant::now());
            }
        }
        if self.used().saturating_add(more) <= limit {
            return Ok(());
        }
        if !self.logged.swap(true, Ordering::AcqRel) {
            lazaret_protocol::log_line!(
                "lazaret-mount-router: the Ignored Workspace State is at its bound of {limit} bytes: writes that grow it fail with ENOSPC (limits.ignored_state_size)"
            );
        }
        Err(Errno::ENOSPC)
    }

    /// Before the file `fd` (in the state) grows to at least `end` bytes:
    /// refuses with `ENOSPC` when that does not fit. Returns what the file
    /// counts now, for [`Quota::settle`].
    pub fn admit(&self, root: BorrowedFd<'_>, fd: BorrowedFd<'_>, end: u64) -> Result<u64, Errno> {
        if self.limit.is_none() {
            return Ok(0);
        }
        let st = rustix::fs::fstat(fd).map_err(|e| Errno::from_i32(e.raw_os_error()))?;
        let before = charge(&st);
        self.room_for(root, end.saturating_sub(before))?;
        Ok(before)
    }

    /// After the change admitted with [`Quota::admit`] (whether or not it
    /// succeeded): counts what the file counts now.
    pub fn settle(&self, fd: BorrowedFd<'_>, before: u64) {
        if self.limit.is_none() {
            return;
        }
        if let Ok(st) = rustix::fs::fstat(fd) {
            let after = charge(&st);
            if after >= before {
                self.used.fetch_add(after - before, Ordering::AcqRel);
            } else {
                self.sub(before - after);
            }
        }
    }

    /// Before a new entry in the state.
    pub fn admit_entry(&self, root: BorrowedFd<'_>) -> Result<(), Errno> {
        self.room_for(root, ENTRY_BYTES)
    }

    /// A new entry `st` in the state.
    pub fn added(&self, st: &Stat) {
        if self.limit.is_some() {
            self.used.fetch_add(charge(st), Ordering::AcqRel);
        }
    }

    /// The entry `st` (as it was before) was removed from the state: a
    /// directory, or a file that had no other name, frees what it counted.
    pub fn removed(&self, st: &Stat) {
        if self.limit.is_none() {
            return;
        }
        let dir =
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
        if dir || st.st_nlink <= 1 {
            self.sub(charge(st));
        }
    }

    fn sub(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    fn root(dir: &std::path::Path) -> rustix::fd::OwnedFd {
        rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn usage_counts_sparse_files_by_size_and_follows_no_link() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::fs::File::create(t.path().join("d/f"))
            .unwrap()
            .write_all(&[1u8; 10000])
            .unwrap();
        std::fs::File::create(t.path().join("sparse"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::File::create(outside.path().join("big"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("link")).unwrap();
        let r = root(t.path());
        let n = usage(r.as_fd());
        assert!(n >= (1 << 30) + 10000, "{n}");
        assert!(n < (1 << 30) + (1 << 20), "{n}");
    }

    #[test]
    fn growth_past_the_bound_is_refused_and_deleting_makes_room() {
        let t = tempfile::tempdir().unwrap();
        let r = root(t.path());
        let q = Quota::new(Some(1 << 20), r.as_fd());
        assert_eq!(q.used(), 0);
        let mut f = std::fs::File::create(t.path().join("a")).unwrap();
        let before = q.admit(r.as_fd(), f.as_fd(), 600 << 10).unwrap();
        f.write_all(&vec![1u8; 600 << 10]).unwrap();
        q.settle(f.as_fd(), before);
        assert!(q.used() >= 600 << 10);
        // Another 600 KiB does not fit, neither by write nor by truncate.
        assert_eq!(
            q.admit(r.as_fd(), f.as_fd(), 1200 << 10),
            Err(Errno::ENOSPC)
        );
        // Rewriting in place does.
        assert!(q.admit(r.as_fd(), f.as_fd(), 4096).is_ok());
        let st = rustix::fs::fstat(&f).unwrap();
        std::fs::remove_file(t.path().join("a")).unwrap();
        q.removed(&st);
        assert_eq!(q.used(), 0);
        assert!(q.admit(r.as_fd(), f.as_fd(), 1000 << 10).is_ok());
    }

    #[test]
    fn a_missed_shrink_is_found_by_a_fresh_walk() {
        let t = tempfile::tempdir().unwrap();
        std::fs::File::create(t.path().join("a"))
            .unwrap()
            .write_all(&vec![1u8; 1022 << 10])
            .unwrap();
        let r = root(t.path());
        let q = Quota::new(Some(1 << 20), r.as_fd());
        assert!(q.used() >= 1022 << 10);
        std::fs::remove_file(t.path().join("a")).unwrap();
        *lock(&q.last_scan) = None;
        assert!(q.admit_entry(r.as_fd()).is_ok());
        assert_eq!(q.used(), 0);
    }

    #[test]
    fn unbounded_counts_nothing() {
        let t = tempfile::tempdir().unwrap();
        let r = root(t.path());
        let q = Quota::new(None, r.as_fd());
        let f = std::fs::File::create(t.path().join("a")).unwrap();
        assert!(q.admit(r.as_fd(), f.as_fd(), u64::MAX).is_ok());
        q.opened(1);
        assert!(!q.counts(1));
    }
}
