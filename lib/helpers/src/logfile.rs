//! The Domain's logs, bounded for the Domain's whole life (see
//! `lazaret_protocol::logs`): a rotating writer ([`LogFile`]), a
//! coalescer of repeated events ([`Coalescer`]) and a splitter that cuts
//! a byte stream into bounded lines and folds repeated ones
//! ([`LineSplitter`]).
//!
//! A [`LogFile`] rotates its file before a write would take it past its
//! bound. More than one process may write one log (a coordinator waiting
//! for the Domain lock while another owns it): every write, rotation
//! included, happens under an exclusive `flock` of the directory, and a
//! writer whose file was rotated by another reopens the file by name
//! before it writes, so nothing is written into a rotated file, and a new
//! file is never seen without its first line (the header, such as
//! `coordinator.log`'s lifecycle checkpoint). A failed write costs its
//! line, never the writer: a full or read-only Storage Root must not end
//! a Domain.

use crate::sync::lock;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The largest piece written at once (and so the longest line: a longer
/// one is cut), so that a file never passes its bound (bounds are far
/// larger).
pub const MAX_WRITE: usize = 64 << 10;

/// What begins each new file: the bytes of the file just rotated in, the
/// first line(s) of its successor.
pub type Header = Box<dyn Fn(&[u8]) -> Vec<u8> + Send + Sync>;

/// A log file in a directory, rotated at a bound.
pub struct LogFile {
    dir: PathBuf,
    dir_fd: OwnedFd,
    name: String,
    max_bytes: u64,
    rotations: usize,
    header: Option<Header>,
    /// Whether this process's stderr follows the current file.
    stderr: bool,
    current: Mutex<Option<Current>>,
}

struct Current {
    file: File,
    id: (u64, u64),
}

/// Renames `path` to `path.1`, `path.1` to `path.2`, ..., dropping
/// `path.rotations`; with no rotations kept, removes `path`.
pub fn rotate(path: &Path, rotations: usize) {
    use lazaret_protocol::logs::rotation;
    for i in (1..rotations).rev() {
        let _ = std::fs::rename(rotation(path, i), rotation(path, i + 1));
    }
    if rotations == 0 {
        let _ = std::fs::remove_file(path);
    } else {
        let _ = std::fs::rename(path, rotation(path, 1));
    }
}

impl LogFile {
    /// The log `name` in `dir`, rotated before a write would take it past
    /// `max_bytes`, keeping `rotations` rotations. Opens `dir` (held, for
    /// its lock) but not the file yet.
    pub fn new(dir: &Path, name: &str, max_bytes: u64, rotations: usize) -> std::io::Result<Self> {
        let dir_fd = File::open(dir)?.into();
        Ok(LogFile {
            dir: dir.to_path_buf(),
            dir_fd,
            name: name.to_string(),
            max_bytes,
            rotations,
            header: None,
            stderr: false,
            current: Mutex::new(None),
        })
    }

    /// Each new file begins with `header(bytes of the rotated file)`.
    pub fn with_header(mut self, header: Header) -> Self {
        self.header = Some(header);
        self
    }

    /// This process's stderr (fd 2) is made the current file and follows
    /// every rotation, so that what else writes there (a panic's message)
    /// lands in the bounded log too.
    pub fn as_stderr(mut self) -> Self {
        self.stderr = true;
        self
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// Appends `bytes` (whole lines), rotating first when they would take
    /// the file past its bound. More than [`MAX_WRITE`] bytes are written
    /// in pieces cut at line ends; a single line longer than that is cut.
    pub fn append(&self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let mut n = bytes.len().min(MAX_WRITE);
            if n < bytes.len() {
                if let Some(i) = bytes[..n].iter().rposition(|&b| b == b'\n') {
                    n = i + 1;
                }
            }
            self.append_piece(&bytes[..n])?;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    fn append_piece(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut current = lock(&self.current);
        let _dir = DirLock::take(self.dir_fd.as_fd())?;
        let path = self.path();
        let id = std::fs::symlink_metadata(&path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let mut cur = match current.take() {
            Some(c) if id == Some(c.id) => c,
            // New, or rotated by another writer: by name.
            _ => self.open(&path)?,
        };
        let len = cur.file.metadata()?.len();
        if len > 0 && len + bytes.len() as u64 > self.max_bytes {
            rotate(&path, self.rotations);
            cur = self.open(&path)?;
        }
        let written = cur.file.write_all(bytes);
        *current = Some(cur);
        written
    }

    /// Opens the file at `path`, creating it if need be. An empty file
    /// begins with the header of the newest rotation, when there is one
    /// (also after a rotation that its writer did not finish, and when
    /// another process created the file).
    fn open(&self, path: &Path) -> std::io::Result<Current> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        let newest = lazaret_protocol::logs::rotation(path, 1);
        if let Some(h) = &self.header {
            if file.metadata()?.len() == 0 && newest.exists() {
                let header = h(&read_bounded(&newest, self.max_bytes + MAX_WRITE as u64));
                file.write_all(&header[..header.len().min(MAX_WRITE)])?;
            }
        }
        if self.stderr {
            rustix::stdio::dup2_stderr(&file)?;
        }
        let m = file.metadata()?;
        Ok(Current {
            file,
            id: (m.dev(), m.ino()),
        })
    }
}

/// The first `max` bytes of `path` (nothing when it cannot be read).
fn read_bounded(path: &Path, max: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Ok(f) = File::open(path) {
        let _ = f.take(max).read_to_end(&mut buf);
    }
    buf
}

/// An exclusive `flock` of a directory, released when dropped.
struct DirLock<'a>(std::os::fd::BorrowedFd<'a>);

impl<'a> DirLock<'a> {
    fn take(fd: std::os::fd::BorrowedFd<'a>) -> std::io::Result<Self> {
        rustix::fs::flock(fd, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(DirLock(fd))
    }
}

impl Drop for DirLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0, rustix::fs::FlockOperation::Unlock);
    }
}

