//! The changes journal: every change the sandbox makes to the host
//! workspace, recorded by the router before it makes it, so that `lazaret
//! changes` can list what the sandbox created, modified, renamed or
//! deleted whatever Git's ignore rules show.
//!
//! Enforces: each operation that changes the host store (create, mkdir,
//! symlink, link, write, truncate, fallocate, chmod/chown, rename, unlink,
//! rmdir, the index the router writes) appends one line before the
//! operation is made; if the line cannot be written, the operation fails
//! with the write's error (fail closed: no change the journal does not
//! hold). Repeated writes to one path are recorded at most once a second.
//! Changes to the Ignored Workspace State and to sandbox-private Git
//! Sentry entries never reach the host and are not recorded.
//!
//! Crashes: lines are appended with `O_APPEND` before the change, so a
//! router killed at any point leaves every change it made in the journal
//! (at worst a line for a change that did not happen); the kernel keeps
//! them across a router crash, a machine crash may lose the last lines.
//!
//! Bounds: the journal file is begun anew at a router start when it is
//! over [`ROTATE_BYTES`] (the previous one kept as `changes.1`). Past
//! [`DIR_BYTES`] while the Domain runs, a change is recorded as its
//! parent directory (`beneath`, once per directory and second), and past
//! [`MAX_BYTES`] one `beneath` line for the root says that anything may
//! have changed: coarser, never incomplete.
//!
//! Format, one line per event: `TIME_UNIX_MS TAB OP TAB PATH [TAB PATH]`,
//! paths workspace-relative in [`lazaret_protocol::display::escape`] form
//! (lossless, no tab or newline). `start` lines mark a router start.
//! Read by `lazaret changes` (`lazaret_protocol::changes`).

use crate::router::lock;
use lazaret_protocol::changes::{Op, FILE, MAX_BYTES, PREVIOUS};
use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A journal over this size at start is kept as `changes.1` and begun anew.
pub const ROTATE_BYTES: u64 = 16 << 20;
/// Past this size, changes are recorded by directory.
pub const DIR_BYTES: u64 = MAX_BYTES * 3 / 4;
/// Repeated writes to one path are recorded at most this often.
const COALESCE: Duration = Duration::from_secs(1);
/// Paths remembered for coalescing; beyond, the memory is cleared.
const MAX_RECENT: usize = 65_536;

pub struct Journal {
    file: Option<Mutex<std::fs::File>>,
    bytes: AtomicU64,
    recent: Mutex<HashMap<(Op, Vec<u8>), Instant>>,
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn parent(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[..i],
        None => b"",
    }
}