/// Coalesces repeated events of one kind: per kind and window, the first
/// `burst` are shown one by one, the rest only counted, and the count is
/// reported once the window has passed (by [`Coalescer::admit`] for the
/// next event of the kind, or [`Coalescer::due`] on a timer). So a kind
/// costs at most `burst + 1` lines per window, whatever its rate.
pub struct Coalescer {
    window: Duration,
    burst: u32,
    kinds: Mutex<Vec<(&'static str, Window)>>,
}

struct Window {
    start: Instant,
    shown: u32,
    held: u64,
}

/// Events of `kind` counted but not shown, in the window begun at `since`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub kind: &'static str,
    pub count: u64,
    pub since: Instant,
}

impl Coalescer {
    pub const fn new(window: Duration, burst: u32) -> Self {
        Coalescer {
            window,
            burst,
            kinds: Mutex::new(Vec::new()),
        }
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// One event of `kind` at `now`: whether to show it, and the count of
    /// an earlier window of the kind to report before it.
    pub fn admit(&self, kind: &'static str, now: Instant) -> (bool, Option<Held>) {
        let mut kinds = lock(&self.kinds);
        let i = match kinds.iter().position(|(k, _)| *k == kind) {
            Some(i) => i,
            None => {
                kinds.push((
                    kind,
                    Window {
                        start: now,
                        shown: 0,
                        held: 0,
                    },
                ));
                kinds.len() - 1
            }
        };
        let w = &mut kinds[i].1;
        let mut report = None;
        if now.saturating_duration_since(w.start) >= self.window {
            report = take(kind, w);
            *w = Window {
                start: now,
                shown: 0,
                held: 0,
            };
        }
        if w.shown < self.burst {
            w.shown += 1;
            (true, report)
        } else {
            w.held += 1;
            (false, report)
        }
    }

    /// The counts of windows that have passed by `now`.
    pub fn due(&self, now: Instant) -> Vec<Held> {
        let mut kinds = lock(&self.kinds);
        kinds
            .iter_mut()
            .filter(|(_, w)| now.saturating_duration_since(w.start) >= self.window)
            .filter_map(|(k, w)| take(k, w))
            .collect()
    }

    /// Every count still held (the process ends).
    pub fn drain(&self) -> Vec<Held> {
        let mut kinds = lock(&self.kinds);
        kinds.iter_mut().filter_map(|(k, w)| take(k, w)).collect()
    }
}

fn take(kind: &'static str, w: &mut Window) -> Option<Held> {
    let count = std::mem::take(&mut w.held);
    (count > 0).then_some(Held {
        kind,
        count,
        since: w.start,
    })
}

/// Cuts a byte stream (what helpers write to a pipe) into lines of at
/// most [`MAX_LINE`] bytes, and folds a line repeated right after itself
/// into one line that says how many times it was repeated.
#[derive(Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
    last: Option<Vec<u8>>,
    repeats: u64,
}

/// The longest line a [`LineSplitter`] passes on; longer ones are cut.
pub const MAX_LINE: usize = 16 << 10;
/// A run of repeats is reported at least every this many.
const MAX_REPEATS: u64 = 1 << 20;