impl Journal {
    /// No journal (tests, or a router without a Domain Root directory).
    pub fn none() -> Journal {
        Journal {
            file: None,
            bytes: AtomicU64::new(0),
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// Opens the journal in `dir` (the router's directory of the Domain
    /// Root) for appending, rotating it first when large, and records
    /// the router's start.
    pub fn open(dir: BorrowedFd<'_>) -> std::io::Result<Journal> {
        let flags =
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let open = || rustix::fs::openat(dir, FILE, flags, Mode::from_raw_mode(0o600));
        let mut fd: OwnedFd = open()?;
        if rustix::fs::fstat(&fd)?.st_size as u64 > ROTATE_BYTES {
            rustix::fs::renameat_with(dir, FILE, dir, PREVIOUS, rustix::fs::RenameFlags::empty())?;
            fd = open()?;
        }
        let size = rustix::fs::fstat(&fd)?.st_size as u64;
        let j = Journal {
            file: Some(Mutex::new(std::fs::File::from(fd))),
            bytes: AtomicU64::new(size),
            recent: Mutex::new(HashMap::new()),
        };
        j.append(Op::Start, b"", None)?;
        Ok(j)
    }

    fn append(&self, op: Op, path: &[u8], to: Option<&[u8]>) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let line = lazaret_protocol::changes::line(now_ms(), op, path, to);
        let mut f = lock(file);
        // One write per line: O_APPEND keeps lines whole.
        f.write_all(line.as_bytes())?;
        self.bytes.fetch_add(line.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `(op, path)` was recorded within [`COALESCE`]; records it
    /// as seen now otherwise.
    fn seen_recently(&self, op: Op, path: &[u8]) -> bool {
        let mut r = lock(&self.recent);
        let now = Instant::now();
        let key = (op, path.to_vec());
        if r.get(&key)
            .is_some_and(|t| now.duration_since(*t) < COALESCE)
        {
            return true;
        }
        if r.len() >= MAX_RECENT {
            r.clear();
        }
        r.insert(key, now);
        false
    }

    /// Records that the sandbox is about to `op` the host entry `path`
    /// (and `to`, for a rename or link). `Err` is the errno the operation
    /// must fail with.
    pub fn note(&self, op: Op, path: &[u8], to: Option<&[u8]>) -> Result<(), fuser::Errno> {
        if self.file.is_none() {
            return Ok(());
        }
        let size = self.bytes.load(Ordering::Relaxed);
        let r = if size >= MAX_BYTES {
            if self.seen_recently(Op::Beneath, b"") {
                return Ok(());
            }
            self.append(Op::Beneath, b"", None)
        } else if size >= DIR_BYTES {
            let mut done = Ok(());
            for p in std::iter::once(path).chain(to) {
                let dir = parent(p);
                if !self.seen_recently(Op::Beneath, dir) {
                    done = done.and(self.append(Op::Beneath, dir, None));
                }
            }
            done
        } else {
            if op.coalesces() && self.seen_recently(op, path) {
                return Ok(());
            }
            self.append(op, path, to)
        };
        r.map_err(|e| fuser::Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustix::fd::AsFd;

    fn dir() -> (tempfile::TempDir, OwnedFd) {
        let d = tempfile::tempdir().unwrap();
        let fd =
            rustix::fs::open(d.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        (d, fd)
    }

    fn lines(d: &tempfile::TempDir) -> Vec<String> {
        std::fs::read_to_string(d.path().join(FILE))
            .unwrap()
            .lines()
            .map(|l| l.split_once('\t').unwrap().1.to_string())
            .collect()
    }

    #[test]
    fn records_each_change_once_a_second_with_escaped_paths() {
        let (d, fd) = dir();
        let j = Journal::open(fd.as_fd()).unwrap();
        j.note(Op::Create, b"a\tb\n", None).unwrap();
        for _ in 0..100 {
            j.note(Op::Write, b"big.bin", None).unwrap();
        }
        j.note(Op::Rename, b"x", Some(b"y")).unwrap();
        assert_eq!(
            lines(&d),
            [
                "start\t",
                "create\ta\\tb\\n",
                "write\tbig.bin",
                "rename\tx\ty"
            ]
        );
    }

    #[test]
    fn past_its_bounds_it_records_directories_then_the_root() {
        let (d, fd) = dir();
        let j = Journal::open(fd.as_fd()).unwrap();
        j.bytes.store(DIR_BYTES, Ordering::Relaxed);
        j.note(Op::Create, b"node/a", None).unwrap();
        j.note(Op::Create, b"node/b", None).unwrap();
        j.bytes.store(MAX_BYTES, Ordering::Relaxed);
        j.note(Op::Create, b"other/c", None).unwrap();
        j.note(Op::Create, b"other/d", None).unwrap();
        assert_eq!(lines(&d), ["start\t", "beneath\tnode", "beneath\t"]);
    }

    #[test]
    fn a_large_journal_is_begun_anew_at_start() {
        let (d, fd) = dir();
        std::fs::write(d.path().join(FILE), vec![b'x'; ROTATE_BYTES as usize + 1]).unwrap();
        let _j = Journal::open(fd.as_fd()).unwrap();
        assert_eq!(lines(&d), ["start\t"]);
        assert!(d.path().join(PREVIOUS).exists());
    }
}