impl LineSplitter {
    /// Takes `bytes`; returns the whole lines to write.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in bytes.split_inclusive(|&b| b == b'\n') {
            let room = MAX_LINE - self.partial.len();
            let (take, rest) = chunk.split_at(chunk.len().min(room));
            self.partial.extend_from_slice(take);
            if self.partial.ends_with(b"\n") || self.partial.len() == MAX_LINE {
                if !self.partial.ends_with(b"\n") {
                    self.partial.push(b'\n');
                }
                let line = std::mem::take(&mut self.partial);
                self.line(line, &mut out);
            }
            if !rest.is_empty() {
                out.extend(self.feed(rest));
            }
        }
        out
    }

    fn line(&mut self, line: Vec<u8>, out: &mut Vec<u8>) {
        if self.last.as_ref() == Some(&line) {
            self.repeats += 1;
            if self.repeats >= MAX_REPEATS {
                self.report(out);
            }
            return;
        }
        self.report(out);
        out.extend_from_slice(&line);
        self.last = Some(line);
    }

    fn report(&mut self, out: &mut Vec<u8>) {
        let n = std::mem::take(&mut self.repeats);
        if n > 0 {
            let s = if n == 1 { "" } else { "s" };
            let _ = writeln!(out, "(the line above was repeated {n} more time{s})");
        }
    }

    /// A pause in the stream: the count of repeats so far.
    pub fn pause(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.report(&mut out);
        out
    }

    /// The end of the stream: the count and the unfinished line.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = self.pause();
        if !self.partial.is_empty() {
            out.append(&mut self.partial);
            out.push(b'\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(dir: &Path, name: &str) -> Vec<u64> {
        lazaret_protocol::logs::files_of(dir, name, 3)
            .iter()
            .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .collect()
    }

    #[test]
    fn a_log_is_rotated_before_it_passes_its_bound_and_keeps_every_line_in_order() {
        let d = tempfile::tempdir().unwrap();
        let log = LogFile::new(d.path(), "x.log", 1000, 3).unwrap();
        for i in 0..100 {
            log.append(format!("line {i:03} ........\n").as_bytes())
                .unwrap();
        }
        // 100 lines of 21 bytes: 2100 bytes in files of at most 1000.
        let s = sizes(d.path(), "x.log");
        assert!(s.iter().all(|&n| n <= 1000), "{s:?}");
        let all = lazaret_protocol::logs::files_of(d.path(), "x.log", 3)
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect::<String>();
        let want: String = (0..100)
            .map(|i| format!("line {i:03} ........\n"))
            .collect();
        assert_eq!(all, want);
        // More than the rotations hold: the oldest go, the bound stays.
        for i in 0..1000 {
            log.append(format!("more {i:04} .......\n").as_bytes())
                .unwrap();
        }
        let s = sizes(d.path(), "x.log");
        assert!(
            s.iter().all(|&n| n <= 1000) && s.iter().sum::<u64>() >= 3000,
            "{s:?}"
        );
        assert!(!d.path().join("x.log.4").exists());
    }

    #[test]
    fn each_new_file_begins_with_the_header_of_the_one_rotated() {
        let d = tempfile::tempdir().unwrap();
        let header: Header = Box::new(|old| {
            let n = old.iter().filter(|&&b| b == b'\n').count();
            format!("header after {n} lines\n").into_bytes()
        });
        let log = LogFile::new(d.path(), "x.log", 100, 2)
            .unwrap()
            .with_header(header);
        for i in 0..40 {
            log.append(format!("line {i:02}\n").as_bytes()).unwrap();
        }
        let first = std::fs::read_to_string(d.path().join("x.log")).unwrap();
        assert!(first.starts_with("header after "), "{first}");
        let rotated = std::fs::read_to_string(d.path().join("x.log.1")).unwrap();
        assert!(rotated.starts_with("header after "), "{rotated}");
    }

    #[test]
    fn a_rotation_a_writer_did_not_finish_is_finished_by_the_next() {
        let d = tempfile::tempdir().unwrap();
        let header: Header = Box::new(|old| format!("after {} bytes\n", old.len()).into_bytes());
        std::fs::write(d.path().join("x.log.1"), "0123456789\n").unwrap();
        let log = LogFile::new(d.path(), "x.log", 100, 2)
            .unwrap()
            .with_header(header);
        log.append(b"next\n").unwrap();
        let t = std::fs::read_to_string(d.path().join("x.log")).unwrap();
        assert_eq!(t, "after 11 bytes\nnext\n");
    }

    #[test]
    fn two_writers_of_one_log_never_write_into_a_rotated_file() {
        let d = tempfile::tempdir().unwrap();
        let a = LogFile::new(d.path(), "x.log", 500, 50).unwrap();
        let b = LogFile::new(d.path(), "x.log", 500, 50).unwrap();
        std::thread::scope(|s| {
            for (w, log) in [("a", &a), ("b", &b)] {
                s.spawn(move || {
                    for i in 0..300 {
                        log.append(format!("{w} {i:04}\n").as_bytes()).unwrap();
                    }
                });
            }
        });
        let files = lazaret_protocol::logs::files_of(d.path(), "x.log", 50);
        let mut seen = std::collections::BTreeMap::new();
        for p in &files {
            let t = std::fs::read_to_string(p).unwrap_or_default();
            assert!(t.len() <= 500, "{} holds {}", p.display(), t.len());
            for l in t.lines() {
                let (w, i) = l.split_once(' ').unwrap();
                let i: u32 = i.parse().unwrap();
                // Each writer's lines in order across the files.
                let prev = seen.insert(w.to_string(), i);
                assert!(prev.is_none_or(|p| p + 1 == i), "{l} after {prev:?}");
            }
        }
        assert_eq!(seen.get("a"), Some(&299));
        assert_eq!(seen.get("b"), Some(&299));
    }

    #[test]
    fn a_long_write_is_written_in_pieces_at_line_ends() {
        let d = tempfile::tempdir().unwrap();
        let log = LogFile::new(d.path(), "x.log", 100 << 10, 3).unwrap();
        let lines: String = (0..20_000).map(|i| format!("{i:09}\n")).collect();
        log.append(lines.as_bytes()).unwrap();
        let s = sizes(d.path(), "x.log");
        assert!(s.iter().all(|&n| n <= 100 << 10), "{s:?}");
        let all: String = lazaret_protocol::logs::files_of(d.path(), "x.log", 3)
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect();
        assert_eq!(all, lines);
    }

    #[test]
    fn repeated_events_cost_a_few_lines_per_window() {
        let c = Coalescer::new(Duration::from_secs(10), 3);
        let t0 = Instant::now();
        let mut shown = 0;
        for i in 0..1000 {
            let (show, report) = c.admit("refused", t0 + Duration::from_millis(i));
            assert_eq!(report, None);
            shown += show as u32;
        }
        assert_eq!(shown, 3);
        assert_eq!(c.due(t0 + Duration::from_secs(5)), vec![]);
        let due = c.due(t0 + Duration::from_secs(10));
        assert_eq!(
            due,
            vec![Held {
                kind: "refused",
                count: 997,
                since: t0
            }]
        );
        assert_eq!(c.due(t0 + Duration::from_secs(11)), vec![]);
        // The next window: shown again, and the count of the last one
        // reported first when no timer did.
        let t1 = t0 + Duration::from_secs(20);
        for i in 0..5 {
            c.admit("refused", t1 + Duration::from_millis(i));
        }
        let (show, report) = c.admit("refused", t1 + Duration::from_secs(10));
        assert!(show);
        assert_eq!(report.map(|h| h.count), Some(2));
        // Kinds are apart.
        assert!(c.admit("other", t1).0);
        assert_eq!(c.drain(), vec![]);
    }

    #[test]
    fn a_stream_becomes_bounded_lines_with_repeats_folded() {
        let mut s = LineSplitter::default();
        let mut out = s.feed(b"one\ntwo\ntwo\ntwo\nthr");
        out.extend(s.feed(b"ee\ntwo\n"));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "one\ntwo\n(the line above was repeated 2 more times)\nthree\ntwo\n"
        );
        let mut out = s.feed(b"two\ntwo\n");
        out.extend(s.pause());
        out.extend(s.feed(b"two\n"));
        out.extend(s.finish());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "(the line above was repeated 2 more times)\n(the line above was repeated 1 more time)\n"
        );
        let long = vec![b'y'; MAX_LINE * 2 + 5];
        let mut out = s.feed(&long);
        out.extend(s.finish());
        let lines: Vec<&[u8]> = out.split_inclusive(|&b| b == b'\n').collect();
        assert_eq!(lines.len(), 3, "a repeat of the cut piece is folded");
        assert_eq!(lines[0].len(), MAX_LINE + 1);
        assert!(lines[1].starts_with(b"(the line above was repeated 1 more time)"));
        assert_eq!(lines[2], b"yyyyy\n");
        let mut s = LineSplitter::default();
        assert_eq!(s.feed(b"no newline"), b"");
        assert_eq!(s.finish(), b"no newline\n");
    }
}
